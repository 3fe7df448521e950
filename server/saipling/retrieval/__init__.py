"""Answering requests: one pydantic schema per request (`requests.py`, `request_checks.py`: unknown fields refused,
InvalidRequest naming the field; the CLI's search and get build their requests from click's checked options and never
import pydantic), hybrid search (`search.py`, `confidence.py`), context for a task (`enrich.py`), reading lines
(`reading.py`), related passages (`related.py`), symbols and names (`symbols.py`, `entities.py`), evaluation
(`evaluation.py`); the project as retrieval sees it (`project_view.py`).

May import: config/, files/, embeddings/, markdown/, storage/; and errors.py, redact.py, lazy.py, jsonrpc_salvage.py,
paths.py. It never imports pygls, lsprotocol, click, rich or mcp (tests/test_architecture.py).
"""

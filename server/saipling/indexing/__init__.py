"""Index runs: an index run (`indexer.py`) holds what both its phases work on (`context.py`), the text phase
(`text_phase.py`), chunking in worker processes (`chunk_pool.py`), the embedding phase and estimates
(`embed_phase.py`); progress, summary and ETA (`records.py`).

May import: config/, files/, embeddings/, markdown/, storage/; and errors.py, redact.py, lazy.py, jsonrpc_salvage.py,
paths.py. It never imports pygls, lsprotocol, click, rich or mcp (tests/test_architecture.py).
"""

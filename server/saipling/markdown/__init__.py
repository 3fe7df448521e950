"""Markdown to chunks: the CommonMark structure of a file cut into section-aware chunks with their line ranges
(`chunker.py`), headings and unsplittable blocks (`blocks.py`), re-parsing an edited file from its last unchanged
heading (`parse_memo.py`), the words of a text: stop words, folding and stemming shared by the chunker, the FTS5
index and queries (`terms.py`).

May import: config/, files/, embeddings/; and errors.py, redact.py, lazy.py, jsonrpc_salvage.py, paths.py. It never
imports pygls, lsprotocol, click, rich or mcp (tests/test_architecture.py).
"""

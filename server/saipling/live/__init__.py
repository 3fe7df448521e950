"""Keeping the index in step: the live index both servers share (`service.py`), the quiet-period queue
(`sync_queue.py`), file-system events (`watcher.py`), the check before a call for files changed on disk
(`freshness.py`) and the files refused for their content (`unindexable.py`).

May import: config/, files/, embeddings/, markdown/, storage/, indexing/; and errors.py, redact.py, lazy.py,
jsonrpc_salvage.py, paths.py. It never imports pygls, lsprotocol, click, rich or mcp (tests/test_architecture.py).
"""

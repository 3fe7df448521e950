"""Settings: one typed settings tree and its precedence (`settings.py`), skill TOML, roles and visibility levels.

May import: no other folder; and errors.py, redact.py, lazy.py, jsonrpc_salvage.py, paths.py. It never imports pygls,
lsprotocol, click, rich or mcp (tests/test_architecture.py).
"""

"""Which files, and their text: which files count (`scanner.py`: include/exclude globs, skip rules), reading text
(`textio.py`: encodings, binary), frontmatter and file types (`metadata.py`), `.context_settings.json` exclusions
(`context_settings.py`).

May import: config/; and errors.py, redact.py, lazy.py, jsonrpc_salvage.py, paths.py. It never imports pygls,
lsprotocol, click, rich or mcp (tests/test_architecture.py).
"""

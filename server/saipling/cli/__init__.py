"""Command line: `saipling ...` commands, exit codes, tables, progress; starts the language server and the MCP server.

May import: config/, files/, embeddings/, markdown/, storage/, indexing/, live/, retrieval/, project.py, lsp/, mcp/;
and errors.py, redact.py, lazy.py, jsonrpc_salvage.py, paths.py. As an edge it may import pygls, lsprotocol, click,
rich or mcp.
"""

"""MCP server: `saipling mcp`: tools for AI agents over stdio (official `mcp` SDK), schemas generated from the request
models.

May import: config/, files/, embeddings/, markdown/, storage/, indexing/, live/, retrieval/, project.py; and
errors.py, redact.py, lazy.py, jsonrpc_salvage.py, paths.py. As an edge it may import pygls, lsprotocol, click, rich
or mcp.
"""

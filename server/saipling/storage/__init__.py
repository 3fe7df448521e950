"""The index on disk: the SQLite index (`store.py` the public `Store`; `schema.py` tables, migrations, records, filter
SQL; `vectors.py` vectors and the embedding cache; `file_writes.py` a file's chunk writes, touching only the chunks
an edit changed), the in-memory vector matrix for exact KNN (`vector_matrix.py`), one writer per index across
processes and the holder's record of what it is doing (`lock.py`), the files under `.saipling/` opened without
following links (`index_files.py`). Only `store.py`, `lock.py` and `index_files.py` are imported from outside this
folder.

May import: config/, files/, embeddings/, markdown/; and errors.py, redact.py, lazy.py, jsonrpc_salvage.py, paths.py.
It never imports pygls, lsprotocol, click, rich or mcp (tests/test_architecture.py).
"""

from __future__ import annotations

from typing import Any


def is_server_location(location: str | None) -> bool:
    """A `postgresql://` (or `postgres://`) URL: a workspace of a database server, not a file."""
    return bool(location) and str(location).startswith(("postgresql://", "postgres://"))


def open_server_store(location: str, *, workspace: str, readonly: bool = False) -> Any:
    """The store of a database-server location (storage/postgres/, imported only here and only then).

    (A minimal factory for the `pg` branch: the `store` branch's `open_store(location, ...)` takes its place.)"""
    from .postgres import open_store

    return open_store(location, workspace=workspace, readonly=readonly)

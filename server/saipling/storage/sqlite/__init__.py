"""The SQLite backend of the storage interface (storage/base.py): one file, `.saipling/index.db`, with FTS5 for
keywords and sqlite-vec for vectors (searched through the in-memory matrix, storage/vector_matrix.py).

`store.py` `SqliteStore` (opening, migrations, reads, logs; composes the parts below), `database.py` (the shared
connection, lock and transaction), `schema.py` (tables, migrations, connect), `file_writes.py`, `keywords.py`
(FTS5: the only place a MATCH expression is written), `vectors.py`, `mentions.py`, `filters.py` (ChunkFilter to
SQL, and its cache), `errors.py` (apsw errors to saipling.errors), `lock.py` (the writer lock file),
`index_files.py` (the files under `.saipling/`, opened without following links), `opening.py` (a project's index
opened read-only when it cannot be written). Only `storage/__init__.py` (`open_store`) imports this package from
outside it.
"""

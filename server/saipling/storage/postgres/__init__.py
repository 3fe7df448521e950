"""The PostgreSQL + pgvector backend (docs/postgres.md): many projects in one database, one workspace each.
Imports psycopg only when a `postgresql://` store is opened (the `postgres` extra)."""

from __future__ import annotations

from typing import Any


def is_postgres_location(location: str | None) -> bool:
    return bool(location) and str(location).startswith(("postgresql://", "postgres://"))


def open_store(
    url: str, *, workspace: str | None = None, readonly: bool = False, create: bool = True, **_options: Any
) -> Any:
    """The store of one workspace of the database at `url` (its `workspace` parameter, else `workspace`); with
    `create=False` one the database already has (StorageError naming those it has)."""
    try:
        from .store import PostgresStore
    except ImportError as exc:  # psycopg missing
        from ...errors import StorageUnavailable

        raise StorageUnavailable(
            "a PostgreSQL store needs the `postgres` extra (from the clone: python -m pip install '.[postgres]'): "
            f"{exc}"
        ) from exc
    return PostgresStore.open(url, workspace, readonly=readonly, create=create)

"""The PostgreSQL + pgvector backend (docs/postgres.md): many projects in one database, one workspace each.
Imports psycopg only when a `postgresql://` store is opened (the `postgres` extra)."""

from __future__ import annotations

from typing import Any


def is_postgres_location(location: str | None) -> bool:
    return bool(location) and str(location).startswith(("postgresql://", "postgres://"))


def open_postgres(location: str, workspace: str | None = None) -> Any:
    """The PostgresStore of `location` (a postgresql:// URL; its `workspace` parameter, else `workspace`)."""
    try:
        from .store import PostgresStore
    except ImportError as exc:  # psycopg missing
        from ...errors import SaiplingError

        raise SaiplingError(
            f"a PostgreSQL store needs the `postgres` extra (pip install 'saipling-search[postgres]'): {exc}"
        ) from exc
    return PostgresStore.open(location, workspace)

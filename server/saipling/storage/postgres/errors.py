"""psycopg's exceptions as saipling.errors (storage/base.py: a backend never lets its driver's errors out).

`MappedConnection` wraps the store's connection: `execute`, `transaction` and cursors' `execute`/`executemany`
raise StorageError subclasses, with psycopg's exception as `__cause__`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import errors as pg

from ...errors import IndexCorrupted, StorageBusy, StorageError, StorageFull, StorageReadOnly, StorageUnavailable


def mapped(exc: psycopg.Error, what: str = "PostgreSQL") -> StorageError:
    """The saipling error for a psycopg error (to raise `from exc`)."""
    message = f"{what}: {str(exc).strip() or type(exc).__name__}"
    if isinstance(exc, pg.DiskFull):  # 53100 (53200 out_of_memory is not this)
        return StorageFull(message)
    if isinstance(exc, pg.LockNotAvailable | pg.DeadlockDetected | pg.QueryCanceled):
        return StorageBusy(message)
    if isinstance(exc, pg.ReadOnlySqlTransaction | pg.InsufficientPrivilege):
        return StorageReadOnly(message)
    if isinstance(exc, pg.DataCorrupted | pg.IndexCorrupted):
        return IndexCorrupted(message)
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        return StorageUnavailable(message)
    return StorageError(message)


class _MappedCursor:
    def __init__(self, cursor: psycopg.Cursor) -> None:
        self._cursor = cursor

    def __enter__(self) -> _MappedCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self._cursor.close()

    def execute(self, sql: Any, params: Any = None) -> _MappedCursor:
        try:
            self._cursor.execute(sql, params)
        except psycopg.Error as exc:
            raise mapped(exc) from exc
        return self

    def executemany(self, sql: Any, params: Any) -> None:
        try:
            self._cursor.executemany(sql, params)
        except psycopg.Error as exc:
            raise mapped(exc) from exc

    def fetchall(self) -> list:
        return self._cursor.fetchall()

    def fetchone(self) -> Any:
        return self._cursor.fetchone()


class MappedConnection:
    """The store's psycopg connection, its errors mapped."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.raw = conn

    def execute(self, sql: Any, params: Any = None) -> psycopg.Cursor:
        try:
            return self.raw.execute(sql, params)
        except psycopg.Error as exc:
            raise mapped(exc) from exc

    def cursor(self, **kwargs: Any) -> _MappedCursor:
        if self.raw.closed:
            raise StorageUnavailable("PostgreSQL: the store is closed")
        return _MappedCursor(self.raw.cursor(**kwargs))

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        try:
            with self.raw.transaction():
                yield
        except psycopg.Error as exc:
            raise mapped(exc) from exc

    def close(self) -> None:
        self.raw.close()

"""psycopg's exceptions as saipling.errors (storage/base.py: a backend never lets its driver's errors out).

`MappedConnection` wraps the store's connection: `execute`, `transaction` and cursors' `execute`/`executemany`
raise StorageError subclasses, with psycopg's exception as `__cause__`."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
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
    """The store's psycopg connection, its errors mapped. A connection the server dropped (a restart, a failover,
    an idle timeout) is opened again by `reconnect` before the next statement outside a transaction, and a
    statement outside a transaction that failed because of it is run once more on the new one: a long-running
    server survives a database restart."""

    def __init__(self, conn: psycopg.Connection, reconnect: Callable[[], psycopg.Connection] | None = None) -> None:
        self.raw = conn
        self._reconnect = reconnect
        self._depth = 0  # transactions open on it (nothing is retried inside one)
        self.closed_by_us = False

    def set_reconnect(self, reconnect: Callable[[], psycopg.Connection]) -> None:
        self._reconnect = reconnect

    def _fresh(self) -> None:
        if self._reconnect is not None and self._depth == 0 and not self.closed_by_us and self.raw.broken:
            with contextlib.suppress(psycopg.Error):
                self.raw.close()
            self.raw = self._reconnect()

    def execute(self, sql: Any, params: Any = None, **kwargs: Any) -> psycopg.Cursor:
        """psycopg's Connection.execute (`binary=True`: results in binary, vectors without text floats)."""
        self._fresh()
        try:
            return self.raw.execute(sql, params, **kwargs)
        except psycopg.OperationalError as exc:
            if self._depth or self._reconnect is None or self.closed_by_us or not self.raw.broken:
                raise mapped(exc) from exc
            self._fresh()  # the server dropped us between statements: once more, on a new connection
            try:
                return self.raw.execute(sql, params, **kwargs)
            except psycopg.Error as again:
                raise mapped(again) from again
        except psycopg.Error as exc:
            raise mapped(exc) from exc

    def cursor(self, **kwargs: Any) -> _MappedCursor:
        self._fresh()
        if self.raw.closed:
            raise StorageUnavailable("PostgreSQL: the store is closed")
        return _MappedCursor(self.raw.cursor(**kwargs))

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        self._fresh()
        try:
            with self.raw.transaction():
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
        except psycopg.Error as exc:
            raise mapped(exc) from exc

    def close(self) -> None:
        self.closed_by_us = True
        self.raw.close()

"""The connections of one PostgreSQL store: a thread holds one while it reads or writes (`with sessions:`,
reentrant), so that one request never waits for another's statement or transaction.

The store's first connection (the one that opened it) serves whichever thread asks first while it is free: a
one-shot CLI process never opens a second. When it is busy, a thread takes a connection from a `psycopg_pool`
pool, created on first need and grown on demand up to `size - 1` connections (`size` counts the first one;
`pool_size` in the store URL, default POOL_SIZE); with `size` 1 threads wait for the one connection in turn.
Idle pooled connections are closed after `MAX_IDLE` seconds; `close()` closes them all.

A pooled connection that the server dropped (a restart, a failover) is swapped for another before the next
statement outside a transaction, as the first connection is reopened (errors.MappedConnection).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

import psycopg

from ...errors import StorageBusy, StorageUnavailable
from .errors import MappedConnection

log = logging.getLogger(__name__)

POOL_SIZE = 4  # connections per store (the first one included) when the URL names no `pool_size`
MAX_IDLE = 300.0  # seconds an idle pooled connection stays open
WAIT = 30.0  # seconds a thread waits for a pooled connection before StorageBusy


class Sessions:
    """`with sessions:` binds a connection to the calling thread (reentrant); `sessions.conn` is that
    connection (the first one outside any `with`)."""

    def __init__(
        self,
        first: MappedConnection,
        size: int,
        conninfo: str,
        kwargs: dict[str, Any],
        configure: Callable[[psycopg.Connection], None],
    ) -> None:
        self.first = first
        self.size = max(1, int(size))
        self._conninfo = conninfo
        self._kwargs = kwargs
        self._configure = configure
        self._first_lock = threading.RLock()
        self._local = threading.local()
        self._pool: Any = None  # psycopg_pool.ConnectionPool, opened on first need
        self._pool_lock = threading.Lock()
        self.closed = False

    # -- the calling thread's connection -------------------------------------------------------------------
    @property
    def conn(self) -> MappedConnection:
        bound = getattr(self._local, "conn", None)
        return bound if bound is not None else self.first

    @property
    def depth(self) -> int:
        """How deep the calling thread is in `with sessions:`."""
        return getattr(self._local, "depth", 0)

    def __enter__(self) -> Sessions:
        depth = self.depth
        if depth:
            self._local.depth = depth + 1
            return self
        if self.size == 1 or self.closed:
            self._first_lock.acquire()  # (closed: the first connection's own error says so)
            self._local.conn, self._local.pooled = self.first, False
        elif self._first_lock.acquire(blocking=False):
            self._local.conn, self._local.pooled = self.first, False
        else:
            self._local.conn, self._local.pooled = self._from_pool(), True
        self._local.depth = 1
        return self

    def __exit__(self, *exc: object) -> None:
        self._local.depth -= 1
        if self._local.depth:
            return
        conn, pooled = self._local.conn, self._local.pooled
        self._local.conn = None
        if not pooled:
            self._first_lock.release()
            return
        pool = self._pool
        if pool is None or self.closed:
            with contextlib.suppress(psycopg.Error):
                conn.raw.close()
            return
        with contextlib.suppress(Exception):  # (a connection the pool no longer takes is closed by it)
            pool.putconn(conn.raw)

    # -- the pool --------------------------------------------------------------------------------------------
    def _open_pool(self) -> Any:
        with self._pool_lock:
            if self._pool is None:
                from psycopg_pool import ConnectionPool

                self._pool = ConnectionPool(
                    self._conninfo,
                    kwargs=self._kwargs,
                    min_size=0,
                    max_size=self.size - 1,
                    configure=self._configure,
                    max_idle=MAX_IDLE,
                    timeout=WAIT,
                    name="saipling",
                    open=True,
                )
                log.debug("opened a pool of up to %d more PostgreSQL connections", self.size - 1)
            return self._pool

    def _from_pool(self) -> MappedConnection:
        from psycopg_pool import PoolTimeout

        pool = self._open_pool()
        try:
            raw = pool.getconn()
        except PoolTimeout as exc:
            raise StorageBusy(
                f"PostgreSQL: every one of the store's {self.size} connections stayed busy for {WAIT:.0f} s "
                "(raise pool_size in the store URL, or the server's max_connections)"
            ) from exc
        except psycopg.Error as exc:
            raise StorageUnavailable(f"PostgreSQL: cannot open another connection: {str(exc).strip()}") from exc
        conn = MappedConnection(raw)
        conn.set_reconnect(lambda: self._swap(conn))
        return conn

    def _swap(self, conn: MappedConnection) -> psycopg.Connection:
        """A new pooled connection for one the server dropped (closed already: the pool discards it)."""
        pool = self._pool
        if pool is None:  # (closed meanwhile: say so, not an AttributeError)
            raise StorageUnavailable("the PostgreSQL store is closed")
        with contextlib.suppress(Exception):
            pool.putconn(conn.raw)
        return pool.getconn()

    def close(self) -> None:
        self.closed = True
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            with contextlib.suppress(Exception):
                pool.close(timeout=5.0)
        with self._first_lock, contextlib.suppress(psycopg.Error):
            self.first.close()

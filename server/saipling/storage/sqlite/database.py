"""The connection every part of the SQLite store shares (`store.py` composes them): its lock, the small query
helpers, one write transaction (`atomic`), the meta table, and the version caches of chunk-level facts key on."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import apsw

from .schema import BUSY_TIMEOUT_MS


class Database:
    """One apsw connection used from several threads: every use holds `lock` (an RLock)."""

    def __init__(self, conn: apsw.Connection) -> None:
        self.conn = conn
        self.lock = threading.RLock()
        # our own committed writes to files/chunks/mentions (with SQLite's data_version: any change, any process)
        self.writes = 0

    def scalar(self, sql: str, params: Sequence[Any] = ()) -> Any:
        with self.lock:
            for row in self.conn.execute(sql, params):
                return row[0]
        return None

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self.lock:
            return list(self.conn.execute(sql, params))

    def dicts(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        with self.lock:
            cur = self.conn.execute(sql, params)
            try:
                names = [d[0] for d in cur.get_description()]
            except apsw.ExecutionCompleteError:
                return []
            return [dict(zip(names, row, strict=True)) for row in cur]

    @contextlib.contextmanager
    def atomic(self) -> Iterator[None]:
        """One write transaction (a savepoint when nested); rolled back on any exception.

        The outermost one starts with BEGIN IMMEDIATE: the write lock is taken (waiting up to the busy
        timeout for another process's transaction) before anything is read. A deferred transaction that reads
        first and then writes fails at once with BusyError when another process wrote in between (SQLite
        cannot retry a stale snapshot), which made a server fail files while `saipling index` ran beside it."""
        with self.lock:
            if self.conn.in_transaction:
                with self.conn:
                    yield
                return
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise
            try:
                self.conn.execute("COMMIT")
            except BaseException:
                if self.conn.in_transaction:  # (a commit that failed, e.g. on a full disk, leaves it open)
                    with contextlib.suppress(apsw.Error):
                        self.conn.execute("ROLLBACK")
                raise

    def get_meta(self, key: str, default: str | None = None) -> str | None:
        value = self.scalar("SELECT value FROM meta WHERE key = ?", (key,))
        return default if value is None else value

    def set_meta(self, key: str, value: str) -> None:
        with self.atomic():
            self.conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))

    def try_set_meta(self, key: str, value: str) -> bool:
        """set_meta unless another process holds the write lock: never waits for it (False then). For values a
        reader only keeps for others (a measured calibration): waiting out the busy timeout would hold this
        connection's lock, and every request of the process behind it, for up to 10 s."""
        with self.lock:
            if self.conn.in_transaction:
                self.set_meta(key, value)
                return True
            self.conn.set_busy_timeout(0)
            try:
                self.set_meta(key, value)
                return True
            except apsw.BusyError:
                return False
            finally:
                self.conn.set_busy_timeout(BUSY_TIMEOUT_MS)

    def any_version(self) -> tuple[int, int]:
        """Changes with any commit to the index, ours or another process's (for caches of chunk text stats)."""
        return (int(self.scalar("PRAGMA data_version") or 0), self.writes)

    def json_ids(self, ids: Sequence[int]) -> str:
        import json

        return json.dumps([int(i) for i in ids])

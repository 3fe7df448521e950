"""The writer lock's record on PostgreSQL: what the current writer of a workspace is doing (`writer_runs`, one row
per workspace), for other processes' `status`, as the SQLite lock file's second line is. Written on the lock's own
connection (autocommit: never inside the run's transactions)."""

from __future__ import annotations

import json
import os
import socket
from typing import Any

import psycopg

from ..run_record import PublishedRun


class PgLockHandle(PublishedRun):
    """The workspace's writer lock while held: `publish` records what the run is doing."""

    def __init__(self, conn: psycopg.Connection, ws: int, what: str) -> None:
        super().__init__(what)
        self.conn = conn
        self.ws = ws
        self.publish(None, force=True)

    def _store(self, record: dict[str, Any]) -> bool:
        record["host"] = socket.gethostname()
        try:
            self.conn.execute(
                "INSERT INTO writer_runs(ws, pid, record, updated) VALUES (%s, %s, %s, now())"
                " ON CONFLICT (ws) DO UPDATE SET pid = excluded.pid, record = excluded.record, updated = now()",
                (self.ws, os.getpid(), json.dumps(record, ensure_ascii=False)),
            )
        except psycopg.Error:  # the lock holds all the same
            return False
        return True

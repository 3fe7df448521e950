"""The writer lock's record on PostgreSQL: what the current writer of a workspace is doing (`writer_runs`, one row
per workspace), for other processes' `status`, as the SQLite lock file's second line is. Written on the lock's own
connection (autocommit: never inside the run's transactions)."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psycopg

if TYPE_CHECKING:
    from ...indexing.records import IndexProgress

PUBLISH_SECONDS = 0.25


def describe_record(record: dict[str, Any] | None) -> str | None:
    """What a holder is doing, for messages (`indexing: embedding, 40 of 200 chunks`)."""
    if not record or not record.get("what"):
        return None
    what = {"index": "indexing", "refresh": "re-reading changed files", "clear": "clearing"}.get(
        str(record["what"]), str(record["what"])
    )
    if record.get("phase") == "keywords" and record.get("filesTotal"):
        return f"{what}: keywords, {record.get('filesDone', 0):,} of {record['filesTotal']:,} files"
    if record.get("phase") == "embedding" and record.get("chunksTotal"):
        return f"{what}: embedding, {record.get('chunksDone', 0):,} of {record['chunksTotal']:,} chunks"
    return what


class PgLockHandle:
    """The workspace's writer lock while held: `publish` records what the run is doing."""

    def __init__(self, conn: psycopg.Connection, ws: int, what: str) -> None:
        self.conn = conn
        self.ws = ws
        self.what = what
        self.started = time.time()
        self._last = 0.0
        self._phase: str | None = None
        self._write_lock = threading.Lock()
        self.publish(None, force=True)

    def publish(self, progress: IndexProgress | None, force: bool = False) -> None:
        phase = progress.phase if progress is not None else "starting"
        now = time.monotonic()
        if not force and phase == self._phase and now - self._last < PUBLISH_SECONDS:
            return
        record: dict[str, Any] = {"what": self.what, "phase": phase, "startedAt": self.started}
        if progress is not None:
            record.update(
                filesDone=progress.files_done,
                filesTotal=progress.files_total,
                currentFile=progress.current_file,
                chunksDone=progress.chunks_done,
                chunksTotal=progress.chunks_total,
                etaSeconds=progress.eta_seconds,
            )
        record["host"] = socket.gethostname()
        with self._write_lock:
            try:
                self.conn.execute(
                    "INSERT INTO writer_runs(ws, pid, record, updated) VALUES (%s, %s, %s, now())"
                    " ON CONFLICT (ws) DO UPDATE SET pid = excluded.pid, record = excluded.record, updated = now()",
                    (self.ws, os.getpid(), json.dumps(record, ensure_ascii=False)),
                )
            except psycopg.Error:  # the lock holds all the same
                return
            self._last, self._phase = now, phase

    def reporting(self, progress: Callable[[IndexProgress], None] | None) -> Callable[[IndexProgress], None]:
        def report(p: IndexProgress) -> None:
            self.publish(p)
            if progress is not None:
                progress(p)

        return report

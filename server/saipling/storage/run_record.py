"""What a writer publishes about its run while it holds an index's writer lock, so that `status` in any other
process shows the run: a JSON record (what, phase, files and chunks done, ETA). Each backend keeps it where its lock
lives (SQLite: the lock file's second line, storage/sqlite/lock.py; PostgreSQL: a row of its workspace,
storage/postgres/runs.py); the throttle, the record and how it reads in a message are shared here."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..indexing.records import IndexProgress

PUBLISH_SECONDS = 0.25  # a run's record is rewritten at most this often (and at each change of phase)


def describe(record: dict[str, Any] | None) -> str | None:
    """What a holder is doing, for messages: `indexing: keywords, 1,200 of 20,000 files`."""
    if not record or not record.get("what"):
        return None
    what = {"index": "indexing", "refresh": "re-reading changed files", "clear": "clearing"}.get(
        str(record["what"]), str(record["what"])
    )
    phase = record.get("phase")
    if phase == "keywords" and record.get("filesTotal"):
        return f"{what}: keywords, {record.get('filesDone', 0):,} of {record['filesTotal']:,} files"
    if phase == "file_keywords" and record.get("filesTotal"):
        return f"{what}: whole-file keywords, {record.get('filesDone', 0):,} of {record['filesTotal']:,} files"
    if phase == "embedding" and record.get("chunksTotal"):
        return f"{what}: embedding, {record.get('chunksDone', 0):,} of {record['chunksTotal']:,} chunks"
    return what


class PublishedRun:
    """A held writer lock that publishes what its run is doing; a backend says where (`_store`)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.started = time.time()
        self._last = 0.0
        self._phase: str | None = None
        self._write_lock = threading.Lock()

    def _store(self, record: dict[str, Any]) -> bool:
        """Keep the record where other processes read it; False when it could not be written (the lock holds
        all the same, and the next progress tries again)."""
        raise NotImplementedError

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
        with self._write_lock:
            if self._store(record):
                self._last, self._phase = now, phase

    def reporting(self, progress: Callable[[IndexProgress], None] | None) -> Callable[[IndexProgress], None]:
        """A progress callback that also publishes (throttled) what the run is doing."""

        def report(p: IndexProgress) -> None:
            self.publish(p)
            if progress is not None:
                progress(p)

        return report

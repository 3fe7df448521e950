"""Lazy sync: before answering, index the files that changed on disk since they were indexed.

For processes that answer requests without an editor telling them about saves (`saipling mcp`): one scan
(a stat per file, no reads) compares each file's (mtime, size) with the index, and only the files that
differ, appeared or disappeared go through the incremental indexer. Files the indexer cannot index
(binary, unreadable) are remembered by (mtime, size) so they are not retried on every request.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from .indexer import IndexSummary
from .scanner import scan

if TYPE_CHECKING:
    from .project import Project

log = logging.getLogger(__name__)


class LazySync:
    """Keeps one project's index in step with its files, one check at a time (thread-safe)."""

    def __init__(self, project: Project) -> None:
        self.project = project
        self._lock = threading.Lock()
        self._unindexable: dict[str, tuple[int, int]] = {}  # path -> (mtime_ns, size) it failed with

    def changed_paths(self) -> list[str]:
        """Root-relative paths whose (mtime, size) differ from the index, new files, and deleted ones."""
        entries = scan(self.project.root, self.project.settings).entries
        states = self.project.store.file_states()
        seen: set[str] = set()
        changed: list[str] = []
        for e in entries:
            seen.add(e.rel)
            st = states.get(e.rel)
            if st is not None and (st.mtime_ns, st.size) == (e.mtime_ns, e.size):
                continue
            if self._unindexable.get(e.rel) == (e.mtime_ns, e.size):
                continue
            changed.append(e.rel)
        changed += [p for p in states if p not in seen]
        for p in [p for p in self._unindexable if p not in seen]:
            del self._unindexable[p]
        return changed

    def sync(self, cancel: threading.Event | None = None) -> IndexSummary | None:
        """Index what changed (None when nothing did). Concurrent callers wait for the check in progress."""
        with self._lock:
            if cancel is not None and cancel.is_set():
                return None
            changed = self.changed_paths()
            if not changed:
                return None
            log.info("syncing %d changed file(s)", len(changed))
            summary = self.project.index(paths=changed, cancel=cancel)
            self._remember_failures(changed)
            return summary

    def idle(self, timeout: float) -> bool:
        """Wait until no sync is running (True), or `timeout` seconds (False)."""
        if not self._lock.acquire(timeout=timeout):
            return False
        self._lock.release()
        return True

    def _remember_failures(self, paths: list[str]) -> None:
        states = self.project.store.file_states()
        for rel in paths:
            if rel in states:
                self._unindexable.pop(rel, None)
                continue
            try:
                st = (self.project.root / rel).stat()
            except OSError:
                continue  # gone: nothing to retry
            self._unindexable[rel] = (st.st_mtime_ns, st.st_size)

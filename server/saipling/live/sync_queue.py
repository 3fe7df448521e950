"""Editor sync (SPEC 7): a pending map of changed files, each indexed once it has been quiet for a while.

Saves, creations, watched-file events and watcher events all land here as `path -> last change`. A tick
asks `due(now)` for the files quiet for `quiet_period` seconds (every new change resets a file's timer)
plus every deletion (no quiet period), and indexes them in one batched pass. A manual reindex takes
everything at once with `drain()`. The clock is injectable so tests can jump minutes ahead. Thread-safe:
the LSP event loop and the file watcher thread both feed the same queue.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

Clock = Callable[[], float]


@dataclass
class Batch:
    """What one pass should index: root-relative paths (changed or deleted), or the whole project."""

    paths: list[str] = field(default_factory=list)
    rescan: bool = False  # a folder was created, moved or deleted: scan the whole project

    def __bool__(self) -> bool:
        return bool(self.paths) or self.rescan

    def __len__(self) -> int:
        return len(self.paths)


class SyncQueue:
    """Pending changes of one project, with a per-file quiet period."""

    def __init__(self, quiet_period: float = 120.0, clock: Clock = time.monotonic) -> None:
        self.quiet_period = quiet_period
        self.clock = clock
        self._changed: dict[str, float] = {}  # path -> time of its last change
        self._deleted: dict[str, None] = {}  # ordered set
        self._rescan_at: float | None = None
        self._lock = threading.Lock()
        # told every changed path at once (outside the lock): the server refreshes its text right away,
        # while embedding waits for the quiet period
        self.listener: Callable[[str], None] | None = None

    def __len__(self) -> int:
        with self._lock:
            return len(self._changed) + len(self._deleted)

    def _now(self, now: float | None) -> float:
        return self.clock() if now is None else now

    def changed(self, path: str, now: float | None = None) -> None:
        """A file was saved, created or modified: (re)start its quiet period."""
        t = self._now(now)
        with self._lock:
            self._deleted.pop(path, None)
            self._changed.pop(path, None)  # re-insert so dict order follows the last change
            self._changed[path] = t
        if self.listener is not None:
            self.listener(path)

    def pending(self) -> tuple[list[str], int]:
        """(changed paths, number of deletions) waiting for a tick."""
        with self._lock:
            return list(self._changed), len(self._deleted)

    def waiting(self) -> list[str]:
        """The changed files still in their quiet period (their new text is not embedded until it ends)."""
        with self._lock:
            return list(self._changed)

    def deleted(self, path: str) -> None:
        """A file was deleted: remove it from the index on the next tick."""
        with self._lock:
            self._changed.pop(path, None)
            self._deleted[path] = None

    def renamed(self, old: str, new: str, now: float | None = None) -> None:
        """A rename is a deletion plus a creation (the embedding cache makes the creation cheap)."""
        self.deleted(old)
        self.changed(new, now)

    def rescan(self, now: float | None = None) -> None:
        """Something changed that no single path describes (a folder): scan the project once quiet."""
        t = self._now(now)
        with self._lock:
            self._rescan_at = t

    def due(self, now: float | None = None) -> Batch:
        """Take the deletions and the files quiet for `quiet_period`; the rest stay pending."""
        t = self._now(now)
        with self._lock:
            quiet = [p for p, last in self._changed.items() if t - last >= self.quiet_period]
            for p in quiet:
                del self._changed[p]
            rescan = self._rescan_at is not None and t - self._rescan_at >= self.quiet_period
            if rescan:
                self._rescan_at = None
            batch = Batch(quiet + list(self._deleted), rescan)
            self._deleted.clear()
            return batch

    def drain(self) -> Batch:
        """Take everything, ignoring the quiet period (a manual reindex)."""
        with self._lock:
            batch = Batch(list(self._changed) + list(self._deleted), self._rescan_at is not None)
            self._changed.clear()
            self._deleted.clear()
            self._rescan_at = None
            return batch

    def requeue(self, paths: Iterable[str], rescan: bool = False, now: float | None = None) -> None:
        """Put back the paths of a pass that did not finish, due on the next tick (newer changes win)."""
        t = self._now(now) - self.quiet_period
        with self._lock:
            for p in paths:
                if p not in self._changed and p not in self._deleted:
                    self._changed[p] = t
            if rescan and self._rescan_at is None:
                self._rescan_at = t

    def next_due(self) -> float | None:
        """When the earliest pending change becomes due (None when nothing is pending)."""
        with self._lock:
            if self._deleted:
                return float("-inf")
            times = list(self._changed.values())
            if self._rescan_at is not None:
                times.append(self._rescan_at)
            return min(times) + self.quiet_period if times else None

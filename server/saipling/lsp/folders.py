"""Per-folder state of the server: the project, its sync queue and watcher, and its index runs."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from lsprotocol import types
from pygls.progress import Progress

from ..indexer import IndexProgress
from ..project import Project
from ..scanner import is_indexable
from ..sync import SyncQueue
from ..watcher import Watcher
from . import convert

T = TypeVar("T")
EMBED_RETRY_FIRST = 60.0  # seconds before the first retry of failed embeddings; doubles up to
EMBED_RETRY_MAX = 1800.0


class TestClock:
    """A monotonic clock that tests can move forward (quiet periods pass without sleeping)."""

    __test__ = False  # not a pytest class

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset

    def advance(self, seconds: float) -> float:
        self.offset += seconds
        return self.offset


@dataclass
class Folder:
    """One workspace folder: its project (index), sync queue, watcher and its one index run at a time."""

    uri: str
    name: str
    project: Project
    queue: SyncQueue
    watcher: Watcher | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # held by the run in progress
    cancel: threading.Event | None = None  # of the run in progress
    running_full: bool = False  # the run in progress re-chunks every file
    worker: threading.Thread | None = None  # the thread of the last run
    passes: int = 0  # index passes finished (initial, sync, manual)
    # embeddings that failed (provider down, rate limited, timed out) are retried with backoff, without a save
    retry_at: float | None = None
    retry_delay: float = EMBED_RETRY_FIRST

    def schedule_retry(self, summary: Any, now: float) -> None:
        """After a run: retry its missing embeddings later if it ran keyword-only for a reason that can pass
        (not a rejected API key: that waits for the user), else forget any retry."""
        if summary is not None and summary.degraded and self.project.indexer.embeds:
            self.retry_at = now + self.retry_delay
            self.retry_delay = min(self.retry_delay * 2, EMBED_RETRY_MAX)
        elif summary is not None and not summary.cancelled:
            self.retry_at, self.retry_delay = None, EMBED_RETRY_FIRST

    def accepts(self, rel: str) -> bool:
        """True for a path the project indexes (under its current settings)."""
        return is_indexable(self.project.root, rel, self.project.settings) is None

    def run_in_thread(self, fn: Callable[[], T]) -> asyncio.Future[T]:
        """Run `fn` on a daemon thread (an index run must not keep a closing process alive)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()

        def settle(result: Any, error: BaseException | None) -> None:
            if not fut.done():
                fut.set_exception(error) if error is not None else fut.set_result(result)

        def target() -> None:
            try:
                result, error = fn(), None
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
                result, error = None, exc
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits any more
                loop.call_soon_threadsafe(settle, result, error)

        self.worker = threading.Thread(target=target, name=f"saipling-index-{self.name}", daemon=True)
        self.worker.start()
        return fut


class ProgressReporter:
    """`$/progress` for one run: reports come from the index thread, throttled and sent via `post`."""

    def __init__(
        self, progress: Progress, token: str, post: Callable[..., None], done: Callable[[str], None]
    ) -> None:
        self.progress = progress
        self.token = token
        self.post = post
        self.done = done
        self._last: tuple[int, str] | None = None
        self._last_at = 0.0

    def update(self, p: IndexProgress) -> None:
        key = (convert.percentage(p), p.phase)
        now = time.monotonic()
        if key == self._last and now - self._last_at < 0.5:
            return
        self._last, self._last_at = key, now
        self.post(self.progress.report, self.token, convert.progress_report(p))

    def end(self, message: str) -> None:
        self.done(self.token)
        self.progress.tokens.pop(self.token, None)
        self.post(self.progress.end, self.token, types.WorkDoneProgressEnd(message=message))

"""One live index: a project kept in step with its files while a server answers from it.

Both servers use it, the language server once per workspace folder (`lsp/folders.py`), the MCP server once
(`mcp/server.py`). It owns the engine side of "live":

- runs: one at a time, each with a cancel event (`running`, `run`), optionally on a daemon thread (`start_run`:
  the first run in the background, answers meanwhile come from the index as it stands);
- the quiet-period queue (`queue`) fed by the file watcher (`watch`) and by whatever else the edge hears of
  (an editor's saves), and what is due from it (`take_due`: the files quiet long enough, else a retry of
  embeddings that failed earlier, with backoff);
- for a process without an event loop, a thread that syncs what is due (`follow`), and the sync before a call
  (`sync_before_call`: files changed on disk with no event, `freshness.LazySync`);
- cancel and shutdown with grace (`stop`, `wait`, `close`).

What differs stays in the edge through hooks: the language server runs each pass on its event loop (with
`$/progress`, a cost question, open files embedded first) and passes them to `index`; the MCP server has none.
Never imports pygls, lsprotocol or mcp.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .freshness import LazySync
from .sync_queue import Batch, Clock, SyncQueue
from .watcher import Watcher

if TYPE_CHECKING:
    from ..indexing.indexer import IndexProgress, IndexSummary
    from ..project import Project

log = logging.getLogger(__name__)

EMBED_RETRY_FIRST = 60.0  # seconds before the first retry of failed embeddings; doubles up to
EMBED_RETRY_MAX = 1800.0
SHUTDOWN_GRACE = 10.0  # seconds to wait for a run to stop


@dataclass(frozen=True)
class Due:
    """What a tick should run: the batch of quiet changes, or (`retry`) the chunks whose embedding failed."""

    batch: Batch
    retry: bool = False

    def __bool__(self) -> bool:
        return bool(self.batch) or self.retry


class LiveIndex:
    """One project, its sync queue and watcher, and its one index run at a time. Thread-safe."""

    def __init__(self, project: Project, *, clock: Clock = time.monotonic, name: str | None = None) -> None:
        self.project = project
        self.clock = clock
        self.name = name or project.root.name
        self.queue = SyncQueue(project.settings.quiet_period_seconds, clock)
        # (what a search says of chunks without vectors: files in their quiet period are embedded when it ends)
        project.held_for_quiet = self.queue.waiting
        self.lazy = LazySync(project)
        self.watcher: Watcher | None = None
        self.cancel: threading.Event | None = None  # of the run in progress
        self.running_full = False  # the run in progress re-chunks every file
        self.worker: threading.Thread | None = None  # the thread of the last background run
        self.passes = 0  # index passes finished (initial, sync, manual)
        # embeddings that failed (provider down, rate limited, timed out) are retried with backoff, without a save
        self.retry_at: float | None = None
        self.retry_delay = EMBED_RETRY_FIRST
        self.closing = threading.Event()
        self._run_lock = threading.Lock()  # one run at a time (`run`; the language server orders its own)
        self._follower: threading.Thread | None = None

    # -- watching ------------------------------------------------------------------------------------------
    def watch(self, on: bool) -> None:
        """Start or stop the file watcher (blocking). Raises when it cannot start (e.g. the inotify watch limit):
        the caller says so; saves and the sync before a call still keep the index in step."""
        if on and self.watcher is None:
            watcher = Watcher.for_project(self.project, self.queue)
            watcher.start()
            self.watcher = watcher
        elif not on and self.watcher is not None:
            watcher, self.watcher = self.watcher, None
            watcher.stop()

    # -- runs ----------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def running(self, full: bool = False) -> Iterator[threading.Event]:
        """The run in progress: its cancel event (set by `cancel_run` and `stop`); counted in `passes` at its end."""
        self.cancel = cancel = threading.Event()
        self.running_full = full
        if self.closing.is_set():  # (stopped between a caller's check and now)
            cancel.set()
        try:
            yield cancel
        finally:
            self.cancel = None
            self.passes += 1

    def index(
        self,
        cancel: threading.Event,
        full: bool = False,
        paths: list[str] | None = None,
        progress: Callable[[IndexProgress], None] | None = None,
        *,
        hold: bool = True,
        first: list[str] | None = None,
        confirm: Callable[[dict[str, Any]], bool] | None = None,
    ) -> IndexSummary:
        """One pass on the calling thread. With `hold`, files still in their quiet period are not embedded yet
        (their new text is, once quiet); `first` files are embedded first; `confirm` may refuse what it costs."""
        return self.project.index(
            full, paths, progress, cancel, hold=self.queue.waiting if hold else (), first=first or [], confirm=confirm
        )

    def run(self, full: bool = False, paths: list[str] | None = None, *, hold: bool = False) -> IndexSummary | None:
        """One run on the calling thread, after any run in progress (None once closing); logged, never raised."""
        with self._run_lock:
            if self.closing.is_set():
                return None
            summary = None
            with self.running(full) as cancel:
                try:
                    summary = self.index(cancel, full, paths, hold=hold)
                except Exception:  # noqa: BLE001 - the server keeps answering from the index it has
                    log.exception("indexing %s failed", self.project.root)
            if summary is not None and paths is None:
                log.info(
                    "index ready: %d files, %d chunks (%d changed)", summary.files, summary.chunks, summary.changed
                )
            return summary

    def start_run(self, target: Callable[[], Any] | None = None, *, name: str | None = None) -> threading.Thread:
        """Run `target` (default: a run of every file) on a daemon thread: an index run must not keep a closing
        process alive. The thread is `worker` once started (a shutdown on another thread may join it at once)."""
        worker = threading.Thread(target=target or self.run, name=name or f"saipling-index-{self.name}", daemon=True)
        worker.start()
        self.worker = worker
        return worker

    @property
    def running_in_background(self) -> bool:
        return self.worker is not None and self.worker.is_alive()

    def cancel_run(self) -> bool:
        """Cancel the run in progress (True if there was one)."""
        cancel = self.cancel
        if cancel is not None:
            cancel.set()
        return cancel is not None

    # -- what is due -----------------------------------------------------------------------------------------
    def schedule_retry(self, summary: IndexSummary | None) -> None:
        """After a run: retry its missing embeddings later if it ran keyword-only for a reason that can pass
        (not a rejected API key: that waits for the user), else forget any retry."""
        # (while the local model stands in for an API provider, the retry asks that provider again)
        if summary is not None and (
            (summary.degraded and self.project.indexer.embeds) or self.project.fallback_from is not None
        ):
            self.retry_at = self.clock() + self.retry_delay
            self.retry_delay = min(self.retry_delay * 2, EMBED_RETRY_MAX)
        elif summary is not None and not summary.cancelled:
            self.retry_at, self.retry_delay = None, EMBED_RETRY_FIRST

    def take_due(self) -> Due:
        """The changes quiet for the quiet period (taken from the queue), else a retry of the embeddings that
        failed earlier once its time has come (forgotten until the run that retries sets it again)."""
        if batch := self.queue.due():
            return Due(batch)
        if self.retry_at is not None and self.clock() >= self.retry_at:
            self.retry_at = None
            return Due(batch, retry=True)
        return Due(batch)

    def requeue(self, batch: Batch) -> None:
        """Put back the changes of a pass that did not finish (cancelled or failed), unless closing."""
        if not self.closing.is_set():
            self.queue.requeue(batch.paths, batch.rescan)

    # -- a process without an event loop --------------------------------------------------------------------
    def follow(self, on_due: Callable[[Due], None] | None = None) -> threading.Thread:
        """A daemon thread that, every `tickSeconds`, hands what is due to `on_due` unless a background run is
        going. By default quiet changes sync the files changed on disk (the batch only says when: a scan finds
        what, and keeps the check before the next call cheap)."""
        handle = on_due or (lambda _due: self.sync_before_call())

        def loop() -> None:
            tick = max(0.05, self.project.settings.tick_seconds)
            while not self.closing.wait(tick):
                if self.running_in_background:
                    continue
                if due := self.take_due():
                    handle(due)

        self._follower = threading.Thread(target=loop, name=f"saipling-watch-{self.name}", daemon=True)
        self._follower.start()
        return self._follower

    def sync_before_call(self) -> None:
        """Index the files changed on disk since the last check (skipped while a background run goes)."""
        if not self.project.settings.enabled or self.running_in_background or self.closing.is_set():
            return
        try:
            self.lazy.sync(self.closing)
        except Exception:  # noqa: BLE001 - answer from the index as it stands rather than fail the call
            log.exception("syncing changed files failed")

    # -- shutdown --------------------------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop at once: no new run, the run in progress cancelled (each file stays old or new), provider calls
        aborted, the watcher stopped. The project stays open (`close`)."""
        self.closing.set()
        self.cancel_run()
        with contextlib.suppress(Exception):
            self.project.abort_calls()  # (an index run blocked on a provider stops at once)
        if self.watcher is not None:
            watcher, self.watcher = self.watcher, None
            watcher.stop()

    def wait(self, deadline: float) -> bool:
        """Wait until `deadline` (time.monotonic) for the threads that use the project; True when they stopped."""
        for thread in (self._follower, self.worker):
            if thread is not None and thread.ident is not None:  # (started: joinable)
                thread.join(max(0.0, deadline - time.monotonic()))
                if thread.is_alive():
                    return False
        return self.lazy.idle(max(0.0, deadline - time.monotonic()))

    def close(self, grace: float = SHUTDOWN_GRACE) -> None:
        """`stop`, then close the index once every run stopped (left open if one does not within `grace`:
        the process is exiting, the store stays with the thread that still uses it)."""
        self.stop()
        if self.wait(time.monotonic() + grace):
            self.project.close()
        else:
            log.warning("%s: an index run did not stop within %.0f s", self.name, grace)

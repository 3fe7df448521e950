"""The out-of-editor file watcher (SPEC 7): file-system events under a project root feed its SyncQueue.

Catches what the editor never sees (git checkouts, another editor, a sync tool). Only files the project
would index count (hidden folders such as `.saipling/`, `node_modules` and excluded files are ignored);
a folder created, moved or deleted asks the queue for one rescan instead of guessing its contents.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from ..files.scanner import SKIP_DIRS, is_indexable, shown_name, utf8_name
from .sync_queue import SyncQueue

log = logging.getLogger(__name__)

Accept = Callable[[str], bool]


class _StopRace(logging.Filter):
    """Drops watchdog's ERROR "InotifyEmitter.queue_events() called when the thread is inactive": its inotify
    thread reads once more while the observer stops (a race inside watchdog at shutdown; nothing is lost), and
    a log line at ERROR must mean something went wrong."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "called when the thread is inactive" not in str(record.msg)  # (msg: never formats, never raises)


logging.getLogger("watchdog.observers.inotify").addFilter(_StopRace())


def ignored_folder(rel: str) -> bool:
    """True for folders the scanner never enters (hidden ones, node_modules)."""
    return any(part.startswith(".") or part in SKIP_DIRS for part in rel.split("/"))


class _Handler(FileSystemEventHandler):
    def __init__(self, watcher: Watcher) -> None:
        self.watcher = watcher

    def on_any_event(self, event: FileSystemEvent) -> None:
        try:
            self.watcher.handle(event)
        except Exception:  # an event must never kill the observer thread
            log.exception("watcher: could not handle %s", event)


class Watcher:
    """Watches one root and feeds its queue; `start()` and `stop()` may be called from any thread."""

    def __init__(self, root: Path, queue: SyncQueue, accept: Accept) -> None:
        self.root = Path(root)
        self.queue = queue
        self.accept = accept
        self._observer: Observer | None = None  # type: ignore[valid-type]

    @classmethod
    def for_project(cls, project, queue: SyncQueue) -> Watcher:  # noqa: ANN001 - saipling.project.Project
        """A watcher accepting exactly the files the project's current settings would index."""
        return cls(project.root, queue, lambda rel: is_indexable(project.root, rel, project.settings) is None)

    @property
    def running(self) -> bool:
        return self._observer is not None

    def start(self) -> None:
        if self._observer is not None:
            return
        observer = Observer()
        observer.daemon = True
        observer.schedule(_Handler(self), str(self.root), recursive=True)
        observer.start()
        self._observer = observer
        log.info("watching %s for changes made outside the editor", self.root)

    def stop(self, timeout: float = 5.0) -> None:
        observer, self._observer = self._observer, None
        if observer is None:
            return
        observer.stop()
        observer.join(timeout)
        if observer.is_alive():
            log.warning("watcher for %s did not stop within %.0f s", self.root, timeout)

    # -- events --------------------------------------------------------------------------------------------
    def _rel(self, path: str | bytes) -> str | None:
        """The root-relative path of an event, or None (outside the root, or a name that cannot be stored)."""
        path = os.fsdecode(path)
        try:
            rel = Path(path).relative_to(self.root).as_posix()
        except ValueError:
            return None
        if not utf8_name(rel):  # as scan() decides: bytes that are not UTF-8 are never indexed
            shown = shown_name(rel)
            log.info("watcher: ignoring %s: file name is not valid UTF-8", shown)
            return None
        return rel

    def handle(self, event: FileSystemEvent) -> None:
        kind = event.event_type
        if kind not in ("created", "modified", "deleted", "moved"):
            return  # opened / closed: a write already produced "modified"
        src = self._rel(event.src_path)
        dest = self._rel(event.dest_path) if kind == "moved" and event.dest_path else None
        if event.is_directory:
            if kind != "modified" and any(r and not ignored_folder(r) for r in (src, dest)):
                self.queue.rescan()
            return
        if kind == "moved":
            if src and self.accept(src):
                self.queue.deleted(src)
            if dest and self.accept(dest):
                self.queue.changed(dest)
        elif src and self.accept(src):
            if kind == "deleted":
                self.queue.deleted(src)
            else:
                self.queue.changed(src)

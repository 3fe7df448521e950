"""Lazy sync: before answering, index the files that changed on disk since they were indexed.

For processes that answer requests without an editor telling them about saves (`saipling mcp`). A check is
one `stat` per file and per folder, no reads:

- the fast path: when the index holds what the last check left in it, no folder's mtime changed (so no file
  was created, deleted or renamed) and every file seen last time still has its (mtime, size), nothing changed;
- otherwise a full scan compares every file's (mtime, size) with the index, and only the files that differ,
  appeared or disappeared go through the incremental indexer.

Files the indexer cannot index (binary, unreadable) are remembered by (mtime, size), so they are not retried on
every request, only after they change.

One-shot readers (the CLI's `search`, `enrich`, `related`) use `refresh_before_reading`: the same check, then
only the text pass (nothing embedded), so a file edited, added, renamed or deleted since the last `saipling
index` is searched as it is now. This module imports neither numpy nor the indexer until a file must be read.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..config.settings import INDEX_DIR
from ..errors import IndexBusy
from ..files.scanner import SKIP_DIRS, scan
from ..storage.base import FileState, gone_here
from .unindexable import still_refused, unindexable

if TYPE_CHECKING:
    from pathlib import Path

    from ..indexing.indexer import IndexSummary
    from ..project import Project

log = logging.getLogger(__name__)

Stat = tuple[int, int] | None  # (mtime_ns, size); None: could not be stat'ed


@dataclass
class _Snapshot:
    """What the last check saw: folder mtimes, file stats, and the index's file states after it."""

    folders: dict[str, int]
    files: dict[str, Stat]  # absolute path -> stat
    states: dict[str, FileState]


def _stat(path: str) -> Stat:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def folder_mtimes(root: str) -> dict[str, int]:
    """Every folder a scan would enter (not hidden ones, node_modules or symlinks) -> its mtime (-1: unreadable).
    A file created, deleted or renamed in a folder changes that folder's mtime."""
    out: dict[str, int] = {}
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            out[folder] = os.stat(folder).st_mtime_ns
            with os.scandir(folder) as it:
                for e in it:
                    if e.name[0] != "." and e.name not in SKIP_DIRS and e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
        except OSError:
            out[folder] = -1
    return out


class LazySync:
    """Keeps one project's index in step with its files, one check at a time (thread-safe)."""

    def __init__(self, project: Project) -> None:
        self.project = project
        self._lock = threading.Lock()
        self._unindexable: dict[str, tuple[int, int]] = {}  # path -> (mtime_ns, size) it failed with
        self._snapshot: _Snapshot | None = None
        self._pending: tuple[dict[str, int], dict[str, Stat]] | None = None  # what the running check saw

    def _unchanged(self, states: dict[str, FileState]) -> bool:
        snap = self._snapshot
        if snap is None or states != snap.states:
            return False
        if any(st.mtime_ns == 0 for st in states.values()):
            return False  # read in the same timestamp tick as a write: the indexer must hash it again
        for folder, mtime in snap.folders.items():  # (a new folder changes its parent's mtime)
            try:
                if os.stat(folder).st_mtime_ns != mtime:
                    return False
            except OSError:
                if mtime != -1:
                    return False
        return all(_stat(path) == st for path, st in snap.files.items())

    def changed_paths(self) -> list[str]:
        """Root-relative paths whose (mtime, size) differ from the index, new files, and deleted ones."""
        root = self.project.root
        states = self.project.store.file_states()
        if self._unchanged(states):
            self._pending = None
            return []
        folders = folder_mtimes(str(root))  # before the scan: a file created during it shows up next time
        result = scan(root, self.project.settings)
        files: dict[str, Stat] = {os.fspath(e.path): (e.mtime_ns, e.size) for e in result.entries}
        for rel, _reason in result.skipped:  # e.g. a file too large today may shrink tomorrow
            path = os.path.join(root, rel)
            if os.path.isfile(path):
                files[path] = _stat(path)
        seen: set[str] = set()
        changed: list[str] = []
        here = self.project.store.copy_id
        for e in result.entries:
            seen.add(e.rel)
            st = states.get(e.rel)
            if st is not None and not st.changed_here(e.mtime_ns, e.size, here):
                continue
            if self._unindexable.get(e.rel) == (e.mtime_ns, e.size):
                continue
            changed.append(e.rel)
        changed += gone_here(root, states, seen, here)
        for p in [p for p in self._unindexable if p not in seen]:
            del self._unindexable[p]
        self._pending = (folders, files)
        return changed

    def sync(self, cancel: threading.Event | None = None) -> IndexSummary | None:
        """Index what changed (None when nothing did). Concurrent callers wait for the check in progress."""
        with self._lock:
            if (cancel is not None and cancel.is_set()) or self.project.store.readonly:
                return None  # (a read-only index is searched as it is)
            changed = self.changed_paths()
            summary = None
            if changed:
                log.info("syncing %d changed file(s)", len(changed))
                try:  # another process writing the index (a server, `saipling index`) keeps it fresh itself
                    summary = self.project.index(paths=changed, cancel=cancel, wait=False)
                except IndexBusy as exc:
                    log.info("not syncing now: %s", exc)
                    self._pending = None
                    return None
                self._remember_failures(changed)
            if self._pending is not None and (summary is None or not summary.cancelled):
                folders, files = self._pending
                self._snapshot = _Snapshot(folders, files, self.project.store.file_states())
            self._pending = None
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
            st = _stat(os.path.join(self.project.root, rel))
            if st is not None:  # (gone: nothing to retry)
                self._unindexable[rel] = st


# More changed files than this and a one-shot search does not re-read them itself (a `git checkout` of the whole
# project is a job for `saipling index`, which says how far it got): it says so and searches the index as it is.
REFRESH_LIMIT = 200
# how long a one-shot command waits for another one's re-read of changed files (at most REFRESH_LIMIT files:
# seconds) before it answers from the index as it stands
REFRESH_WAIT_SECONDS = 20.0


def changed_on_disk(project: Project, states: dict[str, FileState] | None = None) -> list[str]:
    """Root-relative paths whose (mtime, size) differ from the index, new files, and deleted ones: one scan of
    the folders, no reads (~9 ms for 1,000 files; no folder snapshot is kept: a one-shot command checks once).
    A file refused for its content is not listed until it changes (`live.unindexable.remember`). `states`: the
    index's file states if the caller read them already (a read of every file's row: ~10 ms at 5,000 files)."""
    to_read, gone = _changes(project, project.store.file_states() if states is None else states)
    return to_read + gone


def _changes(project: Project, states: dict[str, FileState]) -> tuple[list[str], list[str]]:
    """`changed_on_disk` in two: the files to read (edited or new), and the indexed ones the scan no longer finds
    (deleted, or excluded by the settings since): dropping those reads nothing. On a shared index (a workspace
    several copies write) only this copy's changes: FileState.changed_here, gone_here."""
    refused = unindexable(project.store)
    found = scan(project.root, project.settings)
    seen = {e.rel for e in found.entries}
    here = project.store.copy_id
    to_read = [
        e.rel
        for e in found.entries
        if ((st := states.get(e.rel)) is None or st.changed_here(e.mtime_ns, e.size, here))
        and not still_refused(refused.get(e.rel), project.root, e.rel, e.mtime_ns, e.size)
    ]
    return to_read, gone_here(project.root, states, seen, here)


def projects_below(root: Path) -> list[str]:
    """The folders right under `root` that hold an index of their own (`.saipling/`), by name: a command run from
    the folder above a project is told where the project is rather than to index the folder (and it, twice)."""
    try:
        return sorted(e.name for e in os.scandir(root) if e.is_dir() and os.path.isdir(os.path.join(e.path, INDEX_DIR)))
    except OSError:
        return []


def refresh_before_reading(project: Project, limit: int | None = None) -> str | None:
    """Before a one-shot command reads the index: re-read the text of the files changed, added or deleted on disk
    since they were indexed (keywords, line ranges, metadata; their new chunks are embedded by the next
    `saipling index`). Returns a note for the user when the index could not be brought up to date, else None.

    Not done for an index with no files (never indexed, cleared, or no markdown files: the note says so), a
    read-only index, or while another process is writing the index (it keeps the index fresh itself)."""
    states = project.store.file_states()
    if not states:
        root = project.root
        if below := projects_below(root):
            shown = ", ".join(below[:5]) + (", ..." if len(below) > 5 else "")
            return f"{root} has no index; the projects in its folders: {shown} (use --root {root / below[0]})"
        return (
            f"the index of {root} is empty (never indexed, cleared, or no markdown files): run `saipling index {root}`"
        )
    if project.store.readonly:
        return None
    to_read, gone = _changes(project, states)
    changed = to_read + gone
    if not changed:
        return None
    note = None
    if len(to_read) > (REFRESH_LIMIT if limit is None else limit):
        note = (
            f"{len(to_read):,} files changed since the last index and are searched as they were indexed: "
            "run `saipling index` to bring the index up to date"
        )
        # (files deleted, or now excluded by the config, are still dropped: that reads nothing, and they were
        # counted as changed files to read and shown in results)
        changed = gone
        if not changed:
            return note
    try:
        with project.store.writer_lock(wait=False, what="refresh"):
            summary = project.refresh(changed)
    except IndexBusy as exc:
        if exc.what != "refresh":  # (an index run: it reads them itself; its state is searched as it stands)
            log.info("not re-reading changed files: %s", exc)
            return note
        # another one-shot command is re-reading changed files (these, most likely: commands an agent started at
        # once after an edit): wait for it, then read what it left, so no command answers from the text before
        try:
            with project.store.writer_lock(timeout=REFRESH_WAIT_SECONDS, what="refresh"):
                to_read, gone = _changes(project, project.store.file_states())
                changed = gone if note is not None else to_read + gone
                summary = project.refresh(changed) if changed else None
        except IndexBusy as again:
            log.info("not re-reading changed files: %s", again)
            return note
        if summary is None:
            return note
    log.info("re-read %d changed file(s) before answering", summary.changed + summary.deleted)
    return note

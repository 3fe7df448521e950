"""The index's integrity check, off the open path for a big index (issue 34).

`PRAGMA quick_check` reads every page: ~0.1 s on a 45 MB index, 3 s on 288 MB (55k chunks), 46 s on a million
chunks. Opening an index runs it only while the file is small (VERIFY_INLINE_BYTES) or a check found it damaged
before (a marker beside it, `index.db.damaged`); otherwise opening reads the header and schema only, and the
writing process (the server, `saipling index`) checks the file on a thread of its own, on its own read-only
connection (a WAL reader: it never holds up a write or a search). A damaged index is logged, told to the user,
and marked: the next open checks it at once and moves it aside and rebuilds it, as a damaged small index is at open.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

import apsw

from ...errors import IndexPathUnsafe
from . import index_files
from .schema import connect

log = logging.getLogger(__name__)

VERIFY_INLINE_BYTES = 64 << 20  # a quick_check of up to ~0.15 s runs at open; larger files are checked after
MARKER_SUFFIX = ".damaged"


def verify_at_open(folder: Path, dir_fd: int, name: str, size: int) -> bool:
    """Whether opening the index `name` (of `size` bytes) runs the whole check itself."""
    return size <= VERIFY_INLINE_BYTES or index_files.check_entry(folder, name + MARKER_SUFFIX, dir_fd) is not None


def unmark(dir_fd: int, name: str) -> None:
    """The marker gone (the index was checked at open, or moved aside and rebuilt)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name + MARKER_SUFFIX, dir_fd=dir_fd)


def quick_check(path: str) -> str | None:
    """What is wrong with the index file at `path` (None: nothing), on a read-only connection of its own."""
    conn = None
    try:
        conn = connect(path, readonly=True)
        rows = list(conn.execute("PRAGMA quick_check"))
    except (apsw.CorruptError, apsw.NotADBError) as exc:
        return f"{type(exc).__name__}: {exc}"
    except apsw.Error as exc:  # busy, gone, no permission: not a verdict on the file
        log.info("integrity check of %s not run: %s", path, exc)
        return None
    finally:
        if conn is not None:
            with contextlib.suppress(apsw.Error):
                conn.close()
    if rows and rows[0][0] == "ok":
        return None
    return "; ".join(str(r[0]) for r in rows[:3]) or "no answer"


def mark(path: str, problem: str) -> None:
    """Leave the marker that makes the next open check (and rebuild) the index."""
    folder, name = Path(path).parent, Path(path).name
    with index_files.open_folder(folder, create=False) as dir_fd:
        if dir_fd is None:
            return
        fd = index_files.open_file(folder, dir_fd, name + MARKER_SUFFIX, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            os.write(fd, problem.encode("utf-8", "replace")[:4000])
        finally:
            os.close(fd)


def check_later(path: str, on_damaged: Callable[[str], None] | None = None) -> threading.Thread:
    """Check the index at `path` on a daemon thread; when damaged: log it, mark it, tell `on_damaged`."""

    def run() -> None:
        problem = quick_check(path)
        if problem is None:
            return
        message = f"the index {path} is damaged ({problem}): it is moved aside and rebuilt the next time it is opened"
        log.error("%s", message)
        try:
            mark(path, problem)
        except (OSError, IndexPathUnsafe) as exc:
            log.error("could not mark the damaged index %s: %s", path, exc)
        if on_damaged is not None:
            on_damaged(message)

    thread = threading.Thread(target=run, name="saipling-integrity-check", daemon=True)
    thread.start()
    return thread

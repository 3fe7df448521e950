"""One writer per index across processes: an advisory lock file next to the index (`.saipling/index.lock`).

An index run (`saipling index`, a server's pass) holds it for the whole run, so two runs never embed the same
chunks twice; a second writer waits (reporting "index in use by PID N") or gives up. Readers never take it:
SQLite's WAL lets them read while a run writes. The lock is `flock` on the file, released by the kernel when
the holder exits (even on kill -9); the PID written into the file is only for messages.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from .errors import SaiplingError

log = logging.getLogger(__name__)

LOCK_FILE = "index.lock"
POLL_SECONDS = 0.2


class IndexBusy(SaiplingError):
    """Another process is writing this index."""

    def __init__(self, pid: int | None, path: Path) -> None:
        who = f"PID {pid}" if pid else "another process"
        super().__init__(f"index in use by {who} ({path.parent})")
        self.pid = pid


def holder_pid(path: Path) -> int | None:
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeError):
        return None
    return int(text) if text.isdigit() else None


@contextlib.contextmanager
def index_lock(
    index_dir: Path,
    *,
    wait: bool = True,
    cancel: threading.Event | None = None,
    on_wait: Callable[[int | None], None] | None = None,
) -> Iterator[None]:
    """Hold the write lock of the index in `index_dir` for the block.

    Busy: with `wait`, poll until it is free (`on_wait(pid)` once, then stop when `cancel` is set: raises
    IndexCancelled); without, raise IndexBusy naming the holder. A folder where the lock file cannot be
    created (a read-only index) is not locked: nothing can be written there anyway."""
    from .errors import IndexCancelled

    path = Path(index_dir) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        log.debug("index lock %s unavailable (%s): not locking", path, exc)
        yield
        return
    try:
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                pid = holder_pid(path)
                if not wait:
                    raise IndexBusy(pid, path) from None
                if not told:
                    told = True
                    log.warning(
                        "index in use by %s: waiting for it to finish",
                        f"PID {pid}" if pid else "another process",
                    )
                    if on_wait is not None:
                        on_wait(pid)
                if cancel is not None and cancel.wait(POLL_SECONDS):
                    raise IndexCancelled("indexing cancelled while waiting for the index lock") from None
                if cancel is None:
                    time.sleep(POLL_SECONDS)
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode("ascii"), 0)
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)

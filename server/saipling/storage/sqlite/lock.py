"""One writer per index across processes: an advisory lock file next to the index (`.saipling/index.lock`).

An index run (`saipling index`, a server's pass), a refresh of changed files before a one-shot read and `clear`
hold it, so two writers never embed the same chunks twice or clear a run's files under it; a second writer
waits (reporting "index in use by PID N") or gives up. Readers never take it: SQLite's WAL lets them read while
a run writes. The lock is `flock` on the file, released by the kernel when the holder exits (even on kill -9).

The holder writes its PID on the first line and what it is doing (a JSON record: phase, files and chunks done)
on the second, so that `status` in any other process shows the run (`other_run`). The file is opened through
the folder's descriptor without following links (storage/sqlite/index_files.py): a lock file that is a link,
or a hard link, is refused, never truncated.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import IndexBusy, IndexPathUnsafe
from ..run_record import PublishedRun, describe
from . import index_files

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

LOCK_FILE = index_files.LOCK_FILE
POLL_SECONDS = 0.2
# a lock held with no record in it: another process's status probe (a shared lock held for microseconds), or a
# writer between taking the lock and writing its PID; tried again this often, this many times, before waiting
_PROBE_RETRY_SECONDS = 0.01
_PROBE_RETRIES = 30


def _parse(data: bytes) -> dict[str, Any] | None:
    """The holder's record: {"pid": N, ...what it is doing}, or None (empty, or a write in progress)."""
    lines = data.decode("utf-8", "replace").split("\n")
    head = lines[0].strip()
    if not head.isdigit():
        return None
    record: dict[str, Any] = {}
    if len(lines) > 2:  # (a record is followed by its newline: a torn write is not read)
        with contextlib.suppress(ValueError):
            loaded = json.loads(lines[1])
            if isinstance(loaded, dict):
                record = loaded
    record["pid"] = int(head)
    return record


def _read_record(fd: int) -> dict[str, Any] | None:
    try:
        return _parse(os.pread(fd, 4096, 0))
    except OSError:
        return None


class HeldLock(PublishedRun):
    """The lock while held: `publish` writes what the run is doing for other processes' `status`."""

    def __init__(self, fd: int, what: str) -> None:
        super().__init__(what)
        self.fd = fd
        self.publish(None, force=True)

    def _store(self, record: dict[str, Any]) -> bool:
        data = f"{os.getpid()}\n{json.dumps(record, ensure_ascii=False)}\n".encode()
        try:  # (on a full disk the record may not fit: the lock holds all the same)
            os.pwrite(self.fd, data, 0)
            os.ftruncate(self.fd, len(data))
        except OSError:
            return False
        return True


@contextlib.contextmanager
def index_lock(
    index_dir: Path,
    *,
    wait: bool = True,
    cancel: threading.Event | None = None,
    on_wait: Callable[[int | None], None] | None = None,
    timeout: float | None = None,
    what: str = "index",
) -> Iterator[HeldLock | None]:
    """Hold the write lock of the index in `index_dir` for the block.

    Busy: with `wait`, poll until it is free (`on_wait(pid)` once, then stop when `cancel` is set: raises
    IndexCancelled; after `timeout` seconds: IndexBusy); without, raise IndexBusy naming the holder. A folder
    where the lock file cannot be created (a read-only index) is not locked (yields None): nothing can be
    written there anyway. A lock file (or folder) that is a link is refused: IndexPathUnsafe."""
    index_dir = Path(index_dir)
    path = index_dir / LOCK_FILE
    try:
        with index_files.open_folder(index_dir, create=False) as dir_fd:
            if dir_fd is None:
                raise FileNotFoundError(index_dir)
            fd = index_files.open_file(index_dir, dir_fd, LOCK_FILE, os.O_RDWR | os.O_CREAT)
    except IndexPathUnsafe:
        raise
    except OSError as exc:
        log.debug("index lock %s unavailable (%s): not locking", path, exc)
        yield None
        return
    try:
        _acquire(fd, path, wait, cancel, on_wait, timeout)
        try:
            yield HeldLock(fd, what)
        finally:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _acquire(
    fd: int,
    path: Path,
    wait: bool,
    cancel: threading.Event | None,
    on_wait: Callable[[int | None], None] | None,
    timeout: float | None,
) -> None:
    from ...errors import IndexCancelled

    told = False
    retries = 0
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            record = _read_record(fd)
            if record is None and retries < _PROBE_RETRIES:  # a status probe, or a holder about to write
                retries += 1
                time.sleep(_PROBE_RETRY_SECONDS)
                continue
            pid = record["pid"] if record else None
            if not wait or (deadline is not None and time.monotonic() >= deadline):
                raise IndexBusy(pid, path.parent, describe(record), (record or {}).get("what")) from None
            if not told:
                told = True
                who = f"PID {pid}" if pid else "another process"
                log.warning("index in use by %s: waiting for it to finish", who)
                if on_wait is not None:
                    on_wait(pid)
            pause = POLL_SECONDS
            if deadline is not None:
                pause = max(0.0, min(pause, deadline - time.monotonic()))
            if cancel is not None and cancel.wait(pause):
                raise IndexCancelled("indexing cancelled while waiting for the index lock") from None
            if cancel is None:
                time.sleep(pause)


def other_run(index_dir: Path) -> dict[str, Any] | None:
    """Another process's run on this index, as it last published it ({"pid", "what", "phase", "filesDone", ...}),
    or None when no process holds the lock (or it is this process). Never blocks, never writes, never follows
    a link; a shared lock is held for the instant of the probe (a writer trying then retries at once)."""
    index_dir = Path(index_dir)
    try:
        with index_files.open_folder(index_dir, create=False) as dir_fd:
            if dir_fd is None:
                return None
            fd = os.open(LOCK_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except (OSError, IndexPathUnsafe):
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            pass  # held by a writer
        except OSError:
            return None
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        record = _read_record(fd)
        if record is None:  # the holder is writing its record: once more
            time.sleep(0.005)
            record = _read_record(fd) or {"pid": None}
    finally:
        os.close(fd)
    if record.get("pid") == os.getpid():
        return None
    return record

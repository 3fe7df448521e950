"""A snapshot of the search matrix beside the index (`.saipling/vectors.snapshot`, issue 34), so that a process
opening the index reads one file instead of every vector from the embedding cache (55k chunks: ~2 s of SQLite
rows; the snapshot: a few tens of ms), then catches up from the change journal since the seq it reflects.

It is a cache: written by a searching process after it read the whole matrix (and again after it patched many
rows), in a background thread from a frozen view of the matrix (storage/sqlite/vectors.py), and only while the
filesystem keeps FREE_MARGIN free beyond it; ignored (the matrix read from the cache, then the snapshot written
again) when it is of another index file (meta `index_id`), another vector key or size, older than the journal's
floor, newer than the journal, of another history of the index (the journal's row at its seq is gone or has
another random tag: an index.db restored from a backup and written past that seq), or damaged (its size or CRC-32
disagree). Deleting it costs one full read; `clear` removes it.

The file: 8 bytes of magic, a 4 KiB header (JSON, space-padded: version, index id, key, dims, rows, dtype, sign
words, seq, the tag of the journal's row at seq, payload bytes, CRC-32 of the payload), then the payload: ids
(int64), the steps (float32 x dims, a compact matrix only), the rows (int8 codes of a compact matrix: bit for bit
what a full read gives; a float32 matrix's unit vectors as float16, as the cache stores them, made unit vectors
again on reading: half the file, 42 MB at 55k chunks, where float32 rows made the snapshot 5x the text it indexes;
the cast and norm cost ~0.1-0.2 s at 55k x 384 under load), the sign bits (uint64 words, if any: since version 4
word-major, the first word of every row, then the second..., as the matrix searches them; row by row in version 3,
still read). All little-endian.

Written as a new file under a unique name in the folder (O_EXCL, never through a link: storage/sqlite/index_files),
then renamed over the old one: a rename is atomic, so two processes writing at once leave one whole snapshot, and a
reader sees the old file or the new one, never a mix. A compact one is mapped under a read lease (`Lease`): another
program truncating or rewriting the file in place waits until the mapping is no longer read."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import mmap
import os
import signal
import stat
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...lazy import np
from ..vector_matrix import MatrixState, VectorMatrix, unit_rows
from . import index_files

log = logging.getLogger(__name__)

NAME = "vectors.snapshot"
MAGIC = b"SAIPVEC1"
HEADER = 4096  # bytes of header after the magic (JSON, padded with spaces)
VERSION = 4  # 2: a float32 matrix's rows stored as float16; 3: the tag of the journal's row at its seq; 4: the sign
# bits word-major, as the matrix searches them (mapped as they are: no transposed copy, 48 MB and ~0.05-0.1 s of CPU
# at a million rows before the first answer)
READ_VERSIONS = (3, 4)  # a version 3 snapshot is still used (its bits transposed), and written again as 4 when due
# Below this many rows no snapshot is written: reading them from the cache takes a few ms anyway
MIN_ROWS = 2_000
_BLOCK = 65_536  # rows written (and checksummed) at a time: the copies stay small
# A temporary file this old is a leftover of a process killed while writing (SIGTERM runs no cleanup): removed by
# the next write (a write takes seconds; one in progress keeps its file's mtime fresh)
STALE_TMP_SECONDS = 3600
# A snapshot is written only while the filesystem keeps this much free beyond it (or its own size, if larger): a
# cache never takes the room the index's own writes (its WAL) need. Short of it the write is skipped (logged once).
FREE_MARGIN = 64 << 20
_CHECK_READ = 256 << 10  # bytes read at a time (into one buffer) by a mapped snapshot's check (Check)
_CHECK_MAPPED = 4 << 20  # bytes checked in place at a time while the lease is held (Check._mapped_part)
# A mapped snapshot is held under a read lease (Lease); how often its watcher looks for a process waiting to write it
LEASE_POLL = 0.1
# Leases are trusted only when the kernel lets a process that would write the file wait at least this long for the
# holder (/proc/sys/fs/lease-break-time, 45 s by default): the holder copies its rows first (1M rows: 0.65 s of CPU,
# 1.7 s at load 10, benchmarks/README.md S23)
MIN_LEASE_BREAK = 10


_crc32: Callable[..., int] | None = None


def crc32_function() -> Callable[..., int]:
    """zlib's CRC-32 (the same values), from ISA-L (`isal`, 3.5x faster: a million rows' check 0.18 -> 0.10 s of CPU)
    when it is installed, else from zlib."""
    global _crc32
    if _crc32 is None:
        try:
            from isal import isal_zlib

            _crc32 = isal_zlib.crc32
        except ImportError:
            _crc32 = zlib.crc32
    return _crc32


class NoRoom(OSError):
    """Too little free space for the snapshot and the margin (FREE_MARGIN): not written."""


def free_bytes(dir_fd: int) -> int | None:
    """Free bytes for an unprivileged writer on the filesystem of the folder `dir_fd`; None: not known here."""
    if not hasattr(os, "fstatvfs"):
        return None
    st = os.fstatvfs(dir_fd)
    return int(st.f_bavail) * int(st.f_frsize)


@dataclass
class Snapshot:
    """What a snapshot holds: rows as the matrix takes them (float32 unit vectors, or int8 codes with `steps`).
    A compact one's ids, codes and sign bits are arrays over a private mapping of the file (`check` not None: its
    CRC-32 is being verified in the background; nothing may be answered from it before `check.ok()`)."""

    ids: Any
    rows: Any
    steps: Any
    bits: Any
    seq: int
    check: Check | None = None
    lease: Lease | None = None  # the read lease held on a mapped snapshot (None: its rows were read into memory)
    word_major: bool = False  # `bits` is (words, rows), as the matrix holds them (version 4), else (rows, words)


class Lease:
    """A read lease (Linux `fcntl(F_SETLEASE, F_RDLCK)`) on a mapped snapshot. A mapping of a file is only as
    whole as the file: when another process truncates it (a backup restored over it, `rsync --inplace`, a shell's
    `>`), touching a page past its new end raises SIGBUS and kills the process, private (copy-on-write) pages
    included; and a rewrite in place changes the pages not yet copied. While the lease is held, a process opening
    the file to write it or truncating it waits (the kernel holds its open up to /proc/sys/fs/lease-break-time, or
    fails it at once with O_NONBLOCK) and the holder is told: the watcher thread sees the break (`breaking`), the
    store copies the rows it borrows from the mapping into memory of its own (`VectorMatrix.own`) and lets go
    (`release`); then the writer goes on. Nothing ever reads the mapping after the release.

    The kernel's notice is a signal (SIGURG here: ignored by default, so it never kills a process nor interrupts a
    call) that the watcher does not need: it asks the kernel (F_GETLEASE) every LEASE_POLL seconds. `take` gives
    None where no lease can be had (another OS, a file of another user, a network filesystem, leases disabled or
    their break time short, a writer holding the file open): the caller reads the rows into memory instead."""

    def __init__(self, fd: int, where: Path) -> None:
        self.where = where
        self._fd: int | None = fd
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        st = os.fstat(fd)
        self._seen = (st.st_size, st.st_mtime_ns)  # the file as mapped (`changed`)

    def changed(self) -> bool:
        """Whether the file is no longer as it was mapped (cut short or written: the kernel breaks a lease itself
        once a writer waited /proc/sys/fs/lease-break-time, e.g. while this process was stopped): its pages must
        not be touched (a page past a new end raises SIGBUS), the matrix is read again. True once let go."""
        with self._mutex:
            if self._fd is None:
                return True
            try:
                st = os.fstat(self._fd)
            except OSError:
                return True
            return (st.st_size, st.st_mtime_ns) != self._seen

    @classmethod
    def take(cls, fd: int, where: Path) -> Lease | None:
        """A read lease on the file open (read-only) at `fd`, held on a descriptor of its own; None when none."""
        setlease, setsig = getattr(fcntl, "F_SETLEASE", None), getattr(fcntl, "F_SETSIG", None)
        if setlease is None or setsig is None or not _lease_break_ok():
            return None
        own = os.dup(fd)
        try:
            fcntl.fcntl(own, setsig, signal.SIGURG)  # (the break's signal: SIGIO, a killer, otherwise)
            fcntl.fcntl(own, setlease, fcntl.F_RDLCK)
        except OSError as exc:
            os.close(own)
            log.debug("no lease on the vector snapshot in %s (%s): its rows are read into memory", where, exc)
            return None
        return cls(own, where)

    @contextlib.contextmanager
    def reading(self) -> Iterator[bool]:
        """Whether the file may be read through a mapping now (held, and no process waits to write it): the lease is
        not let go until the block ends (`release` waits)."""
        with self._mutex:
            held = self._fd is not None
            if held:
                try:
                    held = fcntl.fcntl(self._fd, fcntl.F_GETLEASE) == fcntl.F_RDLCK  # type: ignore[attr-defined]
                except OSError:
                    held = False
            yield held

    def breaking(self) -> bool:
        """Whether a process waits to write or truncate the file (or the lease is gone): let go now."""
        with self._mutex:
            if self._fd is None:
                return True
            try:
                return fcntl.fcntl(self._fd, fcntl.F_GETLEASE) != fcntl.F_RDLCK  # type: ignore[attr-defined]
            except OSError:
                return True

    def watch(self, on_break: Callable[[Lease], None]) -> None:
        """Call `on_break(self)` (from a thread of its own) once a process waits to write the file, unless the
        lease is released first; `on_break` copies what it needs from the mapping and calls `release`."""

        def run() -> None:
            try:
                while not self._stop.wait(LEASE_POLL):
                    if self.breaking():
                        if not self._stop.is_set():
                            on_break(self)
                        return
            finally:
                self.release()

        self._thread = threading.Thread(target=run, name="saipling-snapshot-lease", daemon=True)
        self._thread.start()  # (RuntimeError, no thread to be had: the caller lets the mapping go)

    def release(self) -> None:
        """Let the file go (idempotent; from any thread): a writer waiting for it goes on. The mapping must not be
        read from now on."""
        self._stop.set()
        with self._mutex:
            fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)  # type: ignore[attr-defined]
            os.close(fd)


_break_time: int | None = None


def _lease_break_ok() -> bool:
    """Whether a writer would wait long enough for a lease's holder (read once per process)."""
    global _break_time
    if _break_time is None:
        try:
            _break_time = int(Path("/proc/sys/fs/lease-break-time").read_text().strip())
        except (OSError, ValueError):
            _break_time = 0
    return _break_time >= MIN_LEASE_BREAK


class Check:
    """The CRC-32 of a mapped snapshot's payload, computed in a background thread (zlib and the reads release the
    GIL: it runs beside the first search instead of before it) from the file itself through a descriptor of its
    own, never from the mapping: the matrix patches the mapped rows (private pages) before the check ends. `ok()`
    waits for it. Fail closed: a read error, a short file or another CRC is not ok."""

    def __init__(
        self, fd: int, start: int, length: int, expected: int, where: Path, lease: Lease | None = None
    ) -> None:
        self.where = where
        self._lease = lease  # held: the payload is read in place (`_mapped_part`)
        self._fd, self._start, self._length, self._expected = fd, start, length, expected
        self._result: bool | None = None
        self._thread: threading.Thread | None = threading.Thread(
            target=self._run, name="saipling-snapshot-check", daemon=True
        )
        try:
            self._thread.start()
        except RuntimeError:  # (no thread to be had: checked now)
            self._thread = None
            self._run()

    def _run(self) -> None:
        crc, off, end = 0, self._start, self._start + self._length
        crc32 = crc32_function()
        buf = bytearray(min(_CHECK_READ, self._length))
        view = memoryview(buf)
        try:
            crc, off = self._mapped_part(crc32, off, end)
            while off < end:
                want = min(len(buf), end - off)
                if hasattr(os, "preadv"):
                    got = os.preadv(self._fd, [view[:want]], off)
                    data: Any = view[:got]
                else:  # (no preadv on this platform: a new buffer each read)
                    data = os.pread(self._fd, want, off)
                    got = len(data)
                if not got:
                    break
                crc = crc32(data, crc)
                off += got
            self._result = off == end and crc == self._expected
        except OSError as exc:
            log.info("vector snapshot in %s not checked: %s", self.where, exc)
            self._result = False
        finally:
            os.close(self._fd)

    def _mapped_part(self, crc32: Callable[..., int], off: int, end: int) -> tuple[int, int]:
        """The CRC-32 of the payload from `off`, read in place through a read-only mapping of the file of its own
        (never the matrix's private pages) while the lease is held and not breaking (`Lease.reading`: never
        released in the middle of a step): no copy into a buffer, which cost more than the CRC itself (a million
        rows: 0.27 s of CPU read, 0.10 s mapped). Returns (crc, where it stopped: the rest is read)."""
        lease = self._lease
        if lease is None or end <= off:
            return 0, off
        crc = 0
        try:
            buf = mmap.mmap(self._fd, 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):
            return 0, off
        view = memoryview(buf)
        try:
            while off < end:
                with lease.reading() as held:
                    if not held:
                        break
                    step = min(_CHECK_MAPPED, end - off)
                    crc = crc32(view[off : off + step], crc)
                off += step
        finally:
            view.release()
            buf.close()
        return crc, off

    def ok(self) -> bool:
        """Whether the payload is whole (waits for the check)."""
        if self._thread is not None:
            self._thread.join()
        return bool(self._result)


def _le(dtype: str) -> Any:
    return np.dtype(dtype).newbyteorder("<")


def write(folder: Path, matrix: VectorMatrix | MatrixState, *, index_id: str, key: str, seq: int, tag: int) -> int:
    """Write a snapshot of `matrix` (which reflects the journal up to `seq`, whose row there has the random `tag`:
    schema.JOURNAL_COLUMNS) into `folder`; returns its bytes.
    Raises NoRoom when the filesystem lacks its size plus FREE_MARGIN (nothing written), OSError (a write that
    failed removes its temporary file) / IndexPathUnsafe (the caller logs them: a snapshot is never worth failing
    a search)."""
    compact = matrix.steps is not None
    n, dims = len(matrix), matrix.dims
    words = (dims + 63) // 64 if compact and matrix.has_bits else 0
    itemsize = 1 if compact else 2
    payload = n * 8 + (dims * 4 if compact else 0) + n * dims * itemsize + n * words * 8
    with index_files.open_folder(folder, create=False) as dir_fd:
        if dir_fd is None:
            raise FileNotFoundError(folder)
        _remove_leftovers(dir_fd)
        size = len(MAGIC) + HEADER + payload
        free = free_bytes(dir_fd)
        if free is not None and free < size + max(size, FREE_MARGIN):
            raise NoRoom(
                f"{free / 1e6:.1f} MB free, the snapshot needs {size / 1e6:.1f} MB and"
                f" {max(size, FREE_MARGIN) / 1e6:.0f} MB are kept free for the index"
            )
        tmp = f".{NAME}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
        fd = index_files.open_file(folder, dir_fd, tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            with os.fdopen(fd, "wb") as f:
                f.seek(len(MAGIC) + HEADER)
                crc, rows_seen, crc32 = 0, 0, crc32_function()
                # the ids first, then the steps, the rows and the bits: each section a pass over the live blocks
                for part in ("ids", "steps", "rows", "bits"):
                    if part == "steps":
                        if compact:
                            data = np.ascontiguousarray(matrix.steps, dtype=_le("f4")).tobytes()
                            crc = crc32(data, crc)
                            f.write(data)
                        continue
                    if part == "bits" and not words:
                        continue
                    if part == "bits":  # word-major: each word of every row, one word at a time
                        for w in range(words):
                            for _, _, bits in matrix.live_blocks(_BLOCK, rows=False):
                                view = memoryview(np.ascontiguousarray(bits[:, w], dtype=_le("u8"))).cast("B")
                                crc = crc32(view, crc)
                                f.write(view)
                        continue
                    for ids, rows, _ in matrix.live_blocks(_BLOCK, rows=part == "rows"):
                        if part == "ids":
                            arr = ids.astype(_le("i8"))
                            rows_seen += len(ids)
                        else:
                            arr = rows.astype(_le("i1") if compact else _le("f2"), copy=False)
                        view = memoryview(np.ascontiguousarray(arr)).cast("B")
                        crc = crc32(view, crc)
                        f.write(view)
                if rows_seen != n:
                    raise ValueError(f"the matrix changed while it was written ({rows_seen} rows, {n} expected)")
                header = {
                    "version": VERSION,
                    "index_id": index_id,
                    "key": key,
                    "dims": dims,
                    "rows": n,
                    "dtype": "int8" if compact else "float16",
                    "sign_words": words,
                    "seq": int(seq),
                    "tag": int(tag),
                    "payload": payload,
                    "crc": crc,
                }
                text = json.dumps(header).encode()
                if len(text) > HEADER:
                    raise ValueError("snapshot header too long")
                f.seek(0)
                f.write(MAGIC + text.ljust(HEADER, b" "))
            index_files.rename(dir_fd, tmp, NAME)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
    return size


def _remove_leftovers(dir_fd: int) -> None:
    """Delete the temporary snapshots of killed writers (regular files named as `write` names them, older than
    STALE_TMP_SECONDS) in the folder; a link of that name is left alone."""
    if os.listdir not in os.supports_fd:
        return
    now = time.time()
    for name in os.listdir(dir_fd):
        if not (name.startswith(f".{NAME}.") and name.endswith(".tmp")):
            continue
        with contextlib.suppress(OSError):
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISREG(st.st_mode) and now - st.st_mtime > STALE_TMP_SECONDS:
                os.unlink(name, dir_fd=dir_fd)
                log.info("removed a temporary vector snapshot left by a killed process: %s", name)


@contextlib.contextmanager
def _opened(folder: Path) -> Iterator[Any]:
    """The snapshot in `folder` open for reading (no link followed), or None when there is none."""
    with index_files.open_folder(folder, create=False) as dir_fd:
        if dir_fd is None:
            yield None
            return
        try:
            fd = index_files.open_file(folder, dir_fd, NAME, os.O_RDONLY)
        except FileNotFoundError:
            yield None
            return
        with os.fdopen(fd, "rb") as f:
            yield f


def read(
    folder: Path,
    *,
    index_id: str,
    key: str,
    dims: int,
    floor: int,
    seq_now: int,
    tag_at: Callable[[int], int | None],
) -> Snapshot | None:
    """The snapshot in `folder` if it is of this index, key and size, reaches back no further than the journal
    (`floor` <= its seq <= `seq_now`), is of this history of the index (`tag_at(seq)`, the tag of the journal's row
    at its seq, is the one it recorded: an index restored from a backup and written past that seq has another row
    there) and is whole; else None (why: logged). A compact one is mapped, not read (its payload's CRC-32 checked
    in the background: Snapshot.check), so nothing proportional to its rows is done before the first search."""
    try:
        with _opened(folder) as f:
            if f is None:
                return None
            h = _header(f, index_id=index_id, key=key, dims=dims, floor=floor, seq_now=seq_now, tag_at=tag_at)
            if h["dtype"] == "int8":
                return _mapped(f, h, dims, folder)
            return _read(f, h, dims)
    except Exception as exc:  # noqa: BLE001 - a snapshot that cannot be read is only a cache miss
        log.info("vector snapshot in %s not used: %s", folder, exc)
        return None


def _header(
    f: Any, *, index_id: str, key: str, dims: int, floor: int, seq_now: int, tag_at: Callable[[int], int | None]
) -> dict[str, Any]:
    """The header of the snapshot open in `f` (left at the start of its payload) if it is of this index, key and size,
    within the journal, of this history of the index and of the size it says; else ValueError (why)."""
    head = f.read(len(MAGIC) + HEADER)
    if len(head) != len(MAGIC) + HEADER or head[: len(MAGIC)] != MAGIC:
        raise ValueError("not a vector snapshot (or cut short)")
    h = json.loads(head[len(MAGIC) :].decode())
    if h.get("version") not in READ_VERSIONS:
        raise ValueError(f"version {h.get('version')}")
    seq = int(h["seq"])
    if h["index_id"] != index_id or h["key"] != key or int(h["dims"]) != dims:
        raise ValueError("of another index, vector key or size")
    if not floor <= seq <= seq_now:
        raise ValueError(f"its seq {seq} is outside the journal ({floor}..{seq_now})")
    if tag_at(seq) != int(h["tag"]):
        raise ValueError(
            f"of another history of the index (the journal's row at seq {seq} differs: a restored backup?)"
        )
    if h.get("dtype") not in ("int8", "float16"):
        raise ValueError(f"rows of {h.get('dtype')}")
    size = os.fstat(f.fileno()).st_size
    if size != len(MAGIC) + HEADER + int(h["payload"]):
        raise ValueError(f"{size} bytes, the header says {len(MAGIC) + HEADER + int(h['payload'])}")
    return h


def _mapped(f: Any, h: dict[str, Any], dims: int, folder: Path) -> Snapshot:
    """A compact snapshot (header checked, `f` open on it) as arrays over a private, copy-on-write mapping of the
    file (the matrix writes its rows in place: its pages become its own, the file is never written), held under a
    read lease (Lease: no process writes or truncates the file before the holder copied its rows and let go), and
    the check of its CRC-32 started (on a descriptor of its own). ~0.5 s of reading and checking at a million rows
    is left to the pages the searches touch and to the background check. Without a lease the sections are read
    into memory instead (the same check in the background): a mapping nothing protects is never made."""
    n, words = int(h["rows"]), int(h["sign_words"])
    if int(h["payload"]) != n * 8 + dims * 4 + n * dims + n * words * 8:  # (the CRC covers the payload, not these)
        raise ValueError("its sections do not add up to its payload")
    start = len(MAGIC) + HEADER
    lease = Lease.take(f.fileno(), folder)
    try:
        if lease is not None and os.fstat(f.fileno()).st_size != start + int(h["payload"]):
            raise ValueError("its size changed as it was opened")  # (written before the lease was taken)
        buf: Any = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) if lease is not None else None
        off = start

        def section(count: int, dtype: str) -> Any:
            nonlocal off
            if buf is not None:
                arr = np.frombuffer(buf, dtype=_le(dtype), count=count, offset=off)
            else:  # (read into memory: numpy's allocation)
                arr = np.empty(count, dtype=_le(dtype))
                f.seek(off)
                if f.readinto(memoryview(arr).cast("B")) != arr.nbytes:
                    raise ValueError("cut short")
            off += arr.nbytes
            return arr

        ids = section(n, "i8")
        steps = section(dims, "f4").astype(np.float32)  # (a copy: dims floats)
        if not (np.isfinite(steps).all() and (steps > 0).all()):  # (scored before the CRC check ends: never NaN)
            raise ValueError("its steps are not positive numbers")
        rows = section(n * dims, "i1").reshape(n, dims)
        bits = section(n * words, "u8").reshape(_bits_shape(h, n, words)) if words else None
        check = Check(os.dup(f.fileno()), start, int(h["payload"]), int(h["crc"]), folder, lease)
    except BaseException:
        if lease is not None:
            lease.release()
        raise
    return Snapshot(
        ids=ids.astype(np.int64, copy=False),
        rows=rows,
        steps=steps,
        bits=bits,
        seq=int(h["seq"]),
        check=check,
        lease=lease,
        word_major=int(h["version"]) >= 4,
    )


def _bits_shape(h: dict[str, Any], n: int, words: int) -> tuple[int, int]:
    """The shape of a snapshot's sign bits: (words, rows) since version 4, (rows, words) before."""
    return (words, n) if int(h["version"]) >= 4 else (n, words)


def _read(f: Any, h: dict[str, Any], dims: int) -> Snapshot | None:
    seq = int(h["seq"])
    n, words, compact = int(h["rows"]), int(h["sign_words"]), h["dtype"] == "int8"
    crc = 0

    def section(shape: tuple[int, ...], dtype: str) -> Any:
        nonlocal crc
        arr = np.empty(shape, dtype=_le(dtype))
        view = memoryview(arr).cast("B")
        if f.readinto(view) != len(view):
            raise ValueError("cut short")
        crc = crc32_function()(view, crc)
        return arr

    ids = section((n,), "i8")
    steps = section((dims,), "f4") if compact else None
    rows = section((n, dims), "i1" if compact else "f2")
    bits = section(_bits_shape(h, n, words), "u8") if words else None
    if crc != int(h["crc"]):
        raise ValueError("damaged (CRC-32 differs)")
    if not compact:  # float16 on disk: unit float32 vectors again, as a full read of the cache gives them
        half = rows
        rows = np.empty((n, dims), dtype=np.float32)
        for i in range(0, n, _BLOCK):
            rows[i : i + _BLOCK] = unit_rows(half[i : i + _BLOCK])
    return Snapshot(
        ids=ids.astype(np.int64, copy=False),
        rows=rows,
        steps=steps,
        bits=bits,
        seq=seq,
        word_major=int(h["version"]) >= 4,
    )


@dataclass
class Counted:
    """What a snapshot says about the rows it holds without reading them (`count`): the journal's seq it reflects,
    its rows, and the ids of its rows when asked for."""

    seq: int
    rows: int
    ids: Any  # int64 array, or None when not asked for


def count(
    folder: Path,
    *,
    index_id: str,
    key: str,
    dims: int,
    floor: int,
    seq_now: int,
    tag_at: Callable[[int], int | None],
    ids_for: Callable[[int, int], bool],
) -> Counted | None:
    """The rows of the snapshot in `folder`, read from its header (4 KiB), with the same checks as `read` but the
    CRC-32 of the payload (that would read the whole file: ~440 MB at a million chunks): of this index, key and
    size, within the journal, of this history of the index, and of the size its header says. `ids_for(seq, rows)`:
    whether the ids of its rows are wanted too (8 bytes a row, read from the start of the payload), e.g. when the
    journal names changes since `seq`. None when there is no snapshot that fits (why: logged at debug level)."""
    try:
        with _opened(folder) as f:
            if f is None:
                return None
            h = _header(f, index_id=index_id, key=key, dims=dims, floor=floor, seq_now=seq_now, tag_at=tag_at)
            n, seq = int(h["rows"]), int(h["seq"])
            if not ids_for(seq, n):
                return Counted(seq=seq, rows=n, ids=None)
            ids = np.empty(n, dtype=_le("i8"))
            if f.readinto(memoryview(ids).cast("B")) != n * 8:
                raise ValueError("cut short")
            return Counted(seq=seq, rows=n, ids=ids.astype(np.int64, copy=False))
    except Exception as exc:  # noqa: BLE001 - a snapshot that cannot be read is only a cache miss
        log.debug("vector snapshot in %s not counted: %s", folder, exc)
        return None


def remove(folder: Path) -> None:
    """Delete the snapshot (clear); a missing one is fine."""
    with index_files.open_folder(folder, create=False) as dir_fd:
        if dir_fd is None:
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(NAME, dir_fd=dir_fd)

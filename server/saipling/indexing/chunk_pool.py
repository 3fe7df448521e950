"""Chunking one file's bytes, here or in worker processes beside the indexer.

`chunk_bytes` is the whole text side of one file: decode, frontmatter, CommonMark parse, chunks. A first index
runs it for every file before the model gets any work, and it is pure Python: one core, the GIL, while the
other cores wait (on the 13th Age vault it was 0.9 s of the 1.7 s a full index spent outside the model). A
`ChunkPool` runs it in worker processes while the indexer keeps reading and storing; `ReadAhead` hands them
groups of files a window ahead and gives the indexer the results in file order. When the group the indexer
needs next is still being chunked, the indexer chunks the last group no worker has taken yet (the pool's queue
holds a group or two per worker it cannot take back: for those the indexer waits). Small runs (an edit, a few
files) start no workers: one takes ~0.15 s to start.
"""

from __future__ import annotations

import hashlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import BrokenExecutor, Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ..files.metadata import FileMeta, extract_metadata
from ..files.textio import BinaryFile, decode
from ..markdown.blocks import quiet_parser_logs
from ..markdown.chunker import Chunk, ChunkLimits, chunk_document, chunk_fields
from ..markdown.parse_memo import ParseMemo, memo_of, parse_with_memo
from ..markdown.terms import CJK_RE

log = logging.getLogger(__name__)

# A run starts workers when it has at least this many files to chunk and this much text: below that, starting
# them costs more than they save.
POOL_MIN_FILES = 48
POOL_MIN_BYTES = 1 << 20
MAX_WORKERS = 4  # the indexer itself stores (one writer), so more chunkers stop paying off
WORKERS_ENV = "SAIPLING_CHUNK_WORKERS"


@dataclass
class Chunked:
    """What chunking one file gave: its chunks, or why it is skipped (`skipped`, with `detail` to log)."""

    encoding: str = ""
    decode_warning: str | None = None
    meta: FileMeta | None = None
    chunks: list[Chunk] | None = None
    memo: ParseMemo | None = None
    skipped: str | None = None
    detail: str | None = None  # what to log when skipped: the decoder's reason, or the chunker's traceback
    crashed: bool = False  # skipped because the chunker raised (a bug to report), not because of the file
    in_worker: bool = False  # chunked in a worker process, whose log lines go nowhere: the indexer logs them
    cjk: bool = True  # the text may hold a CJK character (False: it holds none, so no chunk has CJK keywords)

    # A worker sends a million chunks back at 20,000 files: they travel as tuples of their fields, not as a
    # dataclass's dict of them by name each (less than half the CPU to pickle and unpickle, benchmarks row S22).
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        if self.chunks is not None:
            state["chunks"] = [chunk_fields(c) for c in self.chunks]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        if state.get("chunks") is not None:
            state["chunks"] = [Chunk(*f) for f in state["chunks"]]
        self.__dict__.update(state)


def chunk_bytes(
    rel: str,
    data: bytes,
    limits: ChunkLimits,
    count: Callable[[str], int],
    memo: ParseMemo | None = None,
    previews: bool = True,
) -> Chunked:
    """Decode, parse and chunk one file (re-using `memo`, the parse of its last version); never raises. `previews`
    False: the chunks' previews left "" (markdown.chunker.chunk_document)."""
    try:
        decoded = decode(data, rel)
    except BinaryFile as exc:
        return Chunked(skipped="binary or undecodable", detail=str(exc))
    except Exception as exc:  # a decoder bug: this file is skipped, never the ones chunked with it
        return Chunked(
            skipped=f"could not be chunked ({type(exc).__name__}: {exc})", detail=traceback.format_exc(), crashed=True
        )
    try:
        meta = extract_metadata(rel, decoded.text)
        blocks = parse_with_memo(decoded.text, memo)  # an edited file: from its last unchanged heading
        chunks = chunk_document(decoded.text, meta, limits, count, blocks, previews)
        new_memo = memo_of(decoded.text, blocks)
    except Exception as exc:  # one odd file must never stop a run over thousands
        return Chunked(
            decoded.encoding,
            decoded.warning,
            skipped=f"could not be chunked ({type(exc).__name__}: {exc})",
            detail=traceback.format_exc(),
            crashed=True,
        )
    # (once per file, in the worker; from what is stored, not the file's bytes: frontmatter such as
    # `title: "\u6d77\u8fba"` is ASCII in the file and CJK in the chunk text and heading path it renders to)
    # (one search of them all joined: the pattern is one character, so it finds one in the joined text exactly when
    # some chunk's text or heading path holds one)
    stored = "\n".join([s for c in chunks for s in (c.text, c.heading_path) if s])
    cjk = not stored.isascii() and CJK_RE.search(stored) is not None
    return Chunked(decoded.encoding, decoded.warning, meta, chunks, new_memo, cjk=cjk)


def worker_count(files: int, size: int) -> int:
    """Workers worth starting for a run chunking `files` files of `size` bytes in all (0: chunk in process).

    SAIPLING_CHUNK_WORKERS=N sets it for every run of two files or more (0: never), at most one a CPU this process
    may run on (40 on 2 CPUs started 40 processes, each loading the chunker: lowered, with a warning)."""
    forced = os.environ.get(WORKERS_ENV, "").strip()
    if forced:
        try:
            asked = max(0, int(forced))
        except ValueError:
            log.warning("%s=%r is not a number of workers; ignored", WORKERS_ENV, forced)
        else:
            cpus = _cpus()
            if asked > cpus:
                _warn_lowered(forced, cpus)
            return min(asked, cpus) if files >= 2 else 0
    if files < POOL_MIN_FILES or size < POOL_MIN_BYTES:
        return 0
    return max(0, min(_cpus() - 1, MAX_WORKERS))


def _cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows: no CPU affinity to ask
        return os.cpu_count() or 1


_lowered_told: set[str] = set()  # the values already warned about (a server runs many passes)


def _warn_lowered(forced: str, cpus: int) -> None:
    if forced not in _lowered_told:
        _lowered_told.add(forced)
        log.warning(
            "%s=%s is more workers than the %d CPU%s this process may use: %d started",
            WORKERS_ENV,
            forced,
            cpus,
            "" if cpus == 1 else "s",
            cpus,
        )


# -- the worker side -------------------------------------------------------------------------------------------
_limits: ChunkLimits | None = None
_count: Callable[[str], int] | None = None


def _start_worker(limits: ChunkLimits, count: Callable[[str], int]) -> None:
    global _limits, _count
    _limits, _count = limits, count
    # stdout may be a protocol channel (the LSP and MCP servers): nothing in a worker may ever write to it
    try:
        os.dup2(2, 1)
    except OSError:  # no stderr (a daemon, pythonw)
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in the CLI is for the indexer, which stops the pool
    # the indexer logs what a worker's files warned about
    logging.getLogger("saipling").setLevel(logging.CRITICAL + 1)
    quiet_parser_logs()  # (nor markdown-it's debug calls: ~5% of the worker's CPU, benchmarks row S30)
    parent = multiprocessing.parent_process()
    if parent is not None:  # a killed indexer (kill -9) must not leave its workers waiting for work forever
        threading.Thread(target=_exit_with, args=(parent.sentinel,), daemon=True).start()


def _exit_with(sentinel: int) -> None:
    multiprocessing.connection.wait([sentinel])
    os._exit(0)


def _chunk_in_worker(rel: str, data: bytes, memo: ParseMemo | None) -> Chunked:
    assert _limits is not None and _count is not None
    # (nor a preview: the SQLite index stores none, and a backend that does makes it in the indexer,
    # text_phase.TextPhase._rows: 10.9 of the 36 MB a worker sent back for the 55k tree, benchmarks row S28)
    chunked = chunk_bytes(rel, data, _limits, _count, memo, previews=False)
    chunked.in_worker = True
    for c in chunked.chunks or ():
        # the indexer stores no embedding text (the embedding phase makes it again from the stored row): a
        # second copy of every chunk's text less to pickle and send back (benchmarks row S22)
        c.embed_text = ""
    return chunked


class ChunkPool:
    """Worker processes running `chunk_bytes` with fixed limits and token counter (both picklable)."""

    take_back = True  # a task no worker has started may be taken back and done by the caller (tests: False)

    def __init__(self, workers: int, limits: ChunkLimits, count: Callable[[str], int]) -> None:
        # spawn: the indexer runs in a threaded server (pygls, the watcher, the model's threads); forking that
        # copies locks held by other threads. A spawned worker imports only the chunker and the tokenizer.
        ctx = multiprocessing.get_context("spawn")
        self._ex = ProcessPoolExecutor(workers, ctx, initializer=_start_worker, initargs=(limits, count))
        self.workers, self.broken, self.done = workers, False, 0  # done: groups chunked by a worker
        # a task per worker starts them all now (the executor starts one per task finding none idle); done
        # once a worker is up, or could not start
        self._started: list[Future[int]] = []
        try:
            for _ in range(workers):
                self._started.append(self._ex.submit(os.getpid))
        except Exception as exc:  # noqa: BLE001 - no process or thread to be had: the caller chunks alone
            self._broke(exc)

    @property
    def ready(self) -> bool:
        """A worker has started (~0.1 s after the pool: a Python process importing the chunker); until
        then the caller chunks what it needs itself rather than queueing it behind the start."""
        return self.broken or not self.take_back or any(f.done() for f in self._started)

    def submit(
        self, rels: list[str], datas: list[bytes], memos: list[ParseMemo | None]
    ) -> Future[list[Chunked]] | None:
        """Queue a group of files; None once the pool cannot take work (a worker died): the caller chunks
        them itself."""
        if self.broken:
            return None
        try:
            return self._ex.submit(_chunk_group, rels, datas, memos)
        except Exception as exc:  # BrokenProcessPool, or shut down
            self._broke(exc)
            return None

    def result(self, fut: Future[list[Chunked]]) -> list[Chunked] | None:
        """The worker's result; None when the caller should chunk the files itself: the task was not started
        (taken back), its result could not come back, or the worker died (then the pool takes no more work)."""
        if self.take_back and fut.cancel():
            return None
        try:
            got = fut.result()
        except BrokenExecutor as exc:
            self._broke(exc)
            return None
        except Exception as exc:  # noqa: BLE001 - e.g. a result that could not be pickled: chunked here instead
            log.debug("a chunking task failed (%s: %s); chunked in process", type(exc).__name__, exc)
            return None
        self.done += 1
        return got

    def _broke(self, exc: BaseException) -> None:
        if not self.broken:
            log.warning("chunking workers stopped (%s: %s); chunking in process", type(exc).__name__, exc)
        self.broken = True

    def close(self) -> None:
        self._ex.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> ChunkPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# Files go to a worker in groups of up to this many files or bytes: each task is a round trip through the
# pool's feeder thread, which needs the GIL the indexer holds while it chunks and stores (file by file, the
# worker sat idle waiting for its next file and did 300 of 1,001).
GROUP_FILES = 16
GROUP_BYTES = 64 << 10
READ_AHEAD_BYTES = 32 << 20  # reading ahead stops once this much is held (one file may go past it)


def _chunk_group(rels: list[str], datas: list[bytes], memos: list[ParseMemo | None]) -> list[Chunked]:
    return [_chunk_in_worker(r, d, m) for r, d, m in zip(rels, datas, memos, strict=True)]


@dataclass
class _Group:
    """Consecutive files of a run chunked together: by a worker (`fut`), or here (`here`)."""

    rels: list[str] = field(default_factory=list)
    datas: list[bytes] = field(default_factory=list)
    memos: list[ParseMemo | None] = field(default_factory=list)
    last: int = -1  # the run's index of its last file
    closed: bool = False  # full: handed to the pool (or to the indexer, when the pool takes no more work)
    fut: Future[list[Chunked]] | None = None
    here: list[Chunked] | None = None


@dataclass
class Early:
    """One file read ahead of the indexer: its bytes (or why not), when, and the group it is chunked in."""

    data: bytes | None
    error: Exception | None  # why it could not be read (an OSError: unreadable; anything else: a failure)
    read_ns: int
    seconds: float
    digest: str
    generation: int
    group: _Group | None = None
    pos: int = 0


def read_early(path: Any, read: Callable[[Any], bytes], generation: int = 0) -> Early:
    """Read one file with `read` (an exception kept for its turn, not raised), timed and hashed."""
    t0 = time.perf_counter()
    try:
        data = read(path)
    except Exception as exc:  # noqa: BLE001 - it fails this file when the indexer takes it, not the ones before
        return Early(None, exc, time.time_ns(), time.perf_counter() - t0, "", generation)
    read_ns, seconds = time.time_ns(), time.perf_counter() - t0
    return Early(data, None, read_ns, seconds, hashlib.sha256(data).hexdigest(), generation)


class ReadAhead:
    """The files of a run read a window ahead of the indexer, those whose text changed chunked by a pool.

    `changed(entry, digest)` says whether a file's bytes need chunking (and with what parse memo, else False);
    `generation()` counts the indexer's writes from other threads: a file read before one of them (a refresh
    of a saved file between two batches) is read again when its turn comes, never stored from the old bytes.
    While the worker holding the indexer's next file is busy, the indexer chunks the last group no worker
    has started: the two work side by side, never on the same file."""

    def __init__(
        self,
        todo: Sequence[Any],
        pool: ChunkPool,
        read: Callable[[Any], bytes],
        changed: Callable[[Any, str], ParseMemo | None | bool],
        generation: Callable[[], int],
        window: int,
        chunk_here: Callable[[str, bytes, ParseMemo | None], Chunked],
    ) -> None:
        self._todo, self._pool, self._read = todo, pool, read
        self._changed, self._generation, self._window, self._chunk_here = (
            changed,
            generation,
            window,
            chunk_here,
        )
        self._early: dict[int, Early] = {}
        self._groups: list[_Group] = []  # submitted or open, in order
        self._next = 0
        self._bytes = 0  # of the files read ahead and not taken yet

    def take(self, i: int) -> Early | None:
        """File `i` of the run as read ahead (None: read it now); reads on to keep the window full."""
        self._next = max(self._next, i)
        self._submit_held(i)
        while self._next < min(len(self._todo), i + 1 + self._window) and (
            self._next == i or self._bytes < READ_AHEAD_BYTES
        ):
            self._early[self._next] = self._read_one(self._next)
            self._next += 1
            if self._next == len(self._todo) and self._groups and not self._groups[-1].closed:
                self._submit(self._groups[-1])  # the run's last files: a worker's too
        self._groups = [g for g in self._groups if g.last >= i]
        early = self._early.pop(i, None)
        if early is not None and early.data is not None:
            self._bytes -= len(early.data)
        if early is not None and early.generation != self._generation():
            return None  # read before a refresh: read again (each file read ahead is checked on its turn)
        return early

    def result(self, early: Early) -> Chunked | None:
        """File `early`'s chunks (None: chunk it now)."""
        g = early.group
        if g is None:
            return None
        if g.fut is None and g.here is None:  # the reading front's open group (or the pool took no more work)
            g.closed = True  # (files read after it start a new group)
            self._here(g)
        while g.here is None and g.fut is not None and not g.fut.done():
            spare = next((s for s in reversed(self._groups) if s is not g and self._steal(s)), None)
            if spare is None:
                break
        if g.here is None:
            got = self._pool.result(g.fut) if g.fut is not None else None  # cancels it when not started
            if got is None:
                self._here(g)
            else:
                g.here, g.datas = got, []
        return g.here[early.pos]  # type: ignore[index]

    def _steal(self, g: _Group) -> bool:
        if g.here is not None or g.fut is None or not self._pool.take_back or not g.fut.cancel():
            return False
        self._here(g)
        return True

    def _here(self, g: _Group) -> None:
        g.here = [self._chunk_here(r, d, m) for r, d, m in zip(g.rels, g.datas, g.memos, strict=True)]
        g.datas = []

    def _read_one(self, i: int) -> Early:
        entry = self._todo[i]
        early = read_early(entry.abs_path, self._read, self._generation())
        if early.data is not None:
            self._bytes += len(early.data)
            memo = self._changed(entry, early.digest)
            if memo is not False:
                g = self._groups[-1] if self._groups and not self._groups[-1].closed else None
                if g is not None and g.here is not None:  # (chunked already: never reopened)
                    g = None
                if g is None:
                    g = _Group()
                    self._groups.append(g)
                early.group, early.pos = g, len(g.rels)
                g.rels.append(entry.rel)
                g.datas.append(early.data)
                g.memos.append(memo or None)  # type: ignore[arg-type]
                g.last = i
                if len(g.rels) >= GROUP_FILES or sum(map(len, g.datas)) >= GROUP_BYTES:
                    self._submit(g)
        return early

    def _submit(self, g: _Group) -> None:
        g.closed = True
        if self._pool.ready:
            g.fut = self._pool.submit(g.rels, g.datas, g.memos)

    def _submit_held(self, i: int) -> None:
        """Once the pool is up, hand it the groups closed while it was starting, all but the one the indexer
        reaches next (its own: the worker starts on the one after)."""
        held = [g for g in self._groups if g.closed and g.fut is None and g.here is None and g.last >= i]
        if held and self._pool.ready and not self._pool.broken:
            for g in held[1:]:
                g.fut = self._pool.submit(g.rels, g.datas, g.memos)

    @property
    def workers_used(self) -> int:
        """The pool's workers, when they chunked any of the run's files (else 0)."""
        return self._pool.workers if self._pool.done else 0

    def close(self) -> None:
        for g in self._groups:
            if g.fut is not None:
                g.fut.cancel()
        self._early.clear()
        self._groups.clear()

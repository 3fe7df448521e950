"""Exact KNN over every embedded chunk: one in-memory float32 matrix, patched in place by the store's writes.

sqlite-vec stays the store of record (vectors live in the index file); this is the search-time copy. A brute
force matrix-vector product is exact (recall 1.0) and as fast as numpy gets, where vec0's MATCH is 4-10x slower.
Writes cost O(rows changed): removed rows become holes (zero vector, a unique negative id) that later additions
refill, and new rows go into spare capacity that grows geometrically, so rewriting one file never copies the
whole matrix. The matrix is compacted once holes pass a quarter of it.

A big matrix (more than COMPACT_FLOATS floats: ~170k chunks of 384 dimensions) is held compact instead (issue
34): one int8 code per dimension, each dimension scaled by its own step (from the largest magnitude seen in a
sample of the vectors, with headroom; a value past it is clipped), a quarter of the float32 memory. A search
scores every row on the codes, then rescores the best rescore_depth(k) candidates (~k + k / 2, at least RESCORE) on
their stored vectors (float16 on disk since schema 9, as float32), which the store reads from the index (`exact`):
recall@10 against exact float32 search on real MiniLM vectors is measured in benchmarks/bench_scale.py --recall.

A matrix made over a mapped snapshot's rows (a borrowed base) never copies them to grow: rows past the base go into
a tail of their own (`_grow_tail`), searched beside it block by block (the sign pass, the pool's codes, the
products); removed base rows are holes in the base's private pages. `own` folds the tail in.

Not thread-safe on its own: the store calls it under its lock. `freeze` gives a read-only view of the rows as they
are (`MatrixState`) that another thread may read without the lock (a snapshot written in the background): the
matrix saves the view's blocks of rows it is about to write while such a view is out (copy on write, a block at a
time), never changing the rows the view sees.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ..lazy import np  # numpy loads on first use (cold CLI path)

MIN_COMPACT = 1024  # holes tolerated before compaction is considered
GROWTH = 1.5
# Products up to this many floats (~10k x 384) always run on one BLAS thread: a second thread saves ~0.05 ms
# on a quiet machine, but on a busy one it waits for a core and a 6k x 384 product went from 0.1 ms to a p95 of
# 86 ms (benchmarks/bench_knn_load.py). Larger ones use every thread only while the machine has a core to spare.
ONE_THREAD_FLOATS = 4_000_000
# Above this many floats the matrix is held as int8 codes (a quarter of the memory; scoring the codes costs about
# what the float32 product did) and the best candidates are rescored on exact vectors: 64M floats = 256 MB float32.
COMPACT_FLOATS = 64_000_000
# Candidates rescored on exact vectors: at least RESCORE, and k + k / 2 rounded up to a multiple of 8 (a search
# asks k = 100: 160). On 300 queries over 34,641 real MiniLM vectors, k = 100, a depth of 160 gave bit for bit the
# lists of 2 x k = 200 (300/300; 152 and 128: 299/300, 104: 285/300; the sign pool, not the depth, sets what is
# missed: benchmarks/README.md S35); 40 fewer exact reads, ~1 ms a search at 269k. A multiple of 8: numpy's product
# sums the rows past the last full block of 8 in another order, so at 150 a cosine differed from 200's by 1 ulp
# (246/300 lists not bit-identical)
RESCORE = 160
# A compact matrix first ranks every row by the Hamming distance of its sign bits to the query's (an eighth of the
# codes' bytes, 64 dimensions per popcount), keeps the nearest max(SIGN_POOL, rows / SIGN_SHARE) for its codes, then
# the best RESCORE for exact vectors. On 35k real MiniLM vectors a pool of 2,000 (5.7%) kept recall@10 at 0.997,
# 4,000 (11%) at 0.9993. The Hamming rank the true neighbours need grows slower than the rows (the 99th
# percentile ~1-3k from 35k to 1M rows; benchmarks/README.md S16, S21): a pool of rows / 40 (25k at 1M, where it was
# rows / 16) kept recall@10 at 0.9987-1.0 on a million rows of the real vectors and noisy copies of them, and
# covered >= 0.9967 of the true top 10 at every smaller size measured (S21). Needs numpy >= 2 (bitwise_count);
# without it every row is scored on its codes.
SIGN_POOL = 4000
SIGN_SHARE = 40
# The sign pass runs a block of rows at a time over word-major bits (each 64-dimension word of every row
# contiguous): XOR, popcount and sum on buffers that stay in the cache and are reused, where one pass over the whole
# (rows, words) array allocated three arrays of its size (page faults: ~60 ms of CPU at 1M rows) and summed 6
# words a row along the short axis. The pool's codes are gathered and scored a block at a time the same way.
SIGN_BLOCK = 65_536
POOL_BLOCK = 4096
# The sign pass and the pool's scoring share their blocks with one helper thread on a machine of two cores or more
# (numpy's XOR, popcount, gather and products release the GIL): each thread takes the next block until none is
# left, so a helper that gets no core costs the search at most the one block it took, never a wait for a half. Not
# gated on the load average as BLAS's threads are: at load 10-11 on 2 cores the whole semantic search at 1M still
# went from 189-232 to 177-181 ms wall p50, the process's CPU unchanged (benchmarks/README.md S21).
# KNN_THREADS = 1 turns it off.
KNN_THREADS = 2
# The first tail of a matrix whose base is a mapped snapshot (VectorMatrix._grow_tail): rows for the journal's new
# chunks without copying the base; it grows geometrically from here
TAIL_MIN = 4096
SAMPLE_ROWS = 20_000  # the rows whose largest magnitudes set the steps of the codes
HEADROOM = 1.25  # the codes' range over the largest magnitude of a dimension in the sample that set the steps


def rescore_depth(k: int) -> int:
    """How many of the best candidates by code score a search for `k` rescores on exact vectors."""
    return max(RESCORE, -(-(k + k // 2) // 8) * 8)


_SCAN_IDS = 8  # ids looked up by a scan of the ids (no sorted index built for them: VectorMatrix._find)

_blas: Any = None  # threadpoolctl's controller of numpy's BLAS, False when unavailable; built on first use
_blas_default = 0  # BLAS's own thread count, before we set any
_blas_now = 0  # the thread count we last set


def _blas_controller() -> Any:
    global _blas, _blas_default, _blas_now
    if _blas is None:
        try:
            from threadpoolctl import ThreadpoolController

            _blas = ThreadpoolController().select(user_api="blas") or False
        except Exception:  # not installed, or an unknown BLAS: numpy's own threads
            _blas = False
        if _blas:
            _blas_default = _blas_now = max(int(i["num_threads"]) for i in _blas.info())
    return _blas


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _busy() -> bool:
    try:
        return os.getloadavg()[0] >= _cores() - 0.5
    except (AttributeError, OSError):  # no load average on this platform
        return False


def set_blas_threads_for(floats: int) -> int:
    """Set numpy's BLAS threads for a matrix-vector product over `floats` elements: one for small products or
    while the load average says the cores are taken, else BLAS's default. Process-wide and left in place (a
    context that restored the count after every product made OpenBLAS wake its threads again: p95 0.5 -> 7 ms
    under load); changed only when the wanted count differs. Returns the count in effect (0: not controlled)."""
    global _blas_now
    blas = _blas_controller()
    if not blas:
        return 0
    want = 1 if floats <= ONE_THREAD_FLOATS or _busy() else _blas_default
    if want != _blas_now:
        blas.limit(limits=want)  # not as a context manager: stays until changed
        _blas_now = want
    return want


def _has_popcount() -> bool:
    return hasattr(np, "bitwise_count")


_helper: Any = None  # the thread that shares a search's blocks (a ThreadPoolExecutor of one), made on first use
_helper_lock = threading.Lock()


def _knn_helper() -> Any:
    """The helper thread's executor when a search may use it (KNN_THREADS > 1, two cores or more), else None."""
    global _helper
    if KNN_THREADS < 2 or _cores() < 2:
        return None
    with _helper_lock:
        if _helper is None:
            from concurrent.futures import ThreadPoolExecutor

            _helper = ThreadPoolExecutor(max_workers=1, thread_name_prefix="saipling-knn")
        return _helper


def _forget_helper() -> None:
    global _helper
    _helper = None  # (a forked child has the executor but not its thread: it makes its own)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_helper)


def in_blocks(blocks: int, work: Callable[[int, int], None]) -> None:
    """`work(block, slot)` for every block in 0..blocks-1: on this thread (slot 0) and, with two cores, on the helper
    thread too (slot 1), each taking the next block in turn (a slot's buffers are its own). A helper that has
    not started when this thread runs out of blocks is cancelled: never waited for."""
    take = itertools.count()  # (next() of a count is atomic under the GIL)

    def run(slot: int) -> None:
        while (b := next(take)) < blocks:
            work(b, slot)

    helper = _knn_helper() if blocks > 1 else None
    future = helper.submit(run, 1) if helper is not None else None
    try:
        run(0)
    finally:
        if future is not None and not future.cancel():
            future.result()  # (running: it finishes the block it took; its error, if any, raised here)


class VectorMatrix:
    def __init__(
        self,
        ids: np.ndarray,
        mat: np.ndarray,
        min_compact: int = MIN_COMPACT,
        *,
        steps: np.ndarray | None = None,
        exact: Callable[[list[int]], dict[int, np.ndarray]] | None = None,
        bits: np.ndarray | None = None,
        word_major_bits: bool = False,
    ) -> None:
        """ids: (n,) int64 chunk ids; mat: (n, dims) float32 unit vectors, ideally numpy-allocated (numpy asks
        for transparent huge pages on large arrays; a scan over a buffer of 4 KiB pages ran ~7% slower).
        With `steps` (dims,) float32, `mat` holds int8 codes (code x step = the value): a compact matrix (see
        `quantize`). The matrix owns the arrays it is given (no copy when they are contiguous and of its dtype:
        a snapshot's mapped rows, storage/sqlite/snapshot.py): it writes them in place. `exact` reads exact float32
        vectors by chunk id (a compact matrix rescores its candidates
        with them; without it, the codes' scores are returned). `bits`: the codes' sign bits when known (`signs`
        of `mat`, from a snapshot: (rows, words), or (words, rows) with `word_major_bits`, then held as they are),
        else computed."""
        if mat.ndim != 2 or len(ids) != len(mat):
            raise ValueError("ids and matrix rows differ")
        self.dims = int(mat.shape[1])
        self._steps = None if steps is None else np.ascontiguousarray(steps, dtype=np.float32)
        self._ids = np.ascontiguousarray(ids, dtype=np.int64)
        self._mat = np.ascontiguousarray(mat, dtype=np.float32 if steps is None else np.int8)
        # the codes' sign bits, word-major: (words, capacity) uint64 (see _by_signs); None without popcount
        self._bits: np.ndarray | None = None
        if steps is not None and _has_popcount():
            words = (self.dims + 63) // 64
            if bits is not None and word_major_bits and bits.shape == (words, len(self._mat)):
                self._bits = np.ascontiguousarray(bits, dtype=np.uint64)  # (a snapshot's mapped words: no copy)
            else:
                ok = bits is not None and not word_major_bits and bits.shape == (len(self._mat), words)
                self._bits = word_major(bits if ok else signs(self._mat))
        self._scratch: _SignScratch | None = None  # the sign pass's reused buffers
        self._n = len(ids)  # rows in use, holes included; capacity is len(self._mat) + len(self._tail)
        # Rows past a borrowed base (a mapped snapshot) go into a tail of their own (`_reserve`): growing never
        # copies the base. Row r is the base's row r below len(self._mat), else the tail's row r - len(self._mat).
        self._tail = np.zeros((0, self.dims), dtype=self._mat.dtype)
        self._tail_bits: np.ndarray | None = (
            None if self._bits is None else np.zeros((self._bits.shape[0], 0), np.uint64)
        )
        self._live = int(np.count_nonzero(self._ids >= 0))
        # Where a chunk's row is: no dict of every id (a million entries cost 0.26 s of CPU and ~100 MB before the
        # first answer, which needs none: a search reads ids by row). Looked up (`_find`) in the ids sorted, built
        # on first use (a copy when they are sorted already, else an argsort: ~0.1 s at a million rows), and in the
        # rows placed since; an entry counts only while its row still holds that id (removals leave stale ones).
        self._index: tuple[np.ndarray, np.ndarray] | None = None  # (sorted ids, their rows)
        self._placed: dict[int, int] = {}  # chunk id -> row, of the rows written since `_index` was built
        self._holes: list[int] = []
        self._holes_arr: np.ndarray | None = None
        self._min_compact = min_compact
        self.exact = exact
        self._shared: MatrixState | None = None  # a view handed out by `freeze`: copy the arrays before a change

    @property
    def compact(self) -> bool:
        """Held as int8 codes (see the module docstring)."""
        return self._steps is not None

    @property
    def steps(self) -> np.ndarray | None:
        """Each dimension's step of a compact matrix's codes (None: float32 rows)."""
        return self._steps

    @property
    def has_bits(self) -> bool:
        return self._bits is not None

    def live_blocks(
        self, block: int = 65_536, rows: bool = True
    ) -> Iterable[tuple[np.ndarray, Any, np.ndarray | None]]:
        """(ids, rows, sign bits or None) of the live rows, a block of rows at a time (copies of that block only):
        what a snapshot of the matrix writes (storage/sqlite/snapshot.py). `rows` False: None for the rows."""
        for start in range(0, self._n, block):
            end = min(self._n, start + block)
            keep = self._ids[start:end] >= 0
            mat, bits = _span(self._mat, self._tail, self._bits, self._tail_bits, start, end)
            yield self._ids[start:end][keep], mat[keep] if rows else None, None if bits is None else bits.T[keep]

    @property
    def borrowed(self) -> bool:
        """Whether its rows, ids or sign bits are views of a buffer it does not own (a mapped snapshot: `own`; the
        bits of a matrix of <= 64 dimensions are one word a row, already word-major: never copied when made)."""
        bits = self._bits is not None and not self._bits.flags.owndata
        return bits or not (self._mat.flags.owndata and self._ids.flags.owndata)

    def own(self) -> None:
        """Its rows and ids copied into arrays of its own when they are views of another buffer (the pages of a
        mapped snapshot, storage/sqlite/snapshot.py, before the mapping is let go: a page of a file cut short
        kills the process that touches it), its tail folded in (one array of rows again). A frozen view out
        (`freeze`) goes on reading the old buffer: stop its reader before that buffer is let go."""
        base, tailed = len(self._mat), len(self._tail) > 0
        if not self._mat.flags.owndata or tailed:  # (the tail folded in: one array of rows again)
            mat = np.empty((base + len(self._tail), self.dims), dtype=self._mat.dtype)  # (numpy's: huge pages)
            np.copyto(mat[:base], self._mat)
            mat[base:] = self._tail
            self._mat, self._tail = mat, mat[:0]
        if not self._ids.flags.owndata:
            self._ids = self._ids.copy()
        if self._bits is not None and (not self._bits.flags.owndata or tailed):
            tail = self._tail_bits if self._tail_bits is not None else self._bits[:, :0]
            bits = np.empty((self._bits.shape[0], base + tail.shape[1]), dtype=np.uint64)
            bits[:, :base] = self._bits
            bits[:, base:] = tail
            self._bits, self._tail_bits = bits, bits[:, :0]

    def freeze(self, block: int = 65_536) -> MatrixState:
        """A read-only view of the rows as they are now, readable (a `block` of rows at a time) from another thread
        while this matrix changes under the store's lock: a change first saves the view's blocks it is about to
        write (copy on write, a block of rows at a time: ~25 MB of int8 codes per block at 384 dimensions), so the
        view keeps what it saw. Free when nothing changes meanwhile; `thaw` when done with it."""
        state = MatrixState(self._ids, self._mat, self._bits, self._n, len(self), self._steps, self.dims, block)
        state.tail, state.tail_bits = self._tail, self._tail_bits
        self._shared = state
        return state

    def thaw(self, state: MatrixState) -> None:
        """`state` is no longer read: changes go back to writing the arrays in place. (Safe without the lock: at
        worst a change saves a block the view no longer needs.)"""
        if self._shared is state:
            self._shared = None

    def _keep(self, rows: Iterable[int]) -> None:
        """Before writing `rows` in place while a frozen view is out: the view's blocks holding them saved."""
        state = self._shared
        if state is None:
            return
        if not state.shares(self._mat, self._tail):  # (grown or compacted since: new arrays, never written)
            self._shared = None
            return
        state.keep(rows)

    @property
    def nbytes(self) -> int:
        """Memory of the rows and ids (capacity included)."""
        return int(self._mat.nbytes + self._tail.nbytes + self._ids.nbytes)

    @classmethod
    def empty(cls, dims: int) -> VectorMatrix:
        return cls(np.zeros(0, dtype=np.int64), np.zeros((0, dims), dtype=np.float32))

    def _encode(self, vecs: np.ndarray) -> np.ndarray:
        return vecs if self._steps is None else quantize(vecs, self._steps)

    def __len__(self) -> int:
        return self._live

    def __contains__(self, chunk_id: object) -> bool:
        if isinstance(chunk_id, bool) or not isinstance(chunk_id, (int, np.integer)):
            return False
        return bool(self._find([int(chunk_id)]))

    def holding(self, chunk_ids: Iterable[int]) -> set[int]:
        """Those of `chunk_ids` the matrix holds (one lookup for all of them)."""
        return set(self._find(dict.fromkeys(int(c) for c in chunk_ids)))

    def _sorted(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids, rows) of the rows in use, sorted by id (holes included: negative, never looked up)."""
        if self._index is None:
            ids = self._ids[: self._n]
            if len(ids) < 2 or bool((ids[1:] > ids[:-1]).all()):  # (a matrix read in id order: no sort)
                self._index = (ids.copy(), np.arange(len(ids), dtype=np.int64))
            else:
                order = np.argsort(ids, kind="stable")
                self._index = (ids[order], order.astype(np.int64, copy=False))
            self._placed = {}
        return self._index

    def _find(self, chunk_ids: Iterable[int]) -> dict[int, int]:
        """The rows of those of `chunk_ids` the matrix holds: chunk id -> row."""
        out: dict[int, int] = {}
        rest: list[int] = []
        for cid in chunk_ids:
            row = self._placed.get(cid)
            if row is not None and int(self._ids[row]) == cid:
                out[cid] = row
            elif cid >= 0:
                rest.append(cid)
        if rest and self._n and self._index is None and len(rest) <= _SCAN_IDS:
            ids = self._ids[: self._n]  # (a few ids, no index yet: one compare of the ids each, ~1 ms a million)
            hit = np.nonzero(np.isin(ids, np.asarray(rest, dtype=np.int64)))[0]
            out.update(zip(ids[hit].tolist(), hit.tolist(), strict=True))
        elif rest and self._n:
            keys, rows = self._sorted()
            want = np.asarray(rest, dtype=np.int64)
            at = np.minimum(np.searchsorted(keys, want), len(keys) - 1)
            cand = rows[at]
            ok = (keys[at] == want) & (self._ids[cand] == want)
            out.update(zip(want[ok].tolist(), cand[ok].tolist(), strict=True))
        return out

    # -- writes --------------------------------------------------------------------------------------------
    def remove(self, chunk_ids: Iterable[int]) -> None:
        found = self._find(dict.fromkeys(int(i) for i in chunk_ids))
        if not found:
            return
        rows = list(found.values())
        for cid in found:
            self._placed.pop(cid, None)
        self._live -= len(rows)
        self._keep(rows)
        self._put(rows, np.zeros((len(rows), self.dims), dtype=self._mat.dtype))
        self._ids[rows] = [-(r + 1) for r in rows]  # unique and negative: never a chunk id, never a duplicate
        self._holes.extend(rows)
        self._holes_arr = None
        if len(self._holes) > max(self._min_compact, self._n // 4):
            self._compact()

    def add(self, items: Sequence[tuple[int, np.ndarray]]) -> None:
        """Add or replace vectors: (chunk id, vector)."""
        if not items:
            return
        latest = {int(cid): v for cid, v in items}  # an id given twice: its last vector wins
        items = list(latest.items())
        vecs = np.asarray(np.stack([np.asarray(v, dtype=np.float32) for _, v in items]), dtype=np.float32)
        if vecs.ndim != 2 or vecs.shape[1] != self.dims:
            raise ValueError(f"vectors have {vecs.shape[1:]} dimensions, the matrix {self.dims}")  # nothing changed
        self.remove(list(latest))
        reuse = min(len(items), len(self._holes))
        rows = [self._holes.pop() for _ in range(reuse)]
        extra = len(items) - reuse
        if extra:
            self._reserve(self._n + extra)
            rows.extend(range(self._n, self._n + extra))
            self._n += extra
        if reuse:
            self._holes_arr = None
        self._keep(rows)
        codes = self._encode(vecs)
        self._put(rows, codes, None if self._bits is None else signs(codes).T)
        self._ids[rows] = [int(cid) for cid, _ in items]
        for cid, r in zip((int(c) for c, _ in items), rows, strict=True):
            self._placed[cid] = r
        self._live += len(items)
        if self._index is not None and len(self._placed) > max(1024, self._n // 8):
            self._index = None  # (sorted again at the next lookup: the placed rows folded in)

    def _put(self, rows: Sequence[int], codes: np.ndarray, bits: np.ndarray | None = None) -> None:
        """`codes` (one row each) and their sign bits ((words, len(rows)), if any) written into `rows`, in the base
        or the tail."""
        base = len(self._mat)
        at = np.asarray(rows, dtype=np.int64)
        low = at < base
        for mat, mbits, sel, off in ((self._mat, self._bits, low, 0), (self._tail, self._tail_bits, ~low, base)):
            if not sel.any():
                continue
            mat[at[sel] - off] = codes[sel]
            if bits is not None and mbits is not None:
                mbits[:, at[sel] - off] = bits[:, sel]

    def _capacity(self) -> int:
        return len(self._mat) + len(self._tail)

    def _reserve(self, rows: int) -> None:
        if rows <= self._capacity():
            return
        if not self._mat.flags.owndata:  # (a mapped snapshot's rows: never copied to make room)
            self._grow_tail(rows)
            return
        if len(self._tail):  # (a base of its own again, `own`: one array)
            self.own()
        capacity = max(rows, int(len(self._mat) * GROWTH) + 16)
        if self._steps is None and self.exact is not None and wants_compact(rows, self.dims):
            # grown past the size held compact (a first index into a searching server): codes from now on
            self._steps = steps_for(self._mat[: self._n][self._ids[: self._n] >= 0][:SAMPLE_ROWS])
            self._mat = quantize(self._mat[: self._n], self._steps)
            self._bits = word_major(signs(self._mat)) if _has_popcount() else None
        mat = np.empty((capacity, self.dims), dtype=self._mat.dtype)
        ids = np.empty(capacity, dtype=np.int64)
        mat[: self._n] = self._mat[: self._n]
        ids[: self._n] = self._ids[: self._n]
        if self._bits is not None:
            bits = np.zeros((self._bits.shape[0], capacity), dtype=np.uint64)
            bits[:, : self._n] = self._bits[:, : self._n]
            self._bits, self._tail_bits = bits, bits[:, :0]
        self._mat, self._ids, self._tail = mat, ids, mat[:0]

    def _grow_tail(self, rows: int) -> None:
        """Room for `rows` rows in use by a bigger tail (the base, a mapped snapshot, left as it is): the tail's rows
        and the ids copied (8 bytes a row), never the base's codes or sign bits."""
        base, used = len(self._mat), max(0, self._n - len(self._mat))
        capacity = max(rows - base, int(len(self._tail) * GROWTH) + 16, TAIL_MIN)
        tail = np.zeros((capacity, self.dims), dtype=self._mat.dtype)
        tail[:used] = self._tail[:used]
        if self._tail_bits is not None:
            tail_bits = np.zeros((self._tail_bits.shape[0], capacity), dtype=np.uint64)
            tail_bits[:, :used] = self._tail_bits[:, :used]
            self._tail_bits = tail_bits
        ids = np.empty(base + capacity, dtype=np.int64)
        ids[: self._n] = self._ids[: self._n]
        self._tail, self._ids = tail, ids

    def _compact(self) -> None:
        live = np.nonzero(self._ids[: self._n] >= 0)[0]
        ids, mat = self._ids[live], self._gather(live)
        self.__init__(ids, mat, self._min_compact, steps=self._steps, exact=self.exact)  # type: ignore[misc]

    # -- reads ---------------------------------------------------------------------------------------------
    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids, vectors) of the live rows, as new arrays (a compact matrix: its codes decoded, approximate)."""
        live = np.nonzero(self._ids[: self._n] >= 0)[0]
        return self._ids[live], self._decode(self._gather(live))

    def _gather(self, rows: np.ndarray) -> np.ndarray:
        """The codes (or float32 rows) of `rows`, a new array, from the base and the tail."""
        at = np.asarray(rows, dtype=np.int64)
        if not len(self._tail):
            return self._mat[at]
        out = np.empty((len(at), self.dims), dtype=self._mat.dtype)
        low = at < len(self._mat)
        out[low] = self._mat[at[low]]
        out[~low] = self._tail[at[~low] - len(self._mat)]
        return out

    def _decode(self, rows: np.ndarray) -> np.ndarray:
        return rows if self._steps is None else rows.astype(np.float32) * self._steps

    def ids(self) -> list[int]:
        """The chunk ids of the live rows (in row order)."""
        ids = self._ids[: self._n]
        return ids[ids >= 0].tolist()

    def vectors(self, chunk_ids: Iterable[int]) -> dict[int, np.ndarray]:
        """The vectors of those of `chunk_ids` in the matrix (a compact one: exact, read through `exact`)."""
        found = self._find(dict.fromkeys(int(c) for c in chunk_ids))
        if self._steps is not None and self.exact is not None:
            return self.exact(list(found))
        return {c: self._decode(self._gather(np.asarray([r]))[0]).copy() for c, r in found.items()}

    def knn(self, query: np.ndarray, k: int, allowed: np.ndarray | None = None) -> list[tuple[int, float]]:
        """(chunk id, cosine similarity) best first; `allowed` restricts the candidates to those chunk ids."""
        q = np.asarray(query, dtype=np.float32)
        ids = self._ids[: self._n]
        keep: np.ndarray | None = None
        if allowed is not None:
            keep = np.isin(ids, allowed, assume_unique=True)  # holes are negative: never allowed
            live = int(np.count_nonzero(keep))
        else:
            live = len(self)
        k = min(k, live)
        if k <= 0:
            return []
        rescore = min(live, rescore_depth(k))
        if self._bits is not None and self.exact is not None:
            pool = sign_pool(self._n)
            if pool < live // 2:
                return self._by_signs(q, k, keep, pool, rescore)
        set_blas_threads_for(self._n * self.dims)
        parts = []
        for mat in self._segments():
            if self._steps is None:
                parts.append(mat @ q)  # a new array: masked in place below
            else:  # the codes times the query scaled by each dimension's step: numpy casts a buffer at a time
                parts.append(np.einsum("ij,j->i", mat, q * self._steps, dtype=np.float32, casting="unsafe"))
        sims = parts[0] if len(parts) == 1 else np.concatenate(parts)
        # one product over every row, then the rows outside the filter masked out: copying the allowed rows
        # out first cost more than the product itself (56k x 384 floats, ~86 MB per search)
        if keep is not None:
            sims[~keep] = -np.inf
        elif self._holes:
            sims[self._holes_array()] = -np.inf
        if self._steps is not None and self.exact is not None:
            top = np.argpartition(sims, len(sims) - rescore)[len(sims) - rescore :]
            return self._rescored(top, sims[top], q, k)
        top = np.argpartition(sims, len(sims) - k)[len(sims) - k :]  # no negated copy of sims
        top = top[np.argsort(-sims[top])]
        return [(int(ids[i]), float(sims[i])) for i in top]

    def knn_many(self, queries: np.ndarray, k: int) -> list[list[tuple[int, float]]]:
        """`knn` of each row of `queries` (no filter): a float32 matrix scores them all in one matrix product (64
        queries cost about what 4 single ones did: the fallback calibration's sample, retrieval/confidence.py); a
        compact one searches them one by one."""
        qs = np.asarray(queries, dtype=np.float32)
        k = min(k, len(self))
        if not len(qs) or k <= 0:
            return [[] for _ in range(len(qs))]
        if self._steps is not None:
            return [self.knn(q, k) for q in qs]
        set_blas_threads_for(self._n * self.dims)
        parts = [mat @ qs.T for mat in self._segments()]  # (rows, queries)
        sims = parts[0] if len(parts) == 1 else np.concatenate(parts)
        if self._holes:
            sims[self._holes_array()] = -np.inf
        ids = self._ids[: self._n]
        out: list[list[tuple[int, float]]] = []
        for j in range(len(qs)):
            col = sims[:, j]
            top = np.argpartition(col, len(col) - k)[len(col) - k :]
            top = top[np.argsort(-col[top])]
            out.append([(int(ids[i]), float(col[i])) for i in top])
        return out

    def _segments(self) -> list[np.ndarray]:
        """The rows in use: the base's, then the tail's when it holds any."""
        base = len(self._mat)
        out = [self._mat[: min(self._n, base)]]
        if self._n > base:
            out.append(self._tail[: self._n - base])
        return out

    def _spans(self, n: int, block: int) -> list[tuple[int, int]]:
        """Blocks (start, end) of at most `block` rows covering 0..n-1, none across the base's end."""
        base = len(self._mat)
        return [(s, min(hi, s + block)) for lo, hi in ((0, min(n, base)), (base, n)) for s in range(lo, hi, block)]

    def _holes_array(self) -> np.ndarray:
        if self._holes_arr is None:
            self._holes_arr = np.asarray(self._holes, dtype=np.int64)
        return self._holes_arr

    def _by_signs(
        self, q: np.ndarray, k: int, keep: np.ndarray | None, pool: int, rescore: int
    ) -> list[tuple[int, float]]:
        """Three passes: every row's sign bits against the query's (Hamming distance: 64 dimensions per popcount),
        the `pool` nearest scored on their int8 codes, the best `rescore` of those on their exact vectors."""
        assert self._bits is not None and self._steps is not None
        dist, counts = self._hamming(signs((q / self._steps)[None, :])[0], keep)
        near = nearest_by_distance(dist, pool, self.dims + 1, counts)
        scores = self._pool_scores(near, q * self._steps)
        rescore = min(rescore, len(near))
        best = np.argpartition(scores, len(scores) - rescore)[len(scores) - rescore :]
        return self._rescored(near[best], scores[best], q, k)

    def _scratch_for(self, n: int) -> _SignScratch:
        scratch = self._scratch
        if scratch is None or len(scratch.dist) < n or len(scratch.xor[0]) < min(SIGN_BLOCK, n):
            rows = max(n, len(self._mat), 1)
            scratch = self._scratch = _SignScratch(rows, min(SIGN_BLOCK, rows), self.dims)
        return scratch

    def _hamming(self, qbits: np.ndarray, keep: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The Hamming distance of every row's sign bits to `qbits` (uint16, the rows in use; holes and the rows
        outside `keep` at dims + 1), and how many rows are at each distance below that. A SIGN_BLOCK of rows at a
        time on buffers kept between searches (word-major bits: each word's XOR and popcount contiguous; the
        popcounts written as uint16 straight into the distances), the blocks shared with the helper thread
        (`in_blocks`)."""
        bits = self._bits
        assert bits is not None
        n, words, far = self._n, bits.shape[0], self.dims + 1
        scratch = self._scratch_for(n)
        dist = scratch.dist[:n]
        counts = [np.zeros(far + 1, dtype=np.int64) for _ in scratch.xor]

        spans, base, tail_bits = self._spans(n, SIGN_BLOCK), len(self._mat), self._tail_bits

        def block(b: int, slot: int) -> None:
            start, end = spans[b]
            xor, count, out = scratch.xor[slot][: end - start], scratch.count[slot][: end - start], dist[start:end]
            src, off = (bits, 0) if start < base or tail_bits is None else (tail_bits, base)
            for w in range(words):
                np.bitwise_xor(src[w, start - off : end - off], qbits[w], out=xor)
                if w == 0:
                    np.bitwise_count(xor, out=out, casting="unsafe")
                else:
                    np.bitwise_count(xor, out=count, casting="unsafe")
                    np.add(out, count, out=out)
            if keep is not None:
                out[~keep[start:end]] = far
            counts[slot] += np.bincount(out, minlength=far + 1)

        in_blocks(len(spans), block)
        total = counts[0] + counts[1] if len(counts) > 1 else counts[0]
        if keep is None and self._holes:
            holes = self._holes_array()
            total -= np.bincount(dist[holes], minlength=far + 1)
            dist[holes] = far
            total[far] += len(holes)
        return dist, total[:far]

    def _pool_scores(self, near: np.ndarray, qs: np.ndarray) -> np.ndarray:
        """The codes' scores (codes times the query scaled by the steps: `qs`) of the rows `near` (ascending), a
        POOL_BLOCK of rows gathered at a time into a kept buffer (gathering the whole pool at once and casting it
        to float32 allocated ~5 bytes per code: 120 MB at 1M rows), the blocks shared with the helper thread."""
        scores = np.empty(len(near), dtype=np.float32)
        buffers = self._scratch_for(self._n).block
        base = len(self._mat)
        split = int(np.searchsorted(near, base)) if len(self._tail) else len(near)  # (the base's rows, then the tail's)
        spans = [
            (s, min(hi, s + POOL_BLOCK))
            for lo, hi in ((0, split), (split, len(near)))
            for s in range(lo, hi, POOL_BLOCK)
        ]

        def block(b: int, slot: int) -> None:
            start, end = spans[b]
            src, off = (self._mat, 0) if start < split else (self._tail, base)
            at = near[start:end] if not off else near[start:end] - off
            # (mode "clip": with "raise", the default, numpy buffers `out` in a new array; the rows are in range)
            rows = np.take(src, at, axis=0, out=buffers[slot][: end - start], mode="clip")
            np.einsum("ij,j->i", rows, qs, dtype=np.float32, casting="unsafe", out=scores[start:end])

        in_blocks(len(spans), block)
        return scores

    def _rescored(self, rows: np.ndarray, approx: np.ndarray, q: np.ndarray, k: int) -> list[tuple[int, float]]:
        """`rows` (with their codes' scores `approx`) scored again on their exact vectors: the best k of those."""
        assert self.exact is not None
        cand = [int(i) for i in self._ids[rows]]
        exact = self.exact(cand)
        scored = list(zip(exact, (np.stack(list(exact.values())) @ q).tolist() if exact else [], strict=True))
        if len(exact) < len(cand):  # a vector the store could not give back: its code's score stands
            scored += [(c, float(a)) for c, a in zip(cand, approx.tolist(), strict=True) if c not in exact]
        scored.sort(key=lambda cs: -cs[1])
        return scored[:k]


class Stopped(RuntimeError):
    """A frozen view's reader was stopped (MatrixState.stop, or its `abort` said so)."""


class MatrixState:
    """The rows of a VectorMatrix as they were when it was frozen (VectorMatrix.freeze): what a snapshot writes, from
    another thread, while the matrix goes on answering and changing. Read-only. The matrix calls `keep` before it
    writes rows in place: those rows' blocks are copied here first, and `live_blocks` reads a saved block instead of
    the live one (both under this view's lock, so a block is read whole before or after it is saved)."""

    def __init__(
        self,
        ids: np.ndarray,
        mat: np.ndarray,
        bits: np.ndarray | None,
        n: int,
        live: int,
        steps: np.ndarray | None,
        dims: int,
        block: int,
    ) -> None:
        self._ids, self._mat, self._bits, self._n, self._live = ids, mat, bits, n, live
        self.steps, self.dims, self.block = steps, dims, block
        self.tail: np.ndarray = mat[:0]  # the matrix's tail as frozen (VectorMatrix._grow_tail), set by `freeze`
        self.tail_bits: np.ndarray | None = None
        # Asked before each block is read: True stops the reader (`live_blocks` raises Stopped), e.g. the lease on
        # the mapped snapshot the rows are pages of is breaking (storage/sqlite/vectors.py)
        self.abort: Callable[[], bool] | None = None
        self._stop = threading.Event()
        self._saved: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray | None]] = {}
        self._lock = threading.Lock()

    def stop(self) -> None:
        """The reader of `live_blocks` stops before its next block (raises Stopped there)."""
        self._stop.set()

    def __len__(self) -> int:
        return self._live

    @property
    def has_bits(self) -> bool:
        return self._bits is not None

    def shares(self, mat: np.ndarray, tail: np.ndarray | None = None) -> bool:
        return mat is self._mat or (tail is not None and len(tail) > 0 and tail is self.tail)

    def keep(self, rows: Iterable[int]) -> None:
        """The blocks of `rows` (those the view covers) saved as they are, before the matrix writes them."""
        blocks = {int(r) // self.block for r in rows if 0 <= int(r) < self._n}
        with self._lock:
            for b in blocks - self._saved.keys():
                start, end = b * self.block, min(self._n, (b + 1) * self.block)
                mat, bits = _span(self._mat, self.tail, self._bits, self.tail_bits, start, end)
                saved = None if bits is None else bits.T.copy()  # (rows, words)
                self._saved[b] = (self._ids[start:end].copy(), mat.copy(), saved)

    def live_blocks(self, block: int = 0, rows: bool = True) -> Iterable[tuple[np.ndarray, Any, np.ndarray | None]]:
        """(ids, rows, sign bits or None) of the live rows as frozen, a block at a time (the view's own block size;
        `block` is ignored); `rows` False: None for the rows."""
        for b, start in enumerate(range(0, self._n, self.block)):
            end = min(self._n, start + self.block)
            if self._stop.is_set() or (self.abort is not None and self.abort()):
                raise Stopped("the rows it reads are being let go")
            with self._lock:  # (copies taken whole, before or after the matrix saves this block)
                saved = self._saved.get(b)
                if saved is None:
                    mat, wbits = _span(self._mat, self.tail, self._bits, self.tail_bits, start, end)
                    saved = (self._ids[start:end], mat, None if wbits is None else wbits.T)
                ids, mat, bits = saved
                keep = ids >= 0
                out = (ids[keep], mat[keep] if rows else None, None if bits is None else bits[keep])
            yield out


class _SignScratch:
    """A compact matrix's search buffers, kept between searches (allocating them at every search cost page faults):
    the distances of every row and, for each thread of a search (`in_blocks`: this one and the helper), one block's
    XOR words and popcounts and one block of the pool's codes."""

    def __init__(self, rows: int, block: int, dims: int) -> None:
        self.dist = np.empty(rows, dtype=np.uint16)
        self.xor = [np.empty(block, dtype=np.uint64) for _ in range(2)]
        self.count = [np.empty(block, dtype=np.uint16) for _ in range(2)]
        self.block = [np.empty((POOL_BLOCK, dims), dtype=np.int8) for _ in range(2)]


def _span(
    base: np.ndarray, tail: np.ndarray, base_bits: np.ndarray | None, tail_bits: np.ndarray | None, start: int, end: int
) -> tuple[np.ndarray, np.ndarray | None]:
    """Rows start..end-1 of a matrix held as a base and a tail (VectorMatrix._grow_tail) and their word-major sign
    bits (None without): views, or copies of the few blocks that cross the base's end."""
    n = len(base)
    if end <= n or not len(tail):
        return base[start:end], None if base_bits is None else base_bits[:, start:end]
    if start >= n:
        return tail[start - n : end - n], None if tail_bits is None else tail_bits[:, start - n : end - n]
    mat = np.concatenate([base[start:], tail[: end - n]])
    if base_bits is None or tail_bits is None:
        return mat, None
    return mat, np.concatenate([base_bits[:, start:], tail_bits[:, : end - n]], axis=1)


def sign_pool(rows: int) -> int:
    """How many rows (of `rows` in use) the sign pass keeps for scoring on their codes: max(SIGN_POOL, rows /
    SIGN_SHARE)."""
    return max(SIGN_POOL, rows // SIGN_SHARE)


def word_major(bits: np.ndarray) -> np.ndarray:
    """Sign bits (rows, words) as the matrix holds them: (words, rows), each word of every row contiguous."""
    return np.ascontiguousarray(np.asarray(bits, dtype=np.uint64).T)


def nearest_by_distance(dist: np.ndarray, pool: int, far: int, counts: np.ndarray | None = None) -> np.ndarray:
    """The indices (ascending) of the `pool` smallest of `dist` (small non-negative integers; those >= `far` never
    taken): every row below the pool's threshold distance and, of the rows at it, the first in row order. `counts`:
    how many rows are at each distance below `far` (else counted here). A histogram and two passes instead of
    argpartition over every row (~2x cheaper at 1M rows)."""
    if counts is None:
        counts = np.bincount(dist, minlength=far + 1)[:far]
    total = np.cumsum(counts)
    if not len(total) or total[-1] <= pool:
        return np.flatnonzero(dist < far)
    t = int(np.searchsorted(total, pool))  # the threshold: total[t] >= pool
    near = np.flatnonzero(dist <= t)  # (one pass over the rows; the rows at t past the pool dropped after)
    excess = int(total[t]) - pool
    if excess:
        ties = np.flatnonzero(dist[near] == t)
        near = np.delete(near, ties[len(ties) - excess :])
    return near


def unit_rows(rows: np.ndarray) -> np.ndarray:
    """Stored rows as float32: float16 rows (the cache's format since schema 9) renormalised to unit length (their
    rounding leaves norms ~1e-4 off one: a chunk's vector then scores 1.0 against itself, as it did in float32);
    float32 rows as they are. The one decoding of stored vectors: the cache and the snapshot give equal rows."""
    rows = np.asarray(rows)
    out = rows.astype(np.float32)
    if rows.dtype.itemsize == 2 and out.size:
        norms = np.sqrt(np.einsum("ij,ij->i", out, out))
        norms[norms == 0] = 1.0
        out /= norms[:, None]
    return out


def signs(codes: np.ndarray) -> np.ndarray:
    """The sign bits of rows of codes (or vectors), packed into uint64 words (zero-padded): Hamming distance by
    popcount."""
    packed = np.packbits(np.asarray(codes) > 0, axis=1)
    pad = (-packed.shape[1]) % 8
    if pad:
        packed = np.pad(packed, ((0, 0), (0, pad)))
    return np.ascontiguousarray(packed).view(np.uint64)


def steps_for(sample: np.ndarray) -> np.ndarray:
    """Each dimension's step for int8 codes: its largest magnitude in `sample` (with HEADROOM) over 127."""
    top = np.abs(np.asarray(sample, dtype=np.float32)).max(axis=0) if len(sample) else np.ones(sample.shape[1])
    return np.maximum(top * HEADROOM / 127.0, 1e-6).astype(np.float32)


def quantize(vecs: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """int8 codes of `vecs` (rows) for `steps`; a value past the range is clipped."""
    return np.clip(np.rint(np.asarray(vecs, dtype=np.float32) / steps), -127, 127).astype(np.int8)


def wants_compact(rows: int, dims: int) -> bool:
    """Whether a matrix of this size is held compact (COMPACT_FLOATS)."""
    return rows * dims > COMPACT_FLOATS


def other_file_cosines(neighbours: dict[int, list[tuple[int, float]]], paths: dict[int, str]) -> list[float]:
    """For each chunk with its nearest chunks (id, cosine; best first): the cosine of the best one in another file
    (chunks whose path is unknown are skipped; a chunk with none in another file gives nothing). The backends'
    `nearest_other_file_cosines`."""
    out: list[float] = []
    for cid, hits in neighbours.items():
        own = paths.get(cid)
        other = next((s for c, s in hits if paths.get(c) not in (None, own)), None)
        if other is not None:
            out.append(other)
    return out

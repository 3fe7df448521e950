"""The vectors of the SQLite index: the embedding cache, which is its one table of vectors (schema 8), the change
journal of the vectors, and the in-memory matrix that answers KNN (`storage/vector_matrix.py`). `Vectors` is a
part of `SqliteStore` (store.py), sharing its `Database`.

A chunk's vector is the cache row of the index's key (meta `vector_key`: storage.base.cache_key of its model and
size) and of the chunk's content hash: a renamed, moved or re-chunked passage keeps its vector, "has a vector" is a
lookup in the cache's key index, and every vector is stored once. The matrix is read once per process (one pass
over the cache, each row's chunks found by hash) and then follows the journal `vector_changes` (schema.py: triggers
append, in the writer's transaction, the id of every chunk whose vector may have changed): a search reads the ids
appended since the seq its matrix reflects and patches those rows, whichever process wrote them. Writers delete
the journal's old rows; a matrix older than what is left is read again.

Vectors are stored as float16 since schema 9 (meta `vector_format`; half the bytes, recall@10 unchanged: see
benchmarks/README.md S6) and read back as float32 unit vectors (vector_matrix.unit_rows). After a whole read the
process writes a snapshot of its matrix beside the index (snapshot.py; in a background thread): the next process
takes it and catches up from the journal instead of reading every vector."""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import apsw

from ...embeddings.base import usable_vector
from ...errors import StorageError
from ...lazy import np  # numpy loads on first use (cold CLI path)
from ..base import ChunkFilter, PendingChunk, cache_key
from ..vector_matrix import (
    SAMPLE_ROWS,
    MatrixState,
    Stopped,
    VectorMatrix,
    other_file_cosines,
    quantize,
    steps_for,
    unit_rows,
    wants_compact,
)
from . import snapshot
from .database import Database
from .filters import FilterCache
from .schema import (
    FLOAT16,
    INDEX_ID_META,
    JOURNAL_FLOOR_META,
    VECTOR_FORMAT_META,
    VECTOR_KEY_META,
    VECTORS_CHECKED_META,
)

log = logging.getLogger(__name__)

# Journal rows kept when writers compact it (they do once it holds twice as many): a searching process that fell
# further behind reads its matrix again, which it would do anyway past a quarter of the rows (_PATCH_SHARE).
JOURNAL_KEEP = 100_000
_PATCH_MIN, _PATCH_SHARE = 1024, 4  # a matrix is patched for up to max(_PATCH_MIN, rows / _PATCH_SHARE) changes
# One snapshot written at a time in a process (a search that would start another while one is written leaves it to a
# later search: its count of patched rows is kept)
_SNAPSHOT_WRITING = threading.Lock()
SNAPSHOT_NICE = 5  # how much lower the snapshot writer's thread runs than the searches (Linux)
_SHORT_OF_ROOM: set[str] = set()  # folders whose filesystem had no room for a snapshot (said once)
_HAS_VECTOR = "EXISTS (SELECT 1 FROM embedding_cache e WHERE e.model = ? AND e.content_hash = c.content_hash)"
# the ids of the chunks without a vector: a scan of the chunks' hash index (covering) with a probe of the cache's key
# each; the chunk rows of the few that pass are read after (filtering the rows themselves read every chunk: 3x slower)
_UNEMBEDDED_IDS = (
    "SELECT c.id FROM chunks c WHERE NOT EXISTS (SELECT 1 FROM embedding_cache e WHERE e.model = ?"
    " AND e.content_hash = c.content_hash)"
)


# At most this many vectors are read as one aggregated row (Vectors._aggregated: a search's rescored candidates);
# more (a matrix's catch-up patches up to a quarter of its rows) are read row by row: SQLite grows the one blob by
# doubling, a transient copy the size of them all
AGGREGATE_MAX = 4096
# The stored vectors of a list of chunk ids (json), of the two usable lengths (float16 or float32 rows)
_STORED_FROM = (
    " FROM chunks c JOIN embedding_cache e ON e.model = ? AND e.content_hash = c.content_hash"
    " WHERE c.id IN (SELECT value FROM json_each(?)) AND length(e.vector) IN (?, ?)"
)
_STORED_ROWS = "SELECT c.id, e.vector" + _STORED_FROM
# ... as one row (Vectors._aggregated): both aggregates see the rows in the same order
_STORED_ONE_ROW = (
    "SELECT json_group_array(c.id), json_group_array(length(e.vector)), CAST(group_concat(e.vector, '') AS BLOB)"
    + _STORED_FROM
)


def vector_blob(vec: np.ndarray, dtype: Any = "<f2") -> bytes:
    """A vector as the cache stores it (`dtype`: the index's format, Vectors.dtype)."""
    with np.errstate(over="ignore"):  # (a value past float16's range becomes Inf: the caller checks)
        return np.asarray(vec, dtype=np.float32).astype(dtype).tobytes()


def decoded(blob: bytes, dtype: Any) -> np.ndarray:
    """A cache row's vector as float32 (vector_matrix.unit_rows)."""
    return unit_rows(np.frombuffer(blob, dtype=dtype).reshape(1, -1))[0]


def row_dtype(blob: bytes, dims: int) -> Any:
    """How a row of `dims` dimensions is stored, by its length: float16, or float32, which a saipling of before
    migration 9 still running beside a migrated index writes into it (its rows are read as they are, never
    skipped: "has a vector" counts them, so the matrix must hold them too)."""
    return np.dtype("<f4" if len(blob) == dims * 4 else "<f2")


def decoded_rows(blobs: Sequence[bytes], dims: int) -> np.ndarray:
    """Cache rows of `dims` dimensions (float16 or float32: row_dtype) as float32 rows (vector_matrix.unit_rows);
    rows of one format (the rule) in one pass."""
    if len({len(b) for b in blobs}) <= 1:
        dtype = row_dtype(blobs[0], dims) if blobs else np.dtype("<f2")
        return unit_rows(np.frombuffer(b"".join(blobs), dtype=dtype).reshape(-1, dims))
    out = np.empty((len(blobs), dims), dtype=np.float32)
    for i, b in enumerate(blobs):
        out[i] = decoded(b, row_dtype(b, dims))
    return out


def lower_priority(by: int = SNAPSHOT_NICE) -> None:
    """The calling thread's CPU priority lowered `by` (Linux: a thread's own nice value) so that a background job
    leaves the cores to the searches; elsewhere nothing."""
    if not hasattr(threading, "get_native_id") or not hasattr(os, "setpriority") or sys.platform != "linux":
        return
    tid = threading.get_native_id()
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + by))


class Vectors:
    """Vector reads and writes over the store's connection."""

    def __init__(self, db: Database, filters: FilterCache, folder: Path | None = None, writable: bool = False) -> None:
        self.db = db
        self.filters = filters
        self.folder = folder  # the index's folder: the matrix snapshot lives there (snapshot.py); None: in memory
        self.writable = writable  # may write the snapshot (not a read-only open)
        self.snapshot_reads = 0  # matrices taken from a snapshot (then caught up from the journal)
        self.snapshot_damaged = 0  # mapped snapshots whose background check failed (their matrix dropped)
        self._check: snapshot.Check | None = None  # the pending check of the mapped snapshot the matrix came from
        # the read lease on the mapped snapshot the matrix borrows its rows from (snapshot.Lease): let go when the
        # matrix is dropped, or once its rows are its own (a process waiting to write the file: _lease_broken)
        self._lease: snapshot.Lease | None = None
        self.snapshot_let_go = 0  # mapped snapshots whose rows were copied because another process wrote the file
        self._skip_snapshot = False  # the next read of the matrix ignores the snapshot (it failed its check)
        self.snapshot_writes = 0
        self._snapshot_thread: threading.Thread | None = None  # the snapshot being written in the background
        self._snapshot_state: MatrixState | None = None  # the frozen rows it reads (`_stop_writer`)
        self._snapshot_due = False  # one was wanted while another store of the process wrote one: the next search
        self.unembedded_scans = 0  # counts of the chunks with(out) a vector made in SQL (every chunk's row)
        self._counted: tuple[tuple[str, int, int, int | None], int] | None = None  # (state, count): _embedded
        self._since_snapshot = 0  # rows patched since the snapshot was read or written
        self._matrix: VectorMatrix | None = None  # the search-time copy of the vectors (storage/vector_matrix.py)
        self._matrix_seq = 0  # the journal's seq the matrix reflects
        self._matrix_key: str | None = None  # the index key it was read for
        self._matrix_generation = 0
        self._generation = 0  # bumped when the matrix must be read again whatever the journal says
        self.rows_read = 0  # vectors read into the matrix, by loads and patches (tests: a patch reads few)
        self.loads = 0  # whole reads of the matrix
        self._utf8: bool | None = None  # the database's text is UTF-8 (Vectors._aggregated), known on first use

    # -- vectors configuration -----------------------------------------------------------------------------
    def dtype(self) -> Any:
        """How the cache's vectors are stored (schema.VECTOR_FORMAT_META): float16 since migration 9, float32 in an
        index written before (one format per index: the migration converted every row)."""
        return np.dtype("<f2" if self.db.get_meta(VECTOR_FORMAT_META) == FLOAT16 else "<f4")

    def index_key(self) -> str | None:
        """The cache key the index's vectors are stored under; None: the index holds no vectors."""
        return self.db.get_meta(VECTOR_KEY_META)

    def has_vectors(self) -> bool:
        return self.index_key() is not None

    def vector_model(self) -> tuple[str | None, int]:
        return self.db.get_meta("model"), int(self.db.get_meta("dimensions", "0") or 0)

    def configure_vectors(self, provider: str, model: str, dimensions: int) -> bool:
        """Record the provider; a different model or dimension changes the vectors the index uses (the cache's
        rows of the new key: none until embedded, unless they were before). True if the vectors changed."""
        with self.db.lock:  # readers never see the new key with the old matrix
            return self._configure_vectors(provider, model, dimensions)

    def _configure_vectors(self, provider: str, model: str, dimensions: int) -> bool:
        old_model, old_dims = self.vector_model()
        old_key = self.index_key()
        key = cache_key(model, dimensions) if dimensions > 0 else None
        with self.db.atomic():
            for name, value in (("provider", provider), ("model", model), ("dimensions", str(dimensions))):
                self.db.conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (name, value))
            if key is None:
                self.db.conn.execute("DELETE FROM meta WHERE key = ?", (VECTOR_KEY_META,))
            elif key != old_key:
                self.db.conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (VECTOR_KEY_META, key))
                # this model's vectors cached before the key carried the size count as the key's
                self.db.conn.execute(
                    "UPDATE OR IGNORE embedding_cache SET model = ? WHERE model = ? AND length(vector) = ?",
                    (key, model, dimensions * self.dtype().itemsize),
                )
            if key != old_key:
                # every process's matrix is read again (a marker row, then the floor raised past it): while another
                # key was the index's, the triggers journaled no change of this key's chunks, so a matrix of this key
                # kept from before (A -> B -> A) could not be patched from the journal
                self.db.conn.execute("INSERT INTO vector_changes(chunk_id) VALUES (-1)")
                self._truncate_journal(self._journal_seq())
        reset = old_key is not None and old_key != key
        if reset:
            log.info(
                "embedding model changed (%s/%s -> %s/%s): vectors rebuilt",
                old_model,
                old_dims,
                model,
                dimensions,
            )
        if old_key != key:
            self._drop_matrix()  # other vectors altogether
            self.invalidate()
        return reset

    def _targets(self, model: str | None) -> tuple[str | None, int]:
        """(cache key, dims) vectors written for `model` go under: the index's key for its key or its bare model
        name (vectors of the index's model and size, checked), else `model` itself (dims 0: any size)."""
        key = self.index_key()
        if key is not None and (model is None or model == key or model == self.db.get_meta("model")):
            return key, self.vector_model()[1]
        return model, 0

    def store_vectors(self, vectors: dict[str, np.ndarray], model: str | None, now: float | None = None) -> None:
        """Write vectors by content hash into the cache (inside the caller's transaction). Vectors of the index's
        model must have its size (StorageError: the caller's transaction is rolled back)."""
        if not vectors:
            return
        key, dims = self._targets(model)
        if key is None:
            return
        # a vector with NaN, Inf or only zeros is never stored (the cache keeps the first vector of a text: one stored
        # would stand for ever and its chunks never be embedded again); those chunks stay to be embedded
        dtype = self.dtype()
        blobs = [
            (h, vector_blob(v, dtype)) for h, v in vectors.items() if usable_vector(np.asarray(v, dtype=np.float32))
        ]
        blobs = [(h, b) for h, b in blobs if usable_vector(np.frombuffer(b, dtype=dtype))]  # (past float16's range)
        if dims:
            for h, b in blobs:
                if len(b) != dims * dtype.itemsize:
                    raise StorageError(
                        f"a vector of {len(b) // dtype.itemsize} dimensions for an index of {dims} ({h[:12]})"
                    )
        now = time.time() if now is None else now
        self.db.conn.executemany(
            "INSERT OR IGNORE INTO embedding_cache(model, content_hash, vector, created) VALUES (?,?,?,?)",
            [(key, h, b, now) for h, b in blobs],
        )

    # -- embedding cache -----------------------------------------------------------------------------------
    def cached_vectors(self, model: str, hashes: Iterable[str], dims: int = 0) -> dict[str, np.ndarray]:
        """Cached vectors of `model` by content hash.

        With `dims`, only vectors of that size count: the same model name can embed at several sizes (the
        `dimensions` setting of text-embedding-3-* or voyage), and a vector of the old size must never reach
        the new vector table. Entries are then looked up under both `model` (index files written before
        the key carried the size) and `cache_key(model, dims)` (what the indexer writes now). Without `dims`,
        the index's own model means its key too.
        """
        hashes = list(dict.fromkeys(hashes))
        out: dict[str, np.ndarray] = {}
        keys = [model, cache_key(model, dims)] if dims else [model]
        if not dims and model == self.db.get_meta("model") and self.index_key():
            keys.append(str(self.index_key()))
        with self.db.lock:
            dtype = self.dtype()
            size = int(dims) * dtype.itemsize if dims else -1
            # rows under a key that carries the size are read by their length (float32 ones too: row_dtype)
            index_key, index_dims = self.index_key(), self.vector_model()[1]
            sized = {index_key: index_dims} if index_key is not None and index_dims else {}
            if dims:
                sized[cache_key(model, dims)] = int(dims)
            wide: list[Any] = []  # (key, bytes of a float32 row) of each of those (at most two), for the SQL below
            for k, d in sized.items():
                wide += [k, d * 4]
            wide += ["", -1] * (2 - len(sized))
            for i in range(0, len(hashes), 500):
                part = hashes[i : i + 500]
                for row_key, h, blob in self.db.conn.execute(
                    "SELECT model, content_hash, vector FROM embedding_cache"
                    " WHERE model IN (SELECT value FROM json_each(?)) AND content_hash IN (SELECT value FROM"
                    " json_each(?)) AND (? < 0 OR length(vector) = ? OR (model = ? AND length(vector) = ?)"
                    " OR (model = ? AND length(vector) = ?))",
                    (json.dumps(keys), json.dumps(part), size, size, *wide),
                ):
                    row_dims = sized.get(row_key)
                    vec = decoded(blob, row_dtype(blob, row_dims) if row_dims else dtype)
                    if usable_vector(vec):  # a poisoned row (NaN, Inf, zero) is never served: re-embedded
                        out[h] = vec
        return out

    def chunks_missing_vectors(self, limit: int = 100_000) -> list[PendingChunk]:
        key = self.index_key()
        if key is None:
            return []
        rows = self.db.rows(
            "SELECT c.id, c.path, c.heading_path, c.text, c.content_hash FROM chunks c"
            f" WHERE c.id IN ({_UNEMBEDDED_IDS}) ORDER BY c.path, c.chunk_index LIMIT ?",
            (key, limit),
        )
        return [PendingChunk(*r) for r in rows]

    def drop_unusable_vectors(self) -> int:
        """Delete cached vectors that hold NaN, Inf or only zeros, so their chunks are embedded again. Such rows
        came from providers before their answers were checked; the scan runs once per index (recorded in meta).
        (The journal's triggers tell searching processes which chunks lost a vector.)"""
        if self.db.get_meta(VECTORS_CHECKED_META) == "1":
            return 0
        bad_cache: list[tuple[str, str]] = []
        with self.db.lock:
            dtype = self.dtype()
            key, dims = self.index_key(), self.vector_model()[1]
            for model, h, blob in self.db.conn.execute("SELECT model, content_hash, vector FROM embedding_cache"):
                fmt = row_dtype(blob, dims) if model == key and dims else dtype  # (float32 rows of an older process)
                if len(blob) % fmt.itemsize or not usable_vector(np.frombuffer(blob, dtype=fmt)):
                    bad_cache.append((model, h))
            with self.db.atomic():
                self.db.conn.executemany("DELETE FROM embedding_cache WHERE model = ? AND content_hash = ?", bad_cache)
                self.db.conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, '1')", (VECTORS_CHECKED_META,))
        if bad_cache:
            log.warning(
                "removed %d unusable cached vectors (NaN, Inf or zero): their chunks are embedded again",
                len(bad_cache),
            )
        return len(bad_cache)

    def stored_count(self) -> int:
        """Chunks with a vector (0 without vectors), counted without reading every chunk when it can be
        (`_embedded`)."""
        with self.db.lock:
            key = self.index_key()
            if key is None:
                return 0
            return int(self._embedded(key, self.vector_model()[1]) or 0)

    def _loaded_count(self, key: str) -> int | None:
        """The rows of the loaded matrix, patched up to date (a few rows); None when none is loaded (loading one
        to count reads every vector: the SQL count is cheaper then)."""
        with self.db.lock:
            if self._matrix is None or self._matrix_key != key:
                return None
            return len(self._vectors())

    def count_unembedded(self, model: str | None = None, dims: int = 0) -> int:
        """Chunks with no vector for the active model (`model`/`dims`; default: the model the index records).
        Every chunk counts when the index holds no vectors of that model."""
        return self._unembedded_of_all(model, dims)[0]

    def _unembedded_of_all(self, model: str | None = None, dims: int = 0) -> tuple[int, int]:
        """(count_unembedded, all chunks), the chunks counted once (a count of every chunk: ~35 ms of CPU at 1M
        chunks, more after another process's write, which empties the connection's page cache)."""
        with self.db.lock:
            stored_model, stored_dims = self.vector_model()
            key = self.index_key()
            if model is None:
                model, dims = stored_model, stored_dims
            keep = not self.db.conn.in_transaction
            with self.db.conn:  # one read transaction: the chunks and the vectors agree
                total = int(self.db.scalar("SELECT count(*) FROM chunks") or 0)
                if not model or key is None or stored_model != model or (dims and stored_dims != dims):
                    return total, total
                return max(0, total - int(self._embedded(key, stored_dims, keep) or 0)), total

    def _embedded(self, key: str, dims: int, keep: bool | None = None, scan: bool = True) -> int | None:
        """Chunks with a vector of `key` (status, the end of an index run, a search's "n of m have no embeddings"),
        with nothing proportional to the index where it can: the loaded matrix's rows (patched up to date); else
        the count kept from the last time while the journal has not moved since (every change of which chunks have
        a vector appends to it: schema.JOURNAL_SQL); else the snapshot's rows (its header) corrected by the chunks
        the journal names since its seq (whether each was in the snapshot, whether it has a vector now); else the
        SQL count of every chunk (`unembedded_scans`: a second at 269k chunks), or None without `scan`. `keep`: the
        count may be kept (not taken inside a write, which may roll back; default: whether the connection is in a
        transaction now). Call under the lock."""
        loaded = self._loaded_count(key)  # (an index run's end in a searching process: no scan)
        if loaded is not None:
            return loaded
        keep = not self.db.conn.in_transaction if keep is None else keep
        with self.db.conn:  # one read transaction: the journal, the snapshot's catch-up and the count agree
            seq = self._journal_seq()
            tag = self._journal_tag(seq) if seq else None
            state = (key, dims, seq, tag)
            if tag is not None and self._counted is not None and self._counted[0] == state:
                return self._counted[1]
            found = self._snapshot_count(key, dims, seq)
            if found is None:
                if not scan:
                    return None
                self.unembedded_scans += 1
                found = int(self.db.scalar(f"SELECT count(*) FROM chunks c WHERE {_HAS_VECTOR}", (key,)) or 0)
        if tag is not None and keep:
            self._counted = (state, found)
        return found

    def _snapshot_count(self, key: str, dims: int, seq_now: int) -> int | None:
        """Chunks with a vector now, from the snapshot beside the index and the journal since its seq; None when
        there is no snapshot that fits or the journal names more changes than a catch-up would patch. Call in a
        read transaction, under the lock."""
        if self.folder is None or not dims:
            return None
        index_id = self.db.get_meta(INDEX_ID_META)
        if not index_id:
            return None
        floor = int(self.db.get_meta(JOURNAL_FLOOR_META, "0") or 0)
        changed: list[int] = []
        too_many = False

        def ids_for(seq: int, rows: int) -> bool:  # the chunks whose vector may have changed since its seq
            nonlocal changed, too_many
            if seq == seq_now:
                return False
            limit = max(_PATCH_MIN, rows // _PATCH_SHARE)
            changed = [
                int(r[0])
                for r in self.db.conn.execute(
                    "SELECT DISTINCT chunk_id FROM vector_changes WHERE seq > ? AND seq <= ? LIMIT ?",
                    (seq, seq_now, limit + 1),
                )
            ]
            too_many = len(changed) > limit
            return bool(changed) and not too_many

        counted = snapshot.count(
            self.folder,
            index_id=index_id,
            key=key,
            dims=dims,
            floor=floor,
            seq_now=seq_now,
            tag_at=self._journal_tag,
            ids_for=ids_for,
        )
        if counted is None or too_many:
            return None
        if not changed:
            return counted.rows
        wanted = np.asarray(sorted(set(changed)), dtype=np.int64)
        at = np.searchsorted(wanted, counted.ids)
        had = int((wanted[np.minimum(at, len(wanted) - 1)] == counted.ids).sum())  # of them, rows of the snapshot
        has_now = int(
            self.db.scalar(  # (as the matrix takes them: rows of the index's size)
                "SELECT count(*) FROM chunks c WHERE c.id IN (SELECT value FROM json_each(?)) AND EXISTS (SELECT 1"
                " FROM embedding_cache e WHERE e.model = ? AND e.content_hash = c.content_hash"
                " AND length(e.vector) IN (?, ?))",
                (self.db.json_ids(list(wanted)), key, dims * 2, dims * 4),
            )
            or 0
        )
        return counted.rows - had + has_now

    def unembedded_share(self, model: str, dims: int) -> tuple[int, int]:
        """(chunks without a vector of `model`/`dims`, all chunks), kept until the index changes: every search
        on a partly embedded index says how much of it semantic search cannot see."""
        with self.db.lock:
            return self.filters.cached(("unembedded", model, str(dims)), lambda: self._unembedded_of_all(model, dims))

    def unembedded(self, hold: Iterable[str] = (), first: Iterable[str] = ()) -> list[tuple[int, str, str, int]]:
        """(chunk id, path, content hash, tokens) of chunks without a vector, in the order to embed them: the
        files in `first` (open in an editor), then the most recently modified files; files in `hold` (still
        being edited: waiting for their quiet period) are left out."""
        key = self.index_key()
        if key is None:
            return []
        with self.db.lock:  # (a lookup in the cache's key index per chunk, no vector read)
            if self._all_embedded(key):
                return []
            self.unembedded_scans += 1
            rows = list(
                self.db.conn.execute(
                    "SELECT c.id, c.path, c.content_hash, c.token_count, f.mtime_ns FROM chunks c"
                    f" JOIN files f ON f.path = c.path WHERE c.id IN ({_UNEMBEDDED_IDS})"
                    " ORDER BY c.path, c.chunk_index",
                    (key,),
                )
            )
        held, top = set(hold), {p: i for i, p in enumerate(dict.fromkeys(first))}
        rows = [r for r in rows if r[1] not in held]
        # mtime 0 marks a file read within its timestamp tick (see indexing.records.is_racy): just written, so recent
        rows.sort(key=lambda r: (top.get(r[1], len(top)), -(r[4] or (1 << 62))))
        return [(int(r[0]), r[1], r[2], int(r[3] or 0)) for r in rows]

    def _all_embedded(self, key: str) -> bool:
        """Whether every chunk has a vector, known without reading every chunk (`_embedded` without its SQL count):
        the run that finds nothing to embed (a server's first run on an index embedded before) skips the scan of
        every chunk for those without one (~2.5 s at 269k chunks). False when not known that way. Call under the
        lock."""
        keep = not self.db.conn.in_transaction
        with self.db.conn:  # one read transaction: the chunks and the vectors agree
            total = int(self.db.scalar("SELECT count(*) FROM chunks") or 0)
            found = self._embedded(key, self.vector_model()[1], keep, scan=False)
            return found is not None and found >= total

    def set_vectors(self, items: Sequence[tuple[int, str, np.ndarray]], model: str) -> None:
        """Store vectors: (chunk_id, content_hash, vector). Stored by content hash, so every chunk holding that
        text has it now, and a chunk replaced meanwhile (an edit stored while its old text was being embedded)
        none (the chunk ids are not needed)."""
        with self.db.lock:
            with self.db.atomic():
                self.store_vectors({h: vec for _, h, vec in items}, model)
                self.journal_written()
            self.after_write()

    def without_stored(self, chunk_ids: Sequence[int]) -> list[int]:
        """Those of `chunk_ids` whose vector is not stored (in their order)."""
        key = self.index_key()
        if key is None or not chunk_ids:
            return list(chunk_ids)
        have = {
            int(r[0])
            for r in self.db.conn.execute(
                f"SELECT c.id FROM chunks c WHERE c.id IN (SELECT value FROM json_each(?)) AND {_HAS_VECTOR}",
                (self.db.json_ids(chunk_ids), key),
            )
        }
        return [c for c in chunk_ids if c not in have]

    def embedded_count(self) -> int:
        """Vectors in the search-time matrix (0 without vectors)."""
        with self.db.lock:
            return len(self._vectors()) if self.has_vectors() else 0

    def nearest_other_file_cosines(self, sample: int, seed: int = 0) -> tuple[int, list[float]]:
        """(embedded chunks, for a fixed random sample of them: the cosine of each one's nearest chunk in another
        file): how similar "related" passages are for this model on this project (retrieval/search.py's fallback).
        The sampled chunks' KNN on the search matrix in one product (knn_many): no copy of the vectors."""
        with self.db.lock:
            if not self.has_vectors():
                return 0, []
            matrix = self._vectors()
            ids = sorted(matrix.ids())
        n = len(ids)
        if n < 2:
            return n, []
        picked = [ids[i] for i in np.random.default_rng(seed).choice(n, min(sample, n), replace=False)]
        with self.db.lock:
            matrix = self._vectors()
            vectors = matrix.vectors(picked)
            found = matrix.knn_many(np.stack(list(vectors.values())), 12) if vectors else []
        neighbours = dict(zip(vectors, found, strict=True))
        wanted = list({c for hits in neighbours.values() for c, _ in hits} | set(neighbours))
        with self.db.lock:
            paths = {
                int(i): str(p)
                for i, p in self.db.conn.execute(
                    "SELECT id, path FROM chunks WHERE id IN (SELECT value FROM json_each(?))",
                    (self.db.json_ids(wanted),),
                )
            }
        return n, other_file_cosines(neighbours, paths)

    # -- the journal and the matrix ------------------------------------------------------------------------
    def _journal_seq(self) -> int:
        """The journal's last seq (AUTOINCREMENT's high-water mark: never goes back, even when rows are deleted)."""
        return int(self.db.scalar("SELECT seq FROM sqlite_sequence WHERE name = 'vector_changes'") or 0)

    def journal_written(self) -> None:
        """Inside a write transaction that may have changed vectors: the journal compacted once it holds twice
        JOURNAL_KEEP rows (its oldest rows deleted, the floor raised: a matrix older than the floor is read again)."""
        seq = self._journal_seq()
        floor = int(self.db.get_meta(JOURNAL_FLOOR_META, "0") or 0)
        if seq - floor > 2 * JOURNAL_KEEP:
            self._truncate_journal(seq - JOURNAL_KEEP)

    def _truncate_journal(self, upto: int) -> None:
        # (the row at `upto` stays: its tag proves the history of a snapshot taken at the floor)
        self.db.conn.execute("DELETE FROM vector_changes WHERE seq < ?", (upto,))
        self.db.conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (JOURNAL_FLOOR_META, str(upto)))

    def _journal_tag(self, seq: int) -> int | None:
        """The random tag of the journal's row at `seq` (schema.JOURNAL_COLUMNS); None: no row there (or a journal
        without tags)."""
        try:
            value = self.db.scalar("SELECT tag FROM vector_changes WHERE seq = ?", (int(seq),))
        except apsw.SQLError:  # (an index of schema 9 opened read-only: no tags, no snapshot of it is used)
            return None
        return None if value is None else int(value)

    def forget_journal(self) -> None:
        """Inside a write transaction that removed every vector (clear): the journal emptied, every matrix read
        again (an empty read)."""
        self._truncate_journal(self._journal_seq())

    def invalidate(self) -> None:
        self._generation += 1
        self.db.writes += 1

    def after_write(self) -> None:
        """After our own committed write: the matrix is patched from the journal by the next search (what changed
        only, never every row)."""
        with self.db.lock:
            self.db.writes += 1

    def _vectors(self, settle: bool = True) -> VectorMatrix:
        """The cached matrix, patched from the journal or (first use, another key, fallen behind) read. `settle`:
        one from a mapped snapshot is used only once its check passed (waited for; a damaged one is dropped and the
        matrix read from the index); without it the caller must `_settle()` before answering from it (knn).
        Call under the lock."""
        matrix = self._current()
        if settle and not self._settle():
            matrix = self._current()  # (read from the index: the damaged snapshot is skipped)
        return matrix

    def _settle(self) -> bool:
        """Wait for the check of the mapped snapshot the matrix came from, if one is pending. False when it failed:
        the matrix is dropped (nothing is answered from it) and the next read skips the snapshot (a full read
        then writes a whole one over it). Call under the lock."""
        check, self._check = self._check, None
        if check is None or check.ok():
            return True
        log.warning(
            "vector snapshot in %s is damaged (CRC-32 differs): the vectors are read from the index", check.where
        )
        self.snapshot_damaged += 1
        self._drop_matrix()
        self._skip_snapshot = True
        return False

    def _current(self) -> VectorMatrix:
        """`_vectors` without the settling of a snapshot's check. Call under the lock."""
        if self._lease is not None and self._lease.breaking():  # (before the catch-up touches a mapped page)
            self._lease_broken(self._lease)
        key = self.index_key()
        if (
            self._matrix is not None
            and self._matrix_key == key
            and self._matrix_generation == self._generation
            and self._catch_up(key)
        ):
            if self._lease is not None and not self._matrix.borrowed:
                self._let_go()  # (grown or compacted: its rows are its own, the mapping is no longer read)
            if self._snapshot_due or self._since_snapshot > max(snapshot.MIN_ROWS, len(self._matrix) // 8):
                self._write_snapshot(str(key))  # (an index run changed many vectors: the next open reads fewer)
            return self._matrix
        self._drop_matrix()  # (a reload never holds the old matrix and the new one at once)
        dims = self.vector_model()[1] if key is not None else 0
        if key is not None and dims:
            if self._from_snapshot(key, dims):
                assert self._matrix is not None
                return self._matrix
            ids, mat, steps, seq = self._load_vectors(key, dims)
            self._matrix = VectorMatrix(ids, mat, steps=steps, exact=self._exact_vectors)
            self._matrix_seq, self._matrix_key, self._matrix_generation = seq, key, self._generation
            self._write_snapshot(key)
        else:
            seq = self._journal_seq()
            self._matrix = VectorMatrix.empty(dims)
            self._matrix_seq, self._matrix_key, self._matrix_generation = seq, key, self._generation
        return self._matrix

    # -- the snapshot of the matrix (snapshot.py) ------------------------------------------------------------
    def _from_snapshot(self, key: str, dims: int) -> bool:
        """The matrix taken from the snapshot beside the index, caught up from the journal; False (nothing
        held) when there is none that fits or the journal cannot bring it up to date. Call under the lock."""
        if self.folder is None or self._skip_snapshot:
            self._skip_snapshot = False
            return False
        with self.db.conn:  # one read transaction: the id, the floor and the seq agree
            index_id = self.db.get_meta(INDEX_ID_META)
            floor = int(self.db.get_meta(JOURNAL_FLOOR_META, "0") or 0)
            seq_now = self._journal_seq()
        if not index_id:
            return False
        snap = snapshot.read(
            self.folder, index_id=index_id, key=key, dims=dims, floor=floor, seq_now=seq_now, tag_at=self._journal_tag
        )
        if snap is None:
            return False
        try:
            matrix = VectorMatrix(
                snap.ids,
                snap.rows,
                steps=snap.steps,
                exact=self._exact_vectors,
                bits=snap.bits,
                word_major_bits=snap.word_major,
            )
            if snap.lease is not None:
                snap.lease.watch(self._lease_broken)
        except (ValueError, RuntimeError):  # (RuntimeError: no thread to watch the lease)
            if snap.lease is not None:
                snap.lease.release()
            return False
        except BaseException:  # (MemoryError, KeyboardInterrupt: a lease nobody watches would hold a writer 45 s)
            if snap.lease is not None:
                snap.lease.release()
            raise
        self._matrix, self._since_snapshot, self._check, self._lease = matrix, 0, snap.check, snap.lease
        self._matrix_seq, self._matrix_key, self._matrix_generation = snap.seq, key, self._generation
        if not self._catch_up(key):
            self._drop_matrix(settle=True)  # (its check ends; the matrix is read from the index anyway)
            return False
        if self._lease is not None and not matrix.borrowed:
            self._let_go()  # (grown while it caught up: its rows are its own, the mapping is no longer read)
        self.snapshot_reads += 1
        if self._since_snapshot > max(snapshot.MIN_ROWS, len(matrix) // 8):
            self._write_snapshot(key)
        return True

    def _write_snapshot(self, key: str) -> None:
        """Start writing the matrix's snapshot (after a full read, or once many rows were patched since the last
        one) in a background thread: the search that asked returns at once and the others go on (a 269k-chunk
        snapshot takes ~0.8 s to write). The thread writes a frozen view of the matrix (VectorMatrix.freeze: the
        rows as they are at the seq it records, whatever writes patch meanwhile), a mapped snapshot's rows read from
        the mapping while its lease is held (`_stop_writer`). At most one is written at a time per process. A
        failure is logged, never raised: the snapshot is a cache. Call under the lock."""
        matrix = self._matrix
        if self.folder is None or not self.writable or matrix is None or len(matrix) < snapshot.MIN_ROWS:
            return
        index_id = self.db.get_meta(INDEX_ID_META)
        if not index_id:
            return
        tag = self._journal_tag(self._matrix_seq)
        if tag is None:  # (its seq's row deleted by a writer of an older saipling: no snapshot could prove its history)
            log.debug("vector snapshot not written: no journal row at seq %d", self._matrix_seq)
            return
        if not _SNAPSHOT_WRITING.acquire(blocking=False):
            self._snapshot_due = True  # (one is being written: a later search writes this one)
            return
        self._since_snapshot, self._snapshot_due = 0, False  # (a failed write is not tried again at every search)
        state, seq, folder, check = matrix.freeze(), self._matrix_seq, self.folder, self._check
        # The writer's thread reads the rows without the lock, those of a mapped snapshot from the mapping (copying
        # them first cost ~0.65 s of CPU at a million rows, under the lock): it stops at the next block once the
        # lease breaks, and the lease is never let go while it reads (`_let_go` stops it and waits for it first).
        lease = self._lease
        if lease is not None:
            state.abort = lease.breaking
        self._snapshot_state = state

        def job() -> None:
            lower_priority()
            start = time.perf_counter()
            try:
                if check is not None and not check.ok():  # (never a damaged snapshot's rows with a new CRC)
                    raise ValueError("its rows came from a damaged snapshot")
                size = snapshot.write(folder, state, index_id=index_id, key=key, seq=seq, tag=tag)
            except snapshot.NoRoom as exc:  # logged once per folder until one is written again
                (log.debug if str(folder) in _SHORT_OF_ROOM else log.warning)(
                    "vector snapshot not written in %s: %s", folder, exc
                )
                _SHORT_OF_ROOM.add(str(folder))
            except Stopped as exc:  # (the mapped rows it read are being let go: a later search writes it)
                log.info("vector snapshot not written in %s: %s", folder, exc)
            except Exception as exc:  # noqa: BLE001 - a full disk, a folder swapped for a link...: searches go on
                log.warning("vector snapshot not written in %s: %s", folder, exc)
            else:
                _SHORT_OF_ROOM.discard(str(folder))
                self.snapshot_writes += 1
                log.info(
                    "vector snapshot written: %d rows, %.1f MB in %.2f s",
                    len(state),
                    size / 1e6,
                    time.perf_counter() - start,
                )
            finally:
                matrix.thaw(state)
                _SNAPSHOT_WRITING.release()

        thread = threading.Thread(target=job, name="saipling-vector-snapshot", daemon=True)
        try:
            thread.start()
        except RuntimeError as exc:  # (no thread to be had: interpreter shutting down)
            matrix.thaw(state)
            _SNAPSHOT_WRITING.release()
            log.warning("vector snapshot not written in %s: %s", folder, exc)
            return
        self._snapshot_thread = thread

    def _drop_matrix(self, settle: bool = False) -> None:
        """No matrix held (the next search reads one); the mapped snapshot it came from let go. `settle`: its
        pending check waited for first (the thread ends). Call under the lock."""
        self._matrix = None
        if settle:
            self._settle()
        self._check = None
        self._let_go()

    def _let_go(self) -> None:
        """Release the lease on the mapped snapshot (the matrix no longer reads it), once a snapshot being written
        from the mapping stopped reading it (`_stop_writer`). Call under the lock."""
        lease, self._lease = self._lease, None
        if lease is not None:
            self._stop_writer()
            lease.release()

    def _stop_writer(self) -> None:
        """The snapshot this store is writing from a mapped snapshot's rows, if any, stopped at its next block and
        waited for (nothing reads the mapping after this); it is written again by a later search. (The writer's
        thread never takes the lock: waiting for it under the lock is safe.)"""
        state, thread = self._snapshot_state, self._snapshot_thread
        self._snapshot_state = None
        if state is None or state.abort is None or thread is None or not thread.is_alive():
            return
        state.stop()
        if thread is not threading.current_thread():
            thread.join()
        self._snapshot_due = True

    def _lease_broken(self, lease: snapshot.Lease) -> None:
        """(The lease's watcher thread) another process waits to write or truncate the mapped snapshot: the matrix's
        rows and ids become its own (1M rows: 0.65 s of CPU, 1.7 s at load 10, under the lock: searches wait), then
        the file is let go. Without the memory for the copy the matrix is dropped (the next search reads one)."""
        with self.db.lock:
            if self._lease is not lease:
                return  # (let go meanwhile)
            matrix = self._matrix
            if matrix is not None and matrix.borrowed and lease.changed():
                # (the kernel broke the lease itself, after lease-break-time, and the file was cut short or written:
                # its pages are not read again; the next search reads the vectors from the index)
                log.warning(
                    "vector snapshot in %s was changed by another process: the vectors are read again", lease.where
                )
                self._drop_matrix()
                self._skip_snapshot = True
                self.snapshot_let_go += 1
                return
            try:
                if matrix is not None and matrix.borrowed:
                    matrix.own()
                    self.snapshot_let_go += 1
                    log.info(
                        "vector snapshot in %s is being written by another process: its rows were copied into memory",
                        lease.where,
                    )
            except MemoryError:
                log.warning(
                    "vector snapshot in %s is being written by another process: the vectors are read again", lease.where
                )
                self._matrix = None
            self._let_go()

    def close(self) -> None:
        """The store is closing: the matrix dropped and its mapped snapshot let go."""
        with self.db.lock:
            self._drop_matrix()

    def wait_for_snapshot(self, timeout: float | None = None) -> bool:
        """Wait for the snapshot this store is writing, if any (close; tests); False if still writing."""
        thread = self._snapshot_thread
        if thread is None:
            return True
        thread.join(timeout)
        return not thread.is_alive()

    def remove_snapshot(self) -> None:
        """Delete the snapshot (the index was cleared)."""
        if self.folder is None or not self.writable:
            return
        try:
            snapshot.remove(self.folder)
        except Exception as exc:  # noqa: BLE001 - a stale snapshot is ignored anyway (its seq is below the floor)
            log.warning("vector snapshot not removed from %s: %s", self.folder, exc)

    def _catch_up(self, key: str | None) -> bool:
        """Patch the matrix with what the journal holds since its seq: the chunks named there lose their rows and
        get the vectors they have now. False (read it all again) when the journal no longer reaches back that far
        or names more than a quarter of the rows."""
        matrix = self._matrix
        assert matrix is not None
        with self.db.conn:  # one read transaction: the journal and the vectors agree
            seq = self._journal_seq()
            if seq == self._matrix_seq:
                return True
            if key is None or self._matrix_seq < int(self.db.get_meta(JOURNAL_FLOOR_META, "0") or 0):
                return False
            limit = max(_PATCH_MIN, len(matrix) // _PATCH_SHARE)
            changed = [
                int(r[0])
                for r in self.db.conn.execute(
                    "SELECT DISTINCT chunk_id FROM vector_changes WHERE seq > ? AND seq <= ? LIMIT ?",
                    (self._matrix_seq, seq, limit + 1),
                )
            ]
            if len(changed) > limit:
                return False
            rows = self._stored_vectors(key, matrix.dims, changed)
        try:
            matrix.remove(changed)
            matrix.add(list(rows.items()))
        except ValueError:  # dimensions changed under us: read it again
            return False
        self._matrix_seq = seq
        self._since_snapshot += len(changed)
        return True

    def _stored_vectors(
        self, key: str, dims: int, chunk_ids: Sequence[int], counted: bool = True
    ) -> dict[int, np.ndarray]:
        """The usable stored vectors of `chunk_ids` (those without one left out), by chunk id; `counted`: read
        into the matrix (rows_read)."""
        out: dict[int, np.ndarray] = {}
        if not chunk_ids:
            return out
        found = self._aggregated(key, dims, chunk_ids) if len(chunk_ids) <= AGGREGATE_MAX else None
        if found is None:  # (many ids, e.g. a matrix's catch-up, or a database not in UTF-8: one row a vector)
            rows = self.db.conn.execute(_STORED_ROWS, (key, self.db.json_ids(chunk_ids), dims * 2, dims * 4)).fetchall()
            found = ([int(r[0]) for r in rows], decoded_rows([r[1] for r in rows], dims) if rows else None)
        ids, mat = found
        # (decoded together: a compact matrix rescores 160 or more a search, and row by row was ~1/4 of its CPU)
        if ids and mat is not None:
            good = np.isfinite(mat).all(axis=1) & (mat != 0).any(axis=1)  # (usable_vector, every row at once)
            out = {c: mat[i] for i, c in enumerate(ids) if good[i]}
        if counted:
            self.rows_read += len(out)
        return out

    def _aggregated(self, key: str, dims: int, chunk_ids: Sequence[int]) -> tuple[list[int], np.ndarray | None] | None:
        """The usable-length stored vectors of `chunk_ids` as (chunk ids, float32 rows in that order), read as ONE
        row: the ids and lengths as JSON arrays and the vectors concatenated into one blob. A search's 160 rescored
        vectors cost one return to Python instead of 160 (each re-takes the GIL: beside the keyword worker's Python
        scoring, 200 rows by `fetchall` took ~6.1 ms where the one row took 4.4, benchmarks/README.md S33). None
        when the database's text is not UTF-8 (group_concat would convert the blobs' bytes) or the blob's length
        disagrees with the lengths (never expected): the caller reads row by row."""
        if self._utf8 is None:
            self._utf8 = str(self.db.scalar("PRAGMA encoding") or "").upper() == "UTF-8"
        if not self._utf8:
            return None
        row = self.db.conn.execute(_STORED_ONE_ROW, (key, self.db.json_ids(chunk_ids), dims * 2, dims * 4)).fetchone()
        ids: list[int] = json.loads(row[0]) if row and row[0] else []
        if not ids:
            return [], None
        lengths: list[int] = json.loads(row[1])
        blob = row[2] if isinstance(row[2], bytes) else b""
        if len(lengths) != len(ids) or sum(lengths) != len(blob):
            log.warning("the aggregated read of %d vectors came back inconsistent: reading them row by row", len(ids))
            return None
        if len(set(lengths)) == 1:  # (one format: the rule)
            dtype = np.dtype("<f4" if lengths[0] == dims * 4 else "<f2")
            return ids, unit_rows(np.frombuffer(blob, dtype=dtype).reshape(-1, dims))
        view, at, blobs = memoryview(blob), 0, []
        for n in lengths:
            blobs.append(bytes(view[at : at + n]))
            at += n
        return ids, decoded_rows(blobs, dims)

    def _exact_vectors(self, chunk_ids: list[int]) -> dict[int, np.ndarray]:
        """The stored vectors of `chunk_ids` as float32 (a compact matrix rescores its candidates with them), in one
        query (200 of them: ~8 ms at 55k chunks)."""
        key = self.index_key()
        dims = self.vector_model()[1]
        if key is None or not dims:
            return {}
        with self.db.lock:
            return self._stored_vectors(key, dims, chunk_ids, counted=False)

    def vector_matrix(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids, unit vectors) of every embedded chunk (copies; for tests and benchmarks)."""
        with self.db.lock:
            return self._vectors().arrays()

    def _load_vectors(self, key: str, dims: int, batch: int = 4096) -> tuple[np.ndarray, np.ndarray, Any, int]:
        """Every chunk's vector in one numpy-allocated matrix: (ids, rows, steps, the journal's seq they reflect);
        steps is None for float32 rows, else the rows are int8 codes (a matrix past COMPACT_FLOATS, quantized a
        batch at a time: the float32 matrix never exists; the steps come from the first SAMPLE_ROWS vectors).
        One pass over the cache in its stored order, each row's chunks found by content hash.

        numpy's own allocation matters for speed: numpy asks the kernel for transparent huge pages on large
        arrays, and a full scan of a 100k x 384 matrix ran ~7% slower over a buffer built from Python bytes
        (4 KiB pages: a TLB miss per page) than over the same data in a numpy array. Filling a preallocated array
        also keeps the peak at one copy of the vectors (plus one batch) instead of two."""
        self.loads += 1
        with self.db.conn:  # one read transaction: the vectors and the journal's seq agree
            seq = self._journal_seq()
            n = int(self.db.scalar("SELECT count(*) FROM chunks") or 0)  # at most one vector each
            compact = wants_compact(n, dims)
            ids = np.empty(n, dtype=np.int64)
            mat = np.empty((n, dims), dtype=np.int8 if compact else np.float32)
            steps: np.ndarray | None = None
            filled = 0
            cursor = self.db.conn.execute(
                "SELECT c.id, e.vector FROM embedding_cache AS e NOT INDEXED CROSS JOIN chunks AS c"
                " ON c.content_hash = e.content_hash WHERE e.model = ? AND length(e.vector) IN (?, ?)",
                (key, dims * 2, dims * 4),  # (float16, or float32 rows: decoded_rows)
            )
            while filled < n:
                rows = list(itertools.islice(cursor, SAMPLE_ROWS if compact and steps is None else batch))
                if not rows:
                    break
                rows = rows[: n - filled]
                got = decoded_rows([r[1] for r in rows], dims)
                good = np.isfinite(got).all(axis=1) & (got != 0).any(axis=1)
                if not good.all():  # vectors stored before the provider boundary checked them: never served
                    log.warning("ignoring %d unusable vectors (NaN, Inf or zero) in the index", int((~good).sum()))
                    rows = [r for r, ok in zip(rows, good.tolist(), strict=True) if ok]
                    got = got[good]
                if compact:
                    steps = steps_for(got) if steps is None else steps
                    got = quantize(got, steps)
                end = filled + len(rows)
                ids[filled:end] = [r[0] for r in rows]
                mat[filled:end] = got
                filled = end
        if compact and steps is None:
            steps = np.ones(dims, dtype=np.float32) / 127.0
        self.rows_read += filled
        return ids[:filled], mat[:filled], steps, seq

    def knn(self, query: np.ndarray, k: int, flt: ChunkFilter | None = None) -> list[tuple[int, float]]:
        """Exact cosine KNN: (chunk id, similarity) best first, filters applied before ranking."""
        with self.db.lock:  # writes patch the matrix in place
            # (a matrix from a mapped snapshot searches while its check runs; the answer waits for the check and
            # a damaged snapshot's is never given: the search runs again on the vectors read from the index)
            matrix = self._vectors(settle=False)
            if len(matrix) == 0 or k <= 0:
                return [] if self._settle() else self.knn(query, k, flt)
            # the filter read after the matrix caught up, under the same lock: it covers every row the matrix holds
            # (read before, a private chunk written in between would pass a "no filter" taken from older levels)
            allowed = None  # (a filter every chunk passes, e.g. the default role's visibility, is no filter)
            if flt is not None and not flt.is_empty() and not self.filters.passes_all(flt):
                allowed = self.filters.ids(flt)
            found = [] if allowed is not None and not len(allowed) else matrix.knn(query, k, allowed)
            return found if self._settle() else self.knn(query, k, flt)

    def without_vectors(self, chunk_ids: Sequence[int]) -> set[int]:
        """Those of `chunk_ids` that have no vector (none when the index holds no vectors at all)."""
        with self.db.lock:
            matrix = self._vectors()
            return {int(c) for c in chunk_ids} - matrix.holding(chunk_ids) if len(matrix) else set()

    def paths_without_vectors(self, paths: Sequence[str]) -> set[str]:
        """Those of `paths` with at least one chunk that has no vector (all of them without a vector table)."""
        if not paths:
            return set()
        with self.db.lock:
            rows = [
                (int(i), p)
                for i, p in self.db.conn.execute(
                    "SELECT id, path FROM chunks WHERE path IN (SELECT value FROM json_each(?))",
                    (json.dumps(list(paths)),),
                )
            ]
            if not self.has_vectors():
                return {p for _, p in rows}
            held = self._vectors().holding(i for i, _ in rows)
            return {p for i, p in rows if i not in held}

    def chunk_vectors(self, chunk_ids: Sequence[int]) -> dict[int, np.ndarray]:
        with self.db.lock:
            return self._vectors().vectors(chunk_ids)

"""The vectors of the SQLite index: the sqlite-vec table and its model, the embedding cache, and the in-memory
matrix that answers KNN (`storage/vector_matrix.py`), kept in step with every write. `Vectors` is a part of
`SqliteStore` (store.py), sharing its `Database`.

sqlite-vec holds the vectors (vec0, cosine); KNN runs on an in-memory float32 matrix loaded from vec0 and kept in
step with writes: exact, and faster than vec0's non-SIMD scan (see benchmarks/)."""

from __future__ import annotations

import itertools
import json
import logging
import time
from collections.abc import Iterable, Sequence

import apsw

from ...embeddings.base import usable_vector
from ...lazy import np  # numpy loads on first use (cold CLI path)
from ..base import ChunkFilter, PendingChunk, cache_key
from ..vector_matrix import SAMPLE_ROWS, VectorMatrix, other_file_cosines, quantize, steps_for, wants_compact
from .database import Database
from .filters import FilterCache
from .schema import VECTORS_CHECKED_META

log = logging.getLogger(__name__)


def vector_blob(vec: np.ndarray) -> bytes:
    return np.asarray(vec, dtype=np.float32).tobytes()


class Vectors:
    """Vector reads and writes over the store's connection."""

    def __init__(self, db: Database, filters: FilterCache) -> None:
        self.db = db
        self.filters = filters
        self._matrix: VectorMatrix | None = None  # the search-time copy of the vectors (storage/vector_matrix.py)
        self._matrix_version: tuple[int, int] | None = None
        self._generation = 0
        self._vgen_written: int | None = None  # the vector generation our last write committed
        # where each vector of the matrix sits in vec0 when it was read: (ids sorted, block << 16 | offset, model);
        # another process's write is then picked up by what moved (_refresh), not by reading every vector again
        # (ids sorted, block << 16 | offset, model, each id's content key): a chunk id SQLite reuses (the highest,
        # deleted then inserted again) can land in the slot vec0 freed for it, so the slot alone misses the change
        self._vec_where: tuple[np.ndarray, np.ndarray, str | None, np.ndarray] | None = None

    # -- vectors configuration -----------------------------------------------------------------------------
    def has_vectors(self) -> bool:
        return bool(self.db.scalar("SELECT 1 FROM sqlite_master WHERE name = 'chunks_vec'"))

    def vector_model(self) -> tuple[str | None, int]:
        return self.db.get_meta("model"), int(self.db.get_meta("dimensions", "0") or 0)

    def configure_vectors(self, provider: str, model: str, dimensions: int) -> bool:
        """Record the provider; a different model or dimension drops the vectors (never mixed). True if reset."""
        with self.db.lock:  # readers never see the new table with the old matrix
            return self._configure_vectors(provider, model, dimensions)

    def _configure_vectors(self, provider: str, model: str, dimensions: int) -> bool:
        old_model, old_dims = self.vector_model()
        reset = created = False
        with self.db.atomic():
            if self.has_vectors() and (old_model != model or old_dims != dimensions):
                self.db.conn.execute("DROP TABLE chunks_vec")
                reset = True
            if dimensions > 0 and not self.has_vectors():
                created = True
                self.db.conn.execute(
                    f"CREATE VIRTUAL TABLE chunks_vec USING vec0("
                    f"chunk_id INTEGER PRIMARY KEY, embedding float[{int(dimensions)}] distance_metric=cosine)"
                )
            for key, value in (("provider", provider), ("model", model), ("dimensions", str(dimensions))):
                self.db.conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))
            if reset or created:
                self.bump_generation()
        if reset:
            log.info(
                "embedding model changed (%s/%s -> %s/%s): vectors rebuilt",
                old_model,
                old_dims,
                model,
                dimensions,
            )
        if reset or created:
            self._matrix = None  # the vector table itself changed
            self._vgen_written = None
            self.invalidate()
        return reset

    # -- embedding cache -----------------------------------------------------------------------------------
    def cached_vectors(self, model: str, hashes: Iterable[str], dims: int = 0) -> dict[str, np.ndarray]:
        """Cached vectors of `model` by content hash.

        With `dims`, only vectors of that size count: the same model name can embed at several sizes (the
        `dimensions` setting of text-embedding-3-* or voyage), and a vector of the old size must never reach
        the new vector table. Entries are then looked up under both `model` (index files written before
        the key carried the size) and `cache_key(model, dims)` (what the indexer writes now).
        """
        hashes = list(dict.fromkeys(hashes))
        out: dict[str, np.ndarray] = {}
        keys = [model, cache_key(model, dims)] if dims else [model]
        size = int(dims) * 4 if dims else -1
        with self.db.lock:
            for i in range(0, len(hashes), 500):
                part = hashes[i : i + 500]
                for h, blob in self.db.conn.execute(
                    "SELECT content_hash, vector FROM embedding_cache WHERE model IN (SELECT value FROM json_each(?))"
                    " AND content_hash IN (SELECT value FROM json_each(?)) AND (? < 0 OR length(vector) = ?)",
                    (json.dumps(keys), json.dumps(part), size, size),
                ):
                    vec = np.frombuffer(blob, dtype=np.float32)
                    if usable_vector(vec):  # a poisoned row (NaN, Inf, zero) is never served: re-embedded
                        out[h] = vec
        return out

    def chunks_missing_vectors(self, limit: int = 100_000) -> list[PendingChunk]:
        if not self.has_vectors():
            return []
        rows = self.db.rows(
            "SELECT c.id, c.path, c.heading_path, c.text, c.content_hash FROM chunks c"
            " WHERE c.id NOT IN (SELECT chunk_id FROM chunks_vec) ORDER BY c.path, c.chunk_index LIMIT ?",
            (limit,),
        )
        return [PendingChunk(*r) for r in rows]

    def drop_unusable_vectors(self) -> int:
        """Delete vectors (in the vector table and the embedding cache) that hold NaN, Inf or only zeros, so the
        chunks are embedded again. Such rows came from providers before their answers were checked; the scan
        runs once per index (recorded in meta)."""
        if self.db.get_meta(VECTORS_CHECKED_META) == "1":
            return 0
        bad_ids: list[int] = []
        bad_cache: list[tuple[str, str]] = []
        with self.db.lock:
            if self.has_vectors():
                for chunk_id, blob in self.db.conn.execute("SELECT chunk_id, embedding FROM chunks_vec"):
                    if not usable_vector(np.frombuffer(blob, dtype=np.float32)):
                        bad_ids.append(int(chunk_id))
            for model, h, blob in self.db.conn.execute("SELECT model, content_hash, vector FROM embedding_cache"):
                if len(blob) % 4 or not usable_vector(np.frombuffer(blob, dtype=np.float32)):
                    bad_cache.append((model, h))
            with self.db.atomic():
                self.db.conn.executemany("DELETE FROM chunks_vec WHERE chunk_id = ?", [(i,) for i in bad_ids])
                self.db.conn.executemany("DELETE FROM embedding_cache WHERE model = ? AND content_hash = ?", bad_cache)
                self.db.conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, '1')", (VECTORS_CHECKED_META,))
                if bad_ids:
                    self.bump_generation()
            if bad_ids:
                self.apply_delta(bad_ids, [])
        if bad_ids or bad_cache:
            log.warning(
                "removed %d unusable vectors and %d unusable cache entries (NaN, Inf or zero): they are embedded again",
                len(bad_ids),
                len(bad_cache),
            )
        return len(bad_ids) + len(bad_cache)

    def count_unembedded(self, model: str | None = None, dims: int = 0) -> int:
        """Chunks with no vector for the active model (`model`/`dims`; default: the model the index records).
        Every chunk counts when the index holds no vectors of that model."""
        with self.db.lock:
            total = int(self.db.scalar("SELECT count(*) FROM chunks") or 0)
            stored_model, stored_dims = self.vector_model()
            if model is None:
                model, dims = stored_model, stored_dims
            if not model or not self.has_vectors() or stored_model != model or (dims and stored_dims != dims):
                return total
            return int(
                self.db.scalar("SELECT count(*) FROM chunks WHERE id NOT IN (SELECT chunk_id FROM chunks_vec)") or 0
            )

    def unembedded_share(self, model: str, dims: int) -> tuple[int, int]:
        """(chunks without a vector of `model`/`dims`, all chunks), kept until the index changes: every search
        on a partly embedded index says how much of it semantic search cannot see."""
        with self.db.lock:
            return self.filters.cached(
                ("unembedded", model, str(dims)),
                lambda: (self.count_unembedded(model, dims), int(self.db.scalar("SELECT count(*) FROM chunks") or 0)),
            )

    def unembedded(self, hold: Iterable[str] = (), first: Iterable[str] = ()) -> list[tuple[int, str, str, int]]:
        """(chunk id, path, content hash, tokens) of chunks without a vector, in the order to embed them: the
        files in `first` (open in an editor), then the most recently modified files; files in `hold` (still
        being edited: waiting for their quiet period) are left out."""
        if not self.has_vectors():
            return []
        with self.db.lock:  # (one pass over vec0's ids, not a row of every chunk into Python)
            rows = list(
                self.db.conn.execute(
                    "SELECT c.id, c.path, c.content_hash, c.token_count, f.mtime_ns FROM chunks c"
                    " JOIN files f ON f.path = c.path WHERE c.id NOT IN (SELECT chunk_id FROM chunks_vec)"
                    " ORDER BY c.path, c.chunk_index"
                )
            )
        held, top = set(hold), {p: i for i, p in enumerate(dict.fromkeys(first))}
        rows = [r for r in rows if r[1] not in held]
        # mtime 0 marks a file read within its timestamp tick (see indexing.records.is_racy): just written, so recent
        rows.sort(key=lambda r: (top.get(r[1], len(top)), -(r[4] or (1 << 62))))
        return [(int(r[0]), r[1], r[2], int(r[3] or 0)) for r in rows]

    def set_vectors(self, items: Sequence[tuple[int, str, np.ndarray]], model: str) -> None:
        """Add vectors for existing chunks: (chunk_id, content_hash, vector). A chunk replaced meanwhile (an
        edit stored while its old text was being embedded) gets none; its vector still goes to the cache."""
        with self.db.lock:  # the write and the matrix patch are one step for readers
            with self.db.atomic():
                now = time.time()
                current = {  # (id, hash): an id freed by a replaced chunk may already hold its successor
                    (int(r[0]), str(r[1]))
                    for r in self.db.conn.execute(
                        "SELECT c.id, c.content_hash FROM chunks c JOIN json_each(?) j ON c.id = j.value ->> 0"
                        " AND c.content_hash = j.value ->> 1",
                        (json.dumps([[int(cid), h] for cid, h, _ in items]),),
                    )
                }
                blobs = {h: vector_blob(vec) for _, h, vec in items}
                # (one vector per model and text, ever: a cached vector is never replaced, by an import neither)
                self.db.conn.executemany(
                    "INSERT OR IGNORE INTO embedding_cache(model, content_hash, vector, created) VALUES (?,?,?,?)",
                    [(model, h, b, now) for h, b in blobs.items()],
                )
                items = [it for it in items if (int(it[0]), it[1]) in current]
                self.db.conn.executemany("DELETE FROM chunks_vec WHERE chunk_id = ?", [(cid,) for cid, _, _ in items])
                self.db.conn.executemany(
                    "INSERT INTO chunks_vec(chunk_id, embedding) VALUES (?, ?)",
                    [(cid, blobs[h]) for cid, h, _ in items],
                )
                if items:
                    self.bump_generation()
            self.apply_delta([cid for cid, _, _ in items], [(cid, vec) for cid, _, vec in items])

    def embedded_count(self) -> int:
        """Vectors in the search-time matrix (0 without vectors)."""
        with self.db.lock:
            return len(self._vectors()) if self.has_vectors() else 0

    def nearest_other_file_cosines(self, sample: int, seed: int = 0) -> tuple[int, list[float]]:
        """(embedded chunks, for a fixed random sample of them: the cosine of each one's nearest chunk in another
        file): how similar "related" passages are for this model on this project (retrieval/search.py's fallback).
        One KNN per sampled chunk on the search matrix: no copy of the vectors."""
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
            vectors = self._vectors().vectors(picked)
        neighbours = {cid: self.knn(vec, 12) for cid, vec in vectors.items()}
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

    def _file_vectors(self, path: str) -> dict[str, np.ndarray]:
        """The vectors a file's chunks have now, by content hash."""
        ids = {r[0]: r[1] for r in self.db.conn.execute("SELECT id, content_hash FROM chunks WHERE path = ?", (path,))}
        out: dict[str, np.ndarray] = {}
        for cid, h in ids.items():  # (vec0 answers `IN (subquery)` with a full scan: one lookup per chunk)
            for (blob,) in self.db.conn.execute("SELECT embedding FROM chunks_vec WHERE chunk_id = ?", (cid,)):
                out[h] = np.frombuffer(blob, dtype=np.float32).copy()
        return out

    def _data_version(self) -> tuple[int, int]:
        """What the cached matrix depends on: the index's vector generation (bumped by every vector write, in
        any process) and our own write counter. Not SQLite's data_version: that changes with every commit of
        another process, and a CLI search logging to search_log would make the server reload every vector."""
        return (self._vector_generation(), self._generation)

    def _any_version(self) -> tuple[int, int]:
        """Changes with any commit to the index, ours or another process's (for caches of chunk text stats)."""
        return (int(self.db.scalar("PRAGMA data_version") or 0), self.db.writes)

    def _vector_generation(self) -> int:
        return int(self.db.scalar("SELECT value FROM meta WHERE key = 'vector_generation'") or 0)

    def bump_generation(self) -> None:
        """Inside a write transaction that changes vectors: other processes' matrices go stale, ours is patched."""
        rows = list(
            self.db.conn.execute(
                "INSERT INTO meta(key, value) VALUES ('vector_generation', '1') ON CONFLICT(key)"
                " DO UPDATE SET value = CAST(value AS INTEGER) + 1 RETURNING value"
            )
        )
        self._vgen_written = int(rows[0][0])

    def forget_written(self) -> None:
        """After a write that replaced every vector (clear): the generation it committed is not a patch."""
        self._vgen_written = None

    def invalidate(self) -> None:
        self._generation += 1
        self.db.writes += 1

    def apply_delta(self, removed: Sequence[int], added: Sequence[tuple[int, np.ndarray]]) -> None:
        """After our own committed write: patch the cached matrix in place (O(rows changed)) instead of
        reloading it (a reload of 34k vectors took ~250 ms, paid by the first search after every editor save).
        A matrix that was already stale (another process wrote) is dropped and reloaded on the next search."""
        with self.db.lock:
            self.db.writes += 1
            written, self._vgen_written = self._vgen_written, None
            if written is None:  # no vector changed: the matrix (current or not) stays as it is
                return
            # our transaction bumped the generation by exactly one: the matrix was current if it had the one before
            current = self._matrix is not None and self._matrix_version == (written - 1, self._generation)
            self._generation += 1
            if not current or self._matrix is None:
                # stale (another process wrote): left unpatched; the next search refreshes it from what moved
                return
            try:
                self._matrix.remove(removed)
                self._matrix.add(added)
            except ValueError:  # dimensions changed under us: reload
                self._matrix = None
                return
            self._matrix_version = self._data_version()

    def _vectors(self) -> VectorMatrix:
        """The cached matrix, (re)loaded when the index changed since. Call under the lock."""
        version = self._data_version()
        if self._matrix is not None and self._matrix_version == version:
            return self._matrix
        dims = int(self.db.get_meta("dimensions", "0") or 0) if self.has_vectors() else 0
        if dims and self._matrix is not None and self._refresh(dims):
            self._matrix_version = version
            return self._matrix
        self._matrix = None  # (a reload never holds the old matrix and the new one at once)
        self._vec_where = None
        if dims:
            ids, mat, steps = self._load_vectors(dims)
            self._matrix = VectorMatrix(ids, mat, steps=steps, exact=self._exact_vectors)
        else:
            self._matrix = VectorMatrix.empty(0)
        self._matrix_version = version
        return self._matrix

    def _refresh(self, dims: int) -> bool:
        """Bring a stale matrix up to date from what moved in vec0 since it was read: its map of ids to blocks
        (16 bytes a vector, no vector read) against the one kept; only the vectors added or moved are read.
        False (reload it all) without a kept map, another model, or more changes than a quarter of it."""
        kept, matrix = self._vec_where, self._matrix
        if kept is None or matrix is None or matrix.dims != dims or kept[2] != self.db.get_meta("model"):
            return False
        with self.db.conn:  # one read transaction: the map and the blocks agree
            where = self._vec0_map()
            if where is None:
                return False
            order = np.argsort(where[:, 0], kind="stable")
            ids, locs = where[order, 0], (where[order, 1] << 16) | where[order, 2]
            old_ids, old_locs, old_keys = kept[0], kept[1], kept[3]
            keys = self._content_keys(ids)
            pos = np.minimum(np.searchsorted(old_ids, ids), max(len(old_ids) - 1, 0))
            same = (
                (old_ids[pos] == ids) & (old_locs[pos] == locs) & (old_keys[pos] == keys)
                if len(old_ids)
                else np.zeros(len(ids), bool)
            )
            moved = where[order][~same]
            # gone, or the same id now another chunk's (its new vector comes back with `moved`)
            removed = np.union1d(old_ids[~np.isin(old_ids, ids, assume_unique=True)], ids[~same])
            if len(moved) + len(removed) > max(1024, len(ids) // 4):
                return False
            added: list[tuple[int, np.ndarray]] = []
            for block in np.unique(moved[:, 1]).tolist():
                rows = moved[moved[:, 1] == block]
                blob = self.db.scalar("SELECT vectors FROM chunks_vec_vector_chunks00 WHERE rowid = ?", (block,))
                if blob is None or len(blob) % (dims * 4) or int(rows[:, 2].max()) * dims * 4 >= len(blob):
                    return False
                got = np.frombuffer(blob, dtype=np.float32).reshape(-1, dims)[rows[:, 2]]
                added += [(int(i), v) for i, v in zip(rows[:, 0].tolist(), got, strict=True) if usable_vector(v)]
        try:
            matrix.remove(removed.tolist())
            matrix.add(added)
        except ValueError:
            return False
        self._vec_where = (ids, locs, kept[2], keys)
        return True

    def _content_keys(self, ids: np.ndarray) -> np.ndarray:
        """A key of each chunk's content hash (0: no such chunk), for `ids` in order: one read of the chunks' ids
        and hashes, no vector read."""
        keys = {int(i): hash(h) for i, h in self.db.conn.execute("SELECT id, content_hash FROM chunks")}
        return np.fromiter((keys.get(i, 0) for i in ids.tolist()), dtype=np.int64, count=len(ids))

    def _vec0_map(self) -> np.ndarray | None:
        """vec0's map of vectors: (id, block, offset) rows, as sqlite-vec 0.1 keeps it; None in another layout."""
        try:
            cols = {r[1] for r in self.db.conn.execute("PRAGMA table_info(chunks_vec_rowids)")}
            if not {"chunk_id", "chunk_offset"} <= cols:
                return None
            rows = self.db.conn.execute(
                "SELECT rowid, chunk_id, chunk_offset FROM chunks_vec_rowids ORDER BY chunk_id, chunk_offset"
            )
            return np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64).reshape(-1, 3)
        except apsw.SQLError:
            return None

    def _exact_vectors(self, chunk_ids: list[int]) -> dict[int, np.ndarray]:
        """The stored float32 vectors of `chunk_ids` (a compact matrix rescores its candidates with them): from
        the embedding cache by content hash in one query (200 of them: ~8 ms at 55k chunks, where one vec0 lookup
        per chunk took ~400 ms), vec0 for any the cache lacks."""
        out: dict[int, np.ndarray] = {}
        model, dims = self.vector_model()
        if not model or not dims:
            return out
        with self.db.lock:
            for cid, blob in self.db.conn.execute(
                "SELECT c.id, (SELECT e.vector FROM embedding_cache e WHERE e.model IN (?, ?)"
                " AND e.content_hash = c.content_hash AND length(e.vector) = ? LIMIT 1)"
                " FROM chunks c WHERE c.id IN (SELECT value FROM json_each(?))",
                (cache_key(model, dims), model, dims * 4, json.dumps([int(c) for c in chunk_ids])),
            ):
                if blob is not None:
                    out[int(cid)] = np.frombuffer(blob, dtype=np.float32)
            for cid in chunk_ids:  # (vec0 answers `IN (subquery)` with a full scan: one lookup per chunk)
                if int(cid) not in out:
                    for (blob,) in self.db.conn.execute("SELECT embedding FROM chunks_vec WHERE chunk_id = ?", (cid,)):
                        out[int(cid)] = np.frombuffer(blob, dtype=np.float32)
        return out

    def vector_matrix(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids, unit vectors) of every embedded chunk (copies; for tests and benchmarks)."""
        with self.db.lock:
            return self._vectors().arrays()

    def _load_vectors(self, dims: int, batch: int = 4096) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Every vector in one numpy-allocated matrix: (ids, rows, steps); steps is None for float32 rows, else
        the rows are int8 codes (a matrix past COMPACT_FLOATS, quantized a block at a time: the float32 matrix
        never exists; the steps come from the first SAMPLE_ROWS vectors). Read from vec0's own tables (its
        blocks of vectors and its map of ids to them: 0.6 s for 55k vectors where a row by row scan of vec0
        took 4.7 s), else (another layout of vec0) row by row.

        numpy's own allocation matters for speed: numpy asks the kernel for transparent huge pages on large
        arrays, and a full scan of a 100k x 384 matrix ran ~7% slower over a buffer built from Python bytes
        (4 KiB pages: a TLB miss per page) than over the same data in a numpy array. Filling a preallocated array
        also keeps the peak at one copy of the vectors (plus one block) instead of two."""
        with self.db.conn:  # one read transaction: the map and the blocks agree
            loaded = self._load_vec0_blocks(dims)
            if loaded is not None:
                return loaded
            return self._load_vec0_rows(dims, batch)

    def _load_vec0_blocks(self, dims: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None] | None:
        """vec0's map (chunks_vec_rowids: id -> block, offset) and blocks (chunks_vec_vector_chunks00: `size`
        vectors each, as sqlite-vec 0.1 lays them out); None when the tables are not as expected."""
        where = self._vec0_map()
        if where is None:
            return None
        n = len(where)
        compact = wants_compact(n, dims)
        ids = np.empty(n, dtype=np.int64)
        mat = np.empty((n, dims), dtype=np.int8 if compact else np.float32)
        steps: np.ndarray | None = None
        filled = 0
        starts = np.flatnonzero(np.r_[True, where[1:, 1] != where[:-1, 1]]).tolist() if n else []
        bounds = list(zip(starts, [*starts[1:], n], strict=True)) if n else []  # the rows of each block
        for start, end in bounds:
            block = int(where[start, 1])
            blob = self.db.scalar("SELECT vectors FROM chunks_vec_vector_chunks00 WHERE rowid = ?", (block,))
            offsets = where[start:end, 2]
            if blob is None or len(blob) % (dims * 4) or (len(offsets) and int(offsets.max()) * dims * 4 >= len(blob)):
                log.warning("vec0's tables are not laid out as expected: vectors read row by row")
                return None
            got = np.frombuffer(blob, dtype=np.float32).reshape(-1, dims)[offsets]
            good = np.isfinite(got).all(axis=1) & (got != 0).any(axis=1)
            rowids = where[start:end, 0]
            if not good.all():  # vectors stored before the provider boundary checked them: never served
                log.warning("ignoring %d unusable vectors (NaN, Inf or zero) in the index", int((~good).sum()))
                got, rowids = got[good], rowids[good]
            if compact:
                if steps is None:
                    steps = steps_for(got if len(got) >= SAMPLE_ROWS else self._sample(where, dims))
                got = quantize(got, steps)
            mat[filled : filled + len(got)] = got
            ids[filled : filled + len(got)] = rowids
            filled += len(got)
        if compact and steps is None:
            steps = np.ones(dims, dtype=np.float32) / 127.0
        order = np.argsort(where[:, 0], kind="stable")
        self._vec_where = (
            where[order, 0],
            (where[order, 1] << 16) | where[order, 2],
            self.db.get_meta("model"),
            self._content_keys(where[order, 0]),
        )
        return ids[:filled], mat[:filled], steps

    def _sample(self, where: np.ndarray, dims: int) -> np.ndarray:
        """About SAMPLE_ROWS vectors from vec0's first blocks (the steps of a compact matrix)."""
        out: list[np.ndarray] = []
        got = 0
        for block in dict.fromkeys(where[:, 1].tolist()):
            blob = self.db.scalar("SELECT vectors FROM chunks_vec_vector_chunks00 WHERE rowid = ?", (block,))
            if blob is not None and not len(blob) % (dims * 4):
                rows = np.frombuffer(blob, dtype=np.float32).reshape(-1, dims)
                rows = rows[np.isfinite(rows).all(axis=1) & (rows != 0).any(axis=1)]
                out.append(rows)
                got += len(rows)
            if got >= SAMPLE_ROWS:
                break
        return np.concatenate(out) if out else np.ones((1, dims), dtype=np.float32)

    def _load_vec0_rows(self, dims: int, batch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        n = int(self.db.scalar("SELECT count(*) FROM chunks_vec") or 0)
        compact = wants_compact(n, dims)
        ids = np.empty(n, dtype=np.int64)
        mat = np.empty((n, dims), dtype=np.int8 if compact else np.float32)
        steps: np.ndarray | None = None
        filled = 0
        cursor = self.db.conn.execute("SELECT chunk_id, embedding FROM chunks_vec")
        while filled < n:
            rows = list(itertools.islice(cursor, SAMPLE_ROWS if compact and steps is None else batch))
            if not rows:
                break
            rows = rows[: n - filled]
            got = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(-1, dims)
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
        return ids[:filled], mat[:filled], steps

    def knn(self, query: np.ndarray, k: int, flt: ChunkFilter | None = None) -> list[tuple[int, float]]:
        """Exact cosine KNN: (chunk id, similarity) best first, filters applied before ranking."""
        allowed = self.filters.ids(flt) if flt is not None and not flt.is_empty() else None
        if allowed is not None and not len(allowed):
            return []
        with self.db.lock:  # writes patch the matrix in place
            matrix = self._vectors()
            if len(matrix) == 0 or k <= 0:
                return []
            return matrix.knn(query, k, allowed)

    def knn_vec0(self, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        """KNN through sqlite-vec itself (kept for comparison in benchmarks)."""
        with self.db.lock:
            rows = self.db.conn.execute(
                "SELECT chunk_id, distance FROM chunks_vec WHERE embedding MATCH ? AND k = ?",
                (vector_blob(query), k),
            )
            return [(int(i), 1.0 - float(d)) for i, d in rows]

    def without_vectors(self, chunk_ids: Sequence[int]) -> set[int]:
        """Those of `chunk_ids` that have no vector (none when the index holds no vectors at all)."""
        with self.db.lock:
            matrix = self._vectors()
            return {int(c) for c in chunk_ids if int(c) not in matrix} if len(matrix) else set()

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
            matrix = self._vectors()
            return {p for i, p in rows if i not in matrix}

    def chunk_vectors(self, chunk_ids: Sequence[int]) -> dict[int, np.ndarray]:
        with self.db.lock:
            return self._vectors().vectors(chunk_ids)

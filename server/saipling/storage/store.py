"""The SQLite index (SPEC 5): one class owns the connection; no SQL lives anywhere else. The schema, records
and filter conditions are in `storage/schema.py`, the vector side of the class in `storage/vectors.py`, a file's chunk
writes in `storage/file_writes.py`.

apsw bundles a SQLite that can load extensions (many stdlib builds cannot), sqlite-vec holds the vectors
(vec0, cosine), FTS5 the keywords. Vector KNN runs on an in-memory float32 matrix loaded from vec0 and
kept in step with writes: exact, and faster than vec0's non-SIMD scan (see benchmarks/).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import apsw

from ..errors import IndexCorrupted
from . import fts_bound, index_files, integrity
from .file_writes import FileWrites
from .mentions import (  # noqa: F401 - records re-exported: callers import them from the store
    FileMentionRows,
    MentionRow,
    MentionWrites,
)
from .schema import (  # noqa: F401 - records re-exported: callers import them from the store
    _MIGRATIONS,
    ADDED_COLUMNS,
    CACHE_AS_ROWID_TABLE,
    CHUNK_COLUMNS,
    FTS_TOKENIZE,
    SCHEMA_VERSION,
    VECTORS_CHECKED_META,
    ChunkFilter,
    ChunkRow,
    FileRecord,
    FileState,
    connect,
)
from .vector_matrix import VectorMatrix
from .vectors import VectorStore, cache_key, vector_blob  # noqa: F401 - cache_key re-exported

log = logging.getLogger(__name__)


class Store(FileWrites, MentionWrites, VectorStore):
    """The index of one project."""

    def __init__(self, conn: apsw.Connection, path: str, rebuilt: str | None = None, readonly: bool = False) -> None:
        self.conn = conn
        self.path = path
        self.rebuilt = rebuilt  # reason, when a corrupted index was moved aside at open
        self.readonly = readonly  # opened read-only (a read-only folder or mount): reads only
        # why, when it was opened read-only for a full disk (project.open_store)
        self.disk_full: str | None = None
        # opened without the whole-file check (a big index: storage/integrity.py): the writer checks it after
        self.unverified = False
        self._lock = threading.RLock()
        self._matrix: VectorMatrix | None = None  # the search-time copy of the vectors (storage/vector_matrix.py)
        self._matrix_version: tuple[int, int] | None = None
        self._generation = 0
        self._vgen_written: int | None = None  # the vector generation our last write committed
        self._writes = 0  # our own committed writes to files/chunks (with SQLite's data_version: any change)
        self._vocab = False  # the temp fts5vocab table over chunks_fts exists on this connection
        self._df_cache: dict[str, int] = {}  # term -> chunks holding it, for _df_version of the index
        self._filtered_cache = {}  # a filter's chunk ids / paths, per index state (store_vectors._filtered)
        self._df_version: tuple[int, int] | None = None
        self._df_total = 0

    # -- opening -------------------------------------------------------------------------------------------
    @classmethod
    def open(cls, path: Path | str, *, readonly: bool = False, verify: bool = True) -> Store:
        """Open or create the index; a corrupted file (or a folder where the file should be) is moved aside
        and rebuilt empty. `readonly` opens an existing index without writing anything (IndexCorrupted when
        it cannot be read either). The folder, the database and its side files are never used through a link
        (IndexPathUnsafe names the one refused; storage/index_files.py).

        verify=False skips `PRAGMA quick_check` (it reads every page: ~0.1 s on a 45 MB index) for one-shot
        readers such as a CLI search: a file that is not a database is still caught here, and damaged pages
        raise apsw.CorruptError when read (the CLI reports it); the next indexing run or server rebuilds it.
        With verify=True an index past integrity.VERIFY_INLINE_BYTES is not checked here either (46 s for a
        million chunks) unless a check marked it damaged: `unverified` is set, and the caller checks it on a
        thread (integrity.check_later; Project.open does)."""
        path = str(path)
        if path == ":memory:":
            return cls._opened(connect(path), path, None)
        folder, name = Path(path).parent, Path(path).name
        if readonly:
            with index_files.open_folder(folder, create=False) as dir_fd:
                if dir_fd is None:
                    raise IndexCorrupted(f"cannot read the index {path} (its folder does not exist)")
                return cls._open_readonly(path, cls._checked(folder, dir_fd, name)[0])
        with index_files.open_folder(folder, create=True) as dir_fd:
            assert dir_fd is not None
            index_files.write_gitignore(dir_fd)
            real, st = cls._checked(folder, dir_fd, name)
            rebuilt = None
            inline = verify and (st is None or integrity.verify_at_open(folder, dir_fd, name, st.st_size))
            if st is not None and not stat.S_ISREG(st.st_mode):
                kind = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file"
                moved = cls._move_aside(folder, dir_fd, name)
                rebuilt = f"the index {path} was {kind}; moved it to {moved} and rebuilt it"
                log.warning("%s", rebuilt)
            conn = None
            try:
                conn = connect(real)
                if inline:
                    cls._check(conn)
                else:
                    conn.execute("SELECT count(*) FROM sqlite_master").fetchall()  # NotADB / header damage
                version = next(iter(conn.execute("PRAGMA user_version")))[0]
                if version > len(_MIGRATIONS):
                    raise IndexCorrupted(
                        f"it has schema version {version}, newer than this saipling knows ({len(_MIGRATIONS)})"
                    )
            except (apsw.CorruptError, apsw.NotADBError, IndexCorrupted, apsw.SQLError) as exc:
                cls._close_quietly(conn)
                moved = cls._move_aside(folder, dir_fd, name)
                rebuilt = f"the index was unusable ({exc}); moved it to {moved} and rebuilt it"
                log.warning("%s", rebuilt)
                conn = connect(real)
            except BaseException as exc:
                cls._remember_errno(exc, conn)
                cls._close_quietly(conn)
                raise
            if inline:
                integrity.unmark(dir_fd, name)  # checked now (or rebuilt): a marker left before has done its job
        store = cls._opened(conn, path, rebuilt)
        store.unverified = verify and not inline
        return store

    def check_later(self, on_damaged: Callable[[str], None] | None = None) -> threading.Thread:
        """The whole-file check an `unverified` open left out, on a thread and a connection of its own; a
        damaged index is logged, marked for a rebuild at the next open and told to `on_damaged`."""
        return integrity.check_later(self.path, on_damaged)

    @classmethod
    def _opened(cls, conn: apsw.Connection, path: str, rebuilt: str | None) -> Store:
        store = cls(conn, path, rebuilt)
        try:
            store._configure()
            store._migrate()
        except BaseException as exc:
            cls._remember_errno(exc, conn)
            cls._close_quietly(conn)
            raise
        return store

    @staticmethod
    def _close_quietly(conn: apsw.Connection | None) -> None:
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    @staticmethod
    def _remember_errno(exc: BaseException, conn: apsw.Connection | None) -> None:
        """SQLite's errno of the last OS call (ENOSPC: a full disk, not a read-only index) on its exception."""
        if conn is not None and isinstance(exc, apsw.Error) and not hasattr(exc, "system_errno"):
            with contextlib.suppress(Exception):
                exc.system_errno = conn.system_errno  # type: ignore[attr-defined]

    @staticmethod
    def _checked(folder: Path, dir_fd: int, name: str) -> tuple[str, os.stat_result | None]:
        """The database and its side files checked (no link, no hard link: IndexPathUnsafe names it): the path
        SQLite opens (no link on it; connect() passes SQLITE_OPEN_NOFOLLOW) and the database's lstat."""
        st = index_files.check_entry(folder, name, dir_fd, regular=False)
        for suffix in index_files.SQLITE_SIDE_FILES:
            index_files.check_entry(folder, name + suffix, dir_fd)
        return index_files.sqlite_path(folder, dir_fd, name), st

    @classmethod
    def _open_readonly(cls, path: str, real: str) -> Store:
        """An existing index opened read-only: `mode=ro`, else `immutable=1` (a WAL index in a folder where
        SQLite cannot create its shared-memory file). Nothing is written: no migration, no pragmas that write."""
        last: Exception | None = None
        for immutable in (False, True):
            conn = None
            try:
                conn = connect(real, readonly=True, immutable=immutable)
                cls._check(conn)
                version = next(iter(conn.execute("PRAGMA user_version")))[0]
                if version != len(_MIGRATIONS):
                    raise IndexCorrupted(
                        f"it has schema version {version}, this saipling needs {len(_MIGRATIONS)} and cannot "
                        "migrate a read-only index"
                    )
                return cls(conn, path, None, readonly=True)  # (temp tables still work: searches use one)
            except IndexCorrupted:
                if conn is not None:
                    conn.close()
                raise
            except apsw.Error as exc:
                last = exc
                cls._close_quietly(conn)
        raise IndexCorrupted(f"cannot read the index {path} ({type(last).__name__}: {last})")

    @staticmethod
    def _check(conn: apsw.Connection) -> None:
        rows = list(conn.execute("PRAGMA quick_check"))
        if not rows or rows[0][0] != "ok":
            raise IndexCorrupted("; ".join(str(r[0]) for r in rows[:3]))

    @staticmethod
    def _move_aside(folder: Path, dir_fd: int, name: str) -> str:
        """Rename the index (and its -wal/-shm) to `<name>.corrupt-<time>` in its folder; returns the new name.
        Renamed through the folder's descriptor to names nothing holds (two corruptions in one second keep
        both copies; a link already at a name is never replaced)."""
        target = index_files.free_name(folder, dir_fd, f"{name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
        index_files.rename(dir_fd, name, target)
        for suffix in ("-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                index_files.check_entry(folder, name + suffix, dir_fd)
                index_files.rename(dir_fd, name + suffix, target + suffix)
        return target

    def _configure(self) -> None:
        if self.path != ":memory:":
            self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.execute("PRAGMA foreign_keys=ON")
        self.conn.execute("PRAGMA cache_size=-16384")  # 16 MB: KNN runs on the in-memory matrix, not on pages
        self.conn.execute("PRAGMA mmap_size=67108864")  # mapped pages count as RSS; 64 MB is plenty for FTS
        self.conn.execute("PRAGMA temp_store=MEMORY")

    def _migrate(self) -> None:
        version = self._scalar("PRAGMA user_version") or 0
        for number in range(version, len(_MIGRATIONS)):
            sql = _MIGRATIONS[number]
            for table, statement in ADDED_COLUMNS.get(number + 1, []):
                column = statement.split("ADD COLUMN ", 1)[1].split()[0]
                if column in {r[1] for r in self.conn.execute(f"PRAGMA table_info({table})")}:
                    sql = sql.replace(statement, "")  # (an index that has it already: ALTER would fail)
            with self.conn:
                self.conn.execute(sql)
                self.conn.execute(f"PRAGMA user_version={number + 1}")
        self._upgrade_layout()
        if self.get_meta("schema_version") != str(SCHEMA_VERSION):  # no write (and no commit) on every open
            self.set_meta("schema_version", str(SCHEMA_VERSION))

    def _upgrade_layout(self) -> None:
        """An embedding cache written as `WITHOUT ROWID` becomes a rowid table (storage.schema.CACHE_AS_ROWID_TABLE)."""
        sql = self._scalar("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'embedding_cache'")
        if sql and "WITHOUT ROWID" in str(sql).upper():
            with self.conn:
                self.conn.execute(CACHE_AS_ROWID_TABLE)
            log.info("embedding cache converted to an appended table")

    def close(self, checkpoint: bool = True) -> None:
        """checkpoint=False (one-shot CLI reads): leave the WAL to the next writer, no copy and fsync at close."""
        with self._lock:
            if not self.readonly:
                with contextlib.suppress(Exception):
                    self.conn.execute("PRAGMA optimize")
            if not checkpoint:
                self.conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
            self.conn.close()

    @contextlib.contextmanager
    def atomic(self) -> Iterator[None]:
        """One write transaction (a savepoint when nested); rolled back on any exception.

        The outermost one starts with BEGIN IMMEDIATE: the write lock is taken (waiting up to the busy
        timeout for another process's transaction) before anything is read. A deferred transaction that reads
        first and then writes fails at once with BusyError when another process wrote in between (SQLite
        cannot retry a stale snapshot), which made a server fail files while `saipling index` ran beside it."""
        with self._lock:
            if self.conn.in_transaction:
                with self.conn:
                    yield
                return
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise
            try:
                self.conn.execute("COMMIT")
            except BaseException:
                if self.conn.in_transaction:  # (a commit that failed, e.g. on a full disk, leaves it open)
                    with contextlib.suppress(apsw.Error):
                        self.conn.execute("ROLLBACK")
                raise

    # -- small helpers -------------------------------------------------------------------------------------
    def _scalar(self, sql: str, params: Sequence[Any] = ()) -> Any:
        with self._lock:
            for row in self.conn.execute(sql, params):
                return row[0]
        return None

    def _dicts(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        with self._lock:
            cur = self.conn.execute(sql, params)
            try:
                names = [d[0] for d in cur.get_description()]
            except apsw.ExecutionCompleteError:
                return []
            return [dict(zip(names, row, strict=True)) for row in cur]

    def get_meta(self, key: str, default: str | None = None) -> str | None:
        value = self._scalar("SELECT value FROM meta WHERE key = ?", (key,))
        return default if value is None else value

    def set_meta(self, key: str, value: str) -> None:
        with self.atomic():
            self.conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))

    # -- files ---------------------------------------------------------------------------------------------
    def file_states(self) -> dict[str, FileState]:
        with self._lock:
            return {
                p: FileState(h, m, s)
                for p, h, m, s in self.conn.execute("SELECT path, content_hash, mtime_ns, size FROM files")
            }

    def get_file(self, path: str) -> dict[str, Any] | None:
        rows = self._dicts("SELECT * FROM files WHERE path = ?", (path,))
        return rows[0] if rows else None

    def touch_file(self, path: str, mtime_ns: int, size: int) -> None:
        with self.atomic():
            self.conn.execute("UPDATE files SET mtime_ns = ?, size = ? WHERE path = ?", (mtime_ns, size, path))

    def delete_file(self, path: str) -> bool:
        with self._lock:  # the write and the matrix patch are one step for readers
            with self.atomic():
                existed = bool(self._scalar("SELECT 1 FROM files WHERE path = ?", (path,)))
                removed = self._delete_chunks(path)
                self._drop_file_text(path)
                self.drop_mentions(path)
                self.conn.execute("DELETE FROM files WHERE path = ?", (path,))
                if removed:
                    self._bump_vector_generation()
            self._apply_delta(removed, [])
        return existed

    def clear(self) -> None:
        """Forget every file, chunk and vector (the embedding cache and logs stay: they cost money)."""
        with self.atomic():
            if self.has_vectors():
                self.conn.execute("DELETE FROM chunks_vec")
                self._bump_vector_generation()
            self.conn.execute("DELETE FROM chunks")
            self.conn.execute("DELETE FROM files_fts")
            self.clear_mentions()
            self.conn.execute("DELETE FROM files")
        self._vgen_written = None
        self._invalidate()

    def chunk_hashes(self) -> list[tuple[str, str, int]]:
        """(path, content hash, tokens) of every chunk."""
        with self._lock:
            return [
                (p, h, int(t or 0))
                for p, h, t in self.conn.execute(
                    "SELECT path, content_hash, token_count FROM chunks ORDER BY path, chunk_index"
                )
            ]

    def chunk_texts(self, chunk_ids: Sequence[int]) -> dict[int, tuple[str, str, str]]:
        """chunk id -> (content hash, heading path, text)."""
        rows = self._dicts(
            "SELECT id, content_hash, heading_path, text FROM chunks WHERE id IN (SELECT value FROM json_each(?))",
            (json.dumps([int(i) for i in chunk_ids]),),
        )
        return {r["id"]: (r["content_hash"], r["heading_path"] or "", r["text"] or "") for r in rows}

    def file_states_for(self, paths: Iterable[str]) -> dict[str, FileState]:
        with self._lock:
            return {
                p: FileState(h, m, s)
                for p, h, m, s in self.conn.execute(
                    "SELECT path, content_hash, mtime_ns, size FROM files"
                    " WHERE path IN (SELECT value FROM json_each(?))",
                    (json.dumps(list(paths)),),
                )
            }

    # -- logs and stats ------------------------------------------------------------------------------------
    def log_embedding(self, provider: str, model: str, tokens: int, chunks: int, cost_usd: float) -> None:
        with self.atomic():
            self.conn.execute(
                "INSERT INTO embedding_log(timestamp, provider, model, tokens, chunks, cost_usd) VALUES (?,?,?,?,?,?)",
                (time.time(), provider, model, tokens, chunks, cost_usd),
            )

    def log_search(self, query: str, source: str, mode: str, results: int, top_score: float, elapsed_ms: float) -> None:
        with self.atomic():
            self.conn.execute(
                "INSERT INTO search_log(timestamp, query, source, mode, results, top_score, elapsed_ms)"
                " VALUES (?,?,?,?,?,?,?)",
                (time.time(), query, source, mode, results, top_score, elapsed_ms),
            )

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "totalFiles": self._scalar("SELECT count(*) FROM files") or 0,
                "totalChunks": self._scalar("SELECT count(*) FROM chunks") or 0,
                "embeddedChunks": (self._scalar("SELECT count(*) FROM chunks_vec") or 0) if self.has_vectors() else 0,
                "lastIndexed": self._scalar("SELECT max(last_indexed) FROM files"),
                "totalCostUsd": float(self._scalar("SELECT coalesce(sum(cost_usd), 0) FROM embedding_log") or 0.0),
                "totalTokens": int(self._scalar("SELECT coalesce(sum(tokens), 0) FROM embedding_log") or 0),
                "cachedEmbeddings": self._scalar("SELECT count(*) FROM embedding_cache") or 0,
            }

    def total_tokens_indexed(self) -> int:
        return int(self._scalar("SELECT coalesce(sum(token_count), 0) FROM chunks") or 0)

    # -- reads for search ----------------------------------------------------------------------------------
    def fts_search(self, match: str, limit: int, flt: ChunkFilter | None = None) -> list[tuple[int, float]]:
        """(chunk id, bm25) best first; bm25 is lower-is-better.

        The heading path column weighs the same as the text: FTS5 saturates each column separately and adds
        them, and a section's own heading is in both (its text starts with it), so a weight of 2 counted it
        three times and put tiny sub-sections (`##### Epic Feat` under `#### Fireball`) above the section a
        query names (README "Retrieval quality"). Exact heading matches are handled in retrieval/search.py."""
        # ranked without a join (a join row per match before the sort cost ~3x), then the ranked rows checked
        # against `flt` (a set of every chunk id passing it cost 1.5 s at a million chunks, after every change);
        # all matches are ranked only when the first 4 x limit hold too few that pass. A search that finds more
        # rows than storage.fts_bound.FTS_BUDGET ranks its rarest terms (and a recent share of them) only.
        filtered = flt is not None and not flt.is_empty()
        with self._lock:
            bound = fts_bound.plan(match, self.term_doc_freqs)
            floor = None
            if bound is not None:
                match = bound.match
                floor = fts_bound.rowid_floor(bound.share, *self._rowid_range("chunks"))
            sql = (
                "SELECT rowid, bm25(chunks_fts, 1.0, 1.0, 1.0) AS rank FROM chunks_fts WHERE chunks_fts MATCH ?"
                + (" AND rowid >= ?" if floor is not None else "")
                + " ORDER BY rank"
            )
            params: list[Any] = [match] if floor is None else [match, floor]
            if not filtered:
                return [(int(i), float(r)) for i, r in self.conn.execute(sql + " LIMIT ?", (*params, limit))]
            assert flt is not None
            rows = list(self.conn.execute(sql + " LIMIT ?", (*params, limit * 4)))
            hits = self._passing(rows, flt)
            if len(hits) < limit and len(rows) == limit * 4:
                hits = self._passing(list(self.conn.execute(sql, params)), flt)
        return hits[:limit]

    def _passing(self, rows: list[tuple[int, float]], flt: ChunkFilter) -> list[tuple[int, float]]:
        """Those of the ranked (chunk id, score) rows whose chunk passes `flt`, in their order."""
        where, params = flt.where()
        ok = {
            int(r[0])
            for r in self.conn.execute(
                f"SELECT c.id FROM chunks c WHERE c.id IN (SELECT value FROM json_each(?)) AND {where}",
                [json.dumps([int(i) for i, _ in rows]), *params],
            )
        }
        return [(int(i), float(r)) for i, r in rows if i in ok]

    def _rowid_range(self, table: str) -> tuple[int | None, int | None]:
        """(smallest, largest) rowid of `table` (two b-tree ends: constant time)."""
        low = self._scalar(f"SELECT min(rowid) FROM {table}")
        high = self._scalar(f"SELECT max(rowid) FROM {table}")
        return (None if low is None else int(low)), (None if high is None else int(high))

    def fts_paths(self, match: str, flt: ChunkFilter | None = None) -> list[tuple[str, int | None]]:
        """Every file with a chunk matching the FTS5 query `match` that passes `flt`: (path, chapter number).
        (Frontmatter chunks count: a short body may share the frontmatter's chunk.)"""
        where, params = (flt or ChunkFilter()).where()
        sql = (
            "SELECT c.path, min(c.chapter_num) FROM chunks_fts JOIN chunks c ON c.id = chunks_fts.rowid"
            " WHERE chunks_fts MATCH ?" + (f" AND {where}" if where else "") + " GROUP BY c.path"
        )
        with self._lock:
            return [(str(p), None if n is None else int(n)) for p, n in self.conn.execute(sql, [match, *params])]

    def file_fts_search(self, match: str, limit: int, flt: ChunkFilter | None = None) -> list[tuple[str, float, int]]:
        """(path, whole-file bm25, size in bytes) best first; a file counts when one of its chunks passes `flt`.
        Ranked first, then looked up and filtered by the (cached) paths passing `flt`: a join with the filter's
        subquery over every chunk cost ~30 ms a search on the fiction corpus, the ranking ~1 ms."""
        allowed = self.filtered_paths(flt) if flt is not None and not flt.is_empty() else None
        if allowed is not None and not allowed:
            return []
        with self._lock:
            bound = fts_bound.plan(match, self.term_doc_freqs)  # (the chunks' frequencies: a file holds its chunks)
            floor = None
            if bound is not None:
                match = bound.match
                floor = fts_bound.rowid_floor(bound.share, *self._rowid_range("files"))
            ranked = list(
                self.conn.execute(
                    "SELECT rowid, bm25(files_fts) AS rank FROM files_fts WHERE files_fts MATCH ?"
                    + (" AND rowid >= ?" if floor is not None else "")
                    + " ORDER BY rank"
                    + (" LIMIT ?" if allowed is None else ""),
                    [match, *([floor] if floor is not None else []), *([limit] if allowed is None else [])],
                )
            )
            files = {
                r: (p, n)
                for r, p, n in self.conn.execute(
                    "SELECT rowid, path, size FROM files WHERE rowid IN (SELECT value FROM json_each(?))",
                    (json.dumps([r for r, _ in ranked]),),
                )
            }
        rows = [(*files[r], b) for r, b in ranked if r in files and (allowed is None or files[r][0] in allowed)]
        return [(str(p), float(b), int(n or 0)) for p, n, b in rows[:limit]]

    def term_doc_freqs(self, terms: Sequence[str]) -> tuple[dict[str, int], int]:
        """({term: number of chunks holding it}, number of chunks), terms as the keyword index stems them.
        Kept per term until the index changes (queries repeat their words)."""
        with self._lock:
            version = self._any_version()
            if self._df_version != version:
                self._df_cache.clear()
                self._df_version = version
                self._df_total = int(self._scalar("SELECT count(*) FROM chunks") or 0)
            missing = [t for t in terms if t not in self._df_cache]
            if missing:
                if not self._vocab:
                    self.conn.execute(
                        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.chunks_fts_vocab USING fts5vocab(main, chunks_fts, "
                        "row)"
                    )
                    self._vocab = True
                found = dict.fromkeys(missing, 0)
                for t, d in self.conn.execute(
                    "SELECT term, doc FROM temp.chunks_fts_vocab WHERE term IN (SELECT value FROM json_each(?))",
                    (json.dumps(missing),),
                ):
                    found[str(t)] = int(d)
                if len(self._df_cache) > 10_000:
                    self._df_cache.clear()
                self._df_cache.update(found)
            return {t: self._df_cache[t] for t in terms}, self._df_total

    def chunk_ids_for_paths(self, paths: Sequence[str], flt: ChunkFilter | None = None) -> list[tuple[int, str]]:
        """(chunk id, path) of every chunk of `paths` that passes `flt`."""
        where, params = (flt or ChunkFilter()).where()
        sql = "SELECT c.id, c.path FROM chunks c WHERE c.path IN (SELECT value FROM json_each(?))" + (
            f" AND {where}" if where else ""
        )
        with self._lock:
            return [(int(i), str(p)) for i, p in self.conn.execute(sql, [json.dumps(list(paths)), *params])]

    def chunk_paths(self, chunk_ids: Sequence[int]) -> dict[int, str]:
        with self._lock:
            return {
                int(i): str(p)
                for i, p in self.conn.execute(
                    "SELECT id, path FROM chunks WHERE id IN (SELECT value FROM json_each(?))",
                    (json.dumps([int(i) for i in chunk_ids]),),
                )
            }

    def chunks_with_heading(self, heading: str, flt: ChunkFilter | None = None) -> list[int]:
        """Chunks whose own heading (without its markdown `#`s) is `heading` (ASCII case ignored), in file order."""
        where, params = (flt or ChunkFilter()).where()
        sql = "SELECT c.id FROM chunks c WHERE trim(ltrim(c.section_heading, '#')) = ? COLLATE NOCASE" + (
            f" AND {where}" if where else ""
        )
        with self._lock:
            return [int(r[0]) for r in self.conn.execute(sql + " ORDER BY c.path, c.chunk_index", [heading, *params])]

    def chunks_with_name_heading(self, name: str, flt: ChunkFilter | None = None) -> list[int]:
        """Chunks whose own heading names the identifier `name` (markdown.terms.heading_names): the sections that are
        `name` itself, else (none is) those of a member of that name (`fs.createReadStream` for `createReadStream`)."""
        from ..markdown.terms import heading_names

        where, params = (flt or ChunkFilter()).where()
        pattern = "%" + name.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        sql = "SELECT c.id, c.section_heading FROM chunks c WHERE c.section_heading LIKE ? ESCAPE '\\'" + (
            f" AND {where}" if where else ""
        )
        with self._lock:
            rows = list(self.conn.execute(sql + " ORDER BY c.path, c.chunk_index", [pattern, *params]))
        level = {int(i): heading_names(str(h).lstrip("#"), name) for i, h in rows}
        best = max(level.values(), default=0)
        return [i for i, v in level.items() if v and v == best]

    def entity_chunks(self, name: str, flt: ChunkFilter | None = None) -> list[int]:
        """For each file whose entity name, display name or an alias is `name` (ASCII case ignored): its first
        chunk that passes `flt` (the frontmatter chunk only when it is all there is)."""
        where, params = (flt or ChunkFilter()).where()
        sql = (
            "SELECT (SELECT c.id FROM chunks c WHERE c.path = f.path"
            + (f" AND {where}" if where else "")
            + " ORDER BY c.kind = 'frontmatter', c.chunk_index LIMIT 1) FROM files f"
            " WHERE f.display_name = ? COLLATE NOCASE OR f.entity_name = ? COLLATE NOCASE"
            " OR (instr(lower(f.aliases), lower(?)) > 0"
            "     AND EXISTS (SELECT 1 FROM json_each(f.aliases) a WHERE a.value = ? COLLATE NOCASE))"
        )
        with self._lock:
            rows = self.conn.execute(sql, [*params, name, name, json.dumps(name)[1:-1], name])
            return [int(r[0]) for r in rows if r[0] is not None]

    def chunks_by_id(self, chunk_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
        if not chunk_ids:
            return {}
        rows = self._dicts(
            f"SELECT {', '.join(CHUNK_COLUMNS)} FROM chunks WHERE id IN (SELECT value FROM json_each(?))",
            (json.dumps([int(i) for i in chunk_ids]),),
        )
        return {r["id"]: r for r in rows}

    def chunks_for_path(self, path: str) -> list[dict[str, Any]]:
        return self._dicts(
            f"SELECT {', '.join(CHUNK_COLUMNS)} FROM chunks WHERE path = ? ORDER BY chunk_index", (path,)
        )

    def entities(self) -> list[dict[str, Any]]:
        """Files that may be entities (retrieval.entities.is_entity decides): a chapter's `title` alone is none."""
        return self._dicts(
            "SELECT path, entity_type, entity_name, display_name, aliases, file_type, visibility FROM files"
            " WHERE (aliases IS NOT NULL AND aliases != '[]')"
            " OR (display_name IS NOT NULL AND (file_type = 'character' OR entity_name IS NOT NULL))"
        )

    def headings(self) -> list[dict[str, Any]]:
        return self._dicts(
            "SELECT path, section_heading, heading_path, start_line, end_line, visibility FROM chunks"
            " WHERE section_heading IS NOT NULL ORDER BY path, chunk_index"
        )

    def search_log(self, include_eval: bool = False, limit: int = 100) -> list[dict[str, Any]]:
        table = "search_log" if include_eval else "search_analytics"
        return self._dicts(f"SELECT * FROM {table} ORDER BY id DESC LIMIT ?", (limit,))

"""The SQLite index of one project (SPEC 5), `SqliteStore`: the storage interface (storage/base.py) over one apsw
connection. No SQL lives outside storage/sqlite/. This module opens the file (moving a corrupted one aside,
read-only when it cannot be written), migrates it, answers the file and chunk reads and the logs, and hands the
rest to its parts, which share its `Database` (database.py): `FileWrites` (file_writes.py: a file's chunk
writes, touching only the chunks an edit changed), `Keywords` (keywords.py: FTS5), `Vectors` (vectors.py:
the embedding cache, its change journal, the in-memory matrix), `Mentions` (mentions.py), the filter compiler and its
cache (filters.py), the writer lock (lock.py). Every public method maps apsw's errors to saipling's (errors.py).

apsw bundles a SQLite that can load extensions (many stdlib builds cannot); the embedding cache holds the vectors
(once: schema 8), FTS5 the keywords; sqlite-vec is loaded only to read and drop the vec0 table of an older index.
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
from typing import TYPE_CHECKING, Any

import apsw

from ...errors import IndexCorrupted
from ...markdown.preview import make_preview
from ..base import (
    CHUNK_FIELDS,
    Candidates,
    ChapterFile,
    ChunkFilter,
    ChunkRow,
    EntityRow,
    FileMentionRows,
    FileRecord,
    FileState,
    FileWrite,
    HeadingRow,
    KeywordQuery,
    MentionAt,
    MentionCount,
    PendingChunk,
    ProseRow,
    SearchLogEntry,
    StoredChunk,
    StoredFile,
    StoredMention,
    StoreStats,
    aliases_of,
    candidates_by_calls,
    with_paths_and_vectors,
)
from . import index_files, integrity, keyword_side, lock
from .database import Database
from .errors import mapped_errors, translated
from .file_writes import FileWrites
from .filters import FilterCache, where
from .keyword_side import Claim, KeywordLists, KeywordSide, Unavailable
from .keywords import Keywords
from .lock import HeldLock
from .mentions import Mentions
from .schema import (
    _MIGRATIONS,
    ADDED_COLUMNS,
    CACHE_AS_ROWID_TABLE,
    DROP_JOURNAL_TRIGGERS,
    ENTITY_NAME_INDEXES,
    JOURNAL_SQL,
    MIGRATION_STEPS,
    SCHEMA_VERSION,
    VISIBILITY_READ,
    connect,
)
from .search_log import SearchLog
from .vectors import Vectors

if TYPE_CHECKING:
    from ...lazy import np
    from ..vector_matrix import VectorMatrix

log = logging.getLogger(__name__)

# a StoredChunk's columns, in its fields' order (NULL visibility read as `public`: schema.VISIBILITY_READ)
_CHUNK_SELECT = ", ".join(VISIBILITY_READ if f == "visibility" else f for f in CHUNK_FIELDS)


def _stored_chunk(row: Sequence[Any]) -> StoredChunk:
    """A chunk row read back; its preview derived from its text when the row holds none (file_writes.py stores
    none: it is a function of the text)."""
    chunk = StoredChunk(*row)
    if chunk.preview is None and chunk.text is not None:
        chunk.preview = make_preview(chunk.text)
    return chunk


@mapped_errors
class SqliteStore:
    """The index of one project in a SQLite file (or in memory: `:memory:`)."""

    keeps_previews = False  # a chunk's preview is derived from its text on reading (`_stored_chunk`), never stored

    def __init__(self, conn: apsw.Connection, path: str, rebuilt: str | None = None, readonly: bool = False) -> None:
        self.path = path
        self.rebuilt = rebuilt  # reason, when a corrupted index was moved aside at open
        self.readonly = readonly  # opened read-only (a read-only folder or mount): reads only
        self.shared = False  # (one copy's own index, in its .saipling folder)
        self.copy_id: str | None = None  # (every file is this copy's: storage.base.FileState.changed_here)
        # why, when it was opened read-only for a full disk (storage/sqlite/opening.py)
        self.disk_full: str | None = None
        # opened without the whole-file check (a big index: integrity.py): checked on a thread after (opening.py)
        self.unverified = False
        self._db = Database(conn)
        self._filters = FilterCache(self._db)
        folder = None if path == ":memory:" else Path(path).parent
        self._vectors = Vectors(self._db, self._filters, folder, writable=not readonly)
        self._mentions = Mentions(self._db)
        self._keywords = Keywords(self._db, self._filters)
        self._files = FileWrites(self._db, self._vectors, self._mentions)
        # a hybrid search's keyword reads, on a read-only connection of their own beside the KNN (keyword_side.py)
        self._keyword_side = None if readonly or path == ":memory:" else KeywordSide(conn.filename)
        # with keyword_side.LEXICAL_SPLIT (off) a lexical search splits its lists from the store's second search on:
        # a one-shot CLI's only search would open the worker's connection for it (269k chunks: 80 ms more CPU; S20)
        self._searched = False
        # the search log, in a file of its own beside the index: a search writes nothing to index.db (search_log.py)
        self._search_log = SearchLog(
            self._db, None if path == ":memory:" or not conn.filename else Path(conn.filename), readonly=readonly
        )

    @property
    def conn(self) -> apsw.Connection:
        """The apsw connection (for this backend's own tests and benchmarks)."""
        return self._db.conn

    @property
    def _lock(self) -> threading.RLock:
        return self._db.lock

    @property
    def _matrix(self) -> VectorMatrix | None:
        """The cached search matrix, None until loaded (for tests)."""
        return self._vectors._matrix

    # -- opening -------------------------------------------------------------------------------------------
    @classmethod
    def open(cls, path: Path | str, *, readonly: bool = False, verify: bool = True) -> SqliteStore:
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
    def _opened(cls, conn: apsw.Connection, path: str, rebuilt: str | None) -> SqliteStore:
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
    def _open_readonly(cls, path: str, real: str) -> SqliteStore:
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
                step = MIGRATION_STEPS.get(number + 1)
                if step is not None:
                    step(self.conn)
                self.conn.execute(sql)
                self.conn.execute(f"PRAGMA user_version={number + 1}")
        self._upgrade_layout()
        try:  # (dropped by a first index that was killed before it built them again)
            self._files.restore_indexes()
        except apsw.Error as exc:  # a busy or full disk: reads scan meanwhile, the next writable open builds them
            log.warning("the chunks' indexes were not built again: %s", exc)
        if self.get_meta("schema_version") != str(SCHEMA_VERSION):  # no write (and no commit) on every open
            self.set_meta("schema_version", str(SCHEMA_VERSION))

    def _upgrade_layout(self) -> None:
        """An embedding cache written as `WITHOUT ROWID` becomes a rowid table (storage.schema.CACHE_AS_ROWID_TABLE);
        the indexes of the entity lookup are added when missing (storage.schema.ENTITY_NAME_INDEXES)."""
        sql = self._scalar("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'embedding_cache'")
        if sql and "WITHOUT ROWID" in str(sql).upper():
            with self.conn:
                self.conn.execute(DROP_JOURNAL_TRIGGERS + CACHE_AS_ROWID_TABLE)
                self.conn.execute(JOURNAL_SQL)  # (the cache's journal triggers went with the old table)
            log.info("embedding cache converted to an appended table")
        if not self._scalar("SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = 'files_aliases'"):
            with self.conn:  # (looked up first: no write on an open that finds them)
                self.conn.execute(ENTITY_NAME_INDEXES)

    def close(self, checkpoint: bool = True) -> None:
        """checkpoint=False (one-shot CLI reads): leave the WAL to the next writer, no copy and fsync at close.
        A vector snapshot being written in the background is finished first (a one-shot CLI search wrote it
        after its answer was printed)."""
        self._vectors.wait_for_snapshot()
        self._vectors.close()  # (a mapped snapshot let go)
        if self._keyword_side is not None:
            self._keyword_side.close()
        self._search_log.close(checkpoint)
        with self._lock:
            if not self.readonly:
                with contextlib.suppress(Exception):
                    self.conn.execute("PRAGMA optimize")
            if not checkpoint:
                self.conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
            self.conn.close()

    @contextlib.contextmanager
    def atomic(self) -> Iterator[None]:
        """One write transaction (a savepoint when nested); rolled back on any exception (Database.atomic)."""
        with translated(), self._db.atomic():
            yield

    # -- small helpers -------------------------------------------------------------------------------------
    def _scalar(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self._db.scalar(sql, params)

    def _dicts(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        return self._db.dicts(sql, params)

    def get_meta(self, key: str, default: str | None = None) -> str | None:
        return self._db.get_meta(key, default)

    def set_meta(self, key: str, value: str) -> None:
        self._db.set_meta(key, value)

    def try_set_meta(self, key: str, value: str) -> bool:
        return self._db.try_set_meta(key, value)

    def index_version(self) -> tuple[int, int]:
        """Changes with every committed change to the index, by any process (what caches are keyed on)."""
        return self._db.any_version()

    # -- files ---------------------------------------------------------------------------------------------
    def file_states(self) -> dict[str, FileState]:
        with self._lock:
            return {
                p: FileState(h, m, s)
                for p, h, m, s in self.conn.execute("SELECT path, content_hash, mtime_ns, size FROM files")
            }

    def get_file(self, path: str) -> StoredFile | None:
        rows = self._dicts("SELECT * FROM files WHERE path = ?", (path,))
        if not rows:
            return None
        row = rows[0]
        row["aliases"] = json.loads(row["aliases"] or "[]")
        row["chunk_count"] = int(row["chunk_count"] or 0)
        return StoredFile(**row)

    def replace_file(
        self,
        record: FileRecord,
        chunks: Sequence[ChunkRow],
        vectors: dict[str, np.ndarray] | None = None,
        model: str | None = None,
        mentions: FileMentionRows | None = None,
    ) -> list[int]:
        return self._files.replace_file(record, chunks, vectors, model, mentions)

    def replace_files(self, files: Sequence[FileWrite]) -> None:
        self._files.replace_files(files)

    def defer_indexes(self) -> bool:
        return self._files.defer_indexes()

    def restore_indexes(self) -> None:
        self._files.restore_indexes()

    def fill_file_text(self, max_files: int) -> int:
        return self._files.fill_file_text(max_files)

    def file_text_pending(self) -> bool:
        return self._files.file_text_pending()

    def merge_keywords(self, pages: int) -> bool:
        return self._files.merge_keywords(pages)

    def touch_file(self, path: str, mtime_ns: int, size: int) -> None:
        self._files.touch_file(path, mtime_ns, size)

    def delete_file(self, path: str) -> bool:
        return self._files.delete_file(path)

    def clear(self) -> None:
        """Forget every file, chunk and vector (the embedding cache and logs stay: they cost money); the matrix
        snapshot goes too."""
        self._files.clear()
        self._vectors.wait_for_snapshot()  # (one being written would land after the removal)
        self._vectors.remove_snapshot()

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
        """Into the search log's own file (search_log.py): the index is not written."""
        self._search_log.write((time.time(), query, source, mode, results, top_score, elapsed_ms))

    def stats(self) -> StoreStats:
        with self._lock:
            return StoreStats(
                total_files=self._scalar("SELECT count(*) FROM files") or 0,
                total_chunks=self._scalar("SELECT count(*) FROM chunks") or 0,
                embedded_chunks=self._vectors.stored_count(),
                last_indexed=self._scalar("SELECT max(last_indexed) FROM files"),
                total_cost_usd=float(self._scalar("SELECT coalesce(sum(cost_usd), 0) FROM embedding_log") or 0.0),
                total_tokens=int(self._scalar("SELECT coalesce(sum(tokens), 0) FROM embedding_log") or 0),
                cached_embeddings=self._scalar("SELECT count(*) FROM embedding_cache") or 0,
            )

    def total_tokens_indexed(self) -> int:
        return int(self._scalar("SELECT coalesce(sum(token_count), 0) FROM chunks") or 0)

    # -- reads for search ----------------------------------------------------------------------------------
    def keyword_search(
        self, query: KeywordQuery, limit: int, flt: ChunkFilter | None = None
    ) -> list[tuple[int, float]]:
        return self._keywords.keyword_search(query, limit, flt)

    def keyword_paths(self, query: KeywordQuery, flt: ChunkFilter | None = None) -> list[tuple[str, int | None]]:
        return self._keywords.keyword_paths(query, flt)

    def file_keyword_search(
        self, query: KeywordQuery, limit: int, flt: ChunkFilter | None = None
    ) -> list[tuple[str, float, int]]:
        return self._keywords.file_keyword_search(query, limit, flt)

    def term_doc_freqs(self, terms: Sequence[str]) -> tuple[dict[str, int], int]:
        return self._keywords.term_doc_freqs(terms)

    def search_candidates(
        self,
        query: KeywordQuery | None,
        limit: int,
        file_limit: int,
        qvec: np.ndarray | None = None,
        flt: ChunkFilter | None = None,
    ) -> Candidates:
        side = self._keyword_side
        future = None
        files_here = False
        claim: Claim | None = None
        searched, self._searched = self._searched, True  # (only the process's first search reads alone)
        if (
            side is not None
            and query is not None
            and (qvec is not None or (keyword_side.LEXICAL_SPLIT and file_limit > 0 and searched))
            and self._keywords.term_doc_freqs([])[1] >= keyword_side.MIN_CHUNKS
        ):
            # the chunk list read on the worker's connection while this thread runs the KNN, then reads the
            # whole-file list (hybrid); the whole-file list on the worker while this thread reads the chunk list
            # (lexical, with LEXICAL_SPLIT). keyword_side.py: how the work is split, rows S20 and S24.
            files_here = qvec is not None and keyword_side.HYBRID_FILES_HERE
            # (with HYBRID_FILES_FIRST_FREE, the whole-file list goes to the thread free first: `claim`)
            claim = Claim() if files_here and keyword_side.HYBRID_FILES_FIRST_FREE and file_limit > 0 else None
            worker_files = file_limit if claim is not None or not files_here else 0
            future = side.submit(query, limit if qvec is not None else 0, worker_files, flt, claim)
        if future is None:
            return candidates_by_calls(self, query, limit, file_limit, qvec, flt)
        assert side is not None and query is not None
        out = Candidates()
        early = False  # the paths and vectors read while the worker reads the whole-file list
        try:
            if qvec is not None:
                out.vectors = self.knn(qvec, limit, flt)
                files_here = files_here and (claim is None or claim.take("searcher"))
                if files_here and file_limit > 0:
                    out.files = self.file_keyword_search(query, file_limit, flt)
                elif claim is not None and claim.chunks is not None:  # (the worker took the claim: its chunks are in)
                    out.keywords = claim.chunks
                    out = with_paths_and_vectors(self, out, True)
                    early = True
            else:
                out.keywords = self.keyword_search(query, limit, flt)
        finally:
            try:
                lists: KeywordLists | None = future.result()
            except Unavailable as exc:
                log.warning("keyword reads beside this thread's are off: %s", exc)
                side.disable()
                lists = None
        if lists is None:  # (read here, as before)
            chunks = self.keyword_search(query, limit, flt) if qvec is not None else out.keywords
            files = out.files if files_here or file_limit <= 0 else self.file_keyword_search(query, file_limit, flt)
            lists = (chunks, files)
        if qvec is not None:
            out.keywords = lists[0]
        if not files_here:
            out.files = lists[1]
        return out if early else with_paths_and_vectors(self, out, qvec is not None)

    def chunk_ids_for_paths(self, paths: Sequence[str], flt: ChunkFilter | None = None) -> list[tuple[int, str]]:
        """(chunk id, path) of every chunk of `paths` that passes `flt`."""
        cond, params = where(flt or ChunkFilter())
        sql = "SELECT c.id, c.path FROM chunks c WHERE c.path IN (SELECT value FROM json_each(?))" + (
            f" AND {cond}" if cond else ""
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
        cond, params = where(flt or ChunkFilter())
        sql = "SELECT c.id FROM chunks c WHERE trim(ltrim(c.section_heading, '#')) = ? COLLATE NOCASE" + (
            f" AND {cond}" if cond else ""
        )
        with self._lock:
            return [int(r[0]) for r in self.conn.execute(sql + " ORDER BY c.path, c.chunk_index", [heading, *params])]

    def chunks_with_name_heading(self, name: str, flt: ChunkFilter | None = None) -> list[int]:
        """Chunks whose own heading names the identifier `name` (markdown.terms.heading_names): the sections that are
        `name` itself, else (none is) those of a member of that name (`fs.createReadStream` for `createReadStream`)."""
        from ...markdown.terms import heading_names

        cond, params = where(flt or ChunkFilter())
        pattern = "%" + name.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        # the chunks whose heading path holds the name's words in order, from the keyword index (a heading naming
        # it holds them: heading_names wants the name whole, after `.`, `::` or `#`), instead of reading every
        # chunk's heading (12 s at a million chunks)
        sql = (
            "SELECT c.id, c.section_heading FROM chunks c WHERE c.id IN"
            " (SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ?) AND c.section_heading LIKE ? ESCAPE '\\'"
            + (f" AND {cond}" if cond else "")
        )
        words = 'heading_path : "' + name.replace('"', '""') + '"'
        with self._lock:
            try:
                rows = list(self.conn.execute(sql + " ORDER BY c.path, c.chunk_index", [words, pattern, *params]))
            except apsw.SQLError:  # (a name with no word in it: FTS5 refuses the empty phrase)
                return []
        level = {int(i): heading_names(str(h).lstrip("#"), name) for i, h in rows}
        best = max(level.values(), default=0)
        return [i for i, v in level.items() if v and v == best]

    def entity_type_counts(self, flt: ChunkFilter | None = None) -> dict[str, int]:
        cond, params = where(flt or ChunkFilter())
        sql = (
            "SELECT saipling_lower(coalesce(nullif(trim(c.entity_type), ''), 'document')), count(DISTINCT c.path)"
            " FROM chunks c" + (f" WHERE {cond}" if cond else "") + " GROUP BY 1"
        )
        return {str(t): int(n) for t, n in self._db.rows(sql, params)}

    def entity_chunks(self, name: str, flt: ChunkFilter | None = None) -> list[int]:
        """For each file whose entity name, display name or an alias is `name` (ASCII case ignored): its first
        chunk that passes `flt` (the frontmatter chunk only when it is all there is)."""
        cond, params = where(flt or ChunkFilter())
        # (each name by its index, schema.ENTITY_NAME_INDEXES; aliases from the files that have some; UNION ALL: a
        # UNION merges its parts in rowid order, and SQLite read every file row to give the aliases' part that order)
        sql = (
            "SELECT (SELECT c.id FROM chunks c WHERE c.path = f.path"
            + (f" AND {cond}" if cond else "")
            + " ORDER BY c.kind = 'frontmatter', c.chunk_index LIMIT 1) FROM files f WHERE f.rowid IN"
            " (SELECT rowid FROM files WHERE display_name = ? COLLATE NOCASE"
            "  UNION ALL SELECT rowid FROM files WHERE entity_name = ? COLLATE NOCASE"
            "  UNION ALL SELECT rowid FROM files WHERE aliases IS NOT NULL AND aliases != '[]'"
            "     AND instr(lower(aliases), lower(?)) > 0"
            "     AND EXISTS (SELECT 1 FROM json_each(aliases) a WHERE a.value = ? COLLATE NOCASE))"
            " ORDER BY f.rowid"
        )
        with self._lock:
            rows = self.conn.execute(sql, [*params, name, name, json.dumps(name)[1:-1], name])
            return [int(r[0]) for r in rows if r[0] is not None]

    def chunks_by_id(self, chunk_ids: Sequence[int]) -> dict[int, StoredChunk]:
        if not chunk_ids:
            return {}
        with self._lock:
            rows = self.conn.execute(
                f"SELECT {_CHUNK_SELECT} FROM chunks WHERE id IN (SELECT value FROM json_each(?))",
                (json.dumps([int(i) for i in chunk_ids]),),
            )
            return {r[0]: _stored_chunk(r) for r in rows}

    def chunks_for_path(self, path: str) -> list[StoredChunk]:
        with self._lock:
            rows = self.conn.execute(f"SELECT {_CHUNK_SELECT} FROM chunks WHERE path = ? ORDER BY chunk_index", (path,))
            return [_stored_chunk(r) for r in rows]

    def entities(self) -> list[EntityRow]:
        """Files that may be entities (retrieval.entities.is_entity decides): a chapter's `title` alone is none."""
        return [
            EntityRow(p, et, en, dn, aliases_of(al), ft, vis)
            for p, et, en, dn, al, ft, vis in self._db.rows(
                "SELECT path, entity_type, entity_name, display_name, aliases, file_type, visibility FROM files"
                " WHERE (aliases IS NOT NULL AND aliases != '[]')"
                " OR (display_name IS NOT NULL AND (file_type = 'character' OR entity_name IS NOT NULL))"
            )
        ]

    def headings(self) -> list[HeadingRow]:
        return [
            HeadingRow(*r)
            for r in self._db.rows(
                f"SELECT path, section_heading, heading_path, start_line, end_line, {VISIBILITY_READ} FROM chunks"
                " WHERE section_heading IS NOT NULL ORDER BY path, chunk_index"
            )
        ]

    def search_log(self, include_eval: bool = False, limit: int = 100) -> list[SearchLogEntry]:
        return self._search_log.rows(include_eval, limit)

    # -- vectors and the embedding cache (vectors.py) ------------------------------------------------------
    def has_vectors(self) -> bool:
        return self._vectors.has_vectors()

    def vector_model(self) -> tuple[str | None, int]:
        return self._vectors.vector_model()

    def configure_vectors(self, provider: str, model: str, dimensions: int) -> bool:
        return self._vectors.configure_vectors(provider, model, dimensions)

    def cached_vectors(self, model: str, hashes: Iterable[str], dims: int = 0) -> dict[str, np.ndarray]:
        return self._vectors.cached_vectors(model, hashes, dims)

    def chunks_missing_vectors(self, limit: int = 100_000) -> list[PendingChunk]:
        return self._vectors.chunks_missing_vectors(limit)

    def drop_unusable_vectors(self) -> int:
        return self._vectors.drop_unusable_vectors()

    def count_unembedded(self, model: str | None = None, dims: int = 0) -> int:
        return self._vectors.count_unembedded(model, dims)

    def unembedded_share(self, model: str, dims: int) -> tuple[int, int]:
        return self._vectors.unembedded_share(model, dims)

    def unembedded(self, hold: Iterable[str] = (), first: Iterable[str] = ()) -> list[tuple[int, str, str, int]]:
        return self._vectors.unembedded(hold, first)

    def set_vectors(self, items: Sequence[tuple[int, str, np.ndarray]], model: str) -> None:
        self._vectors.set_vectors(items, model)

    def embedded_count(self) -> int:
        return self._vectors.embedded_count()

    def nearest_other_file_cosines(self, sample: int, seed: int = 0) -> tuple[int, list[float]]:
        return self._vectors.nearest_other_file_cosines(sample, seed)

    def knn(self, query: np.ndarray, k: int, flt: ChunkFilter | None = None) -> list[tuple[int, float]]:
        return self._vectors.knn(query, k, flt)

    def without_vectors(self, chunk_ids: Sequence[int]) -> set[int]:
        return self._vectors.without_vectors(chunk_ids)

    def paths_without_vectors(self, paths: Sequence[str]) -> set[str]:
        return self._vectors.paths_without_vectors(paths)

    def chunk_vectors(self, chunk_ids: Sequence[int]) -> dict[int, np.ndarray]:
        return self._vectors.chunk_vectors(chunk_ids)

    def vector_matrix(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids, unit vectors) of every embedded chunk (copies; for tests and benchmarks)."""
        return self._vectors.vector_matrix()

    def filtered_ids(self, flt: ChunkFilter) -> np.ndarray:
        """The ids of the chunks passing `flt`, cached until the index changes (filters.FilterCache)."""
        return self._filters.ids(flt)

    def filtered_paths(self, flt: ChunkFilter) -> frozenset[str]:
        """The paths of the files with a chunk passing `flt`, cached the same way."""
        return self._filters.paths(flt)

    # -- mentions (mentions.py) ----------------------------------------------------------------------------
    def write_mentions(self, path: str, found: FileMentionRows) -> None:
        self._mentions.write_mentions(path, found)

    def relabel_mentions(self, paths: Sequence[str], names_key: str) -> None:
        self._mentions.relabel_mentions(paths, names_key)

    def mention_stale_keys(self, names_key: str) -> list[tuple[str, str | None]]:
        return self._mentions.mention_stale_keys(names_key)

    def mention_stale_paths(self, names_key: str) -> list[str]:
        return self._mentions.mention_stale_paths(names_key)

    def mentions_unscanned(self) -> bool:
        return self._mentions.mentions_unscanned()

    def mention_paths(self, entity_paths: Sequence[str]) -> list[str]:
        return self._mentions.mention_paths(entity_paths)

    def known_paths(self, entity_paths: Sequence[str], povs: Sequence[str]) -> list[str]:
        return self._mentions.known_paths(entity_paths, povs)

    def mentions_of(self, entity_paths: Sequence[str]) -> list[StoredMention]:
        return self._mentions.mentions_of(entity_paths)

    def mention_counts(self, entity_paths: Sequence[str]) -> list[MentionCount]:
        return self._mentions.mention_counts(entity_paths)

    def mentions_in(self, entity_paths: Sequence[str], paths: Sequence[str]) -> list[MentionAt]:
        return self._mentions.mentions_in(entity_paths, paths)

    def chapter_files_digest(self) -> str:
        return self._mentions.chapter_files_digest()

    def chapter_files(self) -> list[ChapterFile]:
        return self._mentions.chapter_files()

    def chapter_num_of(self, path: str) -> int | None:
        return self._mentions.chapter_num_of(path)

    def prose(self) -> list[ProseRow]:
        return self._mentions.prose()

    # -- the writer lock (lock.py: a lock file next to the index) ------------------------------------------
    def writer_lock(
        self,
        *,
        wait: bool = True,
        cancel: threading.Event | None = None,
        on_wait: Callable[[int | None], None] | None = None,
        timeout: float | None = None,
        what: str = "index",
    ) -> contextlib.AbstractContextManager[HeldLock | None]:
        """Hold the index's lock file (`.saipling/index.lock`) for the block (lock.index_lock); an in-memory
        index has nothing to lock."""
        if self.path == ":memory:":
            return contextlib.nullcontext()
        return lock.index_lock(
            Path(self.path).parent, wait=wait, cancel=cancel, on_wait=on_wait, timeout=timeout, what=what
        )

    def other_run(self) -> dict[str, Any] | None:
        if self.path == ":memory:":
            return None
        return lock.other_run(Path(self.path).parent)

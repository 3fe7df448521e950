"""The SQLite index (SPEC 5): one class owns the connection; no SQL lives anywhere else.

apsw bundles a SQLite that can load extensions (many stdlib builds cannot), sqlite-vec holds the vectors
(vec0, cosine), FTS5 the keywords. Vector KNN runs on an in-memory float32 matrix loaded from vec0 and
kept in step with writes: exact, and faster than vec0's non-SIMD scan (see benchmarks/).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw
import numpy as np
import sqlite_vec

from .embeddings.base import usable_vector
from .errors import IndexCorrupted
from .vector_matrix import VectorMatrix

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2
VECTORS_CHECKED_META = "vectors_checked"  # meta key: stored vectors were scanned for NaN/Inf/zero rows
FTS_TOKENIZE = "porter unicode61 remove_diacritics 2"

_MIGRATIONS: list[str] = [
    # 1: initial schema
    f"""
    CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
    CREATE TABLE IF NOT EXISTS files(
        path TEXT PRIMARY KEY, content_hash TEXT NOT NULL, mtime_ns INTEGER NOT NULL, size INTEGER NOT NULL,
        file_type TEXT, encoding TEXT, last_indexed REAL, chunk_count INTEGER DEFAULT 0,
        entity_type TEXT, entity_name TEXT, display_name TEXT, aliases TEXT, book_id TEXT, chapter_id TEXT,
        visibility TEXT, corpus TEXT, warning TEXT);
    CREATE TABLE IF NOT EXISTS chunks(
        id INTEGER PRIMARY KEY, path TEXT NOT NULL, chunk_index INTEGER NOT NULL, kind TEXT,
        section_heading TEXT, heading_path TEXT, start_line INTEGER, end_line INTEGER, content_hash TEXT,
        preview TEXT, token_count INTEGER, text TEXT, file_type TEXT, entity_type TEXT, entity_name TEXT,
        book_id TEXT, chapter_id TEXT, chapter_num INTEGER, visibility TEXT, corpus TEXT,
        UNIQUE(path, chunk_index));
    CREATE INDEX IF NOT EXISTS chunks_hash ON chunks(content_hash);
    CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
        text, heading_path, content='chunks', content_rowid='id', tokenize='{FTS_TOKENIZE}');
    CREATE TRIGGER IF NOT EXISTS chunks_ai AFTER INSERT ON chunks BEGIN
        INSERT INTO chunks_fts(rowid, text, heading_path) VALUES (new.id, new.text, new.heading_path);
    END;
    CREATE TRIGGER IF NOT EXISTS chunks_ad AFTER DELETE ON chunks BEGIN
        INSERT INTO chunks_fts(chunks_fts, rowid, text, heading_path)
        VALUES ('delete', old.id, old.text, old.heading_path);
    END;
    CREATE TRIGGER IF NOT EXISTS chunks_au AFTER UPDATE ON chunks BEGIN
        INSERT INTO chunks_fts(chunks_fts, rowid, text, heading_path)
        VALUES ('delete', old.id, old.text, old.heading_path);
        INSERT INTO chunks_fts(rowid, text, heading_path) VALUES (new.id, new.text, new.heading_path);
    END;
    CREATE TABLE IF NOT EXISTS embedding_cache(
        model TEXT NOT NULL, content_hash TEXT NOT NULL, vector BLOB NOT NULL, created REAL,
        PRIMARY KEY(model, content_hash)) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS embedding_log(
        id INTEGER PRIMARY KEY, timestamp REAL, provider TEXT, model TEXT, tokens INTEGER, chunks INTEGER,
        cost_usd REAL);
    CREATE TABLE IF NOT EXISTS search_log(
        id INTEGER PRIMARY KEY, timestamp REAL, query TEXT, source TEXT, mode TEXT, results INTEGER,
        top_score REAL, elapsed_ms REAL);
    CREATE VIEW IF NOT EXISTS search_analytics AS SELECT * FROM search_log WHERE source != 'eval';
    """,
    # 2: a file-level keyword index (whole-file BM25: search.py's lexical signal for short files), rowid =
    # files.rowid; contentless (the text lives in chunks) and filled from the chunks already indexed.
    f"""
    CREATE VIRTUAL TABLE IF NOT EXISTS files_fts USING fts5(
        text, content='', contentless_delete=1, tokenize='{FTS_TOKENIZE}');
    INSERT INTO files_fts(rowid, text)
        SELECT f.rowid, (SELECT group_concat(c.text, char(10) ORDER BY c.chunk_index) FROM chunks c
                         WHERE c.path = f.path)
        FROM files f;
    CREATE INDEX IF NOT EXISTS chunks_heading ON chunks(trim(ltrim(section_heading, '#')) COLLATE NOCASE);
    """,
]

CHUNK_COLUMNS = (
    "id", "path", "chunk_index", "kind", "section_heading", "heading_path", "start_line", "end_line",
    "content_hash", "preview", "token_count", "text", "file_type", "entity_type", "entity_name", "book_id",
    "chapter_id", "chapter_num", "visibility", "corpus",
)  # fmt: skip


@dataclass
class FileState:
    content_hash: str
    mtime_ns: int
    size: int


@dataclass
class FileRecord:
    path: str
    content_hash: str
    mtime_ns: int
    size: int
    file_type: str
    encoding: str
    entity_type: str | None = None
    entity_name: str | None = None
    display_name: str | None = None
    aliases: list[str] = field(default_factory=list)
    book_id: str | None = None
    chapter_id: str | None = None
    visibility: str = "public"
    corpus: str = "content"
    warning: str | None = None


@dataclass
class ChunkRow:
    chunk_index: int
    kind: str
    section_heading: str | None
    heading_path: str
    start_line: int
    end_line: int
    content_hash: str
    preview: str
    token_count: int
    text: str
    file_type: str
    entity_type: str | None
    entity_name: str | None
    book_id: str | None
    chapter_id: str | None
    chapter_num: int | None
    visibility: str
    corpus: str


@dataclass
class ChunkFilter:
    """Conditions applied in SQL before ranking."""

    entity_types: list[str] = field(default_factory=list)
    file_types: list[str] = field(default_factory=list)
    book_id: str | None = None
    book_scope: str | None = None  # this book's chunks plus those that belong to no book
    chapter_id: str | None = None
    max_chapter: int | None = None
    path_prefix: str | None = None
    glob: str | None = None
    corpus: str | None = None
    visibility: list[str] | None = None  # None = no restriction
    exclude_paths: list[str] = field(default_factory=list)
    only_paths: list[str] | None = None

    def is_empty(self) -> bool:
        return self.where() == ("", [])

    def where(self) -> tuple[str, list[Any]]:
        """SQL condition over `chunks` (alias c) and its parameters."""
        conds: list[str] = []
        params: list[Any] = []
        if self.entity_types:
            conds.append(f"c.entity_type IN ({','.join('?' * len(self.entity_types))})")
            params += self.entity_types
        if self.file_types:
            conds.append(f"c.file_type IN ({','.join('?' * len(self.file_types))})")
            params += self.file_types
        if self.book_id:
            conds.append("c.book_id = ?")
            params.append(self.book_id)
        if self.book_scope:
            conds.append("(c.book_id IS NULL OR c.book_id = ?)")
            params.append(self.book_scope)
        if self.chapter_id:
            conds.append("c.chapter_id = ?")
            params.append(self.chapter_id)
        if self.max_chapter is not None:
            conds.append("(c.chapter_num IS NULL OR c.chapter_num <= ?)")
            params.append(self.max_chapter)
        if self.path_prefix:
            conds.append("substr(c.path, 1, ?) = ?")
            params += [len(self.path_prefix), self.path_prefix]
        if self.glob:
            conds.append("saipling_glob(c.path, ?)")
            params.append(self.glob)
        if self.corpus:
            conds.append("c.corpus = ?")
            params.append(self.corpus)
        if self.visibility is not None:  # levels compare case-insensitively (visibility.py); NULL is public
            conds.append(
                f"lower(trim(coalesce(c.visibility, 'public'))) IN ({','.join('?' * len(self.visibility)) or 'NULL'})"
            )
            params += self.visibility
        if self.exclude_paths:
            conds.append("c.path NOT IN (SELECT value FROM json_each(?))")
            params.append(json.dumps(self.exclude_paths))
        if self.only_paths is not None:
            conds.append("c.path IN (SELECT value FROM json_each(?))")
            params.append(json.dumps(self.only_paths))
        return " AND ".join(conds), params


def connect(path: Path | str, readonly: bool = False, immutable: bool = False) -> apsw.Connection:
    """A connection with sqlite-vec loaded and our SQL functions registered (read-only: never writes, and
    `immutable` also takes no locks: for a folder where SQLite cannot create its -shm file)."""
    if readonly:
        uri = Path(path).resolve().as_uri() + ("?immutable=1" if immutable else "?mode=ro")
        conn = apsw.Connection(uri, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
    else:
        conn = apsw.Connection(str(path))
    conn.enable_load_extension(True)
    conn.load_extension(sqlite_vec.loadable_path())
    conn.enable_load_extension(False)
    conn.set_busy_timeout(10_000)
    from .paths import glob_match

    conn.create_scalar_function(
        "saipling_glob", lambda p, g: 1 if glob_match(p, g) else 0, 2, deterministic=True
    )
    return conn


def cache_key(model: str, dims: int) -> str:
    """The embedding-cache key of `model` embedding at `dims` dimensions (one model name, several sizes)."""
    return f"{model}@{int(dims)}" if dims else model


def vector_blob(vec: np.ndarray) -> bytes:
    return np.asarray(vec, dtype=np.float32).tobytes()


class Store:
    """The index of one project."""

    def __init__(
        self, conn: apsw.Connection, path: str, rebuilt: str | None = None, readonly: bool = False
    ) -> None:
        self.conn = conn
        self.path = path
        self.rebuilt = rebuilt  # reason, when a corrupted index was moved aside at open
        self.readonly = readonly  # opened read-only (a read-only folder or mount): reads only
        self._lock = threading.RLock()
        self._matrix: VectorMatrix | None = None  # the search-time copy of the vectors (vector_matrix.py)
        self._matrix_version: tuple[int, int] | None = None
        self._generation = 0
        self._vocab = False  # the temp fts5vocab table over chunks_fts exists on this connection
        self._df_cache: dict[str, int] = {}  # term -> chunks holding it, for _df_version of the index
        self._df_version: tuple[int, int] | None = None
        self._df_total = 0

    # -- opening -------------------------------------------------------------------------------------------
    @classmethod
    def open(cls, path: Path | str, *, readonly: bool = False) -> Store:
        """Open or create the index; a corrupted file (or a folder where the file should be) is moved aside
        and rebuilt empty. `readonly` opens an existing index without writing anything (IndexReadOnly when
        it cannot be read either)."""
        path = str(path)
        if readonly:
            return cls._open_readonly(path)
        rebuilt = None
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            gi = Path(path).parent / ".gitignore"
            if not gi.exists():
                with contextlib.suppress(OSError):  # (a read-only folder: opening fails below, clearly)
                    gi.write_text("*\n", encoding="utf-8")
            target = Path(path)
            if (target.exists() or target.is_symlink()) and not target.is_file():
                kind = "a folder" if target.is_dir() else "not a regular file"
                moved = cls._move_aside(target)
                rebuilt = f"the index {target} was {kind}; moved it to {moved.name} and rebuilt it"
                log.warning("%s", rebuilt)
        try:
            conn = connect(path)
            cls._check(conn)
            version = next(iter(conn.execute("PRAGMA user_version")))[0]
            if version > len(_MIGRATIONS):
                raise IndexCorrupted(
                    f"it has schema version {version}, newer than this saipling knows ({len(_MIGRATIONS)})"
                )
        except (apsw.CorruptError, apsw.NotADBError, IndexCorrupted, apsw.SQLError) as exc:
            with contextlib.suppress(Exception):
                conn.close()
            if path == ":memory:":
                raise
            moved = cls._move_aside(Path(path))
            rebuilt = f"the index was unusable ({exc}); moved it to {moved.name} and rebuilt it"
            log.warning("%s", rebuilt)
            conn = connect(path)
        except BaseException:
            with contextlib.suppress(Exception):
                conn.close()
            raise
        store = cls(conn, path, rebuilt)
        try:
            store._configure()
            store._migrate()
        except BaseException:
            with contextlib.suppress(Exception):
                conn.close()
            raise
        return store

    @classmethod
    def _open_readonly(cls, path: str) -> Store:
        """An existing index opened read-only: `mode=ro`, else `immutable=1` (a WAL index in a folder where
        SQLite cannot create its shared-memory file). Nothing is written: no migration, no pragmas that write."""
        last: Exception | None = None
        for immutable in (False, True):
            conn = None
            try:
                conn = connect(path, readonly=True, immutable=immutable)
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
                if conn is not None:
                    with contextlib.suppress(Exception):
                        conn.close()
        raise IndexCorrupted(f"cannot read the index {path} ({type(last).__name__}: {last})")

    @staticmethod
    def _check(conn: apsw.Connection) -> None:
        rows = list(conn.execute("PRAGMA quick_check"))
        if not rows or rows[0][0] != "ok":
            raise IndexCorrupted("; ".join(str(r[0]) for r in rows[:3]))

    @staticmethod
    def _move_aside(path: Path) -> Path:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        target = path.with_name(f"{path.name}.corrupt-{stamp}")
        n = 1
        while target.exists():  # two corruptions in the same second keep both copies
            n += 1
            target = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
        path.replace(target)
        for suffix in ("-wal", "-shm"):
            side = Path(str(path) + suffix)
            if side.exists():
                side.replace(Path(str(target) + suffix))
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
            with self.conn:
                self.conn.execute(_MIGRATIONS[number])
                self.conn.execute(f"PRAGMA user_version={number + 1}")
        self.set_meta("schema_version", str(SCHEMA_VERSION))

    def close(self) -> None:
        with self._lock:
            if not self.readonly:
                with contextlib.suppress(Exception):
                    self.conn.execute("PRAGMA optimize")
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

    # -- vectors configuration -----------------------------------------------------------------------------
    def has_vectors(self) -> bool:
        return bool(self._scalar("SELECT 1 FROM sqlite_master WHERE name = 'chunks_vec'"))

    def vector_model(self) -> tuple[str | None, int]:
        return self.get_meta("model"), int(self.get_meta("dimensions", "0") or 0)

    def configure_vectors(self, provider: str, model: str, dimensions: int) -> bool:
        """Record the provider; a different model or dimension drops the vectors (never mixed). True if reset."""
        with self._lock:  # readers never see the new table with the old matrix
            return self._configure_vectors(provider, model, dimensions)

    def _configure_vectors(self, provider: str, model: str, dimensions: int) -> bool:
        old_model, old_dims = self.vector_model()
        reset = created = False
        with self.atomic():
            if self.has_vectors() and (old_model != model or old_dims != dimensions):
                self.conn.execute("DROP TABLE chunks_vec")
                reset = True
            if dimensions > 0 and not self.has_vectors():
                created = True
                self.conn.execute(
                    f"CREATE VIRTUAL TABLE chunks_vec USING vec0("
                    f"chunk_id INTEGER PRIMARY KEY, embedding float[{int(dimensions)}] distance_metric=cosine)"
                )
            for key, value in (("provider", provider), ("model", model), ("dimensions", str(dimensions))):
                self.conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))
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
            self._invalidate()
        return reset

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
            self.conn.execute(
                "UPDATE files SET mtime_ns = ?, size = ? WHERE path = ?", (mtime_ns, size, path)
            )

    def replace_file(
        self,
        record: FileRecord,
        chunks: Sequence[ChunkRow],
        vectors: dict[str, np.ndarray] | None = None,
        model: str | None = None,
    ) -> None:
        """Swap a file's chunks (and vectors) in one transaction. `vectors` maps content_hash -> vector."""
        with self._lock:  # the write and the matrix patch are one step for readers
            vectors = vectors or {}
            added: list[tuple[int, np.ndarray]] = []
            with self.atomic():
                has_vec = self.has_vectors()
                # vectors of chunks whose text is unchanged stay (an edit re-embeds only what it changed)
                kept = self._file_vectors(record.path) if has_vec else {}
                vectors = {**kept, **vectors}
                removed = self._delete_chunks(record.path)
                for ch in chunks:
                    cur = self.conn.execute(
                        "INSERT INTO chunks(path, chunk_index, kind, section_heading, heading_path, start_line, end_line,"
                        " content_hash, preview, token_count, text, file_type, entity_type, entity_name, book_id,"
                        " chapter_id, chapter_num, visibility, corpus) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                        (record.path, ch.chunk_index, ch.kind, ch.section_heading, ch.heading_path, ch.start_line,
                         ch.end_line, ch.content_hash, ch.preview, ch.token_count, ch.text, ch.file_type,
                         ch.entity_type, ch.entity_name, ch.book_id, ch.chapter_id, ch.chapter_num, ch.visibility,
                         ch.corpus),
                    )  # fmt: skip
                    del cur
                    vec = vectors.get(ch.content_hash)
                    if has_vec and vec is not None:
                        chunk_id = self.conn.last_insert_rowid()
                        self.conn.execute(
                            "INSERT INTO chunks_vec(chunk_id, embedding) VALUES (?, ?)",
                            (chunk_id, vector_blob(vec)),
                        )
                        added.append((chunk_id, vec))
                if model:
                    now = time.time()
                    self.conn.executemany(
                        "INSERT OR REPLACE INTO embedding_cache(model, content_hash, vector, created) VALUES (?,?,?,?)",
                        [(model, h, vector_blob(v), now) for h, v in vectors.items() if h not in kept],
                    )
                self._drop_file_text(record.path)
                self.conn.execute(
                    "INSERT OR REPLACE INTO files(path, content_hash, mtime_ns, size, file_type, encoding, last_indexed,"
                    " chunk_count, entity_type, entity_name, display_name, aliases, book_id, chapter_id, visibility,"
                    " corpus, warning) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (record.path, record.content_hash, record.mtime_ns, record.size, record.file_type, record.encoding,
                     time.time(), len(chunks), record.entity_type, record.entity_name, record.display_name,
                     json.dumps(record.aliases), record.book_id, record.chapter_id, record.visibility, record.corpus,
                     record.warning),
                )  # fmt: skip
                self.conn.execute(
                    "INSERT INTO files_fts(rowid, text) VALUES (?, ?)",
                    (self.conn.last_insert_rowid(), "\n".join(ch.text for ch in chunks)),
                )
            self._apply_delta(removed, added)

    def _file_vectors(self, path: str) -> dict[str, np.ndarray]:
        """The vectors a file's chunks have now, by content hash."""
        ids = {
            r[0]: r[1]
            for r in self.conn.execute("SELECT id, content_hash FROM chunks WHERE path = ?", (path,))
        }
        out: dict[str, np.ndarray] = {}
        for cid, h in ids.items():  # (vec0 answers `IN (subquery)` with a full scan: one lookup per chunk)
            for (blob,) in self.conn.execute("SELECT embedding FROM chunks_vec WHERE chunk_id = ?", (cid,)):
                out[h] = np.frombuffer(blob, dtype=np.float32).copy()
        return out

    def _drop_file_text(self, path: str) -> None:
        """Remove a file's row from the file-level keyword index (before its files row goes or is replaced)."""
        rowid = self._scalar("SELECT rowid FROM files WHERE path = ?", (path,))
        if rowid is not None:
            self.conn.execute("DELETE FROM files_fts WHERE rowid = ?", (rowid,))

    def _delete_chunks(self, path: str) -> list[int]:
        """Delete a file's chunks and vectors; returns the chunk ids whose vectors were removed."""
        ids: list[int] = []
        if self.has_vectors():
            # vec0 answers `chunk_id IN (subquery)` with a full scan; deleting by primary key is a lookup each
            ids = [r[0] for r in self.conn.execute("SELECT id FROM chunks WHERE path = ?", (path,))]
            self.conn.executemany("DELETE FROM chunks_vec WHERE chunk_id = ?", [(i,) for i in ids])
        self.conn.execute("DELETE FROM chunks WHERE path = ?", (path,))
        return ids

    def delete_file(self, path: str) -> bool:
        with self._lock:  # the write and the matrix patch are one step for readers
            with self.atomic():
                existed = bool(self._scalar("SELECT 1 FROM files WHERE path = ?", (path,)))
                removed = self._delete_chunks(path)
                self._drop_file_text(path)
                self.conn.execute("DELETE FROM files WHERE path = ?", (path,))
            self._apply_delta(removed, [])
        return existed

    def clear(self) -> None:
        """Forget every file, chunk and vector (the embedding cache and logs stay: they cost money)."""
        with self.atomic():
            if self.has_vectors():
                self.conn.execute("DELETE FROM chunks_vec")
            self.conn.execute("DELETE FROM chunks")
            self.conn.execute("DELETE FROM files_fts")
            self.conn.execute("DELETE FROM files")
        self._invalidate()

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
        with self._lock:
            for i in range(0, len(hashes), 500):
                part = hashes[i : i + 500]
                for h, blob in self.conn.execute(
                    "SELECT content_hash, vector FROM embedding_cache WHERE model IN (SELECT value FROM json_each(?))"
                    " AND content_hash IN (SELECT value FROM json_each(?)) AND (? < 0 OR length(vector) = ?)",
                    (json.dumps(keys), json.dumps(part), size, size),
                ):
                    vec = np.frombuffer(blob, dtype=np.float32)
                    if usable_vector(vec):  # a poisoned row (NaN, Inf, zero) is never served: re-embedded
                        out[h] = vec
        return out

    def chunks_missing_vectors(self, limit: int = 100_000) -> list[dict[str, Any]]:
        if not self.has_vectors():
            return []
        return self._dicts(
            "SELECT c.id, c.path, c.heading_path, c.text, c.content_hash FROM chunks c"
            " WHERE c.id NOT IN (SELECT chunk_id FROM chunks_vec) ORDER BY c.path, c.chunk_index LIMIT ?",
            (limit,),
        )

    def drop_unusable_vectors(self) -> int:
        """Delete vectors (in the vector table and the embedding cache) that hold NaN, Inf or only zeros, so the
        chunks are embedded again. Such rows came from providers before their answers were checked; the scan
        runs once per index (recorded in meta)."""
        if self.get_meta(VECTORS_CHECKED_META) == "1":
            return 0
        bad_ids: list[int] = []
        bad_cache: list[tuple[str, str]] = []
        with self._lock:
            if self.has_vectors():
                for chunk_id, blob in self.conn.execute("SELECT chunk_id, embedding FROM chunks_vec"):
                    if not usable_vector(np.frombuffer(blob, dtype=np.float32)):
                        bad_ids.append(int(chunk_id))
            for model, h, blob in self.conn.execute(
                "SELECT model, content_hash, vector FROM embedding_cache"
            ):
                if len(blob) % 4 or not usable_vector(np.frombuffer(blob, dtype=np.float32)):
                    bad_cache.append((model, h))
            with self.atomic():
                self.conn.executemany("DELETE FROM chunks_vec WHERE chunk_id = ?", [(i,) for i in bad_ids])
                self.conn.executemany(
                    "DELETE FROM embedding_cache WHERE model = ? AND content_hash = ?", bad_cache
                )
                self.conn.execute(
                    "INSERT OR REPLACE INTO meta(key, value) VALUES (?, '1')", (VECTORS_CHECKED_META,)
                )
            if bad_ids:
                self._apply_delta(bad_ids, [])
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
        with self._lock:
            total = int(self._scalar("SELECT count(*) FROM chunks") or 0)
            stored_model, stored_dims = self.vector_model()
            if model is None:
                model, dims = stored_model, stored_dims
            if not model or not self.has_vectors() or stored_model != model or (dims and stored_dims != dims):
                return total
            return int(
                self._scalar("SELECT count(*) FROM chunks WHERE id NOT IN (SELECT chunk_id FROM chunks_vec)")
                or 0
            )

    def unembedded(
        self, hold: Iterable[str] = (), first: Iterable[str] = ()
    ) -> list[tuple[int, str, str, int]]:
        """(chunk id, path, content hash, tokens) of chunks without a vector, in the order to embed them: the
        files in `first` (open in an editor), then the most recently modified files; files in `hold` (still
        being edited: waiting for their quiet period) are left out."""
        if not self.has_vectors():
            return []
        with self._lock:
            embedded = {r[0] for r in self.conn.execute("SELECT chunk_id FROM chunks_vec")}
            rows = [
                r
                for r in self.conn.execute(
                    "SELECT c.id, c.path, c.content_hash, c.token_count, f.mtime_ns FROM chunks c"
                    " JOIN files f ON f.path = c.path ORDER BY c.path, c.chunk_index"
                )
                if r[0] not in embedded
            ]
        held, top = set(hold), {p: i for i, p in enumerate(dict.fromkeys(first))}
        rows = [r for r in rows if r[1] not in held]
        # mtime 0 marks a file read within its timestamp tick (see indexer.is_racy): just written, so recent
        rows.sort(key=lambda r: (top.get(r[1], len(top)), -(r[4] or (1 << 62))))
        return [(int(r[0]), r[1], r[2], int(r[3] or 0)) for r in rows]

    def chunk_hashes(self) -> list[tuple[str, str, int]]:
        """(path, content hash, tokens) of every chunk."""
        with self._lock:
            return [(p, h, int(t or 0)) for p, h, t in self.conn.execute(
                "SELECT path, content_hash, token_count FROM chunks ORDER BY path, chunk_index")]  # fmt: skip

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

    def set_vectors(self, items: Sequence[tuple[int, str, np.ndarray]], model: str) -> None:
        """Add vectors for existing chunks: (chunk_id, content_hash, vector). A chunk replaced meanwhile (an
        edit stored while its old text was being embedded) gets none; its vector still goes to the cache."""
        with self._lock:  # the write and the matrix patch are one step for readers
            with self.atomic():
                now = time.time()
                current = {
                    r[0]
                    for r in self.conn.execute(
                        "SELECT c.id FROM chunks c JOIN json_each(?) j ON c.id = j.value ->> 0"
                        " AND c.content_hash = j.value ->> 1",
                        (json.dumps([[int(cid), h] for cid, h, _ in items]),),
                    )
                }
                for _, h, vec in items:
                    self.conn.execute(
                        "INSERT OR REPLACE INTO embedding_cache(model, content_hash, vector, created) VALUES (?,?,?,?)",
                        (model, h, vector_blob(vec), now),
                    )
                items = [it for it in items if it[0] in current]
                for chunk_id, _, vec in items:
                    self.conn.execute("DELETE FROM chunks_vec WHERE chunk_id = ?", (chunk_id,))
                    self.conn.execute(
                        "INSERT INTO chunks_vec(chunk_id, embedding) VALUES (?, ?)",
                        (chunk_id, vector_blob(vec)),
                    )
            self._apply_delta([cid for cid, _, _ in items], [(cid, vec) for cid, _, vec in items])

    # -- logs and stats ------------------------------------------------------------------------------------
    def log_embedding(self, provider: str, model: str, tokens: int, chunks: int, cost_usd: float) -> None:
        with self.atomic():
            self.conn.execute(
                "INSERT INTO embedding_log(timestamp, provider, model, tokens, chunks, cost_usd) VALUES (?,?,?,?,?,?)",
                (time.time(), provider, model, tokens, chunks, cost_usd),
            )

    def log_search(
        self, query: str, source: str, mode: str, results: int, top_score: float, elapsed_ms: float
    ) -> None:
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
                "embeddedChunks": (self._scalar("SELECT count(*) FROM chunks_vec") or 0)
                if self.has_vectors()
                else 0,
                "lastIndexed": self._scalar("SELECT max(last_indexed) FROM files"),
                "totalCostUsd": float(
                    self._scalar("SELECT coalesce(sum(cost_usd), 0) FROM embedding_log") or 0.0
                ),
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
        query names (README "Retrieval quality"). Exact heading matches are handled in search.py."""
        where, params = (flt or ChunkFilter()).where()
        if where:
            sql = (
                "SELECT c.id, bm25(chunks_fts, 1.0, 1.0) AS rank FROM chunks_fts JOIN chunks c"
                f" ON c.id = chunks_fts.rowid WHERE chunks_fts MATCH ? AND {where} ORDER BY rank LIMIT ?"
            )
        else:  # no join: ~3x faster (a join row per match before the sort), the rowid is the chunk id
            sql = "SELECT rowid, bm25(chunks_fts, 1.0, 1.0) AS rank FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY rank LIMIT ?"
        with self._lock:
            return [(int(i), float(r)) for i, r in self.conn.execute(sql, [match, *params, limit])]

    def file_fts_search(
        self, match: str, limit: int, flt: ChunkFilter | None = None
    ) -> list[tuple[str, float, int]]:
        """(path, whole-file bm25, chunk count) best first; a file counts when one of its chunks passes `flt`."""
        where, params = (flt or ChunkFilter()).where()
        with self._lock:
            if where:
                sql = (
                    "SELECT f.path, bm25(files_fts) AS rank, f.chunk_count FROM files_fts JOIN files f"
                    " ON f.rowid = files_fts.rowid WHERE files_fts MATCH ?"
                    f" AND f.path IN (SELECT c.path FROM chunks c WHERE {where}) ORDER BY rank LIMIT ?"
                )
                rows = list(self.conn.execute(sql, [match, *params, limit]))
            else:  # rank first, then look the few winners up (a join row per match costs more than the ranking)
                ranked = list(self.conn.execute(
                    "SELECT rowid, bm25(files_fts) AS rank FROM files_fts WHERE files_fts MATCH ? ORDER BY rank LIMIT ?",
                    (match, limit),
                ))  # fmt: skip
                files = {
                    r: (p, n)
                    for r, p, n in self.conn.execute(
                        "SELECT rowid, path, chunk_count FROM files WHERE rowid IN (SELECT value FROM json_each(?))",
                        (json.dumps([r for r, _ in ranked]),),
                    )
                }
                rows = [(*files[r][:1], b, files[r][1]) for r, b in ranked if r in files]
        return [(str(p), float(r), int(n or 0)) for p, r, n in rows]

    def term_doc_freqs(self, terms: Sequence[str]) -> tuple[dict[str, int], int]:
        """({term: number of chunks holding it}, number of chunks), terms as the keyword index stems them.
        Kept per term until the index changes (queries repeat their words)."""
        with self._lock:
            version = self._data_version()
            if self._df_version != version:
                self._df_cache.clear()
                self._df_version = version
                self._df_total = int(self._scalar("SELECT count(*) FROM chunks") or 0)
            missing = [t for t in terms if t not in self._df_cache]
            if missing:
                if not self._vocab:
                    self.conn.execute(
                        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.chunks_fts_vocab USING fts5vocab(main, chunks_fts, row)"
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

    def chunk_ids_for_paths(
        self, paths: Sequence[str], flt: ChunkFilter | None = None
    ) -> list[tuple[int, str]]:
        """(chunk id, path) of every chunk of `paths` that passes `flt`."""
        where, params = (flt or ChunkFilter()).where()
        sql = "SELECT c.id, c.path FROM chunks c WHERE c.path IN (SELECT value FROM json_each(?))" + (
            f" AND {where}" if where else ""
        )
        with self._lock:
            return [(int(i), str(p)) for i, p in self.conn.execute(sql, [json.dumps(list(paths)), *params])]

    def embedded_count(self) -> int:
        """Vectors in the search-time matrix (0 without vectors)."""
        with self._lock:
            return len(self._vectors()) if self.has_vectors() else 0

    def nearest_other_file_cosines(self, sample: int, seed: int = 0) -> tuple[int, list[float]]:
        """(embedded chunks, for a fixed random sample of them: the cosine of each one's nearest chunk in another
        file): how similar "related" passages are for this model on this project (search.py's fallback).
        One KNN per sampled chunk on the search matrix: no copy of the vectors."""
        with self._lock:
            if not self.has_vectors():
                return 0, []
            matrix = self._vectors()
            ids = sorted(matrix.ids())
        n = len(ids)
        if n < 2:
            return n, []
        picked = [ids[i] for i in np.random.default_rng(seed).choice(n, min(sample, n), replace=False)]
        with self._lock:
            vectors = self._vectors().vectors(picked)
        neighbours = {cid: self.knn(vec, 12) for cid, vec in vectors.items()}
        paths = self.chunk_paths(list({c for hits in neighbours.values() for c, _ in hits} | set(neighbours)))
        out: list[float] = []
        for cid, hits in neighbours.items():
            own = paths.get(cid)
            other = next((s for c, s in hits if paths.get(c) not in (None, own)), None)
            if other is not None:
                out.append(other)
        return n, out

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
            return [
                int(r[0])
                for r in self.conn.execute(sql + " ORDER BY c.path, c.chunk_index", [heading, *params])
            ]

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

    def filtered_ids(self, flt: ChunkFilter) -> np.ndarray:
        where, params = flt.where()
        with self._lock:
            ids = [r[0] for r in self.conn.execute(f"SELECT c.id FROM chunks c WHERE {where}", params)]
        return np.asarray(ids, dtype=np.int64)

    def _data_version(self) -> tuple[int, int]:
        return (int(self._scalar("PRAGMA data_version") or 0), self._generation)

    def _invalidate(self) -> None:
        self._generation += 1

    def _apply_delta(self, removed: Sequence[int], added: Sequence[tuple[int, np.ndarray]]) -> None:
        """After our own committed write: patch the cached matrix in place (O(rows changed)) instead of
        reloading it (a reload of 34k vectors took ~250 ms, paid by the first search after every editor save).
        A matrix that was already stale (another process wrote) is dropped and reloaded on the next search."""
        with self._lock:
            current = self._matrix is not None and self._matrix_version == self._data_version()
            self._generation += 1
            if not current or self._matrix is None:
                self._matrix = None
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
        dims = int(self.get_meta("dimensions", "0") or 0) if self.has_vectors() else 0
        self._matrix = VectorMatrix(*self._load_vectors(dims)) if dims else VectorMatrix.empty(0)
        self._matrix_version = version
        return self._matrix

    def vector_matrix(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids, unit vectors) of every embedded chunk (copies; for tests and benchmarks)."""
        with self._lock:
            return self._vectors().arrays()

    def _load_vectors(self, dims: int, batch: int = 4096) -> tuple[np.ndarray, np.ndarray]:
        """Read every vector into one numpy-allocated matrix, a batch of rows at a time.

        numpy's own allocation matters for speed: numpy asks the kernel for transparent huge pages on large
        arrays, and a full scan of a 100k x 384 matrix ran ~7% slower over a buffer built from Python bytes
        (4 KiB pages: a TLB miss per page) than over the same data in a numpy array. Filling a preallocated array
        also keeps the peak at one copy of the vectors (plus one batch) instead of two."""
        with self.conn:  # one read transaction: the count and the rows agree
            n = int(self._scalar("SELECT count(*) FROM chunks_vec") or 0)
            ids = np.empty(n, dtype=np.int64)
            mat = np.empty((n, dims), dtype=np.float32)
            filled = 0
            cursor = self.conn.execute("SELECT chunk_id, embedding FROM chunks_vec")
            while filled < n:
                rows = list(itertools.islice(cursor, batch))
                if not rows:
                    break
                rows = rows[: n - filled]
                end = filled + len(rows)
                ids[filled:end] = [r[0] for r in rows]
                mat[filled:end] = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(
                    -1, dims
                )
                filled = end
        ids, mat = ids[:filled], mat[:filled]
        good = np.isfinite(mat).all(axis=1) & (mat != 0).any(axis=1)
        if not good.all():  # vectors stored before the provider boundary checked them: never served
            log.warning("ignoring %d unusable vectors (NaN, Inf or zero) in the index", int((~good).sum()))
            ids, mat = ids[good], mat[good]
        return ids, mat

    def knn(self, query: np.ndarray, k: int, flt: ChunkFilter | None = None) -> list[tuple[int, float]]:
        """Exact cosine KNN: (chunk id, similarity) best first, filters applied before ranking."""
        allowed = self.filtered_ids(flt) if flt is not None and not flt.is_empty() else None
        with self._lock:  # writes patch the matrix in place
            matrix = self._vectors()
            if len(matrix) == 0 or k <= 0:
                return []
            return matrix.knn(query, k, allowed)

    def knn_vec0(self, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        """KNN through sqlite-vec itself (kept for comparison in benchmarks)."""
        with self._lock:
            rows = self.conn.execute(
                "SELECT chunk_id, distance FROM chunks_vec WHERE embedding MATCH ? AND k = ?",
                (vector_blob(query), k),
            )
            return [(int(i), 1.0 - float(d)) for i, d in rows]

    def without_vectors(self, chunk_ids: Sequence[int]) -> set[int]:
        """Those of `chunk_ids` that have no vector (none when the index holds no vectors at all)."""
        with self._lock:
            matrix = self._vectors()
            return {int(c) for c in chunk_ids if int(c) not in matrix} if len(matrix) else set()

    def paths_without_vectors(self, paths: Sequence[str]) -> set[str]:
        """Those of `paths` with at least one chunk that has no vector (all of them without a vector table)."""
        if not paths:
            return set()
        with self._lock:
            rows = [(int(i), p) for i, p in self.conn.execute(
                "SELECT id, path FROM chunks WHERE path IN (SELECT value FROM json_each(?))", (json.dumps(list(paths)),))]  # fmt: skip
            if not self.has_vectors():
                return {p for _, p in rows}
            matrix = self._vectors()
            return {p for i, p in rows if i not in matrix}

    def has_vector(self, chunk_id: int) -> bool:
        with self._lock:
            return int(chunk_id) in self._vectors()

    def chunk_vectors(self, chunk_ids: Sequence[int]) -> dict[int, np.ndarray]:
        with self._lock:
            return self._vectors().vectors(chunk_ids)

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
        return self._dicts(
            "SELECT path, entity_type, entity_name, display_name, aliases, file_type, visibility FROM files"
            " WHERE display_name IS NOT NULL OR (aliases IS NOT NULL AND aliases != '[]')"
        )

    def headings(self) -> list[dict[str, Any]]:
        return self._dicts(
            "SELECT path, section_heading, heading_path, start_line, end_line, visibility FROM chunks"
            " WHERE section_heading IS NOT NULL ORDER BY path, chunk_index"
        )

    def search_log(self, include_eval: bool = False, limit: int = 100) -> list[dict[str, Any]]:
        table = "search_log" if include_eval else "search_analytics"
        return self._dicts(f"SELECT * FROM {table} ORDER BY id DESC LIMIT ?", (limit,))

"""The PostgreSQL + pgvector index of one project: a *workspace* of a shared database (storage/postgres/schema.py).

It answers what the SQLite `Store` answers, with the same records, and keeps no copy of the index in memory:
vectors are searched by pgvector (exact inside the workspace while it is small, an HNSW index with iterative
scan once it is large), keywords by a GIN index over tsvectors scored with FTS5's BM25 (keywords.py). One
connection per store, used under a lock (the server's threads share it, as they share SQLite's).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import fields
from operator import attrgetter
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg.rows import dict_row

from ...embeddings.base import usable_vector
from ...errors import IndexBusy, IndexCancelled, IndexCorrupted, StorageError, StorageReadOnly, StorageUnavailable
from ...lazy import np
from ...redact import REDACTED, remember, unencoded_userinfo, without_userinfo
from ..base import (
    CHUNK_FIELDS,
    FILE_COLUMNS,
    Candidates,
    ChapterFile,
    ChunkFilter,
    ChunkRow,
    EntityRow,
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
    cache_key,
    ident_lines,
    match_stored,
)
from ..run_record import describe
from ..vector_matrix import other_file_cosines
from .errors import MappedConnection, mapped
from .filters import compile_filter, vector_level_filter
from .keywords import TERM_TSQUERY_OF, bm25_sql, idf, is_single, postings_sql
from .runs import PgLockHandle
from .schema import MIGRATION_LOCK, MIGRATIONS
from .sessions import POOL_SIZE, Sessions
from .vectorio import Vector, register

log = logging.getLogger(__name__)

_ROW_FIELDS = [f.name for f in fields(ChunkRow)]
_MOVABLE = [n for n in _ROW_FIELDS if n not in ("content_hash", "text", "heading_path")]
_HASH = 1 + _ROW_FIELDS.index("content_hash")
_values = attrgetter(*_ROW_FIELDS)
_INSERT_ROW = "(" + ", ".join(["%s"] * (2 + len(_ROW_FIELDS))) + ")"
_INSERT_MANY = "INSERT INTO chunks(ws, path, " + ", ".join(_ROW_FIELDS) + ") VALUES {values} RETURNING chunk_index, id"
INSERT_BATCH = 500  # rows a multi-row INSERT of a file's chunks or vectors (x 20 parameters: below 65,535)
_CHUNK_SELECT = ", ".join(f"c.{n}" for n in CHUNK_FIELDS)
VECTORS_CHECKED_META = "vectors_checked"
_FILE_COLUMNS = ", ".join(FILE_COLUMNS)
# a workspace holding at least this many vectors is searched through the HNSW index of its dimension
ANN_MIN_ROWS = int(os.environ.get("SAIPLING_PG_ANN_MIN", "20000"))
ANN_CHECK_EVERY = 1000  # vectors a file write stores between two checks of the HNSW threshold (replace_file)
# the planner's statistics of chunks and files gathered again (ANALYZE: 0.6 s at 16,793 chunks) once writers of this
# store have added this many rows, and half the table's rows, since: without them, right after an index run (before
# autovacuum's analyze, if it runs at all), a keyword search read every chunk of the workspace through the workspace
# index instead of the rows its GIN index finds (issue 33: 78 -> 9 ms for "Sherlock Holmes" over 16,793 chunks)
ANALYZE_MIN_ROWS = 2000
ANALYZE_FRACTION = 0.5
EF_SEARCH = int(os.environ.get("SAIPLING_PG_EF_SEARCH", "100"))
# A workspace searched exactly (below ANN_MIN_ROWS vectors): its connection's prepared statements run their generic
# plans (plan_cache_mode = force_generic_plan) instead of being planned again for each search's values: planning the
# candidate statement (five lists and their unions) cost ~2 of the ~9 ms of server CPU a hybrid search took at 2,524
# chunks (issue 33, benchmarks/README.md row PG5); PostgreSQL's own choice kept custom plans. A workspace searched
# through the HNSW index keeps custom plans: there the plan turns on the workspace's size (a generic plan, which
# estimates an average workspace, could scan it exactly instead of through the index).
# SAIPLING_PG_GENERIC_PLAN=0: custom plans everywhere, as before.
GENERIC_PLAN = os.environ.get("SAIPLING_PG_GENERIC_PLAN", "1") != "0"
# how long a read of the workspace's version is trusted: other processes' commits are seen at most this late by this
# process's caches (its own writes at once); every cache check was a round trip (~30 per hybrid search)
VERSION_TTL = float(os.environ.get("SAIPLING_PG_VERSION_TTL", "0.25"))
ADVISORY_CLASS = 0x5A1  # pg_advisory_lock(class, workspace id): the writer lock of one workspace
ANN_BUILD_CLASS = 0x5A2  # pg_advisory_lock(class, dimensions): the build of one HNSW index


OURS = ("workspace", "pool_size")  # the store URL's parameters that are saipling's, not libpq's


def split_location(url: str) -> tuple[str, str | None]:
    """(a libpq connection URL, the workspace named by its `workspace` parameter or None)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    workspace = next((v for k, v in query if k == "workspace"), None)
    rest = urlencode([(k, v) for k, v in query if k not in OURS])
    return urlunsplit((parts.scheme, parts.netloc, parts.path, rest, parts.fragment)), workspace


def pool_size(url: str) -> int:
    """The store URL's `pool_size`: how many connections one store may hold at once (POOL_SIZE by default)."""
    given = next((v for k, v in parse_qsl(urlsplit(url).query, keep_blank_values=True) if k == "pool_size"), None)
    if given is None:
        return POOL_SIZE
    try:
        size = int(given)
    except ValueError:
        size = 0
    if not 1 <= size <= 1000:
        raise StorageError(f"pool_size={given!r} in the store URL: a number of connections from 1 to 1000")
    return size


# a statement running longer than this fails with StorageBusy (QueryCanceled) instead of holding every thread
STATEMENT_TIMEOUT_MS = int(os.environ.get("SAIPLING_PG_STATEMENT_TIMEOUT_MS", "120000"))
PREPARE_THRESHOLD = 1  # psycopg prepares a statement on its (n+1)th execution on a connection


def _passwords(url: str) -> list[str]:
    """The passwords a URL carries: `user:password@` and a `password=` query parameter (libpq takes both)."""
    parts = urlsplit(url)
    found = [v for k, v in parse_qsl(parts.query, keep_blank_values=True) if k.lower() == "password"]
    return ([parts.password] if parts.password else []) + found


def redacted(url: str) -> str:
    """The URL without its password, in the user part or the query (for messages and `status`); one whose password
    is not percent-encoded (`unencoded_userinfo`) without anything before its last `@`."""
    if unencoded_userinfo(url):
        return without_userinfo(url).replace(REDACTED, "***")
    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.password is not None:
        netloc = netloc.replace(f":{parts.password}@", ":***@")
    query = parse_qsl(parts.query, keep_blank_values=True)
    if any(k.lower() == "password" for k, _ in query):
        shown_query = urlencode([(k, "***" if k.lower() == "password" else v) for k, v in query], safe="*")
    else:
        shown_query = parts.query
    return urlunsplit((parts.scheme, netloc, parts.path, shown_query, parts.fragment))


def connect(conninfo: str) -> psycopg.Connection:
    remember(*_passwords(conninfo))  # (never logged: the redacting log filter knows them from now on)
    try:
        conn = psycopg.connect(conninfo, **connect_options())
    except psycopg.Error as exc:
        raise StorageUnavailable(f"cannot connect to PostgreSQL at {redacted(conninfo)}: {str(exc).strip()}") from exc
    return conn


def connect_options() -> dict[str, Any]:
    """psycopg.connect's keyword arguments for every connection of a store (its pool's too)."""
    return dict(
        autocommit=True,
        connect_timeout=10,
        application_name="saipling",
        # a half-dead connection or a runaway query must not hold the store's lock (and every thread) forever
        keepalives=1,
        keepalives_idle=30,
        keepalives_interval=10,
        keepalives_count=3,
        # session settings at connection time, not a SET per query: a search through an HNSW index scans
        # iteratively (a selective filter still fills k) with this ef_search (a placeholder until pgvector
        # loads, which adopts it)
        options=(
            f"-c statement_timeout={STATEMENT_TIMEOUT_MS} -c hnsw.iterative_scan=relaxed_order"
            f" -c hnsw.ef_search={EF_SEARCH}"
        ),
        # every statement prepared on its second use (a search repeats the same few): no parse and plan
        prepare_threshold=PREPARE_THRESHOLD,
    )


def migrate(conn: psycopg.Connection) -> None:
    """Bring the database's schema to this saipling's version (once, whoever opens it first). A database already
    at this version is only read: no lock (every open took the migrations' exclusive advisory lock, so 72
    processes opening stores at once queued on it one by one: issue 33, benchmarks/README.md row PG6)."""
    if _schema_version(conn) == len(MIGRATIONS):  # (a migration commits its version with it: seen whole or not)
        return
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        conn.execute("SET LOCAL statement_timeout = 0")  # (a migration rewriting a big table is let run, once)
        conn.execute("CREATE TABLE IF NOT EXISTS saipling_schema(version int NOT NULL)")
        row = conn.execute("SELECT version FROM saipling_schema").fetchone()
        version = row[0] if row else 0
        if row is None:
            conn.execute("INSERT INTO saipling_schema VALUES (0)")
        if version > len(MIGRATIONS):
            raise IndexCorrupted(
                f"the database has saipling schema version {version}, newer than this saipling knows "
                f"({len(MIGRATIONS)}): a newer saipling has opened it; install that version here too (every "
                "saipling that shares the database needs it)"
            )
        for number in range(version, len(MIGRATIONS)):
            conn.execute(MIGRATIONS[number])
            conn.execute("UPDATE saipling_schema SET version = %s", (number + 1,))


def _schema_version(conn: psycopg.Connection) -> int | None:
    """The database's saipling schema version, None before the first migration."""
    if not conn.execute("SELECT to_regclass('saipling_schema') IS NOT NULL").fetchone()[0]:
        return None
    row = conn.execute("SELECT version FROM saipling_schema").fetchone()
    return None if row is None else row[0]


class PostgresStore:
    """The index of one project: one workspace of a PostgreSQL database."""

    backend = "postgresql"
    keeps_previews = True  # (ChunkRow.preview is stored)

    def __init__(self, conn: psycopg.Connection, url: str, workspace: str, ws: int, size: int = 1) -> None:
        # the calling thread's connection under `with self._lock:` (storage/postgres/sessions.py)
        self._lock = Sessions(
            MappedConnection(conn, self._connect_again), size, url, connect_options(), self._configure
        )
        self._tx = threading.local()  # the calling thread's nesting of atomic()
        self.url = url
        self.workspace = workspace
        self.ws = ws
        self.path = f"{redacted(url)}#{workspace}"  # what messages and status call the index
        self.rebuilt: str | None = None
        self.readonly = False
        self.readonly_reason: str | None = None  # why a store opened to write is read-only (`_cannot_write`)
        self.shared = True  # a workspace: every copy of the project with this `workspace` writes it
        # this copy of the project (host and folder), written with each file (`origin`); None: opened without a
        # project (tools, tests), whose writes and checks are those of a project's own index
        self.copy_id: str | None = None
        self.disk_full: str | None = None
        self._version_cache: dict[Any, tuple[int, Any]] = {}
        self._ann_dims: set[int] = set()  # dimensions whose HNSW index exists
        self._stored_since_ann_check = 0  # vectors replace_file stored since the threshold was last checked
        self._written_since_analyze = 0  # chunk and file rows this store inserted since it last ran ANALYZE
        # work that may not run inside a write transaction (ANALYZE, the HNSW build), by name: run once the
        # outermost one has committed (`_once_committed`)
        self._due: dict[str, Callable[[], None]] = {}
        self._commits = 0  # our own committed write transactions (a version read that raced one is not kept)
        self._version_read: tuple[float, int] | None = None  # (monotonic time, version) of the last read
        # each session's plan_cache_mode, by its psycopg connection (_plan_for; a new session starts at "auto")
        self._plan_modes: weakref.WeakKeyDictionary[psycopg.Connection, str] = weakref.WeakKeyDictionary()

    @property
    def conn(self) -> MappedConnection:
        """The calling thread's connection (inside `with self._lock:`; the first one outside)."""
        return self._lock.conn

    @property
    def _depth(self) -> int:
        return getattr(self._tx, "depth", 0)

    @_depth.setter
    def _depth(self, value: int) -> None:
        self._tx.depth = value

    def _configure(self, conn: psycopg.Connection) -> None:
        """A new pooled connection: vectors as numpy arrays; read-only sessions for a read-only store."""
        register(conn)
        if self.readonly:
            conn.execute("SET default_transaction_read_only = on")

    # -- opening -------------------------------------------------------------------------------------------
    @classmethod
    def open(
        cls, location: str, workspace: str | None = None, readonly: bool = False, create: bool = True
    ) -> PostgresStore:
        """Connect, migrate the schema if needed and find (or create) the workspace: the URL's `workspace`
        parameter, else `workspace`. `readonly`: a read-only session (every write raises StorageReadOnly).
        `create=False` (a command that only reads: search, status, get): a workspace the database does not have
        is a StorageError naming the ones it has (a misspelt `workspace=` made an empty one, silently)."""
        if unencoded_userinfo(location):
            # (libpq would read part of the password as the host, port or database and echo it in its error)
            raise StorageError(
                f"the store URL {redacted(location)} cannot be read: its user name or password holds a character "
                "that must be percent-encoded in a URL (@ as %40, / as %2F, ? as %3F, # as %23, : as %3A, % as %25),"
                " or give the password in PGPASSWORD or ~/.pgpass"
            )
        conninfo, named = split_location(location)
        name = named or workspace
        if not name:
            raise StorageError(f"no workspace named for the PostgreSQL store {redacted(location)}")
        conn = connect(conninfo)
        try:
            vectorio_ready = False
            try:
                try:
                    migrate(conn)
                except IndexCorrupted as exc:  # (a schema newer than this saipling: say which database)
                    raise IndexCorrupted(f"the PostgreSQL store {redacted(conninfo)}: {exc}") from exc
                register(conn)
                vectorio_ready = True
                # a session that may not write (a role granted SELECT only, default_transaction_read_only, a hot
                # standby) opens the store read-only: a search then tried to re-read every edited file, failed
                # on each ("could not be indexed", every search) and `mcp`/`serve` could not start at all
                why = None if readonly else _cannot_write(conn)
                writable = not readonly and why is None
                if create and writable:
                    conn.execute("INSERT INTO workspaces(name) VALUES (%s) ON CONFLICT (name) DO NOTHING", (name,))
                row = conn.execute("SELECT id FROM workspaces WHERE name = %s", (name,)).fetchone()
                if row is None:
                    others = [r[0] for r in conn.execute("SELECT name FROM workspaces ORDER BY name LIMIT 21")]
                    if create and not readonly:  # (a role that cannot create it: `saipling index` cannot either)
                        raise StorageReadOnly(_no_workspace(name, redacted(conninfo), others, creatable=why))
                    raise StorageError(_no_workspace(name, redacted(conninfo), others))
                readonly = not writable
                ws = row[0]
            except psycopg.Error as exc:
                hint = "" if vectorio_ready else " (the server needs pgvector >= 0.8: CREATE EXTENSION vector)"
                raise mapped(exc, f"cannot open the PostgreSQL store {redacted(conninfo)}{hint}") from exc
            if readonly:
                conn.execute("SET default_transaction_read_only = on")
        except BaseException:
            conn.close()
            raise
        store = cls(conn, conninfo, name, int(ws), pool_size(location))
        store.readonly = readonly
        store.readonly_reason = why
        store._ann_dims = store._existing_ann_dims()
        return store

    def _connect_again(self) -> psycopg.Connection:
        log.warning("the connection to %s was lost: connecting again", self.path)
        conn = connect(self.url)
        register(conn)
        if self.readonly:
            conn.execute("SET default_transaction_read_only = on")
        self._version_read = None
        return conn

    def close(self, checkpoint: bool = True) -> None:
        """Close every connection of the store (the pool's too)."""
        self._lock.close()

    @contextlib.contextmanager
    def atomic(self) -> Iterator[None]:
        """One write transaction (a savepoint when nested); rolled back on any exception. The outermost one bumps
        the workspace's version (what other processes' caches compare)."""
        due: dict[str, Callable[[], None]] = {}
        with self._lock:
            outermost = self._depth == 0
            with self.conn.transaction():
                self._depth += 1
                try:
                    yield
                    if self._depth == 1:
                        self.conn.execute("UPDATE workspaces SET version = version + 1 WHERE id = %s", (self.ws,))
                finally:
                    self._depth -= 1
            if outermost:  # committed: our own write is seen by the next read at once, whatever thread reads
                self._commits += 1
                self._version_read = None
                due, self._due = self._due, {}
        for work in due.values():  # (outside the store's lock: the HNSW build has a connection of its own)
            work()

    def _once_committed(self, name: str, work: Callable[[], None]) -> None:
        """Run `work` now, or, inside a write transaction (an index run's batch), once the outermost one has
        committed (ANALYZE and CREATE INDEX CONCURRENTLY cannot run inside one, and would not see its rows); the
        same `name` twice runs once. A transaction rolled back leaves it due for the next commit."""
        if self._depth:
            self._due[name] = work
        else:
            work()

    # -- small helpers -------------------------------------------------------------------------------------
    def _scalar(self, sql: str, params: Sequence[Any] = ()) -> Any:
        with self._lock:
            row = self.conn.execute(sql, params).fetchone()
        return None if row is None else row[0]

    def _rows(self, sql: str, params: Sequence[Any] = (), binary: bool = False) -> list[tuple]:
        """`binary`: results in binary (vectors: 2x faster to send and read than 384 floats as text)."""
        with self._lock:
            return self.conn.execute(sql, params, binary=binary).fetchall()

    def _dicts(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        with self._lock, self.conn.cursor(row_factory=dict_row) as cur:
            cur.execute(sql, params)
            return cur.fetchall()

    def _where(self, flt: Any) -> tuple[str, list[Any]]:
        return compile_filter(flt, self._glob_paths)

    def _glob_paths(self, glob: str) -> list[str]:
        from ...paths import glob_match

        return [p for (p,) in self._rows("SELECT path FROM files WHERE ws = %s", (self.ws,)) if glob_match(p, glob)]

    def _cached(self, key: Any, build: Any) -> Any:
        """`build()`, kept until the workspace changes (any process's commit); never inside a write transaction
        (its own uncommitted writes would be cached under the version before them)."""
        if self._depth:
            return build()
        version = self._any_version()
        hit = self._version_cache.get(key)
        if hit is not None and hit[0] == version:
            return hit[1]
        value = build()
        if len(self._version_cache) >= 256:
            self._version_cache.clear()
        self._version_cache[key] = (version, value)
        return value

    def _remember(self, key: Any, value: Any) -> None:
        """Keep `value` under `key` for the version a `_cached` build is running under."""
        read = self._version_read  # (another thread's commit may clear it meanwhile)
        if not self._depth and read is not None:
            self._version_cache[key] = (read[1], value)

    def _any_version(self) -> int:
        with self._lock:
            now = time.monotonic()
            trusted = getattr(self._tx, "trust", False)  # (search_candidates checks it in its own statement)
            if self._version_read is not None and (trusted or now - self._version_read[0] < VERSION_TTL):
                return self._version_read[1]
            commits = self._commits
            version = int(self._scalar("SELECT version FROM workspaces WHERE id = %s", (self.ws,)) or 0)
            if commits == self._commits:  # (a read that raced our own commit is not kept: it may predate it)
                self._version_read = (now, version)
            return version

    def index_version(self) -> tuple[int, int]:
        """Changes with every committed change to the workspace, by any process (what caches are keyed on)."""
        return (self._any_version(), 0)

    def get_meta(self, key: str, default: str | None = None) -> str | None:
        value = self._cached(
            ("meta", key), lambda: self._scalar("SELECT value FROM meta WHERE ws = %s AND key = %s", (self.ws, key))
        )
        return default if value is None else value

    def set_meta(self, key: str, value: str) -> None:
        with self.atomic():
            self._set_meta(key, value)

    def try_set_meta(self, key: str, value: str) -> bool:
        """(A meta row is written under no workspace lock here; a conflicting row lock is waited on at most
        briefly: `lock_timeout`.)"""
        try:
            with self.atomic():
                self.conn.execute("SET LOCAL lock_timeout = '100ms'")
                self._set_meta(key, value)
            return True
        except Exception as exc:  # (a lock not granted in time, a read-only role)
            log.debug("meta %s not written: %s", key, exc)
            return False

    def _set_meta(self, key: str, value: str) -> None:
        self.conn.execute(
            "INSERT INTO meta(ws, key, value) VALUES (%s, %s, %s) ON CONFLICT (ws, key) DO UPDATE SET value = "
            "excluded.value",
            (self.ws, key, value),
        )

    # -- the writer lock -----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def writer_lock(
        self,
        *,
        wait: bool = True,
        cancel: threading.Event | None = None,
        on_wait: Any = None,
        timeout: float | None = None,
        what: str = "index",
    ) -> Iterator[PgLockHandle | None]:
        """The workspace's writer lock: a session advisory lock on a connection of its own, released by the
        server when this process dies (or its connection drops). Busy: as storage/base.py WriterLock says."""
        if self.readonly:
            yield None
            return
        conn = connect(self.url)
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            told = False
            while not conn.execute("SELECT pg_try_advisory_lock(%s, %s)", (ADVISORY_CLASS, self.ws)).fetchone()[0]:
                record = self._run_record() or {}
                pid = record.get("pid")
                if not wait or (deadline is not None and time.monotonic() >= deadline):
                    raise IndexBusy(pid, self.path, describe(record), record.get("what"))
                if not told:
                    told = True
                    log.warning(
                        "index in use by %s: waiting for it to finish", f"PID {pid}" if pid else "another process"
                    )
                    if on_wait is not None:
                        on_wait(pid)
                pause = 0.2 if deadline is None else max(0.0, min(0.2, deadline - time.monotonic()))
                if cancel is not None and cancel.wait(pause):
                    raise IndexCancelled("indexing cancelled while waiting for the index lock")
                if cancel is None:
                    time.sleep(pause)
            try:
                yield PgLockHandle(conn, self.ws, what)
            finally:
                with contextlib.suppress(psycopg.Error):
                    conn.execute("DELETE FROM writer_runs WHERE ws = %s", (self.ws,))
                    conn.execute("SELECT pg_advisory_unlock(%s, %s)", (ADVISORY_CLASS, self.ws))
        finally:
            conn.close()

    def other_run(self) -> dict[str, Any] | None:
        """Another process's run on this workspace as it last published it; None when no other session holds the
        writer lock (or this process does). Never blocks, never writes."""
        record = self._run_record()
        if record is None or (record.get("pid") == os.getpid() and record.get("host") == socket.gethostname()):
            return None
        return record

    def _run_record(self) -> dict[str, Any] | None:
        """The writer lock's holder's record ({"pid": None} when it published none), None when the lock is free."""
        rows = self._rows(
            "SELECT r.pid, r.record FROM pg_locks l LEFT JOIN writer_runs r ON r.ws = %s"
            " WHERE l.locktype = 'advisory' AND l.granted AND l.classid = %s AND l.objid = %s"
            " AND l.objsubid = 2 AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            (self.ws, ADVISORY_CLASS, self.ws),
        )
        if not rows:
            return None
        pid, text = rows[0]
        record: dict[str, Any] = {}
        with contextlib.suppress(ValueError, TypeError):
            loaded = json.loads(text or "{}")
            if isinstance(loaded, dict):
                record = loaded
        record["pid"] = pid
        return record

    # -- files ---------------------------------------------------------------------------------------------
    def file_states(self) -> dict[str, FileState]:
        rows = self._rows("SELECT path, content_hash, mtime_ns, size, origin FROM files WHERE ws = %s", (self.ws,))
        return {p: FileState(h, int(m), int(s), o) for p, h, m, s, o in rows}

    def file_states_for(self, paths: Iterable[str]) -> dict[str, FileState]:
        paths = list(paths)
        if not paths:
            return {}
        rows = self._rows(
            "SELECT path, content_hash, mtime_ns, size, origin FROM files WHERE ws = %s AND path = ANY(%s)",
            (self.ws, list(paths)),
        )
        return {p: FileState(h, int(m), int(s), o) for p, h, m, s, o in rows}

    def get_file(self, path: str) -> StoredFile | None:
        rows = self._dicts(f"SELECT {_FILE_COLUMNS} FROM files WHERE ws = %s AND path = %s", (self.ws, path))
        if not rows:
            return None
        row = rows[0]
        try:
            aliases = json.loads(row["aliases"] or "[]")
        except ValueError:
            aliases = []
        row.update(
            aliases=aliases,
            mtime_ns=int(row["mtime_ns"]),
            size=int(row["size"]),
            chunk_count=int(row["chunk_count"] or 0),
        )
        return StoredFile(**row)

    def touch_file(self, path: str, mtime_ns: int, size: int) -> None:
        with self.atomic():
            self.conn.execute(
                "UPDATE files SET mtime_ns = %s, size = %s, origin = %s WHERE ws = %s AND path = %s",
                (mtime_ns, size, self.copy_id, self.ws, path),
            )

    def delete_file(self, path: str) -> bool:
        with self.atomic():
            existed = self.conn.execute(
                "DELETE FROM files WHERE ws = %s AND path = %s RETURNING 1", (self.ws, path)
            ).fetchone()
            self.conn.execute("DELETE FROM chunks WHERE ws = %s AND path = %s", (self.ws, path))
            self.drop_mentions(path)
        return existed is not None

    def clear(self) -> None:
        """Forget every file, chunk and vector of the workspace (the shared embedding cache and logs stay)."""
        with self.atomic():
            for table in ("chunks", "files", "mentions", "mention_files"):
                self.conn.execute(f"DELETE FROM {table} WHERE ws = %s", (self.ws,))

    def defer_indexes(self) -> bool:
        """Never: the indexes are shared by every workspace of the database."""
        return False

    def restore_indexes(self) -> None:
        return None

    def fill_file_text(self, max_files: int) -> int:
        """Nothing to fill: files are always written with their whole-file keywords (`defer_indexes` defers none)."""
        return 0

    def file_text_pending(self) -> bool:
        return False

    def merge_keywords(self, pages: int) -> bool:
        """Nothing to merge: PostgreSQL's GIN indexes and postings tables keep themselves (autovacuum)."""
        return False

    def replace_files(self, files: Sequence[FileWrite]) -> None:
        """Each file's `replace_file` (no vectors), all in one transaction."""
        with self.atomic():
            for f in files:
                self.replace_file(f.record, f.chunks, mentions=f.mentions)

    def replace_file(
        self,
        record: FileRecord,
        chunks: Sequence[ChunkRow],
        vectors: dict[str, np.ndarray] | None = None,
        model: str | None = None,
        mentions: Any = None,
    ) -> list[int]:
        """Swap a file's chunks (and vectors) in one transaction; a chunk whose text and heading path stay keeps
        its row, id, keywords and vector (as storage/file_writes.py). Returns the ids inserted without a vector."""
        # a vector with NaN, Inf or only zeros is never stored: its chunk stays to be embedded again
        vectors = {h: v for h, v in (vectors or {}).items() if usable_vector(np.asarray(v, dtype=np.float32))}
        unembedded: list[int] = []
        stored = 0  # vectors given to new chunks (given or reused from the cache: an import's vectors arrive so)
        with self.atomic():
            has_vec = self.has_vectors()
            stored_rows = self.conn.execute(
                "SELECT id, "
                + ", ".join(_ROW_FIELDS)
                + " FROM chunks WHERE ws = %s AND path = %s ORDER BY chunk_index",
                (self.ws, record.path),
            )
            pairs = match_stored(chunks, stored_rows, _ROW_FIELDS)
            kept, new = pairs.kept, pairs.new
            gone = [r[0] for r in pairs.left]
            wanted = {ch.content_hash for ch in new} - set(vectors)
            twins = [r[0] for r in pairs.left if r[_HASH] in wanted]
            twins += [r[0] for r, ch in kept if ch.content_hash in wanted]
            reused = self._vectors_by_hash(twins) if has_vec and twins else {}
            if gone:
                self.conn.execute("DELETE FROM chunks WHERE id = ANY(%s)", (gone,))
            moved = [(r, ch) for r, ch in kept if tuple(r[1:]) != _values(ch)]
            for r, _ch in moved:  # out of the way first: (ws, path, chunk_index) is unique
                self.conn.execute("UPDATE chunks SET chunk_index = %s WHERE id = %s", (-1 - r[0], r[0]))
            given: list[tuple[int, np.ndarray]] = []  # (new chunk id, its vector)
            for ch, chunk_id in zip(new, self._insert_chunks(record.path, new), strict=True):
                vec = vectors.get(ch.content_hash)
                if vec is None:
                    vec = reused.get(ch.content_hash)
                if has_vec and vec is not None:
                    given.append((chunk_id, vec))
                else:
                    unembedded.append(chunk_id)
            self._insert_vectors(given)
            stored += len(given)
            for r, ch in moved:
                cols = [n for n in _MOVABLE if n == "chunk_index" or getattr(ch, n) != r[1 + _ROW_FIELDS.index(n)]]
                self.conn.execute(
                    "UPDATE chunks SET " + ", ".join(f"{n} = %s" for n in cols) + " WHERE id = %s",
                    (*(getattr(ch, n) for n in cols), r[0]),
                )
            if has_vec:
                for r, ch in kept:
                    vec = vectors.get(ch.content_hash)
                    if vec is not None:
                        self.conn.execute(
                            "INSERT INTO chunk_vectors(chunk_id, ws, embedding) VALUES (%s, %s, %s)"
                            " ON CONFLICT (chunk_id) DO NOTHING",
                            (r[0], self.ws, Vector(vec)),
                        )
            if model and vectors:
                self._cache_vectors(model, vectors)
            self._write_file_row(record, chunks)
            if mentions is not None:
                self.write_mentions(record.path, mentions)
        self._written_since_analyze += len(new) + 1  # (+ the file's row)
        if self._written_since_analyze >= ANALYZE_MIN_ROWS:
            self._once_committed("analyze", self._maybe_analyze)
        if stored:
            # (vectors that arrive with their chunks, never through set_vectors, e.g. reused after `saipling import`,
            # count towards the HNSW threshold too: checked every ANN_CHECK_EVERY of them, after the commit)
            self._stored_since_ann_check += stored
            if self._stored_since_ann_check >= ANN_CHECK_EVERY:
                self._stored_since_ann_check = 0
                self._once_committed("ann", self._maybe_build_ann)
        return unembedded

    def _insert_chunks(self, path: str, rows: Sequence[ChunkRow]) -> list[int]:
        """Insert a file's new chunks, INSERT_BATCH rows a statement; their ids, in order. One statement, not one
        a chunk: a statement's postings trigger (schema.py, migration 4) fires once for all its rows, and a save
        costs one round trip for them (issue 33: 8 writers' saves beside 64 readers, row PG6)."""
        ids: list[int] = []
        for start in range(0, len(rows), INSERT_BATCH):
            part = rows[start : start + INSERT_BATCH]
            found = dict(
                self.conn.execute(
                    _INSERT_MANY.format(values=", ".join([_INSERT_ROW] * len(part))),
                    [v for ch in part for v in (self.ws, path, *_values(ch))],
                ).fetchall()
            )
            ids += [int(found[ch.chunk_index]) for ch in part]
        return ids

    def _insert_vectors(self, items: Sequence[tuple[int, np.ndarray]]) -> None:
        """Insert new chunks' vectors, INSERT_BATCH a statement."""
        for start in range(0, len(items), INSERT_BATCH):
            part = items[start : start + INSERT_BATCH]
            self.conn.execute(
                "INSERT INTO chunk_vectors(chunk_id, ws, embedding) VALUES " + ", ".join(["(%s, %s, %s)"] * len(part)),
                [v for chunk_id, vec in part for v in (chunk_id, self.ws, Vector(vec))],
            )

    def _write_file_row(self, record: FileRecord, chunks: Sequence[ChunkRow]) -> None:
        # (with its chunks' CJK runs as character pairs, as SQLite's whole-file keywords: schema.py, migration 3)
        text = "\n".join([*(ch.text for ch in chunks), *ident_lines(chunks), *_cjk_lines(chunks)])
        self.conn.execute(
            "INSERT INTO files(ws, origin, " + _FILE_COLUMNS + ", tsv, doclen) VALUES (%s, %s, %s, %s, %s, %s, %s, %s,"
            " %s, %s,"
            " %s, %s, %s, %s, %s, %s, %s, %s, %s,"
            " CASE WHEN length(%s) > 400000 THEN strip(to_tsvector('saipling', saipling_fold(%s)))"
            " ELSE to_tsvector('saipling', saipling_fold(%s)) END,"
            " coalesce(array_length(regexp_split_to_array(btrim(saipling_fold(%s)), ' +'), 1), 0))"
            " ON CONFLICT (ws, path) DO UPDATE SET content_hash = excluded.content_hash, mtime_ns = excluded.mtime_ns,"
            " size = excluded.size, file_type = excluded.file_type, encoding = excluded.encoding,"
            " last_indexed = excluded.last_indexed, chunk_count = excluded.chunk_count,"
            " entity_type = excluded.entity_type, entity_name = excluded.entity_name,"
            " display_name = excluded.display_name, aliases = excluded.aliases, book_id = excluded.book_id,"
            " chapter_id = excluded.chapter_id, visibility = excluded.visibility, corpus = excluded.corpus,"
            " warning = excluded.warning, tsv = excluded.tsv, doclen = excluded.doclen, origin = excluded.origin",
            (self.ws, self.copy_id, *record.file_row(time.time(), len(chunks)), text, text, text, text),
        )

    def chunk_hashes(self) -> list[tuple[str, str, int]]:
        rows = self._rows(
            "SELECT path, content_hash, token_count FROM chunks WHERE ws = %s ORDER BY path, chunk_index", (self.ws,)
        )
        return [(p, h, int(t or 0)) for p, h, t in rows]

    def chunk_texts(self, chunk_ids: Sequence[int]) -> dict[int, tuple[str, str, str]]:
        rows = self._rows(
            "SELECT id, content_hash, heading_path, text FROM chunks WHERE ws = %s AND id = ANY(%s)",
            (self.ws, [int(i) for i in chunk_ids]),
        )
        return {int(i): (h, hp or "", t or "") for i, h, hp, t in rows}

    # -- logs and stats ------------------------------------------------------------------------------------
    def log_embedding(self, provider: str, model: str, tokens: int, chunks: int, cost_usd: float) -> None:
        with self._lock:
            self.conn.execute(
                "INSERT INTO embedding_log(ws, timestamp, provider, model, tokens, chunks, cost_usd)"
                " VALUES (%s,%s,%s,%s,%s,%s,%s)",
                (self.ws, time.time(), provider, model, tokens, chunks, cost_usd),
            )

    def log_search(self, query: str, source: str, mode: str, results: int, top_score: float, elapsed_ms: float) -> None:
        with self._lock:  # (no version bump: a logged search changes nothing a cache holds)
            self.conn.execute(
                "INSERT INTO search_log(ws, timestamp, query, source, mode, results, top_score, elapsed_ms)"
                " VALUES (%s,%s,%s,%s,%s,%s,%s,%s)",
                (self.ws, time.time(), query, source, mode, results, top_score, elapsed_ms),
            )

    def search_log(self, include_eval: bool = False, limit: int = 100) -> list[SearchLogEntry]:
        """This workspace's searches, newest first (`eval` searches left out unless asked for)."""
        rows = self._rows(
            "SELECT id, timestamp, query, source, mode, results, top_score, elapsed_ms FROM search_log"
            " WHERE ws = %s AND (%s OR source <> 'eval') ORDER BY id DESC LIMIT %s",
            (self.ws, include_eval, limit),
        )
        return [SearchLogEntry(*r) for r in rows]

    def stats(self) -> StoreStats:
        row = self._rows(
            "SELECT (SELECT count(*) FROM files WHERE ws = %(ws)s),"
            " (SELECT count(*) FROM chunks WHERE ws = %(ws)s),"
            " (SELECT count(*) FROM chunk_vectors WHERE ws = %(ws)s),"
            " (SELECT max(last_indexed) FROM files WHERE ws = %(ws)s),"
            " (SELECT coalesce(sum(cost_usd), 0) FROM embedding_log WHERE ws = %(ws)s),"
            " (SELECT coalesce(sum(tokens), 0) FROM embedding_log WHERE ws = %(ws)s)",
            {"ws": self.ws},
        )[0]
        return StoreStats(
            total_files=int(row[0]),
            total_chunks=int(row[1]),
            embedded_chunks=int(row[2]) if self.has_vectors() else 0,
            last_indexed=row[3],
            total_cost_usd=float(row[4] or 0.0),
            total_tokens=int(row[5] or 0),
            cached_embeddings=int(self._scalar("SELECT count(*) FROM embedding_cache") or 0),
        )

    def total_tokens_indexed(self) -> int:
        return int(self._scalar("SELECT coalesce(sum(token_count), 0) FROM chunks WHERE ws = %s", (self.ws,)) or 0)

    # -- keywords ------------------------------------------------------------------------------------------
    def _prepared_terms(self, query: KeywordQuery) -> list[tuple[str, list[str], bool]]:
        """Each term of `query` as (its tsquery text, its lexemes, a phrase or prefix), kept per query."""
        return [(q, lex, phrase) for q, lex, phrase, _dc, _df in self._term_stats(query)]

    def _term_stats(self, query: KeywordQuery) -> list[tuple[str, list[str], bool, int, int]]:
        """Each term of `query` as (tsquery text, lexemes, a phrase or prefix, chunks holding it, files holding
        it), with the collections' sizes (`_collection`): one round trip for them all, kept until the workspace
        changes (a term's tsquery and document frequencies were a round trip each)."""

        def build() -> list[tuple[str, list[str], bool, int, int]]:
            # the collections' sizes only when not known for this version: counting and averaging every chunk of
            # the workspace was 4.9 of this statement's 5.3 ms of server CPU at 2,524 chunks, paid by every query
            # a process had not seen since the workspace last changed (64 reader processes: most of their searches)
            read = self._version_read
            known = (
                read is not None
                and not self._depth
                and all(
                    (hit := self._version_cache.get(("collection", t))) is not None and hit[0] == read[1]
                    for t in ("chunks", "files")
                )
            )
            sizes = (
                "(SELECT NULL::bigint AS chunks, NULL::numeric AS chunk_avg, NULL::bigint AS files,"
                " NULL::numeric AS file_avg) n"
                if known
                else "(SELECT (SELECT count(*) FROM chunks WHERE ws = %(ws)s) AS chunks,"
                " (SELECT coalesce(avg(doclen), 0) FROM chunks WHERE ws = %(ws)s) AS chunk_avg,"
                " (SELECT count(*) FROM files WHERE ws = %(ws)s) AS files,"
                " (SELECT coalesce(avg(doclen), 0) FROM files WHERE ws = %(ws)s) AS file_avg) n"
            )
            rows = self._rows(
                "SELECT t.q::text, t.lex,"
                " CASE WHEN t.single THEN (SELECT count(*) FROM chunk_terms p"
                " WHERE p.ws = %(ws)s AND p.lexeme = t.lex[1])"
                " ELSE (SELECT count(*) FROM chunks c WHERE c.ws = %(ws)s AND c.tsv @@ t.q) END,"
                " CASE WHEN t.single THEN (SELECT count(*) FROM file_terms p"
                " WHERE p.ws = %(ws)s AND p.lexeme = t.lex[1])"
                " ELSE (SELECT count(*) FROM files c WHERE c.ws = %(ws)s AND c.tsv @@ t.q) END,"
                " n.chunks, n.chunk_avg, n.files, n.file_avg"
                # (a term of one word, neither prefix nor phrase, is counted from its postings: keywords.is_single)
                " FROM (SELECT x.*, NOT x.prefix AND cardinality(x.lex) = 1 AND numnode(x.q) = 1 AS single FROM"
                " (SELECT u.ord, u.text, u.prefix,"
                f" {TERM_TSQUERY_OF % {'prefix': 'u.prefix', 'text': 'u.text'}} AS q,"
                " tsvector_to_array(to_tsvector('saipling', saipling_fold(u.text))) AS lex"
                " FROM unnest(%(texts)s::text[], %(prefixes)s::bool[]) WITH ORDINALITY u(text, prefix, ord)) x) t,"
                f" {sizes} ORDER BY t.ord",
                {
                    "ws": self.ws,
                    "texts": [" ".join(t.words) for t in query.terms],
                    "prefixes": [bool(t.prefix) for t in query.terms],
                },
            )
            out = []
            for (q, lex, dc, df, *_sizes), t in zip(rows, query.terms, strict=True):
                if q:
                    out.append((q, list(lex or []), bool(t.prefix) or len(lex or []) > 1, int(dc), int(df)))
            if rows and not known:
                n_chunks, chunk_avg, n_files, file_avg = rows[0][4:]
                self._remember(("collection", "chunks"), (int(n_chunks), float(chunk_avg)))
                self._remember(("collection", "files"), (int(n_files), float(file_avg)))
            return out

        return self._cached(("terms", query.terms), build)

    def _collection(self, table: str) -> tuple[int, float]:
        def build() -> tuple[int, float]:
            n, avg = self._rows(f"SELECT count(*), coalesce(avg(doclen), 0) FROM {table} WHERE ws = %s", (self.ws,))[0]
            return int(n), float(avg)

        return self._cached(("collection", table), build)

    def _bm25(
        self,
        table: str,
        query: KeywordQuery,
        where: str,
        wparams: list,
        limit: int | None,
        levels: list[str] | None = None,
    ) -> list[tuple[Any, float]]:
        """(key, BM25: higher is better) of the rows of `table` matching `query` that pass `where`, best first."""
        built = self._bm25_sql(table, query, where, wparams, limit, levels)
        if built is None:
            return []
        return [(r[0], float(r[1]), *r[2:]) for r in self._rows(*built)]

    def _bm25_sql(
        self,
        table: str,
        query: KeywordQuery,
        where: str,
        wparams: list,
        limit: int | None,
        levels: list[str] | None = None,
    ) -> tuple[str, list[Any]] | None:
        """The statement of `_bm25` (key, score[, size]) and its parameters; None when `query` has no term.
        `where`: a condition over the chunk `c` (chunks) or the file `fl` (files); `levels`: for chunks, when
        `where` is only the reader's visibility levels, those levels (the postings carry the chunk's level, so
        no chunk row is read for the one-word terms). One-word terms are summed from their postings, phrases and
        prefixes from the tsvectors of the rows holding them (keywords.py); the sums are ranked, then the
        filter applied to the ranked rows when it needs the chunk's columns."""
        stats = self._term_stats(query)
        if not stats:
            return None
        chunks = table == "chunks"
        n, avgdl = self._collection(table)
        singles: list[tuple[str, float]] = []
        others: list[tuple[str, list[str], bool, float]] = []
        for q, lex, phrase, dc, df in stats:
            weight = idf(n, dc if chunks else df)
            if is_single(q, lex, phrase):
                singles.append((lex[0], weight))
            else:
                others.append((q, lex, phrase, weight))
        alias = "c" if chunks else "fl"
        inside = chunks and (levels is not None or where == "TRUE")  # (the filter applied to each part)
        parts: list[str] = []
        params: list[Any] = []
        if singles:
            by_level = chunks and levels is not None
            parts.append(postings_sql("chunk_terms" if chunks else "file_terms", by_level))
            params += [max(avgdl, 1e-9), [lx for lx, _w in singles], [w for _lx, w in singles], self.ws]
            params += [levels] if by_level else []
        if others:
            lateral, lparams, expr, eparams = bm25_sql(
                [lex for _q, lex, _p, _w in others],
                [q if phrase else None for q, _l, phrase, _w in others],
                [w for *_x, w in others],
                avgdl,
            )
            if not chunks:  # (`c` is the chunk in a filter's condition)
                expr, lateral = expr.replace("c.doclen", "fl.doclen"), lateral.replace("c.tsv", "fl.tsv")
            tsquery = " || ".join("%s::tsquery" for _ in others)
            parts.append(
                f"SELECT {alias}.id, {expr} FROM {table} {alias}{lateral}"
                f" WHERE {alias}.ws = %s AND {alias}.tsv @@ ({tsquery}) AND {where if inside else 'TRUE'}"
            )
            params += [*eparams, *lparams, self.ws, *(q for q, *_x in others), *(wparams if inside else [])]
        scored = f"SELECT u.id, sum(u.part) AS score FROM ({' UNION ALL '.join(parts)}) u(id, part) GROUP BY u.id"
        if not chunks:
            sql = (
                f"SELECT fl.path, s.score, fl.size FROM ({scored}) s JOIN files fl ON fl.id = s.id AND fl.ws = %s"
                f" WHERE {where} ORDER BY s.score DESC, fl.path"
            )
            params += [self.ws, *wparams]
        elif inside:
            sql = f"SELECT s.id, s.score FROM ({scored}) s ORDER BY s.score DESC, s.id"
        else:
            sql = (
                f"SELECT s.id, s.score FROM ({scored}) s JOIN chunks c ON c.id = s.id AND c.ws = %s"
                f" WHERE {where} ORDER BY s.score DESC, s.id"
            )
            params += [self.ws, *wparams]
        if limit is not None:
            sql += " LIMIT %s"
            params.append(limit)
        return sql, params

    def _file_condition(self, flt: Any) -> tuple[str, list[Any]]:
        """A file passes `flt` when one of its chunks does: the paths passing it, kept until the workspace changes
        (as SQLite's filter cache: a semi-join over every chunk of the workspace cost 27 of a 122 ms whole-file
        ranking over 2,524 chunks). Whole-file scores only rank chunks that pass `flt` themselves (each list
        applies it in SQL), so another process's change seen up to VERSION_TTL late moves a rank, never a
        passage into a result."""
        where, _params = self._where(flt)
        if where == "TRUE":
            return "TRUE", []
        paths = self._cached(("paths", flt.key()), lambda: self._paths_unless_all(flt))
        if paths is None:
            return "TRUE", []
        return "fl.path = ANY(%s)", [paths]

    def _paths_unless_all(self, flt: Any) -> list[str] | None:
        """The paths of the files passing `flt`, or None when every file of the workspace passes (a reader's
        levels on a workspace without private passages: comparing each file's path with a list of them all cost
        a search ~1 ms of server CPU at 120 files, and the reader the list sent with every search)."""
        paths = sorted(self.filtered_paths(flt))
        every = self._scalar(
            "SELECT count(*) = (SELECT count(*) FROM files WHERE ws = %s) FROM files WHERE ws = %s AND path = ANY(%s)",
            (self.ws, self.ws, paths),
        )
        return None if every else paths

    def search_candidates(
        self,
        query: KeywordQuery | None,
        limit: int,
        file_limit: int,
        qvec: np.ndarray | None = None,
        flt: ChunkFilter | None = None,
    ) -> Candidates:
        """The keyword, whole-file and vector lists, the paths of their chunks and the vectors of the keyword
        candidates the KNN missed: one statement (five round trips as separate reads).

        One round trip when this process's caches are warm: the statement is built from what the caches hold for
        the workspace's version last read (term statistics, the collection's size, the vector settings), however
        old that read, and reads the version itself beside the lists, in the same snapshot; when another process
        has committed since, the caches are dropped and the search runs again on the new version. Reading the
        version first was a round trip of its own for every search more than VERSION_TTL after the last (64
        readers searching every ~1.5 s: half their round trips, each a wake-up of the reader and its backend, which
        on a busy machine wait for a CPU: issue 33, row PG6)."""
        with self._lock:
            read = self._version_read
            optimistic = not self._depth and read is not None
            commits = self._commits
            self._tx.trust = optimistic
            try:
                out, seen = self._candidates(query, limit, file_limit, qvec, flt, optimistic)
            finally:
                self._tx.trust = False
            if not optimistic or seen is None:
                return out
            if self._commits == commits:  # (not raced by our own commit: it may predate it)
                self._version_read = (time.monotonic(), seen)
            if seen == read[1]:  # type: ignore[index]
                return out
            # another process committed: what the statement was built from may be stale; built again on `seen`
            return self._candidates(query, limit, file_limit, qvec, flt, False)[0]

    def _candidates(
        self,
        query: KeywordQuery | None,
        limit: int,
        file_limit: int,
        qvec: np.ndarray | None,
        flt: ChunkFilter | None,
        with_version: bool,
    ) -> tuple[Candidates, int | None]:
        """search_candidates' statement and its rows; `with_version`: the workspace's version read with them (kind
        5), else None."""
        parts: list[str] = []  # the lists, as CTEs (materialized: each is read twice, in its order)
        params: list[Any] = []
        lists: list[str] = []  # rows (kind, position, chunk id, path, score, size, vector)
        where, wparams = self._where(flt)
        has_kw = has_vc = ann = False
        if query is not None and limit > 0:
            built = self._bm25_sql("chunks", query, where, wparams, limit, _levels(flt))
            if built is not None:
                has_kw = True
                parts.append(f"kw(id, score) AS MATERIALIZED ({built[0]})")
                params += built[1]
                lists.append(
                    "SELECT 0, row_number() OVER (), id, NULL::text, score, NULL::bigint, NULL::vector FROM kw"
                )
                if file_limit > 0:
                    cond, cparams = self._file_condition(flt)
                    built = self._bm25_sql("files", query, cond, cparams, file_limit)
                    if built is not None:
                        parts.append(f"fk(path, score, size) AS MATERIALIZED ({built[0]})")
                        params += built[1]
                        lists.append("SELECT 1, row_number() OVER (), NULL, path, score, size, NULL FROM fk")
        if qvec is not None and limit > 0 and self.has_vectors():
            dims = int(self.get_meta("dimensions", "0") or 0)
            q = np.asarray(qvec, dtype=np.float32).reshape(-1)
            if not dims or q.shape[0] == dims:
                has_vc = True
                ann = dims in self._ann_dims and self.embedded_count() >= ANN_MIN_ROWS
                sql, kparams = self._knn_sql(q, limit, dims, ann, flt)
                parts.append(f"vc(id, sim) AS MATERIALIZED ({sql})")
                params += kparams
                lists.append("SELECT 2, row_number() OVER (), id, NULL, sim, NULL, NULL FROM vc")
        if not parts:
            return Candidates(), None
        ids = " UNION ".join([*(["SELECT id FROM kw"] if has_kw else []), *(["SELECT id FROM vc"] if has_vc else [])])
        # driven by the lists, a primary key lookup each: `id IN (...)` scanned the workspace's chunks, and so did a
        # plain join (a hash join over a sequential scan of every chunk row and its text: half the statement's 10
        # ms at 2,524 chunks); the LATERAL subquery behind `OFFSET 0` is not flattened into a join, so it stays a
        # nested loop of primary key lookups
        lists.append(
            f"SELECT 3, 0, i.id, c.path, NULL, NULL, NULL FROM ({ids}) i CROSS JOIN LATERAL"
            " (SELECT c.path FROM chunks c WHERE c.id = i.id AND c.ws = %s OFFSET 0) c"
        )
        params.append(self.ws)
        if qvec is not None and has_kw:  # (the vectors, as chunk_vectors reads them: cosines computed as before)
            missed = "SELECT id FROM kw" + (" EXCEPT SELECT id FROM vc" if has_vc else "")
            lists.append(
                f"SELECT 4, 0, v.chunk_id, NULL, NULL, NULL, v.embedding FROM ({missed}) i"
                " JOIN chunk_vectors v ON v.chunk_id = i.id WHERE v.ws = %s"
            )
            params.append(self.ws)
        if with_version:
            lists.append("SELECT 5, 0, w.version, NULL, NULL, NULL, NULL FROM workspaces w WHERE w.id = %s")
            params.append(self.ws)
        sql = "WITH " + ", ".join(parts) + " " + " UNION ALL ".join(f"({x})" for x in lists)
        with self._lock:
            self._plan_for(ann)
            # prepared on its first use (PREPARE_THRESHOLD waits for the second): planning this statement (five
            # lists and their unions) is a third of its server CPU, and a reader met each of its shapes (the query's
            # kinds of terms) first, planned it, then planned it again to prepare it (issue 33, row PG6)
            if ann and limit > EF_SEARCH:  # (ef_search below k would cut the list short)
                with self.conn.transaction():
                    self.conn.execute(f"SET LOCAL hnsw.ef_search = {int(limit)}")
                    rows = self.conn.execute(sql, params, binary=True, prepare=True).fetchall()
            else:  # (binary: the vectors of ~100 candidates were half the statement's time as text)
                rows = self.conn.execute(sql, params, binary=True, prepare=True).fetchall()
        rows.sort(key=lambda r: (r[0], r[1]))
        out = Candidates()
        version = None
        for kind, _pos, cid, path, score, size, vec in rows:
            if kind == 0:
                out.keywords.append((int(cid), float(score)))
            elif kind == 1:
                out.files.append((str(path), float(score), int(size or 0)))
            elif kind == 2:
                out.vectors.append((int(cid), float(score)))
            elif kind == 3:
                out.paths[int(cid)] = str(path)
            elif kind == 4:
                out.keyword_vectors[int(cid)] = _unit(vec)
            else:
                version = int(cid)
        if ann:
            out.vectors.sort(key=lambda r: -r[1])  # (relaxed order: nearly sorted)
        return out, version

    def keyword_search(
        self, query: KeywordQuery, limit: int, flt: ChunkFilter | None = None
    ) -> list[tuple[int, float]]:
        """(chunk id, BM25 as FTS5 computes it, higher is better) of the `limit` best chunks, best first."""
        if limit <= 0:
            return []
        where, params = self._where(flt)
        return [(int(i), s) for i, s in self._bm25("chunks", query, where, params, limit, _levels(flt))]

    def file_keyword_search(
        self, query: KeywordQuery, limit: int, flt: ChunkFilter | None = None
    ) -> list[tuple[str, float, int]]:
        """(path, whole-file BM25 (higher is better), size in bytes) best first; a file counts when one of its
        chunks passes `flt`."""
        if limit <= 0:
            return []
        cond, params = self._file_condition(flt)
        ranked = self._bm25("files", query, cond, params, limit)
        return [(str(p), s, int(n or 0)) for p, s, n in ranked]

    def keyword_paths(self, query: KeywordQuery, flt: ChunkFilter | None = None) -> list[tuple[str, int | None]]:
        terms = self._prepared_terms(query)
        if not terms:
            return []
        where, params = self._where(flt)
        tsquery = " || ".join("%s::tsquery" for _ in terms)
        rows = self._rows(
            f"SELECT c.path, min(c.chapter_num) FROM chunks c WHERE c.ws = %s AND c.tsv @@ ({tsquery}) AND {where}"
            " GROUP BY c.path",
            [self.ws, *(q for q, _l, _p in terms), *params],
        )
        return [(str(p), None if n is None else int(n)) for p, n in rows]

    def term_doc_freqs(self, terms: Sequence[str]) -> tuple[dict[str, int], int]:
        """({term: chunks holding it}, chunks), terms as the keyword index stems them (markdown.terms.match_key).
        The terms not known since the workspace last changed are counted in one round trip."""
        version = self._any_version() if not self._depth else None
        out: dict[str, int] = {}
        todo: list[str] = []
        for t in dict.fromkeys(terms):
            hit = self._version_cache.get(("tdf", t))
            if version is not None and hit is not None and hit[0] == version:
                out[t] = hit[1]
            else:
                todo.append(t)
        if todo:
            # (a term of one ASCII word is one lexeme: counted from its postings, not the GIN index's heap rows)
            rows = self._rows(
                "SELECT t.ord, CASE WHEN t.term ~ '^[a-z0-9]+$'"
                " THEN (SELECT count(*) FROM chunk_terms p WHERE p.ws = %(ws)s AND p.lexeme = t.term)"
                " ELSE (SELECT count(*) FROM chunks WHERE ws = %(ws)s AND tsv @@ plainto_tsquery('simple', t.term)) END"
                " FROM unnest(%(terms)s::text[]) WITH ORDINALITY t(term, ord)",
                {"ws": self.ws, "terms": todo},
            )
            for ord_, n in rows:
                term = todo[int(ord_) - 1]
                out[term] = int(n or 0)
                if version is not None:
                    self._version_cache[("tdf", term)] = (version, out[term])
        return {t: out[t] for t in terms}, self._collection("chunks")[0]

    # -- chunk reads ---------------------------------------------------------------------------------------
    def chunk_ids_for_paths(self, paths: Sequence[str], flt: Any = None) -> list[tuple[int, str]]:
        where, params = self._where(flt)
        rows = self._rows(
            f"SELECT c.id, c.path FROM chunks c WHERE c.ws = %s AND c.path = ANY(%s) AND {where}",
            [self.ws, list(paths), *params],
        )
        return [(int(i), str(p)) for i, p in rows]

    def chunk_paths(self, chunk_ids: Sequence[int]) -> dict[int, str]:
        if not len(chunk_ids):
            return {}
        rows = self._rows(
            "SELECT id, path FROM chunks WHERE ws = %s AND id = ANY(%s)", (self.ws, [int(i) for i in chunk_ids])
        )
        return {int(i): str(p) for i, p in rows}

    def chunks_with_heading(self, heading: str, flt: Any = None) -> list[int]:
        """Chunks whose own heading (without its `#`s) is `heading` (case ignored), in file order."""
        where, params = self._where(flt)
        rows = self._rows(
            "SELECT c.id FROM chunks c WHERE c.ws = %s AND lower(trim(ltrim(c.section_heading, '#'))) = lower(%s)"
            f" AND {where} ORDER BY c.path, c.chunk_index",
            [self.ws, heading, *params],
        )
        return [int(r[0]) for r in rows]

    def chunks_with_name_heading(self, name: str, flt: Any = None) -> list[int]:
        from ...markdown.terms import heading_names

        where, params = self._where(flt)
        rows = self._rows(
            "SELECT c.id, c.section_heading FROM chunks c WHERE c.ws = %s AND strpos(c.section_heading, %s) > 0"
            f" AND {where} ORDER BY c.path, c.chunk_index",
            [self.ws, name, *params],
        )
        level = {int(i): heading_names(str(h).lstrip("#"), name) for i, h in rows}
        best = max(level.values(), default=0)
        return [i for i, v in level.items() if v and v == best]

    def entity_type_counts(self, flt: Any = None) -> dict[str, int]:
        where, params = self._where(flt)
        rows = self._rows(
            "SELECT lower(coalesce(nullif(trim(c.entity_type), ''), 'document')), count(DISTINCT c.path)"
            f" FROM chunks c WHERE c.ws = %s AND {where} GROUP BY 1",
            [self.ws, *params],
        )
        return {str(t): int(n) for t, n in rows}

    def entity_chunks(self, name: str, flt: Any = None) -> list[int]:
        """For each file whose entity name, display name or an alias is `name` (case ignored): its first chunk
        that passes `flt` (the frontmatter chunk only when it is all there is)."""
        where, params = self._where(flt)
        rows = self._rows(
            "SELECT (SELECT c.id FROM chunks c WHERE c.ws = f.ws AND c.path = f.path AND "
            + where
            + " ORDER BY c.kind = 'frontmatter', c.chunk_index LIMIT 1), f.display_name, f.entity_name, f.aliases"
            " FROM files f WHERE f.ws = %s AND (lower(f.display_name) = lower(%s) OR lower(f.entity_name) = lower(%s)"
            " OR strpos(lower(f.aliases), lower(%s)) > 0) ORDER BY f.path",
            [*params, self.ws, name, name, json.dumps(name)[1:-1]],
        )
        out = []
        for cid, display, entity, aliases in rows:
            names = [n for n in (display, entity) if n]
            with contextlib.suppress(ValueError, TypeError):
                names += [a for a in json.loads(aliases or "[]") if isinstance(a, str)]
            if cid is not None and any(n.lower() == name.lower() for n in names):
                out.append(int(cid))
        return out

    def chunks_by_id(self, chunk_ids: Sequence[int]) -> dict[int, StoredChunk]:
        if not chunk_ids:
            return {}
        rows = self._rows(
            f"SELECT {_CHUNK_SELECT} FROM chunks c WHERE c.ws = %s AND c.id = ANY(%s)",
            (self.ws, [int(i) for i in chunk_ids]),
        )
        return {int(r[0]): StoredChunk(*r) for r in rows}

    def chunks_for_path(self, path: str) -> list[StoredChunk]:
        rows = self._rows(
            f"SELECT {_CHUNK_SELECT} FROM chunks c WHERE c.ws = %s AND c.path = %s ORDER BY c.chunk_index",
            (self.ws, path),
        )
        return [StoredChunk(*r) for r in rows]

    def entities(self) -> list[EntityRow]:
        return [
            EntityRow(p, et, en, dn, aliases_of(al), ft, vis)
            for p, et, en, dn, al, ft, vis in self._rows(
                "SELECT path, entity_type, entity_name, display_name, aliases, file_type, visibility FROM files"
                " WHERE ws = %s AND ((aliases IS NOT NULL AND aliases != '[]')"
                " OR (display_name IS NOT NULL AND (file_type = 'character' OR entity_name IS NOT NULL)))",
                (self.ws,),
            )
        ]

    def headings(self) -> list[HeadingRow]:
        return [
            HeadingRow(*r)
            for r in self._rows(
                "SELECT path, section_heading, heading_path, start_line, end_line, visibility FROM chunks"
                " WHERE ws = %s AND section_heading IS NOT NULL ORDER BY path, chunk_index",
                (self.ws,),
            )
        ]

    def filtered_ids(self, flt: Any) -> np.ndarray:
        where, params = self._where(flt)
        rows = self._rows(f"SELECT c.id FROM chunks c WHERE c.ws = %s AND {where}", [self.ws, *params])
        return np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))

    def filtered_id_set(self, flt: Any) -> frozenset[int]:
        return frozenset(int(i) for i in self.filtered_ids(flt))

    def filtered_paths(self, flt: Any) -> frozenset[str]:
        where, params = self._where(flt)
        rows = self._rows(f"SELECT DISTINCT c.path FROM chunks c WHERE c.ws = %s AND {where}", [self.ws, *params])
        return frozenset(str(r[0]) for r in rows)

    # -- mentions ------------------------------------------------------------------------------------------
    def write_mentions(self, path: str, found: Any) -> None:
        with self.atomic():
            self.conn.execute("DELETE FROM mentions WHERE ws = %s AND path = %s", (self.ws, path))
            if found.rows:
                with self.conn.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO mentions(ws, path, entity, line, col, end_col, surface)"
                        " VALUES (%s,%s,%s,%s,%s,%s,%s)",
                        [(self.ws, path, *r) for r in found.rows],
                    )
            self.conn.execute(
                "INSERT INTO mention_files(ws, path, names_key, pov) VALUES (%s,%s,%s,%s) ON CONFLICT (ws, path)"
                " DO UPDATE SET names_key = excluded.names_key, pov = excluded.pov",
                (self.ws, path, found.names_key, found.pov),
            )

    def drop_mentions(self, path: str) -> None:
        with self.atomic():
            self.conn.execute("DELETE FROM mentions WHERE ws = %s AND path = %s", (self.ws, path))
            self.conn.execute("DELETE FROM mention_files WHERE ws = %s AND path = %s", (self.ws, path))

    def clear_mentions(self) -> None:
        with self.atomic():
            self.conn.execute("DELETE FROM mentions WHERE ws = %s", (self.ws,))
            self.conn.execute("DELETE FROM mention_files WHERE ws = %s", (self.ws,))

    def mention_stale_keys(self, names_key: str) -> list[tuple[str, str | None]]:
        return [
            (r[0], r[1])
            for r in self._rows(
                "SELECT f.path, m.names_key FROM files f LEFT JOIN mention_files m ON m.ws = f.ws AND m.path = f.path"
                " WHERE f.ws = %s AND m.names_key IS DISTINCT FROM %s ORDER BY f.path",
                (self.ws, names_key),
            )
        ]

    def mention_stale_paths(self, names_key: str) -> list[str]:
        return [p for p, _k in self.mention_stale_keys(names_key)]

    def mention_paths(self, entity_paths: Sequence[str]) -> list[str]:
        return [
            r[0]
            for r in self._rows(
                "SELECT DISTINCT path FROM mentions WHERE ws = %s AND entity = ANY(%s)", (self.ws, list(entity_paths))
            )
        ]

    def relabel_mentions(self, paths: Sequence[str], names_key: str) -> None:
        with self.atomic():
            self.conn.execute(
                "UPDATE mention_files SET names_key = %s WHERE ws = %s AND path = ANY(%s)",
                (names_key, self.ws, list(paths)),
            )

    def chapter_num_of(self, path: str) -> int | None:
        rows = self._rows("SELECT chapter_num FROM chunks WHERE ws = %s AND path = %s LIMIT 1", (self.ws, path))
        return None if not rows or rows[0][0] is None else int(rows[0][0])

    def mentions_unscanned(self) -> bool:
        return bool(
            self._rows(
                "SELECT 1 FROM files f WHERE f.ws = %s AND NOT EXISTS"
                " (SELECT 1 FROM mention_files m WHERE m.ws = f.ws AND m.path = f.path) LIMIT 1",
                (self.ws,),
            )
        )

    def mentions_of(self, entity_paths: Sequence[str]) -> list[StoredMention]:
        rows = self._rows(
            "SELECT m.path, m.entity, m.line, m.col, m.end_col, m.surface, f.book_id, f.chapter_id,"
            " (SELECT c.chapter_num FROM chunks c WHERE c.ws = m.ws AND c.path = m.path LIMIT 1) AS chapter_num,"
            " f.visibility FROM mentions m JOIN files f ON f.ws = m.ws AND f.path = m.path"
            " WHERE m.ws = %s AND m.entity = ANY(%s) ORDER BY m.path, m.line, m.col",
            (self.ws, list(entity_paths)),
        )
        return [StoredMention(*r) for r in rows]

    def mention_counts(self, entity_paths: Sequence[str]) -> list[MentionCount]:
        """Aggregated from the mentions at read time (the server does it next to the data, one row per file out)."""
        return [
            MentionCount(*r)
            for r in self._rows(
                "SELECT k.path, k.entity, k.n, k.first_line, k.first_col, k.last_line, k.last_col, f.book_id,"
                " f.chapter_id,"
                " (SELECT c.chapter_num FROM chunks c WHERE c.ws = f.ws AND c.path = f.path LIMIT 1), f.visibility"
                " FROM (SELECT m.path, m.entity, count(*) AS n,"
                " (min(ARRAY[m.line, m.col]))[1] AS first_line, (min(ARRAY[m.line, m.col]))[2] AS first_col,"
                " (max(ARRAY[m.line, m.col]))[1] AS last_line, (max(ARRAY[m.line, m.col]))[2] AS last_col"
                " FROM mentions m WHERE m.ws = %s AND m.entity = ANY(%s) GROUP BY m.path, m.entity) k"
                " JOIN files f ON f.ws = %s AND f.path = k.path ORDER BY k.path, k.entity",
                (self.ws, list(entity_paths), self.ws),
            )
        ]

    def mentions_in(self, entity_paths: Sequence[str], paths: Sequence[str]) -> list[MentionAt]:
        return [
            MentionAt(*r)
            for r in self._rows(
                "SELECT path, entity, line, col, end_col, surface FROM mentions"
                " WHERE ws = %s AND entity = ANY(%s) AND path = ANY(%s) ORDER BY path, line, col",
                (self.ws, list(entity_paths), list(paths)),
            )
        ]

    def chapter_files_digest(self) -> str:
        rows = self._rows(
            "SELECT md5(coalesce(string_agg(concat_ws(',', quote_nullable(f.path), quote_nullable(f.book_id),"
            " quote_nullable(f.chapter_id), quote_nullable(f.visibility), quote_nullable(m.pov),"
            " quote_nullable((SELECT c.chapter_num FROM chunks c WHERE c.ws = f.ws AND c.path = f.path LIMIT 1))),"
            " E'\\n' ORDER BY f.path), ''))"
            " FROM files f LEFT JOIN mention_files m ON m.ws = f.ws AND m.path = f.path"
            " WHERE f.ws = %s AND f.chapter_id IS NOT NULL",
            (self.ws,),
        )
        return str(rows[0][0]) if rows else ""

    def chapter_files(self) -> list[ChapterFile]:
        rows = self._rows(
            "SELECT f.path, f.book_id, f.chapter_id, f.visibility, m.pov,"
            " (SELECT c.chapter_num FROM chunks c WHERE c.ws = f.ws AND c.path = f.path LIMIT 1) AS chapter_num"
            " FROM files f LEFT JOIN mention_files m ON m.ws = f.ws AND m.path = f.path"
            " WHERE f.ws = %s AND f.chapter_id IS NOT NULL",
            (self.ws,),
        )
        return [ChapterFile(*r) for r in rows]

    def prose(self) -> list[ProseRow]:
        return [
            ProseRow(*r)
            for r in self._rows(
                "SELECT path, start_line, text, visibility FROM chunks WHERE ws = %s ORDER BY path, chunk_index",
                (self.ws,),
            )
        ]

    def known_paths(self, entity_paths: Sequence[str], povs: Sequence[str]) -> list[str]:
        return [
            r[0]
            for r in self._rows(
                "SELECT DISTINCT path FROM mentions WHERE ws = %s AND entity = ANY(%s)"
                " UNION SELECT path FROM mention_files WHERE ws = %s AND pov = ANY(%s)",
                (self.ws, list(entity_paths), self.ws, [p.casefold() for p in povs]),
            )
        ]

    # -- vectors -------------------------------------------------------------------------------------------
    def has_vectors(self) -> bool:
        return int(self.get_meta("dimensions", "0") or 0) > 0

    def vector_model(self) -> tuple[str | None, int]:
        return self.get_meta("model"), int(self.get_meta("dimensions", "0") or 0)

    def configure_vectors(self, provider: str, model: str, dimensions: int) -> bool:
        """Record the provider; a different model or dimension drops the workspace's vectors. True if reset."""
        old_model, old_dims = self.vector_model()
        reset = False
        with self.atomic():
            if self.has_vectors() and (old_model != model or old_dims != dimensions):
                self.conn.execute("DELETE FROM chunk_vectors WHERE ws = %s", (self.ws,))
                reset = True
            for key, value in (("provider", provider), ("model", model), ("dimensions", str(dimensions))):
                self._set_meta(key, value)
        if reset:
            log.info(
                "embedding model changed (%s/%s -> %s/%s): vectors rebuilt", old_model, old_dims, model, dimensions
            )
        return reset

    def _cache_vectors(self, model: str, vectors: dict[str, np.ndarray]) -> None:
        now = time.time()
        with self.conn.cursor() as cur:
            cur.executemany(
                # one vector per model and text, ever (shared by every workspace): a vector the cache holds is
                # never replaced, by an index run or an import
                "INSERT INTO embedding_cache(model, content_hash, vector, created) VALUES (%s,%s,%s,%s)"
                " ON CONFLICT (model, content_hash) DO NOTHING",
                [(model, h, np.asarray(v, dtype=np.float32).tobytes(), now) for h, v in vectors.items()],
            )

    def cached_vectors(self, model: str, hashes: Iterable[str], dims: int = 0) -> dict[str, np.ndarray]:
        hashes = list(dict.fromkeys(hashes))
        keys = [model, cache_key(model, dims)] if dims else [model]
        size = int(dims) * 4 if dims else -1
        out: dict[str, np.ndarray] = {}
        for i in range(0, len(hashes), 1000):
            for h, blob in self._rows(
                "SELECT content_hash, vector FROM embedding_cache WHERE model = ANY(%s) AND content_hash = ANY(%s)"
                " AND (%s < 0 OR length(vector) = %s)",
                (keys, hashes[i : i + 1000], size, size),
            ):
                vec = np.frombuffer(bytes(blob), dtype=np.float32)
                if usable_vector(vec):
                    out[h] = vec
        return out

    def chunks_missing_vectors(self, limit: int = 100_000) -> list[PendingChunk]:
        if not self.has_vectors():
            return []
        rows = self._rows(
            "SELECT c.id, c.path, c.heading_path, c.text, c.content_hash FROM chunks c"
            " WHERE c.ws = %s AND NOT EXISTS (SELECT 1 FROM chunk_vectors v WHERE v.chunk_id = c.id)"
            " ORDER BY c.path, c.chunk_index LIMIT %s",
            (self.ws, limit),
        )
        return [PendingChunk(*r) for r in rows]

    def drop_unusable_vectors(self) -> int:
        """Vectors are checked at the provider boundary before they reach this backend: nothing to scan."""
        if self.get_meta(VECTORS_CHECKED_META) != "1":
            self.set_meta(VECTORS_CHECKED_META, "1")
        return 0

    def count_unembedded(self, model: str | None = None, dims: int = 0) -> int:
        total = int(self._scalar("SELECT count(*) FROM chunks WHERE ws = %s", (self.ws,)) or 0)
        stored_model, stored_dims = self.vector_model()
        if model is None:
            model, dims = stored_model, stored_dims
        if not model or not self.has_vectors() or stored_model != model or (dims and stored_dims != dims):
            return total
        return total - self.embedded_count()

    def unembedded_share(self, model: str, dims: int) -> tuple[int, int]:
        return self._cached(
            ("unembedded", model, dims),
            lambda: (
                self.count_unembedded(model, dims),
                int(self._scalar("SELECT count(*) FROM chunks WHERE ws = %s", (self.ws,)) or 0),
            ),
        )

    def unembedded(self, hold: Iterable[str] = (), first: Iterable[str] = ()) -> list[tuple[int, str, str, int]]:
        if not self.has_vectors():
            return []
        rows = self._rows(
            "SELECT c.id, c.path, c.content_hash, c.token_count, f.mtime_ns FROM chunks c"
            " JOIN files f ON f.ws = c.ws AND f.path = c.path WHERE c.ws = %s"
            " AND NOT EXISTS (SELECT 1 FROM chunk_vectors v WHERE v.chunk_id = c.id)"
            " ORDER BY c.path, c.chunk_index",
            (self.ws,),
        )
        held, top = set(hold), {p: i for i, p in enumerate(dict.fromkeys(first))}
        rows = [r for r in rows if r[1] not in held]
        rows.sort(key=lambda r: (top.get(r[1], len(top)), -(r[4] or (1 << 62))))
        return [(int(r[0]), r[1], r[2], int(r[3] or 0)) for r in rows]

    def set_vectors(self, items: Sequence[tuple[int, str, np.ndarray]], model: str) -> None:
        """Add vectors for existing chunks: (chunk_id, content_hash, vector); a chunk replaced meanwhile gets none
        (its vector still goes to the shared cache)."""
        items = [(cid, h, v) for cid, h, v in items if usable_vector(np.asarray(v, dtype=np.float32))]
        if not items:  # (NaN, Inf or zero vectors are never stored: those chunks are embedded again)
            return
        with self.atomic():
            self._cache_vectors(model, {h: v for _, h, v in items})
            with self.conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO chunk_vectors(chunk_id, ws, embedding) SELECT id, ws, %s FROM chunks"
                    " WHERE id = %s AND ws = %s AND content_hash = %s"
                    " ON CONFLICT (chunk_id) DO UPDATE SET embedding = excluded.embedding",
                    [(Vector(v), int(cid), self.ws, h) for cid, h, v in items],
                )
        self._maybe_build_ann()

    def embedded_count(self) -> int:
        return self._cached(
            ("embedded",),
            lambda: int(self._scalar("SELECT count(*) FROM chunk_vectors WHERE ws = %s", (self.ws,)) or 0),
        )

    def nearest_other_file_cosines(self, sample: int, seed: int = 0) -> tuple[int, list[float]]:
        ids = [
            r[0] for r in self._rows("SELECT chunk_id FROM chunk_vectors WHERE ws = %s ORDER BY chunk_id", (self.ws,))
        ]
        n = len(ids)
        if n < 2:
            return n, []
        picked = [int(ids[i]) for i in np.random.default_rng(seed).choice(n, min(sample, n), replace=False)]
        vectors = self.chunk_vectors(picked)
        neighbours = {cid: self.knn(vec, 12) for cid, vec in vectors.items()}
        paths = self.chunk_paths(list({c for hits in neighbours.values() for c, _ in hits} | set(neighbours)))
        return n, other_file_cosines(neighbours, paths)

    def _vectors_by_hash(self, chunk_ids: list[int]) -> dict[str, np.ndarray]:
        rows = self._rows(
            "SELECT c.content_hash, v.embedding FROM chunks c JOIN chunk_vectors v ON v.chunk_id = c.id"
            " WHERE c.id = ANY(%s)",
            (chunk_ids,),
        )
        return {h: v for h, v in rows}

    def chunk_vectors(self, chunk_ids: Sequence[int]) -> dict[int, np.ndarray]:
        if not len(chunk_ids):
            return {}
        rows = self._rows(
            "SELECT chunk_id, embedding FROM chunk_vectors WHERE ws = %s AND chunk_id = ANY(%s)",
            (self.ws, [int(i) for i in chunk_ids]),
            binary=True,
        )
        return {int(i): _unit(v) for i, v in rows}

    def vector_matrix(self) -> tuple[np.ndarray, np.ndarray]:
        rows = self._rows(
            "SELECT chunk_id, embedding FROM chunk_vectors WHERE ws = %s ORDER BY chunk_id", (self.ws,), binary=True
        )
        if not rows:
            return np.empty(0, dtype=np.int64), np.empty((0, 0), dtype=np.float32)
        return np.array([r[0] for r in rows], dtype=np.int64), np.vstack([_unit(r[1]) for r in rows])

    def without_vectors(self, chunk_ids: Sequence[int]) -> set[int]:
        if not self.has_vectors() or not self.embedded_count():
            return set()
        rows = self._rows(
            "SELECT c.id FROM chunks c WHERE c.ws = %s AND c.id = ANY(%s)"
            " AND NOT EXISTS (SELECT 1 FROM chunk_vectors v WHERE v.chunk_id = c.id)",
            (self.ws, [int(i) for i in chunk_ids]),
        )
        return {int(r[0]) for r in rows}

    def paths_without_vectors(self, paths: Sequence[str]) -> set[str]:
        if not paths:
            return set()
        if not self.has_vectors():
            return {
                str(r[0])
                for r in self._rows(
                    "SELECT DISTINCT path FROM chunks WHERE ws = %s AND path = ANY(%s)", (self.ws, list(paths))
                )
            }
        rows = self._rows(
            "SELECT DISTINCT c.path FROM chunks c WHERE c.ws = %s AND c.path = ANY(%s)"
            " AND NOT EXISTS (SELECT 1 FROM chunk_vectors v WHERE v.chunk_id = c.id)",
            (self.ws, list(paths)),
        )
        return {str(r[0]) for r in rows}

    def knn(self, query: np.ndarray, k: int, flt: Any = None) -> list[tuple[int, float]]:
        """Cosine KNN inside the workspace: (chunk id, similarity) best first, the filter applied in the query.
        Exact while the workspace is small; through the HNSW index of its dimension (iterative scan, so a
        selective filter still fills k) once it holds ANN_MIN_ROWS vectors."""
        if k <= 0 or not self.has_vectors():
            return []
        dims = int(self.get_meta("dimensions", "0") or 0)
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        if dims and q.shape[0] != dims:
            return []
        ann = dims in self._ann_dims and self.embedded_count() >= ANN_MIN_ROWS
        # the chunk's own columns only when a filter needs them (a join per vector otherwise)
        sql, qparams = self._knn_sql(q, k, dims, ann, flt)
        with self._lock:
            self._plan_for(ann)
            if ann and k > EF_SEARCH:  # (ef_search below k would cut the list short)
                with self.conn.transaction():
                    self.conn.execute(f"SET LOCAL hnsw.ef_search = {int(k)}")
                    rows = self.conn.execute(sql, qparams).fetchall()
            else:
                rows = self.conn.execute(sql, qparams).fetchall()
        if ann:
            rows.sort(key=lambda r: -r[1])  # (relaxed order: nearly sorted)
        return [(int(i), float(s)) for i, s in rows]

    def _knn_sql(self, q: np.ndarray, k: int, dims: int, ann: bool, flt: Any) -> tuple[str, list[Any]]:
        """The KNN statement: (chunk_id, cosine similarity) rows, nearest first."""
        # the chunk's own columns only when a filter needs more than the reader's levels (a join per vector
        # otherwise), bound to the workspace (a join on the id alone scanned every workspace's chunks)
        alone = vector_level_filter(flt)
        if alone is not None:  # (params: those of the join, then those of the condition after `v.ws = %s`)
            join, jparams, (cond, cparams) = "", [], alone
        else:
            where, params = self._where(flt)
            join, jparams = f" JOIN chunks c ON c.id = v.chunk_id AND c.ws = %s AND {where}", [self.ws, *params]
            cond, cparams = "TRUE", []
        if ann:
            return (
                f"SELECT v.chunk_id, 1 - ((v.embedding::vector({dims})) <=> %s::vector({dims}))"
                f" FROM chunk_vectors v{join} WHERE v.ws = %s AND vector_dims(v.embedding) = {dims} AND {cond}"
                f" ORDER BY (v.embedding::vector({dims})) <=> %s::vector({dims}) LIMIT %s",
                [Vector(q), *jparams, self.ws, *cparams, Vector(q), k],
            )
        # (each distance computed once: as `1 - (v.embedding <=> %s)` beside `ORDER BY v.embedding <=> %s`, every
        # row of the workspace had both computed before the sort kept k of them; the similarity is the same float)
        return (
            f"SELECT s.chunk_id, 1 - s.d FROM (SELECT v.chunk_id, v.embedding <=> %s AS d FROM chunk_vectors v{join}"
            f" WHERE v.ws = %s AND {cond} ORDER BY d LIMIT %s) s",
            [Vector(q), *jparams, self.ws, *cparams, k],
        )

    def _plan_for(self, ann: bool) -> None:
        """The calling thread's session set to generic plans for an exact search, PostgreSQL's choice (custom
        plans) for one through the HNSW index (see GENERIC_PLAN); a round trip only when it changes. Inside
        `with self._lock:`."""
        want = "force_generic_plan" if GENERIC_PLAN and not ann else "auto"
        raw = self.conn.raw  # (the session's: a pooled connection keeps it when handed out again, wrapped anew)
        if self._plan_modes.get(raw, "auto") != want and not self._depth:
            self.conn.execute(f"SET plan_cache_mode = {want}")
            self._plan_modes[self.conn.raw] = want  # (the connection the SET ran on: a dropped one was replaced)

    def _existing_ann_dims(self) -> set[int]:
        """The dimensions whose HNSW index is built and valid (a build cut short leaves an invalid one)."""
        rows = self._rows(
            "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " WHERE i.indrelid = 'chunk_vectors'::regclass AND i.indisvalid AND c.relname LIKE 'chunks_hnsw_%%'"
        )
        return {int(n.rsplit("_", 1)[1]) for (n,) in rows if n.rsplit("_", 1)[1].isdigit()}

    def _maybe_analyze(self) -> None:
        """ANALYZE chunks and files (and their postings) when this store has inserted ANALYZE_MIN_ROWS rows and
        ANALYZE_FRACTION of the table's since its last one (or the table was never analyzed): planner statistics
        only, the answers stay.
        Never inside a transaction; SKIP_LOCKED leaves a table another process analyzes to it; a failure (a role
        that may not analyze) is logged and the write goes on."""
        if self._depth or self.readonly:
            return
        written, self._written_since_analyze = self._written_since_analyze, 0
        try:
            with self._lock:
                tuples = self.conn.execute("SELECT reltuples FROM pg_class WHERE oid = 'chunks'::regclass").fetchone()
                if tuples is not None and tuples[0] >= 0 and written < ANALYZE_FRACTION * tuples[0]:
                    self._written_since_analyze = written
                    return
                self.conn.execute("ANALYZE (SKIP_LOCKED) chunks, files, chunk_terms, file_terms")
        except (psycopg.Error, StorageError) as exc:  # (the connection maps driver errors to StorageError)
            log.warning("could not ANALYZE the keyword tables: %s", exc)

    def _maybe_build_ann(self) -> None:
        """Create the HNSW index of the workspace's dimension once it holds ANN_MIN_ROWS vectors (one index per
        dimension for the whole database, partial on the cast expression; built once, then kept up to date)."""
        dims = int(self.get_meta("dimensions", "0") or 0)
        if not dims or dims in self._ann_dims or dims > 2000 or self.embedded_count() < ANN_MIN_ROWS:
            return
        self.build_ann_index(dims)

    def build_ann_index(self, dims: int, m: int = 16, ef_construction: int = 64) -> bool:
        """Build the HNSW index of `dims`-dimension vectors with CREATE INDEX CONCURRENTLY, on a connection of its
        own and outside the store's lock: this process's searches go on, and so do writers of every workspace (a
        plain CREATE INDEX held chunk_vectors' SHARE lock for the minutes of the build). Idempotent: a valid index
        is kept, an invalid one (a build cut short) dropped and built again; another process building it at the
        same time is left to it (an advisory lock per dimension). Not inside a write transaction (CONCURRENTLY
        cannot run in one, and waits for every open one): then it is left to a later call. True once built."""
        dims = int(dims)
        if self._depth or self.readonly:
            return False
        name = f"chunks_hnsw_{dims}"
        conn = connect(self.url)
        locked = False
        try:
            conn.execute("SET statement_timeout = 0")  # (a build of minutes: the one statement let run)
            if not conn.execute("SELECT pg_try_advisory_lock(%s, %s)", (ANN_BUILD_CLASS, dims)).fetchone()[0]:
                log.info("the HNSW index of %d-dimension vectors is being built by another process", dims)
                return False
            locked = True
            valid = conn.execute(
                "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = %s",
                (name,),
            ).fetchone()
            if valid is not None and not valid[0]:
                log.warning("dropping the HNSW index %s left invalid by a build cut short", name)
                conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
            if valid is None or not valid[0]:
                log.info("building the HNSW index of %d-dimension vectors (once per database)", dims)
                conn.execute(
                    f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON chunk_vectors USING hnsw"
                    f" ((embedding::vector({dims})) vector_cosine_ops) WITH (m = {int(m)}, ef_construction ="
                    f" {int(ef_construction)}) WHERE vector_dims(embedding) = {dims}"
                )
        except psycopg.Error as exc:
            raise mapped(exc, f"building the HNSW index {name}") from exc
        finally:
            # released before the connection closes: the server ends a closed session's backend, and frees its
            # locks, a moment after the client has gone (a build asked again at once found the lock still held)
            if locked:
                with contextlib.suppress(psycopg.Error):
                    conn.execute("SELECT pg_advisory_unlock(%s, %s)", (ANN_BUILD_CLASS, dims))
            conn.close()
        self._ann_dims.add(dims)
        return True


def _no_workspace(name: str, where: str, others: list[str], creatable: bool | str = True) -> str:
    from ...config.settings import did_you_mean

    has = f"its workspaces: {', '.join(others[:20])}{', ...' if len(others) > 20 else ''}" if others else "it has none"
    how = (
        "`saipling index` creates it"
        if creatable is True
        else "this connection may not write the database (read-only"
        + (f": {creatable}" if isinstance(creatable, str) else "")
        + "): connect as a role that may write to create it"
    )
    return f"the PostgreSQL store {where} has no workspace {name!r}{did_you_mean(name, others)} ({has}); {how}"


# the tables an index run, a refresh or `clear` writes (a role that lacks a write on one of them cannot keep the
# index: a refresh after an edit failed on `mentions`, every search), and the logs, which it only appends to
WRITTEN_TABLES = (
    "workspaces",
    "files",
    "chunks",
    "chunk_vectors",
    "chunk_terms",
    "file_terms",
    "meta",
    "mentions",
    "mention_files",
    "embedding_cache",
    "writer_runs",
)
LOG_TABLES = ("embedding_log", "search_log")


def _cannot_write(conn: psycopg.Connection) -> str | None:
    """Why this session may not write a workspace, or None: a read-only session (`default_transaction_read_only`
    set for the role or the database, a hot standby), or a role without INSERT, UPDATE and DELETE on the index's
    tables (INSERT on its logs) or without USAGE on their sequences; the privileges it lacks are named."""
    if conn.execute("SELECT current_setting('transaction_read_only')").fetchone()[0] != "off":
        return "its sessions are read-only (default_transaction_read_only, or a hot standby)"
    lacks = [
        f"{p} on {t}"
        for t, p in conn.execute(
            "SELECT t, p FROM unnest(%s::text[]) AS t CROSS JOIN unnest(ARRAY['INSERT', 'UPDATE', 'DELETE']) AS p"
            " WHERE NOT has_table_privilege(t, p)"
            " UNION ALL SELECT t, 'INSERT' FROM unnest(%s::text[]) AS t WHERE NOT has_table_privilege(t, 'INSERT')"
            " UNION ALL SELECT s.oid::regclass::text, 'USAGE' FROM pg_depend d JOIN pg_class s ON s.oid = d.objid"
            " WHERE s.relkind = 'S' AND d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_class'::regclass"
            " AND d.refobjid = ANY(%s::regclass[])"
            " AND NOT CASE WHEN s.relkind = 'S' THEN has_sequence_privilege(s.oid, 'USAGE') ELSE true END",
            (list(WRITTEN_TABLES), list(LOG_TABLES), [*WRITTEN_TABLES, *LOG_TABLES]),
        )
    ]
    if not lacks:
        return None
    shown = ", ".join(lacks[:6]) + (f" and {len(lacks) - 6} more" if len(lacks) > 6 else "")
    return f"the role {conn.info.user} lacks {shown}"


def _levels(flt: Any) -> list[str] | None:
    """The reader's levels when they are all `flt` asks for (the postings carry each chunk's level), else None."""
    alone = vector_level_filter(flt)
    return None if alone is None or not alone[1] else list(alone[1][0])


def _unit(vec: np.ndarray) -> np.ndarray:
    v = np.asarray(vec, dtype=np.float32)
    norm = float(np.linalg.norm(v))
    return v / norm if norm > 0 else v


def _cjk_lines(chunks: Sequence[ChunkRow]) -> list[str]:
    from ...markdown.terms import cjk_bigrams

    return [w for w in (cjk_bigrams(f"{ch.heading_path or ''}\n{ch.text or ''}") for ch in chunks) if w]

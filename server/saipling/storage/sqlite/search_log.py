"""The search log of a SQLite index (`search_log`, SPEC 5's analytics) in a file of its own beside the index:
`.saipling/search-log.db` (issue 34).

Why: every search logged a row, and a row committed to index.db is a change of the index for every other
connection to it. In WAL mode a connection that sees the database changed empties its whole page cache at its next
read: the keyword worker's (keyword_side.py), another process's (the LSP server, `saipling mcp`, a CLI search)
all read their FTS5 and chunk pages from the OS again after each search anywhere (1.00M chunks: the worker's page
misses 2,650 a hybrid search with the row written, 2,120 without; row S20). A search now writes nothing to
index.db: its row goes to this file, with a pager (and a WAL) of its own, so no reader of the index sees a change.

What stays as before: `SqliteStore.log_search` and `search_log` (storage/base.py) write and read the same rows
(the same columns, `id` ascending with time, the `search_analytics` view leaving `eval` out, also inside this file
for whoever opens it with `sqlite3`). A row is committed as it is logged (WAL, synchronous=NORMAL: no fsync), so
nothing is lost on a normal close; the index stays a cache that can be rebuilt without losing the log.

The rows of an index logged before (index.db's own `search_log` table) are moved here when the log is first opened
for writing: copied with their ids in one transaction, then deleted from index.db in another (a crash between the
two copies nothing twice: the next open finds them already here). A read-only store never writes either file: it
reads this file when it exists, else the index's own rows.

The file is opened like the index (index_files.py): never through a link or a hard link, never outside the folder.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import apsw

from ...errors import IndexPathUnsafe
from ..base import SearchLogEntry
from . import index_files
from .database import Database
from .schema import BUSY_TIMEOUT_MS

log = logging.getLogger(__name__)

LOG_NAME = "search-log.db"  # beside `index.db`; beside another database file `<name>.search-log.db`

_COLUMNS = "id, timestamp, query, source, mode, results, top_score, elapsed_ms"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS search_log(
    id INTEGER PRIMARY KEY, timestamp REAL, query TEXT, source TEXT, mode TEXT, results INTEGER,
    top_score REAL, elapsed_ms REAL);
CREATE VIEW IF NOT EXISTS search_analytics AS SELECT * FROM search_log WHERE source != 'eval';
"""


def log_name(db_path: Path) -> str:
    """The log's file name beside the database file `db_path`."""
    return LOG_NAME if db_path.name == "index.db" else f"{db_path.name}.{LOG_NAME}"


class SearchLog:
    """The search log of the index `index` (the store's Database) in `folder`/log_name(db_path); `folder` None
    (an index in memory): the index's own table, as before."""

    def __init__(self, index: Database, db_path: Path | None, *, readonly: bool) -> None:
        self._index = index
        self.folder = None if db_path is None else db_path.parent
        self.name = None if db_path is None else log_name(db_path)
        self.readonly = readonly
        self._conn: apsw.Connection | None = None
        self._lock = threading.Lock()  # this file's connection (the index's has its own lock)
        self._warned = False

    @property
    def path(self) -> Path | None:
        return None if self.folder is None or self.name is None else self.folder / self.name

    # -- writing -------------------------------------------------------------------------------------------
    def write(self, row: tuple[float, str, str, str, int, float, float]) -> None:
        """One search's row (timestamp, query, source, mode, results, top_score, elapsed_ms), committed."""
        if self.folder is None:
            with self._index.atomic():
                self._index.conn.execute(
                    "INSERT INTO search_log(timestamp, query, source, mode, results, top_score, elapsed_ms)"
                    " VALUES (?,?,?,?,?,?,?)",
                    row,
                )
            return
        if self.readonly:
            raise PermissionError("the index was opened read-only: searches are not logged")
        with self._lock:
            for attempt in (1, 2):
                try:
                    conn = self._writable()
                    conn.execute(
                        "INSERT INTO search_log(timestamp, query, source, mode, results, top_score, elapsed_ms)"
                        " VALUES (?,?,?,?,?,?,?)",
                        row,
                    )
                    return
                except IndexPathUnsafe as exc:  # (a search is never failed by its log: say why nothing is logged)
                    if not self._warned:
                        log.warning("searches are not logged: %s", exc)
                        self._warned = True
                    raise
                except (apsw.NotADBError, apsw.CorruptError):
                    if attempt == 2:
                        raise
                    self._set_aside()  # (then a new log is begun: the index itself is not touched)

    def _set_aside(self) -> None:
        """A damaged log file (not a database, or corrupt) renamed `<name>.damaged` beside it, its side files
        removed, once: the next write begins a new log. It is only the search log: nothing of the index is lost."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
        path = self.path
        assert path is not None
        log.warning("the search log %s is damaged: kept as %s.damaged, a new one is begun", path, path.name)
        try:
            path.replace(path.with_name(path.name + ".damaged"))
            for suffix in index_files.SQLITE_SIDE_FILES:
                path.with_name(path.name + suffix).unlink(missing_ok=True)
        except OSError as exc:
            log.warning("the damaged search log %s could not be set aside (%s): searches are not logged", path, exc)
            raise

    def _writable(self) -> apsw.Connection:
        """The log's connection, the file created (and the index's older rows moved in) on first use."""
        if self._conn is None:
            conn = self._open(create=True)
            assert conn is not None  # (create=True opens or raises)
            try:
                self._move_index_rows(conn)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def _open(self, *, create: bool) -> apsw.Connection | None:
        """A connection to the log file (None when it does not exist and not `create`); the folder, the file
        and SQLite's side files are checked first: a link or a hard link is refused (IndexPathUnsafe)."""
        assert self.folder is not None and self.name is not None
        with index_files.open_folder(self.folder, create=False) as dir_fd:
            if dir_fd is None:
                return None
            exists = index_files.check_entry(self.folder, self.name, dir_fd) is not None
            for suffix in index_files.SQLITE_SIDE_FILES:
                index_files.check_entry(self.folder, self.name + suffix, dir_fd)
            if not exists and not create:
                return None
            path = index_files.sqlite_path(self.folder, dir_fd, self.name)
        if create:
            flags = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE | apsw.SQLITE_OPEN_NOFOLLOW
            conn = apsw.Connection(path, flags=flags)
        else:  # (read-only: never creates or writes the file; `immutable` where its -shm cannot be made)
            conn = _open_readonly(path)
        try:
            conn.set_busy_timeout(BUSY_TIMEOUT_MS)
            if create:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.execute(_SCHEMA)
        except BaseException:
            conn.close()
            raise
        return conn

    def _move_index_rows(self, conn: apsw.Connection) -> None:
        """The index's own `search_log` rows (logged before this file existed) copied here, then deleted there."""
        with self._index.lock:
            rows = self._index.rows(f"SELECT {_COLUMNS} FROM search_log ORDER BY id")
        if not rows:
            return
        with conn:
            here = set(conn.execute("SELECT timestamp, query, source FROM search_log"))
            if not here:  # (the usual case: ids kept, so `id` still ascends with time)
                conn.executemany(f"INSERT INTO search_log({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?)", rows)
            else:  # (a move interrupted before its delete, or an older saipling logged there since)
                conn.executemany(
                    f"INSERT INTO search_log({_COLUMNS}) VALUES (NULL,?,?,?,?,?,?,?)",
                    [r[1:] for r in rows if (r[1], r[2], r[3]) not in here],
                )
        with self._index.atomic():
            self._index.conn.execute("DELETE FROM search_log WHERE id <= ?", (rows[-1][0],))
        log.info("moved %d logged searches from the index to %s", len(rows), self.path)

    # -- reading -------------------------------------------------------------------------------------------
    def rows(self, include_eval: bool, limit: int) -> list[SearchLogEntry]:
        """The last `limit` rows, newest first (`eval` searches left out unless `include_eval`)."""
        table = "search_log" if include_eval else "search_analytics"
        sql = f"SELECT {_COLUMNS} FROM {table} ORDER BY id DESC LIMIT ?"
        if self.folder is not None:
            with self._lock:
                conn = self._conn
                opened = conn is None
                try:
                    if conn is None:
                        conn = self._open(create=False)
                    if conn is not None:
                        return [SearchLogEntry(*r) for r in conn.execute(sql, (limit,))]
                except (apsw.NotADBError, apsw.CorruptError):
                    log.warning("the search log %s is damaged: no logged searches to show", self.path)
                    return []
                finally:
                    if opened and conn is not None:
                        conn.close()
        # no log file yet (nothing logged since, or a read-only index of an older saipling): the index's rows
        with self._index.lock:
            return [SearchLogEntry(*r) for r in self._index.rows(sql, (limit,))]

    def close(self, checkpoint: bool = True) -> None:
        """checkpoint=False (one-shot CLI searches): the WAL left to the next writer, as the index's."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            if not checkpoint:
                conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
            conn.close()


def _open_readonly(path: str) -> apsw.Connection:
    uri = Path(path).absolute().as_uri()
    flags = apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI | apsw.SQLITE_OPEN_NOFOLLOW
    conn = apsw.Connection(uri + "?mode=ro", flags=flags)
    try:
        conn.execute("SELECT count(*) FROM sqlite_schema").fetchall()
    except apsw.CantOpenError:  # (a read-only folder: no -shm can be made)
        conn.close()
        conn = apsw.Connection(uri + "?immutable=1", flags=flags)
    except BaseException:
        conn.close()
        raise
    return conn

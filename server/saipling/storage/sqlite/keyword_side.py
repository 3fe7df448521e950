"""A search's keyword reads on a connection and thread of their own (issue 34), beside the searching thread's own
reads, in an index of MIN_CHUNKS chunks or more.

Why: a hybrid search read its keyword lists and then its nearest vectors, one after the other, under the one lock
of the store's connection (storage/sqlite/database.py); at a million chunks that is ~60 ms of FTS5 then ~150 ms of
KNN on one core while the other waits. The KNN runs on the in-memory matrix (numpy releases the GIL), and apsw
releases it while SQLite steps a statement, so the two overlap on two cores. The work is split so that both
threads finish about together: a hybrid search's worker reads the chunk list while the searching thread runs the
KNN, and the whole-file list is read by whichever of the two is free first (`Claim`); a lexical search's worker
reads the whole-file list while the searching thread reads the chunk list. (Row S19 found a lexical search slower
split this way on a quiet machine: then every search committed its log row to index.db and the worker's page cache
was emptied each time; the log now has its own file, storage/sqlite/search_log.py, and split the lexical search
costs less CPU than read serially: row S20.)

How: `KeywordSide` holds one read-only connection (opened on first use, `mode=ro`: it never writes the index) with
its own `Database` lock and `Keywords` part (the same FTS5 statements, bound and filters as the store's own), used
by one worker thread only: one connection per thread. The searching thread of a hybrid search submits both keyword
lists, runs the KNN on the store's connection, then waits for them. The worker holds only its own lock, never the
store's, so a caller holding the store's lock cannot deadlock it. Its term frequencies are kept until a keyword
index changes (`fts_version`).

What it reads: the last committed state of the index, as any reader in WAL mode. The store's connection has
uncommitted rows only inside a write transaction, which holds the store's lock; a search beside it reads the rows
committed before it (the KNN, on the store's connection, still waits for the commit). The filter is the same SQL
on either connection: a reader role's visibility is checked by SQLite in the keyword statements as before,
nothing is cached across the two.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

import apsw

from ..base import ChunkFilter, KeywordQuery
from .database import Database
from .filters import FilterCache
from .keywords import Keywords
from .schema import connect

if TYPE_CHECKING:  # (imported with the worker: a CLI's lexical search in a small index never starts one)
    import concurrent.futures

log = logging.getLogger(__name__)

# Below this many chunks a search reads serially as before. At 55k chunks its keyword reads take a few ms, and the
# worker's page cache is emptied by every commit of another connection (WAL readers drop their cache when the index
# changed; when this was measured each search's log row was such a commit), so its reads cost more than they saved
# (hybrid CPU 51-56 vs 39-53 ms a search). At 269k (row S33) the two threads mostly wait for each other's GIL: the
# worker's keyword scoring is a Python callback a row (fts_bound.scorer) and the KNN has Python between its numpy
# steps, so beside each other the worker's keyword reads took ~2x their CPU alone (chunk list 19-24 vs 12.6 ms,
# whole-file list 10-13 vs 7-9): the process's CPU equalled the search's wall time (no overlap left), and read one
# after the other the hybrid search took less of both (bench_scale wall p50 56.6 vs 67.6 ms, process CPU 0.83x).
# From 500k chunks the KNN's numpy passes are long enough for the overlap to pay (1.00M: rows S20, S27).
MIN_CHUNKS = 500_000

# True: a lexical search reads its whole-file list on the worker while this thread reads the chunk list (from a
# store's second search on). Off: under load it cut the searching thread's CPU (row S20: 62 -> 37 ms at 1.00M), but
# on a quiet machine its wall p50 was no lower (row S24: 69 vs 67 ms at 1.00M, 65 vs 62 at 269k) and the process
# spent ~27 ms more CPU a search (the worker's reads beside)
LEXICAL_SPLIT = False
# A hybrid search reads its whole-file list on this thread after the KNN, the worker only the chunk list (row S20:
# the process's CPU the same, the worker's share, which this thread waited for, 50 -> 31 ms at 1.00M, 36 -> 24 at 269k)
HYBRID_FILES_HERE = True
# With HYBRID_FILES_HERE: the whole-file list is read by whichever thread is free first, the worker once it has
# the chunk list or this thread once the KNN is done (`Claim`): since the KNN's sign pass (S21) the searching
# thread was the longer one at both sizes (269k: KNN + whole-file list ~21-29 ms of CPU against the worker's chunk
# list ~22; 1.00M: ~53 against ~29), and at a million chunks the worker had the time for it (row S27)
HYBRID_FILES_FIRST_FREE = True

KeywordLists = tuple[list[tuple[int, float]], list[tuple[str, float, int]]]


def fts_version(db: Database) -> tuple[bytes, ...]:
    """The structure records of both keyword indexes (FTS5's `%_data` row 10: its segments and write counter): they
    change with every transaction that writes the index, whoever commits it, and with nothing else. (A connection's
    data_version changes with any commit: with the search log in index.db, after every search, the frequencies kept
    per term were dropped each time, and counting a million chunks again cost ~50 ms a search.)"""
    with db.lock:
        return tuple(
            bytes(b or b"")
            for (b,) in db.conn.execute(
                "SELECT (SELECT block FROM chunks_fts_data WHERE id = 10)"
                " UNION ALL SELECT (SELECT block FROM files_fts_data WHERE id = 10)"
            )
        )


class Claim:
    """A piece of work that either of two threads may do: the first `take` gets it, every later one is refused."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._taken_by: str | None = None
        # the worker's chunk list, set before it takes the claim: a searching thread that finds the claim taken
        # reads the candidates' paths and vectors with it while the worker reads the whole-file list
        self.chunks: list[tuple[int, float]] | None = None

    def take(self, who: str) -> bool:
        with self._lock:
            if self._taken_by is None:
                self._taken_by = who
                return True
            return False

    @property
    def taken_by(self) -> str | None:
        with self._lock:
            return self._taken_by


class Unavailable(Exception):
    """The worker's connection could not be opened: the caller reads the lists itself (and the store serially)."""


class KeywordSide:
    """A hybrid search's keyword reads on a read-only connection used by one worker thread."""

    def __init__(self, path: str) -> None:
        self.path = path  # the database file as the store's connection opened it (no link on the way)
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._keywords: Keywords | None = None
        self._conn: apsw.Connection | None = None
        self._failed = False  # the connection could not be opened: searches read serially as before
        self._guard = threading.Lock()  # start and close

    def submit(
        self,
        query: KeywordQuery,
        limit: int,
        file_limit: int,
        flt: ChunkFilter | None,
        claim: Claim | None = None,
    ) -> concurrent.futures.Future[KeywordLists] | None:
        """The keyword (`limit` > 0) and whole-file (`file_limit` > 0) lists of `query` read on the worker;
        None when there is no worker (closed, or its connection could not be opened): the caller reads them.
        With `claim`, the whole-file list (after the chunk list) only if the worker takes the claim first (else
        it is [] and the caller, which took it, reads it)."""
        with self._guard:
            if self._failed:
                return None
            if self._pool is None:
                import concurrent.futures

                self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="saipling-keywords")
            return self._pool.submit(self._read, query, limit, file_limit, flt, claim)

    def _read(
        self, query: KeywordQuery, limit: int, file_limit: int, flt: ChunkFilter | None, claim: Claim | None = None
    ) -> KeywordLists:
        keywords = self._part()
        chunks = keywords.keyword_search(query, limit, flt) if limit > 0 else []
        if claim is not None:
            claim.chunks = chunks  # (before the claim is taken: see Claim.chunks)
        mine = file_limit > 0 and (claim is None or claim.take("worker"))
        files = keywords.file_keyword_search(query, file_limit, flt) if mine else []
        return chunks, files

    def _part(self) -> Keywords:
        """The worker's Keywords part, its connection opened on first use (on the worker thread)."""
        if self._keywords is None:
            try:
                conn = connect(self.path, readonly=True)
            except apsw.Error as exc:
                raise Unavailable(str(exc)) from exc
            try:
                conn.execute("PRAGMA cache_size=-16384")  # (as the store's connection: FTS pages stay warm)
                conn.execute("PRAGMA mmap_size=67108864")
                conn.execute("PRAGMA temp_store=MEMORY")  # (the frequencies' fts5vocab tables are temp tables)
            except apsw.Error as exc:
                conn.close()
                raise Unavailable(str(exc)) from exc
            db = Database(conn)
            self._conn = conn
            self._keywords = Keywords(db, FilterCache(db), lambda: fts_version(db))
        return self._keywords

    def disable(self) -> None:
        """No more searches on the worker (its connection failed): the store reads serially from now on."""
        with self._guard:
            self._failed = True

    def close(self) -> None:
        """Waits for a read in progress, then closes the connection and the worker."""
        with self._guard:
            self._failed = True
            pool, self._pool = self._pool, None
        if pool is None:
            return
        pool.submit(self._close_conn).result()
        pool.shutdown(wait=True)

    def _close_conn(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except apsw.Error:  # (closing a read-only connection: nothing to lose)
                log.debug("closing the keyword connection failed", exc_info=True)
            self._conn = None
            self._keywords = None

"""Keyword search on the SQLite index: FTS5 over chunks (`chunks_fts`: text, heading path, identifier words) and
whole files (`files_fts`), tokenised `porter unicode61 remove_diacritics 2` (schema.FTS_TOKENIZE). A KeywordQuery
(storage/base.py) is rendered to an FTS5 MATCH expression here and nowhere else; scores leave as -bm25 (higher is
better). `Keywords` is a part of `SqliteStore` (store.py), sharing its `Database`."""

from __future__ import annotations

import dataclasses
import itertools
import json
import operator
from collections.abc import Callable, Container, Sequence
from typing import Any

import apsw

from ..base import ChunkFilter, KeywordQuery, KeywordTerm
from . import fts_bound
from .database import Database
from .filters import FilterCache, where
from .schema import FTS_TOKENIZE


def match_expression(query: KeywordQuery) -> str:
    """The FTS5 MATCH expression of a keyword query: each term a quoted string (a phrase when it has several words;
    `"` doubled inside), `*` after a prefix term, OR-joined."""
    return fts_bound.or_expression(query.terms)


class _ScanSpent(Exception):
    """Raised by saipling_scan to end a filtered candidate statement: its scan budget is spent."""


_VOCAB = {"chunks_fts": "temp.chunks_fts_vocab", "files_fts": "temp.files_fts_vocab"}


class Keywords:
    def __init__(self, db: Database, filters: FilterCache, version: Callable[[], object] | None = None) -> None:
        self.db = db
        self.filters = filters
        # what changes when the keyword index may have (the frequencies are kept until it does): by default any
        # commit to the index but this connection's own uncounted ones (Database.any_version)
        self._version: Callable[[], object] = version or db.any_version
        self._vocabs: set[str] = set()  # the temp fts5vocab tables made on this connection
        # per FTS table: {term or phrase expression: rows holding it}, its number of rows; for _df_version
        self._df_cache: dict[str, dict[str, int]] = {}
        self._df_rows: dict[str, int] = {}
        self._df_version: object = None
        self._tokenizer: tuple[apsw.Connection, Any] | None = None
        self._scorer_on: apsw.Connection | None = None  # the connection saipling_bm25 is registered on
        self.last_scored = 0  # rows the last bounded search scored (tests, benchmarks)
        self.last_exact: bool | None = None  # whether its top rows are provably FTS5's own (None: not bounded)
        self._scan_left = 0  # matching rows a filtered bounded search may still look at (saipling_scan)
        # [rows saipling_bm25 leaves unscored (NULL)]: an unfiltered bounded search's rows scored already
        self._skip: list[Container[int]] = [()]

    def keyword_search(
        self, query: KeywordQuery, limit: int, flt: ChunkFilter | None = None
    ) -> list[tuple[int, float]]:
        """(chunk id, -bm25) best first.

        The heading path column weighs the same as the text: FTS5 saturates each column separately and adds
        them, and a section's own heading is in both (its text starts with it), so a weight of 2 counted it
        three times and put tiny sub-sections (`##### Epic Feat` under `#### Fireball`) above the section a
        query names (README "Retrieval quality"). Exact heading matches are handled in retrieval/search.py."""
        # ranked without a join (a join row per match before the sort cost ~3x), then the ranked rows checked
        # against `flt` (a set of every chunk id passing it cost 1.5 s at a million chunks, after every change);
        # all matches are ranked only when the first 4 x limit hold too few that pass. A search that finds more
        # rows than fts_bound.FTS_BUDGET in a big index scores candidate rows only (fts_bound).
        if limit <= 0:  # (as PostgreSQL does; SQLite's LIMIT -1 is no limit, and the bound needs a k-th row)
            return []
        with self.db.lock:
            seen = self.db.any_version()
            filtered = self._filters(flt)
            hits = self._chunk_hits(query, limit, flt, filtered)
            if not filtered and self._changed_under(flt, seen):
                assert flt is not None
                hits = self._passing([(i, -s) for i, s in hits], flt)
        return hits[:limit]

    def _changed_under(self, flt: ChunkFilter | None, seen: object) -> bool:
        """Whether a search that took `flt` as passing every chunk must check its rows after all: the index
        changed between that answer and the rows read (a write of this process's indexer or another process's
        may have made a chunk private: privacy fails closed). Call under the lock."""
        return flt is not None and not flt.is_empty() and self.db.any_version() != seen

    def _chunk_hits(
        self, query: KeywordQuery, limit: int, flt: ChunkFilter | None, filtered: bool
    ) -> list[tuple[int, float]]:
        """keyword_search's rows: `flt` applied when `filtered`. Call under the lock."""
        conn = self.db.conn
        bound = self._plan(query, "chunks_fts", max(fts_bound.FTS_BUDGET, limit * 4))
        sql = (
            "SELECT rowid, bm25(chunks_fts, 1.0, 1.0, 1.0) AS rank FROM chunks_fts WHERE chunks_fts MATCH ?"
            " ORDER BY rank"
        )
        params: list[Any] = [match_expression(query)]
        if bound is not None:
            return self._bounded_chunks(bound, limit, flt if filtered else None, params[0])
        rows = list(conn.execute(sql + " LIMIT ?", (*params, limit * 4 if filtered else limit)))
        if not filtered:
            return [(int(i), -float(r)) for i, r in rows[:limit]]
        assert flt is not None
        hits = self._passing(rows[: limit * 4], flt)
        if len(hits) < limit and len(rows) >= limit * 4:
            hits = self._passing(list(conn.execute(sql, params)), flt)
        return hits[:limit]

    def _filters(self, flt: ChunkFilter | None) -> bool:
        """Whether `flt` may drop a row: not empty, and not a filter every chunk of the index passes (the default
        role's visibility where no file sets another: FilterCache.passes_all, kept until the index changes). An
        unfiltered search looks up no chunk or file row for the filter: checking the top 4 x limit rows of each
        list cost ~9 ms a lexical search at 1.00M chunks (row S26)."""
        return flt is not None and not flt.is_empty() and not self.filters.passes_all(flt)

    def _bounded_chunks(
        self, bound: fts_bound.Plan, limit: int, flt: ChunkFilter | None, expression: str
    ) -> list[tuple[int, float]]:
        """keyword_search past the bound (fts_bound): the candidates chosen among every chunk; with a filter that
        drops one of their top 4 x limit, chosen again among the chunks it keeps. Call under the lock."""
        hits = self._bounded("chunks_fts", bound, limit)
        if flt is None:
            return hits[:limit]
        top = hits[: limit * 4]
        kept = self._passing([(i, -s) for i, s in top], flt)
        if len(kept) == len(top) and (len(kept) >= limit or self.last_exact):
            # (the filter kept every row checked, as it does most rows: the candidates it would have chosen are
            # the same; and when the top `limit` are exact, so are the filtered ones)
            return kept[:limit]
        # the filter drops rows: it chooses the candidates (a role's best rows may lie past the others)
        hits = self._bounded("chunks_fts", bound, limit, flt)
        if len(hits) >= limit or self.last_exact:
            return hits[:limit]
        # (the scan budget ran out before `limit` rows passing the filter were found: every kept row ranked)
        cond, params = where(flt)
        sql = (
            "SELECT chunks_fts.rowid, bm25(chunks_fts, 1.0, 1.0, 1.0) AS rank FROM chunks_fts"
            f" JOIN chunks c ON c.id = chunks_fts.rowid WHERE chunks_fts MATCH ? AND {cond} ORDER BY rank LIMIT ?"
        )
        return [(int(i), -float(r)) for i, r in self.db.conn.execute(sql, (expression, *params, limit))]

    def _plan(self, query: KeywordQuery, table: str, budget: int) -> fts_bound.Plan | None:
        """fts_bound's plan for `query` over `table` in an index of at least BOUND_MIN_CHUNKS chunks, or None."""
        self.last_exact = None
        if self._doc_freqs("chunks_fts", [])[1] < fts_bound.BOUND_MIN_CHUNKS:
            return None
        return fts_bound.plan(
            query,
            self._tokens,
            lambda keys: self._doc_freqs(table, keys),
            lambda t: self._phrase_rows(table, t),
            budget,
        )

    def _tokens(self, term: KeywordTerm) -> list[str]:
        """A term's words as the keyword index's own tokenizer makes them (schema.FTS_TOKENIZE: the index's
        vocabulary; markdown.terms.match_key's stemmer differs on a few words, `s`)."""
        if self._tokenizer is None or self._tokenizer[0] is not self.db.conn:
            name, *args = FTS_TOKENIZE.split()
            self._tokenizer = (self.db.conn, self.db.conn.fts5_tokenizer(name, args))
        text = " ".join(term.words).encode("utf-8")
        return list(
            self._tokenizer[1](text, apsw.FTS5_TOKENIZE_QUERY, None, include_offsets=False, include_colocated=False)
        )

    def _bounded(
        self, table: str, plan: fts_bound.Plan, limit: int, flt: ChunkFilter | None = None
    ) -> list[tuple[int, float]]:
        """(rowid, -bm25) of the candidate rows of `plan` (fts_bound), best first: every row holding a rare term,
        then the coordination levels of the common ones in the order they were written, while the budget lasts;
        a level stops once the top `limit` are provably exact (Plan.outside). Rows holding one common term only
        (level 1) are taken as far as `limit` rows in all when a higher level exists (they are the weakest).
        With a filter (`flt`, not empty), only rows it keeps are candidates and count against the budget (a
        role's or a folder's best rows are found even where other rows come first), looking at no more than
        fts_bound.FILTER_SCAN x the budget rows in all."""
        if self._scorer_on is not self.db.conn:  # (registered on first use: FTS5's API is read from the database)
            self.db.conn.register_fts5_function("saipling_bm25", fts_bound.scorer(self._skip))
            self.db.conn.create_scalar_function("saipling_scan", self._scan, 1, deterministic=False)
            self._scorer_on = self.db.conn
        fetch = self._fetcher(table, plan, flt)
        scored: dict[int, float] = {}
        everything = plan.query_expression()
        left, full = plan.budget, None
        if plan.rare:  # (at most twice the budget: the frequencies were an estimate for a phrase)
            got, complete = fetch(f"({everything}) AND ({fts_bound.or_expression(plan.rare)})", 2 * plan.budget + 1)
            scored.update(got)
            if len(got) > 2 * plan.budget or not complete:
                left = 0
        # Unfiltered, a level's rows are read without its NOT clauses (the rare terms' rows and the higher levels'
        # are exactly the rows scored so far: every level above was read whole, or the loop ended) and the rows
        # scored already are skipped (saipling_bm25 gives them NULL): the same rows in the same order, ~2 us a
        # row less. With a filter (its scan budget counts every row looked at), after a rare list not read whole,
        # and for a level's test that it has a row (take 0: the rows scored might all come first) the NOT clauses
        # exclude them as before.
        plain = flt is None and left > 0
        levels = plan.levels()
        unexcluded = dict(plan.levels(exclude=False)) if plain else {}
        for level, expr in levels:
            if self._exact(plan, scored, limit, full):
                break
            take = left if level > 1 or len(levels) == 1 else min(left, max(0, limit - len(scored)))
            if plain and take > 0:
                self._skip[0] = scored
                try:
                    got, complete = fetch(f"({everything}) AND ({unexcluded[level]})", take + 1)
                finally:
                    self._skip[0] = ()
            else:
                got, complete = fetch(f"({everything}) AND ({expr})", take + 1)
            scored.update(got[:take])
            left -= min(take, len(got))
            if len(got) > take or not complete:
                break
            full = level
        # best first, a tie by rowid (sorted by rowid, then by score: a stable sort keeps the ties' order)
        ranked = sorted(scored.items(), key=operator.itemgetter(0))
        ranked.sort(key=operator.itemgetter(1), reverse=True)
        self.last_scored = len(scored)
        self.last_exact = self._exact(plan, scored, limit, full, ranked)
        return ranked

    def _fetcher(
        self, table: str, plan: fts_bound.Plan, flt: ChunkFilter | None
    ) -> Callable[[str, int], tuple[list[tuple[int, float]], bool]]:
        """fetch(expression, n): (rowid, -bm25) of the first `n` rows (rowid order) matching `expression` that
        pass `flt`, and whether every matching row was looked at. Unfiltered: one scored statement. Filtered: the
        matching rowids are read unscored a batch at a time, and each batch's rowid range scored with the filter
        in the same statement (a row it drops is never scored), until `n` passed or the scan budget is spent."""
        holding = ", ".join(str(int(n)) for n in plan.holding)
        conn = self.db.conn
        if flt is None or flt.is_empty():
            sql = f"SELECT rowid, saipling_bm25({table}, {holding}) FROM {table} WHERE {table} MATCH ?"

            def fetch_all(expr: str, n: int) -> tuple[list[tuple[int, float]], bool]:
                cursor = conn.execute(sql, (expr,))
                got = list(itertools.islice(cursor, n))
                if self._skip[0]:  # (the rows scored already, NULL: read on as far as `n` others)
                    got = [r for r in got if r[1] is not None]
                    while len(got) < n and (more := list(itertools.islice(cursor, n - len(got)))):
                        got += [r for r in more if r[1] is not None]
                cursor.close()
                return got, len(got) < n

            return fetch_all
        if table == "chunks_fts":
            cond, params = where(flt)
            join = "JOIN chunks c ON c.id = chunks_fts.rowid"
        else:
            # a file by its own row: a chunk repeats its file's path, visibility, types, book and chapter (the
            # indexer writes them from the file's metadata), all but the chapter number. Reading a chunk row of
            # each file instead cost ~15 us a file (~30 ms a search at 20,000 files); the caller checks the files
            # it returns against the whole filter, chunk by chunk (_file_rows)
            cond, params = where(dataclasses.replace(flt, max_chapter=None))
            join = "JOIN files c ON c.rowid = files_fts.rowid"
        keep = cond or "1"
        # one statement: the filter is checked in the join (a row it drops is never scored), and saipling_scan
        # counts the matching rows looked at (it stands before the join: SQLite checks it in the FTS loop) and
        # stops the statement once the scan budget is spent
        sql = (
            f"SELECT {table}.rowid, saipling_bm25({table}, {holding}) FROM {table} {join}"
            f" WHERE {table} MATCH ? AND saipling_scan({table}.rowid) AND {keep}"
        )
        self._scan_left = fts_bound.FILTER_SCAN * plan.budget

        def fetch_kept(expr: str, n: int) -> tuple[list[tuple[int, float]], bool]:
            got: list[tuple[int, float]] = []
            if self._scan_left <= 0:
                return got, False
            cursor = None
            try:  # (apsw steps the statement once in execute(): the budget may end there too)
                cursor = conn.execute(sql, (expr, *params))
                got.extend(itertools.islice(cursor, n))
            except _ScanSpent:
                return got, False
            finally:
                if cursor is not None:
                    cursor.close()
            return got, len(got) < n

        return fetch_kept

    def _scan(self, _rowid: int) -> int:
        """`saipling_scan(rowid)`: 1 while the filtered search's scan budget lasts (counting the row), then stops
        the statement (_ScanSpent)."""
        self._scan_left -= 1
        if self._scan_left < 0:
            raise _ScanSpent
        return 1

    @staticmethod
    def _exact(
        plan: fts_bound.Plan,
        scored: dict[int, float],
        limit: int,
        full: int | None,
        ranked: list[tuple[int, float]] | None = None,
    ) -> bool:
        """Whether the best `limit` of `scored` are the best of the whole table: every level was scored, or the
        limit-th best score is at least what a row left out can score."""
        if full == 1:
            return True
        if len(scored) < limit:
            return False
        if ranked is None:
            kth = sorted(scored.values(), reverse=True)[limit - 1]
        else:
            kth = ranked[limit - 1][1]
        return kth >= plan.outside(full)

    def _doc_freqs(self, table: str, terms: Sequence[str]) -> tuple[dict[str, int], int]:
        """({term: rows of `table` holding it}, rows of `table`), kept per term until the index changes."""
        conn = self.db.conn
        version = self._version()
        if self._df_version != version:
            self._df_cache.clear()
            self._df_rows.clear()
            self._df_version = version
        if table not in self._df_rows:
            content = "chunks" if table == "chunks_fts" else "files"
            self._df_rows[table] = int(self.db.scalar(f"SELECT count(*) FROM {content}") or 0)
        cache = self._df_cache.setdefault(table, {})
        missing = [t for t in terms if t not in cache]
        if missing:
            vocab = _VOCAB[table]
            if vocab not in self._vocabs:
                conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {vocab} USING fts5vocab(main, {table}, row)")
                self._vocabs.add(vocab)
            found = dict.fromkeys(missing, 0)
            for t, d in conn.execute(
                f"SELECT term, doc FROM {vocab} WHERE term IN (SELECT value FROM json_each(?))", (json.dumps(missing),)
            ):
                found[str(t)] = int(d)
            if len(cache) > 10_000:
                cache.clear()
            cache.update(found)
        return {t: cache[t] for t in terms}, self._df_rows[table]

    def _phrase_rows(self, table: str, term: KeywordTerm) -> int:
        """Rows of `table` holding the phrase `term` (counted by FTS5; kept as _doc_freqs keeps a term's)."""
        self._doc_freqs(table, [])
        cache = self._df_cache.setdefault(table, {})
        key = fts_bound.term_expression(term)
        if key not in cache:
            cache[key] = int(self.db.scalar(f"SELECT count(*) FROM {table} WHERE {table} MATCH ?", (key,)) or 0)
        return cache[key]

    def _passing(self, rows: list[tuple[int, float]], flt: ChunkFilter) -> list[tuple[int, float]]:
        """Those of the ranked (chunk id, bm25) rows whose chunk passes `flt`, in their order, as (id, -bm25)."""
        cond, params = where(flt)
        ok = {
            int(r[0])
            for r in self.db.conn.execute(
                f"SELECT c.id FROM chunks c WHERE c.id IN (SELECT value FROM json_each(?)) AND {cond}",
                [json.dumps([int(i) for i, _ in rows]), *params],
            )
        }
        return [(int(i), -float(r)) for i, r in rows if i in ok]

    def keyword_paths(self, query: KeywordQuery, flt: ChunkFilter | None = None) -> list[tuple[str, int | None]]:
        """Every file with a chunk matching `query` that passes `flt`: (path, chapter number).
        (Frontmatter chunks count: a short body may share the frontmatter's chunk.)"""
        cond, params = where(flt or ChunkFilter())
        sql = (
            "SELECT c.path, min(c.chapter_num) FROM chunks_fts JOIN chunks c ON c.id = chunks_fts.rowid"
            " WHERE chunks_fts MATCH ?" + (f" AND {cond}" if cond else "") + " GROUP BY c.path"
        )
        with self.db.lock:
            return [
                (str(p), None if n is None else int(n))
                for p, n in self.db.conn.execute(sql, [match_expression(query), *params])
            ]

    def file_keyword_search(
        self, query: KeywordQuery, limit: int, flt: ChunkFilter | None = None
    ) -> list[tuple[str, float, int]]:
        """(path, whole-file -bm25, size in bytes) best first; a file counts when one of its chunks passes `flt`.
        Ranked first, then looked up, the first 4 x limit ranked files checked against `flt` (their chunks only,
        by path); all of them only when too few of those pass. (A join with the filter's subquery over every chunk
        cost ~30 ms a search on the fiction corpus; the set of every path passing it 2.5 s at a million chunks
        after each write; ranking and looking up every file holding a common word ~250 ms at 20,000 files.) A big
        index scores candidate files only (fts_bound, FILE_BUDGET), as keyword_search does."""
        if limit <= 0:  # (as PostgreSQL does; SQLite's LIMIT -1 is no limit, and the bound needs a k-th row)
            return []
        conn = self.db.conn
        sql = "SELECT rowid, bm25(files_fts) AS rank FROM files_fts WHERE files_fts MATCH ? ORDER BY rank"
        with self.db.lock:
            seen = self.db.any_version()
            filtered = self._filters(flt)
            bound = self._plan(query, "files_fts", max(fts_bound.FILE_BUDGET, limit * 4))
            if bound is not None:
                ranked = [(i, -s) for i, s in self._bounded("files_fts", bound, limit)]
                top = ranked[: limit * 4]
                rows = self._file_rows(top, flt) if filtered else self._first_files(top, limit)
                if filtered and not (len(rows) == len(top) and (len(rows) >= limit or self.last_exact)):
                    # the filter drops files: it chooses the candidates (as in keyword_search)
                    ranked = [(i, -s) for i, s in self._bounded("files_fts", bound, limit, flt)]
                    rows = self._file_rows(ranked[: limit * 4], flt)
                    if len(rows) < limit and len(ranked) > limit * 4:
                        rows = self._file_rows(ranked, flt)  # (every candidate the bound scored)
                    if len(rows) < limit and not self.last_exact:  # (the scan budget ran out)
                        rows = self._file_rows(list(conn.execute(sql, (match_expression(query),))), flt)
            else:
                ranked = list(conn.execute(sql + " LIMIT ?", (match_expression(query), limit * 4)))
                rows = self._file_rows(ranked[: limit * 4], flt) if filtered else self._first_files(ranked, limit)
                if len(rows) < limit and filtered and len(ranked) >= limit * 4:
                    rows = self._file_rows(list(conn.execute(sql, (match_expression(query),))), flt)
            if not filtered and self._changed_under(flt, seen):  # (privacy fails closed: keyword_search)
                assert flt is not None
                allowed = self._paths_passing([str(r[0]) for r in rows], flt)
                rows = [r for r in rows if str(r[0]) in allowed]
        return [(str(p), -float(b), int(n or 0)) for p, n, b in rows[:limit]]

    def _first_files(self, ranked: list[tuple[int, float]], limit: int) -> list[tuple[Any, ...]]:
        """_file_rows of the first `limit` ranked rows that have a file row (unfiltered: the rest are not read;
        a files_fts row without one, which a consistent index never has, brings the next ones in)."""
        rows = self._file_rows(ranked[:limit], None)
        if len(rows) < limit < len(ranked):
            rows = self._file_rows(ranked[: limit * 4], None)
        return rows

    def _file_rows(self, ranked: list[tuple[int, float]], flt: ChunkFilter | None) -> list[tuple[Any, ...]]:
        """(path, size, bm25) of the ranked (files_fts rowid, bm25) rows whose file has a chunk passing `flt`."""
        files = {
            r: (p, n)
            for r, p, n in self.db.conn.execute(
                "SELECT rowid, path, size FROM files WHERE rowid IN (SELECT value FROM json_each(?))",
                (json.dumps([r for r, _ in ranked]),),
            )
        }
        allowed = None if flt is None else self._paths_passing([p for p, _ in files.values()], flt)
        return [(*files[r], b) for r, b in ranked if r in files and (allowed is None or files[r][0] in allowed)]

    def term_doc_freqs(self, terms: Sequence[str]) -> tuple[dict[str, int], int]:
        """({term: number of chunks holding it}, number of chunks), terms as the keyword index stems them.
        Kept per term until the index changes (queries repeat their words)."""
        with self.db.lock:
            return self._doc_freqs("chunks_fts", terms)

    def _paths_passing(self, paths: list[str], flt: ChunkFilter) -> set[str]:
        """Those of `paths` with a chunk passing `flt` (one is enough: a file holds ~50 chunks at a million)."""
        cond, params = where(flt)
        return {
            str(p)
            for (p,) in self.db.conn.execute(
                "SELECT j.value FROM json_each(?) j WHERE EXISTS (SELECT 1 FROM chunks c WHERE c.path = j.value"
                + (f" AND {cond}" if cond else "")
                + ")",
                [json.dumps(paths), *params],
            )
        }

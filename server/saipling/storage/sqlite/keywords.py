"""Keyword search on the SQLite index: FTS5 over chunks (`chunks_fts`: text, heading path, identifier words) and
whole files (`files_fts`), tokenised `porter unicode61 remove_diacritics 2` (schema.FTS_TOKENIZE). A KeywordQuery
(storage/base.py) is rendered to an FTS5 MATCH expression here and nowhere else; scores leave as -bm25 (higher is
better). `Keywords` is a part of `SqliteStore` (store.py), sharing its `Database`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..base import ChunkFilter, KeywordQuery
from . import fts_bound
from .database import Database
from .filters import FilterCache, where


def match_expression(query: KeywordQuery) -> str:
    """The FTS5 MATCH expression of a keyword query: each term a quoted string (a phrase when it has several words;
    `"` doubled inside), `*` after a prefix term, OR-joined."""
    return " OR ".join(
        '"' + " ".join(t.words).replace('"', '""') + '"' + ("*" if t.prefix else "") for t in query.terms
    )


class Keywords:
    def __init__(self, db: Database, filters: FilterCache) -> None:
        self.db = db
        self.filters = filters
        self._vocab = False  # the temp fts5vocab table over chunks_fts exists on this connection
        self._df_cache: dict[str, int] = {}  # term -> chunks holding it, for _df_version of the index
        self._df_version: tuple[int, int] | None = None
        self._df_total = 0

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
        # rows than fts_bound.FTS_BUDGET ranks its rarest terms (and a recent share of them) only.
        filtered = flt is not None and not flt.is_empty()
        conn = self.db.conn
        with self.db.lock:
            bound = fts_bound.plan(query, self.term_doc_freqs)
            floor, unbounded = None, query
            if bound is not None:
                query = bound.query
                floor = fts_bound.rowid_floor(bound.share, *self._rowid_range("chunks"))
            sql = (
                "SELECT rowid, bm25(chunks_fts, 1.0, 1.0, 1.0) AS rank FROM chunks_fts WHERE chunks_fts MATCH ?"
                + (" AND rowid >= ?" if floor is not None else "")
                + " ORDER BY rank"
            )
            params: list[Any] = [match_expression(query)] + ([] if floor is None else [floor])
            if not filtered:
                return [(int(i), -float(r)) for i, r in conn.execute(sql + " LIMIT ?", (*params, limit))]
            assert flt is not None
            rows = list(conn.execute(sql + " LIMIT ?", (*params, limit * 4)))
            hits = self._passing(rows, flt)
            if len(hits) < limit and (len(rows) == limit * 4 or bound is not None):
                if bound is not None:  # the bound was planned over every chunk, not those the filter keeps
                    sql = sql.replace(" AND rowid >= ?", "")
                    params = [match_expression(unbounded)]
                hits = self._passing(list(conn.execute(sql, params)), flt)
        return hits[:limit]

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

    def _rowid_range(self, table: str) -> tuple[int | None, int | None]:
        """(smallest, largest) rowid of `table` (two b-tree ends: constant time)."""
        low = self.db.scalar(f"SELECT min(rowid) FROM {table}")
        high = self.db.scalar(f"SELECT max(rowid) FROM {table}")
        return (None if low is None else int(low)), (None if high is None else int(high))

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
        Ranked first, then looked up and filtered by the (cached) paths passing `flt`: a join with the filter's
        subquery over every chunk cost ~30 ms a search on the fiction corpus, the ranking ~1 ms."""
        allowed = self.filters.paths(flt) if flt is not None and not flt.is_empty() else None
        if allowed is not None and not allowed:
            return []
        conn = self.db.conn
        with self.db.lock:
            # the rarest terms only (the chunks' frequencies: a file holds its chunks); no rowid floor: its share
            # comes from chunk counts, and the files are far fewer
            bound = fts_bound.plan(query, self.term_doc_freqs)
            floor = None
            if bound is not None:
                query = bound.query
            ranked = list(
                conn.execute(
                    "SELECT rowid, bm25(files_fts) AS rank FROM files_fts WHERE files_fts MATCH ?"
                    + (" AND rowid >= ?" if floor is not None else "")
                    + " ORDER BY rank"
                    + (" LIMIT ?" if allowed is None else ""),
                    [
                        match_expression(query),
                        *([floor] if floor is not None else []),
                        *([limit] if allowed is None else []),
                    ],
                )
            )
            files = {
                r: (p, n)
                for r, p, n in conn.execute(
                    "SELECT rowid, path, size FROM files WHERE rowid IN (SELECT value FROM json_each(?))",
                    (json.dumps([r for r, _ in ranked]),),
                )
            }
        rows = [(*files[r], b) for r, b in ranked if r in files and (allowed is None or files[r][0] in allowed)]
        return [(str(p), -float(b), int(n or 0)) for p, n, b in rows[:limit]]

    def term_doc_freqs(self, terms: Sequence[str]) -> tuple[dict[str, int], int]:
        """({term: number of chunks holding it}, number of chunks), terms as the keyword index stems them.
        Kept per term until the index changes (queries repeat their words)."""
        conn = self.db.conn
        with self.db.lock:
            version = self.db.any_version()
            if self._df_version != version:
                self._df_cache.clear()
                self._df_version = version
                self._df_total = int(self.db.scalar("SELECT count(*) FROM chunks") or 0)
            missing = [t for t in terms if t not in self._df_cache]
            if missing:
                if not self._vocab:
                    conn.execute(
                        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.chunks_fts_vocab USING fts5vocab(main, chunks_fts, "
                        "row)"
                    )
                    self._vocab = True
                found = dict.fromkeys(missing, 0)
                for t, d in conn.execute(
                    "SELECT term, doc FROM temp.chunks_fts_vocab WHERE term IN (SELECT value FROM json_each(?))",
                    (json.dumps(missing),),
                ):
                    found[str(t)] = int(d)
                if len(self._df_cache) > 10_000:
                    self._df_cache.clear()
                self._df_cache.update(found)
            return {t: self._df_cache[t] for t in terms}, self._df_total

"""A search filter (storage.base.ChunkFilter, plain data) compiled to SQLite: an SQL condition over `chunks` (alias
`c`) using our SQL functions (schema.connect), and the cache of what a filter passes."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ...config.visibility import PUBLIC  # (a chunk without a visibility is public)
from ...lazy import np  # numpy loads on first use (cold CLI path)
from ..base import ChunkFilter, book_keys
from .database import Database
from .schema import VISIBILITY_INDEX


def where(flt: ChunkFilter) -> tuple[str, list[Any]]:
    """SQL condition over `chunks` (alias c) and its parameters ("" and [] for an empty filter)."""
    conds: list[str] = []
    params: list[Any] = []
    if flt.entity_types:  # as written in frontmatter: `type: Character` is the type `character`
        conds.append(f"saipling_lower(c.entity_type) IN ({','.join('?' * len(flt.entity_types))})")
        params += [t.lower() for t in flt.entity_types]
    if flt.file_types:  # (saipling names them, in lower case: `World` is `world`)
        conds.append(f"c.file_type IN ({','.join('?' * len(flt.file_types))})")
        params += [t.lower() for t in flt.file_types]
    if flt.book_id:  # its id, or the book as frontmatter names it (`Emma`, `Pride and Prejudice`)
        conds.append("saipling_lower(c.book_id) IN (?, ?)")
        params += book_keys(flt.book_id)
    if flt.book_scope:
        conds.append("(c.book_id IS NULL OR saipling_lower(c.book_id) IN (?, ?))")
        params += book_keys(flt.book_scope)
    if flt.chapter_id:
        conds.append("c.chapter_id = ?")
        params.append(flt.chapter_id)
    if flt.max_chapter is not None:
        conds.append("(c.chapter_num IS NULL OR c.chapter_num <= ?)")
        params.append(flt.max_chapter)
    if flt.path_prefix:
        if flt.path_prefix.isascii():
            conds.append("substr(c.path, 1, ?) = ?")
            params += [len(flt.path_prefix), flt.path_prefix]
        else:  # `notes/privé` typed in NFC names the folder stored in NFD (as macOS writes it), and back
            from ...paths import nfc

            prefix = nfc(flt.path_prefix)
            conds.append("substr(saipling_nfc(c.path), 1, ?) = ?")
            params += [len(prefix), prefix]
    if flt.glob:
        conds.append("saipling_glob(c.path, ?)")
        params.append(flt.glob)
    if flt.corpus:
        conds.append("c.corpus = ?")
        params.append(flt.corpus)
    if flt.visibility is not None:  # levels compare case-insensitively (config/visibility.py); NULL is public
        conds.append(
            f"lower(trim(coalesce(c.visibility, 'public'))) IN ({','.join('?' * len(flt.visibility)) or 'NULL'})"
        )
        params += flt.visibility
    if flt.exclude_paths:
        conds.append("c.path NOT IN (SELECT value FROM json_each(?))")
        params.append(json.dumps(flt.exclude_paths))
    if flt.only_paths is not None:
        conds.append("c.path IN (SELECT value FROM json_each(?))")
        params.append(json.dumps(flt.only_paths))
    if flt.known_entities is not None:
        conds.append(
            "(c.path IN (SELECT m.path FROM mentions m WHERE m.entity IN (SELECT value FROM json_each(?)))"
            " OR c.path IN (SELECT f.path FROM mention_files f WHERE f.pov IN (SELECT value FROM json_each(?))))"
        )
        params += [json.dumps(flt.known_entities), json.dumps(flt.known_povs)]
    elif flt.known_by is not None:
        conds.append("0")  # (fail closed: never resolved, nothing is known)
    return " AND ".join(conds), params


# Distinct stored visibility values read by seeks (FilterCache._levels) before one pass over the index is cheaper
_LEVEL_SEEKS = 256


class FilterCache:
    """What a filter passes (chunk ids, their set, file paths) and other chunk-level counts, kept until the index
    changes (Database.any_version): most searches repeat one filter (the role's visibility, the context
    exclusions), and reading every chunk row for it cost ~38 ms a search on the 56k chunks of the fiction corpus."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._cache: dict[tuple[str, ...], tuple[tuple[int, int], Any]] = {}
        self.scans = 0  # reads of the chunks table for a filter's rows (tests, benchmarks)

    def cached(self, key: tuple[str, ...], compute: Callable[[], Any]) -> Any:
        """compute(), kept under `key` until the index changes (at most 16 entries). Call under the lock."""
        with self.db.lock:
            version = self.db.any_version()
            hit = self._cache.get(key)
            if hit is not None and hit[0] == version:
                return hit[1]
            value = compute()
            if len(self._cache) >= 16:
                self._cache.clear()
            self._cache[key] = (version, value)
            return value

    def passes_all(self, flt: ChunkFilter) -> bool:
        """True when `flt` keeps every chunk of the index: its only condition is a visibility admitting `public`
        (a chunk without one) and every level a chunk of the index sets (the default role in a project where no
        file sets a visibility: the usual case). The levels are read from the partial index of the chunks that set
        one (migration 11: empty in that case) and kept until the index changes: the ids of every chunk passing
        the visibility (a read of every chunk row, 1-5 s at 269k chunks after each write) and their test in every
        vector search are then not needed. False on an index without that partial index (a read-only open of an
        older one): its levels would be a read of every row."""
        if flt.visibility is None or PUBLIC not in flt.visibility or not replace(flt, visibility=None).is_empty():
            return False
        levels = self.cached(("visibility levels",), self._levels)
        return levels is not None and levels <= set(flt.visibility)

    def _levels(self) -> frozenset[str] | None:
        """The levels (trimmed, lower case) that chunks of the index set; None without the partial index.
        Read by skipping through the partial index one stored value at a time (each the smallest value past the
        last: a seek), so the cost is the number of distinct values, not of the chunks that set one: in a
        project where every file sets `visibility: public`, a DISTINCT over the index read every chunk's entry
        (0.25 s at 269k chunks, 0.86 s at 1M, on the way to the first semantic answer)."""
        conn = self.db.conn
        if not conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?", (VISIBILITY_INDEX,)
        ).fetchall():
            return None
        stored: list[Any] = []
        sql = f"SELECT min(visibility) FROM chunks INDEXED BY {VISIBILITY_INDEX} WHERE visibility IS NOT NULL"
        (value,) = conn.execute(sql).fetchone() or (None,)
        for _ in range(_LEVEL_SEEKS):
            if value is None:  # (trimmed and lowered by SQLite itself, as the filter's SQL compares them)
                return frozenset(
                    str(level)
                    for (level,) in conn.execute(
                        "SELECT DISTINCT lower(trim(value)) FROM json_each(?)", (json.dumps(stored),)
                    )
                )
            stored.append(value)
            (value,) = conn.execute(f"{sql} AND visibility > ?", (value,)).fetchone() or (None,)
        # (more distinct spellings than seeks are worth: one pass over the index)
        return frozenset(
            str(level)
            for (level,) in conn.execute(
                f"SELECT DISTINCT lower(trim(visibility)) FROM chunks INDEXED BY {VISIBILITY_INDEX}"
                " WHERE visibility IS NOT NULL"
            )
        )

    def ids(self, flt: ChunkFilter) -> np.ndarray:
        """The ids of the chunks passing `flt` (an int64 array)."""
        return self._filtered(
            "SELECT c.id FROM chunks c WHERE {}", flt, lambda rows: np.fromiter((r[0] for r in rows), dtype=np.int64)
        )

    def id_set(self, flt: ChunkFilter) -> frozenset[int]:
        """ids() as a set (membership tests), kept the same way."""
        return self._filtered(
            "SELECT c.id FROM chunks c WHERE {}", flt, lambda rows: frozenset(int(r[0]) for r in rows), "set"
        )

    def paths(self, flt: ChunkFilter) -> frozenset[str]:
        """The paths of the files with a chunk passing `flt`."""
        return self._filtered(
            "SELECT DISTINCT c.path FROM chunks c WHERE {}", flt, lambda rows: frozenset(str(r[0]) for r in rows)
        )

    def _filtered(self, sql: str, flt: ChunkFilter, build: Any, shape: str = "") -> Any:
        cond, params = where(flt)
        key = (sql + shape, cond, json.dumps(params, default=str))

        def compute() -> Any:
            self.scans += 1
            return build(self.db.conn.execute(sql.format(cond), params))

        return self.cached(key, compute)

"""Where each entity is mentioned (`retrieval/mentions.py` finds them), as the SQLite index stores it: a file's
mentions are written with its chunks (the same transaction), with the key of the entity names they were found with
and the file's frontmatter `pov`. `Mentions` is a part of `SqliteStore` (store.py), sharing its `Database`."""

from __future__ import annotations

from collections.abc import Sequence

from ..base import ChapterFile, FileMentionRows, MentionAt, MentionCount, MentionRow, ProseRow, StoredMention
from .database import Database
from .schema import VISIBILITY_READ


class Mentions:
    def __init__(self, db: Database) -> None:
        self.db = db

    def write_mentions(self, path: str, found: FileMentionRows) -> None:
        """Replace a file's mentions (the caller's transaction, or one of its own)."""
        with self.db.lock, self.db.atomic():
            self.db.conn.execute("DELETE FROM mentions WHERE path = ?", (path,))
            self.db.conn.executemany(
                "INSERT INTO mentions(path, entity, line, col, end_col, surface) VALUES (?,?,?,?,?,?)",
                [(path, *r) for r in found.rows],
            )
            self.db.conn.execute("DELETE FROM mention_counts WHERE path = ?", (path,))
            self.db.conn.executemany(
                "INSERT INTO mention_counts(entity, path, count, first_line, first_col, last_line, last_col)"
                " VALUES (?,?,?,?,?,?,?)",
                [(entity, path, *agg) for entity, agg in _counts(found.rows).items()],
            )
            self.db.conn.execute(
                "INSERT OR REPLACE INTO mention_files(path, names_key, pov) VALUES (?,?,?)",
                (path, found.names_key, found.pov),
            )
            self.db.writes += 1  # filters over mentions (knownBy) cached per index state see the change

    def write_many(self, files: Sequence[tuple[str, FileMentionRows]]) -> None:
        """Replace several files' mentions in the caller's transaction, a few statements for them all (no savepoint
        per file: FTS5 writes its pending keywords out at each savepoint, ~1 ms a file in a first index)."""
        if not files:
            return
        paths = _json([p for p, _ in files])
        for table in ("mentions", "mention_counts"):
            self.db.conn.execute(f"DELETE FROM {table} WHERE path IN (SELECT value FROM json_each(?))", (paths,))
        self.db.conn.executemany(
            "INSERT INTO mentions(path, entity, line, col, end_col, surface) VALUES (?,?,?,?,?,?)",
            [(path, *r) for path, found in files for r in found.rows],
        )
        self.db.conn.executemany(
            "INSERT INTO mention_counts(entity, path, count, first_line, first_col, last_line, last_col)"
            " VALUES (?,?,?,?,?,?,?)",
            [(entity, path, *agg) for path, found in files for entity, agg in _counts(found.rows).items()],
        )
        self.db.conn.executemany(
            "INSERT OR REPLACE INTO mention_files(path, names_key, pov) VALUES (?,?,?)",
            [(path, found.names_key, found.pov) for path, found in files],
        )
        self.db.writes += 1

    def drop_mentions(self, path: str) -> None:
        self.db.conn.execute("DELETE FROM mentions WHERE path = ?", (path,))
        self.db.conn.execute("DELETE FROM mention_counts WHERE path = ?", (path,))
        self.db.conn.execute("DELETE FROM mention_files WHERE path = ?", (path,))

    def clear_mentions(self) -> None:
        self.db.conn.execute("DELETE FROM mentions")
        self.db.conn.execute("DELETE FROM mention_counts")
        self.db.conn.execute("DELETE FROM mention_files")

    def mention_stale_keys(self, names_key: str) -> list[tuple[str, str | None]]:
        """Indexed files whose mentions were found with other entity names: (path, the key they were found
        with, None when never looked for)."""
        with self.db.lock:  # (every read under the store's lock: requests run on several threads)
            return [
                (r[0], r[1])
                for r in self.db.conn.execute(
                    "SELECT f.path, m.names_key FROM files f LEFT JOIN mention_files m ON m.path = f.path"
                    " WHERE m.names_key IS NOT ? ORDER BY f.path",
                    (names_key,),
                )
            ]

    def mention_paths(self, entity_paths: Sequence[str]) -> list[str]:
        """Files holding a mention of one of these entities."""
        with self.db.lock:  # (every read under the store's lock: requests run on several threads)
            return [
                r[0]
                for r in self.db.conn.execute(
                    "SELECT DISTINCT path FROM mentions WHERE entity IN (SELECT value FROM json_each(?))",
                    (_json(entity_paths),),
                )
            ]

    def relabel_mentions(self, paths: Sequence[str], names_key: str) -> None:
        """These files' mentions stand for `names_key` too (none of the names that changed is in them)."""
        self.db.conn.execute(
            "UPDATE mention_files SET names_key = ? WHERE path IN (SELECT value FROM json_each(?))",
            (names_key, _json(paths)),
        )

    def mention_stale_paths(self, names_key: str) -> list[str]:
        """Indexed files whose mentions were found with other entity names (or never looked for)."""
        with self.db.lock:  # (every read under the store's lock: requests run on several threads)
            return [
                r[0]
                for r in self.db.conn.execute(
                    "SELECT f.path FROM files f LEFT JOIN mention_files m ON m.path = f.path"
                    " WHERE m.names_key IS NOT ? ORDER BY f.path",
                    (names_key,),
                )
            ]

    def chapter_num_of(self, path: str) -> int | None:
        """The chapter number of an indexed file (None: no chapter, or not indexed)."""
        n = self.db.scalar("SELECT chapter_num FROM chunks WHERE path = ? LIMIT 1", (path,))
        return None if n is None else int(n)

    def mentions_unscanned(self) -> bool:
        """Some indexed file was never scanned for mentions (an index made before they were stored)."""
        return (  # (db.scalar reads under the store's lock)
            self.db.scalar(
                "SELECT 1 FROM files f WHERE NOT EXISTS (SELECT 1 FROM mention_files m WHERE m.path = f.path) LIMIT 1"
            )
            is not None
        )

    def mentions_of(self, entity_paths: Sequence[str]) -> list[StoredMention]:
        """Every stored mention of these entities with its file's book, chapter id and number, visibility."""
        rows = self.db.rows(
            "SELECT m.path, m.entity, m.line, m.col, m.end_col, m.surface, f.book_id, f.chapter_id,"
            " (SELECT c.chapter_num FROM chunks c WHERE c.path = m.path LIMIT 1) AS chapter_num,"
            " f.visibility FROM mentions m JOIN files f ON f.path = m.path"
            " WHERE m.entity IN (SELECT value FROM json_each(?)) ORDER BY m.path, m.line, m.col",
            (_json(entity_paths),),
        )
        return [StoredMention(*r) for r in rows]

    def mention_counts(self, entity_paths: Sequence[str]) -> list[MentionCount]:
        """Per file and entity: how many mentions, the first and last (one row per file, kept by write_mentions)."""
        with self.db.lock:  # (every read under the store's lock: requests run on several threads)
            return [
                MentionCount(*r)
                for r in self.db.conn.execute(
                    "SELECT k.path, k.entity, k.count, k.first_line, k.first_col, k.last_line, k.last_col, f.book_id,"
                    " f.chapter_id, (SELECT c.chapter_num FROM chunks c WHERE c.path = k.path LIMIT 1), f.visibility"
                    " FROM mention_counts k JOIN files f ON f.path = k.path"
                    " WHERE k.entity IN (SELECT value FROM json_each(?)) ORDER BY k.path, k.entity",
                    (_json(entity_paths),),
                )
            ]

    def mentions_in(self, entity_paths: Sequence[str], paths: Sequence[str]) -> list[MentionAt]:
        """The mentions of these entities in these files (a page of them)."""
        with self.db.lock:
            return [
                MentionAt(*r)
                for r in self.db.conn.execute(
                    "SELECT path, entity, line, col, end_col, surface FROM mentions"
                    " WHERE entity IN (SELECT value FROM json_each(?)) AND path IN (SELECT value FROM json_each(?))"
                    " ORDER BY path, line, col",
                    (_json(entity_paths), _json(paths)),
                )
            ]

    def chapter_files_digest(self) -> str:
        """The rows chapter_files() reads, as one text built by SQLite (one step: no row-by-row handoffs)."""
        return str(
            self.db.scalar(
                "SELECT group_concat(quote(f.path) || ',' || quote(f.book_id) || ',' || quote(f.chapter_id) || ','"
                " || quote(f.visibility) || ',' || quote(m.pov) || ',' || quote((SELECT c.chapter_num FROM chunks c"
                " WHERE c.path = f.path LIMIT 1)), char(10) ORDER BY f.path)"
                " FROM files f LEFT JOIN mention_files m ON m.path = f.path WHERE f.chapter_id IS NOT NULL"
            )
            or ""
        )

    def chapter_files(self) -> list[ChapterFile]:
        """Every file with a chapter: its path, book, chapter id and number, visibility and `pov`."""
        rows = self.db.rows(
            "SELECT f.path, f.book_id, f.chapter_id, f.visibility, m.pov,"
            " (SELECT c.chapter_num FROM chunks c WHERE c.path = f.path LIMIT 1) AS chapter_num"
            " FROM files f LEFT JOIN mention_files m ON m.path = f.path WHERE f.chapter_id IS NOT NULL"
        )
        return [ChapterFile(*r) for r in rows]

    def prose(self) -> list[ProseRow]:
        """Every chunk's path, first line (1-based), text and visibility, in file order."""
        return [
            ProseRow(*r)
            for r in self.db.rows(
                f"SELECT path, start_line, text, {VISIBILITY_READ} FROM chunks ORDER BY path, chunk_index"
            )
        ]

    def known_paths(self, entity_paths: Sequence[str], povs: Sequence[str]) -> list[str]:
        """Files that mention one of these entities or whose `pov` is one of `povs` (both sides casefolded)."""
        with self.db.lock:  # (every read under the store's lock: requests run on several threads)
            return [
                r[0]
                for r in self.db.conn.execute(
                    "SELECT DISTINCT path FROM mentions WHERE entity IN (SELECT value FROM json_each(?))"
                    " UNION SELECT path FROM mention_files"
                    " WHERE pov IN (SELECT value FROM json_each(?))",
                    (_json(entity_paths), _json([p.casefold() for p in povs])),
                )
            ]


def _json(values: Sequence[str]) -> str:
    import json

    return json.dumps(list(values))


def _counts(rows: Sequence[MentionRow]) -> dict[str, tuple[int, int, int, int, int]]:
    """A file's mentions per entity: (count, first line, first column, last line, last column), in text order."""
    out: dict[str, tuple[int, int, int, int, int]] = {}
    for entity, line, col, _end, _surface in rows:
        had = out.get(entity)
        if had is None:
            out[entity] = (1, line, col, line, col)
            continue
        n, fl, fc, ll, lc = had
        if (line, col) < (fl, fc):
            fl, fc = line, col
        if (line, col) > (ll, lc):
            ll, lc = line, col
        out[entity] = (n + 1, fl, fc, ll, lc)
    return out

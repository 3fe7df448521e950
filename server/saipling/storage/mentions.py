"""Where each entity is mentioned (`retrieval/mentions.py` finds them), as the index stores it: a file's mentions are
written with its chunks (the same transaction), with the key of the entity names they were found with and the
file's frontmatter `pov`. `MentionWrites` is mixed into `Store`, whose connection and helpers it uses."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import apsw

# (entity path, 0-based line, start column, end column, the name as written in the entity's frontmatter)
MentionRow = tuple[str, int, int, int, str]


@dataclass
class FileMentionRows:
    """What one file's text gave: its mentions, the names key they were found with, its `pov`."""

    names_key: str
    rows: Sequence[MentionRow]
    pov: str | None = None


class MentionWrites:
    conn: apsw.Connection
    _lock: threading.RLock
    _writes: int

    def index_version(self) -> tuple[int, int]:
        """Changes with every committed change to the index, by any process (what caches are keyed on)."""
        return self._any_version()  # type: ignore[attr-defined]

    def write_mentions(self, path: str, found: FileMentionRows) -> None:
        """Replace a file's mentions (the caller's transaction, or one of its own)."""
        with self._lock, self.atomic():  # type: ignore[attr-defined]
            self.conn.execute("DELETE FROM mentions WHERE path = ?", (path,))
            self.conn.executemany(
                "INSERT INTO mentions(path, entity, line, col, end_col, surface) VALUES (?,?,?,?,?,?)",
                [(path, *r) for r in found.rows],
            )
            self.conn.execute(
                "INSERT OR REPLACE INTO mention_files(path, names_key, pov) VALUES (?,?,?)",
                (path, found.names_key, found.pov),
            )
            self._writes += 1  # filters over mentions (knownBy) cached per index state see the change

    def drop_mentions(self, path: str) -> None:
        self.conn.execute("DELETE FROM mentions WHERE path = ?", (path,))
        self.conn.execute("DELETE FROM mention_files WHERE path = ?", (path,))

    def clear_mentions(self) -> None:
        self.conn.execute("DELETE FROM mentions")
        self.conn.execute("DELETE FROM mention_files")

    def mention_stale_keys(self, names_key: str) -> list[tuple[str, str | None]]:
        """Indexed files whose mentions were found with other entity names: (path, the key they were found
        with, None when never looked for)."""
        with self._lock:  # type: ignore[attr-defined]
            return self._stale_keys(names_key)

    def _stale_keys(self, names_key: str) -> list[tuple[str, str | None]]:
        return [
            (r[0], r[1])
            for r in self.conn.execute(
                "SELECT f.path, m.names_key FROM files f LEFT JOIN mention_files m ON m.path = f.path"
                " WHERE m.names_key IS NOT ? ORDER BY f.path",
                (names_key,),
            )
        ]

    def mention_paths(self, entity_paths: Sequence[str]) -> list[str]:
        """Files holding a mention of one of these entities."""
        with self._lock:  # type: ignore[attr-defined]
            return self._mention_paths(entity_paths)

    def _mention_paths(self, entity_paths: Sequence[str]) -> list[str]:
        return [
            r[0]
            for r in self.conn.execute(
                "SELECT DISTINCT path FROM mentions WHERE entity IN (SELECT value FROM json_each(?))",
                (_json(entity_paths),),
            )
        ]

    def relabel_mentions(self, paths: Sequence[str], names_key: str) -> None:
        """These files' mentions stand for `names_key` too (none of the names that changed is in them)."""
        self.conn.execute(
            "UPDATE mention_files SET names_key = ? WHERE path IN (SELECT value FROM json_each(?))",
            (names_key, _json(paths)),
        )

    def mention_stale_paths(self, names_key: str) -> list[str]:
        """Indexed files whose mentions were found with other entity names (or never looked for)."""
        with self._lock:  # type: ignore[attr-defined]
            return self._stale_paths(names_key)

    def _stale_paths(self, names_key: str) -> list[str]:
        return [
            r[0]
            for r in self.conn.execute(
                "SELECT f.path FROM files f LEFT JOIN mention_files m ON m.path = f.path"
                " WHERE m.names_key IS NOT ? ORDER BY f.path",
                (names_key,),
            )
        ]

    def chapter_num_of(self, path: str) -> int | None:
        """The chapter number of an indexed file (None: no chapter, or not indexed)."""
        n = self._scalar("SELECT chapter_num FROM chunks WHERE path = ? LIMIT 1", (path,))  # type: ignore[attr-defined]
        return None if n is None else int(n)

    def mentions_unscanned(self) -> bool:
        """Some indexed file was never scanned for mentions (an index made before they were stored)."""
        return (  # (under the store's lock, as every read: requests run on several threads)
            self._scalar(  # type: ignore[attr-defined]
                "SELECT 1 FROM files f WHERE NOT EXISTS (SELECT 1 FROM mention_files m WHERE m.path = f.path) LIMIT 1"
            )
            is not None
        )

    def mentions_of(self, entity_paths: Sequence[str]) -> list[dict[str, Any]]:
        """Every stored mention of these entities with its file's book, chapter id and number, visibility."""
        return self._dicts(  # type: ignore[attr-defined]
            "SELECT m.path, m.entity, m.line, m.col, m.end_col, m.surface, f.book_id, f.chapter_id,"
            " (SELECT c.chapter_num FROM chunks c WHERE c.path = m.path LIMIT 1) AS chapter_num,"
            " f.visibility FROM mentions m JOIN files f ON f.path = m.path"
            " WHERE m.entity IN (SELECT value FROM json_each(?)) ORDER BY m.path, m.line, m.col",
            (_json(entity_paths),),
        )

    def chapter_files(self) -> list[dict[str, Any]]:
        """Every file with a chapter: its path, book, chapter id and number, visibility and `pov`."""
        return self._dicts(  # type: ignore[attr-defined]
            "SELECT f.path, f.book_id, f.chapter_id, f.visibility, m.pov,"
            " (SELECT c.chapter_num FROM chunks c WHERE c.path = f.path LIMIT 1) AS chapter_num"
            " FROM files f LEFT JOIN mention_files m ON m.path = f.path WHERE f.chapter_id IS NOT NULL"
        )

    def prose(self) -> list[dict[str, Any]]:
        """Every chunk's path, first line (1-based), text and visibility, in file order."""
        return self._dicts(  # type: ignore[attr-defined]
            "SELECT path, start_line, text, visibility FROM chunks ORDER BY path, chunk_index"
        )

    def known_paths(self, entity_paths: Sequence[str], povs: Sequence[str]) -> list[str]:
        """Files that mention one of these entities or whose `pov` is one of `povs` (both sides casefolded)."""
        with self._lock:  # type: ignore[attr-defined]
            return self._known_paths(entity_paths, povs)

    def _known_paths(self, entity_paths: Sequence[str], povs: Sequence[str]) -> list[str]:
        return [
            r[0]
            for r in self.conn.execute(
                "SELECT DISTINCT path FROM mentions WHERE entity IN (SELECT value FROM json_each(?))"
                " UNION SELECT path FROM mention_files"
                " WHERE pov IN (SELECT value FROM json_each(?))",
                (_json(entity_paths), _json([p.casefold() for p in povs])),
            )
        ]


def _json(values: Sequence[str]) -> str:
    import json

    return json.dumps(list(values))

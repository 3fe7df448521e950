"""Entity mentions at index time: a file's mentions found with entities.py's rules (name and aliases, whole
words, case- and possessive-aware, nothing in frontmatter or code) over every entity of the index, whatever its
visibility (a request filters by what its role may see), stored with the file's chunks (store_mentions.py).
Each file records the key of the entity names it was scanned with: when an entity file adds, renames or drops a
name, `settle` scans again every file scanned with other names (read from disk), at the end of the run or
refresh that changed them. `mentions.py` answers the requests."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .entities import Entity, EntityIndex, disk_reader, is_entity
from .metadata import split_frontmatter
from .store_mentions import FileMentionRows, MentionRow
from .store_schema import FileRecord

if TYPE_CHECKING:
    from pathlib import Path

    from .store import Store

log = logging.getLogger(__name__)

SETTLE_BATCH_FILES = 256  # files re-scanned per transaction when the entity names changed


# -- index time ----------------------------------------------------------------------------------------------
def _entity(r: dict[str, Any]) -> Entity:
    return Entity(
        path=r["path"],
        name=str(r["display_name"] or json.loads(r["aliases"])[0]),
        entity_type=str(r["entity_type"] or r["file_type"] or "entity"),
        aliases=tuple(str(a) for a in json.loads(r["aliases"] or "[]")),
    )


def _record_row(rec: FileRecord) -> dict[str, Any]:
    return {
        "path": rec.path, "entity_type": rec.entity_type, "entity_name": rec.entity_name,
        "display_name": rec.display_name, "aliases": json.dumps(rec.aliases), "file_type": rec.file_type,
        "visibility": rec.visibility,
    }  # fmt: skip


@dataclass
class Finder:
    """Every entity of the index (all visibilities) and the key of their names."""

    index: EntityIndex
    key: str

    @classmethod
    def from_rows(cls, rows: Iterable[dict[str, Any]]) -> Finder:
        ents = [_entity(r) for r in rows if is_entity(r)]
        digest = hashlib.sha256(
            json.dumps(sorted([e.path, list(e.names)] for e in ents)).encode("utf-8")
        ).hexdigest()[:32]
        return cls(EntityIndex.build(ents), digest)

    @classmethod
    def for_store(cls, store: Store, records: Sequence[FileRecord] = ()) -> Finder:
        """The store's entities, with `records` (files about to be stored) in place of their stored rows."""
        rows = {r["path"]: r for r in store.entities()}
        for rec in records:
            rows[rec.path] = _record_row(rec)
        return cls.from_rows(rows.values())

    def scan(self, text: str, frontmatter: dict[str, Any] | None = None) -> FileMentionRows:
        rows: list[MentionRow] = [
            (e.path, m.line, m.start, m.end, m.surface) for m in self.index.mentions(text) for e in m.entities
        ]
        if frontmatter is None:
            frontmatter, _, _ = split_frontmatter(text)
        return FileMentionRows(self.key, rows, pov_of(frontmatter))


def pov_of(frontmatter: dict[str, Any]) -> str | None:
    pov = frontmatter.get("pov")
    if isinstance(pov, list):
        pov = pov[0] if pov else None
    return str(pov).strip().casefold() or None if pov is not None else None


def settle(store: Store, root: Path) -> int:
    """Scan again (from disk) every file whose mentions were found with other entity names; returns how many."""
    finder = Finder.for_store(store)
    stale = store.mention_stale_paths(finder.key)
    if not stale:
        return 0
    read = disk_reader(root)
    for i in range(0, len(stale), SETTLE_BATCH_FILES):
        with store.atomic():
            for path in stale[i : i + SETTLE_BATCH_FILES]:
                text = read(path)
                store.write_mentions(path, finder.scan(text or ""))
    log.debug("mentions scanned again in %d files (entity names changed)", len(stale))
    return len(stale)



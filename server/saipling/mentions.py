"""Where each entity is mentioned, computed at index time and kept with the live index: per chapter counts,
first and last appearance (file and line), chapters since last seen; and the files an entity knows (its
scenes by frontmatter `pov`, or those that mention it) for the `knownBy` filter.

A file's mentions are found with entities.py's rules (name and aliases, whole words, case- and possessive-
aware, nothing in frontmatter or code) over every entity of the index, whatever its visibility (a request
filters by what its role may see), and stored with the file's chunks. Each file records the key of the entity
names it was scanned with: when an entity file adds, renames or drops a name, `settle` scans again every file
scanned with other names (read from disk), at the end of the run or refresh that changed them.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .context_settings import load_context_settings
from .entities import Entity, EntityIndex, disk_reader, entity_index, is_entity, manuscript_key
from .errors import InvalidRequest
from .metadata import slugify, split_frontmatter
from .store_mentions import FileMentionRows, MentionRow
from .store_schema import FileRecord
from .visibility import role_levels, visible

if TYPE_CHECKING:
    from pathlib import Path

    from .project import Project
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


# -- requests ------------------------------------------------------------------------------------------------
@dataclass
class Place:
    path: str
    line: int  # 1-based
    chapter: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "chapter": self.chapter}


@dataclass
class ChapterCount:
    chapter: str
    count: int
    first: Place


@dataclass
class MentionReport:
    entity: Entity
    total: int  # mentions in chapters
    chapters: list[ChapterCount]
    first: Place | None
    last: Place | None
    chapters_since_last_seen: int | None
    chapter_total: int  # chapters in the (visible, limited) manuscript
    other_files: dict[str, int] = field(default_factory=dict)  # files outside chapters -> mentions
    mentions: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> str:
        """"first ch-02 l.14 · 37 mentions in 9 chapters · last seen ch-19 (2 chapters ago)"."""
        if self.first is None or self.last is None:
            others = sum(self.other_files.values())
            return f"no mentions in chapters ({others} in other files)" if others else "no mentions"
        plural = "s" if self.total != 1 else ""
        cplural = "s" if len(self.chapters) != 1 else ""
        out = f"first {self.first.chapter} l.{self.first.line} · {self.total} mention{plural} in "
        out += f"{len(self.chapters)} chapter{cplural} · last seen {self.last.chapter}"
        if self.chapters_since_last_seen:
            n = self.chapters_since_last_seen
            out += f" ({n} chapter{'s' if n != 1 else ''} ago)"
        return out

    def to_dict(self) -> dict[str, Any]:
        e = self.entity
        return {
            "entity": {"name": e.name, "path": e.path, "type": e.entity_type, "aliases": list(e.aliases)},
            "total": self.total,
            "summary": self.summary(),
            "chapters": [
                {"chapter": c.chapter, "count": c.count, "first": c.first.to_dict()} for c in self.chapters
            ],
            "first": self.first.to_dict() if self.first else None,
            "last": self.last.to_dict() if self.last else None,
            "chaptersSinceLastSeen": self.chapters_since_last_seen,
            "chapterTotal": self.chapter_total,
            "otherFiles": [{"path": p, "count": n} for p, n in self.other_files.items()],
            "mentions": self.mentions,
        }


def fresh(project: Project) -> None:
    """Saved edits first (the live index; each run and refresh settles the mentions it changed), then an index
    made before mentions were stored is scanned once."""
    project.refresh_dirty()
    if not project.store.readonly and project.store.mentions_unscanned():
        with project.indexer._write_lock:
            settle(project.store, project.root)


def resolve(project: Project, name: str) -> list[Entity]:
    """The visible entities called `name` (a name or alias, any case), or whose file or slug it is, else
    those with a name holding `name` as a word."""
    index = entity_index(project)
    want = " ".join(name.split()).casefold()
    found = [e for _, e in index.by_name.get(want, [])]
    if not found:
        found = [e for e in index.entities if e.path == name or slugify(e.name) == slugify(name)]
    if not found and want:  # one word of a name ("Marcus" for "Marcus Cole")
        found = [e for e in index.entities if any(want in n.casefold().split() for n in e.names)]
    return list(dict.fromkeys(found))


def _allowed(project: Project) -> Any:
    levels = role_levels(project.settings.roles, None, project.settings.default_role)
    cs = load_context_settings(project.root)
    return lambda row: visible(row.get("visibility"), levels) and cs.mode_for(row["path"]) != "exclude"


def report(
    project: Project, name: str, *, max_chapter: int | None = None, limit: int = 0, refresh: bool = True
) -> list[MentionReport]:
    """One report per entity called `name` (InvalidRequest when none is)."""
    if refresh:
        fresh(project)
    ents = resolve(project, name)
    if not ents:
        raise InvalidRequest("name", f"no entity is called {name!r}")
    allowed = _allowed(project)
    chapters = [
        r
        for r in project.store.chapter_files()
        if allowed(r) and (max_chapter is None or r["chapter_num"] is None or r["chapter_num"] <= max_chapter)
    ]
    many_books = len({r["book_id"] for r in chapters}) > 1
    order = _chapter_order(chapters, many_books)
    out = []
    for e in ents:
        rows = [
            r
            for r in project.store.mentions_of([e.path])
            if allowed(r)
            and (max_chapter is None or r["chapter_num"] is None or r["chapter_num"] <= max_chapter)
        ]
        out.append(_report(e, rows, order, many_books, limit))
    return out


def _label(row: dict[str, Any], many_books: bool) -> str:
    return f"{row['book_id']}/{row['chapter_id']}" if many_books and row["book_id"] else row["chapter_id"]


def _chapter_order(rows: list[dict[str, Any]], many_books: bool) -> list[str]:
    first: dict[str, tuple[Any, ...]] = {}
    for r in rows:
        label = _label(r, many_books)
        key = manuscript_key(r["path"], r["chapter_num"])
        if label not in first or key < first[label]:
            first[label] = key
    return sorted(first, key=lambda c: first[c])


def _report(
    e: Entity, rows: list[dict[str, Any]], order: list[str], many_books: bool, limit: int
) -> MentionReport:
    rows.sort(key=lambda r: (manuscript_key(r["path"], r["chapter_num"]), r["line"], r["col"]))
    counts: dict[str, ChapterCount] = {}
    others: dict[str, int] = {}
    for r in rows:
        if r["chapter_id"] is None:
            others[r["path"]] = others.get(r["path"], 0) + 1
            continue
        label = _label(r, many_books)
        if label not in counts:
            counts[label] = ChapterCount(label, 0, Place(r["path"], r["line"] + 1, label))
        counts[label].count += 1
    rank = {c: i for i, c in enumerate(order)}
    chs = sorted(counts.values(), key=lambda c: rank.get(c.chapter, len(rank)))
    in_chapters = [r for r in rows if r["chapter_id"] is not None]
    first = chs[0].first if chs else None
    last = None
    since = None
    if chs:
        last_label = max(chs, key=lambda c: rank.get(c.chapter, -1)).chapter
        lr = [r for r in in_chapters if _label(r, many_books) == last_label][-1]
        last = Place(lr["path"], lr["line"] + 1, last_label)
        since = len(order) - 1 - rank[last_label] if last_label in rank else 0
    listed = rows if limit <= 0 else rows[:limit]
    mentions = [
        {"path": r["path"], "line": r["line"] + 1, "column": r["col"], "endColumn": r["end_col"],
         "surface": r["surface"], "chapter": _label(r, many_books) if r["chapter_id"] else None}
        for r in listed
    ]  # fmt: skip
    return MentionReport(
        e, len(in_chapters), chs, first, last, since, len(order), others, mentions
    )


def known_paths(project: Project, name: str) -> list[str]:
    """The files the entity `name` knows: those that mention it and scenes whose `pov` is it (any of its
    names); InvalidRequest when no entity is called `name`. Unknown names fail closed: nothing is known."""
    ents = resolve(project, name)
    if not ents:
        raise InvalidRequest("knownBy", f"no entity is called {name!r}")
    povs = {n.strip().casefold() for e in ents for n in e.names} | {slugify(e.name) for e in ents}
    return project.store.known_paths([e.path for e in ents], sorted(povs))

"""Where each entity is mentioned, computed at index time (indexing/mention_scan.py) and kept with the live index: per
chapter counts, first and last appearance (file and line), chapters since last seen; and the files an entity
knows (its scenes by frontmatter `pov`, or those that mention it) for the `knownBy` filter."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..config.visibility import role_levels, visible
from ..errors import InvalidRequest
from ..files.context_settings import load_context_settings
from ..files.metadata import slugify
from ..storage.base import ChapterFile, ChunkFilter, MentionAt, MentionCount
from .entities import Entity, EntityProject, entity_index, manuscript_key

log = logging.getLogger(__name__)


class Project(EntityProject, Protocol):
    """What these requests use of a project (in practice a `Project`)."""

    def refresh(self, paths: Any) -> Any: ...


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
        """ "first ch-02 l.14 · 37 mentions in 9 chapters · last seen ch-19 (2 chapters ago)"."""
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
            "chapters": [{"chapter": c.chapter, "count": c.count, "first": c.first.to_dict()} for c in self.chapters],
            "first": self.first.to_dict() if self.first else None,
            "last": self.last.to_dict() if self.last else None,
            "chaptersSinceLastSeen": self.chapters_since_last_seen,
            "chapterTotal": self.chapter_total,
            "otherFiles": [{"path": p, "count": n} for p, n in self.other_files.items()],
            "mentions": self.mentions,
        }


def fresh(project: Project) -> None:
    """Saved edits first (the live index; each run and refresh settles the mentions it changed), then an index
    made before mentions were stored is scanned once (checked once per index version: a scan over every file)."""
    project.refresh_dirty()
    store = project.store
    version = (id(store), store.path, store.index_version())
    if _all_scanned.get(id(project)) == version:
        return
    if not store.readonly and store.mentions_unscanned():
        project.refresh([])  # (every refresh settles the mentions: indexing.mention_scan.settle)
        version = (id(store), store.path, store.index_version())
    _all_scanned[id(project)] = version


_all_scanned: dict[int, tuple[Any, ...]] = {}  # project -> the index version at which no file was left unscanned


def resolve(project: Project, name: str, role: str | None = None) -> list[Entity]:
    """The entities `role` may see (None: the `defaultRole`) called `name` (a name or alias, any case), or whose
    file or slug it is, else those with a name holding `name` as a word."""
    index = entity_index(project, role)
    want = " ".join(name.split()).casefold()
    found = [e for _, e in index.by_name.get(want, [])]
    if not found:
        found = [e for e in index.entities if e.path == name or slugify(e.name) == slugify(name)]
    if not found and want:  # one word of a name ("Marcus" for "Marcus Cole")
        found = [e for e in index.entities if any(want in n.casefold().split() for n in e.names)]
    return list(dict.fromkeys(found))


class Allowed:
    """Whether a role may see a file (its visibility level, `.context_settings.json` exclusions), asked once per
    file and visibility."""

    def __init__(self, project: Project, role: str | None) -> None:
        self.levels = role_levels(project.settings.roles, role, project.settings.default_role)
        self.cs = load_context_settings(project.root)
        self.seen: dict[tuple[str, str | None], bool] = {}

    def file(self, path: str, visibility: str | None) -> bool:
        key = (path, visibility)
        if key not in self.seen:
            self.seen[key] = visible(visibility, self.levels) and self.cs.mode_for(path) != "exclude"
        return self.seen[key]

    def __call__(self, row: ChapterFile) -> bool:
        return self.file(row.path, row.visibility)


def _allowed(project: Project, role: str | None = None) -> Allowed:
    """The role's check, kept while its levels and the exclusions file stay the same (its answers are per file)."""
    fresh_check = Allowed(project, role)
    excludes = fresh_check.cs.has("exclude")  # (without exclusions the file's settings play no part)
    key = (id(project), role, tuple(fresh_check.levels), id(fresh_check.cs) if excludes else None)
    kept = _allowed_kept.get(key)
    if kept is not None and (kept.cs is fresh_check.cs or not excludes):
        return kept
    if len(_allowed_kept) >= ORDERS_KEPT:
        _allowed_kept.pop(next(iter(_allowed_kept)), None)
    _allowed_kept[key] = fresh_check
    return fresh_check


_allowed_kept: dict[tuple[Any, ...], Allowed] = {}


def report(
    project: Project,
    name: str,
    *,
    max_chapter: int | None = None,
    limit: int = 0,
    role: str | None = None,
    refresh: bool = True,
) -> list[MentionReport]:
    """One report per entity called `name` (InvalidRequest when none is); the same question on an unchanged index
    (a hover over the same name again, an agent asking twice) is answered from the last reports."""
    if refresh:
        fresh(project)
    cs = load_context_settings(project.root)
    store = project.store
    key = (
        id(project),
        id(store),
        store.path,
        store.index_version(),
        id(cs) if cs.has("exclude") else None,
        name,
        max_chapter,
        limit,
        role,
    )
    if (hit := _reports.get(key)) is not None:
        return list(hit)
    found = _reports_of(project, name, max_chapter, limit, role)
    if len(_reports) >= REPORTS_KEPT:
        _reports.pop(next(iter(_reports)), None)  # (the oldest: dicts keep insertion order)
    _reports[key] = tuple(found)
    return found


REPORTS_KEPT = 64
_reports: dict[tuple[Any, ...], tuple[MentionReport, ...]] = {}


def clear_reports() -> None:
    """Forget the reports kept (benchmarks time the work itself)."""
    _reports.clear()


def _reports_of(
    project: Project, name: str, max_chapter: int | None, limit: int, role: str | None
) -> list[MentionReport]:
    ents = resolve(project, name, role)
    if not ents:
        raise InvalidRequest("name", f"no entity is called {name!r}")
    allowed = _allowed(project, role)
    chapters = _chapters(project, allowed, role, max_chapter)
    out = []
    for e in ents:
        files = [
            c
            for c in project.store.mention_counts([e.path])
            if allowed.file(c.path, c.visibility)
            and (max_chapter is None or c.chapter_num is None or c.chapter_num <= max_chapter)
        ]
        out.append(_report(project, e, files, chapters, limit))
    return out


@dataclass
class ChapterOrder:
    """The chapters a role may see in manuscript order, with what each report needs of them computed once."""

    order: list[str]
    many_books: bool  # labels are "book/chapter"
    rank: dict[str, int]  # label -> its place in `order`
    after: dict[str, int]  # label -> chapters of the same book after it


@dataclass
class _ChapterRows:
    """A project's chapter files as last read (per index version), and the orders computed from them per role,
    spoiler horizon and exclusions: an index change that leaves every chapter file's path, book, chapter,
    visibility and pov as they were (an edit of a chapter's text) keeps the orders."""

    version: tuple[Any, ...]
    digest: str  # MentionStore.chapter_files_digest() of `rows`
    rows: list[Any]
    orders: dict[tuple[Any, ...], ChapterOrder]


ORDERS_KEPT = 64
_order_cache: dict[int, _ChapterRows] = {}


def _chapters(project: Project, allowed: Allowed, role: str | None, max_chapter: int | None) -> ChapterOrder:
    """The chapters the role may see in manuscript order (and whether there are several books), computed again
    only when the chapter files changed."""
    store = project.store
    version = (id(store), store.path, store.index_version())
    cached = _order_cache.get(id(project))
    if cached is None or cached.version != version:
        digest = store.chapter_files_digest()  # (one step in the store; the rows only when they changed)
        if cached is not None and cached.digest == digest:
            cached = _ChapterRows(version, digest, cached.rows, cached.orders)
        else:
            cached = _ChapterRows(version, digest, store.chapter_files(), {})
        _order_cache[id(project)] = cached
    cs = allowed.cs
    key = (role, tuple(allowed.levels), max_chapter, id(cs) if cs.has("exclude") else None)
    if (hit := cached.orders.get(key)) is not None:
        return hit
    chapters = [
        r
        for r in cached.rows
        if allowed(r) and (max_chapter is None or r.chapter_num is None or r.chapter_num <= max_chapter)
    ]
    many_books = len({r.book_id for r in chapters}) > 1
    order = _chapter_order(chapters, many_books)
    seen: dict[str, int] = {}
    after: dict[str, int] = {}
    for label in reversed(order):
        book = _book_of(label)
        after[label] = seen.get(book, 0)
        seen[book] = after[label] + 1
    found = ChapterOrder(order, many_books, {c: i for i, c in enumerate(order)}, after)
    if len(cached.orders) >= ORDERS_KEPT:
        cached.orders.pop(next(iter(cached.orders)), None)
    cached.orders[key] = found
    return found


def _key(path: str, chapter_num: int | None) -> tuple[Any, ...]:
    """entities.manuscript_key, kept per path (a path's key never changes; computing it splits the path)."""
    k = (path, chapter_num)
    found = _keys.get(k)
    if found is None:
        if len(_keys) >= KEYS_KEPT:
            _keys.clear()
        found = _keys[k] = manuscript_key(path, chapter_num)
    return found


KEYS_KEPT = 200_000
_keys: dict[tuple[str, int | None], tuple[Any, ...]] = {}


def _label(row: ChapterFile, many_books: bool) -> str:
    return _label_of(row.book_id, row.chapter_id, many_books)


def _label_of(book_id: str | None, chapter_id: str, many_books: bool) -> str:
    return f"{book_id}/{chapter_id}" if many_books and book_id else chapter_id


def _book_of(label: str) -> str:
    return label.rsplit("/", 1)[0] if "/" in label else ""


def _chapter_order(rows: list[ChapterFile], many_books: bool) -> list[str]:
    first: dict[str, tuple[Any, ...]] = {}
    for r in rows:
        label = _label(r, many_books)
        key = _key(r.path, r.chapter_num)
        if label not in first or key < first[label]:
            first[label] = key
    return sorted(first, key=lambda c: first[c])


def _report(
    project: Project, e: Entity, files: list[MentionCount], chapters: ChapterOrder, limit: int
) -> MentionReport:
    """The report from one row per file (the counts kept at index time): the work is proportional to the files that
    mention the entity, plus the `limit` mentions listed, whatever the corpus."""
    many_books, rank = chapters.many_books, chapters.rank
    keys = {c.path: _key(c.path, c.chapter_num) for c in files}
    files.sort(key=lambda c: keys[c.path])  # (stable: files of equal keys stay in path order)
    counts: dict[str, ChapterCount] = {}
    last_files: dict[str, MentionCount] = {}  # chapter -> the file of its last mention
    labels: dict[str, str] = {}  # path -> its chapter's label
    others: dict[str, int] = {}
    in_chapters = 0
    for c in files:
        if c.chapter_id is None:
            others[c.path] = others.get(c.path, 0) + c.count
            continue
        label = labels[c.path] = _label_of(c.book_id, c.chapter_id, many_books)
        if label not in counts:
            counts[label] = ChapterCount(label, 0, Place(c.path, c.first_line + 1, label))
        counts[label].count += c.count
        last_files[label] = c
        in_chapters += c.count
    chs = sorted(counts.values(), key=lambda c: rank.get(c.chapter, len(rank)))
    first = chs[0].first if chs else None
    last = None
    since = None
    if chs:
        last_label = max(chs, key=lambda c: rank.get(c.chapter, -1)).chapter
        lf = last_files[last_label]
        last = Place(lf.path, lf.last_line + 1, last_label)
        since = chapters.after.get(last_label, 0)  # chapters of the same book after it
    chapter_ids = {c.path: c.chapter_id for c in files}
    mentions = [
        {
            "path": m.path,
            "line": m.line + 1,
            "column": m.col,
            "endColumn": m.end_col,
            "surface": m.surface,
            "chapter": labels.get(m.path) if chapter_ids.get(m.path) else None,
        }
        for m in _listed(project, e, files, keys, limit)
    ]
    return MentionReport(e, in_chapters, chs, first, last, since, len(chapters.order), others, mentions)


def _listed(
    project: Project, e: Entity, files: list[MentionCount], keys: dict[str, tuple[Any, ...]], limit: int
) -> list[MentionAt]:
    """The first `limit` mentions in manuscript order, read from the fewest files that hold them."""
    if limit <= 0:
        return []
    paths: list[str] = []
    held = 0
    for c in files:  # (in manuscript order)
        if held >= limit:
            break
        paths.append(c.path)
        held += c.count
    if not paths:
        return []
    found = project.store.mentions_in([e.path], paths)
    found.sort(key=lambda m: (keys[m.path], m.line, m.col))
    return found[:limit]


def summary_for(project: Project, entity: Entity, shown_in: str | None = None, *, horizon: int | None = None) -> str:
    """The hover card's line ("first ch-02 l.14 · 37 mentions in 9 chapters · last seen ch-19"), as of chapter
    `horizon` (else the chapter of the file it is shown in, `shown_in`: nothing after it, the spoiler horizon);
    "" when it cannot be had (the hover still shows the card)."""
    try:
        if horizon is None and shown_in:
            horizon = project.store.chapter_num_of(shown_in)
        found = [
            r for r in report(project, entity.path, max_chapter=horizon, refresh=False) if r.entity.path == entity.path
        ]
    except Exception:  # noqa: BLE001 - a hover must never fail for its mentions line
        log.debug("no mentions line for %s", entity.path, exc_info=True)
        return ""
    if not found:
        return ""
    return found[0].summary() + (f" (as of chapter {horizon})" if horizon is not None else "")


def request(project: Project, params: dict[str, Any]) -> dict[str, Any]:
    """`saipling/mentions` (retrieval.requests.MentionsParams): one report per entity called `name`."""
    from .requests import MentionsParams, parse

    req = parse(MentionsParams, params)
    limit = 200 if req.limit is None else req.limit
    found = report(project, req.name, max_chapter=req.max_chapter, limit=limit, role=req.role)
    return {"entities": [r.to_dict() for r in found]}


def resolve_known_by(project: EntityProject, flt: ChunkFilter, role: str | None = None) -> None:
    """Fill the filter's `knownBy` condition (storage.base.ChunkFilter.known_entities) with the entities `role`
    may see; InvalidRequest naming `knownBy` when none is called so (fail closed: nothing is searched)."""
    assert flt.known_by is not None
    ents = resolve(project, flt.known_by, role)
    if not ents:
        raise InvalidRequest("knownBy", f"no entity is called {flt.known_by!r}")
    flt.known_entities = [e.path for e in ents]
    flt.known_povs = sorted(_povs(ents))


def _povs(ents: list[Entity]) -> set[str]:
    return {n.strip().casefold() for e in ents for n in e.names} | {slugify(e.name) for e in ents}


def known_paths(project: Project, name: str, role: str | None = None) -> list[str]:
    """The files the entity `name` knows: those that mention it and scenes whose `pov` is it (any of its
    names); InvalidRequest when no entity `role` may see is called `name`. Unknown names fail closed."""
    ents = resolve(project, name, role)
    if not ents:
        raise InvalidRequest("knownBy", f"no entity is called {name!r}")
    return project.store.known_paths([e.path for e in ents], sorted(_povs(ents)))

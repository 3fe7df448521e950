"""Entity mentions at index time: a file's mentions found with retrieval/entities.py's rules (name and aliases, whole
words, case- and possessive-aware, nothing in frontmatter, code, HTML comments or link definitions) over every
entity of the index, whatever its visibility (a request filters by what its role may see), stored with the file's
chunks (storage/mentions.py). Each file records the key of the entity names it was scanned with: when an entity file
adds, renames or drops a name, `settle` scans again every file scanned with other names (read from disk), at the end
of the run or refresh that changed them. `retrieval/mentions.py` answers the requests."""

from __future__ import annotations

import bisect
import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..files.metadata import split_frontmatter
from ..retrieval.entities import MIN_NAME_CHARS, Entity, EntityIndex, disk_reader, is_entity
from ..storage.base import EntityRow, FileMentionRows, FileRecord, KeywordQuery, MentionRow

if TYPE_CHECKING:
    from pathlib import Path

    from ..storage.base import IndexStore

log = logging.getLogger(__name__)

SETTLE_BATCH_FILES = 256  # files re-scanned per transaction when the entity names changed
# A run's entity rows are read again at least this often (RunFinders): another process's refresh that stores an
# entity file during a run (an editor's save) is seen within this time, not only at the settle that ends the text
# phase (its mentions in the files stored meanwhile were missing until then). One read of the entity rows: ~10 ms of
# CPU at 20,514 files, so ~0.2% of that text phase.
REREAD_SECONDS = 5.0


# -- index time ----------------------------------------------------------------------------------------------
@dataclass
class Finder:
    """Every entity of the index (all visibilities) and the key of their names."""

    index: EntityIndex
    key: str
    every_name: set[str] = field(default_factory=set)  # (as written) the scan looks only at lines holding one

    @property
    def names(self) -> dict[str, list[str]]:
        """Entity path -> its names (what the key is made of)."""
        return {e.path: list(e.names) for e in self.index.entities}

    @classmethod
    def from_rows(cls, rows: Iterable[EntityRow]) -> Finder:
        ents = [Entity.of_row(r) for r in rows if is_entity(r)]
        digest = hashlib.sha256(json.dumps(sorted([e.path, list(e.names)] for e in ents)).encode("utf-8")).hexdigest()[
            :32
        ]
        index = EntityIndex.build(ents)
        return cls(index, digest, {s for pairs in index.by_name.values() for s, _ in pairs})

    @classmethod
    def for_store(cls, store: IndexStore, records: Sequence[FileRecord] = ()) -> Finder:
        """The store's entities, with `records` (files about to be stored) in place of their stored rows."""
        rows = {r.path: r for r in store.entities()}
        for rec in records:
            rows[rec.path] = EntityRow.of_record(rec)
        return cls.from_rows(rows.values())

    def scan(self, text: str, frontmatter: dict[str, Any] | None = None) -> FileMentionRows:
        rows: list[MentionRow] = [
            (e.path, m.line, m.start, m.end, m.surface)
            for m in self.index.mentions(text, only=self.every_name)  # (4x faster than every line: the corpus)
            for e in m.entities
        ]
        if rows and ("<!--" in text or "]:" in text):
            rows = _indexed_only(text, rows)
        if frontmatter is None:
            frontmatter, _, _ = split_frontmatter(text)
        return FileMentionRows(self.key, rows, pov_of(frontmatter))

    def scan_file(self, text_of: Callable[[], str], frontmatter: dict[str, Any]) -> FileMentionRows:
        """`scan` of a file whose frontmatter is known: its text (`text_of`: decoded again) only when the index has an
        entity name to look for (a first index of prose without entities decoded every file a second time for none:
        ~0.9 s at 5,126 files, benchmarks row S22)."""
        if not self.every_name:
            return FileMentionRows(self.key, [], pov_of(frontmatter))
        return self.scan(text_of(), frontmatter)


ADDED_REBUILD_MIN = 64  # entities below which a run's finder is built again for every one added (RunFinders)


class RunFinders:
    """The finders of one run's batches: the store's entity rows read once (then kept up to date with what the run
    stores), and the finder built again only when the entities change. `Finder.for_store` per batch read the
    files table and built the entity index each time (20,000 files: ~6 ms a batch; the 13th Age vault's 994
    entities: 60 ms). Only the rows that are entities are kept (`is_entity`), and a batch whose files are none and
    were none reuses the finder as it is: a copy of every stored file's row checked again per batch made the run
    quadratic in its files (20,514 files in ~2,000 batches: 108 s of CPU, benchmarks/README.md S18).
    `generation` counts the writes of others in this process (a refresh between two batches): the rows are read
    again after one, after `forget` (a file deleted by the run), and every REREAD_SECONDS (another process's
    refresh: its commits are not counted here); rows read again that equal the ones kept change nothing."""

    def __init__(self, store: IndexStore) -> None:
        self.store = store
        self.rows: dict[str, EntityRow] | None = None  # path -> row, of the files that are entities
        self.generation = -1
        self.version = 0  # changes with `rows`
        self._key: tuple[EntityRow, ...] | None = None
        self._finder: Finder | None = None
        self._plain = -1  # the version `_finder` is of when no file of the batch changed an entity (-1: none)
        self._read_at = 0.0  # time.monotonic() of the last read of the rows

    def finder(self, records: Sequence[FileRecord], generation: int) -> Finder:
        """What `Finder.for_store(store, records)` gives."""
        now = time.monotonic()
        if self.rows is None or generation != self.generation or now - self._read_at >= REREAD_SECONDS:
            rows = {r.path: r for r in self.store.entities() if is_entity(r)}
            if rows != self.rows:
                self.rows = rows
                self.version += 1
            self.generation, self._read_at = generation, now
        overlay: dict[str, EntityRow | None] = {}  # the batch's files that are entities, or were (None)
        for rec in records:
            row = EntityRow.of_record(rec)
            if is_entity(row):
                overlay[rec.path] = row
            elif rec.path in self.rows:
                overlay[rec.path] = None
        if not overlay and self._finder is not None and self._plain == self.version:
            return self._finder
        rows = dict(self.rows)
        for path, ent in overlay.items():
            if ent is None:
                rows.pop(path, None)
            else:
                rows[path] = ent
        key = tuple(sorted(rows.values(), key=lambda r: r.path))
        if self._finder is None or (key != self._key and not self._only_a_few_added(key)):
            self._key, self._finder = key, Finder.from_rows(key)
        self._plain = -1 if overlay else self.version
        return self._finder

    def _only_a_few_added(self, key: tuple[EntityRow, ...]) -> bool:
        """`key` is the kept finder's entities plus new ones, fewer than a quarter of them (and the kept finder has
        at least ADDED_REBUILD_MIN): the finder is kept, its key (stored with each file's mentions) naming what it
        looked for. A first index of many entity pages built it again for every batch holding one, over every
        entity so far (8,000 pages: 16 s of 20); the files it scans miss only the new names, and `settle`, after
        the run, scans again every file whose key is not the final one, as it did already for all of them."""
        old = self._key or ()
        if len(old) < ADDED_REBUILD_MIN or len(key) >= len(old) * 1.25:
            return False
        kept = {r.path: r for r in old}
        now = {r.path: r for r in key}
        return all(now.get(path) == row for path, row in kept.items())

    def stored(self, records: Sequence[FileRecord]) -> None:
        if self.rows is None:
            return
        for rec in records:
            row = EntityRow.of_record(rec)
            if is_entity(row):
                if self.rows.get(rec.path) != row:
                    self.rows[rec.path] = row
                    self.version += 1
            elif self.rows.pop(rec.path, None) is not None:
                self.version += 1

    def forget(self) -> None:
        self.rows = None


def _indexed_only(text: str, rows: list[MentionRow]) -> list[MentionRow]:
    """The mentions in what the index holds of the file (markdown.blocks.indexed_lines): none in an HTML comment
    (an author's note is no appearance, and no scene an entity knows: `knownBy`) nor a link definition."""
    from ..markdown.blocks import parse_blocks
    from ..markdown.spans import comment_spans

    doc = parse_blocks(text)
    lines = text.split("\n")
    out = []
    spans: dict[int, tuple[list[int], list[int]]] = {}  # line -> its comments' starts and ends, found once
    for row in rows:
        n = row[1]  # 0-based
        if n + 1 in doc.noise_lines:
            continue
        if n + 1 not in doc.code_lines:
            if n not in spans:  # (a line's text is searched once, not once a mention)
                line = lines[n] if n < len(lines) else ""
                found = list(comment_spans(line)) if "<!--" in line else []
                spans[n] = ([a for a, _ in found], [b for _, b in found])
            starts, ends = spans[n]
            i = bisect.bisect_right(starts, row[2]) - 1
            if i >= 0 and row[2] < ends[i]:
                continue
        out.append(row)
    return out


def pov_of(frontmatter: dict[str, Any]) -> str | None:
    pov = frontmatter.get("pov")
    if isinstance(pov, list):
        pov = pov[0] if pov else None
    return str(pov).strip().casefold() or None if pov is not None else None


NAMES_META = "mention_names"  # {"key": the last settled names key, "names": {entity path: [names]}}


def settle(store: IndexStore, root: Path) -> int:
    """Bring every file's mentions to the current entity names; returns how many files were scanned again.

    Files scanned with the names last settled are scanned again only when they may hold a changed entity's
    mention: they held one of its mentions, or the keyword index finds one of its new names there (FTS5 phrase
    queries: case-insensitive, a superset); the others only take the new key. Files scanned with older or
    unknown names are all scanned again (from disk)."""
    finder = Finder.for_store(store)
    stale_keys = store.mention_stale_keys(finder.key)
    if not stale_keys:
        return 0
    try:
        prev = json.loads(store.get_meta(NAMES_META) or "{}")
    except ValueError:
        prev = {}
    stale = [p for p, k in stale_keys if not prev or k != prev.get("key")]
    settled = [p for p, k in stale_keys if prev and k == prev.get("key")]
    if settled:
        old, new = prev.get("names") or {}, finder.names
        changed = sorted(e for e in set(old) | set(new) if old.get(e) != new.get(e))
        maybe = set(store.mention_paths(changed))
        match = KeywordQuery.phrases(n for e in changed for n in new.get(e, []) if len(n.strip()) >= MIN_NAME_CHARS)
        if match is not None:
            maybe |= {p for p, _ in store.keyword_paths(match)}
        stale += [p for p in settled if p in maybe]
        with store.atomic():
            store.relabel_mentions([p for p in settled if p not in maybe], finder.key)
    read = disk_reader(root)
    for i in range(0, len(stale), SETTLE_BATCH_FILES):
        with store.atomic():
            for path in stale[i : i + SETTLE_BATCH_FILES]:
                text = read(path)
                store.write_mentions(path, finder.scan(text or ""))
    with store.atomic():
        store.set_meta(NAMES_META, json.dumps({"key": finder.key, "names": finder.names}))
    log.debug("mentions scanned again in %d files (entity names changed)", len(stale))
    return len(stale)

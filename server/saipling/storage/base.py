"""The storage interface: what the engine (indexing/, live/, retrieval/, project.py) may ask of an index, whatever
engine holds it. Every backend implements `IndexStore` (today `storage/sqlite/`, the SQLite file under
`.saipling/`; `storage/postgres/` on the `pg` branch); `storage.open_store(location, ...)` picks one (a path: SQLite;
`postgresql://...`: `storage.postgres`, imported lazily). The engine imports this module only, never a backend.

The interface is split by concept, as basic-memory separates its search repository from its vector index:

- `ChunkStore`      files and their chunks: the writes of an index run, and the reads of search and context;
- `KeywordIndex`    keyword (BM25-like) search over chunks and whole files, and term document frequencies;
- `VectorIndex`     the chunk vectors (exact or approximate cosine KNN) and what is left to embed;
- `EmbeddingCache`  vectors by (model, content hash), kept across renames, edits and `clear`;
- `MentionStore`    where each entity is mentioned, written with a file's chunks;
- `IndexLog`        meta keys, the embedding and search logs, counts, the index's change version;
- `WriterLock`      one writer per index across processes, and what the current writer is doing;
- `IndexStore`      all of the above plus opening facts (`path`, `readonly`, ...), `atomic` and `close`.

The data it speaks is defined here, backend-neutral: `KeywordQuery` (words and phrases, never a query syntax),
`ChunkFilter` (plain data: each backend compiles it to its own condition), the records written (`FileRecord`,
`ChunkRow`, `FileMentionRows`) and read: dataclasses read by attribute, never dicts or mappings (`StoredFile`,
`StoredChunk`, `FileState`; the frozen rows of the listing reads: `EntityRow`, `HeadingRow`, `ProseRow`,
`StoredMention`, `ChapterFile`, `PendingChunk`, `SearchLogEntry`, `StoreStats`). The edges (CLI --json, MCP, LSP)
shape their own JSON from them. `WriterLock.other_run` stays a dict: it is the JSON record another process
published (storage/run_record.py), whose fields depend on that process's version.

Conventions every backend keeps (the conformance suite, tests/test_storage_conformance.py, checks them):

- **Paths** are project-relative, `/`-separated, as the indexer gives them; compared exactly (byte for byte),
  except where `ChunkFilter.path_prefix` says otherwise.
- **Chunk ids** are positive integers unique within one index at any moment, stable while a chunk's text and
  heading path stay the same (`replace_file` keeps them). An id freed by a deleted chunk may be given to a later
  one (SQLite reuses rowids): (id, content hash) is what names a chunk's text across time (see `set_vectors`).
- **Scores are higher-is-better everywhere**: keyword scores are the negated BM25 of the backend's ranking (SQLite
  returns -bm25(); a backend with another ranking function returns a score whose order matches its relevance and
  whose scale is BM25-like, since retrieval z-normalises it over the candidates), vector scores are cosine
  similarities in [-1, 1].
- **Ordering**: "best first" lists are by score descending; the order among equal scores is unspecified.
- **Filters fail closed**: `ChunkFilter.visibility == []` passes nothing; `known_by` set with `known_entities`
  None passes nothing. A filter that passes nothing gives empty results, never an error.
- **Errors**: a backend never lets its driver's exceptions out. What it raises is an `OSError` from a file it was
  given, a `ValueError`/`TypeError` for a wrong argument (or the `StorageError` its database raised for it: a
  vector of the wrong size), or one of these (`saipling.errors`):
    `StorageError`        the base: any other failure of the backend (the driver's exception as `__cause__`);
    `StorageReadOnly`     the index cannot be written here (read-only file or mount, permission, a read-only
                          transaction or role): reads still work;
    `StorageFull`         no room (SQLITE_FULL, ENOSPC, Postgres 53100 disk_full, 53200 out_of_memory is NOT this);
    `StorageBusy`         another writer held a lock past the backend's wait (SQLITE_BUSY, Postgres 55P03);
    `StorageUnavailable`  the store was closed or cannot be reached (a closed connection, a server that refuses or
                          drops the connection): retrying later may work;
    `IndexCorrupted`      the stored data is unreadable (SQLITE_CORRUPT/NOTADB; a schema newer than this saipling);
    `IndexPathUnsafe`     (file backends) a link where the index writes;
    `IndexBusy`           (`WriterLock`) another process holds the writer lock.
  Each mapped error keeps the driver's error as `__cause__` and, where the OS gave one, its errno as
  `system_errno`. `StorageError` and its subclasses are `SaiplingError`s: the edges report them as messages.
- **Threads**: one store object may be used from several threads at once (the language server's request threads
  and its index run); each method is atomic with respect to the others on the same object.
- **Readers never wait for the writer**: searches run while a run writes (SQLite WAL; Postgres MVCC).

Opening (`storage.open_store`, storage/__init__.py): `open_store(location, *, workspace=None, readonly=False,
verify=True, root=None, create=True, warnings=None, settings=None, **options)`. `location` is a path (SQLite: the
index file; with `root`, a project's index: storage/sqlite/opening.py) or a `postgresql://` URL: then it calls
`saipling.storage.postgres.open_store(url, workspace=..., readonly=..., **options)`, which returns an `IndexStore`
for one workspace (the project's key: many projects share one database). `workspace` defaults to the project
root's absolute path as text (`root`), SQLite ignores it. `IndexStore.path` of a server store must not hold the
password. A backend that cannot be reached raises StorageUnavailable; a schema newer than it knows,
IndexCorrupted. `storage.disk_full_advice(root, store.path, settings)` says what to do when a write ran out of room.

Changes after the interface was first published (09:25, for the `pg` branch) are additive and listed here:
- 09:27 `WriterLock`: the docstring says what SQLite always did and tests/test_storage_conformance.py checks: the lock
  is not re-entrant, a second `writer_lock` in the same process (another thread) waits or raises IndexBusy.
- 12:00 (branch `rows`) rows are dataclasses: `entities`, `headings`, `prose`, `mentions_of`, `chapter_files`,
  `search_log`, `chunks_missing_vectors` and `stats` return the frozen rows above instead of dicts (same fields;
  `stats` in snake_case, `EntityRow.aliases` a tuple instead of JSON text); `StoredFile` and `StoredChunk` are no
  longer mappings (`row["text"]` is `row.text`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

if TYPE_CHECKING:
    import threading

    from ..indexing.records import IndexProgress
    from ..lazy import np


# -- keyword queries -------------------------------------------------------------------------------------------
class KeywordTerm(NamedTuple):
    """One alternative of a keyword query: its words in order (one word, or a phrase that matches only when the
    words are adjacent and in this order, after the backend's tokenising: case and accents folded, words stemmed
    as `markdown.terms.match_key` does), and `prefix`: the last word also matches as a prefix of an indexed token
    (used for CJK runs, which the tokenizer keeps as one token)."""

    words: tuple[str, ...]
    prefix: bool = False


@dataclass(frozen=True)
class KeywordQuery:
    """An OR of terms: a chunk (or file) matches when it holds at least one term. Built from user text by
    `markdown.terms.keyword_terms` (the words, quoted phrases and identifier parts of a query: what `fts_query`
    produced as an FTS5 string before) or `KeywordQuery.phrases`. Never empty; order of terms does not change
    results (it is kept so a backend may render the same text every time, for its caches)."""

    terms: tuple[KeywordTerm, ...]

    def __post_init__(self) -> None:
        if not self.terms or any(not t.words or any(not w or w.isspace() for w in t.words) for t in self.terms):
            raise ValueError("a keyword query needs at least one term, and each term at least one word")

    @classmethod
    def of(cls, terms: Iterable[tuple[Sequence[str], bool] | KeywordTerm]) -> KeywordQuery | None:
        """A query from (words, prefix) pairs, duplicates dropped (first kept); None when there is none."""
        out = [KeywordTerm(tuple(w), bool(p)) for w, p in terms if w]
        return cls(tuple(dict.fromkeys(out))) if out else None

    @classmethod
    def parse(cls, text: str) -> KeywordQuery | None:
        """The keyword query for raw user text (markdown.terms.keyword_terms); None when it has no word."""
        from ..markdown.terms import keyword_terms

        return cls.of(keyword_terms(text))

    @classmethod
    def phrases(cls, names: Iterable[str]) -> KeywordQuery | None:
        """A query matching any of `names` as a phrase (their `\\w+` words in order); None when none has a word."""
        import re

        return cls.of((tuple(re.findall(r"\w+", n)), False) for n in names)


# -- filters ---------------------------------------------------------------------------------------------------
def book_keys(book: str) -> list[str]:
    """What a book filter matches (lowercased book ids): the value itself, and the id a frontmatter `book:` of
    that title gets (files.metadata.slugify)."""
    from ..files.metadata import slugify

    return [book.lower(), slugify(book)]


@dataclass
class ChunkFilter:
    """Which chunks a search may see, applied before ranking (a KNN or keyword search ranks only passing chunks;
    `limit` counts passing chunks). Plain data: each backend compiles it (SQLite: storage/sqlite/filters.py).
    Every condition set must hold (AND); an unset condition (None, empty list, the default) holds for every chunk.
    Compared against the chunk's own columns (copied from its file when written):

    - `entity_types`: the chunk's entity_type, lowercased with Python's `str.lower` on both sides, is one of them.
    - `file_types`: file_type equals one of them lowercased (stored file types are lower case).
    - `book_id`: the chunk's book_id lowercased (Python `str.lower`) is one of `book_keys(book_id)`.
    - `book_scope`: as `book_id`, or the chunk has no book_id (NULL).
    - `chapter_id`: chapter_id equals it exactly.
    - `max_chapter`: chapter_num is NULL or <= it.
    - `path_prefix`: the path starts with it (a string prefix, not a folder: `notes` passes `notes2/a.md`); when the
      prefix is not ASCII both sides are compared in Unicode NFC (paths.nfc).
    - `glob`: `paths.glob_match(path, glob)` is true.
    - `corpus`: corpus equals it.
    - `visibility`: None = any; else the chunk's visibility (NULL read as "public"), trimmed and lowercased
      (ASCII), is one of the given levels (callers pass them lower case). `[]` passes NOTHING (fail closed).
    - `exclude_paths`: the path is none of them (exact). `only_paths`: None = any, else the path is one of them
      (`[]` passes nothing).
    - `known_entities` (with `known_povs`): the chunk's file holds a stored mention (MentionStore) of one of these
      entity paths, OR its file's stored `pov` (casefolded when written) is one of `known_povs`. When
      `known_entities` is None but `known_by` is set (a name not resolved yet), NOTHING passes (fail closed).
      `known_by` itself is only the name the caller asked with; backends read `known_entities`/`known_povs`.
    """

    entity_types: list[str] = field(default_factory=list)
    file_types: list[str] = field(default_factory=list)
    book_id: str | None = None
    book_scope: str | None = None  # this book's chunks plus those that belong to no book
    chapter_id: str | None = None
    max_chapter: int | None = None
    path_prefix: str | None = None
    glob: str | None = None
    corpus: str | None = None
    visibility: list[str] | None = None  # None = no restriction
    exclude_paths: list[str] = field(default_factory=list)
    only_paths: list[str] | None = None
    # what one entity knows (retrieval/mentions.py): files that mention one of `known_entities` (entity paths) or whose
    # frontmatter `pov` is one of `known_povs` (casefolded); `known_by` named but not resolved matches nothing
    known_by: str | None = None
    known_entities: list[str] | None = None
    known_povs: list[str] = field(default_factory=list)

    def is_empty(self) -> bool:
        """No condition set: every chunk passes (backends skip filtering)."""
        return not (
            self.entity_types
            or self.file_types
            or self.book_id
            or self.book_scope
            or self.chapter_id
            or self.max_chapter is not None
            or self.path_prefix
            or self.glob
            or self.corpus
            or self.visibility is not None
            or self.exclude_paths
            or self.only_paths is not None
            or self.known_entities is not None
            or self.known_by is not None
        )

    def key(self) -> str:
        """A stable text of every condition (for caches of a filter's results)."""
        import json

        return json.dumps([getattr(self, f.name) for f in fields(self)], default=str)


# -- records written -------------------------------------------------------------------------------------------
@dataclass
class FileState:
    """What change detection compares: the file's sha256 (hex), mtime in ns (0: read within its timestamp tick,
    see indexing.records.is_racy) and size in bytes, as last indexed."""

    content_hash: str
    mtime_ns: int
    size: int
    origin: str | None = None  # the copy of the project that wrote it (a shared store's; None: this index's own)

    def mine(self, here: str | None) -> bool:
        """Whether this copy (`here`, the store's `copy_id`; None: a project's own index) wrote the file last."""
        return here is None or self.origin is None or self.origin == here

    def changed_here(self, mtime_ns: int, size: int, here: str | None = None) -> bool:
        """Whether this copy's file, now (mtime_ns, size) on disk, is to be read into the index again: whenever
        either differs from what this copy wrote (a project's own index: always this copy's). A version another
        copy wrote (a workspace several copies of one project share, docs/postgres.md) is replaced only by a
        file newer on this disk: one older here is that copy's newer edit (else each copy's next search put its
        own older text back, and two authors undid each other's saved edits); one it read within its
        timestamp's tick (mtime 0) it reads again itself."""
        if (self.mtime_ns, self.size) == (mtime_ns, size):
            return False
        if self.mine(here):
            return True
        return bool(self.mtime_ns) and mtime_ns >= self.mtime_ns


def gone_here(
    root: os.PathLike[str] | str, states: dict[str, FileState], seen: set[str], here: str | None
) -> list[str]:
    """The indexed files a scan of this copy did not find that this copy may drop: every one on a project's own
    index; on a shared one (`here`: this copy), those this copy wrote last and those still on its disk (excluded or
    hidden by the settings since: dropped for everyone, fail closed); a file another copy wrote that this one lacks
    may be that copy's new note, and stays."""
    gone = [p for p in states if p not in seen]
    if here is None:
        return gone
    return [p for p in gone if states[p].mine(here) or os.path.lexists(os.path.join(root, p))]


@dataclass
class FileRecord:
    """A file as an index run writes it (with `ChunkStore.replace_file`)."""

    path: str
    content_hash: str
    mtime_ns: int
    size: int
    file_type: str
    encoding: str
    entity_type: str | None = None
    entity_name: str | None = None
    display_name: str | None = None
    aliases: list[str] = field(default_factory=list)
    book_id: str | None = None
    chapter_id: str | None = None
    visibility: str = "public"
    corpus: str = "content"
    warning: str | None = None

    def file_row(self, last_indexed: float, chunk_count: int) -> tuple[Any, ...]:
        """Its values in FILE_COLUMNS order, as every backend stores them (aliases as JSON text)."""
        import json

        return (
            self.path,
            self.content_hash,
            self.mtime_ns,
            self.size,
            self.file_type,
            self.encoding,
            last_indexed,
            chunk_count,
            self.entity_type,
            self.entity_name,
            self.display_name,
            json.dumps(self.aliases),
            self.book_id,
            self.chapter_id,
            self.visibility,
            self.corpus,
            self.warning,
        )


# the columns of a stored file (both backends' `files` table), in FileRecord.file_row's order
FILE_COLUMNS: tuple[str, ...] = (
    "path",
    "content_hash",
    "mtime_ns",
    "size",
    "file_type",
    "encoding",
    "last_indexed",
    "chunk_count",
    "entity_type",
    "entity_name",
    "display_name",
    "aliases",
    "book_id",
    "chapter_id",
    "visibility",
    "corpus",
    "warning",
)


def ident_lines(chunks: Sequence[ChunkRow]) -> list[str]:
    """The distinct identifier parts of a file's chunks (each chunk's `ident_words`), for its whole-file keywords."""
    return list(dict.fromkeys(w for ch in chunks if ch.ident_words for w in ch.ident_words.split("\n")))


@dataclass
class ChunkRow:
    """A chunk as an index run writes it; `chunk_index` orders a file's chunks (0-based, unique per file)."""

    chunk_index: int
    kind: str
    section_heading: str | None
    heading_path: str
    start_line: int
    end_line: int
    content_hash: str
    preview: str
    token_count: int
    text: str
    file_type: str
    entity_type: str | None
    entity_name: str | None
    book_id: str | None
    chapter_id: str | None
    chapter_num: int | None
    visibility: str
    corpus: str
    ident_words: str = ""  # keywords: the parts of its camelCase identifiers (markdown.chunker.Chunk.ident_words)


@dataclass
class StoredMatch:
    """A file's new chunks paired with its stored rows (`match_stored`)."""

    kept: list[tuple[tuple, ChunkRow]]  # (stored row, new chunk): the row keeps its id, keywords and vector
    new: list[ChunkRow]  # chunks no stored row matches: inserted
    left: list[tuple]  # stored rows no new chunk took: deleted (their vectors may serve a new chunk of that text)


def match_stored(chunks: Iterable[ChunkRow], stored: Iterable[tuple], columns: Sequence[str]) -> StoredMatch:
    """Pair a file's new chunks with its stored rows (each the row's id, then `columns` in that order, in chunk
    order): a chunk takes the first row left whose content hash, text and heading path are its own, so a passage
    that moved, or repeats, keeps a row of its own text; the rest are new or left."""
    at_hash, at_text, at_heading = (1 + columns.index(n) for n in ("content_hash", "text", "heading_path"))
    old: dict[str, list[tuple]] = {}  # content hash -> stored rows, in chunk order
    for row in stored:
        old.setdefault(row[at_hash], []).append(row)
    out = StoredMatch([], [], [])
    for ch in chunks:
        same = old.get(ch.content_hash, [])
        match = next((r for r in same if r[at_text] == ch.text and r[at_heading] == ch.heading_path), None)
        if match is None:
            out.new.append(ch)
            continue
        same.remove(match)
        out.kept.append((match, ch))
    out.left = [r for rows in old.values() for r in rows]
    return out


# (entity path, 0-based line, start column, end column, the name as written in the entity's frontmatter)
MentionRow = tuple[str, int, int, int, str]


@dataclass
class FileWrite:
    """One file of a `replace_files` batch: its record, exactly its chunks, its mentions (None: left as stored)."""

    record: FileRecord
    chunks: Sequence[ChunkRow]
    mentions: FileMentionRows | None = None
    # False: the writer knows the file's text holds no CJK character (markdown.terms.CJK_RE), so none of its chunks
    # has CJK keywords to make (the chunking worker looked once per file: a search per chunk cost ~15 us in the
    # indexer, benchmarks row S22); True: each chunk is looked at
    cjk: bool = True


@dataclass
class FileMentionRows:
    """What one file's text gave: its mentions, the names key they were found with, its `pov` (casefolded)."""

    names_key: str
    rows: Sequence[MentionRow]
    pov: str | None = None


@dataclass(frozen=True)
class MentionCount:
    """One file's mentions of one entity, kept at index time (`MentionStore.mention_counts`): how many, the first and
    the last (0-based line and column, in text order), with the file's book, chapter id and number (of a chunk of
    it) and visibility. A request for an entity's mentions reads one of these per file, not every mention."""

    path: str
    entity: str
    count: int
    first_line: int
    first_col: int
    last_line: int
    last_col: int
    book_id: str | None
    chapter_id: str | None
    chapter_num: int | None
    visibility: str | None


@dataclass(frozen=True)
class MentionAt:
    """One stored mention (`MentionStore.mentions_in`): where (0-based line, start and end column) and the name as
    written in the entity's frontmatter."""

    path: str
    entity: str
    line: int
    col: int
    end_col: int
    surface: str | None


# -- records read ----------------------------------------------------------------------------------------------
@dataclass
class StoredChunk:
    """A stored chunk (`chunks_by_id`, `chunks_for_path`): the ChunkRow it was written from (without
    `ident_words`) plus its id and path. Values come back exactly as written (None stays None), but for the preview:
    the SQLite backend stores none and gives `markdown.preview.make_preview(text)` (what the chunker writes)."""

    id: int
    path: str
    chunk_index: int
    kind: str | None
    section_heading: str | None
    heading_path: str | None
    start_line: int | None
    end_line: int | None
    content_hash: str | None
    preview: str | None
    token_count: int | None
    text: str | None
    file_type: str | None
    entity_type: str | None
    entity_name: str | None
    book_id: str | None
    chapter_id: str | None
    chapter_num: int | None
    visibility: str | None
    corpus: str | None

    def chunk_row(self) -> ChunkRow:
        """The ChunkRow that writes this chunk back as it is (without `ident_words`, which is not read back)."""
        return ChunkRow(**{k: getattr(self, k) for k in ChunkRow.__dataclass_fields__ if k != "ident_words"})


CHUNK_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(StoredChunk))


@dataclass
class StoredFile:
    """A stored file (`get_file`): its FileRecord plus when it was written (`last_indexed`, Unix seconds) and how
    many chunks it has. `aliases` comes back as the list written."""

    path: str
    content_hash: str
    mtime_ns: int
    size: int
    file_type: str | None
    encoding: str | None
    last_indexed: float | None
    chunk_count: int
    entity_type: str | None
    entity_name: str | None
    display_name: str | None
    aliases: list[str]
    book_id: str | None
    chapter_id: str | None
    visibility: str | None
    corpus: str | None
    warning: str | None


def aliases_of(text: str | None) -> tuple[str, ...]:
    """A file's aliases from the JSON text a backend stores them as (`[]` for none, or for text that is not a
    JSON list)."""
    import json

    try:
        loaded = json.loads(text or "[]")
    except ValueError:
        return ()
    return tuple(str(a) for a in loaded) if isinstance(loaded, list) else ()


@dataclass(frozen=True)
class EntityRow:
    """A file that may be an entity (`entities`; retrieval.entities.is_entity decides): its names and kind."""

    path: str
    entity_type: str | None
    entity_name: str | None
    display_name: str | None
    aliases: tuple[str, ...]
    file_type: str | None
    visibility: str | None

    @classmethod
    def of_record(cls, rec: FileRecord) -> EntityRow:
        """The row `rec` gives once stored (for a file about to be written)."""
        return cls(
            rec.path,
            rec.entity_type,
            rec.entity_name,
            rec.display_name,
            tuple(str(a) for a in rec.aliases),
            rec.file_type,
            rec.visibility,
        )


@dataclass(frozen=True)
class HeadingRow:
    """A chunk that starts with a heading (`headings`): the heading as written (`#`s kept), its heading path
    and 1-based lines."""

    path: str
    section_heading: str
    heading_path: str | None
    start_line: int
    end_line: int
    visibility: str | None


@dataclass(frozen=True)
class StoredMention:
    """A stored mention of an entity (`mentions_of`): where (0-based line, code-point columns, end exclusive),
    the name as written in the entity's frontmatter, and its file's book, chapter id, chapter number (of the
    file's first chunk) and visibility."""

    path: str
    entity: str
    line: int
    col: int
    end_col: int
    surface: str
    book_id: str | None
    chapter_id: str | None
    chapter_num: int | None
    visibility: str | None


@dataclass(frozen=True)
class ChapterFile:
    """An indexed file with a chapter id (`chapter_files`): its book, chapter id, visibility, frontmatter `pov`
    as stored with its mentions (casefolded; None when never scanned) and chapter number (of a chunk of it)."""

    path: str
    book_id: str | None
    chapter_id: str
    visibility: str | None
    pov: str | None
    chapter_num: int | None


@dataclass(frozen=True)
class ProseRow:
    """A chunk's text where it starts (`prose`): its file, first line (1-based), text and visibility."""

    path: str
    start_line: int
    text: str | None
    visibility: str | None


@dataclass(frozen=True)
class PendingChunk:
    """A chunk still without a vector (`chunks_missing_vectors`): what embedding it takes."""

    id: int
    path: str
    heading_path: str | None
    text: str | None
    content_hash: str


@dataclass(frozen=True)
class SearchLogEntry:
    """One logged search (`search_log`): `id` ascends with time, `timestamp` in Unix seconds."""

    id: int
    timestamp: float
    query: str
    source: str
    mode: str
    results: int
    top_score: float
    elapsed_ms: float


@dataclass(frozen=True)
class StoreStats:
    """The index's counts (`stats`): files, chunks, stored vectors (0 without a vector table), when a file was
    last written (max `last_indexed`, None when none is), the embedding log's sums and the cache's size."""

    total_files: int
    total_chunks: int
    embedded_chunks: int
    last_indexed: float | None
    total_cost_usd: float
    total_tokens: int
    cached_embeddings: int


def cache_key(model: str, dims: int) -> str:
    """The embedding-cache key of `model` embedding at `dims` dimensions (one model name, several sizes)."""
    return f"{model}@{int(dims)}" if dims else model


# -- the protocols ---------------------------------------------------------------------------------------------
@runtime_checkable
class ChunkStore(Protocol):
    """Files and their chunks."""

    # Whether ChunkRow.preview is stored (PostgreSQL) or derived from the text on reading (SQLite): a writer that
    # gets chunks without previews (the chunking workers send none) makes them only for a store that keeps them.
    keeps_previews: bool

    def replace_file(
        self,
        record: FileRecord,
        chunks: Sequence[ChunkRow],
        vectors: dict[str, np.ndarray] | None = None,
        model: str | None = None,
        mentions: FileMentionRows | None = None,
    ) -> list[int]:
        """Make `record` and exactly `chunks` the file's stored state, in one transaction (readers see the old
        state or the new, never a mix), with its keywords (KeywordIndex), vectors and `mentions` (when given:
        MentionStore.write_mentions in the same transaction; None leaves the file's stored mentions as they are).

        A stored chunk of this path whose text AND heading path equal a new chunk's keeps its id (and its vector);
        each stored chunk is matched at most once, in chunk order. Every other new chunk gets a fresh id.
        `vectors` maps content_hash -> vector (float32, the configured dimensions): a new chunk takes the vector of
        its hash from `vectors`, else the vector a replaced chunk of this file with that hash had; a kept chunk
        without a vector takes one from `vectors`. With `model` (the cache key, `cache_key(model, dims)`), every
        entry of `vectors` also goes to the EmbeddingCache. Without a configured vector table
        (`has_vectors()` false) no vector is stored. Returns the ids of the chunks left without a vector, in
        chunk order (what the embedding phase must embed). Raises StorageReadOnly on a read-only store."""
        ...

    def replace_files(self, files: Sequence[FileWrite]) -> None:
        """`replace_file` (no vectors given) for each of `files`, in one transaction: a first index's batch. A file
        with no stored chunks has its chunks written with the others' (SQLite: a few statements for the batch, so
        the keyword index writes one segment for it, not one per file); one with stored chunks is replaced as by
        `replace_file`, keeping the ids of its unchanged chunks. On any error nothing of the batch is stored."""
        ...

    def defer_indexes(self) -> bool:
        """A first index is about to write many chunks: the backend may drop the secondary indexes of its chunks
        (lookups by content hash, heading, chapter) while the chunk table is EMPTY, to build them once at
        `restore_indexes` (a sort) instead of row by row, and write files without their whole-file keywords until
        then (`fill_file_text` adds them after). Reads stay correct meanwhile (slower where they used one; the
        whole-file keyword signal holds the files written before). True when it deferred anything; False (nothing
        done) when chunks are stored or the backend keeps them."""
        ...

    def restore_indexes(self) -> None:
        """Build again what `defer_indexes` dropped (here, or by a run that was killed before it could); nothing
        when none is missing. Files are written with their whole-file keywords again from now on."""
        ...

    def fill_file_text(self, max_files: int) -> int:
        """Give up to `max_files` files written without their whole-file keywords (`defer_indexes`) theirs, in one
        transaction; returns how many (0: none left; `file_text_pending` is False from then on)."""
        ...

    def file_text_pending(self) -> bool:
        """Some files may lack their whole-file keywords (a first index's text phase wrote them without; the fill
        has not finished)."""
        ...

    def merge_keywords(self, pages: int) -> bool:
        """One step of bringing the keyword lists to one b-tree each after a first index (or once on an older
        index), writing about `pages` pages in one transaction; True while work is left, False when done (or
        when the backend has nothing to merge). The same rows and scores either way."""
        ...

    def delete_file(self, path: str) -> bool:
        """Forget a file: its record, chunks, keywords, vectors and mentions (the embedding cache keeps its
        vectors). True when it was indexed."""
        ...

    def touch_file(self, path: str, mtime_ns: int, size: int) -> None:
        """Record a new mtime and size for an indexed file whose content did not change (no other effect)."""
        ...

    def clear(self) -> None:
        """Forget every file, chunk, vector and mention. The embedding cache, meta keys (incl. the vector model)
        and logs stay."""
        ...

    def file_states(self) -> dict[str, FileState]:
        """path -> FileState of every indexed file."""
        ...

    def file_states_for(self, paths: Iterable[str]) -> dict[str, FileState]:
        """As file_states, for those of `paths` that are indexed."""
        ...

    def get_file(self, path: str) -> StoredFile | None:
        """The stored record of one file, None when not indexed."""
        ...

    def chunk_hashes(self) -> list[tuple[str, str, int]]:
        """(path, content hash, token count; 0 for NULL) of every chunk, ordered by path then chunk_index."""
        ...

    def chunk_texts(self, chunk_ids: Sequence[int]) -> dict[int, tuple[str, str, str]]:
        """chunk id -> (content hash, heading path or "", text or "") for those ids that exist."""
        ...

    def chunks_by_id(self, chunk_ids: Sequence[int]) -> dict[int, StoredChunk]:
        """The stored chunks of these ids (missing ids left out); {} for no ids."""
        ...

    def chunks_for_path(self, path: str) -> list[StoredChunk]:
        """A file's stored chunks in chunk_index order ([] when not indexed)."""
        ...

    def chunk_ids_for_paths(self, paths: Sequence[str], flt: ChunkFilter | None = None) -> list[tuple[int, str]]:
        """(chunk id, path) of every chunk of `paths` passing `flt` (any order)."""
        ...

    def chunk_paths(self, chunk_ids: Sequence[int]) -> dict[int, str]:
        """chunk id -> its path, for the ids that exist."""
        ...

    def chunks_with_heading(self, heading: str, flt: ChunkFilter | None = None) -> list[int]:
        """Ids of chunks passing `flt` whose section_heading, with its leading `#`s and then surrounding
        whitespace removed, equals `heading` ignoring ASCII case; ordered by path, chunk_index."""
        ...

    def chunks_with_name_heading(self, name: str, flt: ChunkFilter | None = None) -> list[int]:
        """Ids of chunks passing `flt` whose section heading (its `#`s stripped) names the identifier `name` at
        the best level `markdown.terms.heading_names` gives any of them (2: the name itself; else 1: a member of
        that name); [] when none names it. Candidates are headings containing `name` (ASCII case ignored);
        ordered by path, chunk_index."""
        ...

    def entity_type_counts(self, flt: ChunkFilter | None = None) -> dict[str, int]:
        """{entity type (lowercased, `document` when none): number of files of that type} over the files with a
        chunk passing `flt` (what an agent may filter `entityTypes` by)."""
        ...

    def entity_chunks(self, name: str, flt: ChunkFilter | None = None) -> list[int]:
        """For each file whose display_name or entity_name equals `name` (ASCII case ignored), or one of whose
        aliases does: the id of its first chunk (by chunk_index) passing `flt`, a chunk of kind 'frontmatter'
        only when no other passes. Files with no passing chunk are left out. Any order."""
        ...

    def entities(self) -> list[EntityRow]:
        """Files that may be entities: those with a non-empty aliases list, or a display_name and (file_type
        'character' or an entity_name). Any order."""
        ...

    def headings(self) -> list[HeadingRow]:
        """Every chunk with a section_heading, ordered by path, chunk_index."""
        ...

    def prose(self) -> list[ProseRow]:
        """Every chunk, ordered by path, chunk_index."""
        ...

    def total_tokens_indexed(self) -> int:
        """The sum of every chunk's token_count."""
        ...


@dataclass
class Candidates:
    """What a search ranks, read in one call (`KeywordIndex.search_candidates`): the keyword list, the whole-file
    keyword list, the vector list (each best first, as `keyword_search`, `file_keyword_search` and `knn` return
    them), the path of every chunk in the keyword and vector lists, and the unit vector of each keyword
    candidate missing from the vector list (when a query vector was given; a chunk without a vector has none)."""

    keywords: list[tuple[int, float]] = field(default_factory=list)
    files: list[tuple[str, float, int]] = field(default_factory=list)
    vectors: list[tuple[int, float]] = field(default_factory=list)
    paths: dict[int, str] = field(default_factory=dict)
    keyword_vectors: dict[int, Any] = field(default_factory=dict)


def candidates_by_calls(
    store: Any, query: KeywordQuery | None, limit: int, file_limit: int, qvec: Any, flt: ChunkFilter | None
) -> Candidates:
    """`search_candidates` as the separate reads (a backend in the same process as its data: SQLite)."""
    out = Candidates()
    if query is not None:
        out.keywords = store.keyword_search(query, limit, flt)
        out.files = store.file_keyword_search(query, file_limit, flt) if file_limit > 0 else []
    if qvec is not None:
        out.vectors = store.knn(qvec, limit, flt)
    return with_paths_and_vectors(store, out, qvec is not None)


def with_paths_and_vectors(store: Any, out: Candidates, hybrid: bool) -> Candidates:
    """`out` with the paths of its listed chunks and (`hybrid`) the vectors of its keyword-only chunks."""
    ids = list(dict.fromkeys([c for c, _ in out.keywords] + [c for c, _ in out.vectors]))
    out.paths = store.chunk_paths(ids) if ids else {}
    if hybrid:
        seen = {c for c, _ in out.vectors}
        need = [c for c, _ in out.keywords if c not in seen]
        out.keyword_vectors = store.chunk_vectors(need) if need else {}
    return out


@runtime_checkable
class KeywordIndex(Protocol):
    """Keyword search. The SQLite backend tokenises with `porter unicode61 remove_diacritics 2` over a chunk's
    text, heading path and identifier words (`ChunkRow.ident_words`), and a whole file's text (its chunks' texts
    and identifier words) for `file_keyword_search`; another backend should fold and stem alike."""

    def keyword_search(
        self, query: KeywordQuery, limit: int, flt: ChunkFilter | None = None
    ) -> list[tuple[int, float]]:
        """(chunk id, score) of the `limit` best chunks matching `query` and passing `flt`, best first (score
        descending: higher is better, the negated BM25 of the chunk's columns weighted equally)."""
        ...

    def keyword_paths(self, query: KeywordQuery, flt: ChunkFilter | None = None) -> list[tuple[str, int | None]]:
        """Every file with a chunk matching `query` that passes `flt` (frontmatter chunks count): (path, the
        smallest chapter_num of those chunks, None when none has one). Any order."""
        ...

    def file_keyword_search(
        self, query: KeywordQuery, limit: int, flt: ChunkFilter | None = None
    ) -> list[tuple[str, float, int]]:
        """(path, score, size in bytes) of the `limit` best files matching `query` as a whole (all of a file's
        text as one document), best first (higher is better: negated BM25); a file counts when one of its
        chunks passes `flt`."""
        ...

    def search_candidates(
        self,
        query: KeywordQuery | None,
        limit: int,
        file_limit: int,
        qvec: np.ndarray | None = None,
        flt: ChunkFilter | None = None,
    ) -> Candidates:
        """A search's candidates in one call (PostgreSQL: one statement, where the separate reads were five round
        trips): `keyword_search(query, limit, flt)` and `file_keyword_search(query, file_limit, flt)` unless
        `query` is None (no files when `file_limit` is 0), `knn(qvec, limit, flt)` unless `qvec` is None, the
        paths of those chunks, and the unit vectors of the keyword candidates the KNN did not return."""
        ...

    def term_doc_freqs(self, terms: Sequence[str]) -> tuple[dict[str, int], int]:
        """({term: number of chunks whose keywords hold it} for every term given, 0 when none does; the number of
        chunks). Terms are keys as `markdown.terms.match_key` makes them (case and accents folded, Porter-stemmed,
        as the SQLite index stores its tokens); a backend that stems otherwise maps them itself."""
        ...


@runtime_checkable
class VectorIndex(Protocol):
    """Chunk vectors: one model and size per index (never mixed), cosine similarity."""

    def has_vectors(self) -> bool:
        """A vector table exists (configure_vectors was called with dimensions > 0)."""
        ...

    def vector_model(self) -> tuple[str | None, int]:
        """(the model recorded by configure_vectors, its dimensions; 0 when none)."""
        ...

    def configure_vectors(self, provider: str, model: str, dimensions: int) -> bool:
        """Record the provider, model and dimensions (meta keys `provider`, `model`, `dimensions`). A different
        model or size than recorded drops every stored chunk vector (the cache stays). dimensions > 0 creates the
        vector table when missing. True when vectors were dropped."""
        ...

    def knn(self, query: np.ndarray, k: int, flt: ChunkFilter | None = None) -> list[tuple[int, float]]:
        """(chunk id, cosine similarity) of the k nearest embedded chunks passing `flt`, best first. Exact on
        SQLite; a backend may be approximate for large indexes, but returns k results whenever k chunks pass
        (no post-filter loss). [] when k <= 0, nothing is embedded or nothing passes."""
        ...

    def chunk_vectors(self, chunk_ids: Sequence[int]) -> dict[int, np.ndarray]:
        """chunk id -> its stored vector (unit length, float32) for those ids that have one."""
        ...

    def without_vectors(self, chunk_ids: Sequence[int]) -> set[int]:
        """Those of `chunk_ids` with no vector; set() when nothing at all is embedded."""
        ...

    def paths_without_vectors(self, paths: Sequence[str]) -> set[str]:
        """Those of `paths` with at least one chunk lacking a vector (every indexed one without a vector table)."""
        ...

    def embedded_count(self) -> int:
        """How many chunks have a usable vector (0 without vectors)."""
        ...

    def count_unembedded(self, model: str | None = None, dims: int = 0) -> int:
        """Chunks with no vector of `model`/`dims` (default: the recorded model). Every chunk counts when the
        index holds no vectors of that model (or dims differ, when dims is given)."""
        ...

    def unembedded_share(self, model: str, dims: int) -> tuple[int, int]:
        """(count_unembedded(model, dims), number of chunks); may be cached until the index changes."""
        ...

    def unembedded(self, hold: Iterable[str] = (), first: Iterable[str] = ()) -> list[tuple[int, str, str, int]]:
        """(chunk id, path, content hash, token count; 0 for NULL) of chunks without a vector, in the order to
        embed them: files in `first` (in that order), then files by mtime_ns descending (mtime 0 counts as the
        newest), chunks of a file in chunk_index order; files in `hold` left out. [] without a vector table."""
        ...

    def chunks_missing_vectors(self, limit: int = 100_000) -> list[PendingChunk]:
        """Up to `limit` chunks without a vector, ordered by path, chunk_index. [] without a vector table."""
        ...

    def set_vectors(self, items: Sequence[tuple[int, str, np.ndarray]], model: str) -> None:
        """Store vectors for existing chunks: (chunk id, content hash, vector). A chunk whose id no longer exists
        or whose content hash differs (replaced meanwhile) gets none; every vector still goes to the cache under
        `model` (the cache key)."""
        ...

    def drop_unusable_vectors(self) -> int:
        """Delete stored and cached vectors holding NaN, Inf or only zeros (they are embedded again); may run once
        per index (recorded in meta). Returns how many were deleted."""
        ...

    def nearest_other_file_cosines(self, sample: int, seed: int = 0) -> tuple[int, list[float]]:
        """(embedded chunks, for a fixed random sample of up to `sample` of them, seeded: the cosine of each one's
        nearest chunk in another file, among its 12 nearest). (n, []) when fewer than 2 are embedded."""
        ...


@runtime_checkable
class EmbeddingCache(Protocol):
    """Vectors by (cache key, content hash): same model + text = one vector. Written by replace_file(model=...)
    and set_vectors; survives delete_file, clear and configure_vectors; never holds unusable vectors it serves."""

    def cached_vectors(self, model: str, hashes: Iterable[str], dims: int = 0) -> dict[str, np.ndarray]:
        """content hash -> cached vector of `model`, for those of `hashes` cached. With `dims`, only vectors of
        that size count, looked up under both `model` and `cache_key(model, dims)`. Vectors with NaN, Inf or
        only zeros are never returned."""
        ...


@runtime_checkable
class MentionStore(Protocol):
    """Where each entity (by its file's path) is mentioned, per file, with the names key the mentions were found
    with and the file's `pov`."""

    def write_mentions(self, path: str, found: FileMentionRows) -> None:
        """Replace a file's mentions, names key and pov (inside the caller's `atomic` block, or on its own)."""
        ...

    def relabel_mentions(self, paths: Sequence[str], names_key: str) -> None:
        """These files' stored mentions stand for `names_key` too (only the key changes)."""
        ...

    def mention_stale_keys(self, names_key: str) -> list[tuple[str, str | None]]:
        """Indexed files whose mentions were found with another key: (path, that key, None when never
        scanned), ordered by path."""
        ...

    def mention_stale_paths(self, names_key: str) -> list[str]:
        """The paths of mention_stale_keys(names_key)."""
        ...

    def mentions_unscanned(self) -> bool:
        """Some indexed file has no mentions record (never scanned)."""
        ...

    def mention_paths(self, entity_paths: Sequence[str]) -> list[str]:
        """Distinct files holding a mention of one of these entities (any order)."""
        ...

    def known_paths(self, entity_paths: Sequence[str], povs: Sequence[str]) -> list[str]:
        """Distinct files that mention one of these entities or whose pov is one of `povs` (casefolded here)."""
        ...

    def mentions_of(self, entity_paths: Sequence[str]) -> list[StoredMention]:
        """Every mention of these entities, ordered by path, line, col."""
        ...

    def mention_counts(self, entity_paths: Sequence[str]) -> list[MentionCount]:
        """Per indexed file holding a mention of one of these entities, and per entity: its MentionCount (kept up to
        date by write_mentions, drop_mentions and clear_mentions); ordered by path, then entity."""
        ...

    def mentions_in(self, entity_paths: Sequence[str], paths: Sequence[str]) -> list[MentionAt]:
        """The stored mentions of these entities in these files (a page of an entity's mentions, files chosen from
        mention_counts); ordered by path, line, col."""
        ...

    def chapter_files_digest(self) -> str:
        """A value that changes whenever chapter_files() would answer differently (a chapter file added, removed,
        renumbered, moved to another book, its visibility or pov changed) and stays when only the text of a chapter
        changed: computed next to the data, in one step, so a reader knows whether to read the chapters again."""
        ...

    def chapter_files(self) -> list[ChapterFile]:
        """Every indexed file with a chapter_id (any order)."""
        ...

    def chapter_num_of(self, path: str) -> int | None:
        """The chapter number of an indexed file (None: no chapter, or not indexed)."""
        ...


@runtime_checkable
class IndexLog(Protocol):
    """Meta keys, logs and counts."""

    def get_meta(self, key: str, default: str | None = None) -> str | None:
        """The value of a meta key, `default` when unset."""
        ...

    def set_meta(self, key: str, value: str) -> None:
        """Set a meta key (own transaction, or the caller's `atomic`)."""
        ...

    def try_set_meta(self, key: str, value: str) -> bool:
        """Set a meta key unless that means waiting for another writer (False then, nothing written): for values
        a search keeps for other processes, which must never hold up a request."""
        ...

    def index_version(self) -> Any:
        """A hashable value that changes with every committed change to files, chunks, vectors or mentions, by
        this process or another (caches are keyed on it); equal values mean nothing changed in between."""
        ...

    def log_embedding(self, provider: str, model: str, tokens: int, chunks: int, cost_usd: float) -> None:
        """Append one embedding call to the embedding log (timestamp: now)."""
        ...

    def log_search(self, query: str, source: str, mode: str, results: int, top_score: float, elapsed_ms: float) -> None:
        """Append one search to the search log (timestamp: now)."""
        ...

    def search_log(self, include_eval: bool = False, limit: int = 100) -> list[SearchLogEntry]:
        """The latest `limit` searches, newest first. Rows with source 'eval' are left out unless include_eval."""
        ...

    def stats(self) -> StoreStats:
        """The index's counts."""
        ...


@runtime_checkable
class LockHandle(Protocol):
    """The writer lock while held."""

    def publish(self, progress: IndexProgress | None, force: bool = False) -> None:
        """Make what the run is doing visible to other processes' `WriterLock.other_run` (throttled)."""
        ...

    def reporting(self, progress: Callable[[IndexProgress], None] | None) -> Callable[[IndexProgress], None]:
        """A progress callback that also publishes."""
        ...


@runtime_checkable
class WriterLock(Protocol):
    """One writer (an index run, a refresh, a clear) per index across processes, and between the threads of one
    process too (a refresh with wait=False while the server's own run holds it gets IndexBusy): the lock is not
    re-entrant. Readers never take it."""

    def writer_lock(
        self,
        *,
        wait: bool = True,
        cancel: threading.Event | None = None,
        on_wait: Callable[[int | None], None] | None = None,
        timeout: float | None = None,
        what: str = "index",
    ) -> contextlib.AbstractContextManager[LockHandle | None]:
        """Hold the writer lock for the block. Busy: with `wait`, poll until free (`on_wait(pid)` once; `cancel`
        set: IndexCancelled; past `timeout` s: IndexBusy); without, IndexBusy naming the holder. Yields None when
        the store cannot be written anyway (read-only): nothing to protect. Released when the holder exits,
        even killed."""
        ...

    def other_run(self) -> dict[str, Any] | None:
        """Another process's run on this index as it last published it ({"pid", "what", "phase", "filesDone",
        ...}), None when no other process holds the lock. Never blocks, never writes."""
        ...


@runtime_checkable
class IndexStore(ChunkStore, KeywordIndex, VectorIndex, EmbeddingCache, MentionStore, IndexLog, WriterLock, Protocol):
    """One project's index (what `ProjectView.store` is).

    Attributes: `path` where it lives, for messages and cache keys (a file path for SQLite; a URL WITHOUT its
    password plus the workspace for a server); `readonly` (opened for reading only: every write raises
    StorageReadOnly); `shared` (a server's workspace, which several copies of a project may write); `copy_id`
    (this copy of the project, host and folder, on a shared store: what FileState.origin and changed_here compare;
    None for a project's own index); `rebuilt` (why, when an unusable index was replaced by an empty one at open,
    else None); `disk_full` (why, when it was opened read-only for lack of room, else None)."""

    path: str
    readonly: bool
    shared: bool
    copy_id: str | None
    rebuilt: str | None
    disk_full: str | None

    def atomic(self) -> contextlib.AbstractContextManager[None]:
        """One write transaction around the block (a savepoint when nested): every write inside commits together
        or, on any exception, none does. The write lock of the database is taken at entry (no reader-turned-writer
        failure later)."""
        ...

    def close(self, checkpoint: bool = True) -> None:
        """Release the store. checkpoint=False: a one-shot reader, skip any work meant for long sessions."""
        ...


def iter_protocols() -> Iterator[type]:
    """The concept protocols IndexStore combines (for the conformance suite)."""
    yield from (ChunkStore, KeywordIndex, VectorIndex, EmbeddingCache, MentionStore, IndexLog, WriterLock)

"""A file's chunks written to the SQLite index: `replace_file` swaps them in one transaction and touches only what
changed (an edit of one paragraph of a 258-chunk note rewrites one chunk row, its keywords and its vector, not 258
of each; vectors are stored by content hash in the embedding cache, vectors.py); `delete_file` and `clear`.
`FileWrites` is a part of `SqliteStore` (store.py), sharing its `Database` and calling its `Vectors` and
`Mentions` parts."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import fields
from itertools import chain
from operator import attrgetter

from ...lazy import np  # numpy loads on first use (cold CLI path)
from ..base import FILE_COLUMNS, ChunkRow, FileMentionRows, FileRecord, FileWrite, match_stored
from .database import Database
from .mentions import Mentions
from .schema import (
    DEFERRABLE_INDEXES,
    DEFERRED_META,
    FILE_TEXT_META,
    KEYWORD_AUTOMERGE_DEFAULT,
    KEYWORD_AUTOMERGE_OFF,
    KEYWORDS_MERGED_META,
    VISIBILITY_READ,
    VISIBILITY_STORED,
    chunk_cjk_words,
)
from .vectors import Vectors

# A chunk's columns as written; not its preview: a function of its text (markdown.preview.make_preview), derived on
# reading (store.py `_stored_chunk`) instead of stored: 196 bytes a chunk, ~10% of the index (issue 34: 55k chunks,
# 147 -> 134 MB, 8.5x -> 7.7x the prose). Rows of an older index keep the previews they were written with.
_ROW_FIELDS = [f.name for f in fields(ChunkRow) if f.name != "preview"]
_INSERT_FILE = f"INSERT OR REPLACE INTO files({', '.join(FILE_COLUMNS)}) VALUES ({', '.join('?' * len(FILE_COLUMNS))})"
# what a kept chunk row may differ in without being rewritten: no keyword (FTS) or vector change follows
_MOVABLE = [n for n in _ROW_FIELDS if n not in ("content_hash", "text", "heading_path")]
_values = attrgetter(*_ROW_FIELDS)  # a ChunkRow as the tuple of its columns
# (with the CJK bigrams of its heading path and text: storage.schema.chunk_cjk_words, migration 6)
_INSERT_HEAD = "INSERT INTO chunks(path, cjk_words, " + ", ".join(_ROW_FIELDS) + ") VALUES "
# (the default visibility stored as NULL: schema.VISIBILITY_STORED)
_INSERT_ROW = "(?, ?" + "".join(", " + (VISIBILITY_STORED if n == "visibility" else "?") for n in _ROW_FIELDS) + ")"
# a file's stored rows as they compare with new ones (NULL visibility read as `public`: schema.VISIBILITY_READ)
_SELECT_ROWS = (
    "SELECT id, "
    + ", ".join(VISIBILITY_READ if n == "visibility" else n for n in _ROW_FIELDS)
    + " FROM chunks WHERE path = ? ORDER BY chunk_index"
)
# A file's new chunks go in with one INSERT of many rows (up to this many: SQLite's 32,766 bound parameters). Its
# keyword trigger (chunks_ai) makes every INSERT a statement with its own statement journal, and FTS5 writes its
# pending terms out at each one: a statement per row cost 2.7x the keyword time of a statement per file (55k chunks:
# 20,000 rows 8.7 s vs 3.3 s, benchmarks/README row S2).
INSERT_ROWS = 1000
# the files `fill_file_text` gives their whole-file keyword row in one call (one transaction): ~0.1 s of SQL here
FILL_FILES = 256
# A first index's text phase (`defer_indexes` to `restore_indexes`) lets the write-ahead log grow to this many pages
# (~40 MB) before SQLite copies it into the index (SQLite's default: 1,000): a tenth of the checkpoints and their
# syncs, and pages written again by the next batches (the keyword list's, the tables' last) copied once (269k chunks:
# ~1 s less CPU and ~2 s less wall of ~12 s of inserts, benchmarks row S34).
FIRST_INDEX_WAL_PAGES = 10_000
# the next files without a whole-file keyword row (rowid order, after a rowid) and their words as `_write_file_row`
# writes them, joined by SQLite (`_joined_file_text` puts them together)
_FILL_SELECT = """
    SELECT f.rowid,
        (SELECT group_concat(c.text, char(10) ORDER BY c.chunk_index) FROM chunks c WHERE c.path = f.path),
        (SELECT group_concat(c.ident_words, char(10) ORDER BY c.chunk_index) FROM chunks c
            WHERE c.path = f.path AND c.ident_words != ''),
        (SELECT group_concat(c.cjk_words, char(10) ORDER BY c.chunk_index) FROM chunks c
            WHERE c.path = f.path AND c.cjk_words != '')
    FROM files f
    WHERE f.rowid > ? AND NOT EXISTS (SELECT 1 FROM files_fts_docsize d WHERE d.id = f.rowid)
    ORDER BY f.rowid LIMIT ?"""


class FileWrites:
    """File writes over the store's connection."""

    def __init__(self, db: Database, vectors: Vectors, mentions: Mentions) -> None:
        self.db = db
        self.vectors = vectors
        self.mentions = mentions
        # between `defer_indexes` and `restore_indexes` (a first index's text phase): files are written without their
        # whole-file keyword row, which `fill_file_text` adds afterwards (FILE_TEXT_META records that some lack it)
        self.defer_file_text = False
        self._filled_to = 0  # the files rowid `fill_file_text` has filled up to (this process)
        self._wal_pages: int | None = None  # wal_autocheckpoint as it was, while a first index raises it

    def replace_file(
        self,
        record: FileRecord,
        chunks: Sequence[ChunkRow],
        vectors: dict[str, np.ndarray] | None = None,
        model: str | None = None,
        mentions: FileMentionRows | None = None,
    ) -> list[int]:
        """Swap a file's chunks (and vectors) in one transaction. `vectors` maps content_hash -> vector.

        A stored chunk whose text and heading path come back unchanged keeps its row, id, keywords and
        vector: only the columns that differ (its index, line range, metadata) are updated, and a row equal in
        every column is not written at all. Returns the ids of the chunks inserted without a vector (what the
        embedding phase has to do for this file). `mentions`: the file's entity mentions, written in the same
        transaction (storage/mentions.py)."""
        with self.db.lock:
            vectors = vectors or {}
            unembedded: list[int] = []
            with self.db.atomic():
                key = self.vectors.index_key()
                pairs = match_stored(chunks, self.db.conn.execute(_SELECT_ROWS, (record.path,)), _ROW_FIELDS)
                kept, new = pairs.kept, pairs.new  # (kept: stored row, new row pairs that keep their id)
                gone = [r[0] for r in pairs.left]
                # vectors are stored by content hash (vectors.py): a new row whose text the index holds a vector
                # for (a passage repeated, moved or renamed) has it at once; given ones are stored first
                self.vectors.store_vectors(vectors, model)
                self.db.conn.executemany("DELETE FROM chunks WHERE id = ?", [(i,) for i in gone])
                moved = [(r, ch) for r, ch in kept if tuple(r[1:]) != _values(ch)]
                for r, _ch in moved:  # out of the way first: (path, chunk_index) is unique
                    self.db.conn.execute("UPDATE chunks SET chunk_index = ? WHERE id = ?", (-1 - r[0], r[0]))
                cjk = {id(ch): chunk_cjk_words(ch.heading_path, ch.text) for ch in chunks}
                ids = self._insert_rows([(record.path, cjk[id(ch)], *_values(ch)) for ch in new])
                inserted = [ids[record.path, ch.chunk_index] for ch in new]
                for r, ch in moved:  # only the columns that differ (none of them feeds the keyword index)
                    cols = [n for n in _MOVABLE if n == "chunk_index" or getattr(ch, n) != r[1 + _ROW_FIELDS.index(n)]]
                    self.db.conn.execute(
                        "UPDATE chunks SET "
                        + ", ".join(f"{n} = {VISIBILITY_STORED if n == 'visibility' else '?'}" for n in cols)
                        + " WHERE id = ?",
                        (*(getattr(ch, n) for n in cols), r[0]),
                    )
                unembedded = self.vectors.without_stored(inserted) if key is not None else inserted
                self._write_file_row(record, chunks, [cjk[id(ch)] for ch in chunks])
                if mentions is not None:
                    self.mentions.write_mentions(record.path, mentions)
                self.vectors.journal_written()
            self.vectors.after_write()
        return unembedded

    def defer_indexes(self) -> bool:
        """Drop the secondary indexes of an empty chunk table (schema.DEFERRABLE_INDEXES), recording them in meta
        (DEFERRED_META) in the same transaction, and write files without their whole-file keyword row until
        `restore_indexes` (FILE_TEXT_META: `fill_file_text` adds them); False when chunks are stored (nothing done)."""
        with self.db.lock, self.db.atomic():
            if self.db.scalar("SELECT 1 FROM chunks LIMIT 1") is not None:
                return False
            self.db.conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, '1')", (FILE_TEXT_META,))
            self.db.conn.execute("DELETE FROM meta WHERE key = ?", (KEYWORDS_MERGED_META,))
            present = {r[0] for r in self.db.conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
            dropped = [name for name in DEFERRABLE_INDEXES if name in present]
            for name in dropped:
                self.db.conn.execute(f"DROP INDEX {name}")
            had = self.deferred()
            # (the keyword list's segments merged once, after: `merge_keywords`; see KEYWORD_AUTOMERGE_OFF)
            self.db.conn.execute(KEYWORD_AUTOMERGE_OFF)
            self.db.conn.execute(
                "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
                (DEFERRED_META, json.dumps(sorted(set(had) | set(dropped)))),
            )
        self.defer_file_text = True  # (once the record that files may lack their row is committed)
        self._filled_to = 0  # (new files' rowids may start below an earlier fill's mark)
        with self.db.lock:  # (this connection's setting: nothing of it is stored)
            if self._wal_pages is None:
                self._wal_pages = int(self.db.scalar("PRAGMA wal_autocheckpoint") or 0)
            self.db.conn.execute(f"PRAGMA wal_autocheckpoint={FIRST_INDEX_WAL_PAGES}")
        return True

    def deferred(self) -> list[str]:
        """The indexes `defer_indexes` dropped and nothing has built again yet."""
        raw = self.db.scalar("SELECT value FROM meta WHERE key = ?", (DEFERRED_META,))
        try:
            names = json.loads(raw) if raw else []
        except ValueError:
            names = list(DEFERRABLE_INDEXES)
        return [n for n in names if n in DEFERRABLE_INDEXES] if isinstance(names, list) else list(DEFERRABLE_INDEXES)

    def restore_indexes(self) -> None:
        """Build the indexes `defer_indexes` dropped (one transaction); nothing when none is recorded. Files are
        written with their whole-file keyword row again from now on (those written before wait for
        `fill_file_text`)."""
        with self.db.lock:
            self.defer_file_text = False
            if self._wal_pages is not None:  # (the checkpoints of a first index's text phase: as before)
                self.db.conn.execute(f"PRAGMA wal_autocheckpoint={self._wal_pages}")
                # (and the log file cut back to that size when a checkpoint empties it: SQLite keeps a log file
                # at its largest otherwise, ~40 MB after a text phase)
                page = int(self.db.scalar("PRAGMA page_size") or 4096)
                self.db.conn.execute(f"PRAGMA journal_size_limit={max(self._wal_pages, 1) * page}")
                self._wal_pages = None
            if self.db.scalar("SELECT 1 FROM meta WHERE key = ?", (DEFERRED_META,)) is None:
                # (a killed first index whose indexes an older saipling built again, unaware of the setting: the
                # merging is put back here all the same; a first index running has DEFERRED_META set with it)
                if self.db.scalar("SELECT 1 FROM chunks_fts_config WHERE k = 'automerge'") is not None:
                    with self.db.atomic():
                        self._restore_automerge()
                return
            with self.db.atomic():
                for name in self.deferred():
                    self.db.conn.execute(DEFERRABLE_INDEXES[name])
                self._restore_automerge()
                self.db.conn.execute("DELETE FROM meta WHERE key = ?", (DEFERRED_META,))

    def _restore_automerge(self) -> None:
        """FTS5's default merging of the chunk keyword list back (`defer_indexes` turned it off), its setting's row
        removed: the index holds no trace of it (as if never set)."""
        conn = self.db.conn
        if self.db.scalar("SELECT 1 FROM chunks_fts_config WHERE k = 'automerge'") is not None:
            conn.execute(KEYWORD_AUTOMERGE_DEFAULT)  # (every connection reads its settings again: a new cookie)
            conn.execute("DELETE FROM chunks_fts_config WHERE k = 'automerge'")  # (the default when absent)

    def touch_file(self, path: str, mtime_ns: int, size: int) -> None:
        with self.db.atomic():
            self.db.conn.execute("UPDATE files SET mtime_ns = ?, size = ? WHERE path = ?", (mtime_ns, size, path))

    def delete_file(self, path: str) -> bool:
        with self.db.lock:
            with self.db.atomic():
                existed = bool(self.db.scalar("SELECT 1 FROM files WHERE path = ?", (path,)))
                self.db.conn.execute("DELETE FROM chunks WHERE path = ?", (path,))
                self._drop_file_text(path)
                self.mentions.drop_mentions(path)
                self.db.conn.execute("DELETE FROM files WHERE path = ?", (path,))
                self.vectors.journal_written()
            self.vectors.after_write()
        return existed

    def clear(self) -> None:
        """Forget every file, chunk and vector (the embedding cache and logs stay: they cost money)."""
        with self.db.atomic():
            self.db.conn.execute("DELETE FROM chunks")
            self.vectors.forget_journal()
            self.db.conn.execute("DELETE FROM files_fts")
            self.mentions.clear_mentions()
            self.db.conn.execute("DELETE FROM files")
            self.db.conn.execute("DELETE FROM meta WHERE key = ?", (FILE_TEXT_META,))
        self._filled_to = 0
        self.vectors.invalidate()

    def file_text_pending(self) -> bool:
        """Some files may lack their whole-file keyword row (a first index's, until `fill_file_text` is done)."""
        return self.db.scalar("SELECT 1 FROM meta WHERE key = ?", (FILE_TEXT_META,)) is not None

    def fill_file_text(self, max_files: int = FILL_FILES) -> int:
        """Give up to `max_files` stored files without a whole-file keyword row theirs, in one transaction, from their
        stored chunks (the row `_write_file_row` writes: the same words); returns how many (0: none left, and the
        record that some lack it is removed). A file written meanwhile has its row already and is left alone."""
        with self.db.lock:
            if not self.file_text_pending():
                return 0
            with self.db.atomic():
                # (each file's passages joined by SQLite, in chunk order; its identifier and CJK words only where any)
                files = list(self.db.conn.execute(_FILL_SELECT, (self._filled_to, max_files)))
                if not files and self._filled_to:  # (the whole table once more before the record goes: a batch
                    # that rolled back at its commit, a full disk, left files behind the mark)
                    self._filled_to = 0
                    files = list(self.db.conn.execute(_FILL_SELECT, (0, max_files)))
                if not files:
                    self.db.conn.execute("DELETE FROM meta WHERE key = ?", (FILE_TEXT_META,))
                    return 0
                rows = [(rowid, _joined_file_text(texts, idents, cjk)) for rowid, texts, idents, cjk in files]
                self.db.conn.executemany("INSERT INTO files_fts(rowid, text) VALUES (?, ?)", rows)
            self._filled_to = files[-1][0]  # (once committed)
            return len(files)

    def merge_keywords(self, pages: int) -> bool:
        """One step of merging each keyword list (chunks_fts, files_fts) into one b-tree: FTS5's 'merge' command,
        about `pages` pages written in one transaction (a negative count: every segment put on one level and
        merged, whatever FTS5's usermerge says). True while work is left; False once both are one b-tree, and the
        index records it (KEYWORDS_MERGED_META: nothing is done again until a first index). FTS5 reports work done
        as a rise of two or more in the connection's total changes."""
        with self.db.lock:
            if self.db.scalar("SELECT 1 FROM meta WHERE key = ?", (KEYWORDS_MERGED_META,)) is not None:
                return False
            conn = self.db.conn
            with self.db.atomic():
                for table in ("chunks_fts", "files_fts"):
                    before = conn.total_changes()
                    conn.execute(f"INSERT INTO {table}({table}, rank) VALUES ('merge', ?)", (-abs(int(pages)),))
                    if conn.total_changes() - before >= 2:
                        return True
                conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, '1')", (KEYWORDS_MERGED_META,))
            return False

    def replace_files(self, files: Sequence[FileWrite]) -> None:
        """Several files' `replace_file` (no vectors) in one transaction; the chunks of those with none stored go
        in together, a few statements for the batch: FTS5 writes its pending terms out at each statement (its
        savepoint), so the keyword index gets one segment per batch instead of one per file."""
        if not files:
            return
        with self.db.lock, self.db.atomic():
            paths = json.dumps([f.record.path for f in files])
            stored = {
                r[0]
                for r in self.db.conn.execute(
                    "SELECT DISTINCT path FROM chunks WHERE path IN (SELECT value FROM json_each(?))", (paths,)
                )
            }
            fresh = [f for f in files if f.record.path not in stored]
            # each chunk's columns as written, once: (path, cjk_words, *its fields)
            values = [[(f.record.path, _cjk(ch) if f.cjk else "", *_values(ch)) for ch in f.chunks] for f in fresh]
            self._insert_rows([v for vs in values for v in vs], returning=False)
            for f, vs in zip(fresh, values, strict=True):  # (the whole-file keywords after all the chunks': together)
                self._write_file_row(f.record, f.chunks, [v[1] for v in vs])
            self.mentions.write_many([(f.record.path, f.mentions) for f in fresh if f.mentions is not None])
            for f in files:
                if f.record.path in stored:  # chunks to keep or replace: the one-file path
                    self.replace_file(f.record, f.chunks, mentions=f.mentions)
        # (our own commit: SQLite's data_version does not count it, so caches keyed on Database.any_version (the
        # keyword bound's document frequencies, filters) would keep what they read before the batch)
        self.vectors.after_write()

    def _insert_rows(self, rows: Sequence[tuple], returning: bool = True) -> dict[tuple[str, int], int]:
        """Insert new chunk rows, each (path, cjk_words, *its _ROW_FIELDS), many to a statement; returns their ids
        by (path, chunk index) (`returning`; else nothing)."""
        ids: dict[tuple[str, int], int] = {}
        for start in range(0, len(rows), INSERT_ROWS):
            part = rows[start : start + INSERT_ROWS]
            sql = _INSERT_HEAD + ", ".join([_INSERT_ROW] * len(part))
            params = list(chain.from_iterable(part))
            if not returning:
                self.db.conn.execute(sql, params)
                continue
            got = self.db.conn.execute(sql + " RETURNING id, path, chunk_index", params)
            ids.update(((path, index), chunk_id) for chunk_id, path, index in got)
        return ids

    def _write_file_row(self, record: FileRecord, chunks: Sequence[ChunkRow], cjk: Sequence[str]) -> None:
        self._drop_file_text(record.path)
        self.db.conn.execute(_INSERT_FILE, record.file_row(time.time(), len(chunks)))
        if self.defer_file_text:  # (a first index's text phase: `fill_file_text` adds it after)
            return
        self.db.conn.execute(
            "INSERT INTO files_fts(rowid, text) VALUES (?, ?)",
            (
                self.db.conn.last_insert_rowid(),
                _file_text([ch.text for ch in chunks], [ch.ident_words for ch in chunks], cjk),
            ),
        )

    def _drop_file_text(self, path: str) -> None:
        """Remove a file's row from the file-level keyword index (before its files row goes or is replaced)."""
        rowid = self.db.scalar("SELECT rowid FROM files WHERE path = ?", (path,))
        if rowid is not None:
            self.db.conn.execute("DELETE FROM files_fts WHERE rowid = ?", (rowid,))


def _file_text(texts: Sequence[str], idents: Sequence[str | None], cjk: Sequence[str | None]) -> str:
    """A file's whole-file keyword text from its chunks' texts, identifier words and CJK words (in chunk order): the
    texts, then the distinct parts of its camelCase identifiers (storage.base.ident_lines: "timeout" finds
    `setTimeout`), then its CJK bigrams."""
    idents_seen = dict.fromkeys(w for iw in idents if iw for w in iw.split("\n"))
    return "\n".join([*(t or "" for t in texts), *idents_seen, *(w for w in cjk if w)])


def _joined_file_text(texts: str | None, idents: str | None, cjk: str | None) -> str:
    """`_file_text` from a file's passages, identifier words and CJK words as `_FILL_SELECT` joins them (each by a
    newline, in chunk order; the last two of the passages holding any): the same text."""
    if texts is None:  # (a file without passages)
        return ""
    parts = [texts, *dict.fromkeys(idents.split("\n"))] if idents else [texts]
    return "\n".join([*parts, cjk] if cjk else parts)


_cjk_search: Callable[[str], object] | None = None


def _cjk(ch: ChunkRow) -> str:
    """A chunk's `cjk_words` (storage.schema.chunk_cjk_words); "" at once for text without a CJK character (most of
    it: prose with curly quotes or dashes is not ASCII, and joining its heading path to its text to look cost ~4 us a
    chunk, benchmarks row S22)."""
    global _cjk_search
    if _cjk_search is None:  # (markdown.terms on first use: not on a one-shot CLI search's path)
        from ...markdown.terms import CJK_RE

        _cjk_search = CJK_RE.search
    text, path = ch.text or "", ch.heading_path or ""
    if (text.isascii() or not _cjk_search(text)) and (path.isascii() or not _cjk_search(path)):
        return ""
    return chunk_cjk_words(ch.heading_path, ch.text)

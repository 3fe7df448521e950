"""What the SQLite index holds (SPEC 5): its schema and migrations, and how a connection is opened (sqlite-vec
loaded, our SQL functions). The records written and read are the interface's (storage/base.py); a filter's SQL
condition is compiled in `filters.py`; `store.py` owns the connection."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import apsw

SCHEMA_VERSION = 6


FTS_TOKENIZE = "porter unicode61 remove_diacritics 2"


# the embedding cache: its columns and its key (also what CACHE_AS_ROWID_TABLE converts an older layout to)
_CACHE_COLUMNS = (
    "id INTEGER PRIMARY KEY, model TEXT NOT NULL, content_hash TEXT NOT NULL, vector BLOB NOT NULL, created REAL"
)
_CACHE_KEY = "embedding_cache_key ON embedding_cache(model, content_hash)"

_MIGRATIONS: list[str] = [
    # 1: initial schema
    f"""
    CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
    CREATE TABLE IF NOT EXISTS files(
        path TEXT PRIMARY KEY, content_hash TEXT NOT NULL, mtime_ns INTEGER NOT NULL, size INTEGER NOT NULL,
        file_type TEXT, encoding TEXT, last_indexed REAL, chunk_count INTEGER DEFAULT 0,
        entity_type TEXT, entity_name TEXT, display_name TEXT, aliases TEXT, book_id TEXT, chapter_id TEXT,
        visibility TEXT, corpus TEXT, warning TEXT);
    CREATE TABLE IF NOT EXISTS chunks(
        id INTEGER PRIMARY KEY, path TEXT NOT NULL, chunk_index INTEGER NOT NULL, kind TEXT,
        section_heading TEXT, heading_path TEXT, start_line INTEGER, end_line INTEGER, content_hash TEXT,
        preview TEXT, token_count INTEGER, text TEXT, file_type TEXT, entity_type TEXT, entity_name TEXT,
        book_id TEXT, chapter_id TEXT, chapter_num INTEGER, visibility TEXT, corpus TEXT,
        UNIQUE(path, chunk_index));
    CREATE INDEX IF NOT EXISTS chunks_hash ON chunks(content_hash);
    CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
        text, heading_path, content='chunks', content_rowid='id', tokenize='{FTS_TOKENIZE}');
    CREATE TRIGGER IF NOT EXISTS chunks_ai AFTER INSERT ON chunks BEGIN
        INSERT INTO chunks_fts(rowid, text, heading_path) VALUES (new.id, new.text, new.heading_path);
    END;
    CREATE TRIGGER IF NOT EXISTS chunks_ad AFTER DELETE ON chunks BEGIN
        INSERT INTO chunks_fts(chunks_fts, rowid, text, heading_path)
        VALUES ('delete', old.id, old.text, old.heading_path);
    END;
    CREATE TRIGGER IF NOT EXISTS chunks_au AFTER UPDATE ON chunks BEGIN
        INSERT INTO chunks_fts(chunks_fts, rowid, text, heading_path)
        VALUES ('delete', old.id, old.text, old.heading_path);
        INSERT INTO chunks_fts(rowid, text, heading_path) VALUES (new.id, new.text, new.heading_path);
    END;
    CREATE TABLE IF NOT EXISTS embedding_cache({_CACHE_COLUMNS});
    CREATE UNIQUE INDEX IF NOT EXISTS {_CACHE_KEY};
    CREATE TABLE IF NOT EXISTS embedding_log(
        id INTEGER PRIMARY KEY, timestamp REAL, provider TEXT, model TEXT, tokens INTEGER, chunks INTEGER,
        cost_usd REAL);
    CREATE TABLE IF NOT EXISTS search_log(
        id INTEGER PRIMARY KEY, timestamp REAL, query TEXT, source TEXT, mode TEXT, results INTEGER,
        top_score REAL, elapsed_ms REAL);
    CREATE VIEW IF NOT EXISTS search_analytics AS SELECT * FROM search_log WHERE source != 'eval';
    """,
    # 2: a file-level keyword index (whole-file BM25: retrieval/search.py's lexical signal for short files), rowid =
    # files.rowid; contentless (the text lives in chunks) and filled from the chunks already indexed.
    f"""
    CREATE VIRTUAL TABLE IF NOT EXISTS files_fts USING fts5(
        text, content='', contentless_delete=1, tokenize='{FTS_TOKENIZE}');
    INSERT INTO files_fts(rowid, text)
        SELECT f.rowid, (SELECT group_concat(c.text, char(10) ORDER BY c.chunk_index) FROM chunks c
                         WHERE c.path = f.path)
        FROM files f;
    CREATE INDEX IF NOT EXISTS chunks_heading ON chunks(trim(ltrim(section_heading, '#')) COLLATE NOCASE);
    """,
    # 3: a chunk row whose text stays (an edit elsewhere in its file moved its lines) is updated in place:
    # its keywords are re-indexed only when its text or heading path changes
    """
    DROP TRIGGER IF EXISTS chunks_au;
    CREATE TRIGGER chunks_au AFTER UPDATE OF text, heading_path ON chunks BEGIN
        INSERT INTO chunks_fts(chunks_fts, rowid, text, heading_path)
        VALUES ('delete', old.id, old.text, old.heading_path);
        INSERT INTO chunks_fts(rowid, text, heading_path) VALUES (new.id, new.text, new.heading_path);
    END;
    """,
    # 4: a third keyword column, the parts of the chunk's camelCase identifiers (`setTimeout` -> `set timeout`,
    # markdown.chunker.Chunk.ident_words), so "timeout" finds `setTimeout`. Rows indexed before are NULL there until the
    # chunker version change (5) re-chunks every file; a kept row then gets its column, and its keywords again.
    f"""
    ALTER TABLE chunks ADD COLUMN ident_words TEXT DEFAULT '';
    DROP TRIGGER IF EXISTS chunks_ai;
    DROP TRIGGER IF EXISTS chunks_ad;
    DROP TRIGGER IF EXISTS chunks_au;
    DROP TABLE IF EXISTS chunks_fts;
    CREATE VIRTUAL TABLE chunks_fts USING fts5(
        text, heading_path, ident_words, content='chunks', content_rowid='id', tokenize='{FTS_TOKENIZE}');
    CREATE TRIGGER chunks_ai AFTER INSERT ON chunks BEGIN
        INSERT INTO chunks_fts(rowid, text, heading_path, ident_words)
        VALUES (new.id, new.text, new.heading_path, new.ident_words);
    END;
    CREATE TRIGGER chunks_ad AFTER DELETE ON chunks BEGIN
        INSERT INTO chunks_fts(chunks_fts, rowid, text, heading_path, ident_words)
        VALUES ('delete', old.id, old.text, old.heading_path, old.ident_words);
    END;
    CREATE TRIGGER chunks_au AFTER UPDATE OF text, heading_path, ident_words ON chunks BEGIN
        INSERT INTO chunks_fts(chunks_fts, rowid, text, heading_path, ident_words)
        VALUES ('delete', old.id, old.text, old.heading_path, old.ident_words);
        INSERT INTO chunks_fts(rowid, text, heading_path, ident_words)
        VALUES (new.id, new.text, new.heading_path, new.ident_words);
    END;
    INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild');
    """,
    # 5: where each entity is mentioned (retrieval/mentions.py), written with a file's chunks; `mention_files` records
    # the
    # entity names a file's mentions were found with (a file found with other names is scanned again) and
    # its frontmatter `pov`. An index made before has no rows here: the next run or refresh fills them.
    """
    CREATE TABLE IF NOT EXISTS mentions(
        path TEXT NOT NULL, entity TEXT NOT NULL, line INTEGER NOT NULL, col INTEGER NOT NULL,
        end_col INTEGER NOT NULL, surface TEXT);
    CREATE INDEX IF NOT EXISTS mentions_entity ON mentions(entity, path);
    CREATE INDEX IF NOT EXISTS mentions_path ON mentions(path);
    CREATE TABLE IF NOT EXISTS mention_files(path TEXT PRIMARY KEY, names_key TEXT NOT NULL, pov TEXT);
    """,
    # 6: a fourth keyword column, the chunk's CJK runs as overlapping character pairs (markdown.terms.cjk_bigrams,
    # written with the row by storage/file_writes.py), so a Chinese or Japanese word is found inside a run. Rows
    # indexed before get it here (saipling_cjk, registered by connect(): "" for a chunk without CJK, which is not
    # rewritten), and so do the whole-file keywords of the files holding CJK.
    f"""
    ALTER TABLE chunks ADD COLUMN cjk_words TEXT DEFAULT '';
    DROP TRIGGER IF EXISTS chunks_ai;
    DROP TRIGGER IF EXISTS chunks_ad;
    DROP TRIGGER IF EXISTS chunks_au;
    UPDATE chunks SET cjk_words = saipling_cjk(heading_path, text) WHERE saipling_cjk(heading_path, text) != '';
    DROP TABLE IF EXISTS chunks_fts;
    CREATE VIRTUAL TABLE chunks_fts USING fts5(
        text, heading_path, ident_words, cjk_words, content='chunks', content_rowid='id', tokenize='{FTS_TOKENIZE}');
    CREATE TRIGGER chunks_ai AFTER INSERT ON chunks BEGIN
        INSERT INTO chunks_fts(rowid, text, heading_path, ident_words, cjk_words)
        VALUES (new.id, new.text, new.heading_path, new.ident_words, new.cjk_words);
    END;
    CREATE TRIGGER chunks_ad AFTER DELETE ON chunks BEGIN
        INSERT INTO chunks_fts(chunks_fts, rowid, text, heading_path, ident_words, cjk_words)
        VALUES ('delete', old.id, old.text, old.heading_path, old.ident_words, old.cjk_words);
    END;
    CREATE TRIGGER chunks_au AFTER UPDATE OF text, heading_path, ident_words, cjk_words ON chunks BEGIN
        INSERT INTO chunks_fts(chunks_fts, rowid, text, heading_path, ident_words, cjk_words)
        VALUES ('delete', old.id, old.text, old.heading_path, old.ident_words, old.cjk_words);
        INSERT INTO chunks_fts(rowid, text, heading_path, ident_words, cjk_words)
        VALUES (new.id, new.text, new.heading_path, new.ident_words, new.cjk_words);
    END;
    INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild');
    CREATE TEMP TABLE cjk_files AS SELECT f.rowid AS id, f.path AS path FROM files f
        WHERE EXISTS (SELECT 1 FROM chunks c WHERE c.path = f.path AND c.cjk_words != '');
    DELETE FROM files_fts WHERE rowid IN (SELECT id FROM cjk_files);
    INSERT INTO files_fts(rowid, text)
        SELECT t.id,
            coalesce((SELECT group_concat(c.text, char(10) ORDER BY c.chunk_index) FROM chunks c
                      WHERE c.path = t.path), '')
            || char(10) || coalesce((SELECT group_concat(c.ident_words, char(10)) FROM chunks c
                                     WHERE c.path = t.path), '')
            || char(10) || coalesce((SELECT group_concat(c.cjk_words, char(10)) FROM chunks c
                                     WHERE c.path = t.path), '')
        FROM cjk_files t;
    DROP TABLE cjk_files;
    """,
]


# The columns a migration (by its number, 1-based) adds: a statement left out when the table has it already
ADDED_COLUMNS: dict[int, list[tuple[str, str]]] = {
    4: [("chunks", "ALTER TABLE chunks ADD COLUMN ident_words TEXT DEFAULT '';")],
    6: [("chunks", "ALTER TABLE chunks ADD COLUMN cjk_words TEXT DEFAULT '';")],
}


# The embedding cache as a rowid table: rows appended, its key in a small unique index. Index files written
# before 2026-11-24 hold it as `WITHOUT ROWID`, keyed by (model, content hash): each 1.5 KB vector then lived
# inside a B-tree ordered by a random hash, so every round of new vectors split and rewrote pages all over it
# (236 MB written to store 26 MB of vectors for a 1,001-note vault; 109 MB as a rowid table). A writable open
# converts such a table (storage.sqlite.store.SqliteStore._upgrade_layout). Not a numbered migration: every
# query reads and writes both layouts alike, so a read-only open and an older saipling keep using the index as it is.
CACHE_AS_ROWID_TABLE = f"""
    CREATE TABLE embedding_cache_rows({_CACHE_COLUMNS});
    INSERT INTO embedding_cache_rows(model, content_hash, vector, created)
        SELECT model, content_hash, vector, created FROM embedding_cache;
    DROP TABLE embedding_cache;
    ALTER TABLE embedding_cache_rows RENAME TO embedding_cache;
    CREATE UNIQUE INDEX {_CACHE_KEY};
"""


CHUNK_COLUMNS = (
    "id",
    "path",
    "chunk_index",
    "kind",
    "section_heading",
    "heading_path",
    "start_line",
    "end_line",
    "content_hash",
    "preview",
    "token_count",
    "text",
    "file_type",
    "entity_type",
    "entity_name",
    "book_id",
    "chapter_id",
    "chapter_num",
    "visibility",
    "corpus",
)


def _vec0_path() -> str:
    """sqlite-vec's loadable extension, found without importing the package (its __init__ imports numpy)."""
    spec = importlib.util.find_spec("sqlite_vec")
    if spec is None or spec.origin is None:
        import sqlite_vec  # raises the clear ImportError

        return sqlite_vec.loadable_path()
    return str(Path(spec.origin).parent / "vec0")


def connect(path: Path | str, readonly: bool = False, immutable: bool = False) -> apsw.Connection:
    """A connection with sqlite-vec loaded and our SQL functions registered (read-only: never writes, and
    `immutable` also takes no locks: for a folder where SQLite cannot create its -shm file)."""
    # SQLITE_OPEN_NOFOLLOW: a link anywhere on the path is refused (CantOpenError), never written through; the
    # store passes a path with none (storage.sqlite.index_files.sqlite_path), SQLite opens its -wal/-shm with
    # O_NOFOLLOW itself
    if readonly:
        uri = Path(path).absolute().as_uri() + ("?immutable=1" if immutable else "?mode=ro")
        flags = apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI | apsw.SQLITE_OPEN_NOFOLLOW
        conn = apsw.Connection(uri, flags=flags)
    else:
        flags = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE | apsw.SQLITE_OPEN_NOFOLLOW
        conn = apsw.Connection(str(path), flags=flags)
    conn.enable_load_extension(True)
    conn.load_extension(_vec0_path())
    conn.enable_load_extension(False)
    conn.set_busy_timeout(10_000)
    from ...paths import glob_match, nfc

    conn.create_scalar_function("saipling_glob", lambda p, g: 1 if glob_match(p, g) else 0, 2, deterministic=True)
    conn.create_scalar_function("saipling_nfc", lambda v: nfc(v) if isinstance(v, str) else v, 1, deterministic=True)
    # Python's lower case for every script (SQLite's lower() folds A-Z only: `Персонаж`, `Émile` stayed as written)
    conn.create_scalar_function(
        "saipling_lower", lambda v: v.lower() if isinstance(v, str) else v, 1, deterministic=True
    )
    conn.create_scalar_function("saipling_cjk", chunk_cjk_words, 2, deterministic=True)  # (migration 6)
    return conn


def chunk_cjk_words(heading_path: str | None, text: str | None) -> str:
    """A chunk's `cjk_words` keyword column: the CJK bigrams of its heading path and text."""
    global _cjk_bigrams
    if _cjk_bigrams is None:  # (imported on first use, once: an import statement per chunk cost ~5 us each)
        from ...markdown.terms import cjk_bigrams

        _cjk_bigrams = cjk_bigrams
    return _cjk_bigrams(f"{heading_path or ''}\n{text or ''}")


_cjk_bigrams: Callable[[str], str] | None = None


VECTORS_CHECKED_META = "vectors_checked"  # meta key: stored vectors were scanned for NaN/Inf/zero rows

"""What the SQLite index holds (SPEC 5): its schema and migrations, and how a connection is opened (sqlite-vec
loaded, our SQL functions). The records written and read are the interface's (storage/base.py); a filter's SQL
condition is compiled in `filters.py`; `store.py` owns the connection."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import apsw

SCHEMA_VERSION = 11
BUSY_TIMEOUT_MS = 10_000  # how long a write waits for another process's transaction


FTS_TOKENIZE = "porter unicode61 remove_diacritics 2"


# the embedding cache: its columns and its key (also what CACHE_AS_ROWID_TABLE converts an older layout to)
_CACHE_COLUMNS = (
    "id INTEGER PRIMARY KEY, model TEXT NOT NULL, content_hash TEXT NOT NULL, vector BLOB NOT NULL, created REAL"
)
_CACHE_KEY = "embedding_cache_key ON embedding_cache(model, content_hash)"

VISIBILITY_INDEX = "chunks_visibility"  # (migration 11)
# A chunk of the default level, `public`, holds NULL in `visibility` (the filters read NULL as `public`: filters.py),
# so the partial index of the chunks that set a level (VISIBILITY_INDEX) holds only the others: with every chunk
# holding `public` it had an entry per chunk (15 MB at a million chunks, benchmarks/README.md S18). Written through
# VISIBILITY_STORED (a value as SQL: `public` becomes NULL), read back through VISIBILITY_READ (NULL is `public`), so
# every row read is as before. Rows an older saipling wrote keep their `public` until their file is written again.
VISIBILITY_STORED = "nullif(?, 'public')"
VISIBILITY_READ = "coalesce(visibility, 'public')"
POSITION = 1 << 32  # (a line and a column as one integer, line * POSITION + col: columns are below 2**32)
# The change journal of the vectors (migration 8): one row per chunk whose vector may have changed. A chunk counts
# when its content hash has a cache row under the index's key; a cache row of that key counts for every chunk of
# its hash. (INSERT OR REPLACE into the cache fires the insert trigger only: the row it replaces had the same key.)
_HAS_VECTOR = (
    "EXISTS (SELECT 1 FROM embedding_cache e WHERE e.model = (SELECT value FROM meta WHERE key = 'vector_key')"
    " AND e.content_hash = {row}.content_hash)"
)
_INDEX_KEY = "(SELECT value FROM meta WHERE key = 'vector_key')"
JOURNAL_SQL = f"""
    CREATE TABLE IF NOT EXISTS vector_changes(seq INTEGER PRIMARY KEY AUTOINCREMENT, chunk_id INTEGER NOT NULL);
    CREATE TRIGGER IF NOT EXISTS chunks_vector_ai AFTER INSERT ON chunks WHEN {_HAS_VECTOR.format(row="new")} BEGIN
        INSERT INTO vector_changes(chunk_id) VALUES (new.id);
    END;
    CREATE TRIGGER IF NOT EXISTS chunks_vector_ad AFTER DELETE ON chunks WHEN {_HAS_VECTOR.format(row="old")} BEGIN
        INSERT INTO vector_changes(chunk_id) VALUES (old.id);
    END;
    CREATE TRIGGER IF NOT EXISTS chunks_vector_au AFTER UPDATE OF content_hash ON chunks
        WHEN old.content_hash IS NOT new.content_hash BEGIN
        INSERT INTO vector_changes(chunk_id) VALUES (new.id);
    END;
    CREATE TRIGGER IF NOT EXISTS cache_vector_ai AFTER INSERT ON embedding_cache WHEN new.model = {_INDEX_KEY} BEGIN
        INSERT INTO vector_changes(chunk_id) SELECT id FROM chunks WHERE content_hash = new.content_hash;
    END;
    CREATE TRIGGER IF NOT EXISTS cache_vector_ad AFTER DELETE ON embedding_cache WHEN old.model = {_INDEX_KEY} BEGIN
        INSERT INTO vector_changes(chunk_id) SELECT id FROM chunks WHERE content_hash = old.content_hash;
    END;
    CREATE TRIGGER IF NOT EXISTS cache_vector_au AFTER UPDATE ON embedding_cache
        WHEN old.model = {_INDEX_KEY} OR new.model = {_INDEX_KEY} BEGIN
        INSERT INTO vector_changes(chunk_id)
            SELECT id FROM chunks WHERE content_hash IN (old.content_hash, new.content_hash);
    END;
"""
# (an embedding cache converted to a rowid table drops them first: a trigger naming a missing table fails the rename)
DROP_JOURNAL_TRIGGERS = "".join(
    f"DROP TRIGGER IF EXISTS {name};"
    for name in (
        "chunks_vector_ai",
        "chunks_vector_ad",
        "chunks_vector_au",
        "cache_vector_ai",
        "cache_vector_ad",
        "cache_vector_au",
    )
)
VECTOR_KEY_META = "vector_key"  # meta key: the cache key the index's vectors are stored under (None: no vectors)
# meta key: the journal's floor: a matrix older than it is read again; rows below it are deleted (since migration 10
# the row at the floor is kept: its tag still proves the history of a snapshot taken there; before, it was deleted)
JOURNAL_FLOOR_META = "vector_changes_floor"
# meta key: how the cache's vectors are stored (migration 9): "float16" (little-endian half floats), absent: float32.
# One format for every row of an index: the migration converts them all in one transaction and records it.
VECTOR_FORMAT_META = "vector_format"
FLOAT16 = "float16"
# meta key: a random id of this index file, made by migration 9: the vector snapshot beside it
# (storage/sqlite/snapshot.py) is of this file, not of one deleted and built again at the same path
INDEX_ID_META = "index_id"


def float16_blob(blob: bytes) -> bytes:
    """A float32 cache vector (little-endian) as float16; empty when it is not float32 or not usable as float16
    (NaN, Inf, all zero, or a value past float16's range): the row is dropped and its chunks embedded again."""
    import numpy as np

    if not isinstance(blob, bytes) or not blob or len(blob) % 4:
        return b""
    with np.errstate(over="ignore"):
        half = np.frombuffer(blob, dtype="<f4").astype("<f2")
    if not np.isfinite(half).all() or not half.any():
        return b""
    return half.tobytes()


def vectors_to_float16(conn: apsw.Connection) -> None:
    """Migration 9's data step: every cached vector rewritten as float16 into a new table (rows packed twice as
    densely; SQLite streams the copy, no vector is held in memory beyond its row), the old table dropped, the
    format recorded; nothing is embedded again. The journal's triggers are dropped for the copy and made again;
    every process's matrix is read again (a marker row, then the floor raised past it)."""
    fmt = conn.execute("SELECT value FROM meta WHERE key = ?", (VECTOR_FORMAT_META,)).fetchall()
    if fmt and fmt[0][0] == FLOAT16:
        return
    conn.execute(DROP_JOURNAL_TRIGGERS)
    conn.execute(
        f"""CREATE TABLE embedding_cache_f16({_CACHE_COLUMNS});
        INSERT INTO embedding_cache_f16(model, content_hash, vector, created)
            SELECT model, content_hash, saipling_f16(vector), created FROM embedding_cache;
        DELETE FROM embedding_cache_f16 WHERE length(vector) = 0;
        DROP TABLE embedding_cache;
        ALTER TABLE embedding_cache_f16 RENAME TO embedding_cache;
        CREATE UNIQUE INDEX {_CACHE_KEY};"""
    )
    conn.execute(JOURNAL_SQL)
    conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (VECTOR_FORMAT_META, FLOAT16))
    conn.execute("INSERT INTO vector_changes(chunk_id) VALUES (-1)")
    seq = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'vector_changes'").fetchall()
    conn.execute(
        "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (JOURNAL_FLOOR_META, str(seq[0][0] if seq else 0))
    )


# The journal's columns since migration 10: every row carries a random tag, so a row at a seq is this history's and no
# other's (an index.db restored from a backup and then written past a seq has other rows there, with other tags): the
# vector snapshot records the tag of the row at its seq and is used only while that row is there with that tag
JOURNAL_COLUMNS = (
    "seq INTEGER PRIMARY KEY AUTOINCREMENT, chunk_id INTEGER NOT NULL, tag INTEGER NOT NULL DEFAULT (random())"
)


def tag_the_journal(conn: apsw.Connection) -> None:
    """Migration 10's step: the journal `vector_changes` made again with a random tag per row (its rows, seqs and
    high-water mark kept: a searching process's matrix is not read again; triggers dropped and made again). The
    migration's SQL then appends a marker row, so that the seq a matrix reflects now has a row to prove it."""
    columns = [str(r[1]) for r in conn.execute("PRAGMA table_info(vector_changes)")]
    if "tag" in columns:
        return
    high = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'vector_changes'").fetchall()
    conn.execute(DROP_JOURNAL_TRIGGERS)
    conn.execute(
        f"""CREATE TABLE vector_changes_tagged({JOURNAL_COLUMNS});
        INSERT INTO vector_changes_tagged(seq, chunk_id) SELECT seq, chunk_id FROM vector_changes;
        DROP TABLE vector_changes;
        ALTER TABLE vector_changes_tagged RENAME TO vector_changes;"""
    )
    top = conn.execute("SELECT max(seq) FROM vector_changes").fetchall()[0][0]
    conn.execute("DELETE FROM sqlite_sequence WHERE name IN ('vector_changes', 'vector_changes_tagged')")
    conn.execute(
        "INSERT INTO sqlite_sequence(name, seq) VALUES ('vector_changes', ?)",
        (max(int(high[0][0]) if high else 0, int(top or 0)),),
    )
    conn.execute(JOURNAL_SQL)  # (the triggers; the table exists)


def move_vectors_into_cache(conn: apsw.Connection) -> int:
    """Migration 8's data step: the index's key recorded, vectors only vec0 held copied into the cache (the rows of
    the index's model stored before the key carried the size renamed to the key), vec0 dropped. Nothing is
    embedded again. Returns the vectors copied."""
    meta = dict(conn.execute("SELECT key, value FROM meta WHERE key IN ('model', 'dimensions')").fetchall())
    has_vec0 = bool(conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'chunks_vec'").fetchall()[0][0])
    model, dims = meta.get("model"), int(meta.get("dimensions") or 0)
    copied = 0
    if has_vec0 and model is not None and dims > 0:
        key = f"{model}@{dims}"  # (storage.base.cache_key)
        conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (VECTOR_KEY_META, key))
        conn.execute(
            "UPDATE OR IGNORE embedding_cache SET model = ? WHERE model = ? AND length(vector) = ?",
            (key, model, dims * 4),
        )
        # (only the chunks the cache lacks: a join of vec0 with chunks looks vec0 up per chunk, 72 s for 55k)
        missing = {
            int(cid): h
            for cid, h in conn.execute(
                "SELECT c.id, c.content_hash FROM chunks c WHERE NOT EXISTS (SELECT 1 FROM embedding_cache e"
                " WHERE e.model = ? AND e.content_hash = c.content_hash)",
                (key,),
            )
        }
        if len(missing) > 1000:  # one pass over vec0 (vec0 answers `IN (subquery)` with a full scan anyway)
            found = ((cid, blob) for cid, blob in conn.execute("SELECT chunk_id, embedding FROM chunks_vec"))
        else:
            found = (
                (cid, blob)
                for one in missing
                for cid, blob in conn.execute("SELECT chunk_id, embedding FROM chunks_vec WHERE chunk_id = ?", (one,))
            )
        rows = [(key, missing[int(cid)], blob) for cid, blob in found if int(cid) in missing]
        conn.executemany(
            "INSERT OR IGNORE INTO embedding_cache(model, content_hash, vector, created) VALUES (?, ?, ?, unixepoch())",
            rows,
        )
        copied = len(rows)
    if has_vec0:
        conn.execute("DROP TABLE chunks_vec")
    return copied


# Python steps a migration (by its number, 1-based) runs first, in its transaction
MIGRATION_STEPS = {8: move_vectors_into_cache, 9: vectors_to_float16, 10: tag_the_journal}


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
    # 7: per file and entity, how many mentions and the first and last (storage/sqlite/mentions.py keeps them with
    # the file's mentions), so an entity's mentions are answered from one row per file (retrieval/mentions.py);
    # filled here from the mentions an index holds already. `chunks_chapter` answers "the chapter number of a file"
    # (asked per file by the mentions and chapter reads) from the index alone, without reading a chunk's text.
    f"""
    CREATE INDEX IF NOT EXISTS chunks_chapter ON chunks(path, chapter_num);
    CREATE TABLE IF NOT EXISTS mention_counts(
        entity TEXT NOT NULL, path TEXT NOT NULL, count INTEGER NOT NULL, first_line INTEGER NOT NULL,
        first_col INTEGER NOT NULL, last_line INTEGER NOT NULL, last_col INTEGER NOT NULL,
        PRIMARY KEY (entity, path)) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS mention_counts_path ON mention_counts(path);
    DELETE FROM mention_counts;
    INSERT INTO mention_counts(entity, path, count, first_line, first_col, last_line, last_col)
        SELECT entity, path, n, lo / {POSITION}, lo % {POSITION}, hi / {POSITION}, hi % {POSITION}
        FROM (SELECT entity, path, count(*) AS n, min(line * {POSITION} + col) AS lo, max(line * {POSITION} + col) AS hi
              FROM mentions GROUP BY entity, path);
    """,
    # 8: vectors stored once (issue 34): the embedding cache is the one table of vectors; a chunk's vector is the
    # cache row of the index's key (meta `vector_key`: storage.base.cache_key of its model and size) and its content
    # hash, so a renamed, moved or re-chunked passage keeps its vector. sqlite-vec's vec0 table `chunks_vec`, which
    # held a second copy of every vector, is emptied into the cache and dropped by `move_vectors_into_cache`
    # (run before this SQL, in the same transaction). `vector_changes` is the change journal a searching process
    # follows to patch its matrix (storage/sqlite/vectors.py): the triggers below append the id of every chunk
    # whose vector may have changed, in the writer's own transaction; `seq` is never reused (AUTOINCREMENT), and
    # writers delete old rows (meta `vector_changes_floor`: the highest seq deleted).
    JOURNAL_SQL,
    # 9: vectors on disk as float16 (issue 34): half the bytes of float32 (the cache was 6.5x the prose it indexes
    # at 55k chunks), recall@10 unchanged (benchmarks/README.md S6). `vectors_to_float16` converts the rows (run
    # before this SQL, same transaction) and records meta `vector_format`; the index gets a random id here (the
    # vector snapshot names the index it was made from).
    f"INSERT OR IGNORE INTO meta(key, value) VALUES ('{INDEX_ID_META}', lower(hex(randomblob(16))));",
    # 10: the vector journal's rows carry a random tag (`tag_the_journal`, run before this SQL: JOURNAL_COLUMNS), so
    # that the vector snapshot proves it is of this index's history, not of the one a restored backup left behind;
    # a marker row (chunk -1: changes nothing) gives the current seq a row
    "INSERT INTO vector_changes(chunk_id) VALUES (-1);",
    # 11: the chunks that set a visibility, in a partial index (empty when no file sets one, the usual case): the
    # levels an index holds are read from it at once (filters.FilterCache.passes_all), so a search whose role sees
    # `public` and every level held needs no filter, where the ids of every chunk passing it were read from the
    # whole table after each write (1-5 s at 269k chunks, benchmarks/README.md S12)
    f"CREATE INDEX IF NOT EXISTS {VISIBILITY_INDEX} ON chunks(visibility) WHERE visibility IS NOT NULL;",
]


# The secondary indexes of `chunks` a first index drops while it writes into an empty table and builds at the end
# (FileWrites.defer_indexes): each kept row by row cost a random B-tree insert per chunk (55k chunks: 1.4 s of the
# 5.8 s of SQL a first index ran; built at the end: 0.3 s). Their SQL as the migrations made them (1, 2 and 7).
# DEFERRED_META lists those dropped: a run killed before building them again leaves it, and the next writable open
# builds them (SqliteStore._migrate).
DEFERRABLE_INDEXES = {
    "chunks_hash": "CREATE INDEX IF NOT EXISTS chunks_hash ON chunks(content_hash)",
    "chunks_heading": (
        "CREATE INDEX IF NOT EXISTS chunks_heading ON chunks(trim(ltrim(section_heading, '#')) COLLATE NOCASE)"
    ),
    "chunks_chapter": "CREATE INDEX IF NOT EXISTS chunks_chapter ON chunks(path, chapter_num)",
}
DEFERRED_META = "deferred_indexes"
# While a first index writes into an empty chunk table (FileWrites.defer_indexes) FTS5 merges none of the chunk
# keyword list's segments as they come (its 'automerge', default 4: each posting was rewritten at every level, a
# fifth of the list's insert CPU at 269k chunks, benchmarks row S34; FTS5's own 'crisismerge' still merges a level
# of 16); the run merges them all into one b-tree after its text phase (FileWrites.merge_keywords), and
# `restore_indexes` puts the default back (its row removed) in the same transaction as the indexes.
KEYWORD_AUTOMERGE_OFF = "INSERT INTO chunks_fts(chunks_fts, rank) VALUES ('automerge', 0)"
KEYWORD_AUTOMERGE_DEFAULT = "INSERT INTO chunks_fts(chunks_fts, rank) VALUES ('automerge', 4)"
# A first index also leaves the whole-file keyword list (`files_fts`) to be filled after its text phase
# (FileWrites.fill_file_text): the chunk list makes the project keyword-searchable, the whole-file list is a second
# tokenization of every passage (~30% of the text phase's SQL, benchmarks row S28). This meta key is set while files
# may lack their whole-file row (a run killed before the fill leaves it: the next full run finishes it); status
# reports it (status.FILE_TEXT_META, the same name).
FILE_TEXT_META = "file_text_pending"
# Set once the keyword lists were merged into one b-tree each (FileWrites.merge_keywords); a first index removes
# it. A first index writes a segment per batch (28 at 269k chunks); a query reads every segment of each term, and one
# merged b-tree cut the 1.00M lexical p50 from 57 to 40 ms (benchmarks row S32). Absent on an older index: its next
# full run merges once.
KEYWORDS_MERGED_META = "keywords_merged"


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


# A search's entity lookup (a query that is a file's name or alias: SqliteStore.entity_chunks) by index, not by
# reading every file row (~10 ms a search at 20,000 files, ~1 ms at 1,000); only the files with aliases are read
# for those. Not a numbered migration: an index changes no query's answer, so a read-only open and an older
# saipling use the index as it is (without them: the scan). A writable open adds them when missing
# (SqliteStore._upgrade_layout).
ENTITY_NAME_INDEXES = """
    CREATE INDEX IF NOT EXISTS files_display_name ON files(display_name COLLATE NOCASE);
    CREATE INDEX IF NOT EXISTS files_entity_name ON files(entity_name COLLATE NOCASE);
    CREATE INDEX IF NOT EXISTS files_aliases ON files(aliases) WHERE aliases IS NOT NULL AND aliases != '[]';
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
    conn.set_busy_timeout(BUSY_TIMEOUT_MS)
    from ...paths import glob_match, nfc

    conn.create_scalar_function("saipling_glob", lambda p, g: 1 if glob_match(p, g) else 0, 2, deterministic=True)
    conn.create_scalar_function("saipling_nfc", lambda v: nfc(v) if isinstance(v, str) else v, 1, deterministic=True)
    # Python's lower case for every script (SQLite's lower() folds A-Z only: `Персонаж`, `Émile` stayed as written)
    conn.create_scalar_function(
        "saipling_lower", lambda v: v.lower() if isinstance(v, str) else v, 1, deterministic=True
    )
    conn.create_scalar_function("saipling_cjk", chunk_cjk_words, 2, deterministic=True)  # (migration 6)
    conn.create_scalar_function("saipling_f16", float16_blob, 1, deterministic=True)  # (migration 9)
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

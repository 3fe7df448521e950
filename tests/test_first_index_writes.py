"""Issue 34: the store side of a first index kept cheap (indexing/text_phase.py, storage/sqlite/file_writes.py). A
first index of many files writes into a chunk table without its secondary indexes and builds them at the end of the
text phase (IndexStore.defer_indexes); the index it leaves is the one a run keeping them row by row leaves. Real
SQLite files and real index runs (keyword-only)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import apsw
import pytest

from fixtures import make_project, open_project, words
from saipling.embeddings.base import estimate_tokens
from saipling.indexing import text_phase
from saipling.indexing.chunk_pool import chunk_bytes
from saipling.indexing.records import IndexProgress
from saipling.markdown.chunker import limits_for
from saipling.storage.base import FileWrite
from saipling.storage.sqlite.schema import DEFERRABLE_INDEXES, DEFERRED_META, chunk_cjk_words
from saipling.storage.sqlite.store import SqliteStore
from test_storage_conformance import record, row

FILES = 240  # over text_phase.DEFER_INDEXES_MIN_FILES


def indexes(db: Path) -> set[str]:
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    finally:
        conn.close()


def vault(tmp_path: Path, name: str) -> Path:
    files: dict[str, str] = {}
    for i in range(FILES):
        body = "\n\n".join(f"## Part {j}\n\n{words(60, seed=i * 7 + j)}" for j in range(3))
        front = f"---\nname: Keeper {i}\naliases: [K{i}x]\n---\n" if i % 40 == 0 else ""
        files[f"book/ch{i:03d}.md"] = f"{front}# Chapter {i}\n\nKeeper 0 and K40x met.\n\n{body}\n"
    return make_project(tmp_path, files, name)


def content(db: Path) -> str:
    """A digest of what the index holds: chunks, files, mentions and both keyword vocabularies, and its indexes."""
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    d = hashlib.sha256()
    cols = [r[1] for r in conn.execute("PRAGMA table_info(files)") if r[1] not in ("last_indexed", "mtime_ns")]
    for sql in (
        "SELECT * FROM chunks ORDER BY id",
        f"SELECT rowid, {', '.join(cols)} FROM files ORDER BY rowid",
        "SELECT * FROM mentions ORDER BY path, line, col, entity",
        "SELECT * FROM mention_counts ORDER BY entity, path",
        "SELECT * FROM mention_files ORDER BY path",
        "SELECT name, sql FROM sqlite_master WHERE type = 'index' ORDER BY name",
        "SELECT * FROM chunks_fts_config ORDER BY k",  # (the keyword list's settings: none left behind)
    ):
        for r in conn.execute(sql):
            d.update(repr(r).encode())
    conn.close()
    return d.hexdigest()


def vocab(db: Path) -> list[tuple]:
    conn = apsw.Connection(str(db))
    try:
        out = []
        for t in ("chunks_fts", "files_fts"):
            conn.execute(f"CREATE VIRTUAL TABLE temp.v_{t} USING fts5vocab('main', '{t}', 'row')")
            out.append(tuple(conn.execute(f"SELECT term, doc, cnt FROM temp.v_{t} ORDER BY term")))
        return out
    finally:
        conn.close()


def test_a_first_index_builds_the_chunk_indexes_once_and_leaves_the_same_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[set[str]] = []
    root = vault(tmp_path, "deferred")
    db = root / ".saipling" / "index.db"

    def progress(p: IndexProgress) -> None:
        if p.phase == "keywords" and p.files_done == FILES // 2:
            seen.append(indexes(db))

    with open_project(root) as project:
        project.index(progress=progress)
    assert seen and not (set(DEFERRABLE_INDEXES) & seen[0])  # (mid-run: written without them)
    assert automerge(db) is None  # (FTS5's default merging back, no setting left)
    assert set(DEFERRABLE_INDEXES) <= indexes(db)
    monkeypatch.setattr(text_phase, "DEFER_INDEXES_MIN_FILES", 10**9)
    kept_root = vault(tmp_path, "kept")
    with open_project(kept_root) as project:
        project.index()
    kept = kept_root / ".saipling" / "index.db"
    assert content(db) == content(kept) and vocab(db) == vocab(kept)
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    assert not list(conn.execute("SELECT 1 FROM meta WHERE key = ?", (DEFERRED_META,)))
    assert list(conn.execute("SELECT count(*) FROM mentions"))[0][0] > FILES  # (the test holds mentions)


def automerge(db: Path) -> int | None:
    """The chunk keyword list's FTS5 'automerge' setting as stored (None: FTS5's default, never set)."""
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        got = list(conn.execute("SELECT v FROM chunks_fts_config WHERE k = 'automerge'"))
        return got[0][0] if got else None
    finally:
        conn.close()


def segments(db: Path) -> int:
    """The chunk keyword list's segments (b-trees): the segment ids its %_idx table holds."""
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return list(conn.execute("SELECT count(DISTINCT segid) FROM chunks_fts_idx"))[0][0]
    finally:
        conn.close()


def test_a_first_index_merges_no_keyword_segments_during_its_text_phase_and_all_of_them_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its chunk keyword list written a segment per batch, none merged as they come (FTS5's automerge off: each
    posting was rewritten at every level), then merged into one b-tree by the run; FTS5's default is back after."""
    monkeypatch.setattr(text_phase, "TEXT_BATCH_FILES", 8)  # (a segment per batch: 30 batches)
    root = vault(tmp_path, "merges")
    db = root / ".saipling" / "index.db"
    mid: list[tuple[int | None, int]] = []

    def progress(p: IndexProgress) -> None:
        if p.phase == "keywords" and p.files_done == FILES - 8:
            mid.append((automerge(db), segments(db)))

    with open_project(root) as project:
        project.index(progress=progress)
        hits = project.search({"query": "Keeper", "mode": "lexical", "maxResults": 5})["results"]
    # (29 batches stored: 29 segments unmerged, less FTS5's crisis merge of a level of 16: 14; the default's
    # merging as they came kept 8)
    assert mid == [(0, mid[0][1])] and mid[0][1] > 10
    assert automerge(db) is None and segments(db) == 1
    assert hits


def batches(store: SqliteStore, first: int, count: int) -> None:
    """`count` batches of 40 new files (~0.4 MB each with their keywords), a transaction each."""
    for b in range(first, first + count):
        rows = [[row(0, words(600, seed=b * 40 + i))] for i in range(40)]
        with store.atomic():
            store.replace_files([FileWrite(record(f"b{b}/f{i}.md", "1"), r, None) for i, r in enumerate(rows)])


def test_a_first_index_lets_the_write_ahead_log_grow_during_its_text_phase_and_not_after(tmp_path: Path) -> None:
    """Between `defer_indexes` and `restore_indexes` SQLite copies the log into the index a tenth as often (its
    default: every 1,000 pages, ~4 MB here): ~8 MB of batches leave a log holding them all; after, as before, and
    the log's file is cut back to about the default's size once a checkpoint has emptied it."""
    db = tmp_path / "proj" / ".saipling" / "index.db"
    wal = db.with_name("index.db-wal")
    store = SqliteStore.open(db)
    assert store.defer_indexes() is True
    batches(store, 0, 20)
    grown = wal.stat().st_size
    store.restore_indexes()
    batches(store, 20, 20)
    after = wal.stat().st_size
    store.close()
    assert grown > 7_000_000 and after < 6_000_000  # (cut back to ~1,000 pages once a checkpoint emptied it)


def test_indexes_a_killed_first_index_dropped_are_built_at_the_next_open(tmp_path: Path) -> None:
    db = tmp_path / "proj" / ".saipling" / "index.db"
    store = SqliteStore.open(db)
    assert store.defer_indexes() is True
    store.replace_files([])
    with store.atomic():
        store.replace_file(record("a.md", "1"), [row(0, "the lantern room", "Fireball")])
    store.close()  # (killed before restore_indexes)
    assert not set(DEFERRABLE_INDEXES) & indexes(db)
    assert automerge(db) == 0
    store = SqliteStore.open(db)
    assert set(DEFERRABLE_INDEXES) <= indexes(db)
    assert automerge(db) is None  # (FTS5's default merging back)
    assert store.get_meta(DEFERRED_META) is None
    assert store.defer_indexes() is False and set(DEFERRABLE_INDEXES) <= indexes(db)  # (chunks stored: kept)
    store.close()


def test_a_run_reads_the_entity_names_once_not_per_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The entity finder of a run's batches (indexing/mention_scan.RunFinders): the store's entities are read once
    by the text phase (and once by the mentions' settling after it), not once per batch (a whole files-table read
    each); what the run stores meanwhile is what the finders see."""
    monkeypatch.setattr(text_phase, "TEXT_BATCH_CHUNKS", 64)  # (a first index's batches of 256: several)
    root = vault(tmp_path, "v")
    reads: list[str] = []
    batches: list[int] = []

    def trace(_cursor: apsw.Cursor, sql: str, _bindings: object) -> bool:
        if "FROM files WHERE (aliases IS NOT NULL" in sql:
            reads.append(sql)
        if sql.startswith("INSERT INTO chunks("):
            batches.append(1)
        return True

    with open_project(root) as project:
        project.store.conn.exec_trace = trace
        project.index()
        assert len(batches) >= 2 and len(reads) == 2  # (before: one per batch, and the settling's)
        # every chapter names Keeper 0 and Keeper 40's alias (K40x), each an entity stored in another batch
        assert len(project.store.mention_paths(["book/ch040.md"])) == FILES
        assert len(project.store.mention_paths(["book/ch000.md"])) == FILES
        (root / "book" / "ch001.md").write_text("Keeper 0 met the Newcomer.\n")
        (root / "book" / "zz.md").write_text("---\nname: Newcomer\naliases: [Newc]\n---\nThe Newcomer.\n")
        project.index()
        assert "book/ch001.md" in project.store.mention_paths(["book/zz.md"])


def test_a_runs_entity_finder_checks_each_file_once_not_once_per_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RunFinders keeps the rows of the files that are entities, not a copy of every stored file's row checked again
    per batch (quadratic: 20,514 files in ~2,000 batches spent 108 s of CPU there, benchmarks/README.md S18); the
    mentions found are the same (the finder of each batch sees the entities stored before and in it)."""
    from saipling.indexing import mention_scan

    checked: list[str] = []
    real = mention_scan.is_entity

    def counting(row: object) -> bool:
        checked.append(getattr(row, "path", ""))
        return real(row)  # type: ignore[arg-type]

    monkeypatch.setattr(mention_scan, "is_entity", counting)
    monkeypatch.setattr(text_phase, "TEXT_BATCH_FILES", 8)  # 30 batches of the 240 files
    root = vault(tmp_path, "v")
    with open_project(root) as project:
        project.index()
        assert len(project.store.mention_paths(["book/ch040.md"])) == FILES
        assert len(project.store.mention_paths(["book/ch200.md"])) == 0  # (not named anywhere)
    assert FILES <= len(checked) <= 3 * FILES  # (before: ~16 checks a file, every stored row again per batch)


def test_a_file_is_looked_at_once_for_cjk_text_and_its_chunks_keep_their_cjk_keywords(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chunking worker says per file whether its text holds a CJK character (prose with curly quotes and
    dashes is not ASCII, and a search per chunk in the indexer cost ~15 us a chunk); a file that does still gets
    each chunk's CJK keywords, as the one-file path writes them."""
    limits = limits_for(128, 96, 16, 256, 0)
    prose = "# “Quoted” — dashed\n\n" + words(80, seed=3) + " … “and more”.\n"
    cjk = "# 東京の話\n\n冠盖满京华，斯人独憔悴。 And “quotes”.\n\n## 章\n\n鸭先知 " + words(40, seed=4) + "\n"
    assert chunk_bytes("p.md", prose.encode(), limits, estimate_tokens).cjk is False
    assert chunk_bytes("c.md", cjk.encode(), limits, estimate_tokens).cjk is True
    assert chunk_bytes("a.md", b"# plain\n\nascii only\n", limits, estimate_tokens).cjk is False
    files = {f"p{i:03d}.md": prose + f"\n\nnumber {i}\n" for i in range(60)}
    files.update({f"c{i:03d}.md": cjk + f"\n\nnumber {i}\n" for i in range(4)})
    monkeypatch.setenv("SAIPLING_CHUNK_WORKERS", "1")
    root = make_project(tmp_path, files)
    with open_project(root) as project:
        project.index()
    conn = apsw.Connection(str(root / ".saipling" / "index.db"), flags=apsw.SQLITE_OPEN_READONLY)
    rows = list(conn.execute("SELECT path, heading_path, text, cjk_words FROM chunks"))
    conn.close()
    assert len({r[0] for r in rows}) == len(files)
    assert all(r[3] == chunk_cjk_words(r[1], r[2]) for r in rows)
    assert sum(1 for r in rows if r[3]) >= 4 and all(not r[3] for r in rows if r[0].startswith("p"))


def test_a_file_whose_cjk_comes_only_from_escaped_frontmatter_keeps_its_cjk_keywords(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's per-file CJK flag follows what is stored, not the file's bytes: a YAML title written as
    escapes is ASCII in the file and CJK in the chunk text it renders to, and a lexical search for it finds it."""
    limits = limits_for(128, 96, 16, 256, 0)
    escaped = b'---\ntitle: "\\u6d77\\u8fba\\u306e\\u706f\\u53f0"\n---\nThe keeper climbs the stairs at dusk.\n'
    assert escaped.isascii()
    assert chunk_bytes("lighthouse.md", escaped, limits, estimate_tokens).cjk is True
    files = {f"n{i:02d}.md": f"# Note {i}\n\n{words(40, seed=i)}\n" for i in range(30)}
    monkeypatch.setenv("SAIPLING_CHUNK_WORKERS", "1")
    root = make_project(tmp_path, files)
    (root / "lighthouse.md").write_bytes(escaped)
    with open_project(root) as project:
        project.index()
        found = project.search({"query": "\u706f\u53f0", "mode": "lexical", "maxResults": 5})
    assert [r["filePath"] for r in found["results"]] == ["lighthouse.md"]


def test_files_are_decoded_again_for_mentions_only_when_the_index_has_entities(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mention scan reads a stored file's text again (decoded from its bytes) only when there is a name to look
    for: a first index of prose without entity files decoded every file a second time for nothing."""
    decoded: list[str] = []
    real = text_phase.decode

    def counting(data: bytes, path: str):  # type: ignore[no-untyped-def]
        decoded.append(path)
        return real(data, path)

    monkeypatch.setattr(text_phase, "decode", counting)
    plain = make_project(tmp_path, {f"ch{i:02d}.md": f"# Chapter {i}\n\n{words(50, seed=i)}\n" for i in range(30)}, "p")
    with open_project(plain) as project:
        assert project.index().chunks >= 30
    assert decoded == []
    root = vault(tmp_path, "entities")  # (entity files: every file is scanned, and its mentions found)
    with open_project(root) as project:
        project.index()
    assert len(set(decoded)) == FILES
    conn = apsw.Connection(str(root / ".saipling" / "index.db"), flags=apsw.SQLITE_OPEN_READONLY)
    assert list(conn.execute("SELECT count(DISTINCT path) FROM mentions"))[0][0] == FILES
    conn.close()


def test_a_first_index_stores_bigger_batches_than_a_later_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A first index of many files stores FIRST_INDEX_BATCH_FACTOR times more chunks a batch (fewer keyword
    segments and commits); a later run keeps the usual batches (a save waits for one)."""
    monkeypatch.setattr(text_phase, "TEXT_BATCH_CHUNKS", 16)
    sizes: list[int] = []
    real = text_phase.TextPhase.flush

    def flush(self, batch, summary):  # type: ignore[no-untyped-def]
        sizes.append(sum(len(p.chunks) for p in batch))
        return real(self, batch, summary)

    monkeypatch.setattr(text_phase.TextPhase, "flush", flush)
    root = vault(tmp_path, "batches")
    with open_project(root) as project:
        first = project.index()
        assert max(sizes) >= 16 * text_phase.FIRST_INDEX_BATCH_FACTOR and len(sizes) < first.chunks // 16
        sizes.clear()
        for p in sorted(root.rglob("*.md"))[:120]:
            p.write_text(p.read_text() + "\n\nOne more line.\n")
        project.index()
    assert sizes and max(sizes) < 16 * 2


def test_a_killed_first_index_whose_indexes_an_older_saipling_built_gets_its_keyword_merging_back(
    tmp_path: Path,
) -> None:
    """A first index killed in its text phase leaves FTS5's merging off (automerge 0) with DEFERRED_META; an older
    saipling opening the index builds the indexes and deletes DEFERRED_META without knowing the setting. The next
    open by this code still puts the merging back (else every later save's segment would pile up for good)."""
    db = tmp_path / "proj" / ".saipling" / "index.db"
    store = SqliteStore.open(db)
    assert store.defer_indexes() is True
    with store.atomic():
        store.replace_file(record("a.md", "1"), [row(0, "the lantern room", "Fireball")])
    store.close()  # (killed before restore_indexes)
    conn = apsw.Connection(str(db))  # what the older code's open does: the indexes built, the record gone
    with conn:
        for sql in DEFERRABLE_INDEXES.values():
            conn.execute(sql)
        conn.execute("DELETE FROM meta WHERE key = ?", (DEFERRED_META,))
    conn.close()
    assert automerge(db) == 0
    store = SqliteStore.open(db)
    store.close()
    assert automerge(db) is None  # (FTS5's default merging back, no setting left)

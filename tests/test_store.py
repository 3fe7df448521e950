"""The SQLite store (SPEC 5) on real files: schema, FTS sync, vectors, cache, corruption, transactions."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import apsw
import numpy as np
import pytest

from fixtures import kw
from saipling.errors import StorageError
from saipling.storage.base import ChunkRow, FileRecord, FileWrite
from saipling.storage.sqlite.schema import SCHEMA_VERSION
from saipling.storage.sqlite.store import SqliteStore as Store


def unit(seed: int, dims: int = 8) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=dims).astype(np.float32)
    return v / np.linalg.norm(v)


def h(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def record(path: str, content: str = "x") -> FileRecord:
    return FileRecord(
        path=path,
        content_hash=h(content),
        mtime_ns=1,
        size=len(content),
        file_type="document",
        encoding="utf-8",
        entity_name=None,
        display_name=None,
    )


def row(i: int, text: str, heading: str = "") -> ChunkRow:
    return ChunkRow(
        chunk_index=i,
        kind="section",
        section_heading=f"# {heading}" if heading else None,
        heading_path=heading,
        start_line=i * 10 + 1,
        end_line=i * 10 + 5,
        content_hash=h(text),
        preview=text[:200],
        token_count=len(text) // 4 + 1,
        text=text,
        file_type="document",
        entity_type="document",
        entity_name=None,
        book_id=None,
        chapter_id=None,
        chapter_num=None,
        visibility="public",
        corpus="content",
    )


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "proj" / ".saipling" / "index.db"


@pytest.fixture
def store(db_path: Path):
    s = Store.open(db_path)
    yield s
    s.close()


def fts_paths(store: Store, word: str) -> list[str]:
    ids = [i for i, _ in store.keyword_search(kw(word), 50)]
    return sorted(r.path for r in store.chunks_by_id(ids).values())


def fts_integrity(store: Store) -> None:
    store.conn.execute("INSERT INTO chunks_fts(chunks_fts, rank) VALUES ('integrity-check', 1)")


# -- schema ------------------------------------------------------------------------------------------------


def test_new_store_schema(store: Store, db_path: Path) -> None:
    assert store.rebuilt is None
    assert store._scalar("PRAGMA user_version") == SCHEMA_VERSION
    assert store.get_meta("schema_version") == str(SCHEMA_VERSION)
    assert str(store._scalar("PRAGMA journal_mode")).lower() == "wal"
    names = {r[0] for r in store.conn.execute("SELECT name FROM sqlite_master")}
    assert {
        "meta",
        "files",
        "chunks",
        "chunks_fts",
        "embedding_cache",
        "embedding_log",
        "search_log",
    } <= names
    assert (db_path.parent / ".gitignore").read_text() == "*\n"
    assert store.stats().total_files == 0


def test_reopen_keeps_data_and_version(db_path: Path) -> None:
    s = Store.open(db_path)
    s.replace_file(record("a.md"), [row(0, "alpha lighthouse text")])
    s.close()
    s = Store.open(db_path)
    try:
        assert s.rebuilt is None
        assert s._scalar("PRAGMA user_version") == SCHEMA_VERSION
        assert set(s.file_states()) == {"a.md"}
        assert fts_paths(s, "lighthouse") == ["a.md"]
    finally:
        s.close()


def test_migrates_forward_from_older_user_version(db_path: Path) -> None:
    conn = apsw.Connection(str(db_path.parent.mkdir(parents=True) or db_path))
    conn.execute("PRAGMA user_version=0")
    conn.close()
    s = Store.open(db_path)
    try:
        assert s._scalar("PRAGMA user_version") == SCHEMA_VERSION
    finally:
        s.close()


# -- files, chunks, FTS ------------------------------------------------------------------------------------


def test_fts_in_sync_on_replace_and_delete(store: Store) -> None:
    store.replace_file(record("a.md", "1"), [row(0, "The lighthouse keeper", "Keeper"), row(1, "salt and rope")])
    store.replace_file(record("b.md"), [row(0, "another lighthouse story")])
    assert fts_paths(store, "lighthouse") == ["a.md", "b.md"]
    assert fts_paths(store, "keeper") == ["a.md"]  # heading text is searchable too

    store.replace_file(record("a.md", "2"), [row(0, "now about the ferry only")])
    assert fts_paths(store, "lighthouse") == ["b.md"]
    assert fts_paths(store, "rope") == []
    assert fts_paths(store, "ferry") == ["a.md"]
    assert [c.text for c in store.chunks_for_path("a.md")] == ["now about the ferry only"]
    assert store.get_file("a.md").content_hash == h("2")
    fts_integrity(store)

    assert store.delete_file("b.md") is True
    assert store.delete_file("b.md") is False
    assert fts_paths(store, "lighthouse") == []
    assert store.chunks_for_path("b.md") == []
    fts_integrity(store)
    st = store.stats()
    assert (st.total_files, st.total_chunks) == (1, 1)


def test_fts_porter_stemming_and_diacritics(store: Store) -> None:
    store.replace_file(record("a.md"), [row(0, "The keepers were running past the café")])
    assert fts_paths(store, "keeper") == ["a.md"]
    assert fts_paths(store, "run") == ["a.md"]
    assert fts_paths(store, "cafe") == ["a.md"]


def test_touch_and_clear(store: Store) -> None:
    store.replace_file(record("a.md"), [row(0, "alpha text here")])
    store.touch_file("a.md", 99, 123)
    st = store.file_states()["a.md"]
    assert (st.mtime_ns, st.size) == (99, 123)
    store.configure_vectors("fake", "m", 8)
    store.replace_file(record("b.md"), [row(0, "beta text here")], {h("beta text here"): unit(1)}, "m")
    store.clear()
    stats = store.stats()
    assert (stats.total_files, stats.total_chunks, stats.embedded_chunks) == (0, 0, 0)
    assert stats.cached_embeddings == 1  # the cache survives a clear: it cost money
    assert fts_paths(store, "beta") == []
    fts_integrity(store)


# -- vectors and the embedding cache -----------------------------------------------------------------------


def test_vectors_and_cache_by_model_and_hash(store: Store) -> None:
    assert store.configure_vectors("fake", "m1", 8) is False
    texts = ["first chunk text", "second chunk text"]
    vecs = {h(t): unit(i) for i, t in enumerate(texts)}
    store.replace_file(record("a.md"), [row(i, t) for i, t in enumerate(texts)], vecs, "m1")
    assert store.stats().embedded_chunks == 2
    cached = store.cached_vectors("m1", [h(t) for t in texts] + [h("unknown")])
    assert set(cached) == set(vecs)
    np.testing.assert_allclose(cached[h(texts[0])], vecs[h(texts[0])], atol=1e-3)  # (float16 on disk)
    assert store.cached_vectors("m2", [h(t) for t in texts]) == {}
    # knn finds the exact vector first
    ids = [r.id for r in store.chunks_for_path("a.md")]
    top = store.knn(vecs[h(texts[1])], 2)
    assert top[0][0] == ids[1] and top[0][1] == pytest.approx(1.0, abs=1e-5)
    # the same text in another file (a rename) is served from the cache
    assert set(store.cached_vectors("m1", [h(texts[0])])) == {h(texts[0])}


def _index_with_the_old_cache_layout(db_path: Path) -> dict[str, np.ndarray]:
    """An index file as saipling wrote it before 2026-11-24: schema 3, the embedding cache `WITHOUT ROWID`."""
    from saipling.storage.sqlite.schema import _MIGRATIONS, connect

    db_path.parent.mkdir(parents=True)
    conn = connect(str(db_path))
    old_cache = """CREATE TABLE embedding_cache(model TEXT NOT NULL, content_hash TEXT NOT NULL,
        vector BLOB NOT NULL, created REAL, PRIMARY KEY(model, content_hash)) WITHOUT ROWID"""
    conn.execute(old_cache)
    for number, sql in enumerate(_MIGRATIONS):
        conn.execute(sql)
        conn.execute(f"PRAGMA user_version={number + 1}")
    conn.execute("DROP INDEX embedding_cache_key")  # (the old layout had none: its key was the table's)
    conn.execute("PRAGMA journal_mode=WAL")
    old = {h(f"text {i}"): unit(i) for i in range(5)}
    conn.executemany(
        "INSERT INTO embedding_cache(model, content_hash, vector, created) VALUES ('m1', ?, ?, 1.0)",
        [(k, v.tobytes()) for k, v in old.items()],
    )
    conn.close()
    return old


def _cache_sql(store: Store) -> str:
    return str(store._scalar("SELECT sql FROM sqlite_master WHERE name = 'embedding_cache'"))


def test_an_old_embedding_cache_becomes_an_appended_table_and_keeps_its_vectors(db_path: Path) -> None:
    """The embedding cache is a rowid table (rows appended, the key in a small index): `WITHOUT ROWID` kept every
    vector inside a B-tree ordered by a random hash and rewrote pages all over it on each round of new vectors.
    An index written before is converted when opened for writing, keeping its cached vectors, and stays at the
    same schema version (an older saipling still opens it: every query works on both layouts)."""
    old = _index_with_the_old_cache_layout(db_path)
    s = Store.open(db_path)
    try:
        assert s._scalar("PRAGMA user_version") == SCHEMA_VERSION
        assert "WITHOUT ROWID" not in _cache_sql(s).upper()
        cached = s.cached_vectors("m1", list(old))
        assert set(cached) == set(old)
        np.testing.assert_allclose(cached[h("text 3")], old[h("text 3")], atol=1e-3)  # (float16 on disk)
        # the key stays unique: a vector stored again for the same text adds no row, and the cached one stays
        # (one vector per model and text, ever: tests/test_storage_conformance.py)
        s.configure_vectors("fake", "m1", 8)
        s.replace_file(record("a.md"), [row(0, "text 3")], {h("text 3"): unit(9)}, "m1")
        assert s._scalar("SELECT count(*) FROM embedding_cache WHERE content_hash = ?", (h("text 3"),)) == 1
        np.testing.assert_allclose(s.cached_vectors("m1", [h("text 3")])[h("text 3")], old[h("text 3")])
        assert s._scalar("SELECT count(*) FROM embedding_cache") == 5
    finally:
        s.close()


def test_an_old_embedding_cache_is_read_as_it_is_by_a_read_only_open(db_path: Path) -> None:
    old = _index_with_the_old_cache_layout(db_path)
    s = Store.open(db_path, readonly=True)
    try:
        assert "WITHOUT ROWID" in _cache_sql(s).upper()  # nothing is written
        assert set(s.cached_vectors("m1", list(old))) == set(old)
    finally:
        s.close()


def test_the_entity_lookup_reads_no_whole_files_table_and_an_older_index_gets_its_indexes(db_path: Path) -> None:
    """A query that is a file's name or alias is looked up by index (SqliteStore.entity_chunks, ~10 ms a search
    at 20,000 files when it read every file row); an index written without those indexes gets them on a
    writable open, and the lookup answers the same."""
    s = Store.open(db_path)
    try:
        rec = record("people/mina.md", "m")
        rec.display_name, rec.aliases = "Mina", ["Wilhelmina"]
        s.replace_file(rec, [row(0, "Mina's story")])
        s.replace_files([FileWrite(record(f"notes/{n}.md", f"n{n}"), [row(0, f"note {n}")]) for n in range(200)])
        s.conn.execute("ANALYZE")  # (statistics, as PRAGMA optimize leaves them: the plan of a big index)
        s.conn.execute("DROP INDEX files_display_name; DROP INDEX files_entity_name; DROP INDEX files_aliases")
    finally:
        s.close()
    s = Store.open(db_path)
    try:
        mina = s.chunks_for_path("people/mina.md")[0].id
        statements: list[tuple[str, tuple]] = []

        def trace(_cursor, sql: str, bindings) -> bool:
            statements.append((sql, tuple(bindings or ())))
            return True

        s.conn.exec_trace = trace
        assert s.entity_chunks("MINA") == [mina] and s.entity_chunks("wilhelmina") == [mina]
        s.conn.exec_trace = None
        lookups = [(sql, b) for sql, b in statements if "FROM files" in sql]
        assert lookups
        for sql, bindings in lookups:
            plan = [str(r[-1]) for r in s.conn.execute("EXPLAIN QUERY PLAN " + sql, bindings)]
            assert not [p for p in plan if p in ("SCAN f", "SCAN files")], plan  # (a partial index scan is fine)
    finally:
        s.close()


def test_configure_vectors_with_other_model_or_dims_resets(store: Store) -> None:
    store.configure_vectors("fake", "m1", 8)
    store.replace_file(record("a.md"), [row(0, "some chunk text")], {h("some chunk text"): unit(0)}, "m1")
    assert store.configure_vectors("fake", "m1", 8) is False
    assert store.stats().embedded_chunks == 1

    assert store.configure_vectors("fake", "m2", 8) is True  # other model, same dims
    assert store.stats().embedded_chunks == 0
    assert [r.path for r in store.chunks_missing_vectors()] == ["a.md"]
    assert store.vector_model() == ("m2", 8)

    assert store.configure_vectors("fake", "m2", 16) is True  # other dims
    rows = store.chunks_missing_vectors()
    store.set_vectors([(rows[0].id, rows[0].content_hash, unit(3, 16))], "m2")
    assert store.stats().embedded_chunks == 1
    ids, mat = store.vector_matrix()
    assert mat.shape == (1, 16)
    # the old model's cache entry is still there for a switch back
    assert set(store.cached_vectors("m1", [h("some chunk text")], dims=8)) == {h("some chunk text")}


def test_switch_to_keyword_only_drops_vectors(store: Store) -> None:
    store.configure_vectors("fake", "m1", 8)
    store.configure_vectors("none", "", 0)
    assert not store.has_vectors()
    assert store.chunks_missing_vectors() == []


# -- one transaction per file ------------------------------------------------------------------------------


def test_failed_replace_leaves_old_file_intact(store: Store) -> None:
    store.configure_vectors("fake", "m", 8)
    old = [row(0, "old lighthouse chunk"), row(1, "old harbor chunk")]
    store.replace_file(record("a.md", "old"), old, {c.content_hash: unit(i) for i, c in enumerate(old)}, "m")
    before = store.chunks_for_path("a.md")

    new = [row(0, "new ferry chunk"), row(1, "new storm chunk")]
    # the second vector has the wrong dimension: vec0 refuses it half-way through the file
    bad = {new[0].content_hash: unit(5), new[1].content_hash: unit(6, dims=5)}
    with pytest.raises(StorageError):  # (apsw's error, mapped at the backend's edge)
        store.replace_file(record("a.md", "new"), new, bad, "m")

    assert store.chunks_for_path("a.md") == before
    assert store.get_file("a.md").content_hash == h("old")
    assert fts_paths(store, "lighthouse") == ["a.md"]
    assert fts_paths(store, "ferry") == []
    assert store.stats().embedded_chunks == 2
    assert store.cached_vectors("m", [new[0].content_hash]) == {}  # cache writes rolled back too
    fts_integrity(store)
    # and the store still works afterwards
    store.replace_file(record("a.md", "new"), new, {c.content_hash: unit(i) for i, c in enumerate(new)}, "m")
    assert fts_paths(store, "ferry") == ["a.md"]


def test_logs_and_stats(store: Store) -> None:
    store.log_embedding("voyage", "voyage-4", 1000, 10, 0.00006)
    store.log_embedding("voyage", "voyage-4", 500, 5, 0.00003)
    store.log_search("q", "cli", "hybrid", 3, 0.9, 12.0)
    store.log_search("q2", "eval", "hybrid", 0, 0.0, 5.0)
    st = store.stats()
    assert st.total_tokens == 1500 and st.total_cost_usd == pytest.approx(0.00009)
    assert [r.query for r in store.search_log()] == ["q"]
    assert [r.query for r in store.search_log(include_eval=True)] == ["q2", "q"]


# -- corruption --------------------------------------------------------------------------------------------


def _filled(db_path: Path) -> None:
    s = Store.open(db_path)
    s.configure_vectors("fake", "m", 8)
    for n in range(40):
        text = f"chunk number {n} " + "filler words " * 60
        s.replace_file(record(f"f{n}.md", text), [row(0, text)], {h(text): unit(n)}, "m")
    s.close()


def _assert_rebuilt(db_path: Path) -> None:
    s = Store.open(db_path)
    try:
        assert s.rebuilt and "corrupt" in s.rebuilt
        moved = [p for p in db_path.parent.iterdir() if p.name.startswith("index.db.corrupt-")]
        assert len(moved) >= 1
        assert moved[0].name in s.rebuilt
        assert s._scalar("PRAGMA user_version") == SCHEMA_VERSION
        assert s.stats().total_files == 0
        s.replace_file(record("new.md"), [row(0, "fresh start after rebuild")])
        assert fts_paths(s, "fresh") == ["new.md"]
    finally:
        s.close()
    again = Store.open(db_path)
    try:
        assert again.rebuilt is None and set(again.file_states()) == {"new.md"}
    finally:
        again.close()


def test_garbage_index_is_moved_aside_and_rebuilt(db_path: Path) -> None:
    db_path.parent.mkdir(parents=True)
    garbage = os.urandom(8192)
    db_path.write_bytes(garbage)
    _assert_rebuilt(db_path)
    moved = next(p for p in db_path.parent.iterdir() if p.name.startswith("index.db.corrupt-"))
    assert moved.read_bytes() == garbage  # the original is kept, untouched


def test_truncated_index_is_rebuilt(db_path: Path) -> None:
    _filled(db_path)
    size = db_path.stat().st_size
    assert size > 50_000
    with open(db_path, "r+b") as f:
        f.truncate(size // 3)
    _assert_rebuilt(db_path)


def test_index_with_damaged_pages_is_rebuilt(db_path: Path) -> None:
    _filled(db_path)
    data = bytearray(db_path.read_bytes())
    page = 4096
    for p in range(2, len(data) // page):  # scribble over every page but the header page
        data[p * page + 8 : p * page + 64] = b"\xff" * 56
    db_path.write_bytes(bytes(data))
    _assert_rebuilt(db_path)


def test_header_only_garbage_is_rebuilt(db_path: Path) -> None:
    db_path.parent.mkdir(parents=True)
    db_path.write_bytes(b"SQLite format 3\x00" + b"\x00" * 100)
    _assert_rebuilt(db_path)


def test_newer_schema_version_is_moved_aside_and_rebuilt(tmp_path):
    from saipling.storage.sqlite.store import SqliteStore as Store

    path = tmp_path / "index.db"
    store = Store.open(path)
    store.conn.execute("PRAGMA user_version=99")
    store.close()
    reopened = Store.open(path)
    assert reopened.rebuilt and "schema version 99" in reopened.rebuilt
    assert reopened._scalar("PRAGMA user_version") == SCHEMA_VERSION
    reopened.close()


def test_two_corruptions_in_one_second_keep_both_copies(tmp_path):
    from saipling.storage.sqlite.store import SqliteStore as Store

    path = tmp_path / "index.db"
    for _ in range(2):
        path.write_bytes(b"not a database" * 100)
        Store.open(path).close()
    assert len(list(tmp_path.glob("index.db.corrupt-*"))) == 2


def test_cached_matrix_is_patched_by_writes_and_matches_a_fresh_reload(tmp_path):
    """Our own writes patch the in-memory KNN matrix; the result equals what a new connection loads."""
    rng = np.random.default_rng(7)
    store = Store.open(tmp_path / "index.db")
    store.configure_vectors("test", "m", 16)

    def write(path: str, n: int, salt: str, with_vectors: bool = True) -> None:
        rows = [row(i, f"{path}-{salt}-{i}") for i in range(n)]
        vecs = {r.content_hash: rng.standard_normal(16).astype("float32") for r in rows} if with_vectors else {}
        store.replace_file(record(path, salt), rows, vecs, "m")

    for f in range(40):
        write(f"f{f}.md", 5, "a")
    before = store.vector_matrix()
    loaded = store._matrix  # the cached matrix: later writes must patch this object, not drop it
    for f in range(0, 40, 3):
        write(f"f{f}.md", 7, "b")
    for f in range(1, 40, 5):
        store.delete_file(f"f{f}.md")
    write("k.md", 3, "c", with_vectors=False)
    missing = store.chunks_missing_vectors()
    store.set_vectors([(m.id, m.content_hash, rng.standard_normal(16).astype("float32")) for m in missing], "m")
    assert store._matrix is loaded  # patched in place (a reload would build a new one)
    ids, mat = store.vector_matrix()
    assert len(ids) != len(before[0])

    fresh = Store.open(tmp_path / "index.db")
    ids2, mat2 = fresh.vector_matrix()
    o1, o2 = np.argsort(ids), np.argsort(ids2)
    assert np.array_equal(ids[o1], ids2[o2])
    np.testing.assert_allclose(mat[o1], mat2[o2])
    fresh.close()
    store.close()


# -- apsw's errors as saipling's, at the backend's edge (storage/base.py "Errors") ------------------------------
def test_apsw_errors_leave_the_store_as_saipling_errors(db_path: Path) -> None:
    from saipling.errors import IndexCorrupted, StorageBusy, StorageFull, StorageReadOnly, StorageUnavailable
    from saipling.storage.sqlite.errors import storage_error

    for raw, kind in [
        (apsw.FullError("database or disk is full"), StorageFull),
        (apsw.ReadOnlyError("attempt to write a readonly database"), StorageReadOnly),
        (apsw.BusyError("database is locked"), StorageBusy),
        (apsw.CorruptError("database disk image is malformed"), IndexCorrupted),
        (apsw.ConnectionClosedError("closed"), StorageUnavailable),
        (apsw.SQLError("no such table: x"), StorageError),
    ]:
        mapped = storage_error(raw)
        assert type(mapped) is kind and str(mapped) == f"{type(raw).__name__}: {raw}"
    s = Store.open(db_path)
    s.close()
    with pytest.raises(StorageUnavailable) as caught:  # a closed store: no apsw error reaches the caller
        s.stats()
    assert isinstance(caught.value.__cause__, apsw.ConnectionClosedError)
    with pytest.raises(StorageUnavailable), s.atomic():
        pass


def test_a_big_index_is_searched_on_compact_codes_with_exact_scores(tmp_path, monkeypatch):
    """Past COMPACT_FLOATS the store holds int8 codes (a quarter of float32) and rescores the best candidates on
    the vectors it stores: the same chunks and scores as exact search, before and after writes that patch it."""
    from saipling.storage import vector_matrix as vm
    from saipling.storage.vector_matrix import unit_rows

    monkeypatch.setattr(vm, "COMPACT_FLOATS", 16 * 100)
    rng = np.random.default_rng(11)
    store = Store.open(tmp_path / "index.db")
    store.configure_vectors("test", "m", 16)
    truth: dict[str, np.ndarray] = {}

    def write(path: str, n: int, salt: str) -> None:
        rows = [row(i, f"{path}-{salt}-{i}") for i in range(n)]
        vecs = {}
        for r in rows:
            v = rng.standard_normal(16).astype("float32")
            vecs[r.content_hash] = truth[r.content_hash] = v / np.linalg.norm(v)
        store.replace_file(record(path, salt), rows, vecs, "m")

    def exact(q: np.ndarray, k: int) -> list[int]:
        ids = store.chunk_texts([int(i) for i in store.vector_matrix()[0]])
        scored = sorted(((float(truth[hsh] @ q), cid) for cid, (hsh, _, _) in ids.items()), reverse=True)
        return [cid for _, cid in scored[:k]]

    for f in range(40):
        write(f"f{f}.md", 5, "a")
    queries = [unit(s, 16) for s in range(10)]
    for q in queries:
        assert [c for c, _ in store.knn(q, 10)] == exact(q, 10)
    assert store._matrix is not None and store._matrix.compact
    loaded = store._matrix
    for f in range(0, 40, 4):
        write(f"f{f}.md", 6, "b")
    store.delete_file("f1.md")
    assert store._matrix is loaded  # patched, not reloaded
    for q in queries:
        got = store.knn(q, 10)
        assert [c for c, _ in got] == exact(q, 10)
        stored = unit_rows(truth[store.chunk_texts([got[0][0]])[got[0][0]][0]].astype(np.float16)[None, :])[0]
        assert abs(got[0][1] - float(stored @ q)) < 1e-5  # the score of the vector as stored (float16)
    store.close()


def test_a_big_index_opens_without_reading_every_page_and_is_checked_after(db_path: Path, monkeypatch) -> None:
    """Past VERIFY_INLINE_BYTES the open reads the header and schema only; the check runs on a thread of its
    own, and a damaged index is marked so the next open checks it at once and rebuilds it."""
    from saipling.storage.sqlite import integrity

    _filled(db_path)
    monkeypatch.setattr(integrity, "VERIFY_INLINE_BYTES", 4096)
    checked: list[str] = []
    monkeypatch.setattr(Store, "_check", staticmethod(lambda conn: checked.append("inline")))
    sound = Store.open(db_path)
    assert sound.unverified and checked == []  # nothing proportional to the index at open
    told: list[str] = []
    sound.check_later(told.append).join(10)
    assert told == [] and not (db_path.parent / "index.db.damaged").exists()
    sound.close()
    monkeypatch.undo()
    monkeypatch.setattr(integrity, "VERIFY_INLINE_BYTES", 4096)

    conn = apsw.Connection(str(db_path))  # (the schema's pages: an open reads them, wherever they were put)
    schema = {int(n) for (n,) in conn.execute("SELECT pageno FROM dbstat WHERE name = 'sqlite_schema'")}
    conn.close()
    data = bytearray(db_path.read_bytes())
    page = 4096
    pages = len(data) // page
    for p in range(pages - pages // 3, pages):  # the last third of the pages (chunk text) scribbled over
        if p + 1 not in schema:
            data[p * page + 8 : p * page + 64] = b"\xff" * 56
    db_path.write_bytes(bytes(data))
    damaged = Store.open(db_path)  # opens (the damage is in pages it does not read)
    assert damaged.unverified and damaged.rebuilt is None
    damaged.check_later(told.append).join(30)
    damaged.close()
    assert len(told) == 1 and "rebuilt the next time" in told[0]
    assert (db_path.parent / "index.db.damaged").exists()
    _assert_rebuilt(db_path)  # the marker makes the next open check it at once: moved aside, rebuilt
    assert not (db_path.parent / "index.db.damaged").exists()


def test_the_damage_marker_never_empties_a_file_it_is_a_hard_link_to(tmp_path: Path) -> None:
    """`index.db.damaged` planted as a hard link to a file outside the project: marking the index refuses it, and
    the outside file keeps every byte (O_TRUNC only after the link check)."""
    from saipling.errors import IndexPathUnsafe
    from saipling.storage.sqlite import integrity

    folder = tmp_path / "project" / ".saipling"
    folder.mkdir(parents=True)
    outside = tmp_path / "diary.md"
    outside.write_text("my private diary\n", encoding="utf-8")
    (folder / ("index.db" + integrity.MARKER_SUFFIX)).hardlink_to(outside)
    with pytest.raises(IndexPathUnsafe):
        integrity.mark(str(folder / "index.db"), "damaged")
    assert outside.read_text(encoding="utf-8") == "my private diary\n"


def test_previews_are_derived_from_the_text_not_stored(store: Store) -> None:
    """A chunk's preview is a function of its text (markdown.preview): the index stores none (~10% of its size)
    and gives it back on reading, as the chunker made it; a row of an older index that holds one keeps it."""
    from saipling.markdown.preview import make_preview

    long = "The harbour  lantern\nswung in the gale " * 20
    store.replace_file(record("a.md"), [row(0, "A short line\n\nand a second."), row(1, long)])
    assert [r[0] for r in store.conn.execute("SELECT preview FROM chunks ORDER BY chunk_index")] == [None, None]
    got = store.chunks_for_path("a.md")
    assert [c.preview for c in got] == [make_preview(c.text or "") for c in got]
    assert got[0].preview == "A short line and a second." and got[1].preview.endswith("…")
    assert len(got[1].preview) == 200
    by_id = store.chunks_by_id([got[1].id])
    assert by_id[got[1].id].preview == got[1].preview
    store.conn.execute("UPDATE chunks SET preview = 'kept as written' WHERE id = ?", (got[0].id,))
    assert store.chunks_by_id([got[0].id])[got[0].id].preview == "kept as written"
    store.replace_file(record("a.md"), [row(0, "A short line\n\nand a second."), row(1, long)])  # unchanged rows
    assert store.chunks_by_id([got[0].id])[got[0].id].preview == "kept as written"

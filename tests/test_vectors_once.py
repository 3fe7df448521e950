"""Vectors stored once (issue 34, schema 8): the embedding cache is the index's one table of vectors, an index of
schema 6 (vec0 beside the cache) moves over without embedding anything again, and a searching process follows
another process's writes through the change journal: what changed only, never every row."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from fixtures import chunk_row as row
from saipling.storage.base import FileRecord
from saipling.storage.sqlite import vectors as vectors_module
from saipling.storage.sqlite.schema import _MIGRATIONS, connect
from saipling.storage.sqlite.store import SqliteStore as Store
from saipling.storage.vector_matrix import unit_rows

DIMS = 16


def h(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def unit(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(DIMS).astype(np.float32)
    return v / np.linalg.norm(v)


def half(vec: np.ndarray) -> np.ndarray:
    """A vector as the index stores it (float16, migration 9), read back (float32, unit length)."""
    return unit_rows(np.asarray(vec, dtype=np.float32).astype(np.float16)[None, :])[0]


def record(path: str, salt: str = "") -> FileRecord:
    return FileRecord(path=path, content_hash=h(path + salt), mtime_ns=1, size=1, file_type="note", encoding="utf-8")


def write(store: Store, path: str, texts: list[str], seed: int) -> None:
    rows = [row(i, t) for i, t in enumerate(texts)]
    store.replace_file(record(path, str(seed)), rows, {r.content_hash: unit(seed + i) for i, r in enumerate(rows)})


def texts_of(n: int, salt: str = "") -> list[str]:
    return [f"passage {salt}{n}-{i}" for i in range(3)]


def exact_top(store: Store, truth: dict[int, np.ndarray], q: np.ndarray, k: int) -> list[int]:
    return [c for _, c in sorted(((-float(v @ q), c) for c, v in truth.items()))[:k]]


# -- an index of schema 6 -----------------------------------------------------------------------------------------
def _schema6_index(db: Path) -> dict[str, np.ndarray]:
    """An index as saipling wrote it before vectors were stored once: schema 6, every vector in vec0, most also in
    the cache (under the key with the size), one only in vec0, one cached under the bare model name (before the
    key carried the size), and a cache row of another model. Returns the vectors by chunk text."""
    db.parent.mkdir(parents=True, exist_ok=True)
    conn = connect(str(db))
    for number, sql in enumerate(_MIGRATIONS[:6]):
        conn.execute(sql)
        conn.execute(f"PRAGMA user_version={number + 1}")
    conn.execute(
        "INSERT INTO meta(key, value) VALUES ('provider', 'test'), ('model', 'm'), ('dimensions', ?),"
        " ('vector_generation', '7')",
        (str(DIMS),),
    )
    conn.execute(
        f"CREATE VIRTUAL TABLE chunks_vec USING vec0(chunk_id INTEGER PRIMARY KEY, embedding float[{DIMS}]"
        " distance_metric=cosine)"
    )
    truth: dict[str, np.ndarray] = {}
    for f in range(12):
        path = f"f{f}.md"
        conn.execute(
            "INSERT INTO files(path, content_hash, mtime_ns, size, file_type, chunk_count) VALUES (?, ?, 1, 1,"
            " 'note', 3)",
            (path, h(path)),
        )
        for i, text in enumerate(texts_of(f)):
            conn.execute(
                "INSERT INTO chunks(path, chunk_index, kind, heading_path, start_line, end_line, content_hash,"
                " preview, token_count, text, file_type, visibility, corpus) VALUES (?, ?, 'section', '', ?, ?, ?,"
                " ?, 3, ?, 'note', 'public', 'content')",
                (path, i, i + 1, i + 1, h(text), text[:40], text),
            )
            cid = conn.last_insert_rowid()
            vec = truth[text] = unit(100 + 3 * f + i)
            conn.execute("INSERT INTO chunks_vec(chunk_id, embedding) VALUES (?, ?)", (cid, vec.tobytes()))
            key = None if (f, i) == (0, 0) else "m" if (f, i) == (0, 1) else f"m@{DIMS}"
            if key is not None:
                conn.execute(
                    "INSERT INTO embedding_cache(model, content_hash, vector, created) VALUES (?, ?, ?, 1.0)",
                    (key, h(text), vec.tobytes()),
                )
    conn.execute(
        "INSERT INTO embedding_cache(model, content_hash, vector, created) VALUES ('other@8', ?, ?, 1.0)",
        (h("elsewhere"), np.ones(8, np.float32).tobytes()),
    )
    conn.close()
    return truth


def test_an_index_of_schema_6_moves_its_vectors_into_the_cache_and_searches_the_same(tmp_path: Path) -> None:
    db = tmp_path / ".saipling" / "index.db"
    truth = _schema6_index(db)
    store = Store.open(db)
    try:
        assert store._scalar("PRAGMA user_version") == len(_MIGRATIONS)
        assert (
            store._scalar("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name LIKE 'chunks_vec%'") == 0
        )  # vec0 gone
        # nothing to embed again: every chunk has its vector, the one only vec0 held and the bare-named one too
        assert store.count_unembedded() == 0 and store.unembedded() == [] and store.stats().embedded_chunks == 36
        assert store._scalar("SELECT count(*) FROM embedding_cache WHERE model = ?", (f"m@{DIMS}",)) == 36
        assert store._scalar("SELECT count(*) FROM embedding_cache WHERE model = 'other@8'") == 1  # kept
        ids, mat = store.vector_matrix()
        texts = {cid: text for cid, (_, _, text) in store.chunk_texts(ids.tolist()).items()}
        assert len(ids) == 36
        for cid, vec in zip(ids.tolist(), mat, strict=True):
            np.testing.assert_array_equal(vec, half(truth[texts[cid]]))  # the very vectors vec0 held (as float16)
        by_id = {cid: half(truth[texts[cid]]) for cid in texts}
        for seed in range(5):
            q = unit(900 + seed)
            assert [c for c, _ in store.knn(q, 5)] == exact_top(store, by_id, q, 5)
    finally:
        store.close()


# -- vectors stored once, by content hash ---------------------------------------------------------------------------
def test_each_vector_is_stored_once_and_a_renamed_file_keeps_its_vectors(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "index.db")
    try:
        store.configure_vectors("test", "m", DIMS)
        write(store, "a.md", texts_of(1), 10)
        assert store._scalar("SELECT count(*) FROM embedding_cache") == 3
        assert store._scalar("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name LIKE 'chunks_vec%'") == 0
        before = {
            t: v
            for (_, _, t), v in zip(
                store.chunk_texts(store.vector_matrix()[0].tolist()).values(), store.vector_matrix()[1], strict=True
            )
        }
        store.delete_file("a.md")
        rows = [row(i, t) for i, t in enumerate(texts_of(1))]
        assert store.replace_file(record("renamed.md"), rows) == []  # no vector given: none left to embed
        ids, mat = store.vector_matrix()
        after = {store.chunk_texts([c])[c][2]: v for c, v in zip(ids.tolist(), mat, strict=True)}
        assert set(after) == set(before) and all(np.array_equal(after[t], before[t]) for t in before)
        assert store._scalar("SELECT count(*) FROM embedding_cache") == 3  # still once each
    finally:
        store.close()


# -- another process's writes: patched from the journal ------------------------------------------------------------
def test_another_stores_write_is_patched_in_reading_only_what_changed(tmp_path: Path) -> None:
    db = tmp_path / "index.db"
    writer, reader = Store.open(db), None
    try:
        writer.configure_vectors("test", "m", DIMS)
        for f in range(40):
            write(writer, f"f{f}.md", texts_of(f), 3 * f)
        reader = Store.open(db)
        reader.knn(unit(1), 3)
        loaded, read = reader._matrix, reader._vectors.rows_read
        assert read == 120 and reader._vectors.loads == 1
        write(writer, "f5.md", texts_of(5, "edited "), 5000)  # an edit: 3 chunks replaced
        writer.delete_file("f7.md")  # 3 chunks gone
        hits = reader.knn(unit(5000), 1)
        new_id = reader.chunks_for_path("f5.md")[0].id
        assert hits[0][0] == new_id and hits[0][1] > 0.999
        assert reader._matrix is loaded and reader._vectors.loads == 1  # patched, never read again
        assert reader._vectors.rows_read - read == 3  # the three new vectors, nothing else
        assert len(reader.knn(unit(1), 500)) == 117
        ids, mat = reader.vector_matrix()
        ids2, mat2 = writer.vector_matrix()
        o1, o2 = np.argsort(ids), np.argsort(ids2)
        assert np.array_equal(ids[o1], ids2[o2]) and np.array_equal(mat[o1], mat2[o2])
    finally:
        writer.close()
        if reader is not None:
            reader.close()


def test_the_journal_is_compacted_and_a_reader_left_behind_reads_again(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(vectors_module, "JOURNAL_KEEP", 10)
    db = tmp_path / "index.db"
    writer, reader = Store.open(db), None
    try:
        writer.configure_vectors("test", "m", DIMS)
        for f in range(40):
            write(writer, f"f{f}.md", texts_of(f), 3 * f)
        reader = Store.open(db)
        reader.knn(unit(1), 3)
        write(writer, "f1.md", texts_of(1, "x"), 7000)  # within the journal kept: a patch
        reader.knn(unit(1), 3)
        assert reader._vectors.loads == 1
        for f in range(10, 20):
            write(writer, f"f{f}.md", texts_of(f, "y"), 8000 + 3 * f)
        assert writer._scalar("SELECT count(*) FROM vector_changes") <= 30  # compacted (kept 10, up to 2 x 10 + 6)
        hits = reader.knn(unit(8000 + 30), 1)
        assert reader._vectors.loads == 2  # fell behind what the journal keeps: read again, right
        assert hits[0][0] == reader.chunks_for_path("f10.md")[0].id
    finally:
        writer.close()
        if reader is not None:
            reader.close()


def test_a_reader_of_one_key_reads_again_after_the_index_went_to_another_key_and_back(tmp_path: Path) -> None:
    """Key A -> B -> A in one process (another model run, then back) while another process holds a matrix of A:
    what changed under B was never journaled for A, so the reader reads its matrix again instead of keeping the
    vectors of chunks deleted meanwhile (whose ids a new file may take)."""
    db = tmp_path / "index.db"
    w = Store.open(db)
    r = Store.open(db)
    try:
        w.configure_vectors("test", "m", DIMS)
        for f in range(5):
            write(w, f"f{f}.md", texts_of(f), 3 * f)
        assert sorted(r.vector_matrix()[0].tolist()) == sorted(w.vector_matrix()[0].tolist())
        w.configure_vectors("test", "other", DIMS)
        w.delete_file("f4.md")
        w.configure_vectors("test", "m", DIMS)
        w.replace_file(record("new.md"), [row(i, f"brand new {i}") for i in range(3)])  # (ids freed by f4.md)
        want = sorted(w.vector_matrix()[0].tolist())
        assert want and sorted(r.vector_matrix()[0].tolist()) == want
        gone = r.knn(unit(12), 3)
        assert all(cid in want for cid, _ in gone)
    finally:
        w.close()
        r.close()


def test_an_unusable_vector_is_never_stored_and_its_chunk_stays_to_be_embedded(tmp_path: Path) -> None:
    """NaN or all-zero vectors (an import, a provider's bad answer) are not written: the cache keeps the first vector
    of a text, so one stored would stand for ever; the chunk stays unembedded and takes the good vector later."""
    db = tmp_path / "index.db"
    s = Store.open(db)
    try:
        s.configure_vectors("test", "m", DIMS)
        s.replace_file(record("a.md"), [row(0, "alpha"), row(1, "beta")])
        assert s.count_unembedded() == 2
        ids = {c.text: c.id for c in s.chunks_for_path("a.md")}
        s.set_vectors([(ids["alpha"], h("alpha"), np.full(DIMS, np.nan, dtype=np.float32))], "m")
        s.set_vectors([(ids["beta"], h("beta"), np.zeros(DIMS, dtype=np.float32))], "m")
        assert s.count_unembedded() == 2 and s.stats().embedded_chunks == 0
        s.set_vectors([(ids["alpha"], h("alpha"), unit(3))], "m")
        assert s.count_unembedded() == 1
        assert s.knn(unit(3), 1)[0][0] == ids["alpha"]
    finally:
        s.close()

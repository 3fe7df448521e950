"""Vectors compact on disk (issue 34): the embedding cache stores float16 (migration 9 converts an index's float32
rows in place, nothing embedded again), and a searching process keeps a snapshot of its matrix under `.saipling/`
so that the next process opens it instead of reading every vector from the cache."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from fixtures import chunk_row as row
from saipling.storage.base import FileRecord
from saipling.storage.sqlite.schema import _MIGRATIONS, connect
from saipling.storage.sqlite.store import SqliteStore as Store

DIMS = 16


def h(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def unit(seed: int, dims: int = DIMS) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(dims).astype(np.float32)
    return v / np.linalg.norm(v)


def record(path: str, salt: str = "") -> FileRecord:
    return FileRecord(path=path, content_hash=h(path + salt), mtime_ns=1, size=1, file_type="note", encoding="utf-8")


def exact_top(truth: dict[int, np.ndarray], q: np.ndarray, k: int) -> list[int]:
    return [c for _, c in sorted(((-float(v @ q), c) for c, v in truth.items()))[:k]]


# -- float16 on disk -----------------------------------------------------------------------------------------------
def _schema8_index(db: Path) -> dict[str, np.ndarray]:
    """An index as saipling wrote it before float16: schema 8, float32 vectors in the cache under the index's key,
    a row of another model, and a poisoned row (NaN). Returns the usable vectors by chunk text."""
    db.parent.mkdir(parents=True, exist_ok=True)
    conn = connect(str(db))
    for number, sql in enumerate(_MIGRATIONS[:8]):
        conn.execute(sql)
        conn.execute(f"PRAGMA user_version={number + 1}")
    key = f"m@{DIMS}"
    conn.execute(
        "INSERT INTO meta(key, value) VALUES ('provider', 'test'), ('model', 'm'), ('dimensions', ?),"
        " ('vector_key', ?)",
        (str(DIMS), key),
    )
    truth: dict[str, np.ndarray] = {}
    for f in range(10):
        path = f"f{f}.md"
        conn.execute(
            "INSERT INTO files(path, content_hash, mtime_ns, size, file_type, chunk_count) VALUES (?, ?, 1, 1,"
            " 'note', 3)",
            (path, h(path)),
        )
        for i in range(3):
            text = f"passage {f}-{i}"
            conn.execute(
                "INSERT INTO chunks(path, chunk_index, kind, heading_path, start_line, end_line, content_hash,"
                " preview, token_count, text, file_type, visibility, corpus) VALUES (?, ?, 'section', '', ?, ?, ?,"
                " ?, 3, ?, 'note', 'public', 'content')",
                (path, i, i + 1, i + 1, h(text), text, text),
            )
            vec = unit(f * 10 + i)
            if (f, i) == (9, 2):
                vec = vec.copy()
                vec[3] = np.nan  # stored before vectors were checked: dropped by the migration, embedded again
            else:
                truth[text] = vec
            conn.execute(
                "INSERT INTO embedding_cache(model, content_hash, vector, created) VALUES (?, ?, ?, 1)",
                (key, h(text), vec.astype("<f4").tobytes()),
            )
    conn.execute(
        "INSERT INTO embedding_cache(model, content_hash, vector, created) VALUES ('other@8', ?, ?, 1)",
        (h("elsewhere"), unit(77, 8).astype("<f4").tobytes()),
    )
    conn.close()
    return truth


def test_an_index_of_float32_vectors_is_converted_to_float16_without_embedding_anything(tmp_path: Path) -> None:
    db = tmp_path / ".saipling" / "index.db"
    truth = _schema8_index(db)
    store = Store.open(db)
    try:
        assert store._scalar("PRAGMA user_version") == len(_MIGRATIONS)
        assert store.get_meta("vector_format") == "float16"
        # every row is float16 now, the other model's too: half the bytes
        sizes = dict(store.conn.execute("SELECT model, length(vector) FROM embedding_cache GROUP BY model"))
        assert sizes == {f"m@{DIMS}": DIMS * 2, "other@8": 8 * 2}
        # nothing to embed again but the poisoned row's chunk
        pending = store.unembedded()
        assert [p for _, p, _, _ in pending] == ["f9.md"] and store.count_unembedded() == 1
        ids, mat = store.vector_matrix()
        texts = {cid: text for cid, (_, _, text) in store.chunk_texts(ids.tolist()).items()}
        assert len(ids) == len(truth) == 29
        for cid, vec in zip(ids.tolist(), mat, strict=True):
            want = truth[texts[cid]]
            assert np.abs(vec - want).max() < 1e-3  # equal within float16 rounding
            assert abs(float(np.linalg.norm(vec)) - 1.0) < 1e-6  # read back as unit vectors
        by_id = {cid: truth[texts[cid]] for cid in texts}
        for seed in range(5):
            q = unit(900 + seed)
            assert [c for c, _ in store.knn(q, 5)] == exact_top(by_id, q, 5)
        other = store.cached_vectors("other@8", [h("elsewhere")])[h("elsewhere")]
        assert np.abs(other - unit(77, 8)).max() < 1e-3
    finally:
        store.close()
    again = Store.open(db)  # opening again converts nothing twice
    try:
        assert again.get_meta("vector_format") == "float16"
        assert again._scalar("SELECT min(length(vector)) FROM embedding_cache WHERE model = ?", (f"m@{DIMS}",)) == 32
    finally:
        again.close()


def test_new_vectors_are_written_as_float16(tmp_path: Path) -> None:
    store = Store.open(tmp_path / ".saipling" / "index.db")
    try:
        store.configure_vectors("test", "m", DIMS)
        rows = [row(i, f"text {i}") for i in range(4)]
        store.replace_file(record("a.md"), rows, {r.content_hash: unit(i) for i, r in enumerate(rows)}, "m")
        assert {int(n) for (n,) in store.conn.execute("SELECT length(vector) FROM embedding_cache")} == {DIMS * 2}
        got = store.cached_vectors("m", [r.content_hash for r in rows], DIMS)
        assert len(got) == 4 and all(np.abs(got[r.content_hash] - unit(i)).max() < 1e-3 for i, r in enumerate(rows))
    finally:
        store.close()

"""Vectors compact on disk (issue 34): the embedding cache stores float16 (migration 9 converts an index's float32
rows in place, nothing embedded again), and a searching process keeps a snapshot of its matrix under `.saipling/`
so that the next process opens it instead of reading every vector from the cache."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from fixtures import chunk_row as row
from saipling.storage.base import FileRecord
from saipling.storage.sqlite import vectors as vectors_mod
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


def half(vec: np.ndarray) -> np.ndarray:
    """A vector as the index stores it (float16) and reads it back (float32, unit length)."""
    out = np.asarray(vec, dtype=np.float32).astype(np.float16).astype(np.float32)
    return out / np.sqrt(np.einsum("i,i->", out, out))


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
        # migration 10: every journal row tagged, the journal's high-water mark kept, a row at the current seq
        seq = store._vectors._journal_seq()
        assert seq > 0 and store._vectors._journal_tag(seq) is not None
        assert store._scalar("SELECT count(*) FROM vector_changes WHERE tag IS NULL") == 0
        assert store._scalar("SELECT count(DISTINCT tag) = count(*) FROM vector_changes") == 1
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


# -- the matrix snapshot ---------------------------------------------------------------------------------------------
ROWS_PER_FILE = 10


def _write(store: Store, path: str, seed: int, salt: str = "") -> dict[str, np.ndarray]:
    rows = [row(i, f"{path} {salt} passage {i}") for i in range(ROWS_PER_FILE)]
    vecs = {r.content_hash: unit(seed * 100 + i) for i, r in enumerate(rows)}
    store.replace_file(record(path, salt), rows, vecs, "m")
    return {f"{path} {salt} passage {i}": v for i, v in enumerate(vecs.values())}


def _index(db: Path, files: int = 12) -> dict[str, np.ndarray]:
    """An index of `files` files of ROWS_PER_FILE chunks each with vectors; returns the vectors by text."""
    store = Store.open(db)
    truth: dict[str, np.ndarray] = {}
    try:
        store.configure_vectors("test", "m", DIMS)
        for f in range(files):
            truth |= _write(store, f"f{f}.md", f)
    finally:
        store.close()
    return truth


def _by_id(store: Store, truth: dict[str, np.ndarray]) -> dict[int, np.ndarray]:
    ids = [c.id for p in {t.split(" ")[0] for t in truth} for c in store.chunks_for_path(p)]
    return {cid: half(truth[text]) for cid, (_, _, text) in store.chunk_texts(ids).items() if text in truth}


def _answers_right(store: Store, truth: dict[str, np.ndarray]) -> None:
    by_id = _by_id(store, truth)
    assert len(by_id) == len(truth) and store.embedded_count() == len(truth)
    for seed in range(6):
        q = unit(5000 + seed)
        assert [c for c, _ in store.knn(q, 8)] == exact_top(by_id, q, 8)


def _snapshotted(tmp_path: Path, monkeypatch) -> tuple[Path, dict[str, np.ndarray]]:
    """An index whose searching process read its matrix once and wrote the snapshot."""
    from saipling.storage.sqlite import snapshot

    monkeypatch.setattr(snapshot, "MIN_ROWS", 50)
    db = tmp_path / "project" / ".saipling" / "index.db"
    truth = _index(db)
    first = Store.open(db)
    try:
        _answers_right(first, truth)
        assert first._vectors.loads == 1 and first._vectors.rows_read == len(truth)
        assert first._vectors.wait_for_snapshot(10)  # (written in the background)
        assert first._vectors.snapshot_writes == 1
    finally:
        first.close()
    assert (db.parent / "vectors.snapshot").is_file()
    return db, truth


def test_the_next_open_takes_the_matrix_from_the_snapshot_without_reading_the_cache(tmp_path, monkeypatch) -> None:
    db, truth = _snapshotted(tmp_path, monkeypatch)
    again = Store.open(db)
    try:
        _answers_right(again, truth)
        assert again._vectors.snapshot_reads == 1
        assert again._vectors.loads == 0 and again._vectors.rows_read == 0  # no vector read from the cache
        ids, mat = again.vector_matrix()  # the same rows a full read gives
        fresh = Store.open(db)
        try:
            fresh._vectors.folder = None  # (this one reads the cache)
            ids2, mat2 = fresh.vector_matrix()
            assert fresh._vectors.loads == 1
        finally:
            fresh.close()
        order, order2 = np.argsort(ids), np.argsort(ids2)
        assert np.array_equal(ids[order], ids2[order2]) and np.abs(mat[order] - mat2[order2]).max() < 1e-6
    finally:
        again.close()


def test_another_process_write_after_the_snapshot_is_seen_reading_only_what_changed(tmp_path, monkeypatch) -> None:
    db, truth = _snapshotted(tmp_path, monkeypatch)
    other = Store.open(db)  # (another connection: what another process's store does)
    try:
        truth |= _write(other, "f3.md", 77, "rewritten")
        del_truth = {t: v for t, v in truth.items() if not t.startswith("f3.md  ")}
        other.delete_file("f5.md")
    finally:
        other.close()
    truth = {t: v for t, v in del_truth.items() if not t.startswith("f5.md ")}
    again = Store.open(db)
    try:
        _answers_right(again, truth)
        new_id = next(c for c, v in _by_id(again, truth).items() if np.array_equal(v, half(unit(7700))))
        assert again.knn(unit(7700), 1)[0][0] == new_id  # the new vector is searched
        assert again._vectors.snapshot_reads == 1 and again._vectors.loads == 0
        assert again._vectors.rows_read == ROWS_PER_FILE  # the rewritten file's vectors, nothing else
    finally:
        again.close()


def test_a_damaged_or_cut_snapshot_is_ignored_and_written_again(tmp_path, monkeypatch) -> None:
    db, truth = _snapshotted(tmp_path, monkeypatch)
    snap = db.parent / "vectors.snapshot"
    for damage in ("flip", "cut", "garbage"):
        data = bytearray(snap.read_bytes())
        if damage == "flip":
            data[-7] ^= 0x40
        elif damage == "cut":
            data = data[: len(data) - 100]
        else:
            data = bytearray(b"\x00" * 100)
        snap.write_bytes(bytes(data))
        again = Store.open(db)
        try:
            _answers_right(again, truth)
            assert again._vectors.snapshot_reads == 0 and again._vectors.loads == 1, damage
            assert again._vectors.wait_for_snapshot(10)  # (written in the background)
            assert again._vectors.snapshot_writes == 1, damage  # a whole one again
        finally:
            again.close()


def test_a_snapshot_of_another_key_another_index_or_past_the_journal_is_ignored(tmp_path, monkeypatch) -> None:
    from saipling.storage.sqlite import vectors as vectors_module

    db, truth = _snapshotted(tmp_path, monkeypatch)
    saved = (db.parent / "vectors.snapshot").read_bytes()
    # another vector key: the index's vectors are now another model's (same size)
    store = Store.open(db)
    try:
        store.configure_vectors("test", "m2", DIMS)
        rows = [row(i, f"f0.md  passage {i}") for i in range(ROWS_PER_FILE)]
        store.replace_file(record("f0.md", "m2"), rows, {r.content_hash: unit(900 + i) for i, r in enumerate(rows)})
        m2 = {f"f0.md  passage {i}": unit(900 + i) for i in range(ROWS_PER_FILE)}
        assert store._vectors.snapshot_reads == 0
        _answers_right(store, m2)
        assert store._vectors.snapshot_reads == 0 and store._vectors.loads == 1
    finally:
        store.close()
    # another index file at the same path (deleted and built again): its vectors, not the snapshot's
    for name in ("index.db", "index.db-wal", "index.db-shm"):
        (db.parent / name).unlink(missing_ok=True)
    other_truth = {t: v for t, v in _index(db, files=7).items()}
    (db.parent / "vectors.snapshot").write_bytes(saved)
    store = Store.open(db)
    try:
        _answers_right(store, other_truth)
        assert store._vectors.snapshot_reads == 0 and store._vectors.loads == 1
    finally:
        store.close()
    # the journal's floor passed the snapshot's seq (writers compacted it): read again
    monkeypatch.setattr(vectors_module, "JOURNAL_KEEP", 5)
    store = Store.open(db)
    try:
        store.knn(unit(1), 3)  # (the snapshot the full read above wrote, of this index)
        assert store._vectors.snapshot_reads == 1 and store._vectors.loads == 0
    finally:
        store.close()
    writer = Store.open(db)
    try:
        for f in range(3):
            other_truth |= _write(writer, f"g{f}.md", 40 + f)
        assert int(writer.get_meta("vector_changes_floor") or 0) > 0
    finally:
        writer.close()
    store = Store.open(db)
    try:
        _answers_right(store, other_truth)
        assert store._vectors.snapshot_reads == 0 and store._vectors.loads == 1
    finally:
        store.close()


def test_the_snapshot_is_never_written_through_a_linked_index_folder(tmp_path, monkeypatch) -> None:
    from saipling.storage.sqlite import snapshot

    monkeypatch.setattr(snapshot, "MIN_ROWS", 50)
    db = tmp_path / "project" / ".saipling" / "index.db"
    truth = _index(db)
    outside = tmp_path / "outside"
    outside.mkdir()
    store = Store.open(db)
    try:
        # the folder swapped for a link to a folder outside the project after the index was opened
        real = db.parent.rename(tmp_path / "project" / ".saipling-real")
        db.parent.symlink_to(outside, target_is_directory=True)
        _answers_right(store, truth)  # searches still answer (from the open database)
        assert store._vectors.wait_for_snapshot(10)  # (written in the background)
        assert store._vectors.loads == 1 and store._vectors.snapshot_writes == 0
        assert list(outside.iterdir()) == []  # nothing written there, not even a temporary file
        assert not (real / "vectors.snapshot").exists()
        # put back: the next full read writes it, in the index's own folder
        db.parent.unlink()
        real.rename(db.parent)
        store._vectors.invalidate()
        _answers_right(store, truth)
        assert store._vectors.wait_for_snapshot(10)  # (written in the background)
        assert store._vectors.snapshot_writes == 1 and (db.parent / "vectors.snapshot").is_file()
        assert [p.name for p in db.parent.iterdir() if p.name.endswith(".tmp")] == []
    finally:
        store.close()


def test_clear_removes_the_snapshot(tmp_path, monkeypatch) -> None:
    db, _ = _snapshotted(tmp_path, monkeypatch)
    store = Store.open(db)
    try:
        store.clear()
        assert not (db.parent / "vectors.snapshot").exists()
        assert store.embedded_count() == 0
    finally:
        store.close()


def test_a_process_that_changed_many_vectors_writes_the_snapshot_again(tmp_path, monkeypatch) -> None:
    db, truth = _snapshotted(tmp_path, monkeypatch)
    store = Store.open(db)
    try:
        _answers_right(store, truth)
        assert store._vectors.wait_for_snapshot(10)  # (written in the background)
        assert store._vectors.snapshot_reads == 1 and store._vectors.snapshot_writes == 0
        truth |= _write(store, "f0.md", 50, "again")  # a few rows: patched, no snapshot written
        truth = {t: v for t, v in truth.items() if not t.startswith("f0.md  ")}
        store.knn(unit(1), 3)
        assert store._vectors.wait_for_snapshot(10)  # (written in the background)
        assert store._vectors.snapshot_writes == 0
        for f in range(20, 26):  # an index run's worth of new vectors (60 rows, past the threshold)
            truth |= _write(store, f"f{f}.md", f)
        _answers_right(store, truth)
        assert store._vectors.wait_for_snapshot(10)  # (written in the background)
        assert store._vectors.loads == 0 and store._vectors.snapshot_writes == 1
    finally:
        store.close()
    again = Store.open(db)
    try:
        _answers_right(again, truth)
        assert again._vectors.snapshot_reads == 1 and again._vectors.rows_read == 0  # nothing left to catch up
    finally:
        again.close()


def test_a_read_only_open_uses_the_snapshot_and_never_writes_one(tmp_path, monkeypatch) -> None:
    db, truth = _snapshotted(tmp_path, monkeypatch)
    reader = Store.open(db, readonly=True)
    try:
        _answers_right(reader, truth)
        assert reader._vectors.snapshot_reads == 1 and reader._vectors.rows_read == 0
    finally:
        reader.close()
    (db.parent / "vectors.snapshot").unlink()
    reader = Store.open(db, readonly=True)
    try:
        _answers_right(reader, truth)
        assert reader._vectors.wait_for_snapshot(10)  # (written in the background)
        assert reader._vectors.loads == 1 and reader._vectors.snapshot_writes == 0
        assert not (db.parent / "vectors.snapshot").exists()
    finally:
        reader.close()


def test_a_temporary_snapshot_left_by_a_killed_process_is_removed_by_the_next_write(tmp_path, monkeypatch) -> None:
    """A process killed while writing its snapshot (an editor closing its server: SIGTERM runs no cleanup) leaves
    its temporary file, as big as a snapshot; the next write removes such files once they are an hour old (one
    being written now by another process is left alone)."""
    import os
    import time

    from saipling.storage.sqlite import snapshot

    monkeypatch.setattr(snapshot, "MIN_ROWS", 50)
    db = tmp_path / "project" / ".saipling" / "index.db"
    truth = _index(db)
    old = db.parent / ".vectors.snapshot.4242.0badf00d.tmp"
    fresh = db.parent / ".vectors.snapshot.4343.00c0ffee.tmp"
    old.write_bytes(b"x" * 4096)
    fresh.write_bytes(b"y" * 4096)
    stale = time.time() - 2 * 3600
    os.utime(old, (stale, stale))
    store = Store.open(db)
    try:
        _answers_right(store, truth)
        assert store._vectors.wait_for_snapshot(10)  # (written in the background)
        assert store._vectors.snapshot_writes == 1
    finally:
        store.close()
    assert not old.exists()
    assert fresh.read_bytes() == b"y" * 4096
    assert (db.parent / "vectors.snapshot").is_file()


# -- the snapshot off the request path, with room, of this history (the review of issue 34) ---------------------------
def test_a_search_returns_while_its_snapshot_is_written_and_the_snapshot_is_of_the_seq_it_names(
    tmp_path, monkeypatch
) -> None:
    """The snapshot a search starts is written by another thread: the search (and the next ones, and a write that
    patches the matrix meanwhile) never wait for it, and the file describes the matrix at the seq it records, not
    the rows patched while it was written."""
    import threading

    from saipling.storage.sqlite import snapshot

    monkeypatch.setattr(snapshot, "MIN_ROWS", 50)
    db = tmp_path / "project" / ".saipling" / "index.db"
    truth = _index(db)
    real_write = snapshot.write
    started, release = threading.Event(), threading.Event()

    def slow_write(*args, **kwargs):  # a write that takes as long as the test wants
        started.set()
        release.wait(30)
        return real_write(*args, **kwargs)

    monkeypatch.setattr(snapshot, "write", slow_write)
    store = Store.open(db)
    try:
        found: list = []
        search = threading.Thread(target=lambda: found.append(store.knn(unit(1), 5)), daemon=True)
        search.start()
        assert started.wait(10)
        search.join(5)
        returned = bool(found) and not release.is_set()
        if returned:  # meanwhile: a write patches the matrix, searches answer from it
            seq_frozen = store._vectors._matrix_seq
            ids_frozen = set(store._vectors._matrix.ids())
            truth = {t: v for t, v in truth.items() if not t.startswith("f0.md  ")} | _write(store, "f0.md", 60, "new")
            _answers_right(store, truth)
            assert store._vectors._matrix_seq > seq_frozen and set(store._vectors._matrix.ids()) != ids_frozen
        release.set()
        assert returned, "the search waited for its snapshot to be written"
        assert store._vectors.wait_for_snapshot(10) and store._vectors.snapshot_writes == 1
        snap = snapshot.read(
            db.parent,
            index_id=str(store.get_meta("index_id")),
            key=f"m@{DIMS}",
            dims=DIMS,
            floor=0,
            seq_now=10**9,
            **({"tag_at": store._vectors._journal_tag} if hasattr(store._vectors, "_journal_tag") else {}),
        )
        assert snap is not None and snap.seq == seq_frozen and set(snap.ids.tolist()) == ids_frozen
    finally:
        release.set()
        store.close()
    again = Store.open(db)  # a new process takes it and catches up from the journal
    try:
        _answers_right(again, truth)
        assert again._vectors.snapshot_reads == 1 and again._vectors.loads == 0
        assert again._vectors.rows_read == ROWS_PER_FILE
    finally:
        again.close()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MB tmpfs (root only; skipped where mounting is not allowed), as tests/test_disk_full.py mounts it."""
    if not (hasattr(os, "geteuid") and os.geteuid() == 0):
        pytest.skip("needs root to mount a small tmpfs")
    mnt = tmp_path / "small"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode(errors='replace').strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_no_snapshot_is_written_without_room_for_it_and_one_the_disk_cuts_short_leaves_nothing(
    small_disk: Path, monkeypatch, caplog
) -> None:
    """Room for the snapshot but not for the margin kept free for the index: skipped, said once. A write that
    finds the disk full anyway (filled after the check) leaves no temporary file. Searches answer throughout."""
    from saipling.storage.sqlite import snapshot

    monkeypatch.setattr(snapshot, "MIN_ROWS", 50)
    monkeypatch.setattr(snapshot, "FREE_MARGIN", 256 << 10, raising=False)  # (a 2 MB disk: a margin that fits on it)
    db = small_disk / "project" / ".saipling" / "index.db"
    truth = _index(db)
    store = Store.open(db)
    try:
        st = os.statvfs(small_disk)
        (small_disk / "filler").write_bytes(b"\0" * (st.f_bavail * st.f_frsize - (100 << 10)))  # 100 KB left
        with caplog.at_level(logging.INFO, logger="saipling"):
            for _ in range(2):  # two full reads, two snapshots wanted
                store._vectors.invalidate()
                _answers_right(store, truth)
                assert store._vectors.wait_for_snapshot(10)
        assert store._vectors.loads == 2 and store._vectors.snapshot_writes == 0
        assert sorted(p.name for p in db.parent.iterdir() if "snapshot" in p.name) == []
        said = [r for r in caplog.records if "snapshot not written" in r.getMessage() and r.levelno >= logging.WARNING]
        assert len(said) == 1 and "kept free" in said[0].getMessage()
        # the check passes (the disk filled after it): the write fails on ENOSPC and removes its temporary file
        monkeypatch.setattr(snapshot, "free_bytes", lambda dir_fd: 1 << 40)
        with open(small_disk / "filler", "ab", buffering=0) as f, contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 4096)
        assert os.statvfs(small_disk).f_bavail == 0
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="saipling"):
            store._vectors.invalidate()
            _answers_right(store, truth)
            assert store._vectors.wait_for_snapshot(10)
        assert any("No space left" in r.getMessage() for r in caplog.records)
        assert store._vectors.snapshot_writes == 0
        assert sorted(p.name for p in db.parent.iterdir() if "snapshot" in p.name) == []
        # room again: written
        (small_disk / "filler").unlink()
        store._vectors.invalidate()
        _answers_right(store, truth)
        assert store._vectors.wait_for_snapshot(10) and store._vectors.snapshot_writes == 1
        assert (db.parent / "vectors.snapshot").is_file()
    finally:
        store.close()


def _snapshot_seq(db: Path) -> int:
    import json

    from saipling.storage.sqlite import snapshot

    with open(db.parent / "vectors.snapshot", "rb") as f:
        return int(json.loads(f.read(len(snapshot.MAGIC) + snapshot.HEADER)[len(snapshot.MAGIC) :])["seq"])


def test_a_snapshot_of_another_history_is_not_used_after_a_backup_is_restored_and_written_past_it(
    tmp_path, monkeypatch
) -> None:
    """index.db restored from a backup (same index id) and then written past the snapshot's seq: the journal's seqs
    reach the snapshot's again but name other changes. The snapshot is ignored, the matrix read in full and the
    snapshot written again; answers are those of the restored index's own vectors."""
    import shutil

    db, truth = _snapshotted(tmp_path, monkeypatch)  # (a snapshot at the backup's seq)
    backup = tmp_path / "index.db.backup"
    shutil.copyfile(db, backup)
    backup_truth = dict(truth)
    store = Store.open(db)  # the history the backup does not hold: more vectors, the snapshot advanced past them
    try:
        seq_backup = _snapshot_seq(db)
        for f in range(20, 26):
            truth |= _write(store, f"f{f}.md", f)
        _answers_right(store, truth)
        assert store._vectors.wait_for_snapshot(10) and store._vectors.snapshot_writes == 1
        assert store._vectors.snapshot_reads == 1 and store._vectors.loads == 0
    finally:
        store.close()
    seq_other = _snapshot_seq(db)
    assert seq_other > seq_backup
    # the backup restored (its WAL and shared memory gone with the file they belonged to), then other writes
    for name in ("index.db-wal", "index.db-shm"):
        (db.parent / name).unlink(missing_ok=True)
    shutil.copyfile(backup, db)
    store = Store.open(db)
    try:
        restored = dict(backup_truth)
        for f in range(30, 38):  # more rows than the other history wrote: its seqs pass the snapshot's
            restored |= _write(store, f"f{f}.md", f)
        assert store._vectors._journal_seq() > seq_other
    finally:
        store.close()
    again = Store.open(db)
    try:
        _answers_right(again, restored)
        assert again._vectors.snapshot_reads == 0 and again._vectors.loads == 1
        assert again._vectors.wait_for_snapshot(10) and again._vectors.snapshot_writes == 1  # of this history
    finally:
        again.close()
    assert _snapshot_seq(db) > seq_other
    fresh = Store.open(db)  # which the next process takes
    try:
        _answers_right(fresh, restored)
        assert fresh._vectors.snapshot_reads == 1 and fresh._vectors.loads == 0
    finally:
        fresh.close()


def _old_process_writes(db: Path, path: str, seed: int) -> dict[str, np.ndarray]:
    """A file written into the (migrated) index the way saipling before migration 9, still running, writes it:
    float32 vectors into the cache under the index's key, then the chunks (the journal's triggers are the index's)."""
    conn = connect(str(db))
    truth: dict[str, np.ndarray] = {}
    try:
        with conn:
            conn.execute(
                "INSERT INTO files(path, content_hash, mtime_ns, size, file_type, chunk_count) VALUES (?, ?, 1, 1,"
                " 'note', ?)",
                (path, h(path), ROWS_PER_FILE),
            )
            for i in range(ROWS_PER_FILE):
                text = f"{path} old process passage {i}"
                truth[text] = vec = unit(seed * 100 + i)
                conn.execute(
                    "INSERT OR IGNORE INTO embedding_cache(model, content_hash, vector, created) VALUES (?, ?, ?, 1)",
                    (f"m@{DIMS}", h(text), vec.astype("<f4").tobytes()),
                )
                conn.execute(
                    "INSERT INTO chunks(path, chunk_index, kind, heading_path, start_line, end_line, content_hash,"
                    " token_count, text, file_type, visibility, corpus) VALUES (?, ?, 'section', '', ?, ?, ?, 3, ?,"
                    " 'note', 'public', 'content')",
                    (path, i, i + 1, i + 1, h(text), text),
                )
    finally:
        conn.close()
    return truth


def test_float32_vectors_an_older_process_writes_into_a_float16_index_are_searched_as_they_are_counted(
    tmp_path, monkeypatch
) -> None:
    """A float32 row written by an older process counts as a vector, as a float16 one does: the matrix (whole read,
    patch from the journal, snapshot), the cache lookups and the counts agree, so its chunk is searched, never listed
    as unembedded and never embedded again."""
    db, truth = _snapshotted(tmp_path, monkeypatch)
    searching = Store.open(db)  # a process holding its matrix while the older one writes
    try:
        _answers_right(searching, truth)
        old = _old_process_writes(db, "old.md", 66)
        assert {int(n) for (n,) in searching.conn.execute("SELECT length(vector) FROM embedding_cache")} == {
            DIMS * 2,
            DIMS * 4,
        }
        truth |= old
        _answers_right(searching, truth)  # (patched from the journal)
        assert searching.knn(unit(6600), 1)[0][1] > 0.999
    finally:
        searching.close()
    for reader in ("snapshot", "cache"):
        store = Store.open(db)
        try:
            if reader == "cache":
                store._vectors.folder = None  # (a whole read of the cache)
            assert store.count_unembedded() == 0 and store.unembedded() == []
            assert store.stats().embedded_chunks == len(truth)  # (the SQL count: no matrix loaded yet)
            _answers_right(store, truth)
            assert store.knn(unit(6600), 1)[0][1] > 0.999
            assert (store._vectors.loads, store._vectors.snapshot_reads) == ((1, 0) if reader == "cache" else (0, 1))
            hashes = [h(t) for t in old]
            got = store.cached_vectors("m", hashes, DIMS)  # what the embed queue takes instead of embedding again
            assert len(got) == ROWS_PER_FILE and np.abs(got[hashes[0]] - unit(6600)).max() < 1e-6
        finally:
            store.close()


def test_a_snapshot_wanted_while_another_store_of_the_process_writes_one_is_written_by_a_later_search(
    tmp_path, monkeypatch
) -> None:
    """One snapshot is written at a time per process: a second project's store that wants one meanwhile writes it
    at its next search once the first is done (not only after many more changes)."""
    import threading

    from saipling.storage.sqlite import snapshot

    monkeypatch.setattr(snapshot, "MIN_ROWS", 50)
    first_db = tmp_path / "one" / ".saipling" / "index.db"
    second_db = tmp_path / "two" / ".saipling" / "index.db"
    first_truth, second_truth = _index(first_db), _index(second_db, files=8)
    real_write = snapshot.write
    release = threading.Event()

    def slow_write(folder, *args, **kwargs):
        if Path(folder) == first_db.parent:
            release.wait(30)
        return real_write(folder, *args, **kwargs)

    monkeypatch.setattr(snapshot, "write", slow_write)
    first, second = Store.open(first_db), Store.open(second_db)
    try:
        _answers_right(first, first_truth)  # its write waits
        _answers_right(second, second_truth)  # wants one while the first is written: not started
        assert second._vectors.wait_for_snapshot(10) and second._vectors.snapshot_writes == 0
        release.set()
        assert first._vectors.wait_for_snapshot(10) and first._vectors.snapshot_writes == 1
        _answers_right(second, second_truth)  # nothing changed, the snapshot is still due
        assert second._vectors.wait_for_snapshot(10) and second._vectors.snapshot_writes == 1
        assert (second_db.parent / "vectors.snapshot").is_file()
    finally:
        release.set()
        first.close()
        second.close()


# -- a compact snapshot, mapped ----------------------------------------------------------------------------------------
BIG_DIMS = 256


def _compact_snapshotted(
    tmp_path: Path, monkeypatch, rows: int = 8000, files: int = 4
) -> tuple[Path, dict[int, np.ndarray]]:
    """An index held compact (int8 codes: COMPACT_FLOATS lowered) of `rows` chunks in `files` files, searched once
    so that its snapshot (int8) is written; returns the stored vectors by chunk id."""
    from saipling.storage import vector_matrix
    from saipling.storage.sqlite import snapshot

    monkeypatch.setattr(snapshot, "MIN_ROWS", 50)
    monkeypatch.setattr(vector_matrix, "COMPACT_FLOATS", 1000)
    db = tmp_path / "project" / ".saipling" / "index.db"
    store = Store.open(db)
    try:
        store.configure_vectors("test", "m", BIG_DIMS)
        per = rows // files
        for f in range(files):
            chunks = [row(i, f"f{f} passage {i}") for i in range(per)]
            vecs = {c.content_hash: unit(f * 100_000 + i, BIG_DIMS) for i, c in enumerate(chunks)}
            store.replace_file(record(f"f{f}.md"), chunks, vecs, "m")
        ids = [c.id for f in range(files) for c in store.chunks_for_path(f"f{f}.md")]
        by_id = {}
        for cid, (_, _, text) in store.chunk_texts(ids).items():
            f, _, i = text.split(" ")  # ("f<file> passage <i>")
            by_id[cid] = half(unit(int(f[1:]) * 100_000 + int(i), BIG_DIMS))
        assert len(by_id) == rows
        assert store.knn(unit(1, BIG_DIMS), 5)
        assert store._vectors._matrix is not None and store._vectors._matrix.compact
        assert store._vectors.wait_for_snapshot(20) and store._vectors.snapshot_writes == 1
    finally:
        store.close()
    return db, by_id


def test_a_compact_snapshot_is_mapped_not_read_before_the_first_answer(tmp_path, monkeypatch) -> None:
    """Opening a big index takes its compact snapshot without reading it: the codes, ids and sign bits are pages of
    the file mapped (the memory the process allocates for the first search is a small part of the snapshot), and
    the answer is the exact one."""
    import tracemalloc

    db, by_id = _compact_snapshotted(tmp_path, monkeypatch)
    payload = (db.parent / "vectors.snapshot").stat().st_size
    q = unit(424242, BIG_DIMS)
    tracemalloc.start()
    try:
        again = Store.open(db)
        try:
            found = [c for c, _ in again.knn(q, 8)]
            _, peak = tracemalloc.get_traced_memory()
            assert again._vectors.snapshot_reads == 1 and again._vectors.loads == 0
        finally:
            again.close()
    finally:
        tracemalloc.stop()
    assert found == exact_top(by_id, q, 8)
    # (read into memory: the whole payload, ~2.4 MB here; mapped: ~0.85 MB, the sign bits copied word-major
    # (256 KB) and the buffers of the sign pass and of a pool of 4,000 of the 8,000 rows)
    assert peak < payload / 2, (peak, payload)


@pytest.mark.parametrize("preadv", [True, False])
def test_a_damaged_compact_snapshot_never_answers_the_search_that_maps_it(tmp_path, monkeypatch, preadv) -> None:
    """A compact snapshot is checked in the background while the first search runs on it: when its CRC-32 differs,
    that search's answer is not given; the search runs again on the vectors read from the index (the right
    answer), and a whole snapshot is written over the damaged one. The damage here swaps the ids of two rows: a
    search using those rows would name the wrong chunks."""
    db, by_id = _compact_snapshotted(tmp_path, monkeypatch)
    if not preadv:  # (a platform without it: the check reads with pread)
        monkeypatch.delattr(os, "preadv", raising=False)
    snap = db.parent / "vectors.snapshot"
    q = unit(1 * 100_000 + 17, BIG_DIMS)  # (the vector of a chunk: its own id must come first)
    target = exact_top(by_id, q, 1)[0]
    data = bytearray(snap.read_bytes())
    start = 8 + 4096
    ids = np.frombuffer(bytes(data[start : start + 8 * len(by_id)]), dtype="<i8").copy()
    a = int(np.nonzero(ids == target)[0][0])
    b = (a + 1) % len(ids)
    ids[a], ids[b] = ids[b], ids[a]
    data[start : start + 8 * len(ids)] = ids.tobytes()
    snap.write_bytes(bytes(data))
    again = Store.open(db)
    try:
        found = [c for c, _ in again.knn(q, 8)]
        assert found == exact_top(by_id, q, 8) and found[0] == target
        assert again._vectors.snapshot_damaged == 1 and again._vectors.loads == 1
        assert again._vectors.wait_for_snapshot(20) and again._vectors.snapshot_writes == 1
    finally:
        again.close()
    fresh = Store.open(db)  # (the snapshot written again is whole: taken as it is)
    try:
        assert [c for c, _ in fresh.knn(q, 8)] == exact_top(by_id, q, 8)
        assert fresh._vectors.snapshot_reads == 1 and fresh._vectors.snapshot_damaged == 0
    finally:
        fresh.close()


def test_a_compact_snapshot_whose_header_miscounts_its_rows_is_never_mapped(tmp_path, monkeypatch) -> None:
    """The CRC-32 covers the payload, not the header that places its sections: a header whose row count was changed
    (same length) would map ids, steps and codes at the wrong offsets and answer wrongly on every open. Its sections
    must add up to its payload, or the vectors are read from the index."""
    import json

    db, by_id = _compact_snapshotted(tmp_path, monkeypatch)
    snap = db.parent / "vectors.snapshot"
    data = bytearray(snap.read_bytes())
    head = bytes(data[8 : 8 + 4096])
    rows = json.loads(head.rstrip(b"\0 ").decode())["rows"]
    for sep in (b'"rows": ', b'"rows":'):
        if sep + b"%d" % rows in head:
            new = head.replace(sep + b"%d" % rows, sep + b"%d" % (rows - 1000))
            break
    assert new != head and len(new) == len(head)
    data[8 : 8 + 4096] = new
    snap.write_bytes(bytes(data))
    q = unit(1 * 100_000 + 17, BIG_DIMS)
    again = Store.open(db)
    try:
        found = [c for c, _ in again.knn(q, 8)]
        assert again._vectors.loads == 1  # (refused: read from the index)
    finally:
        again.close()
    assert found == exact_top(by_id, q, 8)


# -- a mapped snapshot another process cuts short or rewrites ---------------------------------------------------------
_SEARCHER = r"""
import json, sys, threading
import numpy as np
from saipling.storage import vector_matrix
from saipling.storage.sqlite import snapshot
from saipling.storage.sqlite.store import SqliteStore

vector_matrix.COMPACT_FLOATS = 1000  # (held compact, as the test's index was written)
snapshot.MIN_ROWS = 50
if sys.argv[2] == "no-lease":  # (a system where no lease can be had: leases off or their break time short)
    snapshot._break_time = 0
seeds = json.loads(sys.argv[3])


def unit(seed):
    v = np.random.default_rng(seed).standard_normal(256).astype(np.float32)
    return v / np.linalg.norm(v)


def top(store, seed):
    return [c for c, _ in store.knn(unit(seed), 8)]


store = SqliteStore.open(sys.argv[1])
before = [top(store, s) for s in seeds]
vectors = store._vectors
print(json.dumps({"mapped": vectors.snapshot_reads, "leased": getattr(vectors, "_lease", None) is not None}),
      flush=True)
stop, during, failed = threading.Event(), [], []


def keep_searching():  # (searches without a pause while the other process writes the file)
    try:
        while not stop.is_set():
            during.append(top(store, seeds[len(during) % len(seeds)]))
    except Exception as exc:
        failed.append(repr(exc))


worker = threading.Thread(target=keep_searching)
worker.start()
sys.stdin.readline()  # (the other process is done with the file)
after = [top(store, s) for s in seeds]
stop.set()
worker.join()
print(json.dumps({"before": before, "after": after, "during": len(during), "failed": failed,
                  "let_go": getattr(vectors, "snapshot_let_go", None), "loads": vectors.loads}), flush=True)
store.close()
"""


@contextlib.contextmanager
def _searcher(tmp_path: Path, source: str, *args: str) -> Iterator[subprocess.Popen[str]]:
    """A real searching process running `source` with `args` (a line on stdin lets it go on); killed if it is
    still running when the test ends."""
    import sys

    script = tmp_path / "searcher.py"
    script.write_text(source)
    child = subprocess.Popen(
        [sys.executable, str(script), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        yield child
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def _line(child: subprocess.Popen[str]) -> dict:
    """The searcher's next report (a JSON line; {} when it died)."""
    assert child.stdout is not None
    return json.loads(child.stdout.readline() or "{}")


def _finish(child: subprocess.Popen[str]) -> dict:
    """Let the searcher go on and end: its last report; it must exit 0 (SIGBUS: -7)."""
    assert child.stdin is not None
    with contextlib.suppress(BrokenPipeError):  # (a searcher killed by SIGBUS reads nothing more)
        child.stdin.write("\n")
        child.stdin.flush()
    out = _line(child)
    assert child.wait(30) == 0, out
    return out


@pytest.mark.parametrize("how", ["truncate", "rewrite", "truncate-without-lease"])
def test_a_process_searching_a_mapped_snapshot_survives_another_process_cutting_it_short(
    tmp_path, monkeypatch, how
) -> None:
    """Another process truncates the compact snapshot a searching process has mapped (a backup restored over it, a
    shell's `>`) or rewrites it in place: a page of the mapping past the file's new end would raise SIGBUS and kill
    the searching process at its next search (before: it died), and rewritten pages would change its rows. The
    searcher holds the file under a read lease: the other process's truncate waits (a fraction of a second, never
    the kernel's 45 s) while the searcher copies its rows, then goes on; the searcher keeps answering, exactly. Where
    no lease can be had the rows are read into memory, never mapped. The next open reads the index."""
    import json
    import sys
    import time

    db, by_id = _compact_snapshotted(tmp_path, monkeypatch)
    snap = db.parent / "vectors.snapshot"
    size = snap.stat().st_size
    seeds = [424242, 1 * 100_000 + 17, 3 * 100_000 + 5]
    mode = "no-lease" if how.endswith("without-lease") else "lease"
    with _searcher(tmp_path, _SEARCHER, str(db), mode, json.dumps(seeds)) as child:
        ready = _line(child)
        assert ready.get("mapped") == 1, ready  # (the matrix came from the snapshot)
        time.sleep(0.3)  # (the child searches without a pause meanwhile)
        if how == "rewrite":  # the payload overwritten in place, same size
            writer = (
                "import os, sys; f = open(sys.argv[1], 'r+b'); f.seek(4104)"
                "; f.write(os.urandom(int(sys.argv[2]) - 4104)); f.close()"
            )
        else:
            writer = "import os, sys; os.truncate(sys.argv[1], 0)"
        started = time.monotonic()
        subprocess.run([sys.executable, "-c", writer, str(snap), str(size)], check=True, timeout=30)
        waited = time.monotonic() - started
        assert snap.stat().st_size == (size if how == "rewrite" else 0)
        time.sleep(0.3)
        out = _finish(child)
    exact = [exact_top(by_id, unit(s, BIG_DIMS), 8) for s in seeds]
    assert out["before"] == exact and out["after"] == exact
    assert ready["leased"] is (mode == "lease")  # (mapped under a lease, or read into memory)
    assert out["during"] > 0 and out["failed"] == []
    assert out["loads"] == 0  # (nothing read again: the rows the searcher had were its own)
    assert out["let_go"] == (1 if mode == "lease" else 0)
    assert waited < 10, waited  # (the writer waited for the copy, not for the kernel's lease-break-time)
    again = Store.open(db)  # the snapshot cut short or rewritten is not used: the index is read
    try:
        assert [c for c, _ in again.knn(unit(seeds[0], BIG_DIMS), 8)] == exact[0]
        assert again._vectors.loads == 1
    finally:
        again.close()


def test_a_snapshot_written_from_a_mapped_matrix_is_whole_and_keeps_the_mapping(tmp_path, monkeypatch) -> None:
    """A process whose matrix came from a mapped snapshot and then patched more than an eighth of it writes a new
    snapshot from a background thread that reads the rows without the store's lock, from the mapping (they were
    copied first, under the lock: ~0.65 s of CPU at a million rows, on the search that asked), the old file's
    lease held meanwhile; the new snapshot is the patched rows, exactly."""
    db, by_id = _compact_snapshotted(tmp_path, monkeypatch)
    other = Store.open(db)  # 600 passages of f0 rewritten: 1,200 journal entries (> 8000 / 8: a new snapshot is due;
    try:  # < 2,000: the matrix is patched, not read again)
        per = len(by_id) // 4
        rows = [row(i, f"f0 passage {i}" + (" rewritten" if i < 600 else "")) for i in range(per)]
        fresh_vecs = {r.content_hash: unit(7_000_000 + i, BIG_DIMS) for i, r in enumerate(rows[:600])}
        old_ids = {c.id for c in other.chunks_for_path("f0.md")}
        other.replace_file(record("f0.md", "rewritten"), rows, fresh_vecs, "m")
        now = {c.id: c for c in other.chunks_for_path("f0.md")}
        texts = other.chunk_texts(list(now))
    finally:
        other.close()
    for cid in old_ids - set(now):
        del by_id[cid]
    for cid in set(now) - old_ids:
        i = int(texts[cid][2].split(" ")[2])
        by_id[cid] = half(unit(7_000_000 + i, BIG_DIMS))
    assert len(set(now) - old_ids) == 600
    from saipling.storage.vector_matrix import VectorMatrix

    owned: list[bool] = []  # (whether the matrix still read the mapping when it was made its own)
    own = VectorMatrix.own
    monkeypatch.setattr(VectorMatrix, "own", lambda m: (owned.append(m.borrowed), own(m))[1])
    again = Store.open(db)
    try:
        q = unit(7_000_000 + 5, BIG_DIMS)
        assert [c for c, _ in again.knn(q, 8)] == exact_top(by_id, q, 8)
        assert again._vectors.snapshot_reads == 1 and again._vectors.loads == 0
        assert again._vectors.wait_for_snapshot(20) and again._vectors.snapshot_writes == 1
        assert owned == []  # never copied: the writer read the mapping
        assert again._vectors._lease is not None and again._vectors._matrix.borrowed
        assert [c for c, _ in again.knn(q, 8)] == exact_top(by_id, q, 8)
    finally:
        again.close()
    fresh = Store.open(db)
    try:
        for seed in (1, 7_000_000 + 17, 424242):
            q = unit(seed, BIG_DIMS)
            assert [c for c, _ in fresh.knn(q, 8)] == exact_top(by_id, q, 8)
        assert fresh._vectors.snapshot_reads == 1 and fresh._vectors.loads == 0 and fresh._vectors.rows_read == 0
    finally:
        fresh.close()


_BROKEN_LEASE_SEARCHER = r"""
import fcntl, json, sys
import numpy as np
from saipling.storage import vector_matrix
from saipling.storage.sqlite import snapshot
from saipling.storage.sqlite.store import SqliteStore

vector_matrix.COMPACT_FLOATS = 1000
snapshot.MIN_ROWS = 50
snapshot.LEASE_POLL = 3600.0  # (the watcher never looks: as if this process were stopped)
seeds = json.loads(sys.argv[2])


def unit(seed):
    v = np.random.default_rng(seed).standard_normal(256).astype(np.float32)
    return v / np.linalg.norm(v)


store = SqliteStore.open(sys.argv[1])
before = [[c for c, _ in store.knn(unit(s), 8)] for s in seeds]
vectors = store._vectors
lease = vectors._lease
# the kernel takes the lease away itself once a writer waited lease-break-time (45 s): emulated here
fcntl.fcntl(lease._fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
print(json.dumps({"mapped": vectors.snapshot_reads, "leased": lease is not None}), flush=True)
sys.stdin.readline()  # (the other process cut the file short meanwhile)
after = [[c for c, _ in store.knn(unit(s), 8)] for s in seeds]
print(json.dumps({"before": before, "after": after, "loads": vectors.loads}), flush=True)
store.close()
"""


def test_a_process_whose_lease_the_kernel_took_away_reads_its_vectors_again(tmp_path, monkeypatch) -> None:
    """A searcher that could not copy its rows in time (stopped longer than the kernel's lease-break-time) has lost
    its lease, and the file was cut short meanwhile: its next search must not touch the mapping (SIGBUS: before,
    it died); it sees the lease gone and the file changed, drops the matrix and reads the vectors from the index."""
    import json
    import sys

    db, by_id = _compact_snapshotted(tmp_path, monkeypatch)
    snap = db.parent / "vectors.snapshot"
    seeds = [424242, 2 * 100_000 + 9]
    with _searcher(tmp_path, _BROKEN_LEASE_SEARCHER, str(db), json.dumps(seeds)) as child:
        ready = _line(child)
        assert ready == {"mapped": 1, "leased": True}, ready
        subprocess.run([sys.executable, "-c", "import os, sys; os.truncate(sys.argv[1], 0)", str(snap)], timeout=30)
        assert snap.stat().st_size == 0
        out = _finish(child)
    exact = [exact_top(by_id, unit(s, BIG_DIMS), 8) for s in seeds]
    assert out["before"] == exact and out["after"] == exact
    assert out["loads"] == 1  # (the vectors read again from the index, not from the mapping)


def test_a_mapped_snapshot_behind_the_journal_is_caught_up_without_copying_its_rows(tmp_path, monkeypatch) -> None:
    """Another process deleted files and added more chunks than it deleted since the snapshot was written: the
    first search after open patches the mapped rows and puts the extra ones in a tail (the whole mapped matrix was
    copied to make room: ~1 s of CPU at a million rows). Its answers are those of a full read of the index, the
    deleted chunks never among them, the new ones found; the matrix still reads the mapping."""
    import fcntl

    from saipling.storage.sqlite import snapshot

    db, by_id = _compact_snapshotted(tmp_path, monkeypatch, files=40)
    other = Store.open(db)  # (another connection: what another process's store does)
    try:
        gone = {c.id for p in ("f3.md", "f7.md") for c in other.chunks_for_path(p)}
        for p in ("f3.md", "f7.md"):
            other.delete_file(p)
        chunks = [row(i, f"f99 passage {i}") for i in range(1000)]
        other.replace_file(
            record("f99.md"), chunks, {c.content_hash: unit(9_900_000 + i, BIG_DIMS) for i, c in enumerate(chunks)}, "m"
        )
        new = {c.id: half(unit(9_900_000 + c.chunk_index, BIG_DIMS)) for c in other.chunks_for_path("f99.md")}
    finally:
        other.close()
    assert len(gone) == 400 and len(new) == 1000
    truth = {c: v for c, v in by_id.items() if c not in gone} | new
    monkeypatch.setattr(snapshot, "MIN_ROWS", 10**6)  # (no new snapshot written: the catch-up alone is measured)
    queries = [unit(424242 + s, BIG_DIMS) for s in range(4)] + [by_id[c] for c in sorted(gone)[:4]]
    queries += [new[c] for c in sorted(new)[:4]]
    again, full = Store.open(db), Store.open(db)
    try:
        full._vectors.folder = None  # (this one reads every vector from the index)
        for q in queries:
            found = [c for c, _ in again.knn(q, 8)]
            assert found == exact_top(truth, q, 8) == [c for c, _ in full.knn(q, 8)]
            assert not gone & set(found)
        vectors = again._vectors
        assert vectors.snapshot_reads == 1 and vectors.loads == 0 and vectors.rows_read == len(new)
        matrix = vectors._matrix
        assert matrix is not None and len(matrix) == len(truth)
        if hasattr(fcntl, "F_SETLEASE") and snapshot._lease_break_ok():  # (mapped where leases are had: Linux)
            assert vectors._lease is not None  # still held: the matrix reads the mapping
            assert matrix.borrowed and not matrix._mat.flags.owndata  # the mapped rows, never copied
    finally:
        again.close()
        full.close()


def test_a_snapshot_being_written_from_the_mapping_stops_before_the_mapping_is_let_go(tmp_path, monkeypatch) -> None:
    """Another process waits to write the mapped snapshot while this one writes a new snapshot from its mapped rows:
    the rows are made the matrix's own, the writer stops at its next block and is waited for, and only then is the
    lease let go (a truncation under a reader of the mapping kills the process); nothing half written is left, the
    answers stay right, and a later search writes the snapshot."""
    import threading

    from saipling.storage.sqlite import snapshot

    db, by_id = _compact_snapshotted(tmp_path, monkeypatch)
    other = Store.open(db)  # (1,200 journal entries: a new snapshot is due at the first search)
    try:
        per = len(by_id) // 4
        rows = [row(i, f"f0 passage {i}" + (" rewritten" if i < 600 else "")) for i in range(per)]
        fresh_vecs = {r.content_hash: unit(7_000_000 + i, BIG_DIMS) for i, r in enumerate(rows[:600])}
        old_ids = {c.id for c in other.chunks_for_path("f0.md")}
        other.replace_file(record("f0.md", "rewritten"), rows, fresh_vecs, "m")
        now = {c.id for c in other.chunks_for_path("f0.md")}
        texts = other.chunk_texts(list(now))
    finally:
        other.close()
    for cid in old_ids - now:
        del by_id[cid]
    for cid in now - old_ids:
        by_id[cid] = half(unit(7_000_000 + int(texts[cid][2].split(" ")[2]), BIG_DIMS))
    before = (db.parent / "vectors.snapshot").stat()
    gate, reading = threading.Event(), threading.Event()
    write = snapshot.write

    def held_write(folder, state, **kw):  # (the writer waits until the lease is breaking)
        reading.set()
        gate.wait(20)
        return write(folder, state, **kw)

    monkeypatch.setattr(snapshot, "write", held_write)
    again = Store.open(db)
    try:
        q = unit(7_000_000 + 5, BIG_DIMS)
        assert [c for c, _ in again.knn(q, 8)] == exact_top(by_id, q, 8)
        vectors = again._vectors
        assert reading.wait(20) and vectors._lease is not None
        state = vectors._snapshot_state
        breaker = threading.Thread(target=vectors._lease_broken, args=(vectors._lease,))
        breaker.start()
        for _ in range(200):
            if state._stop.is_set():
                break
            breaker.join(0.05)
        assert state._stop.is_set() and breaker.is_alive()  # the lease is held while the writer may read
        gate.set()
        breaker.join(20)
        assert not breaker.is_alive() and vectors._lease is None and not vectors._matrix.borrowed
        assert vectors.snapshot_writes == 0 and vectors.snapshot_let_go == 1
        after = (db.parent / "vectors.snapshot").stat()
        assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)  # nothing written
        assert not [p for p in db.parent.iterdir() if p.name.endswith(".tmp")]
        monkeypatch.setattr(snapshot, "write", write)
        for seed in (1, 424242):
            q = unit(seed, BIG_DIMS)
            assert [c for c, _ in again.knn(q, 8)] == exact_top(by_id, q, 8)
        assert vectors.wait_for_snapshot(20) and vectors.snapshot_writes == 1  # (written again, from its own rows)
    finally:
        again.close()


@pytest.mark.parametrize("held_steps", [0, 3, 1000])
def test_a_mapped_snapshot_is_checked_in_place_while_its_lease_is_held_and_read_after(
    tmp_path, monkeypatch, held_steps
) -> None:
    """The background check of a mapped snapshot reads its payload in place (a read-only mapping of its own, no
    copy) while the lease is held and nobody waits to write the file; from the step the lease is let go or
    breaking it reads the rest through the descriptor (a mapping nothing protects is never read). Either way a
    whole payload passes and a damaged one fails."""
    import contextlib
    import zlib

    from saipling.storage.sqlite import snapshot

    monkeypatch.setattr(snapshot, "_CHECK_MAPPED", 4096)
    payload = np.random.default_rng(3).integers(0, 256, 100_000, dtype=np.uint8).tobytes()
    path = tmp_path / "file"
    path.write_bytes(b"H" * 100 + payload)

    class Lease:
        steps = 0

        @contextlib.contextmanager
        def reading(self):
            self.steps += 1
            yield self.steps <= held_steps

    reads: list[int] = []
    preadv = os.preadv
    monkeypatch.setattr(os, "preadv", lambda fd, bufs, off: (reads.append(off), preadv(fd, bufs, off))[1])
    for damaged in (False, True):
        if damaged:
            data = bytearray(path.read_bytes())
            data[100 + 4096 * 2 + 7] ^= 1  # (in the part read in place when 3 steps are held)
            data[-5] ^= 1  # (and in the part read through the descriptor)
            path.write_bytes(bytes(data))
        reads.clear()
        lease = Lease()
        fd = os.open(path, os.O_RDONLY)
        check = snapshot.Check(fd, 100, len(payload), zlib.crc32(payload), tmp_path, lease)  # type: ignore[arg-type]
        assert check.ok() is not damaged
        mapped = min(held_steps, -(-len(payload) // 4096)) * 4096
        assert lease.steps >= 1
        assert (not reads) == (mapped >= len(payload))  # read through the descriptor only past the held steps
        assert not reads or reads[0] == 100 + mapped


def test_a_compact_snapshot_maps_its_sign_bits_as_the_matrix_searches_them_and_a_version_3_one_is_still_used(
    tmp_path, monkeypatch
) -> None:
    """Version 4 stores the sign bits word-major (each word of every row together), as the matrix searches them: they
    are pages of the mapping, not a transposed copy (48 MB at a million rows, made before the first answer). A
    version 3 snapshot (bits row by row) is still used, its bits transposed, with the same answers."""
    import zlib

    from saipling.storage.sqlite import snapshot

    db, by_id = _compact_snapshotted(tmp_path, monkeypatch)
    path = db.parent / "vectors.snapshot"
    head = path.read_bytes()[: len(snapshot.MAGIC) + snapshot.HEADER]
    h = json.loads(head[len(snapshot.MAGIC) :].decode())
    assert h["version"] == 4 and h["sign_words"] == 4
    queries = [unit(s, BIG_DIMS) for s in (1, 424242, 7)]
    again = Store.open(db)
    try:
        answers = [[c for c, _ in again.knn(q, 8)] for q in queries]
        assert answers == [exact_top(by_id, q, 8) for q in queries]
        matrix = again._vectors._matrix
        assert again._vectors.snapshot_reads == 1 and matrix._bits.shape == (4, len(by_id))
        if again._vectors._lease is not None:  # (mapped: the words are the file's pages)
            assert not matrix._bits.flags.owndata
    finally:
        again.close()
    # the same snapshot as version 3 wrote it: bits (rows, words), its CRC and version to match
    data = bytearray(path.read_bytes())
    n, dims, words = h["rows"], h["dims"], h["sign_words"]
    start = len(snapshot.MAGIC) + snapshot.HEADER + n * 8 + dims * 4 + n * dims
    bits = np.frombuffer(bytes(data[start:]), dtype="<u8").reshape(words, n)
    data[start:] = np.ascontiguousarray(bits.T).tobytes()
    h["version"], h["crc"] = 3, zlib.crc32(bytes(data[len(snapshot.MAGIC) + snapshot.HEADER :]))
    data[: len(head)] = snapshot.MAGIC + json.dumps(h).encode().ljust(snapshot.HEADER, b" ")
    path.write_bytes(bytes(data))
    old = Store.open(db)
    try:
        assert [[c for c, _ in old.knn(q, 8)] for q in queries] == answers
        assert old._vectors.snapshot_reads == 1 and old._vectors.loads == 0 and old._vectors.snapshot_damaged == 0
    finally:
        old.close()


def test_the_rescored_vectors_read_as_one_row_are_the_stored_ones_row_by_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compact matrix rescores its candidates on their stored vectors, read in one aggregated row (ids, lengths,
    one blob: Vectors._aggregated, row S33): the same float32 unit vectors as read row by row, a float32 row (a
    saipling of before migration 9) beside float16 ones, an unusable (NaN) row and a chunk without a vector left
    out, the ids as asked in any order; an empty list and ids of no chunk give nothing."""
    store = Store.open(tmp_path / ".saipling" / "index.db")
    try:
        store.configure_vectors("test", "m", DIMS)
        texts = [f"passage {i}" for i in range(12)]
        store.replace_file(
            record("a.md"), [row(i, t) for i, t in enumerate(texts)], {h(t): unit(i) for i, t in enumerate(texts)}, "m"
        )
        key = store._vectors.index_key()
        ids = {text: cid for cid, (_, _, text) in store.chunk_texts(store.vector_matrix()[0].tolist()).items()}
        conn = store.conn
        with conn:
            conn.execute(  # one row as float32
                "UPDATE embedding_cache SET vector = ? WHERE model = ? AND content_hash = ?",
                (unit(3).astype("<f4").tobytes(), key, h(texts[3])),
            )
            bad = unit(5).astype("<f2")
            bad[2] = np.nan
            conn.execute(
                "UPDATE embedding_cache SET vector = ? WHERE model = ? AND content_hash = ?",
                (bad.tobytes(), key, h(texts[5])),
            )
            conn.execute("DELETE FROM embedding_cache WHERE model = ? AND content_hash = ?", (key, h(texts[7])))
        asked = [ids[t] for t in reversed(texts)] + [10**9]
        got = store._vectors._exact_vectors(asked)
        assert sorted(got) == sorted(ids[t] for i, t in enumerate(texts) if i not in (5, 7))
        for i, t in enumerate(texts):
            if i in (5, 7):
                continue
            want = unit(i) if i == 3 else half(unit(i)) / np.linalg.norm(half(unit(i)))
            assert got[ids[t]].dtype == np.float32 and np.abs(got[ids[t]] - want).max() < 1e-6
        store._vectors._utf8 = False  # (the row-by-row read, as in a database whose text is not UTF-8)
        by_rows = store._vectors._exact_vectors(asked)
        assert by_rows.keys() == got.keys() and all(np.array_equal(by_rows[c], got[c]) for c in got)
        store._vectors._utf8 = None
        monkeypatch.setattr(vectors_mod, "AGGREGATE_MAX", 3)  # (more ids than that: row by row, the same vectors)
        many = store._vectors._exact_vectors(asked)
        assert many.keys() == got.keys() and all(np.array_equal(many[c], got[c]) for c in got)
        assert store._vectors._exact_vectors([]) == {} and store._vectors._exact_vectors([10**9]) == {}
        agg = store._vectors._aggregated(key, DIMS, asked)
        assert agg is not None and len(agg[0]) == 11  # (one row: every stored vector of a usable length, NaN too)
    finally:
        store.close()


@pytest.mark.parametrize("steps", ["nan", "negative"])
def test_a_mapped_snapshot_whose_steps_are_not_positive_numbers_is_not_used(tmp_path, monkeypatch, steps) -> None:
    """A compact snapshot is searched before its background CRC check ends: a file whose steps (the codes' scale)
    were damaged would score with NaN (numpy's RuntimeWarning) until the check threw the answer away. Such a file
    is refused at open (the steps are dims floats, checked at once): the index is read, the answers are exact, and
    no search computes with a NaN."""
    import warnings

    from saipling.storage.sqlite import snapshot

    db, by_id = _compact_snapshotted(tmp_path, monkeypatch)
    snap = db.parent / "vectors.snapshot"
    head = snap.read_bytes()[: len(snapshot.MAGIC) + snapshot.HEADER]
    rows = int(json.loads(head[len(snapshot.MAGIC) :].decode())["rows"])
    bad = np.full(BIG_DIMS, np.nan if steps == "nan" else -0.01, dtype="<f4").tobytes()
    with snap.open("r+b") as f:  # the steps section: after the header and the ids (int64 each)
        f.seek(len(snapshot.MAGIC) + snapshot.HEADER + rows * 8)
        f.write(bad)
    store = Store.open(db)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # (a NaN in a product: RuntimeWarning raised)
            got = [c for c, _ in store.knn(unit(7, BIG_DIMS), 8)]
        assert got == exact_top(by_id, unit(7, BIG_DIMS), 8)
        assert store._vectors.snapshot_reads == 0 and store._vectors.loads == 1
    finally:
        store.close()

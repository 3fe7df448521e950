"""The search-time vector matrix across processes: reloaded when another process changes vectors, and only then.

A CLI search beside a running server logs to search_log; that commit must not make the server reload every
vector on its next search (it did while the matrix keyed on SQLite's data_version)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from saipling.storage.base import ChunkRow, FileRecord
from saipling.storage.sqlite.store import SqliteStore as Store

DIMS = 16


def _unit(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(DIMS).astype(np.float32)
    return v / np.linalg.norm(v)


def _row(text: str) -> ChunkRow:
    h = hashlib.sha256(text.encode()).hexdigest()
    return ChunkRow(
        chunk_index=0,
        kind="section",
        section_heading=None,
        heading_path="",
        start_line=1,
        end_line=1,
        content_hash=h,
        preview=text[:40],
        token_count=4,
        text=text,
        file_type="note",
        entity_type=None,
        entity_name=None,
        book_id=None,
        chapter_id=None,
        chapter_num=None,
        visibility="public",
        corpus="content",
    )


def _write(store: Store, path: str, seed: int) -> None:
    text = f"{path} text {seed}"
    row = _row(text)
    record = FileRecord(
        path=path, content_hash=row.content_hash, mtime_ns=1, size=len(text), file_type="note", encoding="utf-8"
    )
    store.replace_file(record, [row], {row.content_hash: _unit(seed)}, "m")


def _in_other_process(db: Path, body: str) -> None:
    """Run `body` with `store` open on db in a new Python process (a real second writer)."""
    code = (
        textwrap.dedent(
            f"""
        import sys
        sys.path[:0] = {[str(Path(__file__).parent)]!r}
        from test_store_crossprocess import _write
        from saipling.storage.sqlite.store import SqliteStore as Store
        store = Store.open({str(db)!r})
        """
        )
        + textwrap.dedent(body)
        + "\nstore.close()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, capture_output=True)


def _opened(tmp_path: Path) -> tuple[Path, Store]:
    db = tmp_path / "index.db"
    store = Store.open(db)
    store.configure_vectors("test", "m", DIMS)
    for n in range(30):
        _write(store, f"f{n}.md", n)
    return db, store


def test_search_log_written_by_another_process_keeps_the_matrix(tmp_path: Path) -> None:
    db, store = _opened(tmp_path)
    try:
        before = store.knn(_unit(3), 5)
        loaded = store._matrix
        assert loaded is not None
        _in_other_process(db, 'store.log_search("dragon", "cli", "lexical", 3, 0.5, 1.2)')
        assert store.search_log(limit=1)[0].query == "dragon"  # we do see the other process's commit
        assert store.knn(_unit(3), 5) == before
        assert store._matrix is loaded  # not reloaded
    finally:
        store.close()


def test_vector_write_by_another_process_is_picked_up_by_what_changed(tmp_path: Path) -> None:
    """Another process's vector write is patched into the matrix from the change journal (issue 34): the same
    matrix object, no vector read again but the new ones, and the same contents as a fresh load."""
    db, store = _opened(tmp_path)
    try:
        store.knn(_unit(3), 5)
        loaded = store._matrix
        _in_other_process(db, '_write(store, "new.md", 1000)\nstore.delete_file("f3.md")')
        got = store.knn(_unit(1000), 1)
        assert store._matrix is loaded  # patched, not read again
        new_id = store.chunks_for_path("new.md")[0].id
        assert got[0][0] == new_id and got[0][1] > 0.999
        assert store.chunks_for_path("f3.md") == []
        assert len(store.knn(_unit(3), 100)) == 30  # 30 files, one replaced by new.md
        _write(store, "f4.md", 2000)  # our own write after it still patches
        ids, mat = store.vector_matrix()
        fresh = Store.open(db)
        ids2, mat2 = fresh.vector_matrix()
        fresh.close()
        o1, o2 = np.argsort(ids), np.argsort(ids2)
        assert np.array_equal(ids[o1], ids2[o2])
        np.testing.assert_array_equal(mat[o1], mat2[o2])
    finally:
        store.close()


def test_a_reused_chunk_id_in_a_reused_slot_gets_its_new_vector(tmp_path: Path) -> None:
    """Another process re-embeds the file holding the highest chunk id: SQLite gives the new chunk that same id; the
    matrix must follow the content, not the id (a fresh load agrees)."""
    db, store = _opened(tmp_path)
    try:
        store.knn(_unit(3), 5)
        last = store.chunks_for_path("f29.md")[0].id
        _in_other_process(db, '_write(store, "f29.md", 5000)')
        assert store.chunks_for_path("f29.md")[0].id == last  # (the case: the same id again)
        got = store.knn(_unit(5000), 1)
        assert got[0][0] == last and got[0][1] > 0.999
        assert all(cid != last for cid, _ in store.knn(_unit(29), 3))  # the old vector is gone
    finally:
        store.close()


def test_our_own_writes_still_patch_after_another_process_logged(tmp_path: Path) -> None:
    """Patching in place survives foreign non-vector commits; the result equals a fresh load."""
    db, store = _opened(tmp_path)
    try:
        store.knn(_unit(0), 5)
        loaded = store._matrix
        _in_other_process(db, 'store.log_search("q", "cli", "lexical", 0, 0.0, 1.0)')
        _write(store, "f5.md", 500)
        assert store._matrix is loaded
        ids, mat = store.vector_matrix()
        fresh = Store.open(db)
        ids2, mat2 = fresh.vector_matrix()
        fresh.close()
        o1, o2 = np.argsort(ids), np.argsort(ids2)
        assert np.array_equal(ids[o1], ids2[o2])
        np.testing.assert_allclose(mat[o1], mat2[o2])
    finally:
        store.close()


def test_term_statistics_follow_every_text_write(tmp_path: Path) -> None:
    """The keyword statistics cache is not keyed on vectors: a keyword-only write, ours or another process's,
    refreshes it."""
    db = tmp_path / "index.db"
    store = Store.open(db)
    try:
        row = _row("lanterns over the harbour")
        record = FileRecord(
            path="a.md", content_hash=row.content_hash, mtime_ns=1, size=1, file_type="note", encoding="utf-8"
        )
        store.replace_file(record, [row])
        assert store.term_doc_freqs(["lantern"]) == ({"lantern": 1}, 1)
        row2 = _row("a lantern again")
        store.replace_file(
            FileRecord(
                path="b.md", content_hash=row2.content_hash, mtime_ns=1, size=1, file_type="note", encoding="utf-8"
            ),
            [row2],
        )
        assert store.term_doc_freqs(["lantern"]) == ({"lantern": 2}, 2)
        _in_other_process(db, 'store.delete_file("a.md")')
        assert store.term_doc_freqs(["lantern"]) == ({"lantern": 1}, 1)
    finally:
        store.close()

"""Store.replace_file touches only the chunks an edit changed (storage/file_writes.py), on a real SQLite file."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest

from saipling.storage.base import match_stored
from saipling.storage.sqlite.store import SqliteStore as Store
from test_store import fts_integrity, fts_paths, record, row, unit


@pytest.fixture
def store(tmp_path: Path):
    s = Store.open(tmp_path / "proj" / ".saipling" / "index.db")
    s.configure_vectors("test", "m", 8)
    yield s
    s.close()


def writes_log(store: Store) -> None:
    """Temp triggers recording every row update and delete of `chunks` (and of its keyword index)."""
    store.conn.execute("CREATE TEMP TABLE writes(kind TEXT, id INTEGER)")
    store.conn.execute(
        "CREATE TEMP TRIGGER log_upd AFTER UPDATE ON main.chunks BEGIN"
        " INSERT INTO writes VALUES ('update', old.id); END"
    )
    store.conn.execute(
        "CREATE TEMP TRIGGER log_del AFTER DELETE ON main.chunks BEGIN"
        " INSERT INTO writes VALUES ('delete', old.id); END"
    )


def writes(store: Store) -> list[tuple[str, int]]:
    rows = [(k, i) for k, i in store.conn.execute("SELECT kind, id FROM writes ORDER BY rowid")]
    store.conn.execute("DELETE FROM writes")
    return rows


def ids_by_text(store: Store, path: str) -> dict[str, int]:
    return {c.text: c.id for c in store.chunks_for_path(path)}


TEXTS = [f"paragraph {i} about the {w} of the keep" for i, w in enumerate(["gate", "well", "tower", "moat"])]


def test_an_edit_rewrites_only_the_changed_chunk(store: Store) -> None:
    rows = [row(i, t) for i, t in enumerate(TEXTS)]
    vecs = {r.content_hash: unit(i) for i, r in enumerate(rows)}
    assert store.replace_file(record("a.md", "1"), rows, vecs, "m") == []
    before = ids_by_text(store, "a.md")
    store.vector_matrix()
    writes_log(store)

    edited = TEXTS[2] + " and the drums of Axis"
    new_rows = [*rows[:2], row(2, edited), rows[3]]
    missing = store.replace_file(record("a.md", "2"), new_rows, {})

    after = ids_by_text(store, "a.md")
    assert missing == [after[edited]]  # the new chunk waits for the embedding phase
    assert {t: after[t] for t in TEXTS if t != TEXTS[2]} == {t: before[t] for t in TEXTS if t != TEXTS[2]}
    assert writes(store) == [("delete", before[TEXTS[2]])]  # the unchanged rows are not written at all
    assert fts_paths(store, "drums") == ["a.md"] and fts_paths(store, "tower") == ["a.md"]
    fts_integrity(store)
    ids, mat = store.vector_matrix()  # the unchanged chunks keep their vectors; the edited one has none yet
    got = dict(zip(ids.tolist(), mat, strict=True))
    assert set(got) == {before[t] for t in TEXTS if t != TEXTS[2]}
    np.testing.assert_allclose(got[before[TEXTS[3]]], unit(3), atol=1e-3)  # (float16 on disk)
    assert [c.chunk_index for c in store.chunks_for_path("a.md")] == [0, 1, 2, 3]


def test_moved_chunks_keep_their_row_and_keywords(store: Store) -> None:
    """A line inserted at the top shifts every chunk: their line ranges and indexes are updated in place, the
    keyword index is not rewritten, vectors stay, and a new first chunk is inserted."""
    rows = [row(i, t) for i, t in enumerate(TEXTS)]
    store.replace_file(record("a.md", "1"), rows, {r.content_hash: unit(i) for i, r in enumerate(rows)}, "m")
    before = ids_by_text(store, "a.md")
    writes_log(store)
    fts_before = store._scalar("SELECT count(*) FROM chunks_fts_data")

    shifted = [
        dataclasses.replace(r, chunk_index=r.chunk_index + 1, start_line=r.start_line + 2, end_line=r.end_line + 2)
        for r in rows
    ]
    top = row(0, "a new opening paragraph on the moat")
    missing = store.replace_file(record("a.md", "2"), [top, *shifted], {})

    after = store.chunks_for_path("a.md")
    assert [c.text for c in after] == [top.text, *TEXTS]
    assert [c.chunk_index for c in after] == [0, 1, 2, 3, 4]
    assert [(c.start_line, c.end_line) for c in after[1:]] == [(r.start_line, r.end_line) for r in shifted]
    assert {c.text: c.id for c in after[1:]} == before
    assert missing == [after[0].id]
    assert all(k == "update" for k, _ in writes(store))  # moved, not deleted and inserted again
    fts_integrity(store)
    assert fts_paths(store, "opening") == ["a.md"] and fts_paths(store, "gate") == ["a.md"]
    assert store._scalar("SELECT count(*) FROM chunks_fts_data") <= fts_before + 2  # one new row's postings
    assert len(store.vector_matrix()[0]) == 4


def test_duplicate_and_reordered_chunks_and_metadata_changes(store: Store) -> None:
    rows = [row(0, TEXTS[0]), row(1, TEXTS[1]), row(2, TEXTS[0])]  # the same passage twice
    store.replace_file(record("a.md", "1"), rows, {rows[0].content_hash: unit(0), rows[1].content_hash: unit(1)}, "m")
    swapped = [
        dataclasses.replace(rows[1], chunk_index=0, entity_type="character"),
        dataclasses.replace(rows[0], chunk_index=1, entity_type="character"),
    ]
    assert store.replace_file(record("a.md", "2"), swapped, {}) == []
    after = store.chunks_for_path("a.md")
    assert [(c.chunk_index, c.text, c.entity_type) for c in after] == [
        (0, TEXTS[1], "character"),
        (1, TEXTS[0], "character"),
    ]
    fts_integrity(store)
    # a passage removed and added back in the same write gets the stored vector of its twin
    again = [*swapped, dataclasses.replace(rows[0], chunk_index=2, start_line=99, end_line=99)]
    assert store.replace_file(record("a.md", "3"), again, {}) == []
    assert len(store.vector_matrix()[0]) == 3
    fresh = Store.open(Path(store.path))
    assert sorted(fresh.vector_matrix()[0].tolist()) == sorted(store.vector_matrix()[0].tolist())
    fresh.close()


def test_the_pairing_of_new_chunks_with_stored_rows() -> None:
    """storage.base.match_stored, which both backends use: a chunk takes the first stored row left of its own hash,
    text and heading path; a repeated passage takes one row per copy; the same text under another heading is new."""
    columns = ["content_hash", "text", "heading_path"]
    stored = [(10, row(0, TEXTS[0]).content_hash, TEXTS[0], ""), (11, row(1, TEXTS[1]).content_hash, TEXTS[1], "")]
    stored += [(12, row(2, TEXTS[0]).content_hash, TEXTS[0], ""), (13, row(3, TEXTS[2]).content_hash, TEXTS[2], "")]
    chunks = [row(0, TEXTS[1]), row(1, TEXTS[0]), row(2, TEXTS[0]), row(3, TEXTS[0]), row(4, TEXTS[2], "Tower")]
    got = match_stored(chunks, stored, columns)
    assert [(r[0], ch.chunk_index) for r, ch in got.kept] == [(11, 0), (10, 1), (12, 2)]
    assert [ch.chunk_index for ch in got.new] == [3, 4]  # a third copy; the same text under a heading of its own
    assert [r[0] for r in got.left] == [13]


def test_a_kept_chunk_without_a_vector_gets_the_cached_one(store: Store) -> None:
    rows = [row(0, TEXTS[0]), row(1, TEXTS[1])]
    store.replace_file(record("a.md", "1"), rows, {})
    assert len(store.vector_matrix()[0]) == 0
    vec = {rows[0].content_hash: unit(5)}
    assert store.replace_file(record("a.md", "2"), rows, vec) == []
    ids, mat = store.vector_matrix()
    assert ids.tolist() == [ids_by_text(store, "a.md")[TEXTS[0]]]
    np.testing.assert_allclose(mat[0], unit(5), atol=1e-3)  # (float16 on disk)


# -- the indexer's text phase: one commit per batch of files -------------------------------------------------


def many_notes(tmp_path: Path, n: int = 40) -> Path:
    from fixtures import make_project

    files = {f"n{i:02d}.md": f"# Note {i}\n\nThe harbour light number {i} swung.\n" for i in range(n)}
    root = make_project(tmp_path, files)
    for f in root.glob("*.md"):  # written long ago: no racy timestamps to settle (a commit each)
        os.utime(f, (1_600_000_000, 1_600_000_000))
    return root


def test_a_batch_of_files_is_one_commit(tmp_path: Path) -> None:
    from fixtures import open_project

    root = many_notes(tmp_path)
    with open_project(root) as project:
        commits: list[int] = []
        project.store.conn.set_commit_hook(lambda: commits.append(1) or False)
        s = project.index()
        assert s.files == s.changed == 40 and not s.failed
        assert len(commits) < 10  # per file: more than 40


def test_a_failed_batch_commit_fails_its_files_and_the_next_run_stores_them(tmp_path: Path) -> None:
    from fixtures import open_project

    root = many_notes(tmp_path)
    with open_project(root) as project:
        fail = [True]

        def hook() -> bool:  # True turns the commit into a rollback (as a full disk would fail it)
            if fail[0] and project.store.conn.changes() and project.indexer.text.write_lock.locked():
                fail[0] = False
                return True
            return False

        project.store.conn.set_commit_hook(hook)
        s = project.index()
        project.store.conn.set_commit_hook(None)
        assert not fail[0] and s.failed  # the first batch's files, each reported
        assert s.files == 40 - len(s.failed) == len(project.store.file_states())
        assert {p for p, _ in s.failed}.isdisjoint(project.store.file_states())
        fts_integrity(project.store)
        failed = len(s.failed)
        assert failed > 1  # a whole batch
        s = project.index()
        assert s.changed == failed and not s.failed
        assert len(project.store.file_states()) == 40


def test_a_files_new_chunks_go_in_many_rows_to_a_statement(store: Store) -> None:
    """A statement per row made FTS5 write its pending terms out per row (the keyword trigger's statement journal):
    a file's new chunks go in a few statements, each chunk still with its own id, vector and keywords."""
    from saipling.storage.sqlite.file_writes import INSERT_ROWS

    n = 2 * INSERT_ROWS + 7  # three statements, the last one short
    texts = [f"passage {i} of the long file, word{i}x" for i in range(n)]
    rows = [row(i, t) for i, t in enumerate(texts)]
    vecs = {r.content_hash: unit(i) for i, r in enumerate(rows) if i % 3 == 0}
    inserts: list[str] = []

    def trace(_cursor, sql: str, _bindings) -> bool:
        if sql.lstrip().upper().startswith("INSERT INTO CHUNKS("):
            inserts.append(sql)
        return True

    store.conn.exec_trace = trace
    try:
        missing = store.replace_file(record("long.md", "1"), rows, vecs, "m")
    finally:
        store.conn.exec_trace = None
    assert len(inserts) == 3
    stored = {c.chunk_index: c for c in store.chunks_for_path("long.md")}
    assert sorted(stored) == list(range(n))
    assert all(stored[i].text == texts[i] for i in range(n))
    assert sorted(missing) == sorted(stored[i].id for i in range(n) if i % 3)
    for i in (0, 3, INSERT_ROWS + (-INSERT_ROWS) % 3, n - 1 - (n - 1) % 3):  # each vector under its own chunk id
        cid = stored[i].id
        assert np.allclose(store.chunk_vectors([cid])[cid], unit(i), atol=1e-3)  # (float16 on disk)
    for i in (0, INSERT_ROWS, n - 1):  # keywords of every statement's rows
        assert fts_paths(store, f"word{i}x") == ["long.md"]
    fts_integrity(store)


def test_a_batch_of_new_files_is_written_in_one_insert(store: Store) -> None:
    """replace_files: the chunks of a batch's new files go in together (one keyword segment per batch)."""
    from saipling.storage.base import FileWrite

    files = [
        FileWrite(record(f"n{i}.md", "1"), [row(j, f"note {i} part {j} word{i}x{j}") for j in range(4)])
        for i in range(3)
    ]
    inserts: list[str] = []

    def trace(_cursor, sql: str, _bindings) -> bool:
        if sql.lstrip().upper().startswith("INSERT INTO CHUNKS("):
            inserts.append(sql)
        return True

    store.conn.exec_trace = trace
    try:
        store.replace_files(files)
    finally:
        store.conn.exec_trace = None
    assert len(inserts) == 1
    for i in range(3):
        assert [c.text for c in store.chunks_for_path(f"n{i}.md")] == [
            f"note {i} part {j} word{i}x{j}" for j in range(4)
        ]
        assert fts_paths(store, f"word{i}x3") == [f"n{i}.md"]
    fts_integrity(store)


def test_the_share_of_chunks_without_a_vector_counts_the_chunks_once(store: Store) -> None:
    """unembedded_share (asked by every semantic search after any write, this process's or another's): one count
    of every chunk, not one for the chunks without a vector and another for all of them (each ~35 ms of CPU at
    1M chunks, seconds of waiting after another process's write)."""
    rows = [row(i, t) for i, t in enumerate(TEXTS)]
    vecs = {r.content_hash: unit(i) for i, r in enumerate(rows) if i != 1}
    store.replace_file(record("a.md", "1"), rows, vecs, "m")
    store.vector_matrix()  # (the matrix loaded, as a searching process has it)
    counts: list[str] = []

    def trace(_cursor, sql: str, _bindings) -> bool:
        if "count(*) FROM chunks" in sql:
            counts.append(sql)
        return True

    store.conn.exec_trace = trace
    try:
        share = store.unembedded_share("m", 8)
    finally:
        store.conn.exec_trace = None
    assert share == (1, 4)
    assert len(counts) == 1

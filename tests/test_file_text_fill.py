"""Issue 34: a first index is keyword-searchable by its passages before the whole-file keyword list (`files_fts`) is
filled (storage/sqlite/file_writes.py `fill_file_text`, indexing/indexer.py `_fill_file_text`). A search during the
fill is answered from the passages, a save during it waits for one batch at most, a killed run's fill is finished by
the next run, and the index left is the one a run writing every file's whole-file keywords at once leaves. Real
SQLite files and real index runs (keyword-only)."""

from __future__ import annotations

import threading
from pathlib import Path

import apsw
import pytest

from fixtures import open_project, write_file
from saipling import status
from saipling.errors import StorageError
from saipling.indexing import indexer, text_phase
from saipling.indexing.records import IndexProgress
from saipling.storage.base import FileWrite
from saipling.storage.sqlite.schema import FILE_TEXT_META
from saipling.storage.sqlite.store import SqliteStore
from test_first_index_writes import FILES, content, vault, vocab
from test_storage_conformance import record, row


def file_rows(db: Path) -> tuple[int, int]:
    """(files, files with a whole-file keyword row)."""
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        files = conn.execute("SELECT count(*) FROM files").fetchall()[0][0]
        rows = conn.execute("SELECT count(*) FROM files_fts_docsize").fetchall()[0][0]
        return files, rows
    finally:
        conn.close()


def docsizes(db: Path) -> list[tuple]:
    """Each file's whole-file keyword row's token count, by path (what BM25 reads beside the terms)."""
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return conn.execute(
            "SELECT f.path, d.sz FROM files f JOIN files_fts_docsize d ON d.id = f.rowid ORDER BY f.path"
        ).fetchall()
    finally:
        conn.close()


# files whose whole-file keywords hold more than their passages: identifier parts and CJK bigrams
EXTRAS = {
    "code.md": "# Streams\n\nCall `createReadStream` then `setTimeout()`; `createReadStream` again.\n\n## More\n\n"
    "Use `readFileSync` or `setTimeout`.\n",
    "jp.md": "# 海辺の町\n\n東京の海辺で灯台守が手紙を書いた。\n\n## 二\n\n灯台の光が海を照らす。\n",
}


def with_extras(root: Path) -> Path:
    for rel, text in EXTRAS.items():
        write_file(root, rel, text)
    return root


def kept_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, edit: str | None = None, extras: bool = False
) -> Path:
    """The same vault indexed writing every file's whole-file keywords at once (no first-index deferral)."""
    with monkeypatch.context() as m:
        m.setattr(text_phase, "DEFER_INDEXES_MIN_FILES", 10**9)
        root = vault(tmp_path, name)
        if edit is not None:
            write_file(root, "book/ch003.md", edit)
        if extras:
            with_extras(root)
        with open_project(root) as project:
            project.index()
    return root / ".saipling" / "index.db"


def test_a_search_during_the_fill_finds_passages_and_status_says_the_fill_is_pending(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert status.FILE_TEXT_META == FILE_TEXT_META  # (status names it without importing the store)
    monkeypatch.setattr(indexer, "FILL_FILE_TEXT", 20)  # (several batches)
    root = vault(tmp_path, "filling")
    write_file(root, "book/zz_last.md", "# Last\n\nThe quartermaster counted zeppelins at dawn.\n")
    db = root / ".saipling" / "index.db"
    seen: list[tuple[int, int, list[str], bool]] = []
    with open_project(root) as project:

        def progress(p: IndexProgress) -> None:
            if p.phase == "file_keywords" and len(seen) < 3:
                found = project.search({"query": "quartermaster zeppelins", "mode": "lexical", "maxResults": 3})
                pending = status.report(project)["fileKeywordsPending"]
                seen.append((*file_rows(db), [r["filePath"] for r in found["results"]], pending))

        project.index(progress=progress)
        assert status.report(project)["fileKeywordsPending"] is False
    assert len(seen) == 3
    files, rows = seen[0][:2]
    assert files == FILES + 1 and rows < files  # (the fill had not finished)
    for _files, _rows, found, pending in seen:
        assert found[:1] == ["book/zz_last.md"] and pending is True  # (its passage: keyword-searchable already)
    assert file_rows(db) == (FILES + 1, FILES + 1)
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    assert not conn.execute("SELECT 1 FROM meta WHERE key = ?", (FILE_TEXT_META,)).fetchall()
    conn.close()


def test_a_save_during_the_fill_waits_for_one_batch_and_the_index_is_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(indexer, "FILL_FILE_TEXT", 20)  # (12 batches)
    edited = "# Chapter 3\n\nThe lighthouse keeper rewrote this chapter entirely.\n"
    root = vault(tmp_path, "saved")
    db = root / ".saipling" / "index.db"
    saver: list[threading.Thread] = []
    done_at: list[int] = []
    with open_project(root) as project:

        def save() -> None:
            write_file(root, "book/ch003.md", edited)
            project.refresh(["book/ch003.md"])

        def progress(p: IndexProgress) -> None:
            if p.phase != "file_keywords":
                return
            if not saver:  # (the first batch: a save comes in while the fill goes on)
                saver.append(threading.Thread(target=save))
                saver[0].start()
            elif not done_at:
                saver[0].join(timeout=30)
                done_at.append(file_rows(db)[1])

        project.index(progress=progress)
    assert saver and done_at and done_at[0] < FILES  # (the save was stored before the fill had finished)
    assert file_rows(db) == (FILES, FILES)  # (the saved file's row once: written by the save, left by the fill)
    kept = kept_index(tmp_path, monkeypatch, "saved-kept", edit=edited)
    assert vocab(db) == vocab(kept) and docsizes(db) == docsizes(kept)


def test_a_fill_a_killed_run_left_is_finished_by_the_next_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "index.db"
    store = SqliteStore.open(db)
    assert store.defer_indexes() is True
    store.replace_files([FileWrite(record(f"n{i}.md"), [row(0, f"alpha beta {i}"), row(1, "gamma")]) for i in range(5)])
    store.close()  # (killed in its text phase: no restore, no fill)
    assert file_rows(db) == (5, 0)
    store = SqliteStore.open(db)  # (a writable open builds the indexes; the whole-file rows wait for a run)
    assert store.file_text_pending() is True
    assert store.fill_file_text(2) == 2 and store.fill_file_text(2) == 2 and store.fill_file_text(2) == 1
    assert store.fill_file_text(2) == 0 and store.file_text_pending() is False
    store.close()
    assert file_rows(db) == (5, 5)
    # the same in a project: killed before its fill, the next (incremental) run finishes it
    monkeypatch.setattr(indexer.Indexer, "_fill_file_text", lambda *a: None)
    root = with_extras(vault(tmp_path, "killed"))
    with open_project(root) as project:
        project.index()
    first = root / ".saipling" / "index.db"
    assert file_rows(first) == (FILES + 2, 0)
    monkeypatch.undo()
    with open_project(root) as project:
        assert status.report(project)["fileKeywordsPending"] is True
        summary = project.index()
        assert summary.changed == 0 and status.report(project)["fileKeywordsPending"] is False
    kept = kept_index(tmp_path, monkeypatch, "killed-kept", extras=True)
    assert file_rows(first) == (FILES + 2, FILES + 2)
    assert content(first) == content(kept) and vocab(first) == vocab(kept) and docsizes(first) == docsizes(kept)
    terms = {t for t, _doc, _cnt in vocab(first)[1]}
    assert {"timeout", "stream", "海辺"} <= terms  # (identifier parts and CJK bigrams: filled too)


def test_a_fill_that_fails_leaves_the_run_and_its_passages_and_the_next_run_finishes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from saipling.errors import StorageError

    def full_disk(self: SqliteStore, max_files: int) -> int:
        raise StorageError("database or disk is full")

    root = vault(tmp_path, "full")
    db = root / ".saipling" / "index.db"
    with monkeypatch.context() as m:
        m.setattr(SqliteStore, "fill_file_text", full_disk)
        with open_project(root) as project:
            summary = project.index()  # (no exception: the passages are stored)
            assert summary.files == FILES and not summary.failed
            found = project.search({"query": "Keeper", "mode": "lexical", "maxResults": 3})["results"]
            assert found and status.report(project)["fileKeywordsPending"] is True
    assert file_rows(db) == (FILES, 0)
    with open_project(root) as project:
        project.index()
        assert status.report(project)["fileKeywordsPending"] is False
    assert file_rows(db) == (FILES, FILES)


@pytest.mark.parametrize("then_clear", [False, True])
def test_a_fill_batch_rolled_back_at_its_commit_is_filled_by_the_next_fill(tmp_path: Path, then_clear: bool) -> None:
    """A fill batch whose COMMIT fails (a full disk shows at the commit in WAL mode) leaves its files without
    their row: the next fill in the same process must still give them theirs before the pending record goes, and
    so must a first index after `clear` (its rowids start again below the last mark): review of the merged round."""
    from saipling.storage.sqlite.store import SqliteStore
    from test_storage_conformance import record, row

    db = tmp_path / "index.db"
    store = SqliteStore.open(db)

    def first_index() -> None:
        store.defer_indexes()
        store.replace_files([FileWrite(record(f"n{i}.md"), [row(0, f"alpha beta {i}")]) for i in range(6)])
        store.restore_indexes()

    first_index()
    assert store.fill_file_text(2) == 2
    conn = store._files.db.conn
    conn.set_commit_hook(lambda: True)  # the next COMMIT fails
    with pytest.raises((apsw.Error, StorageError)):
        store.fill_file_text(2)
    conn.set_commit_hook(None)
    if then_clear:
        store.clear()
        first_index()
    while store.fill_file_text(2):
        pass
    assert not store.file_text_pending()
    store.close()
    assert file_rows(db) == (6, 6)


def merge_would_work(db: Path) -> dict[str, bool]:
    """Whether FTS5's 'merge' would still find work in each keyword list (more than one b-tree), asked on a
    throwaway copy so the index itself is left as it is."""
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for suffix in ("", "-wal"):
            if Path(str(db) + suffix).exists():
                shutil.copy(str(db) + suffix, Path(tmp) / f"index.db{suffix}")
        conn = apsw.Connection(str(Path(tmp) / "index.db"))
        try:
            out = {}
            for t in ("chunks_fts", "files_fts"):
                before = conn.total_changes()
                conn.execute(f"INSERT INTO {t}({t}, rank) VALUES ('merge', -1000000)")
                out[t] = conn.total_changes() - before >= 2
            return out
        finally:
            conn.close()


def test_a_first_index_leaves_each_keyword_list_one_b_tree_with_the_same_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first index writes a keyword segment per batch; the full run merges each list into one b-tree after the
    fill (indexer._merge_keywords, a step per transaction), records it, and holds the same words; a store built
    with no merge would have work left (the test's teeth), and a later full run does not merge again."""
    from saipling.storage.sqlite.schema import KEYWORDS_MERGED_META

    monkeypatch.setattr(indexer, "MERGE_PAGES", 8)  # (several steps)
    monkeypatch.setattr(text_phase, "TEXT_BATCH_CHUNKS", 64)  # (a keyword segment per small batch)
    monkeypatch.setattr(text_phase, "FIRST_INDEX_BATCH_FACTOR", 1)
    root = vault(tmp_path, "merged")
    db = root / ".saipling" / "index.db"
    steps: list[bool] = []
    with open_project(root) as project:
        real = project.store.merge_keywords

        def counted(pages: int) -> bool:
            steps.append(real(pages))
            return steps[-1]

        monkeypatch.setattr(project.store, "merge_keywords", counted)
        project.index()
        assert steps.count(True) >= 2 and steps[-1] is False  # (merged in several steps, then nothing to do)
        assert merge_would_work(db) == {"chunks_fts": False, "files_fts": False}
        found = project.search({"query": "keeper", "mode": "lexical", "maxResults": 5})["results"]
        assert found
        made = len(steps)
        project.index()  # (merged already: nothing done again)
        assert steps[made:] == [False]
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    assert conn.execute("SELECT 1 FROM meta WHERE key = ?", (KEYWORDS_MERGED_META,)).fetchall()
    conn.close()
    # the same words and counts as the same vault indexed without merging
    with monkeypatch.context() as m:
        m.setattr(SqliteStore, "merge_keywords", lambda self, pages: False)
        other = vault(tmp_path, "unmerged")
        with open_project(other) as project:
            project.index()
    other_db = other / ".saipling" / "index.db"
    assert merge_would_work(other_db)["chunks_fts"] is True  # (unmerged: segments left)
    assert vocab(db) == vocab(other_db)

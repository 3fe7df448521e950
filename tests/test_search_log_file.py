"""The search log in a file of its own beside the index (storage/sqlite/search_log.py, issue 34): a search writes
nothing to index.db, so no other connection to the index (the keyword worker's, another process's) sees it change
and empties its page cache; the log still records every search, keeps the rows an older index logged, and is
never written through a link or by a read-only store."""

from __future__ import annotations

import os
from pathlib import Path

import apsw
import pytest

from fixtures import open_project, retrieval_project
from saipling.errors import IndexPathUnsafe
from saipling.storage.sqlite.store import SqliteStore as Store


def _data_version(conn: apsw.Connection) -> int:
    return int(conn.execute("PRAGMA data_version").fetchone()[0])


def _index_rows(db: Path) -> list[tuple[str, str]]:
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return [(q, s) for q, s in conn.execute("SELECT query, source FROM search_log ORDER BY id")]
    finally:
        conn.close()


def test_a_search_leaves_the_index_unchanged_for_every_other_connection(tmp_path: Path) -> None:
    root = retrieval_project(tmp_path)
    db = root / ".saipling" / "index.db"
    with open_project(root) as p:
        p.index()
        other = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)  # (as another process would read it)
        try:
            before = _data_version(other)
            for mode in ("lexical", "hybrid"):
                assert p.search({"query": "ledger", "mode": mode, "source": "editor"})["results"]
            assert _data_version(other) == before  # no commit to index.db: its readers keep their page cache
        finally:
            other.close()
        rows = p.store.search_log()
        assert [(r.query, r.source, r.mode) for r in reversed(rows)] == [
            ("ledger", "editor", "lexical"),
            ("ledger", "editor", "hybrid"),
        ]
    assert _index_rows(db) == []
    assert (root / ".saipling" / "search-log.db").is_file()
    with open_project(root) as p:  # kept across a close and an open, by another connection
        assert [r.mode for r in p.store.search_log()] == ["hybrid", "lexical"]


def test_rows_logged_in_the_index_before_stay_readable_and_move_on_the_first_write(tmp_path: Path) -> None:
    db = tmp_path / "index.db"
    store = Store.open(db)
    with store.atomic():  # (as saipling logged before: rows in index.db's own table)
        for n, source in enumerate(["cli", "eval", "lsp"]):
            store.conn.execute(
                "INSERT INTO search_log(timestamp, query, source, mode, results, top_score, elapsed_ms)"
                " VALUES (?,?,?,?,?,?,?)",
                (1000.0 + n, f"old {n}", source, "hybrid", 1, 0.5, 3.0),
            )
    store.close()
    log_file = tmp_path / "search-log.db"

    reader = Store.open(db, readonly=True)
    try:  # a read-only store reads them where they are and creates nothing
        assert [r.query for r in reader.search_log()] == ["old 2", "old 0"]
    finally:
        reader.close()
    assert not log_file.exists()

    store = Store.open(db)
    try:
        assert [r.query for r in store.search_log(include_eval=True)] == ["old 2", "old 1", "old 0"]
        store.log_search("new", "cli", "lexical", 2, 0.7, 4.0)
        rows = store.search_log(include_eval=True)
        assert [r.query for r in rows] == ["new", "old 2", "old 1", "old 0"]
        assert rows[0].id > rows[1].id and [r.timestamp for r in rows[1:]] == [1002.0, 1001.0, 1000.0]
    finally:
        store.close()
    assert _index_rows(db) == []  # moved, not copied
    assert log_file.is_file()


def test_a_move_interrupted_before_its_delete_copies_nothing_twice(tmp_path: Path) -> None:
    db = tmp_path / "index.db"
    store = Store.open(db)
    store.log_search("first", "cli", "hybrid", 1, 0.5, 1.0)
    store.close()
    # the index's rows as a crash after the copy left them: the same row in both files
    log = apsw.Connection(str(tmp_path / "search-log.db"))
    row = log.execute("SELECT id, timestamp, query, source, mode, results, top_score, elapsed_ms FROM search_log")
    values = row.fetchone()
    log.close()
    store = Store.open(db)
    try:
        with store.atomic():
            store.conn.execute("INSERT INTO search_log VALUES (?,?,?,?,?,?,?,?)", values)
        store.log_search("second", "cli", "hybrid", 1, 0.5, 1.0)
        assert [r.query for r in store.search_log()] == ["second", "first"]
    finally:
        store.close()
    assert _index_rows(db) == []


def test_a_read_only_store_reads_the_log_and_writes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "index.db"
    store = Store.open(db)
    store.log_search("kept", "lsp", "semantic", 1, 0.5, 1.0)
    store.close()
    log_file = tmp_path / "search-log.db"
    before = log_file.read_bytes()
    reader = Store.open(db, readonly=True)
    try:
        assert [r.query for r in reader.search_log()] == ["kept"]
        with pytest.raises(PermissionError):
            reader.log_search("not kept", "cli", "lexical", 0, 0.0, 1.0)
    finally:
        reader.close()
    assert log_file.read_bytes() == before
    ours = {"index.db", "search-log.db"}
    side = {f + s for f in ours for s in ("-wal", "-shm")}
    assert {p.name for p in tmp_path.iterdir()} <= ours | side | {".gitignore"}


def test_the_log_file_is_never_written_through_a_link(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = retrieval_project(tmp_path)
    with open_project(root) as p:
        p.index()
    outside = tmp_path / "outside.db"
    outside.write_bytes(b"not saipling's")
    os.symlink(outside, root / ".saipling" / "search-log.db")
    with open_project(root) as p:
        with pytest.raises(IndexPathUnsafe):
            p.store.log_search("q", "cli", "lexical", 0, 0.0, 1.0)
        # a search still answers (logging never fails it), and nothing outside the project changed
        assert p.search({"query": "ledger", "mode": "lexical"})["results"]
    assert "searches are not logged: refusing" in caplog.text and "symbolic link" in caplog.text
    assert outside.read_bytes() == b"not saipling's"
    assert not (tmp_path / "outside.db-wal").exists()


def test_an_index_in_memory_logs_in_its_own_table(tmp_path: Path) -> None:
    store = Store.open(":memory:")
    try:
        store.log_search("mem", "cli", "lexical", 0, 0.0, 1.0)
        assert [r.query for r in store.search_log()] == ["mem"]
    finally:
        store.close()
    assert list(tmp_path.iterdir()) == []


def test_a_damaged_log_file_is_set_aside_and_a_new_log_begun(tmp_path: Path) -> None:
    """A search log that is not a database (a disk error, another program's file) is kept as `.damaged` and a new
    log begun at the next search; reading it before shows no rows instead of failing every call."""
    folder = tmp_path / ".saipling"
    folder.mkdir()
    store = Store.open(folder / "index.db")
    store.log_search("first", "cli", "lexical", 1, 0.5, 1.0)
    store.close()
    (folder / "search-log.db").write_bytes(b"not a database " * 500)
    for side in folder.glob("search-log.db-*"):
        side.unlink()
    reader = Store.open(folder / "index.db", readonly=True)
    try:
        assert reader.search_log(True, 10) == []
    finally:
        reader.close()
    store = Store.open(folder / "index.db")
    try:
        store.log_search("second", "cli", "lexical", 1, 0.5, 1.0)
        assert [e.query for e in store.search_log(True, 10)] == ["second"]
    finally:
        store.close()
    assert (folder / "search-log.db.damaged").read_bytes().startswith(b"not a database")

"""`status` counts the chunks with and without a vector without reading every chunk (issue 34, benchmarks/README.md
S14): a fresh process takes the snapshot's rows (its header) and corrects them by the chunks the change journal names
since its seq; a count is kept while the journal has not moved. The figures are the SQL count's, after adds, deletes,
lost vectors and another process's writes."""

# ruff: noqa: F811  (fixture imported, then requested as a parameter)
from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from apiserver import FakeEmbeddingAPI, api_server, engine_options  # noqa: F401  (fixture)
from fixtures import make_project, open_project
from saipling.storage.sqlite import snapshot
from saipling.storage.sqlite.store import SqliteStore as Store
from test_vectors_disk import ROWS_PER_FILE, _index, _write, record, row, unit

KEY = "m@16"


def sql_counts(db: Path, key: str = KEY) -> tuple[int, int]:
    """(chunks without a vector, chunks with one) as SQL counts them, on a connection of its own."""
    conn = apsw.Connection(str(db))
    try:
        has = "EXISTS (SELECT 1 FROM embedding_cache e WHERE e.model = ? AND e.content_hash = c.content_hash)"
        without = conn.execute(f"SELECT count(*) FROM chunks c WHERE NOT {has}", (key,)).fetchall()[0][0]
        with_one = conn.execute(f"SELECT count(*) FROM chunks c WHERE {has}", (key,)).fetchall()[0][0]
        return int(without), int(with_one)
    finally:
        conn.close()


def _snapshotted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(snapshot, "MIN_ROWS", 50)
    db = tmp_path / "project" / ".saipling" / "index.db"
    _index(db)
    searching = Store.open(db)
    try:
        assert searching.embedded_count() == 12 * ROWS_PER_FILE  # (reads the matrix: the snapshot follows)
        assert searching._vectors.wait_for_snapshot(10) and searching._vectors.snapshot_writes == 1
    finally:
        searching.close()
    return db


def _other_process_writes(db: Path) -> None:
    """Adds (with vectors, without, partly), a delete, a rewrite and a lost vector, by another connection."""
    other = Store.open(db)
    try:
        _write(other, "new.md", 40)  # 10 chunks with vectors
        other.replace_file(record("bare.md"), [row(i, f"bare passage {i}") for i in range(4)], {}, "m")
        _write(other, "f3.md", 41, "rewritten")  # 10 chunks replaced (new texts, new vectors)
        other.delete_file("f5.md")
        rows = [row(i, f"half passage {i}") for i in range(6)]
        other.replace_file(
            record("half.md"), rows, {r.content_hash: unit(9000 + i) for i, r in enumerate(rows[:2])}, "m"
        )
        other.conn.execute(  # one vector lost (a provider's poisoned row dropped, a cache trimmed)
            "DELETE FROM embedding_cache WHERE id = (SELECT min(id) FROM embedding_cache)"
        )
    finally:
        other.close()


def test_a_fresh_process_counts_from_the_snapshot_and_the_journal_like_sql(tmp_path, monkeypatch) -> None:
    db = _snapshotted(tmp_path, monkeypatch)
    _other_process_writes(db)
    without, with_one = sql_counts(db)
    assert without == 4 + 4 + 1 and with_one > 0  # (bare.md, half.md's four, the lost vector)
    fresh = Store.open(db)
    try:
        assert fresh.count_unembedded() == without
        assert fresh.stats().embedded_chunks == with_one
        v = fresh._vectors
        assert v.unembedded_scans == 0  # no chunk read one by one
        assert v.loads == 0 and v.snapshot_reads == 0 and v.rows_read == 0  # nor the matrix read to count it
        # another process writes again: the same store's next count follows the journal
        _write_elsewhere = Store.open(db)
        try:
            _write_elsewhere.delete_file("new.md")
            _write(_write_elsewhere, "later.md", 42)
            _write_elsewhere.replace_file(record("bare2.md"), [row(0, "bare two")], {}, "m")
        finally:
            _write_elsewhere.close()
        without2, with_one2 = sql_counts(db)
        assert (without2, with_one2) == (without + 1, with_one)  # (10 gone, 10 added; one chunk without)
        assert fresh.count_unembedded() == without2 and fresh.stats().embedded_chunks == with_one2
        assert v.unembedded_scans == 0
    finally:
        fresh.close()


def test_the_status_of_a_fresh_process_reads_no_chunk_one_by_one(
    tmp_path: Path, api_server: FakeEmbeddingAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(snapshot, "MIN_ROWS", 20)
    files = {
        f"notes/n{i:02d}.md": f"# Note {i}\n\nThe lantern {i} burns over wall {i % 5} at night.\n" for i in range(30)
    }
    root = make_project(tmp_path, files)
    with open_project(root, **engine_options(api_server)) as p:
        p.index()
        assert p.search({"query": "a lantern at night", "mode": "semantic"})["results"]
        assert p.store._vectors.wait_for_snapshot(10) and p.store._vectors.snapshot_writes == 1
        total = p.status()["totalChunks"]
        key = p.store.get_meta("vector_key")
    db = root / ".saipling" / "index.db"
    conn = apsw.Connection(str(db))
    conn.execute("DELETE FROM embedding_cache WHERE id = (SELECT min(id) FROM embedding_cache)")  # one vector lost
    conn.close()
    without, with_one = sql_counts(db, key)
    assert (without, with_one) == (1, total - 1)
    with open_project(root, **engine_options(api_server)) as fresh:  # a new process's view: nothing loaded
        whole: list[str] = []  # statements that read every chunk's row (a free model: no re-embed cost to price)

        def trace(cursor, sql: str, bindings) -> bool:
            if "NOT EXISTS (SELECT 1 FROM embedding_cache" in sql or "sum(token_count)" in sql:
                whole.append(sql)
            return True

        fresh.store.conn.exec_trace = trace
        st = fresh.status()
        assert (st["unembeddedChunks"], st["embeddedChunks"], st["totalChunks"]) == (1, total - 1, total)
        assert f"1 of {total} chunks have no embeddings" in (st["degraded"] or "")
        v = fresh.store._vectors
        assert v.unembedded_scans == 0 and v.loads == 0 and v.snapshot_reads == 0 and whole == []
        assert st["estimatedReindexCostUsd"] == 0


def test_without_a_snapshot_a_count_is_kept_until_the_journal_moves(tmp_path: Path) -> None:
    db = tmp_path / "project" / ".saipling" / "index.db"
    _index(db, files=3)  # (below snapshot.MIN_ROWS: never a snapshot)
    store = Store.open(db)
    try:
        v = store._vectors
        assert store.count_unembedded() == 0 and store.stats().embedded_chunks == 3 * ROWS_PER_FILE
        assert store.count_unembedded() == 0
        assert v.unembedded_scans == 1  # counted once in SQL, then kept
        other = Store.open(db)
        try:  # a chunk without a vector: the journal does not move, the total does
            other.replace_file(record("bare.md"), [row(0, "bare passage")], {}, "m")
        finally:
            other.close()
        assert store.count_unembedded() == 1 == sql_counts(db)[0] and v.unembedded_scans == 1
        other = Store.open(db)
        try:  # a vector lost: the journal moves, counted again
            other.conn.execute("DELETE FROM embedding_cache WHERE id = (SELECT min(id) FROM embedding_cache)")
        finally:
            other.close()
        assert (store.count_unembedded(), store.stats().embedded_chunks) == sql_counts(db) == (2, 29)
        assert v.unembedded_scans == 2
    finally:
        store.close()


def test_a_run_with_nothing_to_embed_lists_no_chunk_one_by_one(tmp_path, monkeypatch) -> None:
    """A server's first run on an index embedded before asks which chunks lack a vector: known from the snapshot,
    without the scan of every chunk (~2.5 s at 269k chunks); a chunk added since is still found."""
    db = _snapshotted(tmp_path, monkeypatch)
    fresh = Store.open(db)
    try:
        v = fresh._vectors
        scans: list[str] = []  # every statement that probes the cache for each chunk, whoever counts it

        def trace(cursor, sql: str, bindings) -> bool:
            if "NOT EXISTS (SELECT 1 FROM embedding_cache" in sql:
                scans.append(sql)
            return True

        fresh.conn.exec_trace = trace
        assert fresh.unembedded() == [] and scans == [] and v.unembedded_scans == 0
        other = Store.open(db)
        try:
            other.replace_file(record("bare.md"), [row(0, "bare passage")], {}, "m")
        finally:
            other.close()
        assert [r[1] for r in fresh.unembedded()] == ["bare.md"] and len(scans) == 1 and v.unembedded_scans == 1
    finally:
        fresh.close()


def test_a_journal_naming_more_than_a_catch_up_patches_falls_back_to_the_sql_count(tmp_path, monkeypatch) -> None:
    from saipling.storage.sqlite import vectors

    db = _snapshotted(tmp_path, monkeypatch)
    monkeypatch.setattr(vectors, "_PATCH_MIN", 5)  # (a quarter of the 120 rows: 30 chunks named at most)
    other = Store.open(db)
    try:
        for f in range(4):  # 40 chunks replaced
            _write(other, f"f{f}.md", 50 + f, "again")
        other.replace_file(record("bare.md"), [row(0, "bare passage")], {}, "m")
    finally:
        other.close()
    fresh = Store.open(db)
    try:
        assert (fresh.count_unembedded(), fresh.stats().embedded_chunks) == sql_counts(db) == (1, 120)
        assert fresh.count_unembedded() == 1
        assert fresh._vectors.unembedded_scans == 1  # counted in SQL once, then kept
    finally:
        fresh.close()

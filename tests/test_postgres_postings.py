"""The keyword postings of the PostgreSQL backend (schema migration 4, issue 33): a row per lexeme of each chunk's
and file's tsvector, kept by triggers, which keyword search ranks from. They must stay exactly what the tsvectors
say after every kind of write, never mix two workspaces, and carry the visibility a reader's search filters on."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fixtures import chunk_row, file_record

pytest.importorskip("psycopg")

# every posting the tsvectors imply, and every posting stored, of one workspace: (missing, extra, stored)
_CHUNK_DRIFT = """
WITH truth AS (
  SELECT c.ws, u.lexeme, c.id, coalesce(array_length(u.positions, 1), 1) AS tf, c.doclen,
    lower(btrim(coalesce(c.visibility, 'public'))) AS level
  FROM chunks c CROSS JOIN LATERAL unnest(c.tsv) u WHERE c.ws = %(ws)s),
stored AS (SELECT ws, lexeme, chunk_id, tf, doclen, level FROM chunk_terms WHERE ws = %(ws)s)
SELECT (SELECT count(*) FROM (SELECT * FROM truth EXCEPT ALL SELECT * FROM stored) a),
  (SELECT count(*) FROM (SELECT * FROM stored EXCEPT ALL SELECT * FROM truth) b), (SELECT count(*) FROM stored)
"""
_FILE_DRIFT = """
WITH truth AS (
  SELECT f.ws, u.lexeme, f.id, coalesce(array_length(u.positions, 1), 1) AS tf, f.doclen
  FROM files f CROSS JOIN LATERAL unnest(f.tsv) u WHERE f.ws = %(ws)s),
stored AS (SELECT ws, lexeme, file_id, tf, doclen FROM file_terms WHERE ws = %(ws)s)
SELECT (SELECT count(*) FROM (SELECT * FROM truth EXCEPT ALL SELECT * FROM stored) a),
  (SELECT count(*) FROM (SELECT * FROM stored EXCEPT ALL SELECT * FROM truth) b), (SELECT count(*) FROM stored)
"""


def _store(url: str):
    from saipling.storage.postgres import open_store

    return open_store(url)


def _assert_in_step(store) -> None:
    """The workspace's chunk and file postings are exactly those of its tsvectors (and there are some)."""
    for name, sql in (("chunk", _CHUNK_DRIFT), ("file", _FILE_DRIFT)):
        missing, extra, stored = store._rows(sql, {"ws": store.ws})[0]
        assert (missing, extra) == (0, 0), f"{name} postings: {missing} missing, {extra} extra"
        assert stored > 0, f"no {name} postings"


def _query(*words: str):
    from saipling.storage.base import KeywordQuery

    return KeywordQuery.of([((w,), False) for w in words])


def _paths(store, hits) -> list[str]:
    paths = store.chunk_paths([i for i, _ in hits])
    return [paths[i] for i, _ in hits]


def test_postings_follow_inserts_updates_deletes_renames_and_workspace_deletion(pg_server) -> None:
    import psycopg

    store = _store(pg_server.url())
    try:
        store.replace_file(
            file_record("a.md"),
            [chunk_row(0, "the lantern keeper"), chunk_row(1, "a lantern lantern lit"), chunk_row(2, "gone soon")],
        )
        store.replace_file(file_record("b.md"), [chunk_row(0, "harbour bells ring")])
        _assert_in_step(store)
        # an edit: one chunk kept, one moved down and made private (an UPDATE of its row), one new, one gone
        store.replace_file(
            file_record("a.md"),
            [
                chunk_row(0, "the lantern keeper"),
                chunk_row(1, "a brand new lantern line"),
                replace(chunk_row(2, "a lantern lantern lit"), visibility="Private"),
            ],
        )
        _assert_in_step(store)
        levels = dict(
            store._rows(
                "SELECT c.text, min(t.level) FROM chunk_terms t JOIN chunks c ON c.id = t.chunk_id"
                " WHERE t.ws = %s GROUP BY c.text",
                (store.ws,),
            )
        )
        assert levels["a lantern lantern lit"] == "private" and levels["the lantern keeper"] == "public"
        assert not store.keyword_search(_query("gone"), 10), "a removed chunk's postings are gone"
        tfs = store._rows(
            "SELECT t.tf FROM chunk_terms t JOIN chunks c ON c.id = t.chunk_id WHERE t.ws = %s AND t.lexeme = 'lantern'"
            " ORDER BY c.chunk_index",
            (store.ws,),
        )
        assert [r[0] for r in tfs] == [1, 1, 2]
        # a rename: the old path deleted, the new one written with the same chunks
        moved = store.chunks_for_path("b.md")
        assert store.delete_file("b.md")
        store.replace_file(file_record("c.md"), [chunk_row(0, moved[0].text)])
        _assert_in_step(store)
        assert _paths(store, store.keyword_search(_query("bells"), 10)) == ["c.md"]
        assert [p for p, _s, _n in store.file_keyword_search(_query("bells"), 10)] == ["c.md"]
        store.clear()
        assert store._rows("SELECT count(*) FROM chunk_terms WHERE ws = %s", (store.ws,))[0][0] == 0
        assert store._rows("SELECT count(*) FROM file_terms WHERE ws = %s", (store.ws,))[0][0] == 0
        store.replace_file(file_record("d.md"), [chunk_row(0, "after the clear")])
        _assert_in_step(store)
        ws = store.ws
    finally:
        store.close()
    with psycopg.connect(pg_server.base_url, autocommit=True) as conn:
        conn.execute("DELETE FROM workspaces WHERE id = %s", (ws,))
        left = conn.execute(
            "SELECT (SELECT count(*) FROM chunk_terms WHERE ws = %s), (SELECT count(*) FROM file_terms WHERE ws = %s)",
            (ws, ws),
        ).fetchone()
    assert left == (0, 0)


def test_two_workspaces_never_mix_their_statistics(pg_server) -> None:
    """The same word in two workspaces: each one's document frequency, lengths and scores are its own."""
    from saipling.storage.postgres.keywords import K1, B, idf

    a, b = _store(pg_server.url()), _store(pg_server.url())
    try:
        a.replace_file(file_record("a.md"), [chunk_row(0, "one lantern"), chunk_row(1, "no light"), chunk_row(2, "x")])
        before = a.keyword_search(_query("lantern"), 10)
        files_before = a.file_keyword_search(_query("lantern"), 10)
        for f in range(5):  # the other workspace full of the word, in longer chunks
            rows = [chunk_row(i, f"lantern lantern lantern and more words {i}") for i in range(10)]
            b.replace_file(file_record(f"b{f}.md"), rows)
        _assert_in_step(a)
        _assert_in_step(b)
        df = "SELECT count(*) FROM chunk_terms WHERE ws = %s AND lexeme = 'lantern'"
        assert (a._rows(df, (a.ws,))[0][0], b._rows(df, (b.ws,))[0][0]) == (1, 50)
        after = a.keyword_search(_query("lantern"), 10)
        assert len(after) == 1 and after[0][0] == before[0][0]
        assert after[0][1] == pytest.approx(before[0][1], abs=1e-9)
        assert a.file_keyword_search(_query("lantern"), 10) == files_before
        n, avgdl = 3, (2 + 2 + 1) / 3  # FTS5's BM25 of the one chunk in its own workspace, by hand
        want = idf(n, 1) * 1 * (K1 + 1) / (1 + K1 * (1 - B + B * 2 / avgdl))
        assert after[0][1] == pytest.approx(want, rel=1e-9)
        top_b = b.keyword_search(_query("lantern"), 100)
        assert len(top_b) == 50 and not set(i for i, _ in top_b) & {i for i, _ in after}
    finally:
        a.close()
        b.close()


def test_keyword_side_never_shows_a_private_passage_to_a_reader(pg_url: str) -> None:
    """A chunk made private by an edit (its row updated, not replaced) leaves a public reader's keyword results,
    for a word, a phrase and both; its owner still finds it; an empty level list passes nothing."""
    from saipling.storage.base import ChunkFilter, KeywordQuery

    store = _store(pg_url)
    reader = ChunkFilter(visibility=["public"])
    word = _query("gardener")
    phrase = KeywordQuery.of([(("the", "gardener"), False), (("gardener",), False)])
    try:
        store.replace_file(file_record("a.md"), [chunk_row(0, "an open line"), chunk_row(1, "the gardener did it")])
        for q in (word, phrase):
            assert _paths(store, store.keyword_search(q, 10, reader)) == ["a.md"]
        store.replace_file(
            file_record("a.md"),
            [chunk_row(0, "an open line"), replace(chunk_row(1, "the gardener did it"), visibility="private")],
        )
        _assert_in_step(store)
        for q in (word, phrase):
            assert store.keyword_search(q, 10, reader) == []
            assert store.keyword_search(q, 10, ChunkFilter(visibility=[])) == []
            assert _paths(store, store.keyword_search(q, 10)) == ["a.md"], "the owner sees it"
            assert _paths(store, store.keyword_search(q, 10, ChunkFilter(visibility=["private"]))) == ["a.md"]
            assert store.search_candidates(q, 10, 0, None, reader).keywords == []
    finally:
        store.close()


def test_a_one_word_search_reads_postings_not_tsvectors(pg_url: str) -> None:
    """The ranking statement of a query of single words scans the postings' btree, never the chunks' tsvectors
    (reading and decompressing them for every matching chunk was most of a search's time, issue 33)."""
    store = _store(pg_url)
    try:
        store.replace_file(file_record("a.md"), [chunk_row(i, f"lantern line {i}") for i in range(20)])
        for table in ("chunks", "files"):
            sql, params = store._bm25_sql(table, _query("lantern", "line"), "TRUE", [], 10)
            plan = "\n".join(r[0] for r in store._rows("EXPLAIN " + sql, params))
            postings = "chunk_terms" if table == "chunks" else "file_terms"
            assert postings in plan and "tsv" not in plan, plan
    finally:
        store.close()


def test_a_save_posts_its_new_chunks_in_one_statement(pg_url: str) -> None:
    """A file's new chunks are inserted by one statement, so the postings trigger fires once a save, not once a
    chunk (8 writers' saves beside 64 readers, issue 33); their ids come back in the file's order, vectors with
    them, and the postings are exactly those of the tsvectors."""
    import numpy as np

    from saipling.storage.postgres.store import INSERT_BATCH

    store = _store(pg_url)
    try:
        store.configure_vectors("test", "m", 4)
        rows = [chunk_row(i, f"paragraph {i} of the gardener's notebook {'x' * i}") for i in range(7)]
        vecs = {r.content_hash: np.array([1.0, i, 0.5, 0.25], dtype=np.float32) for i, r in enumerate(rows[:4])}
        with store.atomic():
            store.conn.execute("SET LOCAL track_functions = 'pl'")
            unembedded = store.replace_file(file_record("notes.md"), rows, vectors=vecs, model="m")
            calls = dict(
                store.conn.execute(
                    "SELECT funcname, calls FROM pg_stat_xact_user_functions WHERE funcname LIKE 'saipling_%%_terms_%%'"
                ).fetchall()
            )
        assert calls.get("saipling_chunk_terms_added") == 1, calls
        stored = store.chunks_for_path("notes.md")
        assert [c.text for c in stored] == [r.text for r in rows]
        ids = {c.chunk_index: c.id for c in stored}
        assert sorted(unembedded) == sorted(ids[i] for i in range(4, 7))
        got = store.chunk_vectors([ids[i] for i in range(4)])
        for i in range(4):
            want = vecs[rows[i].content_hash]
            assert np.allclose(got[ids[i]], want / np.linalg.norm(want), atol=1e-6)
        _assert_in_step(store)
        many = [chunk_row(i, f"line {i} of a long chapter") for i in range(INSERT_BATCH + 3)]
        store.replace_file(file_record("long.md"), many)
        assert [c.text for c in store.chunks_for_path("long.md")] == [r.text for r in many]
        _assert_in_step(store)
    finally:
        store.close()

"""What a search costs the PostgreSQL server and the reader (issue 33: 64 readers + 8 writers on two cores), against a
real server (tests/pg_fixture.py): an exact search runs the generic plans of its prepared statements instead of
planning each search again, a search through the HNSW index keeps PostgreSQL's own choice; the whole-file list
sends no path list when every file passes the reader's levels, and still keeps a private file out; snippets fold
and stem a word once per process."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fixtures import chunk_row, file_record

pytest.importorskip("psycopg")


def _vec(seed: int, dims: int = 8):
    import numpy as np

    v = np.random.default_rng(seed).standard_normal(dims).astype(np.float32)
    return v / np.linalg.norm(v)


def _store_with_vectors(url: str, private: bool = False):
    from saipling.storage.postgres import open_store

    store = open_store(url)
    store.configure_vectors("test", "m", 8)
    store.replace_file(file_record("harbor.md"), [chunk_row(0, "the harbor light at dusk"), chunk_row(1, "a storm")])
    store.replace_file(file_record("ledger.md"), [chunk_row(0, "the ledger of the harbor master")])
    if private:
        secret = replace(file_record("secret.md"), visibility="private")
        store.replace_file(secret, [replace(chunk_row(0, "the harbor secret"), visibility="private")])
    store.set_vectors([(i, h, _vec(i)) for i, _p, h, _t in store.unembedded()], "m")
    return store


def _plans(store, prefix: str) -> tuple[int, int]:
    """(generic, custom) plans run so far by the calling thread's session for its prepared statements starting
    with `prefix`."""
    row = store.conn.execute(
        "SELECT coalesce(sum(generic_plans), 0), coalesce(sum(custom_plans), 0) FROM pg_prepared_statements"
        " WHERE statement LIKE %s",
        (prefix + "%",),
    ).fetchone()
    return int(row[0]), int(row[1])


def _record_statements(monkeypatch) -> list[str]:
    """The statements the store's connections send from now on (a spy on MappedConnection.execute)."""
    from saipling.storage.postgres.errors import MappedConnection

    sent: list[str] = []
    real = MappedConnection.execute

    def spy(self, sql, params=None, **kwargs):
        sent.append(str(sql))
        return real(self, sql, params, **kwargs)

    monkeypatch.setattr(MappedConnection, "execute", spy)
    return sent


def _search(store, words: list[str]):
    from saipling.storage.base import ChunkFilter, KeywordQuery

    query = KeywordQuery.of([((w,), False) for w in words])
    return store.search_candidates(query, 10, 10, _vec(3), ChunkFilter(visibility=["public"]))


def test_an_exact_search_runs_generic_plans(pg_url: str) -> None:
    """A workspace searched exactly: the candidate statement, prepared on its second run, is not planned again
    for each search (its generic plan runs), and the answers are those of custom plans."""
    import saipling.storage.postgres.store as pg

    store = _store_with_vectors(pg_url)
    try:
        first = [_search(store, ["harbor", "storm"]) for _ in range(4)]
        generic, custom = _plans(store, "WITH kw")
        assert generic >= 2 and custom == 0, (generic, custom)
        assert store.conn.execute("SHOW plan_cache_mode").fetchone()[0] == "force_generic_plan"
        assert first[0].keywords and first[0].vectors and first[0].files
        pg.GENERIC_PLAN = False  # (as SAIPLING_PG_GENERIC_PLAN=0: custom plans, the same answers)
        try:
            again = [_search(store, ["harbor", "storm"]) for _ in range(3)]
            assert store.conn.execute("SHOW plan_cache_mode").fetchone()[0] == "auto"
            assert _plans(store, "WITH kw")[1] >= 2
        finally:
            pg.GENERIC_PLAN = True
        for got in again:
            assert (got.keywords, got.files, got.vectors, got.paths) == (
                first[0].keywords,
                first[0].files,
                first[0].vectors,
                first[0].paths,
            )
    finally:
        store.close()


def test_a_search_through_the_hnsw_index_keeps_custom_plans(pg_url: str, monkeypatch) -> None:
    """Through the HNSW index the plan turns on the workspace's size: the session is back to PostgreSQL's own
    choice (custom plans) for it, and an exact search sets generic plans again."""
    import saipling.storage.postgres.store as pg

    store = _store_with_vectors(pg_url)
    try:
        _search(store, ["harbor"])
        assert store.conn.execute("SHOW plan_cache_mode").fetchone()[0] == "force_generic_plan"
        monkeypatch.setattr(pg, "ANN_MIN_ROWS", 1)
        store._ann_dims = {8}  # (the statement through the index; without the index itself it scans: same rows)
        assert store.knn(_vec(3), 3)
        assert store.conn.execute("SHOW plan_cache_mode").fetchone()[0] == "auto"
        assert _search(store, ["harbor"]).vectors
        assert store.conn.execute("SHOW plan_cache_mode").fetchone()[0] == "auto"
        monkeypatch.setattr(pg, "ANN_MIN_ROWS", 10**9)
        _search(store, ["harbor"])
        assert store.conn.execute("SHOW plan_cache_mode").fetchone()[0] == "force_generic_plan"
    finally:
        store.close()


def test_whole_file_list_without_a_path_list_when_every_file_passes(pg_url: str) -> None:
    """A reader's levels on a workspace without private passages: every file passes, so the whole-file list is
    not restricted to a list of every path; once a private file is written, it is (and stays out of the list)."""
    from saipling.storage.base import ChunkFilter, KeywordQuery

    reader = ChunkFilter(visibility=["public"])
    store = _store_with_vectors(pg_url)
    try:
        assert store._file_condition(reader) == ("TRUE", [])
        secret = replace(file_record("secret.md"), visibility="private")
        store.replace_file(secret, [replace(chunk_row(0, "the harbor secret"), visibility="private")])
        cond, params = store._file_condition(reader)
        assert cond != "TRUE" and sorted(params[0]) == ["harbor.md", "ledger.md"]
        harbor = KeywordQuery.of([(("harbor",), False)])
        assert sorted(p for p, _s, _n in store.file_keyword_search(harbor, 10, reader)) == ["harbor.md", "ledger.md"]
        assert "secret.md" in [p for p, _s, _n in store.file_keyword_search(harbor, 10)]
    finally:
        store.close()


def test_snippets_stem_a_word_once_per_process(monkeypatch) -> None:
    """The second snippet of the same words folds and stems only the query's terms: each word of the text is
    looked up, not stemmed again (it was half of a whole search's CPU in the reader process)."""
    from saipling.markdown import terms

    text = " ".join(["The keeper climbed the stairs of the lighthouse while the storm rose over the harbor"] * 5)
    terms.word_keys.cache_clear()
    first = terms.make_snippet(text, ["storms", "harbour"])
    calls: list[str] = []
    real = terms.match_key
    monkeypatch.setattr(terms, "match_key", lambda w: calls.append(w) or real(w))
    second = terms.make_snippet(text, ["storms", "harbour"])
    assert second == first and "**storm**" in first
    assert sorted(calls) == ["harbour", "storms"], calls


def test_a_new_query_does_not_count_the_workspace_again(pg_url: str, monkeypatch) -> None:
    """The collection's size and average length are read once per version of the workspace, not with each query
    the process has not seen (they were 4.9 of the 5.3 ms of server CPU a new query's term statistics cost at
    2,524 chunks); a write makes them read again, and the scores are those of a fresh store."""
    from saipling.storage.base import KeywordQuery

    store = _store_with_vectors(pg_url)
    try:
        sent = _record_statements(monkeypatch)
        counts = "(SELECT count(*) FROM chunks WHERE ws ="
        first = store.keyword_search(KeywordQuery.of([(("harbor",), False)]), 10)
        assert any(counts in s for s in sent), "the first query reads the collection's size"
        sent.clear()
        second = store.keyword_search(KeywordQuery.of([(("storm",), False)]), 10)
        assert sent and not any(counts in s for s in sent), sent
        store.replace_file(file_record("storm.md"), [chunk_row(0, "storm after storm over the harbor")])
        sent.clear()
        third = store.keyword_search(KeywordQuery.of([(("ledger",), False)]), 10)
        assert any(counts in s for s in sent), "a write: the collection is read again"
        assert first and second and third
        monkeypatch.undo()  # (the statements no longer recorded)
        from saipling.storage.postgres import open_store

        fresh = open_store(pg_url)
        try:
            for word in ("harbor", "storm", "ledger"):
                query = KeywordQuery.of([((word,), False)])
                assert store.keyword_search(query, 10) == fresh.keyword_search(query, 10)
        finally:
            fresh.close()
    finally:
        store.close()


def test_the_plan_mode_follows_the_session_not_its_wrapper(pg_url: str, monkeypatch) -> None:
    """A pooled connection comes back wrapped anew (storage/postgres/sessions.py) with its session's settings: a
    search through the HNSW index on it still sets custom plans back, whatever the new wrapper knows."""
    import saipling.storage.postgres.store as pg
    from saipling.storage.postgres.errors import MappedConnection

    store = _store_with_vectors(pg_url)
    try:
        _search(store, ["harbor"])
        raw = store.conn.raw
        assert raw.execute("SHOW plan_cache_mode").fetchone()[0] == "force_generic_plan"
        store._lock.first = MappedConnection(raw)  # (as the pool hands a session out again)
        monkeypatch.setattr(pg, "ANN_MIN_ROWS", 1)
        store._ann_dims = {8}
        assert store.knn(_vec(3), 3)
        assert raw.execute("SHOW plan_cache_mode").fetchone()[0] == "auto"
    finally:
        store.close()


def test_a_warm_search_is_one_statement_with_its_version(pg_url: str, monkeypatch) -> None:
    """A search whose caches are warm sends one statement, however long since the workspace's version was last
    read: the version is read beside the lists (a round trip of its own before, for every search more than
    VERSION_TTL after the last: 64 readers' every search, issue 33)."""
    import time

    from saipling.storage.postgres import store as pg

    store = _store_with_vectors(pg_url)
    try:
        warm = _search(store, ["harbor", "storm"])
        assert warm.keywords and warm.vectors
        time.sleep(pg.VERSION_TTL + 0.1)
        sent = _record_statements(monkeypatch)
        again = _search(store, ["harbor", "storm"])
        assert len(sent) == 1, sent
        assert again == warm
    finally:
        store.close()


def test_a_search_right_after_another_process_commits_ranks_on_the_new_version(pg_url: str, monkeypatch) -> None:
    """However long this process trusts its last read of the version (SAIPLING_PG_VERSION_TTL), a search sees in
    its own statement that another process committed, and builds itself again from the new version: the scores
    and lists of a fresh store, not of the statistics cached before the commit."""
    from saipling.storage.postgres import open_store
    from saipling.storage.postgres import store as pg

    monkeypatch.setattr(pg, "VERSION_TTL", 3600.0)
    reader = _store_with_vectors(pg_url)
    writer = open_store(pg_url)
    try:
        before = _search(reader, ["harbor", "storm"])
        assert before.keywords
        writer.replace_file(file_record("storms.md"), [chunk_row(0, "storm after storm, storm upon the harbor")])
        writer.set_vectors([(i, h, _vec(10 + i)) for i, _p, h, _t in writer.unembedded()], "m")
        after = _search(reader, ["harbor", "storm"])
        fresh = open_store(pg_url)
        try:
            want = _search(fresh, ["harbor", "storm"])
        finally:
            fresh.close()
        assert after == want
        assert after.keywords != before.keywords  # (the new file ranks, and the statistics moved)
    finally:
        writer.close()
        reader.close()

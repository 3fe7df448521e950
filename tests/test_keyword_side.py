"""A search's keyword reads on a read-only connection and worker thread of their own (storage/sqlite/keyword_side.py,
issue 34): a hybrid search reads its keyword lists there while its own thread runs the KNN; a lexical search reads
both on the store's connection. Real SQLite files, real threads."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

import pytest

from fixtures import kw
from saipling.storage.base import ChunkFilter, candidates_by_calls
from saipling.storage.sqlite import keyword_side
from saipling.storage.sqlite.store import SqliteStore as Store
from test_store import h, record, row, unit

WORKER = "saipling-keywords"
DEFAULT_MIN_CHUNKS = keyword_side.MIN_CHUNKS  # (before the autouse fixture below lowers it)


def _workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(WORKER)]


@pytest.fixture(autouse=True)
def small_is_big(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker reads for indexes of any size here (keyword_side.MIN_CHUNKS: 500k chunks by default)."""
    monkeypatch.setattr(keyword_side, "MIN_CHUNKS", 0)


@pytest.fixture
def store(tmp_path: Path):
    """40 files of 2 chunks with vectors; `lantern` in every third file's first chunk, `harbour` in every fourth
    file's second; the files f00-f09 private."""
    s = Store.open(tmp_path / "proj" / ".saipling" / "index.db")
    s.configure_vectors("fake", "m1", 8)
    for n in range(40):
        texts = [
            f"the {'lantern' if n % 3 == 0 else 'candle'} of chapter {n}",
            f"a quiet {'harbour' if n % 4 == 0 else 'bay'} {n}",
        ]
        seen = "private" if n < 10 else "public"
        rec = dataclasses.replace(record(f"f{n:02d}.md", " ".join(texts)), visibility=seen)
        rows = [dataclasses.replace(row(i, t), visibility=seen) for i, t in enumerate(texts)]
        s.replace_file(rec, rows, {h(t): unit(n * 2 + i) for i, t in enumerate(texts)}, "m1")
    yield s
    s.close()


def _lists(c) -> tuple:
    """A search's candidate lists (what equality means here: its vectors are arrays)."""
    return (c.keywords, c.files, c.vectors, c.paths)


def _serial(s: Store, query, qvec, flt=None):
    """What the store's connection alone reads, one list after the other."""
    return candidates_by_calls(s, query, 10, 10, qvec, flt)


@pytest.mark.parametrize(
    "split", [False, True]
)  # the whole-file list on the searching thread (hybrid), on the worker (lexical)
@pytest.mark.parametrize("hybrid", [True, False])
@pytest.mark.parametrize("flt", [None, ChunkFilter(visibility=["public"]), ChunkFilter(path_prefix="f1")])
def test_the_lists_read_beside_the_search_are_the_ones_read_on_its_connection(
    store: Store, hybrid, flt, split, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(keyword_side, "HYBRID_FILES_HERE", split)
    monkeypatch.setattr(keyword_side, "LEXICAL_SPLIT", split)
    qvec = unit(7) if hybrid else None
    store.search_candidates(kw("candle"), 10, 10, None, None)  # (a lexical search splits from the second on)
    got = store.search_candidates(kw("lantern", "harbour"), 10, 10, qvec, flt)
    want = _serial(store, kw("lantern", "harbour"), qvec, flt)
    assert got.keywords and got.files
    assert (got.keywords, got.files, got.vectors, got.paths) == (want.keywords, want.files, want.vectors, want.paths)
    if hybrid:
        assert got.vectors and got.keyword_vectors.keys() == want.keyword_vectors.keys()
    if hybrid or split:
        assert _workers(), "the keyword reads ran on the worker"
    private = {f"f{n:02d}.md" for n in range(10)}
    if flt is not None and flt.visibility:  # (a reader role's visibility: the private files stay out)
        assert not private & {p for p, _, _ in got.files}
        assert not private & set(got.paths.values())


def test_the_keyword_reads_do_not_wait_for_a_write_transaction_and_see_only_what_it_committed(
    store: Store,
) -> None:
    """A write transaction holds the store's connection (and its lock) while it writes; the worker's connection
    reads the last committed state meanwhile, without the rows the transaction has not committed, and sees them
    once it has."""
    side = store._keyword_side
    assert side is not None
    side.submit(kw("zeppelin"), 10, 10, None).result(timeout=30)  # (the worker's connection opened)
    writing, release, done = threading.Event(), threading.Event(), threading.Event()

    def write() -> None:
        with store.atomic():
            text = "a zeppelin over the lantern"
            store.replace_file(record("new.md", text), [row(0, text)], {h(text): unit(99)}, "m1")
            writing.set()
            release.wait(30)
        done.set()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert writing.wait(30)
        chunks, files = side.submit(kw("zeppelin"), 10, 10, None).result(timeout=10)  # (never waits for the lock)
        assert (chunks, files) == ([], [])
        assert not done.is_set()
    finally:
        release.set()
        writer.join(30)
    chunks, files = side.submit(kw("zeppelin"), 10, 10, None).result(timeout=10)
    assert [p for p, _, _ in files] == ["new.md"] and len(chunks) == 1
    got = store.search_candidates(kw("zeppelin"), 10, 10, unit(99), None)
    assert [c for c, _ in got.keywords] == [store.chunks_for_path("new.md")[0].id]


def test_closing_the_store_ends_the_worker_and_its_connection(tmp_path: Path) -> None:
    s = Store.open(tmp_path / "p" / ".saipling" / "index.db")
    s.configure_vectors("fake", "m1", 8)
    s.replace_file(record("a.md", "lantern"), [row(0, "lantern")], {h("lantern"): unit(1)}, "m1")
    before = set(_workers())
    assert s.search_candidates(kw("lantern"), 10, 10, unit(1), None).files
    started = set(_workers()) - before
    assert len(started) == 1
    s.close()
    assert not any(t.is_alive() for t in started)


def test_a_read_only_or_memory_store_reads_on_its_own_connection(tmp_path: Path) -> None:
    """No second connection where none can be opened as the first was (a read-only folder's index, `:memory:`)."""
    path = tmp_path / "p" / ".saipling" / "index.db"
    s = Store.open(path)
    s.replace_file(record("a.md", "lantern"), [row(0, "lantern")])
    s.close()
    for opened in (Store.open(path, readonly=True), Store.open(":memory:")):
        try:
            assert opened._keyword_side is None
            opened.search_candidates(kw("lantern"), 10, 10, None, None)
        finally:
            opened.close()


def test_the_workers_term_frequencies_follow_the_index_and_not_the_search_log(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the bound (lowered here: fts_bound), the worker ranks with frequencies it keeps per term: a write to
    the index (by the store's connection) is seen at once, the search-log row written after each search is not a
    change (the rows were counted again after every search)."""
    from saipling.storage.sqlite import fts_bound

    monkeypatch.setattr(fts_bound, "BOUND_MIN_CHUNKS", 10)
    monkeypatch.setattr(fts_bound, "FTS_BUDGET", 4)
    monkeypatch.setattr(fts_bound, "FILE_BUDGET", 4)
    query = kw("candle", "bay")
    first = store.search_candidates(query, 10, 10, unit(7), None)
    assert _lists(first) == _lists(_serial(store, query, unit(7)))
    statements: list[str] = []
    side = store._keyword_side
    assert side is not None and side._conn is not None
    side.submit(query, 10, 10, None).result(timeout=30)  # (both lists counted on the worker: either may read files)
    side._conn.exec_trace = lambda _cursor, sql, _bindings: statements.append(sql) or True
    store.log_search("candle", "cli", "lexical", 1, 1.0, 1.0)
    assert _lists(store.search_candidates(query, 10, 10, unit(7), None)) == _lists(first)
    assert not [s for s in statements if "count(*)" in s]
    for n in range(40, 48):  # (candle in 8 more chunks: its idf and every score change)
        text = f"the candle {n} and the bay {n}"
        store.replace_file(record(f"g{n}.md", text), [row(0, text)], {h(text): unit(n)}, "m1")
    after = store.search_candidates(query, 10, 10, unit(7), None)
    assert _lists(after) == _lists(_serial(store, query, unit(7)))
    assert after.files != first.files


def test_each_thread_reads_one_list(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker reads the chunk list of a hybrid search (the searching thread: the KNN, then the whole-file list)
    and, with LEXICAL_SPLIT (off by default: row S24), the whole-file list of a lexical one (the searching thread:
    the chunk list); keyword_side.py, row S20."""
    monkeypatch.setattr(keyword_side, "LEXICAL_SPLIT", True)
    side = store._keyword_side
    assert side is not None
    submitted: list[tuple[int, int]] = []
    real = side.submit
    side.submit = lambda q, limit, file_limit, flt, claim=None: (
        submitted.append((limit, file_limit if claim is None else -file_limit))
        or real(  # type: ignore[method-assign]
            q, limit, file_limit, flt, claim
        )
    )
    got = store.search_candidates(kw("lantern", "harbour"), 10, 7, None, None)
    assert got.keywords and got.files and submitted == []  # a store's first search, lexical: read here alone
    got = store.search_candidates(kw("lantern", "harbour"), 10, 7, None, None)
    assert got.keywords and got.files
    assert submitted == [(0, 7)]  # lexical: the whole-file list only
    got = store.search_candidates(kw("lantern", "harbour"), 10, 7, unit(7), None)
    assert got.keywords and got.files and got.vectors
    assert submitted[1:] == [(10, -7)]  # hybrid: the chunk list, the whole-file list if it is free first (a claim)
    monkeypatch.setattr(keyword_side, "HYBRID_FILES_FIRST_FREE", False)
    got = store.search_candidates(kw("lantern", "harbour"), 10, 7, unit(7), None)
    assert got.keywords and got.files and got.vectors
    assert submitted[2:] == [(10, 0)]  # (without the claim: the chunk list only)
    submitted[2:] = []
    store.search_candidates(kw("lantern", "harbour"), 10, 0, None, None)
    assert len(submitted) == 2  # (a lexical search without a whole-file list reads here alone)


def test_a_small_index_reads_on_the_stores_connection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Below keyword_side.MIN_CHUNKS no worker starts: a search reads as before."""
    monkeypatch.setattr(keyword_side, "MIN_CHUNKS", 3)
    s = Store.open(tmp_path / "p" / ".saipling" / "index.db")
    try:
        s.configure_vectors("fake", "m1", 8)
        s.replace_file(record("a.md", "lantern"), [row(0, "lantern")], {h("lantern"): unit(1)}, "m1")
        assert s.search_candidates(kw("lantern"), 10, 10, unit(1), None).files
        assert s._keyword_side is not None and s._keyword_side._conn is None
        texts = ["lantern b", "lantern c"]
        s.replace_file(
            record("b.md", " ".join(texts)),
            [row(i, t) for i, t in enumerate(texts)],
            {h(t): unit(2 + i) for i, t in enumerate(texts)},
            "m1",
        )
        assert s.search_candidates(kw("lantern"), 10, 10, unit(1), None).files
        assert s._keyword_side._conn is not None
    finally:
        s.close()


@pytest.mark.parametrize("chunks, beside", [(55_000, False), (269_000, False), (1_070_000, True)])
def test_a_hybrid_search_reads_beside_the_knn_only_in_an_index_of_half_a_million_chunks_or_more(
    store: Store, monkeypatch: pytest.MonkeyPatch, chunks: int, beside: bool
) -> None:
    """Below keyword_side.MIN_CHUNKS (500k by default) a hybrid search reads its keyword lists on its own thread
    after the KNN: at 269k chunks the worker's Python scoring and the KNN waited for each other's GIL (row S33).
    The index's chunk count, as the store reads it to decide, is reported as `chunks` (the lists are the real
    80 chunks'); the lists are the same either way."""
    monkeypatch.setattr(keyword_side, "MIN_CHUNKS", DEFAULT_MIN_CHUNKS)
    real = store._keywords.term_doc_freqs

    def counted(terms):
        freqs, n = real(terms)
        return freqs, (chunks if not terms else n)

    monkeypatch.setattr(store._keywords, "term_doc_freqs", counted)
    got = store.search_candidates(kw("lantern", "harbour"), 10, 10, unit(3), None)
    side = store._keyword_side
    assert side is not None and (side._conn is not None) == beside
    assert _lists(got) == _lists(_serial(store, kw("lantern", "harbour"), unit(3)))
    assert got.keywords and got.vectors and got.files


def test_a_lexical_search_reads_both_lists_on_the_stores_connection_by_default(store: Store) -> None:
    """LEXICAL_SPLIT is off: on a quiet machine splitting a lexical search's lists cost CPU and saved no time
    (row S24); a hybrid search still hands the worker its chunk list."""
    side = store._keyword_side
    assert side is not None
    submitted: list[tuple[int, int]] = []
    real = side.submit
    side.submit = lambda q, limit, file_limit, flt, claim=None: (  # type: ignore[method-assign]
        submitted.append((limit, file_limit if claim is None else -file_limit))
        or real(q, limit, file_limit, flt, claim)
    )
    for _ in range(2):
        got = store.search_candidates(kw("lantern", "harbour"), 10, 7, None, None)
        assert got.keywords and got.files
    assert submitted == []
    got = store.search_candidates(kw("lantern", "harbour"), 10, 7, unit(7), None)
    assert got.keywords and got.files and submitted == [(10, -7)]  # (the whole-file list: keyword_side.Claim)


@pytest.mark.parametrize("slow", ["knn", "worker"])
def test_the_whole_file_list_is_read_once_by_the_thread_free_first(
    store: Store, slow: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hybrid search's whole-file list goes to the first of the worker (its chunk list read) and the searching
    thread (its KNN done) to be free (keyword_side.Claim): read once, the lists those of the store's connection."""
    from saipling.storage.sqlite import keywords as keywords_mod

    query = kw("lantern", "harbour")
    want = _serial(store, query, unit(7))
    readers: list[str] = []
    real_files = keywords_mod.Keywords.file_keyword_search
    real_chunks = keywords_mod.Keywords.keyword_search
    real_knn = store.knn

    def files(self, *args, **kwargs):
        readers.append(threading.current_thread().name)
        return real_files(self, *args, **kwargs)

    def chunks(self, *args, **kwargs):
        if slow == "worker" and threading.current_thread().name.startswith(WORKER):
            time.sleep(0.5)
        return real_chunks(self, *args, **kwargs)

    def knn(*args, **kwargs):
        if slow == "knn":
            time.sleep(0.5)
        return real_knn(*args, **kwargs)

    monkeypatch.setattr(keywords_mod.Keywords, "file_keyword_search", files)
    monkeypatch.setattr(keywords_mod.Keywords, "keyword_search", chunks)
    monkeypatch.setattr(store, "knn", knn)
    got = store.search_candidates(query, 10, 10, unit(7), None)
    assert got.files and got.keywords and got.vectors
    assert _lists(got) == _lists(want)
    assert len(readers) == 1  # read once
    on_worker = readers[0].startswith(WORKER)
    assert on_worker == (slow == "knn")  # by the worker while the KNN runs, else by the searching thread


def test_the_candidates_paths_and_vectors_are_read_while_the_worker_reads_the_whole_file_list(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the worker took the whole-file list (keyword_side.Claim), the searching thread reads the candidates'
    paths and the keyword candidates' vectors with the worker's chunk list meanwhile, not after it."""
    from saipling.storage.sqlite import keywords as keywords_mod

    query = kw("lantern", "harbour")
    want = _serial(store, query, unit(7))
    events: list[str] = []
    real_files = keywords_mod.Keywords.file_keyword_search
    real_knn, real_paths = store.knn, store.chunk_paths

    def files(self, *args, **kwargs):
        events.append("files start")
        time.sleep(1.0)  # (longer than the KNN below)
        try:
            return real_files(self, *args, **kwargs)
        finally:
            events.append("files end")

    def knn(*args, **kwargs):
        time.sleep(0.3)  # (the worker is free first: it takes the whole-file list)
        return real_knn(*args, **kwargs)

    def paths(*args, **kwargs):
        events.append("paths")
        return real_paths(*args, **kwargs)

    monkeypatch.setattr(keywords_mod.Keywords, "file_keyword_search", files)
    monkeypatch.setattr(store, "knn", knn)
    monkeypatch.setattr(store, "chunk_paths", paths)
    got = store.search_candidates(query, 10, 10, unit(7), None)
    assert _lists(got) == _lists(want) and got.keywords and got.files
    assert got.keyword_vectors.keys() == want.keyword_vectors.keys() and got.keyword_vectors
    assert events == ["files start", "paths", "files end"]

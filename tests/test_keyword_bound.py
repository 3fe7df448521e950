"""Keyword search at scale (issue 34, storage/sqlite/fts_bound.py): past FTS_BUDGET matching rows in an index of
BOUND_MIN_CHUNKS chunks, a search scores candidate rows only (every row holding a rare term, then the rows holding
the most of the common ones) with FTS5's own bm25 formula, and finds the true top rows of a constructed corpus.
The budget and the size are lowered here so that a small real index stands for a million chunks."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixtures import kw
from saipling.storage.base import ChunkFilter
from saipling.storage.sqlite import fts_bound
from saipling.storage.sqlite.store import SqliteStore as Store
from test_store import record, row

FILLER = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]


def _text(n: int, *words: str) -> str:
    """Every chunk the same length (12 words), so that bm25 orders rows by the query words they hold."""
    body = [*words, *(f"{FILLER[(n + i) % len(FILLER)]}{n % 7}" for i in range(12 - len(words)))]
    return " ".join(body)


@pytest.fixture
def corpus(tmp_path: Path):
    """600 chunks: `lantern` in 250, `harbour` in 250 (the same 10 of them, the oldest, hold both), `zephyr`
    (rare) in 6, `said` in 400; one chunk per file."""
    s = Store.open(tmp_path / "proj" / ".saipling" / "index.db")
    for n in range(600):
        words: list[str] = []
        if n < 10:
            words += ["lantern", "harbour"]
        elif n < 250:
            words.append("lantern")
        elif n < 490:
            words.append("harbour")
        if n % 100 == 50:
            words.append("zephyr")
        if n % 3 != 0:
            words.append("said")
        text = _text(n, *words)
        s.replace_file(record(f"f{n:03d}.md", text), [row(0, text)])
    yield s
    s.close()


def _exact(store: Store, query, limit: int, flt: ChunkFilter | None = None):
    """What FTS5's bm25() over every matching row gives (the bound off)."""
    saved = fts_bound.BOUND_MIN_CHUNKS
    fts_bound.BOUND_MIN_CHUNKS = 10**12
    try:
        return store.keyword_search(query, limit, flt), store.file_keyword_search(query, limit, flt)
    finally:
        fts_bound.BOUND_MIN_CHUNKS = saved


def _same(got: list, exact: list) -> bool:
    """The same ids in the same order (a file's size too), each with the same score (to 1e-9)."""
    return [(r[0], *r[2:]) for r in got] == [(r[0], *r[2:]) for r in exact] and all(
        abs(a[1] - b[1]) < 1e-9 for a, b in zip(got, exact, strict=True)
    )


@pytest.fixture
def bounded(monkeypatch):
    monkeypatch.setattr(fts_bound, "BOUND_MIN_CHUNKS", 100)
    monkeypatch.setattr(fts_bound, "FTS_BUDGET", 40)
    monkeypatch.setattr(fts_bound, "FILE_BUDGET", 40, raising=False)


def test_common_words_score_a_bounded_number_of_rows_and_find_the_rows_holding_them_all(
    corpus: Store, monkeypatch
) -> None:
    """`lantern harbour`: 490 rows match, the budget is 40. The 10 rows holding both words are the oldest (a
    share of the most recent rows misses them); coordination scores them first, with FTS5's exact scores. Below
    BOUND_MIN_CHUNKS chunks nothing is bounded: FTS5's bm25() over every row."""
    query = kw("lantern", "harbour")
    exact, exact_files = _exact(corpus, query, 10)
    monkeypatch.setattr(fts_bound, "FTS_BUDGET", 40)
    monkeypatch.setattr(fts_bound, "FILE_BUDGET", 40, raising=False)
    for q in (query, kw("said"), kw("said", "zephyr")):  # (600 chunks: a small index)
        assert corpus.keyword_search(q, 10) == _exact(corpus, q, 10)[0]
        assert corpus.file_keyword_search(q, 10) == _exact(corpus, q, 10)[1]
    monkeypatch.setattr(fts_bound, "BOUND_MIN_CHUNKS", 100)
    got = corpus.keyword_search(query, 10)
    assert len(got) == 10 and _same(got, exact)  # (chunk ids equal, scores FTS5's to 1e-9)
    assert 10 <= corpus._keywords.last_scored <= 40  # (of 490 matching rows)
    files = corpus.file_keyword_search(query, 10)
    assert len(files) == 10 and _same(files, exact_files)
    assert corpus._keywords.last_scored <= 40


def test_rare_terms_are_scored_on_every_row_holding_them_with_the_common_words_added(corpus: Store, bounded) -> None:
    """`zephyr said`: the 6 rows holding the rare word are all scored, `said` (400 rows) adds to their scores as in
    FTS5's bm25 over the whole query (a word in most rows: idf 1e-6); the rest of the 10 are `said`'s rows."""
    query = kw("zephyr", "said")
    exact, _ = _exact(corpus, query, 600)
    got = corpus.keyword_search(query, 10)
    assert _same(got[:6], exact[:6])
    scores = dict(exact)
    assert len(got) == 10 and all(abs(s - scores[c]) < 1e-9 for c, s in got)  # every score FTS5's own
    assert corpus._keywords.last_scored <= 40 + 6  # (of 402 matching rows)


def test_a_phrase_is_scored_with_its_own_row_count(corpus: Store, bounded) -> None:
    """A phrase's idf comes from the rows holding the phrase (counted once, then kept), not from its words'."""
    query = kw("lantern harbour", "zephyr", "said")
    exact, _ = _exact(corpus, query, 20)
    got = corpus.keyword_search(query, 20)
    scores = dict(exact)
    assert _same(got[:10], exact[:10])
    assert all(abs(s - scores[c]) < 1e-9 for c, s in got if c in scores)


def test_a_word_in_most_rows_chooses_no_candidates(corpus: Store, bounded) -> None:
    """A word held by more than half the rows weighs nothing in FTS5's bm25 (idf 1e-6): beside a rarer word it
    picks no rows (`said` is in 400 of 600 rows; `lantern` in 250 is not void)."""
    plan = fts_bound.plan(
        kw("said", "lantern"),
        corpus._keywords._tokens,
        lambda keys: corpus._keywords._doc_freqs("chunks_fts", keys),
        lambda t: corpus._keywords._phrase_rows("chunks_fts", t),
        40,
    )
    assert plan is not None
    assert [t.words for t in plan.void] == [("said",)]
    assert [t.words for t in plan.common] == [("lantern",)] and not plan.rare
    assert [level for level, _ in plan.levels()] == [1]


def test_a_filter_the_candidates_miss_falls_back_to_every_row(corpus: Store, bounded) -> None:
    """The candidates are chosen over every chunk; a filter keeping none of them still finds its rows."""
    flt = ChunkFilter(path_prefix="f48")  # (ten old `harbour` rows)
    exact, exact_files = _exact(corpus, kw("lantern", "harbour"), 5, flt)
    assert len(exact) == 5 and all(p.startswith("f48") for p in corpus.chunk_paths([c for c, _ in exact]).values())
    assert corpus.keyword_search(kw("lantern", "harbour"), 5, flt) == exact
    assert corpus.file_keyword_search(kw("lantern", "harbour"), 5, flt) == exact_files


def test_levels_are_the_rows_holding_the_most_common_words_first() -> None:
    """Coordination levels: all common words, then all but one, ..., then any one, each excluding the rows of the
    levels above and the rare words' rows."""
    q = kw("night", "old", "house", "zephyr")
    plan = fts_bound.Plan(
        terms=q.terms,
        holding=(500, 600, 700, 3),
        rows=10_000,
        rare=(q.terms[3],),
        common=q.terms[:3],
        void=(),
        budget=100,
        idfs=tuple(fts_bound.fts5_idf(10_000, n) for n in (500, 600, 700, 3)),
    )
    levels = plan.levels()
    assert [level for level, _ in levels] == [3, 2, 1]
    assert levels[0][1] == '(("night" AND "old" AND "house")) NOT ("zephyr")'
    assert levels[2][1].startswith('(("night") OR ("old") OR ("house")) NOT ("zephyr") NOT (')
    # a row outside every level holds none of them: it scores at most the void terms' (none here)
    assert plan.outside(1) == 0
    assert plan.outside(3) == pytest.approx(sum(sorted((plan.ub(t) for t in q.terms[:3]), reverse=True)[:2]))


def test_a_batch_written_by_this_process_is_seen_by_the_cached_frequencies(corpus: Store, bounded) -> None:
    """The document frequencies a bounded search scores with are kept until the index changes: a `replace_files`
    batch (the indexer's path for new files) in this very process changes them too (SQLite's data_version counts
    only other connections' commits), so the scores stay FTS5's own and the new rows' word is seen as common."""
    from saipling.storage.base import FileWrite

    query = kw("lantern", "harbour")
    assert corpus.term_doc_freqs(["lantern"]) == ({"lantern": 250}, 600)
    corpus.keyword_search(query, 10)  # (the frequencies cached)
    corpus.replace_files(
        [FileWrite(record(f"g{n:03d}.md", f"new{n}"), [row(0, _text(n, "lantern", "lantern"))]) for n in range(60)]
    )
    assert corpus.term_doc_freqs(["lantern"]) == ({"lantern": 310}, 660)
    exact, _ = _exact(corpus, query, 10)
    got = corpus.keyword_search(query, 10)
    assert len(got) == 10 and _same(got, exact)


def test_a_search_for_no_rows_finds_none_in_a_big_index(corpus: Store, bounded) -> None:
    """A limit of 0 (or less) returns nothing, as it does below BOUND_MIN_CHUNKS and on PostgreSQL, instead of
    failing in the bound's exactness check (the k-th best score of no rows)."""
    for query in (kw("lantern", "harbour"), kw("zephyr", "said")):
        assert corpus.keyword_search(query, 1)  # (the query finds rows)
        for limit in (0, -1):
            assert corpus.keyword_search(query, limit) == []
            assert corpus.keyword_search(query, limit, ChunkFilter(path_prefix="f1")) == []
            assert corpus.file_keyword_search(query, limit) == []


@pytest.fixture
def guarded(tmp_path: Path):
    """700 chunks, 300 of them holding `lantern` (one per file, all 12 words long), most of them private. The
    public ones: 6 of the oldest 40 (`lantern` once) and 20 of the newest (`lantern` twice: they score higher).
    The oldest rows are the ones a bound choosing its candidates over every chunk scores first."""
    import dataclasses

    from saipling.storage.base import FileWrite

    s = Store.open(tmp_path / "proj" / ".saipling" / "index.db")
    writes = []
    for n in range(700):  # (400 rows without the word: it stays below half the rows, not void)
        public = (n < 40 and n % 7 == 0) or (280 <= n < 300)
        words = ["lantern", "lantern"] if 280 <= n < 300 else ["lantern"] if n < 300 else []
        text = _text(n, *words)
        level = "public" if public else "private"
        folder = "open" if public else "closed"
        rec = dataclasses.replace(record(f"{folder}/f{n:03d}.md", text), visibility=level)
        writes.append(FileWrite(rec, [dataclasses.replace(row(0, text), visibility=level)]))
    s.replace_files(writes)
    yield s
    s.close()


@pytest.mark.parametrize(
    "flt", [ChunkFilter(visibility=["public"]), ChunkFilter(path_prefix="open/")], ids=["role", "path"]
)
def test_a_filtered_search_chooses_its_candidates_among_the_rows_the_filter_keeps(
    guarded: Store, bounded, flt: ChunkFilter
) -> None:
    """A role's (or a folder's) best rows lie outside the candidates an unfiltered bound would score (the oldest
    40 of 300 matching rows hold 6 public ones, enough for a top 5): the filter is applied while the candidates are
    chosen, so the filtered top 5 are FTS5's exact filtered bm25 ranking, for chunks and for whole files."""
    query = kw("lantern")
    exact, exact_files = _exact(guarded, query, 5, flt)
    assert len(exact) == 5 and len(exact_files) == 5
    paths = guarded.chunk_paths([c for c, _ in exact])
    assert all(p >= "open/f280" for p in paths.values())  # (the twice-lantern rows: the newest)
    got = guarded.keyword_search(query, 5, flt)
    assert _same(got, exact)
    assert guarded._keywords.last_exact is True
    assert guarded._keywords.last_scored <= 40  # (only rows the filter keeps are scored)
    assert _same(guarded.file_keyword_search(query, 5, flt), exact_files)


def test_a_filtered_search_looks_at_a_bounded_number_of_rows(guarded: Store, bounded, monkeypatch) -> None:
    """The scan for rows the filter keeps stops after FILTER_SCAN x the budget matching rows (here 80 of 300):
    what it found is returned, not claimed exact; with fewer than k found, FTS5's bm25 over every kept row."""
    monkeypatch.setattr(fts_bound, "FILTER_SCAN", 2)
    flt = ChunkFilter(visibility=["public"])
    query = kw("lantern")
    got = guarded.keyword_search(query, 5, flt)
    assert len(got) == 5 and guarded._keywords.last_exact is False
    assert all(p < "open/f040" for p in guarded.chunk_paths([c for c, _ in got]).values())  # (the oldest 80 rows)
    exact, _ = _exact(guarded, query, 10, flt)
    assert len(exact) == 10 and _same(guarded.keyword_search(query, 10, flt), exact)  # (6 found: every kept row)


@pytest.fixture
def levelled(tmp_path: Path):
    """600 chunks of 6-10 words: `lantern` in every 3rd, `harbour` every 4th, `beacon` every 5th (all three in
    10 rows, two of them in 90), some twice: the scores differ by the words held, their counts and the length."""
    s = Store.open(tmp_path / "proj" / ".saipling" / "index.db")
    for n in range(600):
        words = [w for w, k in (("lantern", 3), ("harbour", 4), ("beacon", 5)) if n % k == 0]
        if n % 7 == 0 and words:
            words.append(words[0])
        text = " ".join([*words, *(f"{FILLER[(n + i) % len(FILLER)]}{n % 7}" for i in range(6 + n % 5))])
        s.replace_file(record(f"f{n:03d}.md", text), [row(0, text)])
    yield s
    s.close()


def _statements(store: Store) -> list[str]:
    """The MATCH expressions the store's connection runs from now on (appended as they run)."""
    seen: list[str] = []

    def trace(_cursor, sql: str, bindings) -> bool:
        if "MATCH" in sql and bindings:
            seen.append(str(bindings[0]))
        return True

    store.conn.exec_trace = trace
    return seen


def test_an_unfiltered_search_reads_its_levels_without_their_not_clauses_and_scores_the_same_rows(
    levelled: Store, bounded
) -> None:
    """An unfiltered bounded search reads a coordination level's rows without the NOT clauses that exclude the
    rows of the levels above (it scored those already: saipling_bm25 skips them), and scores exactly the rows, with
    exactly the scores, that the NOT clauses give (a filtered search, which keeps them, on a filter every row
    passes); the budget (40) runs out inside level 2, so which rows it takes there is what is compared."""
    keywords = levelled._keywords
    query = kw("lantern", "harbour", "beacon")
    plan = keywords._plan(query, "chunks_fts", fts_bound.FTS_BUDGET)
    assert plan is not None and not plan.rare and [lv for lv, _ in plan.levels()] == [3, 2, 1]
    seen = _statements(levelled)
    plain = keywords._bounded("chunks_fts", plan, 10)
    plain_scored, plain_exact = keywords.last_scored, keywords.last_exact
    levels = [e for e in seen if '("beacon" AND "harbour")' in e]
    assert levels and all(" NOT " not in e for e in levels)  # (level 2 read without excluding level 3)
    seen.clear()
    excluding = keywords._bounded("chunks_fts", plan, 10, ChunkFilter(path_prefix="f"))
    assert any(" NOT " in e for e in seen)
    assert plain == excluding  # (every scored row and its score, in order)
    assert plain_scored == keywords.last_scored == 40 and plain_exact is keywords.last_exact is False
    exact, _ = _exact(levelled, query, 10)
    assert [c for c, _ in plain[:10]] == [c for c, _ in exact] and _same(plain[:10], exact)


def test_a_filter_every_chunk_passes_reads_no_row_for_it(corpus: Store, bounded) -> None:
    """The default role's visibility where no file sets one keeps every chunk (FilterCache.passes_all): the keyword
    lists are the unfiltered ones and no chunk or file row is read to check it (those reads cost ~9 ms a search
    at 1.00M chunks). A file setting a private visibility brings the check back."""
    import dataclasses

    query = kw("lantern", "harbour")
    role = ChunkFilter(visibility=["public"])
    unfiltered = corpus.keyword_search(query, 10), corpus.file_keyword_search(query, 10)
    seen: list[str] = []
    corpus.conn.exec_trace = lambda _c, sql, _b: seen.append(sql) or True
    assert (corpus.keyword_search(query, 10, role), corpus.file_keyword_search(query, 10, role)) == unfiltered
    assert seen and not [s for s in seen if "visibility" in s and "chunks_visibility" not in s]
    text = _text(3, "lantern", "lantern", "harbour", "harbour")  # (the best row of the query, made private)
    corpus.replace_file(
        dataclasses.replace(record("f003.md", text), visibility="private"),
        [dataclasses.replace(row(0, text), visibility="private")],
    )
    private = corpus.keyword_search(query, 10)[0][0]
    assert corpus.chunk_paths([private])[private] == "f003.md"
    assert private not in {c for c, _ in corpus.keyword_search(query, 10, role)}
    assert "f003.md" not in {p for p, _, _ in corpus.file_keyword_search(query, 10, role)}

"""Search (SPEC 8): request validation, ranking modes, filters before ranking, exclusion, visibility, spoiler
horizon, result fields, degraded fallback, the query-embedding LRU, hostile queries, the search log, related.

Vectors come from the real local HTTP test server (`apiserver.FakeEmbeddingAPI`: hash vectors, fine for
plumbing, meaningless for semantics); semantic quality is checked with the local model when it is installed.
"""

# ruff: noqa: F811  (the `api_server` fixture is imported, then requested as a parameter)

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apiserver import FakeEmbeddingAPI, api_server  # noqa: F401  (fixture)
from fixtures import fts_query, make_project, open_project, retrieval_project, write_file
from saipling.errors import InvalidRequest, PathOutsideRoot
from saipling.retrieval.request_checks import MODES
from saipling.retrieval.search import QueryCache, parse_request, query_type
from saipling.storage.base import KeywordQuery

ROLES = {"public": ["public"], "author": ["public", "private"]}
CORPORA = {"lore": ["world/**"]}
EXCLUDED = {"notes/ideas.md", "notes/secret/plan.md"}
SPEC_RESULT_FIELDS = {
    "filePath",
    "uri",
    "sectionHeading",
    "headingPath",
    "startLine",
    "endLine",
    "range",
    "snippet",
    "preview",
    "score",
    "confidence",
    "tokenCount",
    "fileType",
    "entityType",
    "entityName",
    "bookId",
    "chapterId",
    "matchedBy",
}
CRLF_FILE = (
    "---\r\nname: Obsidian Gate\r\ntype: place\r\n---\r\n# Obsidian Gate\r\n\r\nA gate of black glass.\r\n\r\n"
    "## Inscription\r\n\r\nThe runes read: the basalt token opens every door.\r\n"
)


def api_settings(api: FakeEmbeddingAPI) -> dict[str, Any]:
    return {"base_url": api.url + "/v1", "model": "text-embedding-3-small", "max_retries": 0}


def paths(response: dict[str, Any]) -> list[str]:
    return [r["filePath"] for r in response["results"]]


@pytest.fixture(scope="module")
def module_api() -> Iterator[FakeEmbeddingAPI]:
    with FakeEmbeddingAPI() as api:
        yield api


@pytest.fixture(scope="module")
def novel(tmp_path_factory: pytest.TempPathFactory, module_api: FakeEmbeddingAPI) -> Iterator[Any]:
    """The retrieval project indexed with vectors from the test API server (read-only for the tests)."""
    root = retrieval_project(tmp_path_factory.mktemp("search"), extra={"world/places/gate.md": CRLF_FILE})
    with open_project(root, provider="openai", roles=ROLES, corpora=CORPORA, **api_settings(module_api)) as p:
        summary = p.index()
        assert summary.embedded == summary.chunks > 0 and summary.degraded is None
        yield p


@pytest.fixture(scope="module")
def keyword_novel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The same project with provider none (keyword search only)."""
    root = retrieval_project(tmp_path_factory.mktemp("keyword"))
    with open_project(root, roles=ROLES) as p:
        p.index()
        yield p


# -- parse_request ---------------------------------------------------------------------------------------------
BAD_REQUESTS = [
    pytest.param({"maxResults": 5}, "query", id="query-missing"),
    pytest.param({"query": 5}, "query", id="query-int"),
    pytest.param({"query": ["a"]}, "query", id="query-list"),
    pytest.param({"query": ""}, "query", id="query-empty"),
    pytest.param({"query": " \t\n "}, "query", id="query-blank"),
    pytest.param({"query": "x" * 10_000}, "query", id="query-10000"),
    pytest.param({"query": "x" * 2001}, "query", id="query-2001"),
    pytest.param({"query": "lone \ud800 surrogate"}, "query", id="query-surrogate"),
    pytest.param({"query": "q", "maxResults": "5"}, "maxResults", id="maxResults-str"),
    pytest.param({"query": "q", "maxResults": 5.0}, "maxResults", id="maxResults-float"),
    pytest.param({"query": "q", "maxResults": True}, "maxResults", id="maxResults-bool"),
    pytest.param({"query": "q", "maxResults": 0}, "maxResults", id="maxResults-0"),
    pytest.param({"query": "q", "maxResults": 101}, "maxResults", id="maxResults-101"),
    pytest.param({"query": "q", "minScore": "0.5"}, "minScore", id="minScore-str"),
    pytest.param({"query": "q", "minScore": True}, "minScore", id="minScore-bool"),
    pytest.param({"query": "q", "minScore": 1.5}, "minScore", id="minScore-range"),
    pytest.param({"query": "q", "mode": "fuzzy"}, "mode", id="mode-unknown"),
    pytest.param({"query": "q", "mode": 3}, "mode", id="mode-int"),
    pytest.param({"query": "q", "source": "web"}, "source", id="source-unknown"),
    pytest.param({"query": "q", "role": 3}, "role", id="role-int"),
    pytest.param({"query": "q", "respectContextSettings": "false"}, "respectContextSettings", id="respect-str"),
    pytest.param({"query": "q", "explain": "yes"}, "explain", id="explain-str"),
    pytest.param({"query": "q", "filter": "characters"}, "filter", id="filter-str"),
    pytest.param({"query": "q", "filter": ["x"]}, "filter", id="filter-list"),
    pytest.param({"query": "q", "filter": {"maxChapter": "3"}}, "filter.maxChapter", id="maxChapter-str"),
    pytest.param({"query": "q", "filter": {"maxChapter": 2.5}}, "filter.maxChapter", id="maxChapter-float"),
    pytest.param({"query": "q", "filter": {"maxChapter": True}}, "filter.maxChapter", id="maxChapter-bool"),
    # (2**63 was an OverflowError binding it to SQLite: an internal error on every edge; -1 passed the LSP's model)
    pytest.param({"query": "q", "filter": {"maxChapter": 2**63}}, "filter.maxChapter", id="maxChapter-huge"),
    pytest.param({"query": "q", "filter": {"maxChapter": -1}}, "filter.maxChapter", id="maxChapter-negative"),
    pytest.param({"query": "q", "filter": {"entityTypes": 3}}, "filter.entityTypes", id="entityTypes-int"),
    pytest.param({"query": "q", "filter": {"entityTypes": [1]}}, "filter.entityTypes[0]", id="entityTypes-ints"),
    pytest.param({"query": "q", "filter": {"fileTypes": {"a": 1}}}, "filter.fileTypes", id="fileTypes-dict"),
    pytest.param({"query": "q", "filter": {"bookId": 1}}, "filter.bookId", id="bookId-int"),
    pytest.param({"query": "q", "filter": {"chapterId": 2}}, "filter.chapterId", id="chapterId-int"),
    # (matched no file, and said only that nothing matched)
    pytest.param({"query": "q", "filter": {"chapterId": "five"}}, "filter.chapterId", id="chapterId-words"),
    pytest.param({"query": "q", "filter": {"pathPrefix": ["a"]}}, "filter.pathPrefix", id="pathPrefix-list"),
    pytest.param({"query": "q", "filter": {"glob": None, "corpus": 7}}, "filter.corpus", id="corpus-int"),
    pytest.param({"query": "q", "filter": {"glob": False}}, "filter.glob", id="glob-bool"),
]


@pytest.mark.parametrize(("params", "field"), BAD_REQUESTS)
def test_parse_request_names_the_bad_field(params: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_request(params)
    assert info.value.field == field
    assert str(info.value).startswith(field + ":")


def test_parse_request_rejects_non_object() -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_request(["query"])  # type: ignore[arg-type]
    assert info.value.field == "params"


def test_parse_request_defaults_and_conversions() -> None:
    req = parse_request({"query": "  storm  "}, default_max=7)
    assert (req.query, req.max_results, req.min_score, req.mode, req.source) == (
        "storm",
        7,
        0.0,
        "hybrid",
        "cli",
    )
    assert req.respect_context_settings is True and req.role is None and req.filter.is_empty()
    req = parse_request(
        {"query": "x", "minScore": 0, "filter": {"entityTypes": ["character"], "pathPrefix": ".\\world\\"}}
    )
    assert req.min_score == 0.0 and isinstance(req.min_score, float)
    assert req.filter.entity_types == ["character"]  # (a single string is refused: one schema for every face)
    assert req.filter.path_prefix == "world/"
    req = parse_request(
        {"query": "x", "filter": {"maxChapter": 3, "bookId": "book-01"}, "mode": "lexical", "source": "eval"}
    )
    assert (req.filter.max_chapter, req.filter.book_id, req.mode, req.source) == (
        3,
        "book-01",
        "lexical",
        "eval",
    )
    assert parse_request({"query": "x" * 2000}).query == "x" * 2000


# -- query analysis --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("query", "kind"),
    [
        ('"green signal"', "exact"),
        ("NASA", "exact"),
        ("marcusCole", "exact"),
        ("chapter_03", "exact"),
        ("ch-03/scene-01.md", "exact"),
        ("where did Marcus lose his sister?", "semantic"),
        ("sister storm night ferry", "semantic"),
        ("marcus sister", "mixed"),
        ("ledger", "mixed"),
    ],
)
def test_query_type(query: str, kind: str) -> None:
    assert query_type(query) == kind


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("storm", '"storm"'),
        ("the storm and the ledger", '"storm" OR "ledger"'),
        ('"green signal" storm', '"green signal" OR "storm"'),
        ("c++", '"c"'),
        ("self-driving", '"self" OR "driving" OR "self driving"'),  # (2-4 adjacent words: also as a phrase)
        ("col:val", '"col" OR "val" OR "col val"'),
        ("a AND OR", '"a" OR "and" OR "or"'),  # all stopwords: all kept
        ("the", '"the"'),  # only stopwords: keep them rather than search nothing
        ("!!!", None),
        ("*", None),
        ('""', None),
    ],
)
def test_fts_query_quotes_every_term(query: str, expected: str | None) -> None:
    assert fts_query(query) == expected


HOSTILE = [
    "!!!",
    "?",
    "*",
    "NEAR(",
    "NEAR(a b",
    "a AND OR",
    "AND",
    "OR OR",
    "NOT",
    '"unbalanced',
    'un"balanced"',
    '"""',
    "c++",
    "self-driving",
    "col:val",
    "text:marcus",
    "heading_path:storm",
    "^marcus",
    "marcus*",
    "-marcus",
    "+",
    "(storm",
    "storm)",
    "{a b}",
    "[x]",
    "a:b:c",
    "'; DROP TABLE chunks; --",
    "1 OR 1=1",
    '" OR ""="',
    "Robert'); DROP TABLE files;--",
    "%",
    "_",
    "a_b",
    "\\",
    "\x00",
    "\x00marcus",
    "😀",
    "😀 marcus",
    "👩‍👩‍👧",
    "مرحبا بالعالم",
    "שלום עולם",
    "\u202eevil\u202c",
    "İstanbul",
    "straße",
    "ﬁre",
    "e\u0301",
    "①②",
    "Ⅻ",
    "٣",
    "中文搜索 测试",
    "\u200b",
    "\ufeff",
    "\u2028marcus",
    "x" * 2000,
    " ".join(f"w{i}" for i in range(400)),
]


@pytest.mark.parametrize("query", HOSTILE)
def test_fts_query_is_always_valid_fts5(keyword_novel: Any, query: str) -> None:
    match = KeywordQuery.parse(query)
    if match is not None:
        keyword_novel.store.keyword_search(match, 5)  # raises StorageError if the expression is not valid


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("query", [*HOSTILE, "", "   ", "x" * 10_000, "\ud800", "a\udfffb"])
def test_hostile_queries_give_results_or_a_query_error(novel: Any, query: str, mode: str) -> None:
    try:
        response = novel.search({"query": query, "mode": mode})
    except InvalidRequest as exc:
        assert exc.field == "query"
        return
    assert isinstance(response["results"], list)
    assert response["degraded"] is None
    assert not EXCLUDED & set(paths(response))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=st.text(alphabet=st.characters(blacklist_categories=()), max_size=300)
    | st.text(alphabet="\"'()*:^+-~ ANDORNEAR{}[]%_\\", max_size=40),
    mode=st.sampled_from(MODES),
)
def test_random_text_never_raises_anything_but_a_query_error(novel: Any, text: str, mode: str) -> None:
    try:
        response = novel.search({"query": text, "mode": mode, "maxResults": 3})
    except InvalidRequest as exc:
        assert exc.field == "query"
    else:
        assert len(response["results"]) <= 3


# -- query embedding LRU ---------------------------------------------------------------------------------------
class CountingProvider:
    model = "m"
    query_prefix = ""

    def __init__(self) -> None:
        self.calls: list[str] = []

    @property
    def query_key(self) -> str:  # as EmbeddingProvider.query_key: what shapes a query vector
        return f"{self.model}|{self.query_prefix}"

    def embed_query(self, text: str) -> np.ndarray:
        self.calls.append(text)
        return np.full(3, float(len(text)), dtype=np.float32)


def test_query_cache_is_an_lru_keyed_by_model_and_text() -> None:
    cache, p = QueryCache(size=2), CountingProvider()
    cache.get(p, "a")  # type: ignore[arg-type]
    cache.get(p, "bb")  # type: ignore[arg-type]
    assert cache.get(p, "a")[0] == 1.0  # type: ignore[arg-type]
    cache.get(p, "ccc")  # type: ignore[arg-type]  # evicts "bb", the least recently used
    cache.get(p, "a")  # type: ignore[arg-type]
    cache.get(p, "bb")  # type: ignore[arg-type]
    assert p.calls == ["a", "bb", "ccc", "bb"]
    assert (cache.hits, cache.misses) == (2, 4)
    p.model = "other"
    cache.get(p, "a")  # type: ignore[arg-type]
    assert p.calls[-1] == "a"  # another model: not a hit
    p.query_prefix, n = "query: ", len(p.calls)
    cache.get(p, "a")  # type: ignore[arg-type]
    assert len(p.calls) == n + 1  # another query prefix: not a hit


def test_second_identical_query_makes_no_http_request(novel: Any, module_api: FakeEmbeddingAPI) -> None:
    before = module_api.count
    first = novel.search({"query": "who keeps the lighthouse ledger now"})
    assert module_api.count == before + 1
    for mode in ("hybrid", "semantic"):
        again = novel.search({"query": "who keeps the lighthouse ledger now", "mode": mode})
        assert again["degraded"] is None and again["results"]
    assert module_api.count == before + 1
    assert paths(novel.search({"query": "who keeps the lighthouse ledger now"})) == paths(first)
    novel.search({"query": "who keeps the lighthouse ledger now", "mode": "lexical"})
    novel.search({"query": "a different question about the ledger"})
    assert module_api.count == before + 2


# -- result fields ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
def test_result_fields_exactly_as_spec(novel: Any, mode: str) -> None:
    response = novel.search({"query": "ferry harbor ledger storm", "mode": mode, "maxResults": 20})
    assert {"query", "mode", "results", "degraded", "indexing", "elapsedMs"} <= set(response)
    assert (response["query"], response["mode"], response["degraded"], response["indexing"]) == (
        "ferry harbor ledger storm",
        mode,
        None,
        False,
    )
    assert response["elapsedMs"] >= 0 and len(response["results"]) >= 5
    scores = [r["score"] for r in response["results"]]
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert scores == sorted(scores, reverse=True)
    for r in response["results"]:
        assert set(r) == SPEC_RESULT_FIELDS
        assert r["uri"] == (novel.root / r["filePath"]).as_uri()
        assert 1 <= r["startLine"] <= r["endLine"]
        assert r["range"] == {
            "start": {"line": r["startLine"] - 1, "character": 0},
            "end": {"line": r["endLine"], "character": 0},
        }
        assert isinstance(r["tokenCount"], int) and r["tokenCount"] > 0
        assert r["matchedBy"] and set(r["matchedBy"]) <= {"vector", "keyword"}
        assert r["fileType"] and r["entityType"] and isinstance(r["preview"], str)


def test_result_metadata(novel: Any) -> None:
    (top, *_) = novel.search({"query": "zephyrine", "mode": "lexical"})["results"]
    assert (
        top["filePath"],
        top["fileType"],
        top["entityType"],
        top["entityName"],
        top["bookId"],
        top["chapterId"],
    ) == (
        "books/book-01/phase-5-bloom/ch-05/scene-01.md",
        "scene_draft",
        "scene_draft",
        "ch-05-scene-01",
        "book-01",
        "ch-05",
    )
    assert (top["sectionHeading"], top["headingPath"]) == ("# Chapter 5, Scene 1", "Chapter 5, Scene 1")
    (flaw, *_) = novel.search({"query": "debt nobody remembers", "mode": "lexical"})["results"]
    assert (flaw["filePath"], flaw["sectionHeading"], flaw["entityName"]) == (
        "characters/marcus-cole/profile.md",
        "## Defining Flaw",
        "marcus-cole",
    )
    assert flaw["headingPath"] == "Marcus Cole > Defining Flaw"


@pytest.mark.parametrize(
    ("query", "word"),
    [
        ("basalt", "basalt"),
        ("childhood chandlery", "chandlery"),
        ("debt", "debt"),
        ("quillfeather", "quillfeather"),
        ("green signal", "signal"),
    ],
)
def test_lines_on_disk_hold_the_matched_text(novel: Any, query: str, word: str) -> None:
    for r in novel.search({"query": query, "mode": "lexical"})["results"]:
        lines = (novel.root / r["filePath"]).read_bytes().decode("utf-8").splitlines()
        assert r["endLine"] <= len(lines)
        passage = "\n".join(lines[r["startLine"] - 1 : r["endLine"]])
        assert word in passage.lower()
        assert f"**{word}" in r["snippet"].lower()
        # the range (0-based) selects the same lines
        assert lines[r["range"]["start"]["line"]] == lines[r["startLine"] - 1]


def test_crlf_file_with_frontmatter_uses_on_disk_line_numbers(novel: Any) -> None:
    (r,) = [r for r in novel.search({"query": "basalt", "mode": "lexical"})["results"]]
    assert (r["filePath"], r["sectionHeading"], r["startLine"], r["endLine"]) == (
        "world/places/gate.md",
        "## Inscription",
        9,
        11,
    )
    assert r["snippet"].startswith("## Inscription The runes read: the **basalt** token")


def test_snippet_marks_every_matched_term(novel: Any) -> None:
    (r, *_) = novel.search({"query": "Copper coin", "mode": "lexical"})["results"]
    assert "**copper**" in r["snippet"] and "**coin**" in r["snippet"]
    assert "**" not in r["preview"]


def test_matched_by_per_mode(novel: Any) -> None:
    q = {"query": "quillfeather journal", "maxResults": 10}
    assert all(r["matchedBy"] == ["keyword"] for r in novel.search(q | {"mode": "lexical"})["results"])
    assert all(r["matchedBy"] == ["vector"] for r in novel.search(q | {"mode": "semantic"})["results"])
    hybrid = novel.search(q | {"mode": "hybrid"})["results"]
    assert hybrid[0]["filePath"] == "characters/elena-vance/profile.md"
    assert set(hybrid[0]["matchedBy"]) == {"vector", "keyword"}
    assert any(r["matchedBy"] == ["vector"] for r in hybrid)  # the rest come from vector KNN only


def test_explain_fields(novel: Any) -> None:
    plain = novel.search({"query": "quillfeather journal"})["results"]
    assert all("explain" not in r for r in plain)
    results = novel.search({"query": "quillfeather journal", "explain": True, "maxResults": 10})["results"]
    for r in results:
        e = r["explain"]
        assert set(e) == {
            "keywordRank",
            "vectorRank",
            "bm25",
            "fileBm25",
            "cosine",
            "exactMatch",
            "fused",
            "confidence",
            "fusedScore",
        }
        assert e["fusedScore"] == r["score"] and e["confidence"] == r["confidence"]
        assert (e["keywordRank"] is not None) == (e["bm25"] is not None)
        assert ("keyword" in r["matchedBy"]) == (e["bm25"] is not None or e["fileBm25"] is not None)
        assert (e["vectorRank"] is not None) == ("vector" in r["matchedBy"])
        assert e["cosine"] is not None  # every hybrid candidate gets its exact cosine
    top = results[0]["explain"]
    assert top["keywordRank"] == 1 and top["vectorRank"] >= 1
    lexical = novel.search({"query": "quillfeather", "mode": "lexical", "explain": True})["results"][0]["explain"]
    assert (lexical["keywordRank"], lexical["vectorRank"], lexical["fusedScore"]) == (1, None, 1.0)


def test_min_score_and_max_results(novel: Any) -> None:
    all_results = novel.search({"query": "ferry harbor ledger", "mode": "lexical", "maxResults": 100})["results"]
    assert len(all_results) > 3
    cut = all_results[2]["score"]
    kept = novel.search({"query": "ferry harbor ledger", "mode": "lexical", "maxResults": 100, "minScore": cut})
    assert all(r["score"] >= cut for r in kept["results"]) and len(kept["results"]) >= 3
    assert len(novel.search({"query": "ferry harbor ledger", "mode": "semantic", "maxResults": 2})["results"]) == 2


def test_searches_during_indexing_say_so(keyword_novel: Any) -> None:
    keyword_novel.state.is_indexing = True
    try:
        response = keyword_novel.search({"query": "quillfeather"})
    finally:
        keyword_novel.state.is_indexing = False
    assert response["indexing"] is True and paths(response) == ["characters/elena-vance/profile.md"]


# -- degraded --------------------------------------------------------------------------------------------------
def test_provider_none_degrades_to_keywords(keyword_novel: Any) -> None:
    for mode in ("semantic", "hybrid"):
        response = keyword_novel.search({"query": "quillfeather", "mode": mode})
        assert response["degraded"] and response["degraded"].startswith("keyword search only")
        assert response["mode"] == mode
        assert paths(response) == ["characters/elena-vance/profile.md"]
        assert response["results"][0]["matchedBy"] == ["keyword"]
    assert keyword_novel.search({"query": "quillfeather", "mode": "lexical"})["degraded"] is None


def test_index_without_vectors_degrades_for_a_real_provider(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    root = retrieval_project(tmp_path)
    with open_project(root) as p:
        p.index()
    with open_project(root, provider="openai", **api_settings(api_server)) as p:
        response = p.search({"query": "quillfeather", "mode": "semantic"})
        assert "no text-embedding-3-small embeddings" in response["degraded"]
        assert paths(response) == ["characters/elena-vance/profile.md"]


@pytest.mark.parametrize("status", [500, 503, 429, 401])
def test_provider_failing_at_query_time_gives_keyword_results(
    tmp_path: Path, api_server: FakeEmbeddingAPI, status: int
) -> None:
    root = retrieval_project(tmp_path)
    with open_project(root, provider="openai", **api_settings(api_server)) as p:
        p.index()
        if status == 401:
            api_server.require_key("sk-not-configured")
        else:
            api_server.fail(status, times=2)
        for mode in ("hybrid", "semantic"):
            response = p.search({"query": f"quillfeather {mode}", "mode": mode})
            assert response["degraded"].startswith("keyword search only") and str(status) in response["degraded"]
            assert paths(response) == ["characters/elena-vance/profile.md"]
            assert response["results"][0]["matchedBy"] == ["keyword"]
        count = api_server.count
        api_server.require_key(None)
        response = p.search({"query": "quillfeather again"})
        if status == 401:  # auth failures stop the provider: no more requests, still degraded
            assert api_server.count == count and response["degraded"]
            assert p.provider.failed
        else:  # transient failures: the next query embeds again
            assert api_server.count == count + 1 and response["degraded"] is None


# -- filters ---------------------------------------------------------------------------------------------------
def _chapter(r: dict[str, Any]) -> int | None:
    return int(r["chapterId"].split("-")[1]) if r["chapterId"] else None


FILTERS = [
    pytest.param({"entityTypes": ["character"]}, lambda r: r["entityType"] == "character", id="entityTypes"),
    pytest.param({"entityTypes": ["faction"]}, lambda r: r["entityType"] == "faction", id="entityTypes-faction"),
    pytest.param(
        {"entityTypes": ["place", "faction"]},
        lambda r: r["entityType"] in ("place", "faction"),
        id="entityTypes-two",
    ),
    pytest.param({"fileTypes": ["scene_draft"]}, lambda r: r["fileType"] == "scene_draft", id="fileTypes"),
    pytest.param({"bookId": "book-02"}, lambda r: r["bookId"] == "book-02", id="bookId"),
    pytest.param({"chapterId": "ch-02"}, lambda r: r["chapterId"] == "ch-02", id="chapterId"),
    pytest.param({"pathPrefix": "world\\"}, lambda r: r["filePath"].startswith("world/"), id="pathPrefix"),
    pytest.param(
        {"pathPrefix": "characters/elena"},
        lambda r: r["filePath"].startswith("characters/elena"),
        id="pathPrefix-partial",
    ),
    pytest.param(
        {"glob": "books/*/phase-5-bloom/ch-0[12]/*.md"},
        lambda r: r["chapterId"] in ("ch-01", "ch-02"),
        id="glob",
    ),
    pytest.param({"glob": "profile.md"}, lambda r: r["filePath"].endswith("/profile.md"), id="glob-basename"),
    pytest.param({"corpus": "lore"}, lambda r: r["filePath"].startswith("world/"), id="corpus"),
    pytest.param({"corpus": "content"}, lambda r: not r["filePath"].startswith("world/"), id="corpus-default"),
    pytest.param({"maxChapter": 2}, lambda r: _chapter(r) is None or _chapter(r) <= 2, id="maxChapter"),
    pytest.param(
        {"bookId": "book-01", "maxChapter": 3, "fileTypes": ["scene_draft"]},
        lambda r: r["bookId"] == "book-01" and _chapter(r) <= 3,
        id="combined",
    ),
]


@pytest.mark.parametrize(("flt", "keep"), FILTERS)
def test_filter_returns_exactly_the_matching_chunks(novel: Any, flt: dict[str, Any], keep: Any) -> None:
    # Semantic KNN ranks every embedded chunk, so the filtered list must be the unfiltered list minus the rest.
    everything = novel.search({"query": "anything at all", "mode": "semantic", "maxResults": 100})["results"]
    expected = [(r["filePath"], r["startLine"]) for r in everything if keep(r)]
    assert expected, "the filter should keep something"
    got = novel.search({"query": "anything at all", "mode": "semantic", "maxResults": 100, "filter": flt})
    assert [(r["filePath"], r["startLine"]) for r in got["results"]] == expected
    for mode in ("hybrid", "lexical"):
        got = novel.search(
            {"query": "harbor ferry ledger storm lantern the", "mode": mode, "maxResults": 100, "filter": flt}
        )
        assert all(keep(r) for r in got["results"])


def test_unknown_filter_values_give_no_results_not_errors(novel: Any) -> None:
    for flt in ({"bookId": "book-99"}, {"entityTypes": []}, {"corpus": "nope"}, {"glob": "[unclosed"}):
        response = novel.search({"query": "harbor", "filter": flt})
        assert isinstance(response["results"], list)
    assert novel.search({"query": "harbor", "filter": {"bookId": "book-99"}})["results"] == []


@pytest.mark.parametrize("mode", MODES)
def test_max_chapter_is_a_spoiler_horizon(novel: Any, mode: str) -> None:
    spoiler = "books/book-01/phase-5-bloom/ch-05/scene-01.md"
    query = {"query": "zephyrine betrayal of the lighthouse keeper", "mode": mode, "maxResults": 100}
    assert spoiler in paths(novel.search(query))
    for horizon in (4, 1, 0):
        results = novel.search(query | {"filter": {"maxChapter": horizon}})["results"]
        assert results
        assert all(_chapter(r) is None or _chapter(r) <= horizon for r in results)
        assert spoiler not in [r["filePath"] for r in results]


@pytest.mark.parametrize("mode", MODES)
def test_role_visibility(novel: Any, mode: str) -> None:
    private = "characters/elena-vance/profile.md"
    query = {"query": "quillfeather journal Elena Vance", "mode": mode, "maxResults": 100}
    assert private in paths(novel.search(query))  # no role: the defaultRole's view (author, in config.toml)
    assert private in paths(novel.search(query | {"role": "author"}))
    assert private in paths(novel.search(query | {"role": "AUTHOR"}))  # role names fold case
    for role in ("public", "stranger"):  # unknown roles see public files only
        results = novel.search(query | {"role": role})["results"]
        assert private not in [r["filePath"] for r in results]
        if mode != "lexical":
            assert results


def crowded_project(tmp_path: Path) -> Path:
    """Thirty notes that say "zircon" three times, six world files that say it once, inside longer text."""
    files: dict[str, str] = {}
    for i in range(30):
        files[f"notes/n{i:02d}.md"] = f"# Note {i}\n\nzircon zircon zircon lamp {i}\n"
    for i in range(6):
        files[f"world/w{i}.md"] = (
            f"# World {i}\n\nA single zircon lies among the harbor stones, the rope, the tar, the gulls and the "
            f"endless grey water that nobody in the village has ever crossed, number {i}.\n"
        )
    return make_project(tmp_path, files, "crowded")


@pytest.mark.parametrize("mode", MODES)
def test_filters_apply_before_ranking(tmp_path: Path, api_server: FakeEmbeddingAPI, mode: str) -> None:
    root = crowded_project(tmp_path)
    with open_project(root, provider="openai", **api_settings(api_server)) as p:
        p.index()
        if mode != "semantic":  # (hash vectors rank arbitrarily; the keyword ranking is the crowded one)
            top = p.search({"query": "zircon", "mode": mode, "maxResults": 5})
            assert all(path.startswith("notes/") for path in paths(top))
        for flt in ({"fileTypes": ["world"]}, {"pathPrefix": "world/"}, {"glob": "world/*.md"}):
            got = p.search({"query": "zircon", "mode": mode, "maxResults": 5, "filter": flt})
            assert len(got["results"]) == 5
            assert all(path.startswith("world/") for path in paths(got))
        # exclusion happens before ranking too
        write_file(root, ".context_settings.json", json.dumps({"notes": "exclude"}))
        got = p.search({"query": "zircon", "mode": mode, "maxResults": 5})
        assert len(got["results"]) == 5 and all(path.startswith("world/") for path in paths(got))


# -- exclusion -------------------------------------------------------------------------------------------------
EXCLUDED_QUERIES = [
    "cipher",
    "wolfsbane",
    "ledger could be a cipher",
    "poison the wolfsbane tea",
    "Ideas",
    "Plan",
    '"wolfsbane tea"',
    "lighthouse keeper knew the sister",
    "notes/ideas.md",
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("query", EXCLUDED_QUERIES)
def test_excluded_files_never_appear(novel: Any, query: str, mode: str) -> None:
    response = novel.search({"query": query, "mode": mode, "maxResults": 100})
    assert not EXCLUDED & set(paths(response))
    assert not EXCLUDED & set(paths(novel.search({"query": query, "mode": mode, "role": "author"})))


def test_excluded_files_are_indexed_and_shown_when_settings_are_ignored(novel: Any) -> None:
    for query, path in (("cipher", "notes/ideas.md"), ("wolfsbane", "notes/secret/plan.md")):
        response = novel.search({"query": query, "mode": "lexical", "respectContextSettings": False})
        assert paths(response) == [path]
    everything = novel.search(
        {"query": "x y z", "mode": "semantic", "maxResults": 100, "respectContextSettings": False}
    )
    assert EXCLUDED <= set(paths(everything))


def test_related_never_returns_excluded_files(novel: Any) -> None:
    indexed = set(novel.store.file_states())
    assert EXCLUDED <= indexed
    for path in sorted(indexed):
        if path in EXCLUDED:  # an excluded file is refused as `get` refuses it: nothing ranked by its vectors
            with pytest.raises(PathOutsideRoot) as refused:
                novel.related({"path": path, "maxResults": 100})
            with pytest.raises(PathOutsideRoot) as by_get:
                novel.get({"path": path})
            assert str(refused.value) == str(by_get.value) and "excluded" in str(refused.value)
            continue
        response = novel.related({"path": path, "maxResults": 100})
        assert response["indexed"] and response["degraded"] is None
        got = set(paths(response))
        assert path not in got, "related returns other files only"
        assert not EXCLUDED & got
        assert got  # there is always some other file


def test_exclusion_follows_the_settings_file(tmp_path: Path) -> None:
    root = retrieval_project(tmp_path)
    with open_project(root) as p:
        p.index()
        marcus = "characters/marcus-cole/profile.md"
        assert marcus in paths(p.search({"query": "chandlery", "mode": "lexical"}))
        for entry in (
            "characters/*/profile.md",
            "characters\\marcus-cole",
            "./characters/marcus-cole/profile.md",
            "characters/",
        ):
            write_file(root, ".context_settings.json", json.dumps({entry: "exclude", "padding" * len(entry): "auto"}))
            assert p.search({"query": "chandlery", "mode": "lexical"})["results"] == [], entry
            elena = {"path": "characters/elena-vance/profile.md", "maxResults": 100}
            # Elena's profile is excluded too: refused
            if entry in ("characters/*/profile.md", "characters/"):
                with pytest.raises(PathOutsideRoot, match="excluded by .context_settings.json"):
                    p.related(elena)
            else:
                assert marcus not in paths(p.related(elena))
        # a more specific "auto" entry wins over its folder's "exclude"
        write_file(root, ".context_settings.json", json.dumps({"characters/": "exclude", marcus: "auto"}))
        assert paths(p.search({"query": "chandlery", "mode": "lexical"})) == [marcus]
        write_file(root, ".context_settings.json", "{}")
        assert paths(p.search({"query": "chandlery", "mode": "lexical"})) == [marcus]


# -- disk checks -----------------------------------------------------------------------------------------------
def test_deleted_file_is_dropped_and_deindexed(tmp_path: Path) -> None:
    root = retrieval_project(tmp_path)
    gone = "books/book-01/phase-5-bloom/ch-03/scene-01.md"
    with open_project(root) as p:
        p.index()
        assert paths(p.search({"query": "steers marcus ferry", "mode": "lexical"}))[0] == gone
        (root / gone).unlink()
        response = p.search({"query": "steers marcus ferry", "mode": "lexical", "maxResults": 3})
        assert gone not in paths(response)
        assert len(response["results"]) == 3  # filled from further down the ranking
        assert p.store.get_file(gone) is None and p.store.chunks_for_path(gone) == []
        assert gone not in paths(p.search({"query": "remembers", "mode": "lexical"}))


# -- search log ------------------------------------------------------------------------------------------------
def test_search_log_records_source_and_hides_eval(tmp_path: Path) -> None:
    root = retrieval_project(tmp_path)
    with open_project(root) as p:
        p.index()
        p.search({"query": "ledger", "source": "editor"})
        p.search({"query": "nothing matches zzqx", "source": "agent", "mode": "lexical"})
        p.search({"query": "storm"})
        p.search({"query": "benchmark query", "source": "eval"})
        rows = p.store.search_log(include_eval=True)
        assert [(r.query, r.source) for r in reversed(rows)] == [
            ("ledger", "editor"),
            ("nothing matches zzqx", "agent"),
            ("storm", "cli"),
            ("benchmark query", "eval"),
        ]
        by_query = {r.query: r for r in rows}
        assert by_query["nothing matches zzqx"].results == 0 and by_query["nothing matches zzqx"].top_score == 0
        assert by_query["ledger"].results > 0 and 0 < by_query["ledger"].top_score <= 1
        assert by_query["ledger"].mode == "hybrid" and by_query["ledger"].elapsed_ms >= 0
        assert "eval" not in {r.source for r in p.store.search_log()}
        assert len(p.store.search_log()) == 3
    with open_project(root, analytics=False) as p:
        p.search({"query": "ledger"})
        assert len(p.store.search_log(include_eval=True)) == 4


# -- related ---------------------------------------------------------------------------------------------------
def test_related_keyword_fallback_and_bad_paths(keyword_novel: Any) -> None:
    response = keyword_novel.related({"path": "books/book-01/phase-5-bloom/ch-01/scene-01.md", "maxResults": 3})
    assert response["indexed"] and response["degraded"] is not None  # no vectors: keyword fallback
    assert 0 < len(response["results"]) <= 3
    assert "books/book-01/phase-5-bloom/ch-01/scene-01.md" not in paths(response)
    with pytest.raises(PathOutsideRoot, match="excluded"):  # as `get` refuses it
        keyword_novel.related({"path": "notes/ideas.md", "maxResults": 100})
    uri = (keyword_novel.root / "characters/marcus-cole/profile.md").as_uri()
    assert keyword_novel.related({"uri": uri})["path"] == "characters/marcus-cole/profile.md"
    with pytest.raises(InvalidRequest, match="characters/nobody/profile.md does not exist") as info:
        keyword_novel.related({"path": "characters/nobody/profile.md"})  # (was: indexed false, as if new)
    assert info.value.field == "path"
    for bad in ("../outside.md", "/etc/passwd", "a\x00b.md", "\ud800.md"):
        with pytest.raises(InvalidRequest) as info:
            keyword_novel.related({"path": bad})
        assert info.value.field == "path"
    with pytest.raises(PathOutsideRoot):
        keyword_novel.related({"path": "../../x.md"})
    for params, field in (
        ({}, "path"),
        ({"path": 3}, "path"),
        ({"path": "a.md", "maxResults": 0}, "maxResults"),
        ({"path": "a.md", "maxResults": "3"}, "maxResults"),
    ):
        with pytest.raises(InvalidRequest) as info:
            keyword_novel.related(params)
        assert info.value.field == field


SCENES = {
    "book/ch-01.md": "# Chapter One\n\n## The Forge\n\nThe blacksmith hammered glowing iron on the anvil, worked "
    "the bellows and plunged the tongs into the quenching trough.\n\n## The Orchard\n\nShe picked ripe apples "
    "and pears in the orchard, filling wicker baskets beneath blossoming branches.\n",
    "notes/smithing.md": "# Smithing\n\nAnvil, bellows, tongs, quenching: how a blacksmith shapes glowing iron.\n",
    "notes/fruit.md": "# Fruit\n\nApples and pears from the orchard, wicker baskets, branches in blossom.\n",
    "notes/stables.md": "# Stables\n\nGrooms, horses, saddles and bridles, hay in the stables' lofts.\n",
}


@pytest.mark.parametrize("provider", ["none", "local"])
def test_related_to_the_passage_at_a_line(tmp_path: Path, provider: str) -> None:
    from saipling.embeddings import local_available

    if provider == "local" and not local_available():
        pytest.skip("the local embedding model is not installed")
    with open_project(make_project(tmp_path, SCENES), provider=provider) as p:
        p.index()
        ch = "book/ch-01.md"
        forge = p.related({"path": ch, "startLine": 5})
        assert paths(forge)[0] == "notes/smithing.md" and (forge["startLine"], forge["endLine"]) == (1, 5)
        orchard = p.related({"path": ch, "startLine": 9, "endLine": 9})
        assert paths(orchard)[0] == "notes/fruit.md" and ch not in paths(orchard)
        # a line between passages (a blank line): the passage before it; past the end: refused below, as by `get`
        assert paths(p.related({"path": ch, "startLine": 6}))[0] == "notes/smithing.md"
        whole = p.related({"path": ch})
        assert {"notes/smithing.md", "notes/fruit.md"} <= set(paths(whole)) and "startLine" not in whole
        # edited, not re-indexed yet: the lines asked for are today's (three lines added above; a new scene)
        text = (p.root / ch).read_text(encoding="utf-8")
        (p.root / ch).write_text(
            "Draft 2\n\n\n" + text + "\n## The Stables\n\nGrooms brushed the horses "
            "and hung saddles and bridles beside the hay.\n",
            encoding="utf-8",
        )
        assert paths(p.related({"path": ch, "startLine": 8}))[0] == "notes/smithing.md"  # was line 5
        assert paths(p.related({"path": ch, "startLine": 16}))[0] == "notes/stables.md"  # not embedded yet
        for params, field in (
            ({"path": ch, "endLine": 4}, "endLine"),
            ({"path": ch, "startLine": 6, "endLine": 5}, "endLine"),
            ({"path": ch, "startLine": 0}, "startLine"),
            ({"path": ch, "startLine": 500}, "startLine"),
            ({"path": ch, "startLine": 500, "endLine": 600}, "startLine"),
        ):
            with pytest.raises(InvalidRequest) as info:
                p.related(params)
            assert info.value.field == field


# -- semantic quality (real local model) -----------------------------------------------------------------------
def test_local_model_finds_passages_by_meaning(tmp_path: Path) -> None:
    from saipling.embeddings import local_available

    if not local_available():
        pytest.skip("the local embedding model is not installed")
    root = retrieval_project(tmp_path)
    with open_project(root, provider="local") as p:
        p.index()
        response = p.search({"query": "which family member died at sea in bad weather?", "mode": "semantic"})
        assert response["degraded"] is None
        assert response["results"][0]["filePath"] == "characters/marcus-cole/profile.md"
        assert response["results"][0]["sectionHeading"] == "### The Storm"
        hybrid = p.search({"query": "where did I mention Marcus's sister?", "maxResults": 3})
        assert "### The Storm" in [r["sectionHeading"] for r in hybrid["results"]]
        # the excluded note is the best match by meaning, and still never returned
        query = {"query": "a plan to poison someone's tea", "mode": "semantic", "maxResults": 100}
        assert paths(p.search(query | {"respectContextSettings": False}))[0] == "notes/secret/plan.md"
        assert not EXCLUDED & set(paths(p.search(query)))
        assert not EXCLUDED & set(paths(p.search(query | {"mode": "hybrid"})))
        enriched = p.enrich({"query": query["query"], "skill": "always"})
        assert enriched["searchResults"] and "wolfsbane" not in enriched["contextBlock"]


def test_a_deleted_file_queued_for_deindexing_does_not_crowd_out_live_results(tmp_path: Path) -> None:
    from saipling.project import Project

    root = tmp_path / "zoo"
    root.mkdir()
    big = "\n\n".join(f"## Zebra {i}\n\n" + "Zebra, zebra and zebra. " * 30 for i in range(60))
    (root / "big.md").write_text("# Big\n\n" + big + "\n", encoding="utf-8")
    for i in range(5):
        (root / f"small{i}.md").write_text(f"# Small {i}\n\nOne zebra walks alone on the plain.\n", "utf-8")
    project = Project.open(root, init_options={"provider": "none"})
    try:
        project.index()
        before = project.search({"query": "zebra", "maxResults": 5})
        assert [r["filePath"] for r in before["results"]] == ["big.md"] * 5  # its chunks rank first
        queued: list[str] = []
        project.on_missing_file = queued.append  # what the language server does: deindex on the next tick
        (root / "big.md").unlink()
        found = project.search({"query": "zebra", "maxResults": 5})
        assert sorted(r["filePath"] for r in found["results"]) == [f"small{i}.md" for i in range(5)]
        assert set(queued) == {"big.md"}
    finally:
        project.close()


@pytest.mark.parametrize(
    ("query", "marked"),
    [
        ("drowning", "**drowned**"),
        ("cafe", "**Café**"),
        ("zoe", "**Zoë**"),
        ("naive", "**naïve**"),
        ("storms", "**storm**"),
    ],
)
def test_snippet_marks_what_fts_matched_after_stemming_and_accent_folding(
    tmp_path: Path, query: str, marked: str
) -> None:
    filler = " ".join(f"Line {i} of quiet harbour prose without the word." for i in range(40))  # ~2,000 chars
    text = f"# Log\n\n{filler} The fisherman drowned near the Café Zoë in a storm, a naïve man.\n"
    root = make_project(tmp_path, {"log.md": text})
    with open_project(root) as p:
        p.index()
        (r,) = p.search({"query": query, "mode": "lexical"})["results"]
        assert marked in r["snippet"], r["snippet"]  # the window is where the match is, not the chunk's start


def test_snippets_read_as_text_not_markdown_bold_links_or_images(tmp_path: Path) -> None:
    """An Obsidian note: a bold name is marked once (not `****Lich** **King****`), a link reads as its text (not its
    url, with the query's words marked inside it), an image, block-quote markers, a callout tag and a rule are
    left out."""
    text = (
        "---\naliases: [Lich King]\n---\n\n## Lich King\n\n![lichking_color|300](Icons/Lich-King-image-1.jpg)\n\n"
        ">[!info] The Lich King\n> The **Lich King** is the lord of the undead.\n>\n> ---\n>\n"
        "> **Source**:: [Pelgrane Press - The Lich King](https://pelgranepress.com/2012/the-lich-king-of-13th-age/)\n"
    )
    root = make_project(tmp_path, {"Icons/Lich-King.md": text})
    with open_project(root) as p:
        p.index()
        snippets = [r["snippet"] for r in p.search({"query": "Lich King", "mode": "lexical"})["results"]]
    body = next(s for s in snippets if "undead" in s)
    assert "The **Lich** **King** is the lord" in body and "****" not in body
    assert "Source:: Pelgrane Press - The **Lich** **King**" in body
    assert "](" not in body and "https://" not in body and "image-1.jpg" not in body
    assert ">" not in body and "[!info]" not in body and "---" not in body  # quote markers, callout tag, rule
    assert "The **Lich** **King** The **Lich** **King** is the lord of the undead. Source::" in body


def test_type_and_book_filters_take_values_as_frontmatter_writes_them(tmp_path: Path) -> None:
    """An Obsidian vault writes `type: Character` in one note and `type: character` in the next, and names its
    book `book: Pride and Prejudice` (indexed as the id `pride-and-prejudice`): the filters, a skill's
    `filter_entity_types` included, find every one of them, whichever way the filter is spelt."""
    files = {
        "people/lizzy.md": "---\nname: Lizzy\ntype: Character\n---\n\nLizzy walks to Netherfield in the mud.\n",
        "people/darcy.md": "---\nname: Darcy\ntype: character\n---\n\nDarcy walks to Netherfield at noon.\n",
        "places/netherfield.md": "---\ntype: Place\n---\n\nNetherfield Park, let at last, walks distance.\n",
        "ch/01.md": "---\nbook: Pride and Prejudice\nchapter: 1\n---\n\n# One\n\nNetherfield is let at last.\n",
        "ch/02.md": "---\nbook: Emma\nchapter: 1\n---\n\n# One\n\nNetherfield is not in this book.\n",
        "lyudi/anna.md": "---\ntype: Персонаж\nbook: Émile\n---\n\nAnna hears of Netherfield.\n",
    }
    root = make_project(tmp_path, files)
    with open_project(root) as p:
        p.index()

        def paths(flt: dict[str, Any]) -> set[str]:
            found = p.search({"query": "Netherfield", "mode": "lexical", "maxResults": 20, "filter": flt})
            return {r["filePath"] for r in found["results"]}

        people = {"people/lizzy.md", "people/darcy.md"}
        assert paths({"entityTypes": ["character"]}) == people
        assert paths({"entityTypes": ["Character"]}) == people
        assert paths({"entityTypes": ["place"]}) == {"places/netherfield.md"}
        assert paths({"fileTypes": ["Document"]}) == paths({"fileTypes": ["document"]}) != set()
        for book in ("pride-and-prejudice", "Pride and Prejudice", "PRIDE-AND-PREJUDICE"):
            assert paths({"bookId": book}) == {"ch/01.md"}, book
        assert paths({"bookId": "Emma"}) == paths({"bookId": "emma"}) == {"ch/02.md"}
        # every script's capitals, not only A-Z (SQLite's lower() leaves `П` and `É` as they are)
        for kind in ("Персонаж", "персонаж", "ПЕРСОНАЖ"):
            assert paths({"entityTypes": [kind]}) == {"lyudi/anna.md"}, kind
        assert paths({"bookId": "Émile"}) == paths({"bookId": "émile"}) == {"lyudi/anna.md"}
        assert paths({"chapterId": "1"}) == paths({"chapterId": "ch-01"}) == {"ch/01.md", "ch/02.md"}
        skill = {"enabled": True, "mode": "always", "filterEntityTypes": ["character"], "minRelevance": 0}
        got = p.enrich({"query": "who walks to Netherfield", "skillConfig": skill})
        assert {r["filePath"] for r in got["searchResults"]} == people


def test_a_misspelt_filter_is_refused_with_a_suggestion_not_ignored() -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_request({"query": "storm", "filter": {"bookID": "book-01"}})
    assert info.value.field == "filter.bookID" and "bookId" in str(info.value)
    assert parse_request({"query": "storm", "filter": {"bookId": "book-01"}}).filter.book_id == "book-01"


def test_a_cjk_query_word_matches_the_start_of_a_longer_run(tmp_path: Path) -> None:
    root = make_project(
        tmp_path,
        {
            "tokyo.md": "# 旅\n\n東京タワーは高い。夜の港は静かだ。\n",
            "other.md": "# Other\n\nNothing to see in this harbour note at all.\n",
        },
    )
    with open_project(root) as p:
        p.index()
        assert [r["filePath"] for r in p.search({"query": "東京", "mode": "lexical"})["results"]] == ["tokyo.md"]
        assert [r["filePath"] for r in p.search({"query": "夜の港", "mode": "lexical"})["results"]] == ["tokyo.md"]


@pytest.mark.parametrize("terms", [[], ["tide"], ["nothing-here"]])
def test_a_snippet_ends_at_a_word_with_an_ellipsis(terms: list[str]) -> None:
    """`related` gives snippets without query words: they were cut mid-word with no mark ("he is coming thi")."""
    from saipling.markdown.terms import make_snippet

    text = "What it was, whether animal or man, I cannot say; it came with the dark and left by the tide. " * 4
    snippet = make_snippet(text, terms, 80)
    assert snippet.endswith("…") and len(snippet.replace("**", "")) <= 82
    body = snippet.strip("…").replace("**", "")
    assert body and body in text and (body.split()[-1] + " ") in text + " "  # (a whole word ends it)
    assert make_snippet("a short text", terms, 80) == "a short text"


def test_function_words_do_not_decide_a_small_projects_confidence(tmp_path: Path) -> None:
    """In a folder of terse notes "should" and "we" are rare or absent, so their idf is high: a note holding every
    topical word of `how should we deploy` was not confident because it lacks them (an agent was told nothing
    matched)."""
    notes = {
        f"memory/note-{i:02d}.md": f"# Note {i}\n\nThe {w} task is finished.\n"
        for i, w in enumerate(
            ["billing", "invoice", "login", "queue", "cache", "backup", "logo", "rate limit", "frontend", "tests"]
        )
    }
    notes["memory/deploying.md"] = "# Deploying\n\nTo deploy, push a tag; the pipeline builds the image.\n"
    root = make_project(tmp_path, notes)
    with open_project(root) as project:
        project.index()
        res = project.search({"query": "how should we deploy", "maxResults": 3})
        assert res["results"][0]["filePath"] == "memory/deploying.md"
        assert res["noConfidentMatch"] is False and res["results"][0]["confidence"] >= 0.5
        # a word of the topic the note lacks still counts against it
        res = project.search({"query": "how should we deploy kubernetes", "maxResults": 3})
        assert res["results"][0]["confidence"] < 0.5


def test_related_keeps_to_the_spoiler_horizon(tmp_path: Path) -> None:
    """From chapter 5 a writer's related passages came from chapters 25 and 26; with maxChapter they do not, and a
    profile's section headed for a later chapter is left out as search leaves it out."""
    story = "The lighthouse keeper rows across the grey harbour to the smugglers' cove at midnight."
    files = {f"book/chapter-{n:02d}.md": f"# Chapter {n}\n\n{story} Scene {n}.\n" for n in (2, 5, 9, 25)}
    files["people/keeper.md"] = (
        f"---\nname: Keeper\n---\n# Keeper\n\nRows the grey harbour.\n\n## Chapter 25\n\n{story} He dies in the cove.\n"
    )
    root = make_project(tmp_path, files)
    with open_project(root) as project:
        project.index()
        everything = {
            r["filePath"] for r in project.related({"path": "book/chapter-05.md", "maxResults": 10})["results"]
        }
        assert {"book/chapter-09.md", "book/chapter-25.md"} <= everything
        kept = project.related({"path": "book/chapter-05.md", "maxResults": 10, "maxChapter": 5})["results"]
        assert kept and {r["filePath"] for r in kept} <= {"book/chapter-02.md", "people/keeper.md"}
        assert not any(
            "dies" in r["snippet"] or r["startLine"] > 6 for r in kept if r["filePath"] == "people/keeper.md"
        )


def test_related_reads_excluded_files_only_when_asked(tmp_path: Path) -> None:
    """The author's `:SaiplingRelated!` from a file `.context_settings.json` excludes (kept from agents, not from
    them): refused by default, as `get` refuses it; with respectContextSettings false it is read, and excluded
    files may answer it. An agent's tool cannot ask (the MCP face sends true)."""
    story = "The lighthouse keeper rows across the grey harbour to the smugglers' cove at midnight."
    root = make_project(
        tmp_path,
        {
            "drafts/twist.md": f"# Twist\n\n{story} The keeper is the smuggler.\n",
            "drafts/other.md": f"# Other\n\n{story} A second draft.\n",
            "book/ch01.md": f"# One\n\n{story}\n",
            ".context_settings.json": '{"drafts/": "exclude"}',
        },
    )
    with open_project(root) as project:
        project.index()
        with pytest.raises(PathOutsideRoot, match="excluded"):
            project.related({"path": "drafts/twist.md"})
        mine = project.related({"path": "drafts/twist.md", "respectContextSettings": False, "maxResults": 5})
        assert {r["filePath"] for r in mine["results"]} == {"drafts/other.md", "book/ch01.md"}
        theirs = project.related({"path": "book/ch01.md", "maxResults": 5})
        assert {r["filePath"] for r in theirs["results"]} == set()  # (every other file is a draft)
    from click.testing import CliRunner

    from saipling.cli.main import main

    args = ["related", "drafts/twist.md", "--root", str(root), "--all-files", "--json"]
    cli = CliRunner().invoke(main, args, env={"SAIPLING_PROVIDER": "none"})
    assert cli.exit_code == 0 and {r["filePath"] for r in json.loads(cli.stdout)["results"]} == {
        "drafts/other.md",
        "book/ch01.md",
    }


def test_a_short_file_brings_in_one_chunk_of_its_own_on_its_whole_file_score(
    tmp_path: Path, api_server: FakeEmbeddingAPI
) -> None:
    """Every chunk of a short file came in on the file's keyword score: four chunks of a 967-byte Abilities.md,
    keyword and vector rank none, took the top of a question about dropping to zero hit points (first-hour
    trial). Its best one speaks for the file; chunks that a list found are kept."""
    paras = [f"Paragraph {i}: " + " ".join(f"filler{i}x{j}" for j in range(30)) for i in range(8)]
    paras[2] += " You drop your guard."
    paras[6] += " Zero is the floor."
    files = {"rules/abilities.md": "# Abilities\n\n" + "\n\n".join(paras) + "\n"}
    files |= {f"rules/other-{i}.md": f"# Other {i}\n\n" + "plain words here. " * 40 + "\n" for i in range(30)}
    root = make_project(tmp_path, files)
    (root / ".saipling").mkdir(exist_ok=True)
    (root / ".saipling" / "config.toml").write_text("[chunking]\nmaxTokens = 60\ntargetTokens = 40\n")
    with open_project(root, provider="openai", **api_settings(api_server)) as p:
        p.index()
        assert len(p.store.chunks_for_path("rules/abilities.md")) >= 4
        got = p.search({"query": "drop to zero", "maxResults": 20, "explain": True})["results"]
        mine = [r for r in got if r["filePath"] == "rules/abilities.md"]
        unlisted = [r for r in mine if r["explain"]["keywordRank"] is None and r["explain"]["vectorRank"] is None]
        assert mine and len(unlisted) <= 1

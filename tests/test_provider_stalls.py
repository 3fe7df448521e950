"""Real processes (`saipling search`, `saipling index`, `saipling serve`, `saipling mcp`) against an embedding
server that sends its headers and then trickles its body (a real local HTTP server speaking the OpenAI API):
a search answers keyword-only within the documented 10 s, an index run ends with a clear error and releases
the index lock (its text phase kept), and shutdown/exit/end of input end the servers promptly."""

# ruff: noqa: F811  (the `api_server` fixture is imported, then requested as a parameter)

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from apiserver import FakeEmbeddingAPI, Step, api_server  # noqa: F401  (fixture)
from lsp_client import fake_api_options, server_env, write_project
from rawlsp import RawServer

FILES = {
    "keeper.md": "# The keeper\n\nThe lighthouse keeper trims the lamp at dusk.\n",
    "harbour.md": "# Harbour\n\nFishing boats come in with the tide and the gulls.\n",
    "market.md": "# Market\n\nThe chandlery sells rope, tar and lamp oil.\n",
}


def cli_env(api: FakeEmbeddingAPI, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in server_env().items() if k != "SAIPLING_TEST_CLOCK"}
    env.update(SAIPLING_PROVIDER="openai", SAIPLING_BASE_URL=api.url + "/v1", SAIPLING_MODEL="fake-embed", **extra)
    return env


def saipling(*args: str, env: dict[str, str], timeout: float) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "saipling", *args], capture_output=True, text=True, env=env, timeout=timeout
    )
    return done, time.monotonic() - t0


def indexed_project(tmp_path: Path, api: FakeEmbeddingAPI) -> Path:
    root = write_project(tmp_path / "p", FILES)
    done, _ = saipling("index", str(root), "--json", env=cli_env(api), timeout=120)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["embedded"] > 0 and not summary.get("degraded"), summary
    return root


def test_cli_search_answers_keyword_only_within_the_promised_10_s(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    root = indexed_project(tmp_path, api_server)
    api_server.trickle(0.5, times=100)  # every byte half a second apart: no read timeout ever trips
    done, took = saipling(
        "search", "lighthouse keeper", "--json", "--root", str(root), env=cli_env(api_server), timeout=60
    )
    assert done.returncode == 0, done.stderr
    response = json.loads(done.stdout)
    assert response["degraded"] and "keyword search only" in response["degraded"], response
    assert "timed out" in response["degraded"]
    assert response["results"] and response["results"][0]["filePath"] == "keeper.md"
    assert took < 16, took  # 10 s for the query, the rest is the process (imports, index open)


def test_cli_index_on_a_trickling_server_ends_with_a_clear_error_and_releases_the_lock(
    tmp_path: Path, api_server: FakeEmbeddingAPI
) -> None:
    root = write_project(tmp_path / "p", FILES)
    api_server.script(Step())  # the dimension probe is answered; then every batch trickles
    api_server.trickle(0.2, times=1000)
    env = cli_env(api_server, SAIPLING_REQUEST_TIMEOUT_SECONDS="1", SAIPLING_MAX_RETRIES="0", SAIPLING_FALLBACK="none")
    done, took = saipling("index", str(root), "--json", env=env, timeout=90)
    assert took < 30, took
    summary = json.loads(done.stdout)
    assert summary["embedded"] == 0 and summary["files"] == len(FILES)
    assert any("timed out" in w or "still busy" in w for w in summary["warnings"]), summary
    assert len(api_server.requests) >= 2 and api_server.requests[1].body["input"] != ["dimension probe"]
    # the text phase is kept: every file is keyword-searchable
    found, _ = saipling("search", "chandlery", "--mode", "lexical", "--json", "--root", str(root), env=env, timeout=60)
    assert found.returncode == 0, found.stderr
    assert [r["filePath"] for r in json.loads(found.stdout)["results"]] == ["market.md"]
    # the lock was released: the next run (the server well again) takes it at once and embeds everything
    api_server.reset()
    again, took = saipling("index", str(root), "--json", env=cli_env(api_server), timeout=60)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["embedded"] > 0 and took < 20


def _serve(root: Path, api: FakeEmbeddingAPI) -> RawServer:
    srv = RawServer(root)
    srv.initialize(fake_api_options(api))
    deadline = time.monotonic() + 60
    n = 100
    while True:  # until the first index run has embedded everything
        n += 1
        srv.request("saipling/status", {}, msg_id=n)
        reply = srv.response(n)
        assert reply is not None and "result" in reply, (reply, srv.stderr())
        st = reply["result"]
        if not st["isIndexing"] and st["totalFiles"] == len(FILES) and st["unembeddedChunks"] == 0:
            return srv
        assert time.monotonic() < deadline, st
        time.sleep(0.1)


def _gone(srv: RawServer, seconds: float) -> bool:
    try:
        srv.proc.wait(seconds)
    except subprocess.TimeoutExpired:
        return False
    return True


def test_serve_shutdown_and_exit_while_a_search_waits_on_a_trickle(
    tmp_path: Path, api_server: FakeEmbeddingAPI
) -> None:
    root = write_project(tmp_path / "p", FILES)
    with _serve(root, api_server) as srv:
        api_server.trickle(0.5, times=100)
        srv.request("saipling/search", {"query": "lighthouse keeper"}, msg_id="search")
        time.sleep(1.0)  # the query is being trickled in
        t0 = time.monotonic()
        srv.request("shutdown", None, msg_id="bye")
        assert srv.response("bye", timeout=5) is not None, "shutdown was not answered while a provider trickled"
        searched = srv.response("search", timeout=1)
        assert searched is not None and "result" in searched, searched  # answered, keyword-only
        assert searched["result"]["degraded"], searched["result"]
        srv.notify("exit")
        assert _gone(srv, 5), "the server did not end after exit"
        assert time.monotonic() - t0 < 6


def test_serve_exit_without_shutdown_while_a_search_waits_on_a_trickle(
    tmp_path: Path, api_server: FakeEmbeddingAPI
) -> None:
    root = write_project(tmp_path / "p", FILES)
    with _serve(root, api_server) as srv:
        api_server.trickle(0.5, times=100)
        srv.request("saipling/search", {"query": "tide and gulls"}, msg_id="search")
        time.sleep(1.0)
        t0 = time.monotonic()
        srv.notify("exit")
        assert _gone(srv, 5), "the server did not end after exit while a provider trickled"
        assert time.monotonic() - t0 < 5


def test_serve_shutdown_while_the_index_run_waits_on_a_trickle(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    """The first index run's embedding trickles (a 30 s budget per batch): shutdown and exit end it at once."""
    root = write_project(tmp_path / "p", FILES)
    api_server.trickle(0.5, times=1000)
    with RawServer(root) as srv:
        srv.initialize(fake_api_options(api_server, requestTimeoutSeconds=30))
        deadline = time.monotonic() + 20
        while not api_server.requests:
            assert time.monotonic() < deadline, srv.stderr()
            time.sleep(0.05)
        time.sleep(0.5)
        t0 = time.monotonic()
        srv.request("shutdown", None, msg_id="bye")
        assert srv.response("bye", timeout=5) is not None, "shutdown was not answered while indexing trickled"
        srv.notify("exit")
        assert _gone(srv, 5)
        assert time.monotonic() - t0 < 6


def test_mcp_ends_promptly_when_input_closes_during_a_trickled_search(
    tmp_path: Path, api_server: FakeEmbeddingAPI
) -> None:
    root = indexed_project(tmp_path, api_server)
    env = cli_env(api_server, SAIPLING_AUTO_INDEX="false")
    proc = subprocess.Popen(
        [sys.executable, "-m", "saipling", "mcp", str(root)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    replies: dict[Any, dict] = {}

    def read() -> None:
        for line in iter(proc.stdout.readline, b""):
            message = json.loads(line)
            replies[message.get("id")] = message

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        proc.stdin.write(
            (json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}) + "\n").encode()
        )
        proc.stdin.write((json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n").encode())
        proc.stdin.flush()
        deadline = time.monotonic() + 30
        while 1 not in replies:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        api_server.trickle(0.5, times=100)
        search = {"name": "search", "arguments": {"query": "lighthouse keeper"}}
        proc.stdin.write(
            (json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": search}) + "\n").encode()
        )
        proc.stdin.flush()
        deadline = time.monotonic() + 10
        while not any(
            r.body and "input" in r.body and "lighthouse" in str(r.body["input"]) for r in api_server.requests
        ):
            assert time.monotonic() < deadline, "the search never asked for its query vector"
            time.sleep(0.05)
        time.sleep(0.5)
        t0 = time.monotonic()
        proc.stdin.close()  # the client is done (the MCP stdio shutdown)
        proc.wait(6)
        assert time.monotonic() - t0 < 6
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.stdout.close()


def test_an_index_run_abandoned_at_shutdown_does_not_fall_back_to_the_local_model(
    tmp_path: Path, api_server: FakeEmbeddingAPI
) -> None:
    """Abandoning provider calls at shutdown is not the provider failing: no fallback to the local model (it
    would load a model and start a second run while the process ends), nothing recorded against the provider."""
    from saipling.project import Project

    root = write_project(tmp_path / "p", FILES)
    project = Project.open(
        root, overrides={"provider": "openai", "base_url": api_server.url + "/v1", "model": "fake-embed"}
    )
    try:
        api_server.trickle(0.5, times=1000)
        done: list[Any] = []
        runner = threading.Thread(target=lambda: done.append(project.index()), daemon=True)
        runner.start()
        deadline = time.monotonic() + 10
        while not api_server.requests:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.3)
        project.abort_calls()
        runner.join(5)
        assert done, "the index run did not end after its provider calls were abandoned"
        assert project.fallback_from is None and project.provider.name == "openai"
        assert project.store.get_meta("provider") != "local"
    finally:
        project.close()

"""Issue 30, item 11: another process's index run, seen and respected from outside it. `status` in a second
process shows the run (isIndexing, its phase and progress, its PID); `clear` takes the writer lock: it waits
for the run to finish (or gives up after --wait seconds, saying what holds the index), never clearing under it.
Real processes: `saipling index` embedding through a slowed OpenAI-compatible test server (tests/apiserver.py)."""

# ruff: noqa: F811  (fixture imported, then requested as a parameter)
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from apiserver import FakeEmbeddingAPI, api_server  # noqa: F401  (fixture)
from fixtures import make_project

SAIPLING = [sys.executable, "-m", "saipling"]
N = 40


def api_env(api: FakeEmbeddingAPI) -> dict[str, str]:
    drop = ("SAIPLING_", "VOYAGE_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(
        SAIPLING_PROVIDER="openai",
        SAIPLING_BASE_URL=f"{api.url}/v1",
        SAIPLING_MODEL="fake-embed",
        SAIPLING_DIMENSIONS="32",
        SAIPLING_MAX_RETRIES="0",
        SAIPLING_BATCH_SIZE="8",
        OPENAI_API_KEY="sk-test-0123456789abcdef",
    )
    return env


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SAIPLING, *args], env=env, capture_output=True, text=True, timeout=120)


def status(root: Path, env: dict[str, str]) -> dict[str, Any]:
    done = cli("status", str(root), "--json", env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def start_run(
    tmp_path: Path, api: FakeEmbeddingAPI, delay: float = 3.0
) -> tuple[Path, dict[str, str], subprocess.Popen[str]]:
    """A project of N notes and a `saipling index` run on it that embeds slowly (`delay` s a batch of 8)."""
    files = {f"notes/n{i:02d}.md": f"# Note {i}\n\nThe tide {i} turns the mill wheel {i}.\n" for i in range(N)}
    root = make_project(tmp_path, files)
    env = api_env(api)
    api.slow(delay, times=6)
    run = subprocess.Popen(
        [*SAIPLING, "index", str(root), "--json"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lock = root / ".saipling" / "index.lock"
    deadline = time.monotonic() + 30
    while not (lock.exists() and lock.read_text().split("\n")[0] == str(run.pid)):
        assert run.poll() is None and time.monotonic() < deadline, "the run never took the lock"
        time.sleep(0.02)
    return root, env, run


def embedding(root: Path, env: dict[str, str], run: subprocess.Popen[str]) -> dict[str, Any]:
    """Status (from this other process) once the run is embedding: its text phase is committed."""
    deadline = time.monotonic() + 30
    seen = status(root, env)
    while seen["indexPhase"] != "embedding" and time.monotonic() < deadline and run.poll() is None:
        time.sleep(0.2)
        seen = status(root, env)
    return seen


def test_status_from_another_process_shows_the_run(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    root, env, run = start_run(tmp_path, api_server)
    try:
        seen = status(root, env)
        assert run.poll() is None, "the run ended before status was asked: make it slower"
        assert seen["isIndexing"] is True
        assert seen["indexingProcess"] == {"pid": run.pid, "doing": "index"}
        assert seen["indexPhase"] in ("keywords", "embedding")
        seen = embedding(root, env, run)
        assert seen["indexPhase"] == "embedding" and seen["progress"]["phase"] == "embedding"
        assert seen["progress"]["chunksTotal"] >= N and seen["progress"]["filesTotal"] == N
        assert f"PID {run.pid} is indexing this project now" in seen["degraded"]  # not "run saipling index"
    finally:
        run.kill()  # kill -9: the kernel releases the lock; its record stays in the file
        run.communicate(timeout=60)
    assert (root / ".saipling" / "index.lock").read_text().startswith(f"{run.pid}\n")
    after = status(root, env)  # a stale record is not a run
    assert after["isIndexing"] is False and after["indexingProcess"] is None and after["indexPhase"] == "idle"


def test_clear_waits_for_another_process_run_then_clears(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    root, env, run = start_run(tmp_path, api_server, delay=1.0)
    try:
        cleared = cli("clear", str(root), "--json", env=env)
        ran = run.wait(timeout=10)  # the run had released the lock: it is ending, not cut short
    finally:
        out, err = run.communicate(timeout=120)
    assert cleared.returncode == 0, cleared.stderr
    assert f"the index is in use by PID {run.pid}" in cleared.stderr
    assert ran == 0, err
    summary = json.loads(out)
    assert summary["files"] == N and summary["embedded"] == summary["chunks"] >= N  # the whole run, undisturbed
    after = status(root, env)
    assert (after["totalFiles"], after["totalChunks"], after["pendingFiles"]) == (0, 0, 0)


def test_clear_gives_up_after_its_wait_naming_the_run(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    root, env, run = start_run(tmp_path, api_server)
    try:
        assert embedding(root, env, run)["isIndexing"] is True
        started = time.monotonic()
        refused = cli("clear", str(root), "--wait", "0.5", env=env)
        waited = time.monotonic() - started
        alive = run.poll() is None
    finally:
        run.kill()  # (its text phase is committed: every file is in the index)
        run.communicate(timeout=60)
    assert alive, "the run ended before clear gave up: make it slower"
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert f"index in use by PID {run.pid} (indexing" in refused.stderr and "not cleared" in refused.stderr
    assert waited < 30
    after = status(root, env)
    assert after["totalFiles"] == N and after["pendingFiles"] == 0  # nothing was cleared


def test_a_status_probe_never_makes_a_writer_think_the_index_is_busy(tmp_path: Path) -> None:
    """`status` takes a shared lock for an instant to see whether a run holds the index: a writer trying at that
    instant (even one that will not wait) takes the lock a moment later instead of failing or saying it waits.
    Another process probes in a tight loop while this one takes and releases the lock."""
    from saipling.storage.sqlite.lock import index_lock

    folder = tmp_path / ".saipling"
    folder.mkdir()
    (folder / "index.lock").touch()
    code = (
        "import sys, time\n"
        "from saipling.storage.sqlite.lock import other_run\n"
        "n, seen, end = 0, 0, time.monotonic() + 60\n"
        "print('ready', flush=True)\n"
        "while time.monotonic() < end and not sys.stdin.closed:\n"
        "    seen += other_run(sys.argv[1]) is not None\n"
        "    n += 1\n"
        "    if n % 500 == 0:\n"
        "        print(n, seen, flush=True)\n"
    )
    prober = subprocess.Popen([sys.executable, "-c", code, str(folder)], stdout=subprocess.PIPE, text=True)
    try:
        assert prober.stdout is not None and prober.stdout.readline().strip() == "ready"
        prober.stdout.readline()  # it has probed 500 times: it is in its loop
        line = ["0", "0"]
        for _ in range(20):  # (until the prober, which a loaded machine may starve, has run meanwhile)
            for _ in range(3000):
                with index_lock(folder, wait=False) as held:
                    assert held is not None
            line = prober.stdout.readline().split()
            if int(line[1]) > 0:
                break
    finally:
        prober.kill()
        prober.wait(10)
    assert int(line[1]) > 0  # it did see this process's lock as another's run, many times over


def test_the_language_server_shows_another_process_run_and_will_not_clear_under_it(
    tmp_path: Path, api_server: FakeEmbeddingAPI
) -> None:
    """A `saipling serve` opened on a folder that `saipling index` is indexing: its status names that process
    (its own start-up run waits for the lock), and clearIndex gives up after its wait instead of clearing."""
    from rawlsp import RawServer

    root, env, run = start_run(tmp_path, api_server, delay=8.0)  # it outlasts clearIndex's 10 s wait
    server_env = {k: v for k, v in env.items() if k.startswith("SAIPLING_") or k == "OPENAI_API_KEY"}
    try:
        with RawServer(root, env=server_env) as server:
            server.initialize({"provider": "openai"})
            server.request("saipling/status", {}, msg_id=2)
            reply = server.response(2)
            assert reply is not None and "result" in reply, (reply, server.stderr())
            assert run.poll() is None, "the run ended before the server asked: make it slower"
            seen = reply["result"]
            assert seen["isIndexing"] is True
            assert seen["indexingProcess"] == {"pid": run.pid, "doing": "index"}
            server.request("saipling/clearIndex", {}, msg_id=3)
            refused = server.response(3, timeout=40)
            assert run.poll() is None, "the run ended before clearIndex gave up: make it slower"
            assert refused is not None and "error" in refused, refused
            assert f"index in use by PID {run.pid}" in refused["error"]["message"]
    finally:
        run.kill()
        run.communicate(timeout=60)
    assert status(root, env)["totalFiles"] == N  # nothing was cleared

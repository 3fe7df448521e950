"""Chunking in worker processes (indexing/chunk_pool.py): a big run's files are chunked by spawned workers beside the
indexer's store. What they store must be exactly what one process stores, with the local model's word-piece
counter as with the estimate; a worker that dies, a cancel, a file refreshed after it was read ahead, and a
stdout that is a protocol channel must lose nothing. `SAIPLING_CHUNK_WORKERS` starts workers for the small
projects here (a real run starts them from 48 files and 1 MB)."""

from __future__ import annotations

import dataclasses
import json
import logging
import multiprocessing
import os
import pickle
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from fixtures import bump_mtime, kw, make_project, open_project, words
from saipling.embeddings.base import estimate_tokens
from saipling.indexing import chunk_pool
from saipling.indexing.chunk_pool import ChunkPool, ReadAhead, chunk_bytes, read_early
from saipling.markdown.chunker import Chunk, ChunkLimits, limits_for

ENV = chunk_pool.WORKERS_ENV


def corpus(tmp_path: Path, name: str, n: int = 36) -> Path:
    """Notes of every shape the chunker meets, and the odd ones a run must skip or warn about."""
    files: dict[str, str | bytes] = {}
    for i in range(n):
        sections = "\n\n".join(f"## Part {j}\n\n{words(40 + 13 * j, seed=i * 7 + j)}" for j in range(1 + i % 5))
        listed = "\n".join(f"- item {k}: {words(12, seed=i + k)}" for k in range(i % 4))
        front = f"---\ntype: character\nname: Person {i}\naliases: [P{i}]\n---\n" if i % 3 == 0 else ""
        files[f"notes/n{i:02d}.md"] = f"{front}# Note {i}\n\n{words(30, seed=i)}\n\n{listed}\n\n{sections}\n"
    files["odd/broken-front.md"] = "---\ntitle: [unclosed\n---\n# Broken\n\nThe body still counts.\n"
    files["odd/latin1.md"] = "# Café\n\nLa señora del pueblo.\n".encode("latin-1")
    files["odd/utf16.md"] = "# Wide\n\nA note saved by Notepad.\n".encode("utf-16")
    files["odd/binary.md"] = b"\x00\x01\x02 not text \x00"
    files["odd/long.md"] = "# Long\n\n" + "\n\n".join(words(300, seed=s) for s in range(12)) + "\n"
    return make_project(tmp_path, files, name=name)


def snapshot(project: Any) -> dict[str, Any]:
    """Everything a run stores about the text, minus timestamps."""
    conn = project.store.conn
    files = sorted(
        tuple(r)
        for r in conn.execute(
            "SELECT path, content_hash, size, file_type, encoding, chunk_count, entity_type, entity_name,"
            " display_name, aliases, warning FROM files"
        )
    )
    chunks = sorted(
        tuple(r)
        for r in conn.execute(
            "SELECT path, chunk_index, kind, section_heading, heading_path, start_line, end_line, content_hash,"
            " token_count, text FROM chunks"
        )
    )
    hits = {w: project.store.keyword_search(kw(w), 50) for w in ("person", "café", "body", "notepad")}
    ranked = {
        w: sorted(conn.execute("SELECT path FROM chunks WHERE id = ?", (i,)).fetchone()[0] for i, _ in h)
        for w, h in hits.items()
    }
    return {"files": files, "chunks": chunks, "fts": ranked}


def run_index(root: Path, workers: int, monkeypatch: pytest.MonkeyPatch, provider: str = "none", **kw: Any):
    monkeypatch.setenv(ENV, str(workers))
    with open_project(root, provider) as project:
        summary = project.index(embed=False, **kw)
        return summary, snapshot(project)


@pytest.fixture(params=["none", "local"])
def provider(request: pytest.FixtureRequest) -> str:
    if request.param == "local":
        pytest.importorskip("onnxruntime", reason="local extra not installed")
    return request.param


def logged(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    """saipling's log lines about the files (not about the pool), first lines only."""
    lines = sorted(
        {
            (r.levelno, r.getMessage().splitlines()[0].replace("/b/", "/a/"))
            for r in caplog.records
            if r.name.startswith("saipling") and "worker" not in r.getMessage()
        }
    )
    caplog.clear()
    return lines


def test_a_run_with_a_worker_stores_what_one_process_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, provider: str
) -> None:
    caplog.set_level(logging.INFO, logger="saipling")
    serial, alone = run_index(corpus(tmp_path, "a"), 0, monkeypatch, provider)
    said_alone = logged(caplog)
    monkeypatch.setattr(ChunkPool, "take_back", False)  # every file chunked by the worker
    pooled, beside = run_index(corpus(tmp_path, "b"), 1, monkeypatch, provider)
    assert serial.chunk_workers == 0 and pooled.chunk_workers == 1
    said_beside = logged(caplog)
    # what the decoder, the frontmatter parser and the skip rules say is logged as when one process chunks
    for what in ("latin", "malformed YAML", "binary file"):
        assert [m for m in said_alone if what in m[1]] == [m for m in said_beside if what in m[1]] != []
    assert len(alone["chunks"]) > 100 and any(h for h in alone["fts"].values())
    assert beside == alone
    assert (
        sorted(pooled.skipped) == sorted(serial.skipped)
        and ("odd/binary.md", "binary or undecodable") in serial.skipped
    )
    assert sorted(pooled.warnings) == sorted(serial.warnings) and any(
        "latin" in w or "cp12" in w for w in serial.warnings
    )
    assert pooled.changed == serial.changed == 40  # the binary note is skipped
    # and with the indexer chunking the groups no worker has started (a normal run): the same again
    monkeypatch.setattr(ChunkPool, "take_back", True)
    _, mixed = run_index(corpus(tmp_path, "c"), 1, monkeypatch, provider)
    assert mixed == alone


def test_a_worker_chunks_a_file_as_the_indexer_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ChunkPool, "take_back", False)  # (else a task still queued comes back undone)
    root = corpus(tmp_path, "c", n=6)
    limits = limits_for(128, 96, 16, 256, 0)
    paths = sorted(p for p in root.rglob("*.md"))
    with ChunkPool(1, limits, estimate_tokens) as pool:
        rels = [str(p.relative_to(root)) for p in paths]
        got = pool.result(pool.submit(rels, [p.read_bytes() for p in paths], [None] * len(paths)))  # type: ignore[arg-type]
    assert got is not None
    assert all(c.in_worker for c in got)
    here = [chunk_bytes(r, p.read_bytes(), limits, estimate_tokens) for r, p in zip(rels, paths, strict=True)]
    assert any(ch.embed_text for c in here for ch in c.chunks or ())
    # a worker's chunks come back without their embedding text (the indexer stores none: half the bytes sent)
    assert not any(ch.embed_text for c in got for ch in c.chunks or ())
    # nor their previews (the SQLite index stores none; text_phase makes them for a backend that does)
    assert any(ch.preview for c in here for ch in c.chunks or ())
    assert not any(ch.preview for c in got for ch in c.chunks or ())
    for c in here:
        for ch in c.chunks or ():
            ch.embed_text = ch.preview = ""
    assert [dataclasses.replace(c, in_worker=False) for c in got] == here
    binary = got[rels.index("odd/binary.md")]
    assert binary.chunks is None and binary.skipped == "binary or undecodable"


# Python 3.11's executor, marking a broken pool's queued tasks failed, raises InvalidStateError in its own thread
# for a task the indexer took back (cancelled) meanwhile: noise in that thread, nothing lost (newer Pythons
# ignore the error there)
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_killed_worker_loses_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _, alone = run_index(corpus(tmp_path, "a"), 0, monkeypatch)
    monkeypatch.setattr(ChunkPool, "take_back", False)  # every group goes to the worker, queued as it starts
    killed: list[int] = []
    submit = ChunkPool.submit

    def submit_then_kill(self: ChunkPool, *args: Any) -> Any:
        fut = submit(self, *args)
        for child in multiprocessing.active_children() if not killed else ():  # before it chunks anything
            killed.append(child.pid or 0)
            os.kill(child.pid or 0, signal.SIGKILL)
        return fut

    monkeypatch.setattr(ChunkPool, "submit", submit_then_kill)
    with caplog.at_level(logging.WARNING, logger="saipling"):
        summary, beside = run_index(corpus(tmp_path, "b"), 1, monkeypatch)
    assert killed, "no worker process was running to kill"
    assert any("chunking workers stopped" in r.getMessage() for r in caplog.records)
    assert not summary.failed and summary.chunk_workers == 0 and beside == alone


def _cannot_load() -> Any:
    raise RuntimeError("tokenizer t.json changed since the indexer loaded it")


class Unloadable:
    """A token counter a worker cannot unpickle (as a local model's whose tokenizer file was replaced)."""

    def __call__(self, text: str) -> int:
        return estimate_tokens(text)

    def __reduce__(self) -> Any:
        return (_cannot_load, ())


def _no_process(*_: Any, **__: Any) -> Any:
    raise OSError(11, "Resource temporarily unavailable")


@pytest.mark.parametrize("why", ["its counter cannot load", "no process to be had"])
def test_a_worker_that_cannot_start_leaves_the_run_to_the_indexer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, why: str
) -> None:
    from concurrent.futures import ProcessPoolExecutor

    from saipling.indexing.context import IndexContext

    _, alone = run_index(corpus(tmp_path, "a"), 0, monkeypatch)
    if why == "its counter cannot load":
        monkeypatch.setattr(IndexContext, "token_counter", lambda self: Unloadable())
    else:
        monkeypatch.setattr(ProcessPoolExecutor, "submit", _no_process)
    monkeypatch.setattr(ChunkPool, "take_back", False)  # every group waits for the worker: it never comes
    with caplog.at_level(logging.WARNING, logger="saipling"):
        summary, beside = run_index(corpus(tmp_path, "b"), 1, monkeypatch)
    assert any("chunking workers stopped" in r.getMessage() for r in caplog.records)
    assert not summary.failed and summary.chunk_workers == 0 and beside == alone


def test_a_cancelled_run_stops_its_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from saipling.indexing import text_phase as index_text

    monkeypatch.setattr(index_text, "TEXT_BATCH_CHUNKS", 32)  # stored a few files at a time
    monkeypatch.setattr(ChunkPool, "take_back", False)  # (so that the worker surely chunks some)
    root = corpus(tmp_path, "a")
    cancel = threading.Event()

    def cancel_early(p: Any) -> None:
        if p.files_done >= 12:
            cancel.set()

    summary, snap = run_index(root, 1, monkeypatch, progress=cancel_early, cancel=cancel)
    assert summary.cancelled and summary.chunk_workers == 1 and 0 < len(snap["files"]) < 40
    end = time.monotonic() + 30
    while multiprocessing.active_children() and time.monotonic() < end:
        time.sleep(0.05)
    assert multiprocessing.active_children() == []
    again, full = run_index(root, 1, monkeypatch)  # the next run finishes the job
    assert not again.cancelled and len(full["files"]) == 40


def test_a_file_read_ahead_then_refreshed_is_read_again(tmp_path: Path) -> None:
    """A refresh (a saved file) between two batches may store a file the run already read ahead: the run must
    read it again, never store the older bytes over the newer ones."""
    root = make_project(tmp_path, {f"n{i}.md": f"# N{i}\n\nVersion one.\n" for i in range(4)})
    todo = [type("E", (), {"rel": f"n{i}.md", "abs_path": root / f"n{i}.md"})() for i in range(4)]
    limits, generation = ChunkLimits(), [0]
    with ChunkPool(1, limits, estimate_tokens) as pool:
        ahead = ReadAhead(
            todo,
            pool,
            lambda p: Path(p).read_bytes(),
            lambda e, d: None,
            lambda: generation[0],
            8,
            lambda r, d, m: chunk_bytes(r, d, limits, estimate_tokens, m),
        )
        first = ahead.take(0)
        assert first is not None and first.data == (root / "n0.md").read_bytes()
        (root / "n3.md").write_text("# N3\n\nVersion two.\n")
        generation[0] += 1  # what Indexer.refresh does
        assert ahead.take(3) is None  # read before the refresh: the indexer reads it again
        assert ahead.result(first).chunks[0].text.endswith("Version one.")  # type: ignore[index, union-attr]
        ahead.close()
    assert read_early(root / "n3.md", lambda p: Path(p).read_bytes()).data == b"# N3\n\nVersion two.\n"


def _index_json(root: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A real `saipling index ROOT --json` that succeeded."""
    proc = subprocess.run(
        [sys.executable, "-m", "saipling", "index", str(root), "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def test_the_cli_starts_workers_and_keeps_stdout_to_itself(tmp_path: Path) -> None:
    # (the indexer chunks what it needs itself while its worker starts: a run long enough for it to be up)
    root = corpus(tmp_path, "a", n=600)
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update({ENV: "1", "SAIPLING_PROVIDER": "none"})
    proc = _index_json(root, env)
    summary = json.loads(proc.stdout)  # the whole of stdout is one JSON document
    assert summary["chunkWorkers"] == 1 and summary["files"] == 604


@pytest.mark.parametrize(
    ("value", "files", "size", "expected"),
    [
        ("0", 500, 1 << 30, 0),
        ("2", 2, 10, 2),
        ("2", 1, 10, 0),
        ("", 3, 1 << 30, 0),
        ("", 5000, 10, 0),
    ],
)
def test_worker_count(monkeypatch: pytest.MonkeyPatch, value: str, files: int, size: int, expected: int) -> None:
    monkeypatch.setenv(ENV, value)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(8)), raising=False)
    assert chunk_pool.worker_count(files, size) == expected


def test_forced_workers_are_capped_at_the_cpus_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """SAIPLING_CHUNK_WORKERS=40 on 2 CPUs started 40 processes (attack report, low)."""
    monkeypatch.setenv(ENV, "40")
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1}, raising=False)
    monkeypatch.setattr(chunk_pool, "_lowered_told", set())
    with caplog.at_level(logging.WARNING, logger="saipling.indexing.chunk_pool"):
        assert chunk_pool.worker_count(500, 1 << 30) == 2
        assert chunk_pool.worker_count(500, 1 << 30) == 2  # (told once: a server runs many passes)
    told = [r.getMessage() for r in caplog.records if ENV in r.getMessage()]
    assert told == [f"{ENV}=40 is more workers than the 2 CPUs this process may use: 2 started"]
    monkeypatch.setenv(ENV, "2")  # within the CPUs: as asked, nothing said
    assert chunk_pool.worker_count(500, 1 << 30) == 2 and len(caplog.records) == 1


def test_the_cli_caps_forced_workers_at_the_cpus(tmp_path: Path) -> None:
    """A real `saipling index`: more workers asked than CPUs: as many as the CPUs started, and the CLI says so."""
    root = corpus(tmp_path, "a", n=200)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("SAIPLING_")}
    env.update({ENV: str(cpus + 3), "SAIPLING_PROVIDER": "none"})
    proc = _index_json(root, env)
    assert json.loads(proc.stdout)["chunkWorkers"] <= cpus
    told = [line for line in proc.stderr.splitlines() if ENV in line]
    assert told == [
        f"warning: {ENV}={cpus + 3} is more workers than the {cpus} CPU{'s' if cpus != 1 else ''} "
        f"this process may use: {cpus} started"
    ], proc.stderr


def test_worker_count_of_a_big_run_leaves_a_core_to_the_indexer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(3)), raising=False)
    assert chunk_pool.worker_count(1000, 10 << 20) == 2
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0}, raising=False)
    assert chunk_pool.worker_count(1000, 10 << 20) == 0


def test_a_file_failing_to_read_ahead_fails_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read that raises something else than OSError, up to 128 files ahead of the one being stored, fails
    that file when its turn comes, not the file being taken then."""
    root = corpus(tmp_path, "a")
    monkeypatch.setenv(ENV, "1")
    monkeypatch.setattr(ChunkPool, "take_back", False)
    with open_project(root) as project:
        real = project.indexer.text.read_bytes

        def odd(path: Path) -> bytes:
            if Path(path).name == "n20.md":
                raise ValueError("simulated reader bug")
            return real(path)

        monkeypatch.setattr(project.indexer.text, "read_bytes", odd)
        summary = project.index(embed=False)
        assert [p for p, _ in summary.failed] == ["notes/n20.md"] and "ValueError" in summary.failed[0][1]
        assert summary.chunk_workers == 1 and len(project.store.file_states()) == 39


def test_a_refresh_makes_a_run_read_its_files_again(tmp_path: Path) -> None:
    """Indexer.refresh (a saved file, stored between two batches of a run) moves the generation ReadAhead checks."""
    root = make_project(tmp_path, {"a.md": "# A\n\nOne.\n"})
    with open_project(root) as project:
        before = project.indexer.text.refreshes
        (root / "a.md").write_text("# A\n\nTwo.\n")
        project.indexer.refresh(["a.md"])
        assert project.indexer.text.refreshes == before + 1


ORPHAN = """
import os, sys, time
from saipling.indexing.chunk_pool import ChunkPool
from saipling.markdown.chunker import ChunkLimits
from saipling.embeddings.base import estimate_tokens
if __name__ == "__main__":
    pool = ChunkPool(1, ChunkLimits(), estimate_tokens)
    pool.result(pool.submit(["a.md"], [b"# A\\n\\nText.\\n"], [None]))
    print(*[p.pid for p in __import__("multiprocessing").active_children()], flush=True)
    time.sleep(600)
"""


def test_workers_end_when_their_indexer_is_killed(tmp_path: Path) -> None:
    """kill -9 of the indexer (a crashed or killed server) must not leave its workers waiting for work forever."""
    script = tmp_path / "orphan.py"
    script.write_text(ORPHAN)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert select.select([proc.stdout], [], [], 60)[0], "the script started no worker within 60 s"
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert pids, "no worker started"
    finally:
        proc.kill()
        proc.wait()

    def alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return Path(f"/proc/{pid}/status").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text()

    end = time.monotonic() + 30
    while any(alive(p) for p in pids) and time.monotonic() < end:
        time.sleep(0.05)
    assert not any(alive(p) for p in pids)


def test_a_run_of_touched_files_with_a_few_edits_fails_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Files whose mtime changed but not their text are read, not chunked: the few changed ones then make a
    group spanning far more files than the read-ahead window, which the indexer chunks itself when it gets
    there (files read after that start a new group)."""
    from saipling.indexing import text_phase as index_text

    monkeypatch.setattr(index_text, "READ_AHEAD_FILES", 8)
    root = make_project(tmp_path, {f"n{i:02d}.md": f"# N{i}\n\n{words(30, seed=i)}\n" for i in range(60)})
    monkeypatch.setenv(ENV, "1")
    with open_project(root) as project:
        project.index(embed=False)
        for i in range(60):
            path = root / f"n{i:02d}.md"
            if i % 6 == 0:
                path.write_text(f"# N{i}\n\nEdited {i}: the lighthouse keeper.\n")
            bump_mtime(path)
        summary = project.index(embed=False)
        assert not summary.failed and summary.changed == 10 and summary.unchanged == 50
        assert sorted(p for p, _ in project.store.keyword_paths(kw("lighthouse"))) == [
            f"n{i:02d}.md" for i in range(0, 60, 6)
        ]


def test_chunk_bytes_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug in the decoder or the chunker skips that file: the others of its group are chunked all the same."""

    def broken(data: bytes, name: str = "") -> Any:
        raise RuntimeError("simulated decoder bug")

    monkeypatch.setattr(chunk_pool, "decode", broken)
    got = chunk_bytes("a.md", b"# A\n\nText.\n", ChunkLimits(), estimate_tokens)
    assert got.chunks is None and got.crashed and "RuntimeError" in (got.skipped or "")


async def test_a_language_server_indexing_with_workers_keeps_its_protocol_channel(tmp_path: Path) -> None:
    """The real server process (stdout is its JSON-RPC channel) indexes with a chunking worker forced on: the
    session stays healthy and every file is searchable."""
    from lsp_client import STORY, lsp_session, search_paths, status, wait_for_index, write_project

    root = write_project(tmp_path / "story", STORY)
    async with lsp_session(root, env={ENV: "1"}) as client:
        await wait_for_index(client)
        assert (await status(client))["totalFiles"] == len(STORY)
        assert await search_paths(client, "Fenwick", filter={"entityTypes": ["place"]}) == ["places/fenwick.md"]


def test_the_indexer_chunks_its_next_files_itself_while_its_worker_starts(tmp_path: Path) -> None:
    """A worker takes ~0.1 s to start (a Python process importing the chunker): groups read meanwhile are not
    queued behind the start, where the indexer would wait for them, but chunked by the indexer; once the worker
    is up it gets the groups held so far, all but the one the indexer reaches next."""
    files = {f"n{i:02d}.md": f"# N{i}\n\n{words(30, seed=i)}\n" for i in range(64)}
    root = make_project(tmp_path, files)
    todo = [type("E", (), {"rel": r, "abs_path": root / r})() for r in sorted(files)]
    limits, started = ChunkLimits(), threading.Event()

    class Starting(ChunkPool):
        take_back = False  # (the indexer waiting for group 3 would otherwise chunk group 4, not started yet)

        @property
        def ready(self) -> bool:
            return started.is_set()

    with Starting(1, limits, estimate_tokens) as pool:
        here: list[str] = []

        def chunk_here(r: str, d: bytes, m: Any) -> Any:
            here.append(r)
            return chunk_bytes(r, d, limits, estimate_tokens, m)

        ahead = ReadAhead(todo, pool, lambda p: Path(p).read_bytes(), lambda e, d: None, lambda: 0, 64, chunk_here)
        taken = [ahead.take(0)]  # reads all 64 files: four groups of 16, none queued
        assert taken[0] is not None and taken[0].group is not None and taken[0].group.fut is None
        assert ahead.result(taken[0]).chunks[0].text.startswith("# N0")  # type: ignore[index, union-attr]
        assert here == [f"n{i:02d}.md" for i in range(16)]  # the indexer did not wait for the worker
        started.set()
        taken += [ahead.take(i) for i in range(1, 64)]  # the worker is up: groups 3 and 4 go to it
        groups = [e.group for e in taken[::16]]  # type: ignore[union-attr]
        assert [g.fut is not None for g in groups] == [False, False, True, True]  # type: ignore[union-attr]
        assert all(ahead.result(e).chunks for e in taken)  # type: ignore[arg-type, union-attr]
        ahead.close()
    assert here == [f"n{i:02d}.md" for i in range(32)]  # 32-63 were chunked by the worker
    assert pool.done == 2


def test_chunks_travel_from_a_worker_as_tuples_of_their_fields() -> None:
    """A worker sends a million chunks back at 20,000 files: a file's chunks pickle as tuples of their fields (no
    dict of them by name each) and come back equal."""
    limits = limits_for(128, 96, 16, 256, 0)
    text = b"# Title\n\nSome text about setTimeout.\n\n## More\n\nAnd more.\n"
    chunked = chunk_bytes("a.md", text, limits, estimate_tokens)
    assert chunked.chunks
    data = pickle.dumps(chunked, protocol=pickle.HIGHEST_PROTOCOL)
    assert b"embed_text" not in data and b"ident_words" not in data
    back = pickle.loads(data)
    assert back == chunked and all(isinstance(c, Chunk) for c in back.chunks)
    skipped = chunk_bytes("b.md", b"\x00\x01binary", limits, estimate_tokens)
    assert pickle.loads(pickle.dumps(skipped)) == skipped

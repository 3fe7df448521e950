"""Benchmark: the LSP round trip of `saipling/search` against the same search called in-process.

The project is a copy of ../shared/corpora/fiction-chapters (60 chapters with --quick) when present, else a
generated one (400 files of Zipf-distributed words); the copy is indexed once and cached under
/tmp/saipling-bench (SAIPLING_BENCH_CACHE). ~200 queries (2-4 consecutive words sampled from the indexed text,
seeded) are run once on each side to warm caches (checking both give the same files), then timed in alternating
passes: `Project.search(params)` in this process vs `saipling/search` sent by a pygls client to a real
`saipling serve` subprocess over stdio, result decoded. Prints medians, p95, the ratio of medians (target <= 1.25)
and the protocol overhead (round trip minus the server's own elapsedMs).

    python benchmarks/bench_lsp.py                    # provider none: keyword pipeline, protocol cost most visible
    python benchmarks/bench_lsp.py --provider local   # the local model (query embedding dominates)
    python benchmarks/bench_lsp.py --quick
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

from _benchutil import phrase_queries
from lsprotocol import types
from pygls.lsp.client import LanguageClient
from pygls.protocol import JsonRPCResponseMessage, default_converter

from saipling.project import Project

REPO = Path(__file__).resolve().parents[1]
FICTION = REPO.parent / "shared" / "corpora" / "fiction-chapters"
CACHE = Path(os.environ.get("SAIPLING_BENCH_CACHE", "/tmp/saipling-bench"))
TARGET = 1.25


def build_project(provider: str, quick: bool) -> tuple[Path, str]:
    """An indexed project root (cached across runs) and a description of its source."""
    source = "fiction-chapters" if FICTION.is_dir() else "generated"
    if source == "generated":
        print(f"   {FICTION} is absent: using a generated project instead")
    root = CACHE / f"lsp-{source}-{provider}{'-quick' if quick else ''}"
    marker = root / ".bench-complete"
    if not marker.exists():
        shutil.rmtree(root, ignore_errors=True)
        n = (
            copy_fiction(root, 60 if quick else None)
            if source != "generated"
            else generate(root, 120 if quick else 400)
        )
        print(f"   indexing {n} files into {root} with provider {provider} (cached for later runs)")
        project = Project.open(root, init_options={"provider": provider})
        try:
            summary = project.index()
        finally:
            project.close()
        marker.write_text(f"{summary.files} files, {summary.chunks} chunks\n", encoding="utf-8")
    return root, f"{source}: {marker.read_text().strip()}"


def copy_fiction(root: Path, limit: int | None) -> int:
    files = sorted(FICTION.rglob("*.md"))[:limit]
    for f in files:
        target = root / f.relative_to(FICTION)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, target)
    return len(files)


def generate(root: Path, n_files: int) -> int:
    rng = random.Random(7)
    vocab = [f"{rng.choice('bcdfghklmnprstvw')}{rng.choice('aeiou')}{rng.choice('lmnrst')}{i}" for i in range(5000)]
    weights = [1 / (i + 1) for i in range(len(vocab))]
    for i in range(n_files):
        paras = [" ".join(rng.choices(vocab, weights, k=rng.randint(40, 120))) + "." for _ in range(rng.randint(3, 12))]
        path = root / f"part{i // 100}" / f"chapter-{i:03}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# Chapter {i}\n\n" + "\n\n".join(paras) + "\n", encoding="utf-8")
    return n_files


def sample_queries(root: Path, n: int) -> list[str]:
    project = Project.open(root, init_options={"provider": "none"})
    try:
        texts = [r[0] for r in project.store.conn.execute("SELECT text FROM chunks ORDER BY id")]
    finally:
        project.close()
    return phrase_queries(texts, n)


def raw_converter():
    converter = default_converter()
    converter.register_structure_hook(JsonRPCResponseMessage, lambda obj, cls: cls(**obj))
    return converter


async def start_server(root: Path, options: dict[str, Any]) -> LanguageClient:
    client = LanguageClient("bench", "1", converter_factory=raw_converter)
    ended = asyncio.Event()

    @client.feature(types.WINDOW_WORK_DONE_PROGRESS_CREATE)
    def create(params: types.WorkDoneProgressCreateParams) -> None:
        return None

    @client.feature(types.PROGRESS)
    def progress(params: types.ProgressParams) -> None:
        if isinstance(params.value, dict) and params.value.get("kind") == "end":
            ended.set()

    @client.feature(types.CLIENT_REGISTER_CAPABILITY)
    def register(params: types.RegistrationParams) -> None:
        return None

    for method in (types.WINDOW_LOG_MESSAGE, types.WINDOW_SHOW_MESSAGE):
        client.feature(method)(lambda params: None)

    env = {k: v for k, v in os.environ.items() if not k.startswith("SAIPLING_")}
    await client.start_io(sys.executable, "-m", "saipling", "serve", env={**env, "SAIPLING_LOG_LEVEL": "WARNING"})
    caps = types.ClientCapabilities(window=types.WindowClientCapabilities(work_done_progress=True))
    await client.initialize_async(
        types.InitializeParams(
            capabilities=caps,
            root_uri=root.as_uri(),
            workspace_folders=[types.WorkspaceFolder(root.as_uri(), root.name)],
            initialization_options=options,
        )
    )
    client.initialized(types.InitializedParams())
    await asyncio.wait_for(ended.wait(), 300)  # the initial (no-op) incremental index
    return client


class RawClient:
    """A minimal JSON-RPC client over the server's stdio: Content-Length framing and the stdlib json module,
    nothing else (roughly what an editor's native client costs). pygls' LanguageClient adds its own asyncio
    machinery and message objects on the client side of every round trip; this measures the server and the
    transport without them. Requests the server sends (progress tokens, registrations) get a null result."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future[Any]] = {}
        self.progress_ended = asyncio.Event()
        self.reader = asyncio.ensure_future(self._read())

    @classmethod
    async def start(cls, root: Path, options: dict[str, Any], index_timeout: float = 300) -> RawClient:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SAIPLING_")}
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "saipling",
            "serve",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env={**env, "SAIPLING_LOG_LEVEL": "WARNING"},
            limit=1 << 24,
        )
        client = cls(proc)
        await client.request(
            "initialize",
            {
                "processId": os.getpid(),
                "rootUri": root.as_uri(),
                "initializationOptions": options,
                "capabilities": {"window": {"workDoneProgress": True}},
                "workspaceFolders": [{"uri": root.as_uri(), "name": root.name}],
            },
        )
        client.notify("initialized", {})
        await asyncio.wait_for(client.progress_ended.wait(), index_timeout)  # the initial index
        return client

    def _write(self, message: dict[str, Any]) -> None:
        body = json.dumps(message).encode()
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    def notify(self, method: str, params: Any) -> None:
        self._write({"jsonrpc": "2.0", "method": method, "params": params})

    async def request(self, method: str, params: Any) -> Any:
        rid = next(self.ids)
        fut = asyncio.get_running_loop().create_future()
        self.pending[rid] = fut
        self._write({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return await fut

    async def _read(self) -> None:
        out = self.proc.stdout
        while True:
            length = 0
            while (line := await out.readline()) not in (b"\r\n", b""):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if not line:
                return
            msg = json.loads(await out.readexactly(length))
            if "method" in msg:
                if "id" in msg:  # a server -> client request
                    self._write({"jsonrpc": "2.0", "id": msg["id"], "result": None})
                elif msg["method"] == "$/progress" and msg["params"]["value"].get("kind") == "end":
                    self.progress_ended.set()
            elif (fut := self.pending.pop(msg["id"], None)) is not None:
                if "error" in msg:
                    fut.set_exception(RuntimeError(msg["error"]))
                else:
                    fut.set_result(msg["result"])

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.request("shutdown", None), 10)
            self.notify("exit", None)
            await asyncio.wait_for(self.proc.wait(), 10)
        if self.proc.returncode is None:
            self.proc.kill()
        self.reader.cancel()


def timed_local(project: Project, p: dict[str, Any]) -> float:
    t0 = time.perf_counter()
    project.search(p)
    return time.perf_counter() - t0


Send = Callable[[str, Any], Awaitable[Any]]


def pygls_send(client: LanguageClient) -> Send:
    return client.protocol.send_request_async


def summary(xs: list[float]) -> tuple[float, float]:
    s = sorted(xs)
    return statistics.median(s), s[min(len(s) - 1, int(0.95 * len(s)))]


ECHO_SERVER = r"""
import asyncio, json, sys
async def main():
    responses = json.load(open(sys.argv[1]))
    reader = asyncio.StreamReader(limit=1 << 24)
    await asyncio.get_running_loop().connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    out = sys.stdout.buffer
    while True:
        length = 0
        while (line := await reader.readline()) not in (b"\r\n", b""):
            if line.lower().startswith(b"content-length"):
                length = int(line.split(b":")[1])
        if not line:
            return
        msg = json.loads(await reader.readexactly(length))
        if "id" in msg:
            result = responses[msg["params"]["i"]] if msg.get("method") == "echo" else None
            body = json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}).encode()
            out.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
            out.flush()
asyncio.run(main())
"""


async def start_echo(responses: list[dict[str, Any]], tmp: Path) -> RawClient:
    """The floor: a minimal Python stdio JSON-RPC server that answers request i with the search response the
    engine gave for query i (same bytes to encode, pipe and decode), doing no work."""
    data = tmp / "responses.json"
    data.write_text(json.dumps(responses), encoding="utf-8")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        ECHO_SERVER,
        str(data),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        limit=1 << 24,
    )
    return RawClient(proc)


async def run(args: argparse.Namespace) -> None:
    print(f"== LSP round trip vs in-process search{'  [--quick]' if args.quick else ''}")
    print(f"   python {sys.version.split()[0]}, {os.cpu_count()} cores, provider {args.provider}")
    root, source = build_project(args.provider, args.quick)
    queries = sample_queries(root, args.queries)
    options = {"provider": args.provider, "watch": False, "analytics": False}
    project = Project.open(root, init_options=options)
    clients: dict[str, Send] = {}
    closers: list[Callable[[], Awaitable[None]]] = []
    params = [{"query": q, "maxResults": 10} for q in queries]
    tmp = Path(tempfile.mkdtemp(prefix="saipling-bench-lsp-"))
    try:
        if args.client in ("raw", "both"):
            raw = await RawClient.start(root, options)
            closers.append(raw.close)
            clients["LSP, raw JSON-RPC client"] = raw.request
        if args.client in ("pygls", "both"):
            pygls_client = await start_server(root, options)
            closers.append(partial(stop_pygls, pygls_client))
            clients["LSP, pygls LanguageClient"] = pygls_send(pygls_client)
        responses = []
        for p in params:  # warm (query-embedding LRU, vector matrix, SQLite pages); same answers every way
            responses.append(project.search(p))
            want = [r["filePath"] for r in responses[-1]["results"]]
            for send in clients.values():
                got = await send("saipling/search", p)
                assert [r["filePath"] for r in got["results"]] == want, p
        echo = await start_echo(responses, tmp)
        closers.append(echo.close)
        floor = "floor: echo server, raw client"
        sends: dict[str, Send] = {**clients, floor: echo.request}
        requests = {name: params for name in clients} | {floor: [{"i": i} for i in range(len(params))]}
        methods = {name: "saipling/search" for name in clients} | {floor: "echo"}
        times: dict[str, dict[str, list[float]]] = {}
        for order in ("alternating passes", "interleaved"):
            local: list[float] = []
            remote: dict[str, list[float]] = {name: [] for name in sends}
            engine: dict[str, list[float]] = {name: [] for name in clients}  # the server's own elapsedMs
            for _ in range(args.rounds):
                if order == "alternating passes":  # each side runs its whole pass with warm caches
                    for p in params:
                        local.append(timed_local(project, p))
                    for name, send in sends.items():
                        for i, _p in enumerate(params):
                            await timed_remote(send, methods[name], requests[name][i], name, remote, engine)
                else:  # each query in-process then over every path, back to back: same cache conditions
                    for i, p in enumerate(params):
                        local.append(timed_local(project, p))
                        for name, send in sends.items():
                            await timed_remote(send, methods[name], requests[name][i], name, remote, engine)
            times[order] = {"in-process Project.search": local, **remote}
            times[order + " elapsed"] = engine
    finally:
        for close in reversed(closers):
            with contextlib.suppress(Exception):
                await close()
        project.close()
        shutil.rmtree(tmp, ignore_errors=True)
    print(
        f"   project: {source}; {len(queries)} queries x {args.rounds} rounds per order, maxResults 10,"
        f" responses ~{len(json.dumps(responses)) // max(1, len(responses)) / 1024:.1f} KiB"
    )
    print(f"   load average {load()} (other processes share the cores)")
    print(
        "| order | path | median ms | p95 ms | ratio of medians | median per-query ratio |"
        " overhead ms (round trip - server elapsedMs) |"
    )
    print("|---|---|---|---|---|---|---|")
    verdicts = []
    for order in ("alternating passes", "interleaved"):
        local = times[order]["in-process Project.search"]
        lm, _ = summary(local)
        for name, xs in times[order].items():
            m, p95 = summary(xs)
            per_query = statistics.median(x / y for x, y in zip(xs, local, strict=True))
            el = times[order + " elapsed"].get(name)
            overhead = f"{statistics.median(x - e for x, e in zip(xs, el, strict=True)) * 1000:.2f}" if el else ""
            print(
                f"| {order} | {name} | {m * 1000:.2f} | {p95 * 1000:.2f} | {m / lm:.2f}x | {per_query:.2f}x |"
                f" {overhead} |"
            )
            if name.startswith("LSP"):
                verdicts.append(f"{order}, {name}: {m / lm:.2f}x {'MET' if m / lm <= TARGET else 'MISSED'}")
    print(f"   target: round trip <= {TARGET}x the in-process median")
    for v in verdicts:
        print(f"   {v}")


async def stop_pygls(client: LanguageClient) -> None:
    with contextlib.suppress(Exception):
        await client.shutdown_async(None)
        client.exit(None)
    await client.stop()


async def timed_remote(send: Send, method: str, params: dict[str, Any], name: str, remote: dict, engine: dict) -> None:
    t0 = time.perf_counter()
    b = await send(method, params)
    remote[name].append(time.perf_counter() - t0)
    if name in engine:
        engine[name].append(b["elapsedMs"] / 1000)


def load() -> str:
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small project (under a minute)")
    parser.add_argument("--provider", default="none", choices=["none", "local"])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2, help="timed passes over the queries on each side")
    parser.add_argument(
        "--client",
        default="both",
        choices=["both", "raw", "pygls"],
        help="raw: a minimal stdlib JSON-RPC client (what an editor's native client costs); pygls: pygls'"
        " LanguageClient (adds its own Python-side cost to each round trip)",
    )
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()

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
import os
import random
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

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
    vocab = [
        f"{rng.choice('bcdfghklmnprstvw')}{rng.choice('aeiou')}{rng.choice('lmnrst')}{i}" for i in range(5000)
    ]
    weights = [1 / (i + 1) for i in range(len(vocab))]
    for i in range(n_files):
        paras = [
            " ".join(rng.choices(vocab, weights, k=rng.randint(40, 120))) + "."
            for _ in range(rng.randint(3, 12))
        ]
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
    rng = random.Random(42)
    queries: list[str] = []
    while len(queries) < n:
        words = [w.strip(".,;:!?\"'()[]*_#") for w in rng.choice(texts).split()]
        words = [w for w in words if len(w) > 2]
        if len(words) >= 4:
            k = rng.randint(2, 4)
            start = rng.randrange(len(words) - k)
            queries.append(" ".join(words[start : start + k]))
    return queries


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
    await client.start_io(
        sys.executable, "-m", "saipling", "serve", env={**env, "SAIPLING_LOG_LEVEL": "WARNING"}
    )
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


def timed_local(project: Project, p: dict[str, Any]) -> float:
    t0 = time.perf_counter()
    project.search(p)
    return time.perf_counter() - t0


async def measure_remote(
    client: LanguageClient, p: dict[str, Any], remote: list[float], engine: list[float]
) -> dict:
    t0 = time.perf_counter()
    b = await client.protocol.send_request_async("saipling/search", p)
    remote.append(time.perf_counter() - t0)
    engine.append(b["elapsedMs"] / 1000)
    return b


async def measure_pair(
    project: Project, client: LanguageClient, p: dict[str, Any], local, remote, engine
) -> None:
    t0 = time.perf_counter()
    a = project.search(p)
    local.append(time.perf_counter() - t0)
    b = await measure_remote(client, p, remote, engine)
    assert [r["filePath"] for r in a["results"]] == [r["filePath"] for r in b["results"]], p


def summary(xs: list[float]) -> tuple[float, float]:
    s = sorted(xs)
    return statistics.median(s), s[min(len(s) - 1, int(0.95 * len(s)))]


async def run(args: argparse.Namespace) -> None:
    print(f"== LSP round trip vs in-process search{'  [--quick]' if args.quick else ''}")
    print(f"   python {sys.version.split()[0]}, {os.cpu_count()} cores, provider {args.provider}")
    root, source = build_project(args.provider, args.quick)
    queries = sample_queries(root, args.queries)
    options = {"provider": args.provider, "watch": False, "analytics": False}
    project = Project.open(root, init_options=options)
    client = await start_server(root, options)
    try:
        params = [{"query": q, "maxResults": 10} for q in queries]
        for p in params:  # warm (query-embedding LRU, vector matrix, SQLite pages); same answers both ways
            await measure_pair(project, client, p, [], [], [])
        local: list[float] = []
        remote: list[float] = []
        engine: list[float] = []  # the server's own elapsedMs: remote - engine = protocol overhead
        for _ in range(args.rounds):
            if args.interleave:
                for p in params:
                    await measure_pair(project, client, p, local, remote, engine)
            else:  # alternate whole passes: the client is idle between requests, as an editor is
                for p in params:
                    local.append(timed_local(project, p))
                for p in params:
                    await measure_remote(client, p, remote, engine)
        await client.shutdown_async(None)
        client.exit(None)
    finally:
        await client.stop()
        project.close()
    (lm, lp), (rm, rp) = summary(local), summary(remote)
    overhead = statistics.median(r - e for r, e in zip(remote, engine, strict=True))
    ratio = rm / lm
    mode = "interleaved per query" if args.interleave else "alternating passes"
    print(f"   project: {source}; {len(queries)} queries x {args.rounds} rounds ({mode}), maxResults 10")
    print(f"   load average {load()} (other processes share the cores)")
    print("| path | median ms | p95 ms |")
    print("|---|---|---|")
    print(f"| in-process Project.search | {lm * 1000:.2f} | {lp * 1000:.2f} |")
    print(f"| LSP saipling/search round trip | {rm * 1000:.2f} | {rp * 1000:.2f} |")
    verdict = "MET" if ratio <= TARGET else "MISSED"
    print(
        f"   ratio of medians {ratio:.2f}x (difference {(rm - lm) * 1000:.2f} ms); target <= {TARGET}x: {verdict}"
    )
    print(
        f"   median protocol overhead per request (round trip - server's elapsedMs): {overhead * 1000:.2f} ms"
    )


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
        "--interleave", action="store_true",
        help="time each query in-process then over LSP back to back (on a loaded machine the client's CPU "
        "burst before each request delays its own wake-up; see the README figures)",
    )  # fmt: skip
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()

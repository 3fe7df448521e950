"""Benchmark: one `search` tool call through MCP (`saipling mcp`) against the same search in-process.

Projects: a small fixture (the tests' retrieval project, 12 files) and, when ../shared is present, a copy of the
fiction corpus (1,129 chapters; 60 with --quick), keyword-only (provider none: the search itself is cheapest, so
the cost of the protocol shows most). Each is indexed once (the fiction copy is cached under /tmp/saipling-bench,
SAIPLING_BENCH_CACHE).

Queries are 2-4 consecutive words sampled (seeded) from the indexed text. Each query is run once on each side to
warm caches (checking both return the same files), then timed interleaved, query by query, in three ways:

- `engine`: `Project.search(params)` in this process (params as the MCP face builds them, source `agent`);
- `face`: `McpFace.call("search", args)` in this process: argument check against the tool's JSON schema, the
  lazy sync (a stat of every file against the index) and the search;
- `mcp`: `tools/call search` sent by the official SDK's `ClientSession` to a real `saipling mcp` subprocess over
  stdio, result decoded (and checked against the tool's output schema, as the SDK's client does).

Prints medians, p95 and the ratios of medians mcp/engine (what an agent pays over calling the engine directly)
and mcp/face (the protocol alone), plus the lazy-sync check on its own.

    python benchmarks/bench_mcp.py
    python benchmarks/bench_mcp.py --quick
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

from _benchutil import (
    CACHE_ROOT,
    FICTION,
    banner,
    copy_corpus,
    fmt_ms,
    median,
    parser,
    percentile,
    phrase_queries,
    table,
)

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))


def small_fixture(tmp: Path) -> Path:
    from fixtures import retrieval_project
    from saipling.project import Project

    root = retrieval_project(tmp, "mcp-small")
    project = Project.open(root, overrides={"provider": "none"})
    try:
        project.index()
    finally:
        project.close()
    return root


def fiction_copy(src: Path, quick: bool) -> Path:
    """A keyword-only indexed copy of the fiction corpus (60 chapters with --quick), cached under CACHE_ROOT."""
    from saipling.project import Project

    root = CACHE_ROOT / f"mcp-fiction-none{'-q60' if quick else ''}"
    marker = root / ".bench-complete"
    if not marker.exists():
        if root.exists():
            import shutil

            shutil.rmtree(root)
        n = copy_corpus(src, root, 60 if quick else None)
        print(f"   indexing {n} files into {root} (keyword-only; cached for later runs)")
        project = Project.open(root, overrides={"provider": "none"}, env={})
        try:
            summary = project.index()
        finally:
            project.close()
        marker.write_text(f"{summary.files} files, {summary.chunks} chunks\n", encoding="utf-8")
    return root


def sample_queries(project: Any, n: int) -> list[str]:
    texts = [r[0] for r in project.store.conn.execute("SELECT text FROM chunks ORDER BY id")]
    return phrase_queries(texts, n)


def server_env() -> dict[str, str]:
    drop = ("SAIPLING_", "VOYAGE_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)} | {"SAIPLING_LOG_LEVEL": "WARNING"}


async def measure(root: Path, label: str, n_queries: int) -> list[Any]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    from saipling.mcp.server import McpFace
    from saipling.project import Project

    project = Project.open(root, overrides={"provider": "none"}, env={})
    face = McpFace(project)  # (not started: the index is already up to date)
    queries = sample_queries(project, n_queries)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "saipling", "mcp", str(root), "--provider", "none"],
        env=server_env(),
    )
    times: dict[str, list[float]] = {"engine": [], "face": [], "mcp": []}
    sync_check: list[float] = []
    try:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            while (await session.call_tool("status", {})).structured_content["isIndexing"]:
                await asyncio.sleep(0.1)

            def engine(q: str) -> dict[str, Any]:
                return project.search({"query": q, "maxResults": 5, "source": "agent", "respectContextSettings": True})

            def via_face(q: str) -> dict[str, Any]:
                return face.call("search", {"query": q, "maxResults": 5})

            async def via_mcp(q: str) -> dict[str, Any]:
                result = await session.call_tool("search", {"query": q, "maxResults": 5})
                assert not result.is_error, result.content[0].text
                return result.structured_content

            mismatches = 0
            for q in queries:  # warm-up, and the three give the same files
                files = [r["filePath"] for r in engine(q)["results"]]
                mismatches += files != [r["filePath"] for r in via_face(q)["results"]]
                mismatches += files != [r["filePath"] for r in (await via_mcp(q))["results"]]
            order = ["engine", "face", "mcp"]
            for i, q in enumerate(queries):
                for way in order[i % 3 :] + order[: i % 3]:  # rotate who goes first
                    t0 = time.perf_counter()
                    if way == "mcp":
                        await via_mcp(q)
                    else:
                        (engine if way == "engine" else via_face)(q)
                    times[way].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                face.live.lazy.changed_paths()
                sync_check.append(time.perf_counter() - t0)
    finally:
        project.close()
    files = len(list(root.rglob("*.md")))
    e, f, m = (median(times[k]) for k in ("engine", "face", "mcp"))
    return [
        label,
        files,
        len(queries),
        f"{fmt_ms(e)} / {fmt_ms(percentile(times['engine'], 95))}",
        f"{fmt_ms(f)} / {fmt_ms(percentile(times['face'], 95))}",
        f"{fmt_ms(m)} / {fmt_ms(percentile(times['mcp'], 95))}",
        f"{m / e:.2f}x",
        f"{m / f:.2f}x",
        fmt_ms(median(sync_check)),
        mismatches,
    ]


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--fiction", type=Path, default=FICTION, help=f"the fiction corpus (default {FICTION})")
    args = p.parse_args()
    banner("bench_mcp: a search tool call through `saipling mcp` vs in-process", args.quick)
    import tempfile

    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-mcp-") as tmp:
        rows.append(asyncio.run(measure(small_fixture(Path(tmp)), "small fixture", 60 if args.quick else 200)))
    if args.fiction.is_dir():
        root = fiction_copy(args.fiction, args.quick)
        label = "fiction (60 files)" if args.quick else "fiction"
        rows.append(asyncio.run(measure(root, label, 60 if args.quick else 200)))
    else:
        print(f"SKIPPED the fiction corpus: {args.fiction} is absent")
    print(
        table(
            [
                "project",
                "files",
                "queries",
                "engine p50 / p95 ms",
                "face p50 / p95 ms",
                "mcp p50 / p95 ms",
                "mcp / engine",
                "mcp / face",
                "sync check p50 ms",
                "result mismatches",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()

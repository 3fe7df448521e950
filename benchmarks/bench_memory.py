"""Benchmark 7: process memory (VmRSS now, VmHWM = peak) of the engine in fresh processes.

Each scenario runs in its own subprocess (so none inherits another's heap), reading /proc/self/status:

  python        bare interpreter + numpy (the floor)
  idle          import saipling, Project.open on the indexed fiction corpus (keyword-only index)
  idle+search   the same plus one hybrid search (loads what a first query loads)
  local+search  a restarted server: Project.open on the fiction index built with the local model (the cache
                bench_index.py/bench_search.py keep), one hybrid search (loads the model and the vector matrix)
  index none    index a fresh copy of the fiction corpus with provider none, then one search
  local loaded  Project.open with provider local and one query embedded (model loaded, nothing indexed)
  index local   index a fresh copy of the fiction corpus with provider local, then one search
                (target, issue 3: <= 400 MB RSS after indexing the fiction corpus)
  server idle   the real `saipling serve` process (stdio, driven by a minimal JSON-RPC client) on the indexed
                keyword-only corpus: its initial index is a no-op; RSS after it and after one search
  server none / server local
                the real server on a fresh copy of the corpus: RSS after its initial (full) index, and after
                one search

The local scenarios are skipped with a message while the local provider is not installed. The full `index local`
scenario indexes 1,129 chapters on the local model: several minutes on 2 cores.

    python benchmarks/bench_memory.py            # full corpus
    python benchmarks/bench_memory.py --quick    # 40 chapters keyword-only, 5 with the local model
    python benchmarks/bench_memory.py --files 300   # the first 300 chapters
    python benchmarks/bench_memory.py --only "index local" --files 150 --env MALLOC_ARENA_MAX=2 --sqlite mmap_size=0
                                                    # an experiment: what would lower the RSS
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchutil as bu  # noqa: E402

TARGET_MB = 400
QUICK_FILES = {"index none": 40, "index local": 5}  # --quick must stay under a minute with the local model


# -- child side --------------------------------------------------------------------------------------------------
def child(scenario: str, root: str | None, sqlite: list[str]) -> None:
    import numpy  # noqa: F401 - every scenario pays for numpy; the floor shows how much

    out: dict = {"scenario": scenario}
    t0 = time.perf_counter()
    if sqlite:  # experiment: extra PRAGMAs after the store's own (e.g. mmap_size=0)
        from saipling.storage.sqlite.store import SqliteStore as Store

        configure = Store._configure

        def _configure(self) -> None:
            configure(self)
            for pragma in sqlite:
                self.conn.execute(f"PRAGMA {pragma}")

        Store._configure = _configure
    if scenario != "python":
        from saipling.project import Project

        provider = "local" if "local" in scenario else "none"
        project = Project.open(root, overrides={"provider": provider})
        out["after_open"] = bu.proc_status_mb()
        if scenario == "local loaded":
            project.provider.embed_query("warm up the model")
        if scenario.startswith("index"):
            s = project.index()
            out.update(files=s.files, chunks=s.chunks, embedded=s.embedded, index_s=round(s.seconds, 1))
            out["after_index"] = bu.proc_status_mb()
        if scenario in ("idle+search", "local+search") or scenario.startswith("index"):
            project.search({"query": "a ship caught in a storm at sea", "maxResults": 5})
        out["provider"] = project.provider.name
    out["seconds"] = round(time.perf_counter() - t0, 1)
    out.update(bu.proc_status_mb())
    print(json.dumps(out))


# -- the real server ----------------------------------------------------------------------------------------------
def run_server(scenario: str, root: Path, provider: str) -> dict:
    """`saipling serve` on `root`: RSS after initialize (before indexing), after the initial index of the
    whole folder, and after one search."""
    import asyncio

    from bench_lsp import RawClient

    async def go() -> dict:
        t0 = time.perf_counter()
        client = await RawClient.start(root, {"provider": provider, "watch": False}, index_timeout=3600)
        out: dict = {"scenario": scenario, "provider": provider}
        try:
            pid = client.proc.pid
            status = await client.request("saipling/status", {})
            out.update(
                files=status["totalFiles"],
                chunks=status["totalChunks"],
                embedded=status.get("embeddedChunks", 0),
                index_s=round(time.perf_counter() - t0, 1),
            )
            out["after_index"] = bu.proc_status_mb(pid)
            await client.request("saipling/search", {"query": "a ship caught in a storm at sea", "maxResults": 5})
            out.update(bu.proc_status_mb(pid))
        finally:
            await client.close()
        out["seconds"] = round(time.perf_counter() - t0, 1)
        return out

    try:
        return asyncio.run(go())
    except Exception as exc:  # noqa: BLE001 - reported in the table
        return {"scenario": scenario, "error": f"{type(exc).__name__}: {exc}"}


# -- parent side -------------------------------------------------------------------------------------------------
def run_child(scenario: str, root: Path | None, env: dict[str, str], sqlite: list[str]) -> dict:
    spec = json.dumps({"scenario": scenario, "root": str(root) if root else None, "sqlite": sqlite})
    proc = subprocess.run(
        [sys.executable, __file__, "--child", spec],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **env},
    )
    if proc.returncode != 0:
        return {"scenario": scenario, "error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        spec = json.loads(sys.argv[2])
        child(spec["scenario"], spec["root"], spec["sqlite"])
        return
    ap = bu.parser(__doc__.split("\n")[0])
    ap.add_argument("--no-local", action="store_true", help="skip the local-model scenarios")
    ap.add_argument("--only", action="append", default=[], metavar="SCENARIO", help="run only these scenarios")
    ap.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="K=V",
        help="experiment: environment for the children (e.g. MALLOC_ARENA_MAX=2)",
    )
    ap.add_argument(
        "--sqlite",
        action="append",
        default=[],
        metavar="PRAGMA",
        help="experiment: extra PRAGMA after the store's own (e.g. mmap_size=0)",
    )
    ap.add_argument("--files", type=int, default=None, help="index only the first N chapters (default: all)")
    args = ap.parse_args()
    limits = {k: args.files or (v if args.quick else None) for k, v in QUICK_FILES.items()}
    bu.banner("bench_memory: RSS of fresh processes", args.quick)
    have_local = bu.local_available() and not args.no_local
    env = dict(kv.split("=", 1) for kv in args.env)
    if env or args.sqlite:
        print(f"   EXPERIMENT: children run with env {env} and extra PRAGMAs {args.sqlite}")
    wanted = lambda name: not args.only or name in args.only or name == "python"  # noqa: E731
    results = [run_child("python", None, env, args.sqlite)]
    idle_root = bu.fiction_index("none", args.quick)
    if idle_root is None:
        return
    for scenario in ("idle", "idle+search"):
        if wanted(scenario):
            results.append(run_child(scenario, idle_root, env, args.sqlite))
    if wanted("server idle"):
        results.append(run_server("server idle", idle_root, "none"))
    if wanted("local+search"):
        local_root = bu.CACHE_ROOT / "fiction-local"
        if not have_local:
            results.append({"scenario": "local+search", "error": "skipped: local provider not installed or --no-local"})
        elif not (local_root / ".bench-complete").exists() or args.quick:
            results.append({"scenario": "local+search", "error": f"skipped: {local_root} not built (full runs only)"})
        else:
            results.append(run_child("local+search", local_root, env, args.sqlite))
    tmp = Path(tempfile.mkdtemp(prefix="saipling-bench-mem-"))
    try:
        for scenario in ("index none", "local loaded", "index local", "server none", "server local"):
            if not wanted(scenario):
                continue
            if "local" in scenario and not have_local:
                results.append(
                    {
                        "scenario": scenario,
                        "error": "skipped: "
                        + ("--no-local" if args.no_local else "the local provider is not installed"),
                    }
                )
                continue
            root = tmp / scenario.replace(" ", "-")
            root.mkdir()
            if scenario.startswith(("index", "server")):
                provider = "local" if "local" in scenario else "none"
                bu.copy_corpus(bu.FICTION, root, limits["index " + provider])
                where = "the real server" if scenario.startswith("server") else "a subprocess"
                print(
                    f"   {scenario}: indexing {sum(1 for _ in root.rglob('*.md'))} chapters in {where} ...", flush=True
                )
            if scenario.startswith("server"):
                results.append(run_server(scenario, root, provider))
            else:
                results.append(run_child(scenario, root, env, args.sqlite))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print()
    base = results[0].get("VmRSS", 0.0)
    rows = []
    for r in results:
        if "error" in r:
            rows.append((r["scenario"], "-", "-", "-", "-", "-", "-", r["error"]))
            continue
        detail = f"provider {r.get('provider', '-')}"
        if "chunks" in r:
            a = r["after_index"]
            detail += (
                f"; {r['files']} files, {r['chunks']} chunks, {r['embedded']} embedded in {r['index_s']} s;"
                f" right after indexing RSS {a.get('VmRSS', 0):.0f} MB = anon {a.get('RssAnon', 0):.0f}"
                f" + file {a.get('RssFile', 0):.0f}"
            )
        rows.append(
            (
                r["scenario"],
                f"{r['VmRSS']:.0f}",
                f"{r['VmHWM']:.0f}",
                f"{r.get('RssAnon', 0):.0f}",
                f"{r.get('RssFile', 0):.0f}",
                f"{r['VmRSS'] - base:+.0f}",
                r["seconds"],
                detail,
            )
        )
    print(
        bu.table(
            [
                "scenario",
                "VmRSS MB",
                "VmHWM (peak) MB",
                "RssAnon MB",
                "RssFile MB",
                "RSS vs python+numpy",
                "seconds",
                "detail",
            ],
            rows,
        )
    )
    print("RssAnon = heap (Python, numpy, ONNX Runtime arenas); RssFile = mapped files (libraries, the index via mmap)")
    measured = [r for r in results if r["scenario"] in ("index local", "server local") and "error" not in r]
    for r in measured:
        ok = r["VmRSS"] <= TARGET_MB
        print(
            f"target: RSS after indexing the fiction corpus with the local model <= {TARGET_MB} MB ({r['scenario']}):"
            f" {r['VmRSS']:.0f} MB (peak {r['VmHWM']:.0f} MB) -> {bu.verdict(ok)}"
        )
    if measured and limits["index local"]:
        print(f"(only {limits['index local']} chapters were indexed: the target applies to the full corpus of 1,129)")
    elif not measured:
        print(f"target (<= {TARGET_MB} MB with the local model after indexing): not measured (local scenarios skipped)")


if __name__ == "__main__":
    main()

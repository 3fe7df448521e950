"""Keyword search at scale (issue 34): warm lexical search on an existing big index, this checkout vs another
tree, and how close the bounded keyword search (storage/sqlite/fts_bound.py) comes to FTS5's exact ranking.

    nice -n 10 python benchmarks/bench_lexical_scale.py --root COPY [--baseline OTHER/server] [--rounds 2]
    nice -n 10 python benchmarks/bench_lexical_scale.py --root COPY --quality

`--root` is an indexed project (e.g. bench_scale.py's `scale-1.07M` text-only build, copied: opening it with other
code may migrate it, and a search re-reads files changed on disk). Each side runs in its own process (`--baseline`:
PYTHONPATH=OTHER), the sides alternating round by round: open, one search to warm up, then bench_scale's queries
in lexical mode twice; wall and CPU (process time) p50/p95 of the second pass. `--quality`: in this process, the
store's keyword_search (limit 100) and file_keyword_search (limit 100) bounded and with the bound off (FTS5's
bm25 over every matching row): CPU per call, rows scored, and per query the share of the bounded top 10 / top 100
scoring at least the exact list's 10th / 100th score ("score recall": ties in bm25 make the ids of equal rows
arbitrary), and the largest difference between the two scores of one row.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchutil as bu  # noqa: E402
from bench_scale import QUERIES  # noqa: E402


def child(root: str) -> None:
    from saipling.project import Project

    t = time.perf_counter()
    project = Project.open(root)
    out: dict = {"open_s": time.perf_counter() - t}
    t = time.perf_counter()
    project.search({"query": "the first question after opening", "mode": "lexical", "maxResults": 10})
    out["first_s"] = time.perf_counter() - t
    wall: list[float] = []
    cpu: list[float] = []
    for n in range(2):
        for q in QUERIES:
            t, c = time.perf_counter(), time.process_time()
            project.search({"query": q, "mode": "lexical", "maxResults": 10})
            if n:
                wall.append((time.perf_counter() - t) * 1000)
                cpu.append((time.process_time() - c) * 1000)
    out.update(wall_p50=bu.median(wall), wall_p95=bu.percentile(wall, 95))
    out.update(cpu_p50=bu.median(cpu), cpu_p95=bu.percentile(cpu, 95))
    project.close()
    print(json.dumps(out))


def quality(root: str) -> None:
    from saipling.storage.base import KeywordQuery
    from saipling.storage.sqlite import fts_bound
    from saipling.storage.sqlite.store import SqliteStore

    store = SqliteStore.open(Path(root) / ".saipling" / "index.db", readonly=True)
    keywords = store._keywords

    def run() -> dict:
        out = {}
        for q in QUERIES:
            query = KeywordQuery.parse(q)
            c = time.process_time()
            chunks = store.keyword_search(query, 100)
            cpu = time.process_time() - c
            scored = keywords.last_scored if keywords.last_exact is not None else None
            c = time.process_time()
            files = store.file_keyword_search(query, 100)
            out[q] = (chunks, files, cpu * 1000, (time.process_time() - c) * 1000, scored)
        return out

    def recall(new: list[float], old: list[float], k: int) -> float:
        if not old:
            return 1.0
        kth = old[min(k, len(old)) - 1]
        return sum(1 for s in new[:k] if s >= kth - 1e-9) / min(k, len(old))

    run()  # (document frequencies read once)
    new = run()
    saved, fts_bound.BOUND_MIN_CHUNKS = fts_bound.BOUND_MIN_CHUNKS, 10**12
    old = run()
    fts_bound.BOUND_MIN_CHUNKS = saved
    cells: dict[str, list[float]] = {"r10": [], "r100": [], "f10": []}
    print(f"{'query':40} {'chunks ms new/exact':>20} {'files ms':>16} {'scored':>7} top10 top100 files10 maxdiff")
    for q in QUERIES:
        n, o = new[q], old[q]
        r10 = recall([s for _, s in n[0]], [s for _, s in o[0]], 10)
        r100 = recall([s for _, s in n[0]], [s for _, s in o[0]], 100)
        f10 = recall([s for _, s, _ in n[1]], [s for _, s, _ in o[1]], 10)
        exact = dict(o[0])
        diff = max((abs(s - exact[c]) for c, s in n[0] if c in exact), default=0.0)
        for key, v in (("r10", r10), ("r100", r100), ("f10", f10)):
            cells[key].append(v)
        print(
            f"{q[:40]:40} {n[2]:9.1f} / {o[2]:8.1f} {n[3]:7.1f} / {o[3]:6.1f} {n[4] if n[4] is not None else '-':>7}"
            f" {r10:5.2f} {r100:6.2f} {f10:7.2f} {diff:.0e}"
        )
    for label, i in (("keyword_search", 2), ("file_keyword_search", 3)):
        a = statistics.median(new[q][i] for q in QUERIES)
        b = statistics.median(old[q][i] for q in QUERIES)
        print(f"{label} CPU p50: bounded {a:.1f} ms, exact {b:.1f} ms ({a / b:.2f}x)")
    print(
        "mean score recall: top 10 {r10:.3f}, top 100 {r100:.3f}, files top 10 {f10:.3f}".format(
            **{k: statistics.mean(v) for k, v in cells.items()}
        )
    )
    store.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", required=True)
    ap.add_argument("--baseline", help="another tree's server/ folder, measured alternately")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--quality", action="store_true")
    args = ap.parse_args()
    if args.quality:
        quality(args.root)
        return
    sides = {"this": None, **({"baseline": args.baseline} if args.baseline else {})}
    got: dict[str, list[dict]] = {k: [] for k in sides}
    for r in range(args.rounds):
        for name in sides if r % 2 == 0 else list(sides)[::-1]:
            env = dict(os.environ)
            if sides[name]:
                env["PYTHONPATH"] = sides[name]
                env["SAIPLING_BENCH_SERVER"] = sides[name]
            res = subprocess.run(
                [sys.executable, __file__, "--child", args.root], env=env, capture_output=True, text=True, check=True
            )
            got[name].append(json.loads(res.stdout.strip().splitlines()[-1]))
            print(name, r, got[name][-1], flush=True)
    for name, runs in got.items():
        med = {k: statistics.median(run[k] for run in runs) for k in runs[0]}
        print(name, "medians:", {k: round(v, 3) for k, v in med.items()})
    if args.baseline:
        a, b = got["this"], got["baseline"]
        for k in ("wall_p50", "wall_p95", "cpu_p50", "cpu_p95"):
            x = statistics.median(r[k] for r in a)
            y = statistics.median(r[k] for r in b)
            print(f"{k}: this {x:.1f} ms, baseline {y:.1f} ms, ratio {x / y:.2f}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(sys.argv[2])
    else:
        main()

"""Search latency, old code against new, side by side on one indexed fiction corpus: p50 and p95 per side.

Each side is a checkout of the repository (`--old`, e.g. `git archive main | tar -x -C /tmp/old`; `--new`,
default this checkout) searching its own copy of the indexed project (`--old-root`, `--new-root`: indexes of
different schema versions cannot be shared; an older saipling moves a newer index aside). The sides run in
alternating subprocesses (old, new, old, new, ...) so that machine load hits both alike; every subprocess
warms up (query embeddings cached, vector matrix loaded) and then times ROUNDS x the bench_search.py fiction
queries through Project.search (hybrid, maxResults 5). Reported: the median over runs of each run's p50/p95,
and new/old ratios.

    python benchmarks/bench_search_ab.py --old /tmp/old --old-root /tmp/fiction-old --new-root /tmp/fiction-new
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchutil as bu  # noqa: E402
from bench_search import FICTION_QUERIES  # noqa: E402

ROUNDS = 5

CHILD = r"""
import json, sys, time
from saipling.project import Project
root, provider, rounds, queries = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
p = Project.open(root, overrides={"provider": provider})
try:
    for q in queries:  # warm-up: query embeddings, vector matrix, page cache
        p.search({"query": q, "maxResults": 5, "source": "eval"})
    times = []
    for _ in range(rounds):
        for q in queries:
            t0 = time.perf_counter()
            p.search({"query": q, "maxResults": 5, "source": "eval"})
            times.append(time.perf_counter() - t0)
finally:
    p.close()
times.sort()
print(json.dumps({"p50": times[len(times) // 2], "p95": times[min(len(times) - 1, int(0.95 * len(times)))]}))
"""


def run_side(tree: Path, root: Path, provider: str, rounds: int) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(tree / "server"))
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(root), provider, str(rounds), json.dumps(FICTION_QUERIES)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = bu.parser(__doc__.split("\n")[0])
    p.add_argument("--old", type=Path, required=True, help="checkout of the old code")
    p.add_argument("--new", type=Path, default=bu.REPO, help="checkout of the new code (default: this one)")
    p.add_argument("--old-root", type=Path, required=True, help="indexed project the old code searches")
    p.add_argument("--new-root", type=Path, required=True, help="the same project indexed by the new code")
    p.add_argument("--provider", default="local")
    p.add_argument("--runs", type=int, default=3, help="subprocess runs per side (alternating)")
    args = p.parse_args()
    bu.banner("bench_search_ab: hybrid search latency, old vs new code, alternating runs", args.quick)
    rounds = 2 if args.quick else ROUNDS
    runs = 1 if args.quick else args.runs
    res: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    for i in range(runs):
        for side, tree, root in (("old", args.old, args.old_root), ("new", args.new, args.new_root)):
            r = run_side(tree, root, args.provider, rounds)
            res[side].append(r)
            print(
                f"   run {i + 1} {side}: p50 {bu.fmt_ms(r['p50'])} ms, p95 {bu.fmt_ms(r['p95'])} ms",
                flush=True,
            )
    rows = []
    med = {s: {k: bu.median([r[k] for r in v]) for k in ("p50", "p95")} for s, v in res.items()}
    for side in ("old", "new"):
        rows.append((side, len(res[side]), bu.fmt_ms(med[side]["p50"]), bu.fmt_ms(med[side]["p95"])))
    rows.append(
        (
            "new / old",
            "",
            f"{med['new']['p50'] / med['old']['p50']:.2f}",
            f"{med['new']['p95'] / med['old']['p95']:.2f}",
        )
    )
    print(f"{len(FICTION_QUERIES)} queries x {rounds} rounds per run; medians over runs")
    print(bu.table(["code", "runs", "p50 ms", "p95 ms"], rows))


if __name__ == "__main__":
    main()

"""Rerank stage (issue 37): recall@10 on the fiction dev set with a fake reranker that knows the answers, and the
latency the stage adds per N (top N candidates sent), side by side with the same searches without it.

No reranker weights can be installed here, so the reranker is FAKE: tests/rerankserver.py's local HTTP server
(Cohere-style /v1/rerank) with an oracle scorer that gives 1 to a candidate whose text lies in the query's evidence
file and 0 to the others. With it, reranked recall@10 must reach the reranked figure: the share of queries whose
evidence file is among the top N fused candidates (what any reranker of N candidates could reach at best).

The latency is the search's wall clock with the stage against the same search without it (median over the dev
set's queries, after one warm-up pass): the HTTP round trip to a local server, JSON both ways, the documents' text.
The fake runs on a thread of this process (it shares the GIL with the search): a remote reranker's own model time
comes on top.

    python benchmarks/bench_rerank.py                    # keyword-only index of the fiction corpus (cached)
    python benchmarks/bench_rerank.py --provider local   # hybrid with the local model (a cached index helps)
    python benchmarks/bench_rerank.py --json PATH        # also write the figures
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import _benchutil as bu  # noqa: E402
from bench_devset import K, load_devset  # noqa: E402

TOP_NS = (10, 20, 50)
DEPTH = 50  # results fetched per query (files ranked by their best chunk, as bench_devset)


def file_order(response: dict[str, Any]) -> list[str]:
    files: list[str] = []
    for r in response["results"]:
        if r["filePath"] not in files:
            files.append(r["filePath"])
    return files


def main() -> None:
    p = bu.parser(__doc__.split("\n")[0])
    p.add_argument("--provider", default="none", help="none (default: keyword-only) or local")
    p.add_argument("--json", default=None, help="also write the figures to this file")
    args = p.parse_args()
    provider = bu.provider_choice(args.provider)
    bu.banner(f"Rerank stage on the fiction dev set, provider {provider}, FAKE oracle reranker", args.quick)
    if not bu.need_shared(bu.FICTION, "fiction corpus"):
        return
    from rerankserver import FakeReranker
    from saipling.project import Project
    from saipling.search import search

    rows = load_devset()
    evidence = {q.query: (bu.FICTION / q.file).read_text(encoding="utf-8") for q in rows}

    def oracle(query: str, document: str) -> float:
        tail = document.strip()[-120:]
        return 1.0 if tail and tail in evidence.get(query, "") else 0.0

    root = bu.fiction_index(provider, quick=False)
    if root is None:
        return
    fake = FakeReranker("cohere", scorer=oracle).start()
    mode = "lexical" if provider == "none" else "hybrid"
    figures: dict[str, Any] = {"provider": provider, "mode": mode, "queries": len(rows), "topN": {}}
    try:
        plain = Project.open(root, overrides={"provider": provider})
        try:
            fused = {q.id: search(plain, {"query": q.query, "mode": mode, "maxResults": DEPTH}) for q in rows}
            base_times = _times(plain, rows, mode, search)
        finally:
            plain.close()
        fused_recall = sum(q.file in file_order(fused[q.id])[:K] for q in rows) / len(rows)
        table_rows = []
        for n in TOP_NS:
            rerank = {"provider": "cohere", "baseUrl": fake.url, "topN": n, "budgetSeconds": 10.0}
            project = Project.open(root, overrides={"provider": provider, "rerank": rerank})
            try:
                got = {
                    q.id: search(project, {"query": q.query, "mode": mode, "maxResults": DEPTH}) for q in rows
                }
                times = _times(project, rows, mode, search)
            finally:
                project.close()
            degraded = [g["degraded"] for g in got.values() if g.get("degraded")]
            if degraded:
                raise SystemExit(f"top {n}: the stage failed: {degraded[0]}")
            reranked = sum(q.file in file_order(got[q.id])[:K] for q in rows) / len(rows)
            ceiling = sum(
                any(r["filePath"] == q.file for r in fused[q.id]["results"][:n]) for q in rows
            ) / len(rows)
            base, with_stage = bu.median(base_times), bu.median(times)
            added = [t - b for t, b in zip(times, base_times, strict=True)]
            figures["topN"][n] = {
                "fusedRecall@10": fused_recall, "rerankedRecall@10": reranked, "reachable": ceiling,
                "medianMsFused": base * 1000, "medianMsReranked": with_stage * 1000,
                "medianAddedMs": bu.median(added) * 1000, "p90AddedMs": bu.percentile(added, 90) * 1000,
            }  # fmt: skip
            table_rows.append((n, f"{fused_recall:.3f}", f"{reranked:.3f}", f"{ceiling:.3f}",
                               bu.verdict(reranked >= ceiling), bu.fmt_ms(base), bu.fmt_ms(with_stage),
                               bu.fmt_ms(bu.median(added)), bu.fmt_ms(bu.percentile(added, 90)),
                               f"{with_stage / base:.2f}x"))  # fmt: skip
    finally:
        fake.stop()
    print()
    print(bu.table(["top N", "fused recall@10", "reranked recall@10", "reachable (file in top N)", "reached",
                    "median fused", "median reranked", "median added", "p90 added", "ratio"], table_rows))  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")


def _times(project: Any, rows: list[Any], mode: str, search: Any) -> list[float]:
    """Per query, the wall clock of a search (maxResults 10), after a warm-up pass."""
    for q in rows[:5]:
        search(project, {"query": q.query, "mode": mode, "maxResults": K})
    out = []
    for q in rows:
        t0 = time.perf_counter()
        search(project, {"query": q.query, "mode": mode, "maxResults": K})
        out.append(time.perf_counter() - t0)
    return out


if __name__ == "__main__":
    main()

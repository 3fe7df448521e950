"""Rerank stage (issue 37): recall@10 on the fiction dev set with a fake reranker that knows the answers, and the
latency the stage adds per N (top N candidates sent), side by side with the same searches without it.

No reranker weights can be installed here, so the reranker is FAKE: tests/rerankserver.py's local HTTP server
(Cohere-style /v1/rerank) with an oracle scorer that gives 1 to a candidate that is one of the query's evidence
file's chunks (as the stage sends them: retrieval.rerank.document_text) and 0 to the others. With it, reranked recall@10
must reach the reranked figure, what any reranker of N candidates could reach at best: the share of queries whose
evidence file is among the top N fused candidates, or already among the first 10 files (reordering the top N
moves no file below them out of the first 10).

The latency is the search's wall clock with the stage against the same search without it (per query the median
of ROUNDS runs, the two sides interleaved, A B then B A; after a warm-up pass): the HTTP round trip to a local
server, JSON both ways, the documents' text. The fake runs in a child process (its scoring does not share this
one's GIL); a real reranker's model time comes on top.

    python benchmarks/bench_rerank.py                    # keyword-only index of the fiction corpus (cached)
    python benchmarks/bench_rerank.py --provider local   # hybrid with the local model (a cached index helps)
    python benchmarks/bench_rerank.py --json PATH        # also write the figures
"""

from __future__ import annotations

import json
import multiprocessing
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import _benchutil as bu  # noqa: E402
from bench_devset import K, load_devset  # noqa: E402

TOP_NS = (10, 20, 50)
ROUNDS = 3  # timed runs per query and side
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
    from saipling.project import Project
    from saipling.retrieval.rerank import document_text
    from saipling.retrieval.search import search

    rows = load_devset()
    root = bu.fiction_index(provider, quick=False)
    if root is None:
        return
    mode = "lexical" if provider == "none" else "hybrid"
    figures: dict[str, Any] = {"provider": provider, "mode": mode, "queries": len(rows), "topN": {}}
    plain = Project.open(root, overrides={"provider": provider})
    try:
        evidence = {q.query: {document_text(row) for row in plain.store.chunks_for_path(q.file)} for q in rows}
        fused = {q.id: search(plain, {"query": q.query, "mode": mode, "maxResults": DEPTH}) for q in rows}
    except BaseException:
        plain.close()
        raise
    fork = multiprocessing.get_context("fork")
    url_box = fork.Queue()
    child = fork.Process(target=_serve, args=(Oracle(evidence), url_box), daemon=True)
    child.start()
    fused_recall = sum(q.file in file_order(fused[q.id])[:K] for q in rows) / len(rows)
    table_rows = []
    try:
        fake_url = url_box.get(timeout=30)
        for n in TOP_NS:
            rerank = {"provider": "cohere", "baseUrl": fake_url, "topN": n, "budgetSeconds": 10.0}
            project = Project.open(root, overrides={"provider": provider, "rerank": rerank})
            try:
                got = {q.id: search(project, {"query": q.query, "mode": mode, "maxResults": DEPTH}) for q in rows}
                base_times, times = _times(plain, project, rows, mode, search)
            finally:
                project.close()
            degraded = [g["degraded"] for g in got.values() if g.get("degraded")]
            if degraded:
                raise SystemExit(f"top {n}: the stage failed: {degraded[0]}")
            reranked = sum(q.file in file_order(got[q.id])[:K] for q in rows) / len(rows)
            reachable = sum(
                any(r["filePath"] == q.file for r in fused[q.id]["results"][:n])
                or q.file in file_order(fused[q.id])[:K]
                for q in rows
            ) / len(rows)
            base, with_stage = bu.median(base_times), bu.median(times)
            added = [t - b for t, b in zip(times, base_times, strict=True)]
            figures["topN"][n] = {
                "fusedRecall@10": fused_recall,
                "rerankedRecall@10": reranked,
                "reachable": reachable,
                "medianMsFused": base * 1000,
                "medianMsReranked": with_stage * 1000,
                "medianAddedMs": bu.median(added) * 1000,
                "p90AddedMs": bu.percentile(added, 90) * 1000,
            }
            table_rows.append(
                (
                    n,
                    f"{fused_recall:.3f}",
                    f"{reranked:.3f}",
                    f"{reachable:.3f}",
                    bu.verdict(reranked >= reachable),
                    bu.fmt_ms(base),
                    bu.fmt_ms(with_stage),
                    bu.fmt_ms(bu.median(added)),
                    bu.fmt_ms(bu.percentile(added, 90)),
                    f"{with_stage / base:.2f}x",
                )
            )
    finally:
        child.terminate()
        plain.close()
    print()
    print(
        bu.table(
            [
                "top N",
                "fused recall@10",
                "reranked recall@10",
                "reachable",
                "reached",
                "median fused",
                "median reranked",
                "median added",
                "p90 added",
                "ratio",
            ],
            table_rows,
        )
    )
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")


class Oracle:
    """The fake reranker's scorer: 1 for a chunk of the query's evidence file (as the stage sends it), else 0."""

    def __init__(self, evidence: dict[str, set[str]]) -> None:
        self.evidence = evidence

    def __call__(self, query: str, document: str) -> float:
        return 1.0 if document in self.evidence.get(query, ()) else 0.0


def _serve(scorer: Oracle, url_box: Any) -> None:
    """The fake reranker in a child process (forked: tests/ is on its path), until terminated."""
    from rerankserver import FakeReranker

    fake = FakeReranker("cohere", scorer=scorer).start()
    url_box.put(fake.url)
    while True:
        time.sleep(3600)


def _times(plain: Any, reranking: Any, rows: list[Any], mode: str, search: Any) -> tuple[list[float], list[float]]:
    """Per query, the wall clock of a search (maxResults 10) without and with the stage, side by side (A B, then
    B A for the next query), after a warm-up pass; each the median of ROUNDS runs."""
    for q in rows[:5]:
        for project in (plain, reranking):
            search(project, {"query": q.query, "mode": mode, "maxResults": K})
    base: list[float] = []
    staged: list[float] = []
    for i, q in enumerate(rows):
        runs: dict[int, list[float]] = {0: [], 1: []}
        for r in range(ROUNDS):
            order = (0, 1) if (i + r) % 2 == 0 else (1, 0)
            for which in order:
                t0 = time.perf_counter()
                search((plain, reranking)[which], {"query": q.query, "mode": mode, "maxResults": K})
                runs[which].append(time.perf_counter() - t0)
        base.append(bu.median(runs[0]))
        staged.append(bu.median(runs[1]))
    return base, staged


if __name__ == "__main__":
    main()

"""Fusion rules replayed per query (issue 31, benchmarks/README.md row F8): tuning only, on SciFact train and the dev
sets, never on SciFact test.

`capture` runs each query once per mode against already-indexed copies and stores, for every hybrid candidate, its
file, exact-match flag, vector z-part and keyword z-part (retrieval/search.py fuses `w_vec * v + w_lex * l`), with the
query's fusion evidence (coverage, agreement) and the keyword-only and vector-only outcome. `sweep` then replays
any keyword weight offline (no search, no model) and prints, per rule, SciFact train nDCG@10 and recall@10 / MRR@10
per dev set and kind, beside the single modes. The replay is exact: at weight 0 it equals the real search.

    python benchmarks/bench_fusion_replay.py capture --scifact-root DIR --split train --out train.json
    python benchmarks/bench_fusion_replay.py capture --devset nodejs=DIR --devset 13th-age=DIR --out dev.json
    python benchmarks/bench_fusion_replay.py sweep train.json dev.json

DIR: an indexed copy (a `saipling eval --workdir` for SciFact, a `bench_devset.py` cache copy for a dev set).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchutil as bu  # noqa: E402
import _devsets as ds  # noqa: E402

W_VEC = 0.6


# -- capture ---------------------------------------------------------------------------------------------------
def _hook() -> dict[str, Any]:
    """Force the keyword weight to 0 (the fused score is then w_vec x the vector z-part) and keep each
    candidate's keyword z-part and the query's evidence."""
    from saipling.retrieval import fusion, search

    state: dict[str, Any] = {}
    weigh, rank = fusion.weigh, search._rank

    def weigh_zero(project, query, kw, ranked, paths, lex_of, short_top=(), vector_weight=None):  # type: ignore[no-untyped-def]
        ev = weigh(project, query, kw, ranked, paths, lex_of, short_top, vector_weight)
        state.update(lex_of=dict(lex_of), paths=paths, ev=ev.as_dict())
        ev.keyword_weight = 0.0
        return ev

    def rank_capture(project, req, flt, qvec, mode, n_cand):  # type: ignore[no-untyped-def]
        out, ev = rank(project, req, flt, qvec, mode, n_cand)
        if mode == "hybrid" and "lex_of" in state:
            w = ev.vector_weight or 1.0
            state["cands"] = [
                (
                    state["paths"].get(r.chunk_id),
                    r.exact is not None,
                    round(r.fused / w, 4),
                    round(state["lex_of"].get(r.chunk_id, 0.0), 4),
                )
                for r in out[:400]
            ]
        return out, ev

    search.weigh = weigh_zero  # type: ignore[assignment]
    search._rank = rank_capture  # type: ignore[assignment]
    return state


def _search(project: Any, query: str, mode: str, eval_like: bool) -> list[dict[str, Any]]:
    """As `saipling eval` searches (200 results, no context settings), or as bench_devset.py does (50)."""
    if not eval_like:
        return project.search({"query": query, "mode": mode, "maxResults": 50})["results"]
    from saipling.retrieval import search

    req = search.SearchRequest(
        query=query[:2000], max_results=200, mode=mode, source="eval", respect_context_settings=False, log=False
    )
    return search.run_search(project, req)["results"]


def _files(results: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for r in results:
        if r["filePath"] not in out:
            out.append(r["filePath"])
    return out


def capture(args: argparse.Namespace) -> None:
    from saipling.project import Project

    state = _hook()
    rows: dict[str, Any] = {}

    def one(project: Any, query: str, eval_like: bool) -> dict[str, Any]:
        state.clear()
        res = {m: _files(_search(project, query, m, eval_like)) for m in ("hybrid", "lexical", "semantic")}
        return {
            "q": query,
            "cands": state.get("cands", []),
            "ev": state.get("ev"),
            "lexical": res["lexical"][:10],
            "semantic": res["semantic"][:10],
            "hybrid0": res["hybrid"][:10],
        }

    if args.scifact_root:
        from saipling.retrieval.evaluation import doc_stem, load_beir

        data = load_beir(bu.SHARED / "eval" / "scifact", args.split)
        project = Project.open(Path(args.scifact_root), overrides={"provider": "local"})
        qids = [q for q in data.queries if q in data.qrels]
        for qid in qids[: args.limit or None]:
            rows[f"scifact:{qid}"] = one(project, data.queries[qid], True) | {
                "rel": {f"docs/{doc_stem(d)}.md": v for d, v in data.qrels[qid].items()}
            }
    for spec in args.devset:
        name, root = spec.split("=", 1)
        project = Project.open(Path(root), overrides={"provider": "local"})
        for q in ds.load(ds.SETS[name].path)[: args.limit or None]:
            rows[f"{name}:{q.id}"] = one(project, q.query, False) | {"set": name, "kind": q.kind, "file": q.file}
    Path(args.out).write_text(json.dumps(rows), encoding="utf-8")
    print(f"{len(rows)} queries captured to {args.out}")


# -- replay ----------------------------------------------------------------------------------------------------
def ramp(x: float, lo: float, hi: float) -> float:
    return min(1.0, max(0.0, (x - lo) / (hi - lo)))


def replay(row: dict[str, Any], w_lex: float) -> list[str]:
    order = sorted(row["cands"], key=lambda c: (not c[1], -(W_VEC * c[2] + w_lex * c[3])))
    out: list[str] = []
    for c in order:
        if c[0] not in out:
            out.append(c[0])
    return out


def quality(row: dict[str, Any], files: list[str]) -> float:
    """nDCG@10 for a SciFact claim, 1/rank within 10 for a dev-set question."""
    if "rel" in row:
        rel = row["rel"]
        dcg = sum(rel.get(f, 0) / math.log2(i + 2) for i, f in enumerate(files[:10]))
        ideal = sorted(rel.values(), reverse=True)[:10]
        return dcg / sum(r / math.log2(i + 2) for i, r in enumerate(ideal))
    return 1.0 / (files.index(row["file"]) + 1) if row["file"] in files[:10] else 0.0


Rule = Callable[[dict[str, float]], float]


def table(rows: dict[str, Any], rules: dict[str, Rule]) -> None:
    sci = [r for k, r in rows.items() if k.startswith("scifact:")]
    cells = sorted({(r["set"], r["kind"]) for r in rows.values() if "set" in r})
    print("| rule | SciFact nDCG@10 | " + " | ".join(f"{s} {k} R@10 / MRR" for s, k in cells) + " |")
    print("|---" * (2 + len(cells)) + "|")

    def line(name: str, outcome: Callable[[dict[str, Any]], list[str]]) -> None:
        t = sum(quality(r, outcome(r)) for r in sci) / len(sci) if sci else float("nan")
        parts = []
        for s, k in cells:
            xs = [quality(r, outcome(r)) for r in rows.values() if r.get("set") == s and r.get("kind") == k]
            parts.append(f"{sum(x > 0 for x in xs) / len(xs):.2f} / {sum(xs) / len(xs):.2f}")
        print(f"| {name} | {t:.4f} | " + " | ".join(parts) + " |", flush=True)

    line("keywords only", lambda r: r["lexical"])
    line("vectors only", lambda r: r["semantic"])
    for name, rule in rules.items():
        line(
            name,
            lambda r, rule=rule: replay(
                r, rule({"coverage": r["ev"]["keywordCoverage"], "agreement": r["ev"]["agreement"]}) if r["ev"] else 0.0
            ),
        )


def sweep(args: argparse.Namespace) -> None:
    rows: dict[str, Any] = {}
    for f in args.files:
        rows.update(json.loads(Path(f).read_text(encoding="utf-8")))
    rules: dict[str, Rule] = {
        "F1-F2: 0.4 x ramp(cov + 0.15 agr, 0.3, 0.7)": lambda e: (
            0.4 * ramp(e["coverage"] + 0.15 * e["agreement"], 0.3, 0.7)
        ),
        "F8: 0.5 x (1 - (1 - ramp(cov, 0.3, 0.7))(1 - ramp(agr, 0.4, 1.0)))": lambda e: (
            0.5 * (1 - (1 - ramp(e["coverage"], 0.3, 0.7)) * (1 - ramp(e["agreement"], 0.4, 1.0)))
        ),
    }
    for w in (0.0, 0.2, 0.4, 0.5):
        rules[f"fixed {w}"] = lambda e, w=w: w
    for lo, hi in itertools.product((0.2, 0.3), (0.5, 0.7)):
        rules[f"0.4 x ramp(cov, {lo}, {hi})"] = lambda e, lo=lo, hi=hi: 0.4 * ramp(e["coverage"], lo, hi)
    table(rows, rules)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("capture")
    c.add_argument("--scifact-root", help="an indexed `saipling eval` workdir of ../shared/eval/scifact")
    c.add_argument("--split", default="train", choices=["train"], help="never test: tuning only")
    c.add_argument("--devset", action="append", default=[], help="NAME=DIR: an indexed copy of a dev set's corpus")
    c.add_argument("--limit", type=int, default=0, help="only the first N queries of each set (a smoke run)")
    c.add_argument("--out", required=True)
    s = sub.add_parser("sweep")
    s.add_argument("files", nargs="+")
    args = p.parse_args()
    capture(args) if args.cmd == "capture" else sweep(args)


if __name__ == "__main__":
    main()

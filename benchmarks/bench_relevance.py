"""Relevance floor: do agents get nothing for off-topic questions, and still get the answer for real ones?

  off-topic  the 50 questions of devsets/offtopic.jsonl (software, cooking, finance, sport, home repair, travel,
             gadgets, maths, paperwork, gardening: nothing a novel or a biomedical abstract is about), asked
             through enrichContext (default settings: no skill, mode auto) on a project of fiction chapters
             and on the SciFact corpus. Counted: how many give an agent an EMPTY context block; also how many
             searches say `noConfidentMatch`.
  real       SciFact queries (qrels of --split, every one has a relevant document) through enrichContext on the
             SciFact corpus: how many keep their top hit (the first hybrid search result is in the context
             block), over all queries and over those whose top hit is a relevant document.
  fiction    (when a fiction dev set is given, e.g. devsets/fiction.jsonl) real author questions about the fiction
             chapters: how many get a non-empty context that holds the evidence file.

Projects: the fiction copy comes from `_benchutil.fiction_index` (cached under SAIPLING_BENCH_CACHE, default
/tmp/saipling-bench; pass --fiction ROOT to use an already indexed copy), the SciFact corpus from the `saipling
eval` workdir (--scifact-workdir, default ~/.cache/saipling/eval/scifact: run `saipling eval ../shared/eval/scifact
--provider local` once to build it). Nothing here writes to ../shared.

    python benchmarks/bench_relevance.py --fiction /tmp/fiction --scifact-workdir /tmp/scifact --split test
    python benchmarks/bench_relevance.py --quick     # 20 off-topic questions, 100 SciFact queries
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchutil as bu  # noqa: E402

from saipling.project import Project  # noqa: E402
from saipling.retrieval.evaluation import doc_stem, load_beir  # noqa: E402

DEVSETS = Path(__file__).resolve().parent / "devsets"
OFFTOPIC = DEVSETS / "offtopic.jsonl"
SCIFACT = bu.SHARED / "eval" / "scifact"


def load_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def offtopic(project: Project, queries: list[dict]) -> dict[str, int]:
    empty = no_match = 0
    for q in queries:
        response = project.enrich({"query": q["query"]})
        empty += not response["contextBlock"]
        no_match += bool(project.search({"query": q["query"], "source": "eval"})["noConfidentMatch"])
    return {"queries": len(queries), "emptyContext": empty, "noConfidentMatch": no_match}


def real_scifact(project: Project, dataset: Path, split: str, limit: int | None) -> dict[str, int]:
    ds = load_beir(dataset, split)
    ids = {doc_stem(d): d for d in ds.corpus}
    qids = list(ds.queries)[:limit] if limit else list(ds.queries)
    kept = relevant_top = relevant_kept = 0
    for qid in qids:
        text = ds.queries[qid][:2000]
        top = project.search({"query": text, "maxResults": 1, "source": "eval"})["results"]
        if not top:
            continue
        response = project.enrich({"query": text, "wantSearch": True})
        hit = any(r["filePath"] == top[0]["filePath"] for r in response["searchResults"])
        kept += hit
        doc = ids.get(os.path.splitext(os.path.basename(top[0]["filePath"]))[0])
        if doc in ds.qrels.get(qid, {}):
            relevant_top += 1
            relevant_kept += hit
    return {
        "queries": len(qids),
        "keptTopHit": kept,
        "topHitRelevant": relevant_top,
        "relevantTopHitKept": relevant_kept,
    }


def real_fiction(project: Project, queries: list[dict]) -> dict[str, int]:
    nonempty = evidence = 0
    for q in queries:
        response = project.enrich({"query": q["query"], "wantSearch": True})
        nonempty += bool(response["contextBlock"])
        evidence += any(r["filePath"] == q["file"] for r in response["searchResults"])
    return {"queries": len(queries), "nonEmptyContext": nonempty, "evidenceFileInContext": evidence}


def pct(a: int, b: int) -> str:
    return f"{a}/{b} ({100.0 * a / b:.0f}%)" if b else "-"


def main() -> None:
    p = bu.parser(__doc__.split("\n")[0])
    p.add_argument("--fiction", type=Path, default=None, help="an indexed copy of the fiction corpus")
    p.add_argument("--fiction-devset", type=Path, default=None, help="real fiction questions (jsonl: query, file)")
    p.add_argument(
        "--scifact-workdir",
        type=Path,
        default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "saipling" / "eval" / "scifact",
    )
    p.add_argument("--scifact", type=Path, default=SCIFACT, help="the BEIR SciFact folder")
    p.add_argument("--split", default="test")
    p.add_argument("--provider", default="local")
    args = p.parse_args()
    bu.banner("bench_relevance: off-topic questions get an empty context; real ones keep their top hit", args.quick)
    queries = load_jsonl(OFFTOPIC)[: 20 if args.quick else None]
    rows = []
    fiction = args.fiction or bu.fiction_index(bu.provider_choice(args.provider), args.quick)
    if fiction is not None:
        project = Project.open(fiction, overrides={"provider": args.provider})
        try:
            r = offtopic(project, queries)
            rows.append(("fiction", "off-topic: empty context", pct(r["emptyContext"], r["queries"])))
            rows.append(("fiction", "off-topic: noConfidentMatch", pct(r["noConfidentMatch"], r["queries"])))
            if args.fiction_devset is not None:
                dev = load_jsonl(args.fiction_devset)
                f = real_fiction(project, dev)
                rows.append(("fiction", "real: non-empty context", pct(f["nonEmptyContext"], f["queries"])))
                rows.append(
                    ("fiction", "real: evidence file in context", pct(f["evidenceFileInContext"], f["queries"]))
                )
        finally:
            project.close()
    if bu.need_shared(args.scifact, "SciFact") and (args.scifact_workdir / ".saipling").is_dir():
        project = Project.open(args.scifact_workdir, overrides={"provider": args.provider})
        try:
            r = offtopic(project, queries)
            rows.append(("scifact", "off-topic: empty context", pct(r["emptyContext"], r["queries"])))
            rows.append(("scifact", "off-topic: noConfidentMatch", pct(r["noConfidentMatch"], r["queries"])))
            s = real_scifact(project, args.scifact, args.split, 100 if args.quick else None)
            rows.append(("scifact", f"real ({args.split}): top hit kept", pct(s["keptTopHit"], s["queries"])))
            rows.append(
                (
                    "scifact",
                    f"real ({args.split}), top hit relevant: kept",
                    pct(s["relevantTopHitKept"], s["topHitRelevant"]),
                )
            )
        finally:
            project.close()
    elif args.scifact.exists():
        print(f"SKIPPED SciFact: {args.scifact_workdir} is not indexed (run `saipling eval` first)")
    print(bu.table(["corpus", "measure", "result"], rows))


if __name__ == "__main__":
    main()

"""A BEIR eval, old code against new, query by query: each side's nDCG@10 per query and a paired bootstrap of the
difference (is a change in the mean more than the spread of the queries?).

Each side is a checkout of the repository (`--old`, e.g. `git worktree add /tmp/old <rev>`; `--new`, default this
checkout) that writes the corpus and builds its own index in its own workdir (`--old-workdir`, `--new-workdir`:
what `saipling eval --workdir` takes; an index already there is caught up, so a second run only searches), then
runs every query of the split through its own `run_search` as `saipling eval` does (maxResults 200, context
settings off) and prints one line of JSON: query id -> nDCG@10. Reported: both means, the queries better / worse,
the mean difference and its 95% bootstrap interval, and P(new >= old) over the resamples.

    python benchmarks/bench_eval_ab.py --old /tmp/old --old-workdir /tmp/sci-old --new-workdir /tmp/sci-new \
        --split test [--mode hybrid] [--scifact DIR]

Measuring, not tuning: a change chosen by its test-split figure is tuned on the test split.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchutil as bu  # noqa: E402

RESAMPLES = 5000

# (both import layouts: retrieval/ since the folder move, the package root before it)
CHILD = r"""
import json, sys
from pathlib import Path
try:
    from saipling.retrieval.evaluation import doc_ranking, doc_stem, load_beir, materialise_corpus, ndcg_at
    from saipling.retrieval.search import SearchRequest, run_search
except ImportError:
    from saipling.evaluation import doc_ranking, doc_stem, load_beir, materialise_corpus, ndcg_at
    from saipling.search import SearchRequest, run_search
from saipling.project import Project

dataset, split, mode, workdir, provider, limit = *sys.argv[1:6], int(sys.argv[6])
ds = load_beir(Path(dataset), split)
materialise_corpus(ds, Path(workdir))
p = Project.open(Path(workdir), overrides={"provider": provider})
try:
    p.index()
    ids = {doc_stem(d): d for d in ds.corpus}
    out = {}
    for qid, text in ds.queries.items():
        if qid not in ds.qrels:
            continue
        if limit and len(out) >= limit:
            break
        req = SearchRequest(query=text[:2000], max_results=200, mode=mode, source="eval")
        req.respect_context_settings = False
        out[qid] = ndcg_at(doc_ranking(run_search(p, req)["results"], ids), ds.qrels[qid])
finally:
    p.close()
print(json.dumps(out))
"""


def run_side(
    tree: Path, dataset: Path, split: str, mode: str, workdir: Path, provider: str, limit: int = 0
) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(tree / "server"))
    args = [sys.executable, "-c", CHILD, str(dataset), split, mode, str(workdir), provider, str(limit)]
    out = subprocess.run(args, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"the side at {tree} failed (exit {out.returncode}):\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def paired(old: dict[str, float], new: dict[str, float], seed: int = 1) -> dict[str, float]:
    """Mean of each side over the queries both have, the mean difference (new - old), its 95% bootstrap interval
    and the share of resamples where new >= old."""
    qs = sorted(set(old) & set(new))
    if not qs:
        raise SystemExit("the two sides share no query")
    d = [new[q] - old[q] for q in qs]
    rng = random.Random(seed)
    means = sorted(sum(rng.choice(d) for _ in d) / len(d) for _ in range(RESAMPLES))
    return {
        "queries": len(qs),
        "old": sum(old[q] for q in qs) / len(qs),
        "new": sum(new[q] for q in qs) / len(qs),
        "better": sum(x > 1e-9 for x in d),
        "worse": sum(x < -1e-9 for x in d),
        "diff": sum(d) / len(d),
        "lo": means[int(0.025 * RESAMPLES)],
        "hi": means[int(0.975 * RESAMPLES) - 1],
        "p_not_worse": sum(m >= 0 for m in means) / RESAMPLES,
    }


def main() -> None:
    p = bu.parser(__doc__.split("\n")[0])
    p.add_argument("--old", required=True, help="the old checkout (its server/ goes on PYTHONPATH)")
    p.add_argument("--new", default=str(Path(__file__).resolve().parent.parent), help="the new checkout")
    p.add_argument("--old-workdir", required=True, help="the old side's eval workdir (its own index)")
    p.add_argument("--new-workdir", required=True, help="the new side's eval workdir (its own index)")
    p.add_argument("--scifact", default=str(bu.SHARED / "eval" / "scifact"), help="a BEIR dataset folder")
    p.add_argument("--split", default="train", help="train (tuning) or test (measuring once)")
    p.add_argument("--mode", default="hybrid", choices=["hybrid", "semantic", "lexical"])
    p.add_argument("--provider", default=None, help="local (default when installed) or none")
    p.add_argument("--json", default=None, help="also write both sides' per-query figures and the summary here")
    args = p.parse_args()
    if Path(args.old_workdir).resolve() == Path(args.new_workdir).resolve():
        raise SystemExit("--old-workdir and --new-workdir must differ: each side indexes its own copy")
    dataset = Path(args.scifact)
    if not bu.need_shared(dataset / "corpus.jsonl", "the BEIR dataset"):
        return
    provider = bu.provider_choice(args.provider)
    bu.banner(
        f"{dataset.name} {args.split} {args.mode}: {args.old} against {args.new}, provider {provider}", args.quick
    )
    sides = {}
    for name, tree, wd in (("old", args.old, args.old_workdir), ("new", args.new, args.new_workdir)):
        secs, sides[name] = bu.timed(
            lambda tree=tree, wd=wd: run_side(
                Path(tree), dataset, args.split, args.mode, Path(wd), provider, 20 if args.quick else 0
            )
        )
        mean = sum(sides[name].values()) / len(sides[name])
        print(f"   {name}: {len(sides[name])} queries, nDCG@10 {mean:.4f} ({bu.fmt_s(secs)} s)")
    s = paired(sides["old"], sides["new"])
    print(
        bu.table(
            ["queries", "old", "new", "new - old", "95% interval", "better / worse", "P(new >= old)"],
            [
                [
                    s["queries"],
                    f"{s['old']:.4f}",
                    f"{s['new']:.4f}",
                    f"{s['diff']:+.4f}",
                    f"{s['lo']:+.4f} .. {s['hi']:+.4f}",
                    f"{s['better']} / {s['worse']}",
                    f"{s['p_not_worse']:.3f}",
                ]
            ],
        )
    )
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": s, **sides}, indent=1))


if __name__ == "__main__":
    main()

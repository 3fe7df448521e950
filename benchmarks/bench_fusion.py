"""Fusion variants on SciFact (nDCG@10): reciprocal rank fusion against z-score fusion, chunk against file BM25.

Reads the index `saipling eval` built (--workdir, default ~/.cache/saipling/eval/scifact: run `saipling eval
../shared/eval/scifact --split train --provider local` once), collects each query's raw signals once (top 100
chunk BM25, top 100 whole-file BM25, top 100 cosines) and ranks documents under each variant offline, so the
variants see the same candidates. This is how retrieval/search.py's fusion was chosen, on train only:

  rrf             weighted reciprocal rank fusion as before (0.4 keyword / 0.6 vector, "mixed" queries)
  z chunk         z-normalised scores, keyword side = chunk BM25
  z file          ... keyword side = whole-file BM25 for files of <= 3 chunks (the first round's rule;
  retrieval/search.py
                  now decides by size, <= 3,000 bytes), half file / half chunk beyond
  z file+fvec     ... and each chunk's vector score = its cosine, plus its file's two next-best chunks' cosines
                  damped 1/2, 1/4 (a file of fewer chunks repeats its best), divided by 1.75: evidence spread over
                  a long file (measured for issue 15's fiction paraphrases; lost on SciFact, not used)
  wv=W            weight of the vector z-score

    python benchmarks/bench_fusion.py --split train
"""

from __future__ import annotations

import os
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchutil as bu  # noqa: E402

from saipling.project import Project  # noqa: E402
from saipling.retrieval.evaluation import load_beir, score_run  # noqa: E402
from saipling.storage.base import KeywordQuery  # noqa: E402

N = 100


def collect(project: Project, queries: dict[str, str]) -> dict[str, dict]:
    store = project.store
    out = {}
    for qid, text in queries.items():
        text = text[:2000]
        match = KeywordQuery.parse(text)
        qv = project.provider.embed_query(text)  # type: ignore[union-attr]
        out[qid] = {
            "qv": np.asarray(qv, dtype=np.float32),
            "kw": store.keyword_search(match, N) if match else [],
            "files": store.file_keyword_search(match, N) if match else [],
            "vec": store.knn(qv, N),
        }
    return out


def rank(sig: dict, ctx: dict, variant: str, wv: float) -> list[str]:
    """Document stems, best first."""
    path_of, chunks_of, vectors = ctx["path"], ctx["chunks"], ctx["vectors"]
    if variant == "rrf":
        score: dict[int, float] = defaultdict(float)
        for i, (cid, _) in enumerate(sig["kw"]):
            score[cid] += (1 - wv) / (61 + i)
        for i, (cid, _) in enumerate(sig["vec"]):
            score[cid] += wv / (61 + i)
        ranked = sorted(score, key=lambda c: -score[c])
    else:
        use_file = variant.startswith("z file")
        cand = {c for c, _ in sig["kw"]} | {c for c, _ in sig["vec"]}
        short = {p for p, _, n in sig["files"] if n <= 3} if use_file else set()
        for p in short:
            cand.update(chunks_of[p])
        cos = {c: float(vectors[c] @ sig["qv"]) for c in cand if c in vectors}
        if variant == "z file+fvec":
            cos = {c: file_spread(c, x, sig["qv"], ctx) for c, x in cos.items()}
        kw, fb = dict(sig["kw"]), {p: b for p, b, _ in sig["files"]}

        def z(vals: list[float]) -> tuple[float, float]:
            a = np.asarray(vals)
            return float(a.mean()), float(a.std()) or 1.0

        km, ks = z([kw.get(c, 0.0) for c in cand])
        fm, fs = z([fb.get(path_of[c], 0.0) for c in cand])
        vm, vs = z(list(cos.values()))
        fused = {}
        for c in cand:
            zk, zf = (kw.get(c, 0.0) - km) / ks, (fb.get(path_of[c], 0.0) - fm) / fs
            lex = (zf if path_of[c] in short else 0.5 * zk + 0.5 * zf) if use_file else zk
            fused[c] = wv * ((cos.get(c, vm) - vm) / vs) + (1 - wv) * lex
        ranked = sorted(fused, key=lambda c: -fused[c])
    return list(dict.fromkeys(Path(path_of[c]).stem for c in ranked))


def file_spread(cid: int, cosine: float, qv: np.ndarray, ctx: dict) -> float:
    """A chunk's cosine plus its file's two next-best chunks' cosines, damped 1/2 and 1/4 (normalised)."""
    others = sorted(
        (float(ctx["vectors"][c] @ qv) for c in ctx["chunks"][ctx["path"][cid]] if c != cid and c in ctx["vectors"]),
        reverse=True,
    )[:2]
    others += [cosine] * (2 - len(others))
    return (cosine + 0.5 * others[0] + 0.25 * others[1]) / 1.75


def main() -> None:
    p = bu.parser(__doc__.split("\n")[0])
    p.add_argument("--dataset", type=Path, default=bu.SHARED / "eval" / "scifact")
    p.add_argument("--split", default="train")
    p.add_argument(
        "--workdir",
        type=Path,
        default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "saipling" / "eval" / "scifact",
    )
    args = p.parse_args()
    bu.banner(f"bench_fusion: fusion variants on SciFact {args.split}", args.quick)
    if not bu.need_shared(args.dataset, "SciFact") or not (args.workdir / ".saipling").is_dir():
        print(f"SKIPPED: {args.workdir} is not an indexed `saipling eval` workdir")
        return
    ds = load_beir(args.dataset, args.split)
    if args.quick:
        ds.queries = dict(list(ds.queries.items())[:100])
    project = Project.open(args.workdir, overrides={"provider": "local"})
    try:
        ids, mat = project.store.vector_matrix()
        rows = project.store.conn.execute("SELECT id, path FROM chunks").fetchall()
        path_of = {int(i): str(p) for i, p in rows}
        chunks_of: dict[str, list[int]] = defaultdict(list)
        for cid, path in path_of.items():
            chunks_of[path].append(cid)
        ctx = {"path": path_of, "chunks": chunks_of, "vectors": {int(i): mat[k] for k, i in enumerate(ids)}}
        signals = collect(project, ds.queries)
    finally:
        project.close()
    table = []
    for variant, wv in (
        ("rrf", 0.6),
        ("z chunk", 0.5),
        ("z file", 0.45),
        ("z file", 0.5),
        ("z file", 0.55),
        ("z file", 0.6),
        ("z file", 0.65),
        ("z file+fvec", 0.55),
        ("z file+fvec", 0.65),
    ):
        run = {q: rank(s, ctx, variant, wv) for q, s in signals.items()}
        m = score_run(run, ds.qrels)
        table.append((variant, wv, f"{m['ndcg@10']:.4f}", f"{m['recall@10']:.4f}", f"{m['recall@100']:.4f}"))
    print(bu.table(["variant", "vector weight", "nDCG@10", "recall@10", "recall@100"], table))


if __name__ == "__main__":
    main()

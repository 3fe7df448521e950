"""Hybrid search replayed candidate by candidate, its two parts included (issue 31, benchmarks/README.md row F9):
tuning only, on SciFact train and the dev sets, never on SciFact test.

bench_fusion_replay.py replays keyword weights over captured fused parts; this one captures what the parts are made
of, so that a change to a part can be replayed too: per corpus every chunk's vector and path, per query its
embedding, the keyword index's chunk and whole-file lists, the exact matches and the keyword coverage (what
retrieval/fusion.py measures). `sweep` then rebuilds retrieval/search.py's ranking in numpy (candidates, whole-file
BM25 of short files, z-scores over the NORM_POOL candidates, the F8 weights) and varies one thing at a time: the
keyword weight (fixed, floored), a per-candidate keyword weight, the vector query (pseudo-relevance feedback from
the vector list or from the fused list: Rocchio, query + b x mean of the top k chunk vectors) and the
normalisation. Exact: `capture --verify N` compares the replay with the real search (top 10 files, three modes;
a few semantic lists may differ in the order of chunks of equal cosine, e.g. text repeated across 13th Age files).

    python benchmarks/bench_parts_replay.py capture --scifact-root DIR --out train.pkl
    python benchmarks/bench_parts_replay.py capture --devset fiction=DIR --verify 66 --out fiction.pkl
    python benchmarks/bench_parts_replay.py sweep train.pkl fiction.pkl 13th-age.pkl nodejs.pkl

DIR: an indexed copy (a `saipling eval --workdir` for SciFact, a `bench_devset.py` cache copy for a dev set).
"""

from __future__ import annotations

import argparse
import math
import pickle
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchutil as bu  # noqa: E402
import _devsets as ds  # noqa: E402

Rule = Callable[[float, float], float]  # (coverage, agreement) -> keyword weight


# -- capture ---------------------------------------------------------------------------------------------------
class _Bare:
    cosine = None  # (a candidate as fusion.weigh reads it, for the keyword coverage alone)


def _query_row(project: Any, text: str, max_results: int) -> dict[str, Any]:
    from saipling.retrieval import fusion, search
    from saipling.storage.base import KeywordQuery

    req = search.SearchRequest(query=text[:2000], max_results=max_results, mode="hybrid", log=False)
    req.respect_context_settings = max_results != 200  # (as `saipling eval` / bench_devset.py search)
    flt = search.build_filter(project, req)
    st = project.store
    n_cand = max(100, max_results * 4)
    match = KeywordQuery.parse(req.query)
    kw = st.keyword_search(match, n_cand, flt) if match else []
    files = st.file_keyword_search(match, search.NORM_POOL, flt) if match else []
    short_top = [p for p, _, size in files[: fusion.KEYWORD_EVIDENCE_DEPTH] if size <= search.SHORT_FILE_BYTES]
    bare = {cid: _Bare() for cid, _ in kw[: fusion.KEYWORD_EVIDENCE_DEPTH]}
    if short_top:
        bare |= {cid: _Bare() for cid, _ in st.chunk_ids_for_paths(short_top, flt)}
    paths = st.chunk_paths(list(bare))
    ev = fusion.weigh(project, req.query, kw, bare, paths, dict.fromkeys(bare, 0.0), short_top)
    qvec = search._cache_for(project).get(project.provider, req.query)
    return {
        "q": text,
        "qvec": np.asarray(qvec, dtype=np.float32),
        "kw": kw,
        "files": files,
        "exact": search._exact_matches(project, req.query, flt),
        "cov": ev.coverage,
    }


def _capture_corpus(root: Path, items: list[tuple[str, str, dict[str, Any]]], max_results: int) -> dict[str, Any]:
    from saipling.project import Project

    project = Project.open(root, overrides={"provider": "local"})
    rows = project.store.chunk_ids_for_paths(sorted(project.store.file_states()))
    ids = [cid for cid, _ in rows]
    vecs = project.store.chunk_vectors(ids)
    ids = [cid for cid in ids if cid in vecs]
    path_of = dict(rows)
    corpus = {
        "root": str(root),
        "max_results": max_results,
        "ids": np.array(ids),
        "paths": [path_of[c] for c in ids],
        "V": np.stack([np.asarray(vecs[c], dtype=np.float32) for c in ids]),
        "queries": {},
    }
    for key, text, meta in items:
        corpus["queries"][key] = _query_row(project, text, max_results) | {"meta": meta}
    return corpus


def _verify(corpus: dict[str, Any], n: int) -> None:
    """The replay against the real search (top 10 distinct files) for the first n queries, three modes."""
    from saipling.project import Project
    from saipling.retrieval import search

    project = Project.open(Path(corpus["root"]), overrides={"provider": "local"})
    c = Corpus(corpus)
    bad = 0
    for key, q in list(corpus["queries"].items())[:n]:
        for mode in ("hybrid", "lexical", "semantic"):
            req = search.SearchRequest(query=q["q"][:2000], max_results=c.max_results, mode=mode, log=False)
            req.respect_context_settings = c.max_results != 200
            real = _distinct(r["filePath"] for r in search.run_search(project, req)["results"])[:10]
            mine = [c.fnames[f] for f in fuse(prep(c, q, mode=mode))]
            if real != mine:
                bad += 1
                print(f"  differs: {key} {mode}", file=sys.stderr)
    print(f"verify: {bad} of {3 * min(n, len(corpus['queries']))} (query, mode) pairs differ", file=sys.stderr)


def capture(args: argparse.Namespace) -> None:
    if args.scifact_root:
        from saipling.retrieval.evaluation import doc_stem, load_beir

        data = load_beir(bu.SHARED / "eval" / "scifact", "train")
        items = [
            (q, data.queries[q], {"rel": {f"docs/{doc_stem(d)}.md": v for d, v in data.qrels[q].items()}})
            for q in data.queries
            if q in data.qrels
        ]
        corpus = _capture_corpus(Path(args.scifact_root), items[: args.limit or None], 200)
        corpus["name"] = corpus["set"] = "scifact-train"
    else:
        name, root = args.devset.split("=", 1)
        items = [(q.id, q.query, {"kind": q.kind, "file": q.file}) for q in ds.load(ds.SETS[name].path)]
        corpus = _capture_corpus(Path(root), items[: args.limit or None], 50)
        corpus["name"] = corpus["set"] = name
    if args.name:  # (two captures of one set, e.g. a part of a corpus and the whole, need names of their own)
        corpus["name"] = args.name
    if args.verify:
        _verify(corpus, args.verify)
    with open(args.out, "wb") as fh:
        pickle.dump(corpus, fh)
    print(f"{len(corpus['queries'])} queries of {corpus['name']} captured to {args.out}")


# -- replay ----------------------------------------------------------------------------------------------------
SHORT_FILE_BYTES = 3000  # as retrieval/search.py
SHORT_FILE_CHUNK_WEIGHT = 0.01
LONG_FILE_MIX = 0.5
NORM_POOL = 100


def ramp(x: float, lo: float, hi: float) -> float:
    return min(1.0, max(0.0, (x - lo) / (hi - lo)))


def f8(cov: float, agr: float) -> float:
    """The shipped query-level rule (retrieval/fusion.py `keyword_trust`: row F8, its agreement ramp from F15).
    It follows fusion.py as it is now: rows F9-F14 replayed it with the 0.4 -> 1.0 agreement ramp of then."""
    from saipling.retrieval import fusion

    return fusion.KEYWORD_WEIGHT * fusion.keyword_trust(cov, agr)


def _stats(a: np.ndarray) -> tuple[float, float]:
    if not len(a):
        return 0.0, 1.0
    sd = float(a.std())
    return float(a.mean()), (sd if sd > 1e-9 else 1.0)


def _distinct(xs: Any, n: int | None = None) -> list[Any]:
    out: list[Any] = []
    for x in xs:
        if x not in out:
            out.append(x)
            if n is not None and len(out) >= n:
                break
    return out


class Corpus:
    def __init__(self, d: dict[str, Any]) -> None:
        self.name: str = d.get("name", "")
        self.set: str = d.get("set", self.name)  # the dev set (or SciFact) it is a capture of
        self.max_results: int = d["max_results"]
        self.V: np.ndarray = d["V"]
        self.queries: dict[str, dict[str, Any]] = d["queries"]
        ids, paths = d["ids"], d["paths"]
        self.fnames = sorted(set(paths))
        fi = {p: i for i, p in enumerate(self.fnames)}
        self.fid = np.array([fi[p] for p in paths])
        self.ids = ids
        self.pos = {int(c): i for i, c in enumerate(ids)}
        self.by_file: dict[str, list[int]] = defaultdict(list)
        for c, p in zip(ids, paths, strict=True):
            self.by_file[p].append(int(c))


def prep(c: Corpus, q: dict[str, Any], qvec: np.ndarray | None = None, mode: str = "hybrid") -> dict[str, Any]:
    """A query's candidates and their parts, as retrieval/search.py `_rank` builds them."""
    sims = c.V @ (q["qvec"] if qvec is None else qvec)
    n = max(100, c.max_results * 4)
    lexical = mode in ("hybrid", "lexical")
    kw = q["kw"] if lexical else []
    files = q["files"] if lexical else []
    vec: list[int] = []
    if mode in ("hybrid", "semantic"):
        top = np.argpartition(-sims, n)[:n]
        vec = [int(c.ids[i]) for i in top[np.argsort(-sims[top])]]
    short = {p for p, _, size in files if size <= SHORT_FILE_BYTES}
    exact = q["exact"] if lexical else {}
    cand = dict.fromkeys([cid for cid, _ in kw]) | dict.fromkeys(vec)
    if short and vec:
        for p in short:
            cand |= dict.fromkeys(c.by_file[p])
    cids = list(cand | dict.fromkeys(exact))
    pos = np.array([c.pos[x] for x in cids], dtype=int)
    fid = c.fid[pos]
    chunk_kw, file_kw = dict(kw), {p: b for p, b, _ in files}
    paths = [c.fnames[f] for f in fid]
    ck = np.array([chunk_kw.get(x, 0.0) for x in cids])
    fk = np.array([file_kw.get(p, 0.0) for p in paths])
    is_short = np.array([p in short for p in paths], dtype=bool)
    pool_files = {p for p, _, _ in files[:NORM_POOL]} & short
    pool_ids = {x for x, _ in kw[:NORM_POOL]} | set(vec[:NORM_POOL]) | set(exact)
    in_pool = np.array([x in pool_ids or p in pool_files for x, p in zip(cids, paths, strict=True)], dtype=bool)
    cos = sims[pos]
    vrank_of = {x: i for i, x in enumerate(vec)}
    k_mu, k_sd = _stats(ck[in_pool])
    f_mu, f_sd = _stats(np.array([file_kw.get(p, 0.0) for p in {paths[i] for i in np.nonzero(in_pool)[0]}]))
    v_mu, v_sd = _stats(cos[in_pool])
    zk, zf = (ck - k_mu) / k_sd, (fk - f_mu) / f_sd
    use_lex, use_vec = bool(kw or files), bool(vec)
    lex = np.where(is_short, zf + SHORT_FILE_CHUNK_WEIGHT * zk, (1 - LONG_FILE_MIX) * zk + LONG_FILE_MIX * zf)
    agr = 0.0
    if use_lex and use_vec:
        kw_files = _distinct(fid[np.argsort(-lex, kind="stable")], 5)
        vec_files = _distinct(fid[np.argsort(-cos, kind="stable")], 10)
        agr = len(set(kw_files) & set(vec_files)) / len(kw_files)
    return {
        "pos": pos,
        "fid": fid,
        "lex": lex if use_lex else np.zeros(len(cids)),
        "vz": (cos - v_mu) / v_sd if use_vec else np.zeros(len(cids)),
        "cos": cos,
        "in_pool": in_pool,
        "vrank": np.array([vrank_of.get(x, 10**6) for x in cids]),
        "in_kw": np.array([x in chunk_kw for x in cids], dtype=bool),
        "exact": np.array([x in exact for x in cids], dtype=bool),
        "use_lex": use_lex,
        "use_vec": use_vec,
        "cov": q["cov"],
        "agr": agr,
        "max_results": c.max_results,
    }


PerCandidate = Callable[[dict[str, Any], float], np.ndarray]


def scores(p: dict[str, Any], rule: Rule = f8, per_candidate: PerCandidate | None = None) -> np.ndarray:
    if p["use_lex"] and p["use_vec"]:
        w_vec, w_lex = 0.6, rule(p["cov"], p["agr"])
        if per_candidate is not None:
            return w_vec * p["vz"] + per_candidate(p, w_lex) * p["lex"]
    else:
        w_vec, w_lex = (1.0, 0.0) if p["use_vec"] else (0.0, 1.0)
    return w_vec * p["vz"] + w_lex * p["lex"]


def fuse(p: dict[str, Any], rule: Rule = f8, per_candidate: PerCandidate | None = None) -> list[int]:
    """The first 10 distinct files (ids) among the first maxResults chunks, exact matches first."""
    order = np.lexsort((-scores(p, rule, per_candidate), ~p["exact"]))[: p["max_results"]]
    return _distinct(p["fid"][order], 10)


def quality(c: Corpus, q: dict[str, Any], files: list[int]) -> float:
    """nDCG@10 for a SciFact claim, 1/rank within 10 for a dev-set question."""
    names = [c.fnames[f] for f in files]
    meta = q["meta"]
    if "rel" in meta:
        rel = meta["rel"]
        dcg = sum(rel.get(f, 0) / math.log2(i + 2) for i, f in enumerate(names))
        return dcg / sum(r / math.log2(i + 2) for i, r in enumerate(sorted(rel.values(), reverse=True)[:10]))
    return 1.0 / (names.index(meta["file"]) + 1) if meta["file"] in names else 0.0


# -- variants --------------------------------------------------------------------------------------------------
def rocchio(c: Corpus, q: dict[str, Any], k: int, b: float, order: np.ndarray | None = None) -> np.ndarray:
    """The query vector plus b x the mean of k chunk vectors: the vector list's top k, or `order`'s (positions)."""
    top = np.argpartition(-(c.V @ q["qvec"]), k)[:k] if order is None else order[:k]
    v = q["qvec"] + b * c.V[top].mean(axis=0)
    return (v / np.linalg.norm(v)).astype(np.float32)


def vector_over_own_list(p: dict[str, Any]) -> dict[str, Any]:
    """The vector z-scores over the vector list's top NORM_POOL only (not the union's pool)."""
    if not p["use_vec"]:
        return p
    mu, sd = _stats(p["cos"][p["vrank"] < NORM_POOL])
    return p | {"vz": (p["cos"] - mu) / sd}


def min_max(p: dict[str, Any]) -> dict[str, Any]:
    """Both parts min-max scaled to 0..3 over the pool instead of z-scored."""
    if not (p["use_vec"] and p["use_lex"]):
        return p
    out = dict(p)
    for key, raw in (("vz", p["cos"]), ("lex", p["lex"])):
        lo, hi = raw[p["in_pool"]].min(), raw[p["in_pool"]].max()
        out[key] = (raw - lo) / (hi - lo + 1e-9) * 3
    return out


def sweep(args: argparse.Namespace) -> None:
    corpora = []
    for f in args.files:
        with open(f, "rb") as fh:
            corpora.append(Corpus(pickle.load(fh)))
    base = {c.name: [prep(c, q) for q in c.queries.values()] for c in corpora}
    cells = [(c.name, k) for c in corpora for k in sorted({q["meta"].get("kind", "") for q in c.queries.values()})]
    print("| variant | " + " | ".join(f"{n} {k} {'nDCG@10' if not k else 'R@10 / MRR'}" for n, k in cells) + " |")
    print("|---" * (1 + len(cells)) + "|")

    def line(name: str, outcome: Callable[[Corpus, dict[str, Any], dict[str, Any]], list[int]]) -> None:
        parts = []
        for c in corpora:
            xs: dict[str, list[float]] = defaultdict(list)
            for q, p in zip(c.queries.values(), base[c.name], strict=True):
                xs[q["meta"].get("kind", "")].append(quality(c, q, outcome(c, q, p)))
            for kind in sorted(xs):
                v = xs[kind]
                avg = sum(v) / len(v)
                parts.append(f"{avg:.4f}" if not kind else f"{sum(x > 0 for x in v) / len(v):.2f} / {avg:.2f}")
        print(f"| {name} | " + " | ".join(parts) + " |", flush=True)

    line("keywords only", lambda c, q, p: fuse(prep(c, q, mode="lexical")))
    line("vectors only", lambda c, q, p: fuse(prep(c, q, mode="semantic")))
    line("F8 (shipped)", lambda c, q, p: fuse(p))
    line("fixed 0.4", lambda c, q, p: fuse(p, lambda cov, agr: 0.4))
    for floor in (0.05, 0.1):
        line(f"F8, at least {floor}", lambda c, q, p, f=floor: fuse(p, lambda cov, agr: max(f, f8(cov, agr))))
    for depth, full in ((10, 0.3), (50, 0.3), (800, 0.4)):
        line(
            f"F8; a chunk in the vector top {depth} and the keyword list: >= {full}",
            lambda c, q, p, d=depth, w=full: fuse(
                p, per_candidate=lambda p, wl: np.where((p["vrank"] < d) & p["in_kw"], max(wl, w), wl)
            ),
        )
    for lo, hi in ((0.0, 2.0), (1.0, 2.0)):
        line(
            f"F8; keyword weight raised toward 0.5 by the chunk's vector z, ramp {lo}-{hi}",
            lambda c, q, p, lo=lo, hi=hi: fuse(
                p, per_candidate=lambda p, wl: wl + (0.5 - wl) * np.clip((p["vz"] - lo) / (hi - lo), 0, 1)
            ),
        )
    line("F8, vector z over the vector list only", lambda c, q, p: fuse(vector_over_own_list(p)))
    line("F8, min-max instead of z", lambda c, q, p: fuse(min_max(p)))
    for k, b in ((3, 0.5), (5, 0.5)):
        line(f"F8, vector PRF k={k} b={b}", lambda c, q, p, k=k, b=b: fuse(prep(c, q, rocchio(c, q, k, b))))

        def hybrid_prf(c: Corpus, q: dict[str, Any], p: dict[str, Any], k: int = k, b: float = b) -> list[int]:
            if not p["use_vec"]:
                return fuse(p)
            order = p["pos"][np.lexsort((-scores(p), ~p["exact"]))]
            return fuse(prep(c, q, rocchio(c, q, k, b, order)))

        line(f"F8, hybrid PRF k={k} b={b} (feedback from the fused list)", hybrid_prf)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("capture")
    src = c.add_mutually_exclusive_group(required=True)
    src.add_argument("--scifact-root", help="an indexed `saipling eval` workdir of ../shared/eval/scifact (train)")
    src.add_argument("--devset", help="NAME=DIR: an indexed copy of a dev set's corpus")
    c.add_argument("--limit", type=int, default=0, help="only the first N queries")
    c.add_argument("--quick", action="store_true", help="a smoke run: the first 20 queries, 5 verified")
    c.add_argument("--verify", type=int, default=0, help="compare the replay with the real search on N queries")
    c.add_argument("--out", required=True)
    c.add_argument("--name", default="", help="the capture's name in the tables (default: the set's)")
    s = sub.add_parser("sweep")
    s.add_argument("files", nargs="+")
    args = p.parse_args()
    if args.cmd == "capture" and args.quick:
        args.limit, args.verify = args.limit or 20, min(args.verify or 5, 5)
    capture(args) if args.cmd == "capture" else sweep(args)


if __name__ == "__main__":
    main()

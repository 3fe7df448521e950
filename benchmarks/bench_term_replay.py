"""Per-candidate term evidence replayed (issue 31, benchmarks/README.md row F13): each hybrid candidate's keyword
part weighted by how much of the query's idf mass THAT candidate matches (distinct query terms present,
idf-weighted), beside or instead of the query-level trust of retrieval/fusion.py. Tuning only, on SciFact train and
the dev sets together, never on SciFact test.

The captures are bench_parts_replay.py's (vectors, keyword lists, exact matches); the postings are
bench_keyword_replay.py's (which rows hold which query term, read once from the index by an FTS5 auxiliary
function and cached beside each pickle). A candidate's matched terms: the chunk's own (chunks_fts) for a long file,
the whole file's (files_fts) for a short file (its keyword part is the whole-file score). Its coverage m = the idf
mass of its matched terms over the query's (idf over the chunks: Lucene's log(1 + (N - n + 0.5) / (n + 0.5)), as
retrieval.confidence.query_idf).

    python benchmarks/bench_keyword_replay.py check train.pkl fiction.pkl nodejs.pkl 13th-age.pkl  (0 differences)
    python benchmarks/bench_term_replay.py sweep train.pkl fiction.pkl nodejs.pkl 13th-age.pkl
    python benchmarks/bench_term_replay.py live train.pkl fiction.pkl nodejs.pkl 13th-age.pkl  (the shipped rule, F14)
    python benchmarks/bench_term_replay.py targets train.pkl fiction.pkl ... [--agreement 0.4 1.0]  (issue 31's targets)
    python benchmarks/bench_term_replay.py consts train.pkl fiction.pkl ...  (the shipped rule's constants, F15)
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _devsets as ds  # noqa: E402
import bench_keyword_replay as kr  # noqa: E402
import bench_parts_replay as pr  # noqa: E402


@dataclass
class Ctx:
    """One query's candidates as a rule sees them: `p` (bench_parts_replay.prep: vz, lex, vrank, ...), `m` each
    candidate's coverage, `held` (candidates x terms, 0/1), `idf` per term, `wq` the shipped (F8) keyword weight."""

    p: dict[str, Any]
    m: np.ndarray
    held: np.ndarray
    idf: np.ndarray
    wq: float
    df: np.ndarray  # per term: how many chunks hold it

    def rare(self, min_idf: float) -> np.ndarray:
        """Per candidate: how many distinct query terms of idf >= min_idf it holds."""
        if not len(self.idf):
            return np.zeros(len(self.m))
        return (self.held & (self.idf >= min_idf)).sum(axis=1)

    def few(self, max_df: int) -> np.ndarray:
        """Per candidate: how many distinct query terms it holds that at most max_df chunks hold (rare by count,
        not by the corpus's size)."""
        if not len(self.df):
            return np.zeros(len(self.m))
        return (self.held & (self.df <= max_df)).sum(axis=1)

    def relative(self) -> np.ndarray:
        """Each candidate's coverage over the best candidate's."""
        return self.m / max(float(self.m.max()), 1e-9) if len(self.m) else self.m

    def raise_by(self, x: np.ndarray) -> np.ndarray:
        """The keyword weight raised from the query's (F8) toward the whole KEYWORD_WEIGHT by x (0..1)."""
        return self.wq + (KEYWORD_WEIGHT - self.wq) * x


Rule = Callable[[Ctx], "np.ndarray | float"]
KEYWORD_WEIGHT = 0.5  # as retrieval/fusion.py
SHIP_TRAIN = 0.7530  # the brief's bar: train hybrid, and no dev recall@10 cell below F8's, MRR within 0.02
MRR_SLACK = 0.02


def term_sets(raw: dict[str, Any], post: kr.Postings, q: dict[str, Any]) -> dict[str, Any]:
    """A query's terms (FTS5 expressions), their idf, and per term the chunk ids / file paths holding it."""
    exprs = list(dict.fromkeys(kr.query_exprs(q["q"], None)))
    rows, _ = post.stats("chunks_fts")
    idf, df, chunks, files = [], [], [], []
    for e in exprs:
        cids, _ = post.term("chunks_fts", e)
        fids, _ = post.term("files_fts", e)
        n = len(cids)
        df.append(n)
        idf.append(math.log(1.0 + (rows - n + 0.5) / (n + 0.5)))
        chunks.append(set(cids.tolist()))
        files.append({raw["file_rows"][r][0] for r in fids.tolist() if r in raw["file_rows"]})
    return {"idf": np.array(idf), "df": np.array(df), "chunks": chunks, "files": files, "rows": rows}


def candidate_terms(c: pr.Corpus, q: dict[str, Any], p: dict[str, Any], ts: dict[str, Any]) -> np.ndarray:
    """Per candidate, per query term: does the candidate hold it (0/1 matrix, candidates x terms)."""
    cids = c.ids[p["pos"]]
    paths = [c.fnames[f] for f in p["fid"]]
    short = {path for path, _, size in q["files"] if size <= pr.SHORT_FILE_BYTES}
    out = np.zeros((len(cids), len(ts["idf"])), dtype=bool)
    for j, (cs, fs) in enumerate(zip(ts["chunks"], ts["files"], strict=True)):
        out[:, j] = [(path in fs) if path in short else (int(x) in cs) for x, path in zip(cids, paths, strict=True)]
    return out


def prepare(corpora: list[tuple[dict[str, Any], pr.Corpus, kr.Postings]]) -> list[tuple[pr.Corpus, list[Any]]]:
    out = []
    for raw, c, post in corpora:
        items = []
        for q in c.queries.values():
            p = pr.prep(c, q)
            ts = term_sets(raw, post, q)
            held = candidate_terms(c, q, p, ts)
            total = ts["idf"].sum()
            m = (held @ ts["idf"]) / total if total > 0 else np.zeros(len(held))
            items.append((q, p, m, held, ts))
        post.save()
        out.append((c, items))
    return out


def fuse_with(p: dict[str, Any], w_c: np.ndarray | float) -> list[int]:
    if p["use_lex"] and p["use_vec"]:
        s = 0.6 * p["vz"] + w_c * p["lex"]
    else:
        s = (1.0 if p["use_vec"] else 0.0) * p["vz"] + (0.0 if p["use_vec"] else 1.0) * p["lex"]
    order = np.lexsort((-s, ~p["exact"]))[: p["max_results"]]
    return pr._distinct(p["fid"][order], 10)


def ramp(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    return np.clip((x - lo) / (hi - lo), 0.0, 1.0)


def evaluate(prepared: list[tuple[pr.Corpus, list[Any]]], rule: Rule | None) -> dict[tuple[str, str], list[float]]:
    """Per (corpus, kind): each query's quality (nDCG@10, or 1/rank within 10) under `rule` (None: F8)."""
    res: dict[tuple[str, str], list[float]] = defaultdict(list)
    for c, items in prepared:
        for q, p, m, held, ts in items:
            wq = pr.f8(p["cov"], p["agr"])
            w = wq if rule is None else rule(Ctx(p, m, held, ts["idf"], wq, ts["df"]))
            res[(c.name, q["meta"].get("kind", ""))].append(pr.quality(c, q, fuse_with(p, w)))
    return res


def cells(res: dict[tuple[str, str], list[float]]) -> dict[tuple[str, str], tuple[float, float]]:
    return {k: (sum(x > 0 for x in v) / len(v), sum(v) / len(v)) for k, v in res.items()}


def fmt(res: dict[tuple[str, str], list[float]]) -> str:
    parts = []
    for (_n, kind), (rec, avg) in sorted(cells(res).items()):
        parts.append(f"{avg:.4f}" if not kind else f"{rec:.2f} / {avg:.2f}")
    return " | ".join(parts)


def verdict(res: dict[tuple[str, str], list[float]], base: dict[tuple[str, str], list[float]]) -> str:
    """`ships` when SciFact train >= SHIP_TRAIN and no dev cell falls (recall@10 below F8's, MRR by > 0.02)."""
    now, was = cells(res), cells(base)
    low = [
        f"{n} {k} {r:.2f}/{a:.2f}"
        for (n, k), (r, a) in sorted(now.items())
        if k and (r < was[(n, k)][0] - 1e-9 or a < was[(n, k)][1] - MRR_SLACK - 1e-9)
    ]
    train = [a for (n, k), (_r, a) in now.items() if not k]
    if low:
        return "lower: " + "; ".join(low)
    return "ships" if train and min(train) >= SHIP_TRAIN else "no dev cell lower; train below the bar"


def rules() -> list[tuple[str, Rule]]:
    out: list[tuple[str, Rule]] = []
    # the candidate's own coverage raises its keyword weight from the query's toward the whole
    for lo, hi in ((0.3, 0.7), (0.4, 0.8), (0.5, 0.9), (0.5, 1.0), (0.6, 1.0), (0.4, 1.0), (0.3, 0.9)):
        out.append((f"raise by own coverage {lo}-{hi}", lambda x, lo=lo, hi=hi: x.raise_by(ramp(x.m, lo, hi))))
    # ... instead of the query-level trust
    for lo, hi in ((0.3, 0.7), (0.5, 1.0), (0.2, 0.6)):
        out.append((f"replace: 0.5 x ramp(own coverage {lo}-{hi})", lambda x, lo=lo, hi=hi: 0.5 * ramp(x.m, lo, hi)))
    # ... a fixed weight given in proportion to the candidate's own or relative coverage (no query-level trust)
    for w in (0.4, 0.5):
        for lo, hi in ((0.1, 0.3), (0.2, 0.4), (0.1, 0.5)):
            out.append((f"{w} x ramp(own coverage {lo}-{hi})", lambda x, w=w, lo=lo, hi=hi: w * ramp(x.m, lo, hi)))
        for pw in (1, 2, 4):
            out.append((f"{w} x relative coverage^{pw}", lambda x, w=w, pw=pw: w * x.relative() ** pw))
    # ... only with at least k distinct rare terms (idf >= 3)
    for k in (2, 3, 4):
        for lo, hi in ((0.3, 0.7), (0.5, 1.0)):
            out.append(
                (
                    f"raise by own coverage {lo}-{hi} if >= {k} terms of idf >= 3",
                    lambda x, lo=lo, hi=hi, k=k: x.raise_by(ramp(x.m, lo, hi) * (x.rare(3.0) >= k)),
                )
            )
    # distinct rare terms alone, and beside the candidate's own vector z
    for t in (3.0, 4.0, 5.0, 6.0):
        for k in (2, 3, 4):
            for a in (None, 1.0, 1.5):
                if (k == 4 and t > 3.0) or (a is not None and t == 3.0):
                    continue
                out.append(
                    (
                        f"0.5 with >= {k} terms of idf >= {t}" + (f", x ramp(vector z {a}-{a + 1})" if a else ""),
                        lambda x, t=t, k=k, a=a: x.raise_by(
                            (x.rare(t) >= k) * (1.0 if a is None else ramp(x.p["vz"], a, a + 1))
                        ),
                    )
                )
    # terms that only a few chunks hold (a count, not an idf: the same on a small and a large corpus)
    for d in (3, 10, 30, 100):
        for k in (1, 2, 3):
            for a in (None, 1.0, 1.5):
                out.append(
                    (
                        f"0.5 with >= {k} terms held by <= {d} chunks"
                        + (f", x ramp(vector z {a}-{a + 1})" if a else ""),
                        lambda x, d=d, k=k, a=a: x.raise_by(
                            (x.few(d) >= k) * (1.0 if a is None else ramp(x.p["vz"], a, a + 1))
                        ),
                    )
                )
    # coverage relative to the best candidate's: alone, with a floor on the best's, in the vector list's top d,
    # beside the candidate's vector z, and as a margin over the 10th best file
    for lo in (0.5, 0.7, 0.8):
        out.append((f"raise by relative coverage {lo}-1", lambda x, lo=lo: x.raise_by(ramp(x.relative(), lo, 1.0))))
        for floor in (0.3, 0.4, 0.5):
            out.append(
                (
                    f"raise by relative coverage {lo}-1 when the best holds >= {floor}",
                    lambda x, lo=lo, f=floor: x.raise_by(ramp(x.relative(), lo, 1.0) * (x.m.max() >= f)),
                )
            )
        for depth in (20, 50, 100):
            out.append(
                (
                    f"raise by relative coverage {lo}-1 in the vector top {depth}",
                    lambda x, lo=lo, d=depth: x.raise_by(ramp(x.relative(), lo, 1.0) * (x.p["vrank"] < d)),
                )
            )
        for a, b in ((1.0, 2.0), (1.5, 2.5), (2.0, 3.0), (1.0, 3.0)):
            out.append(
                (
                    f"raise by relative coverage {lo}-1 x ramp(vector z {a}-{b})",
                    lambda x, lo=lo, a=a, b=b: x.raise_by(ramp(x.relative(), lo, 1.0) * ramp(x.p["vz"], a, b)),
                )
            )
    for lo, hi in ((0.1, 0.3), (0.1, 0.4), (0.2, 0.4)):
        out.append(
            (
                f"raise by the margin over the 10th best file's coverage, ramp {lo}-{hi}",
                lambda x, lo=lo, hi=hi: x.raise_by(ramp(x.m - _kth(x.m, x.p, 10), lo, hi)),
            )
        )
    return out


def _kth(m: np.ndarray, p: dict[str, Any], k: int) -> float:
    """The k-th highest coverage among the candidates' files."""
    best: dict[int, float] = {}
    for f, x in zip(p["fid"].tolist(), m.tolist(), strict=True):
        best[f] = max(best.get(f, 0.0), x)
    v = sorted(best.values(), reverse=True)
    return v[k - 1] if len(v) >= k else 0.0


def sweep(args: argparse.Namespace) -> None:
    prepared = prepare(kr.load(args.files))
    base = evaluate(prepared, None)
    header = " | ".join(f"{n} {k or 'nDCG@10'}" for n, k in sorted(base))
    print(f"| rule | {header} | verdict |", flush=True)
    print(f"| F8 (shipped) | {fmt(base)} | - |", flush=True)
    fixed = evaluate(prepared, lambda x: 0.4)
    print(f"| fixed 0.4 | {fmt(fixed)} | {verdict(fixed, base)} |", flush=True)
    for name, rule in rules():
        if args.only and not any(s in name for s in args.only):
            continue
        res = evaluate(prepared, rule)
        print(f"| {name} | {fmt(res)} | {verdict(res, base)} |", flush=True)


def live_coverages(
    loaded: list[tuple[dict[str, Any], pr.Corpus, kr.Postings]], prepared: list[tuple[pr.Corpus, list[Any]]], zlo: float
) -> tuple[dict[int, np.ndarray], int, int]:
    """Each candidate's coverage as the live search defines it (retrieval.confidence.coverages over the chunk's
    words, a short file's over all its chunks' words: the `.extras` of bench_keyword_replay.py), for the candidates
    above the vector z `zlo` (the others: 0), keyed by id(prep dict); with how many were gated and how many of them
    differ from the postings' coverage."""
    from saipling.retrieval.confidence import coverages

    extras = {c.name: raw for raw, c, _post in loaded}
    live_m: dict[int, np.ndarray] = {}
    differ = gated_n = 0
    for c, items in prepared:
        raw = extras[c.name]
        for q, p, m, _held, _ts in items:
            gated = np.nonzero(p["vz"] > zlo)[0] if p["use_lex"] and p["use_vec"] else np.zeros(0, dtype=int)
            short = {path for path, _, size in q["files"] if size <= pr.SHORT_FILE_BYTES}
            texts = []
            for i in gated:
                path = c.fnames[p["fid"][i]]
                ids = raw["chunks_of"][path] if path in short else [int(c.ids[p["pos"][i]])]
                texts.append(" ".join(raw["words"][x] for x in ids))
            ml = np.zeros(len(m))
            ml[gated] = coverages(q["idf"], texts) if texts else []
            live_m[id(p)] = ml
            gated_n += len(gated)
            differ += int((np.abs(ml[gated] - m[gated]) > 1e-6).sum())
    return live_m, gated_n, differ


def live(args: argparse.Namespace) -> None:
    """The shipped per-candidate rule (retrieval/fusion.py `candidate_weights`, row F14) three ways: as swept
    (each candidate's coverage from the postings, the best over every candidate), with the best taken over the top
    keyword hits' coverage (the captured `cov`) and the candidates above the vector z ramp's low end only, and with
    the live search's definition of a candidate's coverage (retrieval.confidence.coverages over the chunk's words,
    a short file's over all its chunks' words: the `.extras` of bench_keyword_replay.py)."""
    from saipling.retrieval import fusion

    rlo, rhi = fusion.CANDIDATE_RELATIVE
    zlo, zhi = fusion.CANDIDATE_VECTOR_Z
    loaded = kr.load(args.files)
    prepared = prepare(loaded)
    live_m, gated_n, differ = live_coverages(loaded, prepared, zlo)
    print(f"gated candidates (vector z > {zlo}): {gated_n}; coverage from the postings != live definition: {differ}")

    def rule(x: Ctx, cheap: bool) -> np.ndarray:
        m = x.m
        gate = ramp(x.p["vz"], zlo, zhi)
        best = max([x.p["cov"], *m[x.p["vz"] > zlo].tolist()]) if cheap else float(m.max(initial=0.0))
        rel = m / best if best > 0 else np.zeros(len(m))
        return x.raise_by(ramp(rel, rlo, rhi) * gate)

    base = evaluate(prepared, None)
    header = " | ".join(f"{n} {k or 'nDCG@10'}" for n, k in sorted(base))
    print(f"| rule | {header} | verdict |", flush=True)
    print(f"| F8 (shipped) | {fmt(base)} | - |", flush=True)
    for name, r in (
        ("postings, best over every candidate", lambda x: rule(x, False)),
        ("postings, best over the top keyword hits + gated", lambda x: rule(x, True)),
        ("live coverage, best over the top keyword hits + gated", shipped_rule(live_m)),
    ):
        res = evaluate(prepared, r)
        print(f"| {name} | {fmt(res)} | {verdict(res, base)} |", flush=True)


def shipped_rule(live_m: dict[int, np.ndarray]) -> Rule:
    """retrieval/fusion.py as it ships: the query's weight (`keyword_trust`) raised per candidate
    (`candidate_weights`) with the live coverage; fusion's constants are read when the rule is made."""
    from saipling.retrieval import fusion

    whole = fusion.KEYWORD_WEIGHT
    rlo, rhi = fusion.CANDIDATE_RELATIVE
    zlo, zhi = fusion.CANDIDATE_VECTOR_Z

    def rule(x: Ctx) -> np.ndarray | float:
        if x.wq >= whole:
            return x.wq
        m = live_m[id(x.p)]
        gated = x.p["vz"] > zlo
        best = max([x.p["cov"], *m[gated].tolist()])
        if best <= 0 or not gated.any():
            return x.wq
        return x.wq + (whole - x.wq) * ramp(m / best, rlo, rhi) * ramp(x.p["vz"], zlo, zhi) * gated

    return rule


class Targets:
    """Issue 31's targets on replayed captures: hybrid recall@10 >= the better single mode - 0.02 on every cell,
    exact and mixed >= 0.98, fiction paraphrases >= vectors only (SciFact: nDCG@10, reported)."""

    def __init__(self, prepared: list[tuple[pr.Corpus, list[Any]]]) -> None:
        self.set_of = {c.name: c.set for c, _items in prepared}
        self.single: dict[tuple[str, str, str], list[float]] = defaultdict(list)
        for c, items in prepared:
            for q, _p, _m, _h, _ts in items:
                for mode in ("lexical", "semantic"):
                    got = pr.quality(c, q, pr.fuse(pr.prep(c, q, mode=mode)))
                    self.single[(c.name, q["meta"].get("kind", ""), mode)].append(got)

    @staticmethod
    def share(v: list[float]) -> float:
        return sum(x > 0 for x in v) / len(v)

    def check(self, res: dict[tuple[str, str], list[float]]) -> tuple[list[str], list[str], float]:
        """(a line per cell, the cells missed, SciFact's nDCG@10 or nan)."""
        lines, missed, train = [], [], float("nan")
        for (name, kind), (rec, avg) in sorted(cells(res).items()):
            kw, vec = self.single[(name, kind, "lexical")], self.single[(name, kind, "semantic")]
            if not kind:
                train = avg
                lines.append(f"{name} | nDCG@10 {avg:.4f} (keywords {np.mean(kw):.4f}, vectors {np.mean(vec):.4f})")
                continue
            rk, rv = self.share(kw), self.share(vec)
            ok = rec >= max(rk, rv) - 0.02 - 1e-9 and (kind == "paraphrase" or rec >= 0.98)
            fiction = ds.corpus_of(self.set_of[name]) == "fiction"  # (fiction-blind too)
            ok = ok and not (fiction and kind == "paraphrase" and rec < rv - 1e-9)
            missed += [] if ok else [f"{name} {kind}"]
            lines.append(
                f"{name} {kind} | hybrid {rec:.2f} / {avg:.2f} | keywords {rk:.2f} / {np.mean(kw):.2f}"
                f" | vectors {rv:.2f} / {np.mean(vec):.2f} | {'met' if ok else 'MISSED'}"
            )
        return lines, missed, train


def _loaded_with_live(files: list[str]) -> tuple[list[Any], list[tuple[pr.Corpus, list[Any]]], dict[int, np.ndarray]]:
    from saipling.retrieval import fusion

    loaded = kr.load(files)
    prepared = prepare(loaded)
    live_m, _n, _d = live_coverages(loaded, prepared, min(fusion.CANDIDATE_VECTOR_Z[0], CONSTS_MIN_Z))
    return loaded, prepared, live_m


def targets(args: argparse.Namespace) -> None:
    """The shipped rule per corpus and kind beside keywords only and vectors only, with issue 31's targets
    (`Targets`). `--agreement LO HI` replays another agreement ramp beside it (fusion.AGREEMENT_RAMP)."""
    from saipling.retrieval import fusion

    if args.agreement and not args.agreement[0] < args.agreement[1]:
        raise SystemExit("--agreement LO HI: LO must be below HI")
    _loaded, prepared, live_m = _loaded_with_live(args.files)
    t = Targets(prepared)

    def show(label: str) -> None:
        lines, missed, _train = t.check(evaluate(prepared, shipped_rule(live_m)))
        for line in lines:
            print(f"{label} | {line}")
        print(f"{label}: {'every target met' if not missed else 'missed: ' + ', '.join(missed)}", flush=True)

    show(f"shipped (agreement ramp {fusion.AGREEMENT_RAMP})")
    if args.agreement:
        fusion.AGREEMENT_RAMP = tuple(args.agreement)
        show(f"agreement ramp {fusion.AGREEMENT_RAMP}")


# the grid of `consts` (row F15): fusion's constants around the shipped ones
CONSTS_GRID = {
    "KEYWORD_WEIGHT": (0.4, 0.45, 0.5, 0.55),
    "AGREEMENT_RAMP": ((0.4, 1.0), (0.5, 1.0), (0.6, 1.0)),
    "KEYWORD_COVERAGE": ((0.3, 0.7), (0.3, 0.8), (0.25, 0.75)),
    "CANDIDATE_VECTOR_Z": ((1.0, 2.0), (0.75, 2.0), (1.0, 1.75), (1.25, 2.0)),
    "CANDIDATE_RELATIVE": ((0.5, 1.0), (0.4, 1.0), (0.3, 0.9)),
}
CONSTS_MIN_Z = 0.75  # the grid's lowest vector z gate: live coverage is read above it
CONSTS_SIZES = ((2000, 0.5), (3000, 0.5), (4000, 0.5), (5000, 0.5), (8000, 0.5), (3000, 0.3), (3000, 0.7))


def consts(args: argparse.Namespace) -> None:
    """The shipped rule's constants swept on the grid (CONSTS_GRID: 432 combinations, each with `Targets`), then
    the short-file size and the long files' whole-file share (SHORT_FILE_BYTES, LONG_FILE_MIX of retrieval/search.py)
    with the shipped constants. Tuning only: SciFact train and the dev sets, never test."""
    import itertools

    from saipling.retrieval import fusion

    loaded, prepared, live_m = _loaded_with_live(args.files)
    t = Targets(prepared)
    shipped = {k: getattr(fusion, k) for k in CONSTS_GRID}
    rows = []
    try:
        for values in itertools.product(*CONSTS_GRID.values()):
            for k, v in zip(CONSTS_GRID, values, strict=True):
                setattr(fusion, k, v)
            _lines, missed, train = t.check(evaluate(prepared, shipped_rule(live_m)))
            now = dict(zip(CONSTS_GRID, values, strict=True))
            label = ", ".join(f"{k} {v}" for k, v in now.items()) + (" (shipped)" if now == shipped else "")
            rows.append((train, not missed, label))
    finally:
        for k, v in shipped.items():
            setattr(fusion, k, v)
    rows.sort(key=lambda r: -r[0])
    met = [r for r in rows if r[1]]
    print(f"{len(rows)} combinations; SciFact train {rows[-1][0]:.4f} - {rows[0][0]:.4f}; {len(met)} meet every target")
    for train, ok, label in [r for r in rows if "(shipped)" in r[2]] + met[: args.top]:
        print(f"| {label} | {train:.4f} | {'every target met' if ok else 'missed'} |")
    sizes = (pr.SHORT_FILE_BYTES, pr.LONG_FILE_MIX)
    try:
        for size, mix in CONSTS_SIZES:
            pr.SHORT_FILE_BYTES, pr.LONG_FILE_MIX = size, mix
            again = prepare(loaded)
            live_again, _n, _d = live_coverages(loaded, again, fusion.CANDIDATE_VECTOR_Z[0])
            _lines, missed, train = Targets(again).check(evaluate(again, shipped_rule(live_again)))
            verdict = "every target met" if not missed else "missed: " + ", ".join(missed)
            print(f"| SHORT_FILE_BYTES {size}, LONG_FILE_MIX {mix} | {train:.4f} | {verdict} |", flush=True)
    finally:
        pr.SHORT_FILE_BYTES, pr.LONG_FILE_MIX = sizes


def features(args: argparse.Namespace) -> None:
    """Where the keyword weight is low (F8 < 0.2; SciFact claims and dev-set paraphrases): the features of the
    candidate that holds the most of the query's idf mass, split by whether it is relevant (quartiles)."""
    groups: dict[tuple[str, bool], list[list[float]]] = defaultdict(list)
    for c, items in prepare(kr.load(args.files)):
        for q, p, m, held, ts in items:
            meta = q["meta"]
            if meta.get("kind") in ("exact", "mixed") or pr.f8(p["cov"], p["agr"]) >= 0.2 or not len(ts["idf"]):
                continue
            x = Ctx(p, m, held, ts["idf"], 0.0, ts["df"])
            i = int(np.argmax(m))
            relevant = c.fnames[p["fid"][i]] in (set(meta["rel"]) if "rel" in meta else {meta["file"]})
            row = [m[i], x.rare(4.0)[i], x.rare(5.0)[i], x.few(30)[i], float(ts["idf"][held[i]].max(initial=0.0))]
            groups[(c.name, relevant)].append(row + [float(p["vz"][i]), float(min(p["vrank"][i], 999))])
    names = ("coverage", "terms idf>=4", "terms idf>=5", "terms df<=30", "max idf", "vector z", "vector rank")
    for (name, relevant), rows in sorted(groups.items()):
        a = np.array(rows)
        q = np.percentile(a, (25, 50, 75), axis=0)
        stats = ", ".join(f"{n} {q[0, j]:.2f}/{q[1, j]:.2f}/{q[2, j]:.2f}" for j, n in enumerate(names))
        print(f"{name}, best-covered candidate {'relevant' if relevant else 'not relevant'} ({len(rows)}): {stats}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sweep")
    s.add_argument("files", nargs="+")
    s.add_argument("--only", action="append", help="rules whose name holds this text (repeatable)")
    f = sub.add_parser("features")
    f.add_argument("files", nargs="+")
    v = sub.add_parser("live", help="the shipped rule (F14): as swept, with the cheap best, with live coverage")
    v.add_argument("files", nargs="+")
    t = sub.add_parser("targets", help="the shipped rule beside both single modes, with issue 31's targets")
    t.add_argument("files", nargs="+")
    t.add_argument("--agreement", nargs=2, type=float, metavar=("LO", "HI"), help="also this agreement ramp")
    k = sub.add_parser("consts", help="the shipped rule's constants on a grid, with issue 31's targets (F15)")
    k.add_argument("files", nargs="+")
    k.add_argument("--top", type=int, default=10, help="how many of the best that meet every target to list")
    args = p.parse_args()
    {"sweep": sweep, "features": features, "live": live, "targets": targets, "consts": consts}[args.cmd](args)


if __name__ == "__main__":
    main()

"""The keyword scorer replayed (issue 31, benchmarks/README.md row F12): BM25's k1 and b, the query's stop words,
a field-weighted BM25F, for the chunk list and the whole-file list, each with the fused result. Tuning only, on
SciFact train and the dev sets, never on SciFact test.

bench_parts_replay.py captures a query's parts (its vector, the keyword lists, the exact matches) and rebuilds
retrieval/search.py's ranking from them. This script recomputes the two keyword lists themselves for any scorer:
every term's postings (rows holding it, per column, and those rows' column sizes) are read once from the index by an
FTS5 auxiliary function, then each query's rows are scored in numpy, the chunk list (the top max(100, 4 x
maxResults)) and the whole-file list (the top NORM_POOL) replace the captured ones, the keyword coverage that
retrieval/fusion.py measures is recomputed from the new top hits, and bench_parts_replay ranks the candidates.
Exact: the base variant (FTS5's k1 1.2, b 0.75, every column weight 1, the shipped stop words) reproduces the
captured lists (`check` prints how many queries differ) and bench_parts_replay's F8 figures.

    python benchmarks/bench_parts_replay.py capture --scifact-root DIR --out train.pkl     (then the dev sets)
    python benchmarks/bench_keyword_replay.py extras train.pkl                              (idf, chunk words)
    python benchmarks/bench_keyword_replay.py sweep train.pkl fiction.pkl nodejs.pkl 13th-age.pkl

The pickles name their index (`root`); the postings are cached beside each pickle (`.postings`).
"""

from __future__ import annotations

import argparse
import math
import pickle
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchutil  # noqa: E402,F401  (puts the server on sys.path)
import bench_parts_replay as pr  # noqa: E402

KEYWORD_EVIDENCE_DEPTH = 10  # as retrieval/fusion.py

# A fuller English stop list (the shipped one, markdown.terms.STOPWORDS, holds 50 words): function words only,
# no negations (`not`, `no`: a claim's polarity) and no quantities
MORE_STOPWORDS = frozenset(
    "about above after again against all also am any because been before being below between both can could did do "
    "does doing down during each few further had having here him himself if itself just may me might more most must "
    "my myself nor now off once only other our ours out over own same shall should so some such than too under until "
    "up upon us very via we whether while whom whose within without would yet".split()
)


# -- postings --------------------------------------------------------------------------------------------------
class Postings:
    """Per FTS table of one index: each term expression's rows and per-column counts, and the rows' column sizes,
    read by an auxiliary function (cached in a side file)."""

    def __init__(self, db: Path, cache: Path) -> None:
        import apsw

        self.conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
        self.cache = cache
        self.data: dict[str, Any] = {"terms": {}, "sizes": {}, "stats": {}}
        if cache.exists():
            with open(cache, "rb") as fh:
                self.data = pickle.load(fh)
        self.dirty = False
        self._sizes: dict[tuple[str, int], np.ndarray] = {}
        self._got: list[tuple[int, tuple[int, ...], tuple[int, ...]]] = []
        self._stats: tuple[int, tuple[int, ...]] | None = None
        self.conn.register_fts5_function("kw_capture", self._capture)

    def _capture(self, api: Any) -> int:
        ncol = api.column_count
        locs = api.phrase_locations(0)
        counts = tuple(len(c) for c in locs)
        sizes = tuple(api.column_size(c) for c in range(ncol))
        if self._stats is None:
            self._stats = (api.row_count, tuple(api.column_total_size(c) for c in range(ncol)))
        self._got.append((api.rowid, counts, sizes))
        return 0

    def stats(self, table: str) -> tuple[int, np.ndarray]:
        """(rows, total tokens per column) of `table`."""
        return self.data["stats"][table]

    def term(self, table: str, expr: str) -> tuple[np.ndarray, np.ndarray]:
        """(rowids, counts per column) of the rows matching one term expression."""
        key = (table, expr)
        if key not in self.data["terms"]:
            self._got, self._stats = [], None
            for _ in self.conn.execute(f"SELECT kw_capture({table}) FROM {table} WHERE {table} MATCH ?", (expr,)):
                pass
            got = self._got
            ids = np.array([g[0] for g in got], dtype=np.int64)
            counts = np.array([g[1] for g in got], dtype=np.float64) if got else np.zeros((0, 1))
            sizes = self.data["sizes"].setdefault(table, {})
            for rid, _, sz in got:
                sizes[rid] = sz
            if self._stats is not None and table not in self.data["stats"]:
                rows, totals = self._stats
                self.data["stats"][table] = (rows, np.array(totals, dtype=np.float64))
            self.data["terms"][key] = (ids, counts)
            self.dirty = True
        return self.data["terms"][key]

    def size_array(self, table: str, ids: np.ndarray) -> np.ndarray:
        """The column sizes of rows `ids` (memoised per array: the postings are fixed)."""
        key = (table, id(ids))
        got = self._sizes.get(key)
        if got is None:
            s = self.data["sizes"][table]
            got = self._sizes[key] = np.array([s[int(i)] for i in ids], dtype=np.float64)
        return got

    def save(self) -> None:
        if self.dirty:
            with open(self.cache, "wb") as fh:
                pickle.dump(self.data, fh)
            self.dirty = False


# -- scorers ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Scorer:
    """A keyword scorer: BM25 (FTS5's: one saturation over the column-weighted term count, the row's whole size)
    or BM25F (`bm25f`: each column's count normalised by its own size against that column's average, weighted,
    then saturated once). `idf`: "fts5" (log((N - n + 0.5) / (n + 0.5)), 1e-6 when <= 0) or "lucene" (log(1 +
    ...), never below 0)."""

    k1: float = 1.2
    b: float = 0.75
    weights: tuple[float, ...] = ()  # per column (missing: 1)
    bm25f: bool = False
    col_b: tuple[float, ...] = ()  # BM25F: b per column (missing: `b`)
    idf: str = "fts5"

    def idf_of(self, rows: int, holding: int) -> float:
        if self.idf == "lucene":
            return math.log(1.0 + (rows - holding + 0.5) / (holding + 0.5))
        v = math.log((rows - holding + 0.5) / (holding + 0.5))
        return v if v > 0 else 1e-6

    def score(self, post: Postings, table: str, exprs: list[str]) -> list[tuple[int, float]]:
        """(rowid, score) of every row matching one of `exprs`, best first (ties: rowid order)."""
        lists = [post.term(table, e) for e in exprs]
        if table not in post.data["stats"]:
            return []
        rows, totals = post.stats(table)
        ncol = len(totals)
        w = np.array([self.weights[c] if c < len(self.weights) else 1.0 for c in range(ncol)])
        avg_all = totals.sum() / max(1, rows)
        avg_col = totals / max(1, rows)
        cb = np.array([self.col_b[c] if c < len(self.col_b) else self.b for c in range(ncol)])
        all_ids = [ids for ids, _ in lists if len(ids)]
        if not all_ids:
            return []
        uniq, inv = np.unique(np.concatenate(all_ids), return_inverse=True)
        acc = np.zeros(len(uniq))
        at = 0
        for ids, counts in lists:
            if not len(ids):
                continue
            idf = self.idf_of(rows, len(ids))
            sizes = post.size_array(table, ids)
            if self.bm25f:
                norm = 1.0 - cb + cb * sizes / np.where(avg_col > 0, avg_col, 1.0)
                tf = (counts * w / norm).sum(axis=1)
                sc = idf * tf * (self.k1 + 1.0) / (tf + self.k1)
            else:
                tf = counts @ w
                dl = sizes.sum(axis=1)
                sc = idf * tf * (self.k1 + 1.0) / (tf + self.k1 * (1.0 - self.b + self.b * dl / avg_all))
            acc += np.bincount(inv[at : at + len(ids)], weights=sc, minlength=len(uniq))
            at += len(ids)
        order = np.lexsort((uniq, -acc))
        return list(zip(uniq[order].tolist(), acc[order].tolist(), strict=True))


@dataclass(frozen=True)
class Variant:
    name: str
    chunk: Scorer = field(default_factory=Scorer)
    file: Scorer = field(default_factory=Scorer)
    stopwords: frozenset[str] | None = None  # None: the shipped list


def query_exprs(text: str, stopwords: frozenset[str] | None) -> list[str]:
    """The FTS5 expressions of a query's keyword terms (markdown.terms.keyword_terms with `stopwords`)."""
    from saipling.markdown import terms as mt
    from saipling.storage.base import KeywordQuery
    from saipling.storage.sqlite import fts_bound

    saved = mt.STOPWORDS
    if stopwords is not None:
        mt.STOPWORDS = stopwords
    try:
        q = KeywordQuery.parse(text[:2000])
    finally:
        mt.STOPWORDS = saved
    return [fts_bound.term_expression(t) for t in q.terms] if q else []


# -- replay ----------------------------------------------------------------------------------------------------
def lists(
    c: dict[str, Any], post: Postings, q: dict[str, Any], v: Variant
) -> tuple[list[tuple[int, float]], list[tuple[str, float, int]]]:
    """A query's keyword chunk list and whole-file list under variant `v`, as the store returns them."""
    exprs = query_exprs(q["q"], v.stopwords)
    if not exprs:
        return [], []
    n_cand = max(100, c["max_results"] * 4)
    kw = v.chunk.score(post, "chunks_fts", exprs)[:n_cand]
    top = v.file.score(post, "files_fts", exprs)[: pr.NORM_POOL]
    files = [(c["file_rows"][r][0], s, c["file_rows"][r][1]) for r, s in top if r in c["file_rows"]]
    return kw, files


def coverage(c: dict[str, Any], q: dict[str, Any], kw: list[tuple[int, float]], files: list[Any]) -> float:
    """retrieval/fusion.weigh's keyword coverage for these lists (the top hits, and the short files among the
    top files as a whole)."""
    from saipling.retrieval.confidence import coverages

    words = c["words"]
    top = [cid for cid, _ in kw[:KEYWORD_EVIDENCE_DEPTH]]
    short_top = [p for p, _, size in files[:KEYWORD_EVIDENCE_DEPTH] if size <= pr.SHORT_FILE_BYTES]
    texts = [words[cid] for cid in top if cid in words]
    texts += [" ".join(words[x] for x in c["chunks_of"][p] if x in words) for p in short_top]
    return max(coverages(q["idf"], texts), default=0.0) if texts else 0.0


class _CachedV:
    """A corpus's vector matrix whose products with a query's vector are kept (the vector side is the same in
    every variant: bench_parts_replay.prep multiplies it by the query's vector each time)."""

    def __init__(self, V: np.ndarray) -> None:
        self.V = V
        self.shape = V.shape
        self._sims: dict[int, np.ndarray] = {}

    def __matmul__(self, qvec: np.ndarray) -> np.ndarray:
        got = self._sims.get(id(qvec))
        if got is None:
            got = self._sims[id(qvec)] = self.V @ qvec
        return got


def run(
    corpora: list[tuple[dict[str, Any], pr.Corpus, Postings]], v: Variant, modes: Iterable[str] = ("hybrid",)
) -> dict[str, dict[str, list[float]]]:
    """Per mode, per (corpus, kind): the quality of each query (nDCG@10, or 1/rank within 10)."""
    out: dict[str, dict[str, list[float]]] = {m: defaultdict(list) for m in modes}
    for raw, c, post in corpora:
        for q in c.queries.values():
            kw, files = lists(raw, post, q, v)
            q2 = q | {"kw": kw, "files": files}
            if "hybrid" in out:
                q2["cov"] = coverage(raw, q, kw, files)
            for m in out:
                files_ranked = pr.fuse(pr.prep(c, q2, mode=m))
                out[m][(c.name, q["meta"].get("kind", ""))].append(pr.quality(c, q, files_ranked))
        post.save()
    return out


def cells(res: dict[str, list[float]]) -> dict[tuple[str, str], tuple[float, float]]:
    """(recall@10, mean quality) per cell."""
    return {k: (sum(x > 0 for x in v) / len(v), sum(v) / len(v)) for k, v in res.items()}


def fmt(res: dict[str, list[float]]) -> str:
    parts = []
    for (_name, kind), (rec, avg) in sorted(cells(res).items()):
        parts.append(f"{avg:.4f}" if not kind else f"{rec:.2f} / {avg:.2f}")
    return " | ".join(parts)


def load(paths: list[str]) -> list[tuple[dict[str, Any], pr.Corpus, Postings]]:
    out = []
    names: set[str] = set()
    for f in paths:
        with open(f, "rb") as fh:
            raw = pickle.load(fh)
        if raw.get("name", "") in names:  # (the tables and the extras are keyed by it)
            raise SystemExit(f"{f}: a second capture named {raw.get('name')!r} (capture --name gives each its own)")
        names.add(raw.get("name", ""))
        with open(f + ".extras", "rb") as fh:
            raw |= pickle.load(fh)
        for key, q in raw["queries"].items():
            q["idf"] = raw["idf"][key]
        db = Path(raw["root"]) / ".saipling" / "index.db"
        c = pr.Corpus(raw)
        c.V = _CachedV(c.V)  # type: ignore[assignment]
        out.append((raw, c, Postings(db, Path(f + ".postings"))))
    return out


def extras(args: argparse.Namespace) -> None:
    """What the replay needs beyond bench_parts_replay's capture: each query's idf (retrieval.confidence), every
    chunk's words as coverage reads them, the files' rows (files_fts rowid -> path, size)."""
    from saipling.project import Project
    from saipling.retrieval.confidence import chunk_words, query_idf

    for f in args.files:
        with open(f, "rb") as fh:
            raw = pickle.load(fh)
        project = Project.open(Path(raw["root"]), overrides={"provider": "local"})
        st = project.store
        ids = [int(x) for x in raw["ids"]]
        rows = {}
        for i in range(0, len(ids), 500):
            rows.update(st.chunks_by_id(ids[i : i + 500]))
        words = {cid: chunk_words(r) for cid, r in rows.items()}
        chunks_of: dict[str, list[int]] = defaultdict(list)
        for cid, p in zip(ids, raw["paths"], strict=True):
            chunks_of[p].append(cid)
        conn = st.conn
        file_rows = {int(r): (str(p), int(n or 0)) for r, p, n in conn.execute("SELECT rowid, path, size FROM files")}
        idf = {key: query_idf(project, q["q"][:2000]) for key, q in raw["queries"].items()}
        with open(f + ".extras", "wb") as fh:
            pickle.dump({"words": words, "chunks_of": dict(chunks_of), "file_rows": file_rows, "idf": idf}, fh)
        print(f"{f}: {len(words)} chunks, {len(file_rows)} files, {len(idf)} queries")


def check(args: argparse.Namespace) -> None:
    """The base variant against the captured lists: queries whose top 10 chunk ids / files / coverage differ."""
    for raw, _c, post in load(args.files):
        bad_kw = bad_f = bad_cov = 0
        for q in raw["queries"].values():
            kw, files = lists(raw, post, q, Variant("base"))
            if [i for i, _ in kw[:10]] != [i for i, _ in q["kw"][:10]]:
                bad_kw += 1
            if [p for p, _, _ in files[:10]] != [p for p, _, _ in q["files"][:10]]:
                bad_f += 1
            if abs(coverage(raw, q, kw, files) - q["cov"]) > 1e-6:
                bad_cov += 1
        post.save()
        n = len(raw["queries"])
        print(f"{raw['name']}: {n} queries; top 10 chunks differ {bad_kw}, top 10 files {bad_f}, coverage {bad_cov}")


VARIANTS: dict[str, Callable[[], list[Variant]]] = {}


def default_variants() -> list[Variant]:
    from saipling.markdown.terms import STOPWORDS

    more = STOPWORDS | MORE_STOPWORDS
    vs = [Variant("base (FTS5 bm25 k1 1.2 b 0.75, shipped stop words)")]
    for k1, b in ((0.9, 0.4), (1.2, 0.4), (0.9, 0.75), (1.5, 0.75), (1.2, 0.9), (0.7, 0.3), (1.2, 0.6)):
        s = Scorer(k1=k1, b=b)
        vs.append(Variant(f"chunks and files k1 {k1} b {b}", chunk=s, file=s))
        vs.append(Variant(f"chunks k1 {k1} b {b}", chunk=s))
        vs.append(Variant(f"files k1 {k1} b {b}", file=s))
    for k1, b in (
        (1.5, 0.9),
        (2.0, 0.75),
        (2.0, 1.0),
        (1.2, 1.0),
        (3.0, 0.9),
        (1.05, 0.75),
        (1.35, 0.75),
        (1.2, 0.65),
        (1.2, 0.85),
    ):
        vs.append(Variant(f"files k1 {k1} b {b}", file=Scorer(k1=k1, b=b)))
    vs.append(Variant("more stop words", stopwords=more))
    vs.append(Variant("no stop words", stopwords=frozenset()))
    vs.append(Variant("lucene idf", chunk=Scorer(idf="lucene"), file=Scorer(idf="lucene")))
    for hw in (0.5, 2.0):
        vs.append(Variant(f"BM25F heading weight {hw}", chunk=Scorer(bm25f=True, weights=(1.0, hw, 1.0, 1.0))))
    vs.append(Variant("BM25F weights 1", chunk=Scorer(bm25f=True)))
    return vs


def sweep(args: argparse.Namespace) -> None:
    corpora = load(args.files)
    variants = default_variants()
    if args.only:
        variants = [v for v in variants if any(s in v.name for s in args.only)]
    modes = ("hybrid", "lexical") if args.lexical else ("hybrid",)
    header = None
    for v in variants:
        res = run(corpora, v, modes)
        if header is None:
            header = " | ".join(f"{n} {k or 'nDCG@10'}" for n, k in sorted(res["hybrid"]))
            print(f"| variant | mode | {header} |", flush=True)
        for m in modes:
            print(f"| {v.name} | {m} | {fmt(res[m])} |", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("extras", "check"):
        s = sub.add_parser(name)
        s.add_argument("files", nargs="+")
    s = sub.add_parser("sweep")
    s.add_argument("files", nargs="+")
    s.add_argument("--only", action="append", help="variants whose name holds this text (repeatable)")
    s.add_argument("--lexical", action="store_true", help="keywords-only figures too")
    args = p.parse_args()
    {"extras": extras, "check": check, "sweep": sweep}[args.cmd](args)


if __name__ == "__main__":
    main()

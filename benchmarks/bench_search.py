"""Benchmark 2: hybrid search end to end (query embedding cached): p50 and p95.

Two projects:
  fiction    a copy of ../shared/corpora/fiction-chapters indexed with `local` when installed, else `none`
             (then hybrid degrades to keyword search and says so). The indexed copy is cached under
             /tmp/saipling-bench (override with SAIPLING_BENCH_CACHE) and reused across runs: the full local index
             takes several minutes on 2 cores.
  synthetic  100k chunks (10k with --quick): random text from a Zipf-distributed vocabulary + random unit vectors
             (384 dims) written through Store.replace_file into a Project over a temp root (cached too), with a
             deterministic in-process provider for query vectors.

Each query is run once to warm the query-embedding LRU and the vector matrix, then every query is timed
ROUNDS times through Project.search (parse, filters, KNN + FTS5, fusion, materialise, search log), interleaving
modes. Besides hybrid we time lexical and semantic on the same queries, and the two store calls hybrid makes
(store.knn and store.keyword_search, 100 candidates), to show where the time goes; then a few times: rewrite
one file through Store.replace_file (as an editor sync pass does) and time the first search after it (the
cached vector matrix is invalidated by any write and reloaded from vec0 by that search).

    python benchmarks/bench_search.py            # fiction + 100k synthetic
    python benchmarks/bench_search.py --quick    # fiction subset (12 chapters with local, 60 without) + 10k synthetic
"""

from __future__ import annotations

import hashlib
import shutil
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchutil as bu  # noqa: E402

from saipling.embeddings.base import EmbeddingProvider, EmbeddingResult  # noqa: E402
from saipling.project import Project  # noqa: E402
from saipling.storage.base import (  # noqa: E402
    ChunkRow,
    FileRecord,
    KeywordQuery,  # noqa: E402
)

ROUNDS = 5
REWRITES = 7  # one-file writes, each followed by one timed search (the matrix reload)
N_CAND = 100  # what run_search asks each side for (max(100, 4 * maxResults))

FICTION_QUERIES = [
    "a detective examines footprints in the mud",
    "Sherlock Holmes",
    "the count's castle in Transylvania",
    "a ship caught in a terrible storm at sea",
    "who inherits the estate after the father dies?",
    "balloon journey across Africa",
    "a girl falls down a rabbit hole",
    "wolves howling in the snow",
    "Mr. Darcy proposes to Elizabeth",
    "time machine travels to the future",
    "a whale hunt",
    "letters between two sisters about marriage",
    "the Martians attack London",
    "a boy runs away from the workhouse",
    "the tin woodman and the scarecrow",
    "why does the captain refuse to go ashore?",
    "a secret passage behind the library shelves",
    "gold rush in the Yukon",
    "jungle apes raise a human child",
    "an invisible man steals clothes",
    "a duel at dawn",
    "debt prison",
    "the governess hears strange noises at night",
    "submarine under the ocean",
    "train journey around the world in eighty days",
    "a lost will",
    "fog over the moor",
    "a ball where the heroine dances with a stranger",
    "poison in the wine",
    "how did the prisoner escape from the island fortress?",
]


class SyntheticProvider(EmbeddingProvider):
    """Deterministic unit vectors from a hash of the text (stands in for a model; no network, no weights)."""

    name = "synthetic"
    model = "synthetic-384"
    dimensions = 384
    max_input_tokens = 512

    def _embed_batch(self, texts: list[str], input_type: str) -> EmbeddingResult:
        out = np.empty((len(texts), self.dimensions), dtype=np.float32)
        for i, t in enumerate(texts):
            seed = int.from_bytes(hashlib.sha256(t.encode("utf-8")).digest()[:8], "big")
            out[i] = np.random.default_rng(seed).standard_normal(self.dimensions, dtype=np.float32)
        return EmbeddingResult(out, sum(len(t.split()) for t in texts))


def vocabulary(n: int, rng: np.random.Generator) -> list[str]:
    syll = [
        "ka",
        "lo",
        "ren",
        "mi",
        "tor",
        "sa",
        "vel",
        "du",
        "an",
        "ith",
        "mor",
        "el",
        "quo",
        "ra",
        "fen",
        "ul",
        "bri",
        "nes",
        "ta",
        "gon",
        "ser",
        "py",
        "lum",
        "dra",
        "ok",
        "ve",
        "hal",
        "cin",
        "zo",
        "mar",
    ]
    words: dict[str, None] = {}
    while len(words) < n:
        k = int(rng.integers(1, 5))  # 30 syllables, 1-4 of them: ~837k possible words
        words["".join(syll[int(i)] for i in rng.integers(0, len(syll), k))] = None
    return list(words)


def synthetic_project(n_chunks: int, log=print) -> tuple[Project, list[str]]:
    """A Project over a cached temp root whose store is filled directly; returns it and sample queries."""
    rng = np.random.default_rng(42)
    vocab = vocabulary(30_000, rng)
    ranks = np.arange(1, len(vocab) + 1)
    p = 1.0 / ranks**1.07
    p /= p.sum()
    root = bu.CACHE_ROOT / f"synthetic-{n_chunks // 1000}k"
    marker = root / ".bench-complete"
    provider = SyntheticProvider()
    per_file = 100
    if not marker.exists():
        if root.exists():
            shutil.rmtree(root)
        root.mkdir(parents=True)
        log(f"   building synthetic project {root}: {n_chunks:,} chunks x 384 dims (cached for later runs) ...")
        t0 = time.perf_counter()
        project = Project.open(root, overrides={"provider": "none"}, provider=provider)
        project.store.configure_vectors(provider.name, provider.model, provider.dimensions)
        words_per_chunk = 120
        for f in range(n_chunks // per_file):
            rel = f"notes/part-{f // 100:03d}/note-{f:05d}.md"
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(f"# Note {f}\n\nSynthetic note.\n", encoding="utf-8")
            idx = rng.choice(len(vocab), size=(per_file, words_per_chunk), p=p)
            vecs = rng.standard_normal((per_file, provider.dimensions), dtype=np.float32)
            vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
            rows, vmap = [], {}
            for i in range(per_file):
                text = " ".join(vocab[j] for j in idx[i])
                h = hashlib.sha256(f"{f}:{i}:{text}".encode()).hexdigest()
                rows.append(
                    ChunkRow(
                        i,
                        "section",
                        f"Part {i}",
                        f"Note {f} > Part {i}",
                        3 + i,
                        3 + i,
                        h,
                        text[:200],
                        words_per_chunk,
                        text,
                        "note",
                        None,
                        None,
                        None,
                        None,
                        None,
                        "public",
                        "content",
                    )
                )
                vmap[h] = vecs[i]
            project.store.replace_file(FileRecord(rel, f"file{f}", 0, 0, "note", "utf-8"), rows, vmap, None)
        project.close()
        marker.write_text(f"{n_chunks} chunks\n", encoding="utf-8")
        log(f"   built in {time.perf_counter() - t0:.1f} s")
    project = Project.open(root, overrides={"provider": "none"}, provider=provider)
    qrng = np.random.default_rng(7)
    queries = []
    for i in range(30):
        k = int(qrng.integers(1, 7))
        queries.append(" ".join(vocab[int(j)] for j in qrng.integers(30, 3000, k)) + ("?" if i % 5 == 0 else ""))
    return project, queries


def rewrite_one_file(project: Project, path: str) -> None:
    """Write one file's chunks and vectors back unchanged through Store.replace_file (what a sync pass does)."""
    store = project.store
    rows = store.chunks_for_path(path)
    vecs = store.chunk_vectors([r.id for r in rows])
    f = store.get_file(path)
    record = FileRecord(
        f.path,
        f.content_hash,
        f.mtime_ns,
        f.size,
        f.file_type,
        f.encoding,
        f.entity_type,
        f.entity_name,
        f.display_name,
        list(f.aliases),
        f.book_id,
        f.chapter_id,
        f.visibility,
        f.corpus,
        f.warning,
    )
    chunks = [r.chunk_row() for r in rows]
    store.replace_file(record, chunks, {r.content_hash: vecs[r.id] for r in rows if r.id in vecs}, None)


def measure(project: Project, queries: list[str], label: str) -> list[tuple]:
    modes = ["hybrid", "lexical", "semantic"]
    degraded = None
    for q in queries:  # warm: query-embedding LRU, vector matrix, SQLite page cache
        for m in modes:
            res = project.search({"query": q, "mode": m, "maxResults": 5})
            degraded = degraded or (res["degraded"] if m == "hybrid" else None)
    times: dict[str, list[float]] = {m: [] for m in modes}
    one = bu.blas_one_thread()
    if one is not None:
        times["hybrid, 1 BLAS thread"] = []
    times["store.knn (100)"] = []
    if one is not None:
        times["store.knn (100), 1 BLAS thread"] = []
    times["store.keyword_search (100)"] = []
    vec_ok = degraded is None
    cache = getattr(project, "query_cache", None)
    step = 0
    for _ in range(ROUNDS):
        for q in queries:
            step += 1
            order = modes[step % 3 :] + modes[: step % 3]
            for m in order:
                t, _ = bu.timed(lambda q=q, m=m: project.search({"query": q, "mode": m, "maxResults": 5}))
                times[m].append(t)
            if one is not None:
                t, _ = bu.timed(
                    lambda q=q: one(lambda: project.search({"query": q, "mode": "hybrid", "maxResults": 5}))
                )
                times["hybrid, 1 BLAS thread"].append(t)
            match = KeywordQuery.parse(q)
            if match is not None:
                t, _ = bu.timed(lambda match=match: project.store.keyword_search(match, N_CAND))
                times["store.keyword_search (100)"].append(t)
            if vec_ok and cache is not None:
                qvec = cache.get(project.provider, q)
                t, _ = bu.timed(lambda qvec=qvec: project.store.knn(qvec, N_CAND))
                times["store.knn (100)"].append(t)
                if one is not None:
                    t, _ = bu.timed(lambda qvec=qvec: one(lambda: project.store.knn(qvec, N_CAND)))
                    times["store.knn (100), 1 BLAS thread"].append(t)
    if vec_ok:
        # an editor sync pass rewrites one file: the cached vector matrix is invalidated, the next search reloads it
        paths = sorted(project.store.file_states())
        for i, q in enumerate(queries[:REWRITES]):
            path = paths[(i * 7919) % len(paths)]
            t, _ = bu.timed(lambda path=path: rewrite_one_file(project, path))
            times.setdefault("store.replace_file (one file, same content)", []).append(t)
            t, _ = bu.timed(lambda q=q: project.search({"query": q, "mode": "hybrid", "maxResults": 5}))
            times.setdefault("hybrid, first search after that write", []).append(t)
    stats = project.store.stats()
    size = f"{stats.total_chunks:,} chunks / {stats.embedded_chunks:,} vectors"
    rows = []
    for name, ts in times.items():
        if not ts:
            continue
        note = "degraded to keyword (no vectors)" if (not vec_ok and name.startswith(("hybrid", "semantic"))) else ""
        rows.append((label, size, name, len(ts), bu.fmt_ms(bu.median(ts)), bu.fmt_ms(bu.percentile(ts, 95)), note))
    if not vec_ok:
        print(f"   {label}: {degraded}")
    if cache is not None:
        print(f"   {label}: query-embedding cache hits {cache.hits}, misses {cache.misses} (misses = warm-up only)")
    return rows


def main() -> None:
    args = bu.parser(__doc__.split("\n")[0]).parse_args()
    bu.banner("bench_search: hybrid search end to end, p50/p95", args.quick)
    rows: list[tuple] = []
    provider = bu.provider_choice()
    root = bu.fiction_index(provider, args.quick)
    if root is not None:
        if provider == "none":
            print(
                "   the local provider is not installed: fiction is indexed keyword-only (hybrid degrades to lexical)"
            )
        project = Project.open(root, overrides={"provider": provider})
        try:
            rows += measure(project, FICTION_QUERIES, f"fiction ({provider})")
        finally:
            project.close()
    n = 10_000 if args.quick else 100_000
    project, queries = synthetic_project(n)
    try:
        rows += measure(project, queries, "synthetic")
    finally:
        project.close()
    print()
    print(f"{ROUNDS} rounds x queries per row, query embedding cached, maxResults 5; p95 = nearest rank")
    print(bu.table(["corpus", "size", "operation", "samples", "p50 ms", "p95 ms", "note"], rows))
    if bu.blas_one_thread() is not None:
        print("'1 BLAS thread' rows: the same call inside threadpoolctl.limit(1, 'blas'). OpenBLAS's 2-thread sgemv is")
        print("~1.9x faster on a quiet machine but waits for a free core on a busy one (see bench_vector.py)")
    else:
        print("(pip install threadpoolctl to also time the 1-BLAS-thread variant)")


if __name__ == "__main__":
    main()

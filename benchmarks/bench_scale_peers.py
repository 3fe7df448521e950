"""saipling's vector side beside chromadb and lancedb at scale (issue 34), on the same vectors.

The vectors are those of a bench_scale.py index (word-perturbed copies of the fiction corpus, 384-d vectors from
bench_scale's embedding server), read once from its embedding cache (float32 or float16 blobs) into a .npy. Each
peer gets exactly those vectors; every phase runs in a fresh process, one system at a time:

  insert     chromadb (embedded PersistentClient, HNSW, cosine) / lancedb (embedded; flat, and with an IVF_PQ index
             refined on exact vectors): all vectors added in batches; the seconds and the folder's size on disk
             (saipling's own insert is bench_scale's index build; its index.db size is reported beside)
  open       import + open in a fresh process (saipling: Project.open of the index, as a server starts)
  first      the first vector query after open (saipling: the vector side loads)
  warm       p50 / p95 of the other queries (query vectors given: only the store's search is timed)
  recall@10  against exact numpy search over the same float32 vectors
  RSS        VmRSS / VmHWM of the querying process after the queries

Queries: stored vectors of randomly drawn chunks with Gaussian noise (sigma 0.5 / sqrt(dims)), normalised, so
each has real near neighbours. Nothing is asserted.

    SAIPLING_BENCH_CACHE=/tmp/big-bench python benchmarks/bench_scale.py --size 55k   # builds the index first
    nice -n 10 python benchmarks/bench_scale_peers.py --size 55k [--queries 100] [--systems saipling,chromadb,lancedb]
    nice -n 10 python benchmarks/bench_scale_peers.py --index <a project indexed with the local model>
                                            # real MiniLM vectors (hash vectors have no meaningful neighbours
                                            # past the first: HNSW's recall on them is a worst case)

Needs the bench extra (pip install -e '.[bench]': chromadb, lancedb); a system that does not import is skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchutil as bu  # noqa: E402

K = 10
SYSTEMS = ["saipling", "chromadb", "lancedb", "lancedb-ivfpq"]


def du(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def export_vectors(root: Path, out: Path) -> tuple[Path, Path]:
    """(ids.npy, vecs.npy) of every embedded chunk of the index at `root`, float32, read straight from its cache."""
    import numpy as np

    ids_p, vec_p = out / "ids.npy", out / "vecs.npy"
    db = root / ".saipling" / "index.db"
    if ids_p.exists() and vec_p.exists() and ids_p.stat().st_mtime >= db.stat().st_mtime:
        return ids_p, vec_p
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    key = con.execute("SELECT value FROM meta WHERE key = 'vector_key'").fetchone()[0]
    ids: list[int] = []
    rows: list[Any] = []
    for cid, blob in con.execute(
        "SELECT c.id, e.vector FROM chunks c JOIN embedding_cache e ON e.content_hash = c.content_hash AND e.model = ?",
        (key,),
    ):
        dtype = np.float16 if len(blob) == 384 * 2 else np.float32
        ids.append(int(cid))
        rows.append(np.frombuffer(blob, dtype=dtype).astype(np.float32))
    con.close()
    mat = np.vstack(rows)
    mat /= np.linalg.norm(mat, axis=1, keepdims=True)
    out.mkdir(parents=True, exist_ok=True)
    np.save(ids_p, np.asarray(ids, dtype=np.int64))
    np.save(vec_p, mat.astype(np.float32))
    return ids_p, vec_p


def make_queries(vec_p: Path, n: int, out: Path, seed: int = 7) -> tuple[Path, Path]:
    """(queries.npy, truth.npy): n noisy copies of stored vectors and their exact top-K row indexes."""
    import numpy as np

    mat = np.load(vec_p)
    rng = np.random.default_rng(seed)
    picks = rng.choice(len(mat), size=n, replace=False)
    q = mat[picks] + rng.normal(0, 0.5 / np.sqrt(mat.shape[1]), size=(n, mat.shape[1])).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    truth = np.argsort(-(q @ mat.T), axis=1)[:, :K]
    np.save(out / "queries.npy", q.astype(np.float32))
    np.save(out / "truth.npy", truth)
    return out / "queries.npy", out / "truth.npy"


# -- children: one system, one phase, a fresh process --------------------------------------------------------------
def child_insert(system: str, data: str, work: str) -> None:
    import numpy as np

    ids = np.load(Path(work) / "ids.npy")
    mat = np.load(Path(work) / "vecs.npy")
    t = time.perf_counter()
    if system == "chromadb":
        import chromadb
        from chromadb.config import Settings

        client = chromadb.PersistentClient(path=data, settings=Settings(anonymized_telemetry=False))
        col = client.get_or_create_collection("chunks", metadata={"hnsw:space": "cosine"})
        step = client.get_max_batch_size()
        for i in range(0, len(ids), step):
            col.add(ids=[str(x) for x in ids[i : i + step]], embeddings=mat[i : i + step])
    else:
        import lancedb
        import pyarrow as pa

        db = lancedb.connect(data)
        vec_type = pa.list_(pa.float32(), mat.shape[1])
        step = 100_000
        tbl = None
        for i in range(0, len(ids), step):
            batch = pa.table(
                {
                    "id": pa.array(ids[i : i + step]),
                    "vector": pa.FixedSizeListArray.from_arrays(pa.array(mat[i : i + step].ravel()), mat.shape[1]),
                },
                schema=pa.schema([("id", pa.int64()), ("vector", vec_type)]),
            )
            if tbl is None:
                tbl = db.create_table("chunks", data=batch, mode="overwrite")
            else:
                tbl.add(batch)
        if system == "lancedb-ivfpq" and tbl is not None:
            parts = max(16, int(len(ids) ** 0.5))
            tbl.create_index(metric="cosine", num_partitions=parts, num_sub_vectors=48, vector_column_name="vector")
    took = time.perf_counter() - t
    print(json.dumps({"insert_s": took, "rss_mb": bu.proc_status_mb().get("VmHWM")}))


def child_query(system: str, data: str, work: str) -> None:
    import numpy as np

    queries = np.load(Path(work) / "queries.npy")
    t0 = time.perf_counter()
    if system == "saipling":
        from saipling.project import Project

        project = Project.open(data)
        store = project.store

        def search(q: Any) -> list[int]:
            return [cid for cid, _ in store.knn(q, K)]

    elif system == "chromadb":
        import chromadb
        from chromadb.config import Settings

        client = chromadb.PersistentClient(path=data, settings=Settings(anonymized_telemetry=False))
        col = client.get_collection("chunks")

        def search(q: Any) -> list[int]:
            return [int(x) for x in col.query(query_embeddings=[q], n_results=K, include=[])["ids"][0]]

    else:
        import lancedb

        tbl = lancedb.connect(data).open_table("chunks")
        ivf = system == "lancedb-ivfpq"

        def search(q: Any) -> list[int]:
            s = tbl.search(q).metric("cosine").limit(K).select(["id"])
            if ivf:
                s = s.nprobes(20).refine_factor(10)
            return [int(r["id"]) for r in s.to_list()]

    out: dict[str, Any] = {"open_s": time.perf_counter() - t0}
    t = time.perf_counter()
    got = [search(queries[0])]
    out["first_s"] = time.perf_counter() - t
    times = []
    for q in queries[1:]:
        t = time.perf_counter()
        got.append(search(q))
        times.append(time.perf_counter() - t)
    out["warm_p50_ms"] = bu.median(times) * 1000
    out["warm_p95_ms"] = bu.percentile(times, 95) * 1000
    status = bu.proc_status_mb()
    out["rss_mb"], out["hwm_mb"] = status.get("VmRSS"), status.get("VmHWM")
    out["got"] = got
    print(json.dumps(out))


def run_child(args: list[str], timeout: float = 7200) -> dict[str, Any]:
    p = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, timeout=timeout, env=os.environ
    )
    if p.returncode != 0:
        raise RuntimeError(f"child {args[:2]} failed: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def importable(system: str) -> bool:
    mod = {"saipling": "saipling", "chromadb": "chromadb"}.get(system, "lancedb")
    p = subprocess.run([sys.executable, "-c", f"import {mod}"], capture_output=True)
    return p.returncode == 0


def main() -> None:
    ap = bu.parser(__doc__ or "")
    ap.add_argument("--size", default="55k", help="a bench_scale.py size already built (55k, 269k, 1.07M)")
    ap.add_argument("--index", help="another project folder whose index to use (e.g. one embedded by the local model)")
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--child-insert", nargs=3, metavar=("SYSTEM", "DATA", "WORK"), help=argparse.SUPPRESS)
    ap.add_argument("--child-query", nargs=3, metavar=("SYSTEM", "DATA", "WORK"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_insert:
        child_insert(*args.child_insert)
        return
    if args.child_query:
        child_query(*args.child_query)
        return
    import numpy as np

    root = Path(args.index) if args.index else bu.CACHE_ROOT / f"scale-{args.size}" / "project"
    if not (root / ".saipling" / "index.db").exists():
        print(f"no index at {root}: build it first with bench_scale.py --size {args.size}")
        return
    bu.banner(f"saipling vs chromadb vs lancedb, vector side: {root}", False)
    label = root.parent.name if not args.index else "index-" + root.name
    work = bu.CACHE_ROOT / f"peers-{label}"
    work.mkdir(parents=True, exist_ok=True)
    ids_p, vec_p = export_vectors(root, work)
    make_queries(vec_p, args.queries, work)
    ids = np.load(ids_p)
    truth_ids = ids[np.load(work / "truth.npy")]
    print(f"{len(ids):,} vectors x {np.load(vec_p, mmap_mode='r').shape[1]}, {args.queries} queries")
    rows = []
    for system in [s for s in args.systems.split(",") if s]:
        if not importable(system):
            print(f"  {system}: not importable here, skipped")
            continue
        res: dict[str, Any] = {}
        if system == "saipling":
            data = root
            res["insert_s"] = None
            res["disk_mb"] = du(root / ".saipling" / "index.db") / 1e6
        else:
            data = work / system
            shutil.rmtree(data, ignore_errors=True)
            res.update(run_child(["--child-insert", system, str(data), str(work)]))
            res["disk_mb"] = du(data) / 1e6
        res.update(run_child(["--child-query", system, str(data), str(work)]))
        got = res.pop("got")
        res["recall@10"] = float(
            np.mean([len(set(g) & set(t.tolist())) / K for g, t in zip(got, truth_ids, strict=True)])
        )
        rows.append((system, res))
        print(f"  {system}: {json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in res.items()})}")
    print()
    print(
        bu.table(
            [
                "system",
                "insert s",
                "disk MB",
                "open s",
                "first s",
                "warm p50 ms",
                "p95 ms",
                "recall@10",
                "RSS MB",
                "peak MB",
            ],
            [
                [
                    s,
                    "-" if r.get("insert_s") is None else f"{r['insert_s']:.1f}",
                    f"{r['disk_mb']:.0f}",
                    f"{r['open_s']:.2f}",
                    f"{r['first_s']:.3f}",
                    f"{r['warm_p50_ms']:.2f}",
                    f"{r['warm_p95_ms']:.2f}",
                    f"{r['recall@10']:.3f}",
                    f"{r['rss_mb']:.0f}",
                    f"{r['hwm_mb']:.0f}",
                ]
                for s, r in rows
            ],
        )
    )
    mine = dict(rows).get("saipling")
    if mine:
        for s, r in rows:
            if s != "saipling":
                print(
                    f"saipling / {s}: first {mine['first_s'] / r['first_s']:.2f}x, warm p50"
                    f" {mine['warm_p50_ms'] / r['warm_p50_ms']:.2f}x, RSS {mine['rss_mb'] / r['rss_mb']:.2f}x,"
                    f" open {mine['open_s'] / r['open_s']:.2f}x"
                )


if __name__ == "__main__":
    main()

"""Exact KNN under CPU load, and the cross-process matrix invalidation (issue 18).

1. KNN: `VectorMatrix.knn` (the product: one BLAS thread for small products or while the load average says the
   cores are taken, benchmarks/../server/saipling/vector_matrix.py) against the same brute force with numpy's
   default BLAS threads (what it did before), interleaved query by query, at the 13th Age vault's size (6,348 x
   384) and the fiction corpus's (34,155 x 384), first at the machine's own load, then with BUSY spinning
   processes added (default 4: load >= 4 on 2 cores). Recall@10 of the product against exact numpy is printed
   (it is exact: float32 throughout, so 1.0).
2. Invalidation: a store with a loaded matrix; another process logs a search (what a CLI search does) or writes
   one file's vectors; the next knn's time, and whether the matrix was reloaded.

    python benchmarks/bench_knn_load.py           # 400 queries per size and load
    python benchmarks/bench_knn_load.py --quick   # 100 queries
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchutil as bu  # noqa: E402

from saipling.storage import vector_matrix as vmod  # noqa: E402
from saipling.storage.sqlite.store import SqliteStore as Store  # noqa: E402
from saipling.storage.vector_matrix import VectorMatrix  # noqa: E402

K = 10
SIZES = [("13th Age vault", 6348), ("fiction", 34155)]


def unit(rng: np.random.Generator, n: int, d: int = 384) -> np.ndarray:
    v = rng.standard_normal((n, d), dtype=np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v


def old_knn(mat: np.ndarray, ids: np.ndarray, q: np.ndarray, k: int) -> list[int]:
    sims = mat @ q  # numpy's default BLAS threads
    top = np.argpartition(sims, len(sims) - k)[len(sims) - k :]
    return [int(ids[i]) for i in top[np.argsort(-sims[top])]]


def knn_rows(n_queries: int, label: str) -> list[list[str]]:
    rng = np.random.default_rng(1)
    rows = []
    for name, n in SIZES:
        mat = unit(rng, n)
        ids = np.arange(1, n + 1, dtype=np.int64)
        vm = VectorMatrix(ids, mat.copy())
        queries = unit(rng, n_queries)
        new_t: list[float] = []
        old_t: list[float] = []
        hits = 0
        blas = vmod._blas_controller()
        for q in queries:  # interleaved: A B A B
            t = time.perf_counter()
            got = vm.knn(q, K)  # includes switching BLAS back to its own choice (real use rarely switches)
            new_t.append(time.perf_counter() - t)
            if blas:  # `before`: numpy's default threads (set outside the timing)
                blas.limit(limits=vmod._blas_default)
                vmod._blas_now = vmod._blas_default
            t = time.perf_counter()
            exact = old_knn(mat, ids, q, K)
            old_t.append(time.perf_counter() - t)
            hits += len({c for c, _ in got} & set(exact))
        rows.append(
            [
                label,
                f"{name} {n} x 384",
                bu.fmt_ms(bu.percentile(new_t, 50)),
                bu.fmt_ms(bu.percentile(new_t, 95)),
                bu.fmt_ms(bu.percentile(old_t, 50)),
                bu.fmt_ms(bu.percentile(old_t, 95)),
                f"{bu.percentile(new_t, 50) / bu.percentile(old_t, 50):.2f}x",
                f"{hits / (K * n_queries):.3f}",
                bu._loadavg().split()[0],
            ]
        )
    return rows


def spin(busy: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]


def invalidation_rows(n: int) -> list[list[str]]:
    sys.path.insert(0, str(bu.REPO / "tests"))
    from test_store_crossprocess import DIMS, _in_other_process, _unit, _write

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "index.db"
        store = Store.open(db)
        store.configure_vectors("test", "m", DIMS)
        with store.atomic():
            for i in range(n):
                _write(store, f"f{i}.md", i)
        for what, body in (
            ("another process logs a search (a CLI search)", 'store.log_search("q", "cli", "lexical", 1, 0.5, 1.0)'),
            ("another process writes one file's vectors", '_write(store, "f1.md", 10_001)'),
        ):
            store.knn(_unit(0), K)
            warm_t, _ = bu.timed(lambda: store.knn(_unit(0), K))
            loaded = store._matrix
            _in_other_process(db, body)
            t, _ = bu.timed(lambda: store.knn(_unit(0), K))
            rows.append(
                [
                    what,
                    f"{n} x {DIMS}",
                    bu.fmt_ms(warm_t),
                    bu.fmt_ms(t),
                    "reloaded" if store._matrix is not loaded else "kept",
                ]
            )
        store.close()
    return rows


def main() -> None:
    p = bu.parser(__doc__.splitlines()[0])
    p.add_argument("--busy", type=int, default=4, help="spinning processes to add for the loaded run")
    args = p.parse_args()
    bu.banner("exact KNN under CPU load; cross-process matrix invalidation", args.quick)
    n_queries = 100 if args.quick else 400
    rows = knn_rows(n_queries, "own load")
    procs = spin(args.busy)
    try:
        time.sleep(3 if args.quick else 8)  # let the 1-minute load average rise
        rows += knn_rows(n_queries, f"+{args.busy} busy")
    finally:
        for proc in procs:
            proc.kill()
    print(
        f"\n1. KNN, k={K}, {n_queries} queries per row; `now` = VectorMatrix.knn, `before` = numpy default threads"
        f" (BLAS {os.environ.get('OPENBLAS_NUM_THREADS', 'default')}), interleaved"
    )
    print(
        bu.table(
            [
                "load",
                "matrix",
                "now p50",
                "now p95",
                "before p50",
                "before p95",
                "now/before p50",
                "recall@10",
                "load avg",
            ],
            rows,
        )
    )
    print("\n2. The next knn after another process's write (store with a loaded matrix)")
    print(
        bu.table(
            ["write", "matrix", "knn before", "knn after", "matrix"],
            invalidation_rows(2000 if args.quick else 20000),
        )
    )


if __name__ == "__main__":
    main()

"""Searches while the vector snapshot is written in the background (issue 34 review: the snapshot used to be written
under the store's lock inside the search that read the matrix).

Opens an index (run it on a COPY: opening migrates it and writes `vectors.snapshot` beside it), searches once (the
matrix from the snapshot or the cache), then `--rounds` times: starts the snapshot's background write and searches
without a pause from one thread while it runs, then searches as long again with no write. Prints the write's time
and the searches' p50 / max with and without the write, for each writer priority given (`--nice`, alternating):
the writer's thread runs SNAPSHOT_NICE lower than the searches (0: the same priority).

    nice -n 10 python benchmarks/bench_snapshot_write.py --index /tmp/copy-269k/.saipling/index.db --nice 0 5 0 5
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from saipling.storage.sqlite import vectors as vectors_module
from saipling.storage.sqlite.store import SqliteStore


def one_run(index: str, nice: int, rounds: int) -> dict[str, float]:
    vectors_module.SNAPSHOT_NICE = nice
    store = SqliteStore.open(index)
    try:
        dims = store.vector_model()[1]
        rng = np.random.default_rng(0)

        def search() -> float:
            q = rng.standard_normal(dims).astype(np.float32)
            start = time.perf_counter()
            store.knn(q / np.linalg.norm(q), 10)
            return (time.perf_counter() - start) * 1000

        for _ in range(10):
            search()
        v = store._vectors
        key = v.index_key()
        during: list[float] = []
        idle: list[float] = []
        writes: list[float] = []
        for _ in range(rounds):
            with store._db.lock:
                v._write_snapshot(str(key))
            start = time.perf_counter()
            while v._snapshot_thread is not None and v._snapshot_thread.is_alive():
                during.append(search())
            writes.append(time.perf_counter() - start)
            start = time.perf_counter()
            while time.perf_counter() - start < writes[-1]:
                idle.append(search())
        return {
            "nice": nice,
            "rows": len(v._matrix or []),
            "write_s": statistics.median(writes),
            "during_n": len(during),
            "during_p50_ms": statistics.median(during),
            "during_max_ms": max(during),
            "idle_p50_ms": statistics.median(idle),
            "idle_max_ms": max(idle),
        }
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index", required=True, help="index.db of a COPY of an index with vectors")
    parser.add_argument("--nice", type=int, nargs="+", default=[0, vectors_module.SNAPSHOT_NICE])
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    for nice in args.nice:
        r = one_run(args.index, nice, args.rounds)
        print(
            f"writer nice +{r['nice']}: {r['rows']} rows, write {r['write_s']:.2f} s (median);"
            f" searches while writing n={r['during_n']} p50 {r['during_p50_ms']:.1f} ms max {r['during_max_ms']:.1f};"
            f" without p50 {r['idle_p50_ms']:.1f} ms max {r['idle_max_ms']:.1f}"
            f" ({r['during_p50_ms'] / r['idle_p50_ms']:.2f}x)",
            flush=True,
        )


if __name__ == "__main__":
    main()

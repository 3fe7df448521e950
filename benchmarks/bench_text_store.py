"""The store side of a first index's text phase (issue 34): the indexing process's CPU to store a tree's files,
chunking done beforehand, so that neither the chunker nor the load on the machine's other core is timed.

Each run copies the tree, opens a keyword-only project with the scale bench's chunk limits, chunks every file in
process (cached per tree under $SAIPLING_BENCH_CACHE, a pickle of the chunker's results), then times on the CPU clock
what a run's text phase does per batch: `TextPhase.prepare` and `TextPhase.flush` with the run's batch limits, and
the chunk indexes deferred and built as a run does (when the code has `defer_indexes`). Also the bytes a worker's
results take through the pipe (groups of 16 files pickled) and the CPU to pickle and unpickle them.

    nice -n 10 python benchmarks/bench_text_store.py [--size 55k] [--baseline /tmp/base/server] [--rounds 2]
    python benchmarks/bench_text_store.py --quick      # 300 files

The tree is bench_scale's (`$SAIPLING_BENCH_CACHE/scale-<size>/project`, made here when absent). Nothing is
asserted; with --baseline the two codes run alternately (fresh processes) and the medians are compared.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchutil as bu  # noqa: E402

CHUNKING = "[chunking]\nmaxTokens = 128\ntargetTokens = 102\noverlapTokens = 25\n"  # (bench_scale's limits)


def child(src: str) -> None:
    from saipling.files.scanner import scan
    from saipling.indexing import text_phase as tp
    from saipling.indexing.chunk_pool import chunk_bytes
    from saipling.indexing.records import IndexSummary
    from saipling.project import Project

    with tempfile.TemporaryDirectory(dir=bu.CACHE_ROOT) as tmp:
        root = Path(tmp) / "project"
        shutil.copytree(src, root, ignore=shutil.ignore_patterns(".saipling"))
        (root / ".saipling").mkdir()
        (root / ".saipling" / "config.toml").write_text(f'provider = "none"\n{CHUNKING}')
        project = Project.open(root)
        ix = project.indexer
        entries = scan(root, ix.settings).entries
        datas = {e.rel: e.abs_path.read_bytes() for e in entries}
        cache = Path(src).parent / "chunked.pickle"
        if cache.exists():
            chunked = pickle.loads(cache.read_bytes())
        else:
            limits, count = ix.ctx.limits(), ix.ctx.token_counter()
            chunked = {e.rel: chunk_bytes(e.rel, datas[e.rel], limits, count) for e in entries}
            cache.write_bytes(pickle.dumps(chunked, protocol=pickle.HIGHEST_PROTOCOL))
        rels = [e.rel for e in entries]
        c0 = time.process_time()
        blobs = [pickle.dumps([chunked[r] for r in rels[i : i + 16]], 5) for i in range(0, len(rels), 16)]
        c1 = time.process_time()
        for b in blobs:
            pickle.loads(b)
        c2 = time.process_time()
        summary, text, store = IndexSummary(), ix.text, ix.store
        start = time.process_time()
        deferred = store.defer_indexes() if hasattr(store, "defer_indexes") else False
        batch: list = []
        n = 0
        for e in entries:
            data = datas[e.rel]
            prep = text.prepare(e, data, summary, chunked[e.rel], hashlib.sha256(data).hexdigest())
            if prep is None:
                continue
            batch.append(prep)
            n += len(prep.chunks)
            if n >= tp.TEXT_BATCH_CHUNKS or len(batch) >= tp.TEXT_BATCH_FILES:
                text.flush(batch, summary)
                batch, n = [], 0
        if batch:
            text.flush(batch, summary)
        if deferred:
            store.restore_indexes()
        store_cpu = time.process_time() - start
        project.close()
        db_mb = (root / ".saipling" / "index.db").stat().st_size / 1e6
    out = {
        "chunks": sum(len(c.chunks or []) for c in chunked.values()),
        "store_cpu_s": round(store_cpu, 2),
        "pipe_mb": round(sum(map(len, blobs)) / 1e6, 1),
        "pickle_cpu_s": round(c1 - c0, 2),
        "unpickle_cpu_s": round(c2 - c1, 2),
        "db_mb": round(db_mb, 1),
    }
    print(json.dumps(out))


def run(src: Path, server_dir: str | None) -> dict:
    env = dict(os.environ)
    if server_dir:
        env["PYTHONPATH"] = server_dir
    proc = subprocess.run(
        [sys.executable, __file__, "--child", str(src)], capture_output=True, text=True, env=env, timeout=3600
    )
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(sys.argv[2])
        return
    p = bu.parser(__doc__.splitlines()[0])
    p.add_argument("--size", default="55k", choices=["300", "55k", "269k", "1.07M"])
    p.add_argument("--baseline", help="another server/ folder (e.g. from `git archive`) measured alternately")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    size = "300" if args.quick else args.size
    bu.banner(f"bench_text_store: the store side of a first index ({size})", args.quick)
    import bench_scale

    src = bu.CACHE_ROOT / f"scale-{size}" / "project"
    if not src.is_dir():
        if not bu.need_shared(bu.FICTION, "the text store benchmark"):
            return
        src.mkdir(parents=True)
        bench_scale.build_tree(src, bench_scale.SIZES[size])
    variants = [("", None)] + ([("base ", args.baseline)] if args.baseline else [])
    got: dict[str, list[dict]] = {}
    for rnd in range(args.rounds):
        for prefix, server_dir in variants if rnd % 2 == 0 else variants[::-1]:
            r = run(src, server_dir)
            got.setdefault(prefix, []).append(r)
            print(f"   {prefix}{size} round {rnd + 1}: {json.dumps(r)}", flush=True)
    keys = ("store_cpu_s", "pipe_mb", "pickle_cpu_s", "unpickle_cpu_s", "db_mb")
    meds = {prefix: {k: bu.median([r[k] for r in runs]) for k in keys} for prefix, runs in got.items()}
    for prefix, med in meds.items():
        print(f"   {prefix}{size} medians: {json.dumps(med)}")
    if args.baseline:
        print(f"   store CPU ratio (this / base): {meds['']['store_cpu_s'] / meds['base ']['store_cpu_s']:.2f}")


if __name__ == "__main__":
    main()

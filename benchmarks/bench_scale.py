"""Big projects on one machine (issue 34): the store and search at 55k, 269k and 1.07M chunks.

Each size is word-perturbed copies of ../shared/corpora/fiction-chapters (copy 0 is the corpus itself; in copy c
pairs of neighbouring words are swapped on a pattern of its own, so no chunk repeats while the vocabulary and
word frequencies stay the corpus's), embedded by a fast local OpenAI-compatible server on 127.0.0.1 (a process of
its own: deterministic 384-d unit vectors from a hash of each text, numpy-made), so that only the store and the
search are timed. Indexes are built once and kept under $SAIPLING_BENCH_CACHE/scale-<size> (`--rebuild` makes
them again); every measurement of a round runs in a fresh process:

  text phase        the first index's keyword phase (files read, chunked, FTS5): seconds until it is searchable
  index.db          its size on disk (and x the prose it indexes)
  open              import saipling + Project.open (a server's start: verify on)
  first semantic    the first semantic search after open (the vector side loads)
  warm p50/p95      semantic / lexical / hybrid over the query set (query vectors cached first: store + search);
                    with the searching thread's CPU beside the wall times (on a loaded machine the wall is the load's)
  own write         one file edited and indexed in the searching process, then the next semantic search
  other's write     one file edited and indexed by another process, then the next semantic search here
  cold CLI          the whole process `saipling search Q --mode semantic --json` (median of 3)
  RSS               VmRSS / VmHWM of the searching process after all that
  mcp (--mcp)       a real `saipling mcp` server: its first answer (status), ready (its first run done), first and
                    warm hybrid searches (p50/p95), its RSS / peak

    nice -n 10 python benchmarks/bench_scale.py --size 55k --size 269k [--queries 30] [--rebuild]
    nice -n 10 python benchmarks/bench_scale.py --size 55k --baseline /tmp/base/server --rounds 2
                                                      # side by side with other code (`git archive` of main)
    python benchmarks/bench_scale.py --quick          # 300 files: a smoke run
    python benchmarks/bench_scale.py --recall A.db,B.db [--recall-queries 300] [--recall-copies 28]
    nice -n 10 python benchmarks/bench_scale.py --text-only --size 55k --baseline /tmp/base/server --rounds 2
                                                      # the text phase alone (keyword-only, the same chunks)
    nice -n 10 python benchmarks/bench_scale.py --first-only --size 55k --baseline /tmp/base/server --rounds 6
                                                      # open + first semantic search, cold CLI: A B / B A
    nice -n 10 python benchmarks/bench_scale.py --only-mcp --size 269k   # through `saipling mcp` alone

`--recall` measures the compact matrix (storage/vector_matrix.py: int8 codes, then the best candidates rescored
on exact float32 vectors) against exact float32 search on REAL embeddings: the all-MiniLM-L6-v2 vectors in the
embedding caches of the given index files (e.g. indexes of parts of the fiction corpus made with the local model),
queries embedded by the local model (the query list below and the first sentences of sampled chunks); recall@10
for several candidate counts, and the bytes per vector. `--recall-copies N` also builds a million-row set from
them (each real vector and N copies with isotropic noise: "near", the cosine of a copy to its vector drawn from
what the local model gives word-swapped copies of a chunk, as the fiction copies are made, ~0.98; "far", cosines
0.55-0.85) and gives, at 35k to all of its rows, the Hamming rank the true top 10 need (the sign pool) and the share
of them each pool rule covers, then recall@10 of the compact matrix's search at its rule (needs ~4 GB of memory).

Ratios: each size's figures over the first size's, side by side in one run. Nothing is asserted.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchutil as bu  # noqa: E402

SIZES = {"300": 300, "55k": 1129, "269k": 5126, "1.07M": 20514}  # label -> files
DIMS = 384
MODEL = "all-minilm-scale-fake"  # an all-MiniLM family name: its 128-word-piece passages, as the local model
QUERIES = [
    "a ship caught in a storm at sea",
    "the detective examines the footprints",
    "a letter arrives with terrible news",
    "the old house at night",
    "she refused to marry him",
    "a murder in the library",
    "the vampire's castle in the mountains",
    "money and debt in the family",
    "a long journey by train",
    "the prisoner escapes",
    "love letters hidden in a drawer",
    "the doctor is called at midnight",
    "a child lost in the streets of London",
    "the inheritance and the will",
    "a duel at dawn",
    "hunting in the forest",
    "the church bells ring",
    "a secret society meets",
    "the fire spreads through the town",
    "a ball at the great house",
    "the",
    "said",
    "man",
    "night",
    "little door",
    "time",
    "hand eyes",
    "good morning",
    "the king",
    "water",
]


# -- the embedding server (its own process) -----------------------------------------------------------------------
def encode_rows(mat: Any) -> list[str]:
    """Each row's values rounded to 6 decimals as JSON numbers: the integer of millionths with an exponent
    (`-12345e-6`), the same numbers as `0.012345` but written by int's C formatter (json's float formatting made
    this server ~45% of the 1.07M build's CPU: 244 us a vector under load)."""
    import numpy as np

    micro = np.rint(mat.astype(np.float64) * 1e6).astype(np.int64)
    return ["e-6,".join(map(str, row)) + "e-6" for row in micro.tolist()]


def serve_embeddings(port_file: str) -> None:
    import numpy as np

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
            mat = np.empty((len(texts), DIMS), dtype=np.float32)
            for i, t in enumerate(texts):
                seed = int.from_bytes(hashlib.blake2b(t.encode(), digest_size=8).digest(), "big")
                mat[i] = np.random.default_rng(seed).standard_normal(DIMS, dtype=np.float32)
            mat /= np.linalg.norm(mat, axis=1, keepdims=True)
            data = [f'{{"object":"embedding","index":{i},"embedding":[{r}]}}' for i, r in enumerate(encode_rows(mat))]
            tokens = sum(max(1, len(t.split())) for t in texts)
            usage = f'"usage":{{"prompt_tokens":{tokens},"total_tokens":{tokens}}}'
            out = f'{{"object":"list","model":"{MODEL}",{usage},"data":[{",".join(data)}]}}'.encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    Path(port_file).write_text(str(server.server_address[1]))
    server.serve_forever()


class EmbeddingServer:
    def __init__(self, tmp: Path) -> None:
        port_file = tmp / "port"
        port_file.unlink(missing_ok=True)
        self.proc = subprocess.Popen([sys.executable, __file__, "--serve-embeddings", str(port_file)])
        for _ in range(200):
            if port_file.exists() and port_file.read_text():
                break
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{port_file.read_text()}/v1"

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(10)


# -- the corpus copies ----------------------------------------------------------------------------------------------
_WORD = re.compile(r"\S+")


def perturb(text: str, copy: int) -> str:
    """Copy `copy` of a chapter: in every prose line, words j and j+1 swapped for j = start, start+step, ...
    (start and step fixed per copy: 20 distinct patterns); headings and frontmatter untouched."""
    if copy == 0:
        return text
    start, step = copy % 5, 9 + (copy // 5) % 4
    out: list[str] = []
    in_front = text.startswith("---\n")
    for n, line in enumerate(text.split("\n")):
        if in_front:
            out.append(line)
            if n > 0 and line.strip() == "---":
                in_front = False
            continue
        words = line.split(" ")
        if line.startswith("#") or len(words) < start + 2:
            out.append(line)
            continue
        for j in range(start, len(words) - 1, step):
            words[j], words[j + 1] = words[j + 1], words[j]
        out.append(" ".join(words))
    return "\n".join(out)


def build_tree(root: Path, files: int) -> int:
    """Write `files` chapters (copies of the corpus) under root; returns the prose bytes written."""
    sources = sorted(p for p in bu.FICTION.rglob("*.md") if p.is_file())
    total = 0
    for i in range(files):
        copy, src = divmod(i, len(sources))
        rel = sources[src].relative_to(bu.FICTION)
        dest = root / f"copy{copy:02d}" / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        text = perturb(sources[src].read_text(encoding="utf-8"), copy)
        dest.write_text(text, encoding="utf-8")
        total += len(text.encode())
    return total


def write_config(root: Path, url: str) -> None:
    cfg = root / ".saipling" / "config.toml"
    cfg.parent.mkdir(parents=True, exist_ok=True)
    cfg.write_text(f'provider = "openai"\nbaseUrl = "{url}"\nmodel = "{MODEL}"\nbatchSize = 256\n', encoding="utf-8")


def built(size: str, url: str, rebuild: bool, server_dir: str | None = None) -> tuple[Path, dict[str, Any]]:
    """The indexed copy for `size` (built now if absent or `rebuild`) and its build record. The baseline code
    (`server_dir`) has copies of its own, built by it (scale-<size>-base): an index of another schema version is
    not one both can open (schema 7 moved the vectors)."""
    base = bu.CACHE_ROOT / (f"scale-{size}" + ("-base" if server_dir else ""))
    root, record = base / "project", base / "build.json"
    if record.exists() and not rebuild:
        write_config(root, url)
        return root, json.loads(record.read_text())
    shutil.rmtree(base, ignore_errors=True)
    root.mkdir(parents=True)
    prose = build_tree(root, SIZES[size])
    write_config(root, url)
    print(f"   building {size}: {SIZES[size]} files, {prose / 1e6:.0f} MB of prose ...", flush=True)
    out = child_json(["--child-index", str(root)], server_dir=server_dir)
    out["prose_bytes"] = prose
    record.write_text(json.dumps(out))
    return root, out


def child_json(args: list[str], timeout: float = 7200, server_dir: str | None = None) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, timeout=timeout, env=child_env(server_dir)
    )
    if proc.returncode != 0:
        raise RuntimeError(f"child {args} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def child_env(server_dir: str | None = None) -> dict[str, str]:
    """The children's environment; with `server_dir`, that code imported instead of this checkout's."""
    env = dict(os.environ)
    env.pop("OPENAI_API_KEY", None)
    env.pop("OPENAI_BASE_URL", None)
    if server_dir:
        env["SAIPLING_BENCH_SERVER"] = env["PYTHONPATH"] = server_dir
    return env


# -- children ------------------------------------------------------------------------------------------------------
def child_index(root: str) -> None:
    from saipling.project import Project

    t0, c0 = time.perf_counter(), time.process_time()
    text_done: list[float] = []

    def progress(p: Any) -> None:
        if p.phase != "keywords" and not text_done:
            text_done.append(time.perf_counter() - t0)
            # reported at once (a big build's embedding phase may outlast the run): seconds and this process's CPU
            early = {"text_s": round(text_done[0], 2), "text_cpu_s": round(time.process_time() - c0, 2)}
            (Path(root).parent / "text_phase.json").write_text(json.dumps(early))
            print(f"text phase: {json.dumps(early)}", file=sys.stderr, flush=True)

    project = Project.open(root)
    s = project.index(progress=progress)
    total = time.perf_counter() - t0
    project.close()
    print(
        json.dumps(
            {
                "files": s.files,
                "chunks": s.chunks,
                "embedded": s.embedded,
                "text_s": round(text_done[0] if text_done else total, 2),
                "index_s": round(total, 2),
            }
        )
    )


def child_text(src: str) -> None:
    """The text phase alone, wall and CPU seconds (the indexing process's, not its chunking workers'): a fresh copy
    of the tree `src` indexed keyword-only with the bench's chunk limits (its 128-word-piece model's: the same chunks
    as the full build)."""
    import tempfile

    from saipling.project import Project

    with tempfile.TemporaryDirectory(dir=bu.CACHE_ROOT) as tmp:
        root = Path(tmp) / "project"
        shutil.copytree(src, root, ignore=shutil.ignore_patterns(".saipling"))
        (root / ".saipling").mkdir()
        (root / ".saipling" / "config.toml").write_text(
            'provider = "none"\n[chunking]\nmaxTokens = 128\ntargetTokens = 102\noverlapTokens = 25\n'
        )
        t0, c0 = time.perf_counter(), time.process_time()
        searchable: list[float] = []  # (wall, CPU) when the run left its "keywords" phase: keyword-searchable

        def progress(p: Any) -> None:
            if p.phase != "keywords" and not searchable:
                searchable.extend((time.perf_counter() - t0, time.process_time() - c0))

        project = Project.open(root)
        s = project.index(progress=progress)
        took, cpu = time.perf_counter() - t0, time.process_time() - c0
        project.close()
        db_mb = (root / ".saipling" / "index.db").stat().st_size / 1e6
    workers_cpu = _children_cpu()  # the chunking workers' (once they have exited)
    # text_s / text_cpu_s: until keyword-searchable (a first index fills the whole-file keywords after: the run's
    # whole wall and CPU are index_s / index_cpu_s; the same for code that has no such fill)
    out = {
        "chunks": s.chunks,
        "text_s": round(searchable[0] if searchable else took, 2),
        "text_cpu_s": round(searchable[1] if searchable else cpu, 2),
        "index_s": round(took, 2),
        "index_cpu_s": round(cpu, 2),
        "workers_cpu_s": round(workers_cpu, 2),
        "db_mb": round(db_mb, 1),
    }
    print(json.dumps(out))


def _children_cpu(wait_s: float = 5.0) -> float:
    """CPU seconds of this process's exited children (the chunking workers and multiprocessing's helpers), after
    waiting for them to exit (a pool shut down without waiting leaves them finishing)."""
    import multiprocessing
    import resource

    deadline = time.monotonic() + wait_s
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.05)
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def text_only(sizes: list[str], variants: list[tuple[str, str | None]], rounds: int) -> None:
    for size in sizes:
        src = bu.CACHE_ROOT / f"scale-{size}" / "project"
        if not src.is_dir():
            src.mkdir(parents=True)
            build_tree(src, SIZES[size])
        got: dict[str, list[dict[str, Any]]] = {}
        for rnd in range(rounds):
            for prefix, server_dir in variants if rnd % 2 == 0 else variants[::-1]:
                r = child_json(["--child-text", str(src)], server_dir=server_dir)
                got.setdefault(prefix, []).append(r)
                print(f"   {prefix}{size} round {rnd + 1}: {json.dumps(r)}", flush=True)
        for prefix, runs in got.items():
            keys = ("text_s", "text_cpu_s", "index_s", "index_cpu_s", "workers_cpu_s", "db_mb")
            med = {k: bu.median([r.get(k, 0) for r in runs]) for k in keys}
            print(f"   {prefix}{size} medians: {json.dumps(med)}")


def edit(root: Path, nth: int) -> str:
    """Append a sentence to one chapter (a different one each time); returns its path relative to root."""
    files = sorted(root.glob("copy00/**/*.md"))
    path = files[(nth * 7919 + int(time.time())) % len(files)]
    with path.open("a", encoding="utf-8") as fh:
        fh.write(f"\n\nA new paragraph written at {time.time():.6f} by the scale benchmark.\n")
    return str(path.relative_to(root))


def child_edit(root: str) -> None:
    from saipling.project import Project

    project = Project.open(root)
    rel = edit(Path(root), os.getpid())
    project.index(paths=[rel])
    project.close()
    print(json.dumps({"edited": rel}))


def child_measure(root: str, queries: int) -> None:
    t0, c0 = time.perf_counter(), time.thread_time()
    from saipling.project import Project

    project = Project.open(root)
    out: dict[str, Any] = {"open_s": time.perf_counter() - t0, "open_cpu_s": time.thread_time() - c0}
    qs = (QUERIES * (queries // len(QUERIES) + 1))[:queries]
    cpu: dict[str, list[float]] = {"semantic": [], "lexical": [], "hybrid": []}  # this thread's CPU a search
    # the whole process's (the keyword worker's thread with it: storage/sqlite/keyword_side.py)
    pcpu: dict[str, list[float]] = {"semantic": [], "lexical": [], "hybrid": []}

    def search(q: str, mode: str) -> float:
        t, c, pc = time.perf_counter(), time.thread_time(), time.process_time()
        r = project.search({"query": q, "mode": mode, "maxResults": 10})
        took = time.perf_counter() - t
        cpu[mode].append(time.thread_time() - c)
        pcpu[mode].append(time.process_time() - pc)
        if mode != "lexical" and not r["results"]:
            raise RuntimeError(f"no {mode} results for {q!r}")
        return took

    out["first_semantic_s"] = search("the first question after opening", "semantic")
    out["first_semantic_cpu_s"] = cpu["semantic"].pop()
    out["rss_after_first_mb"] = bu.proc_status_mb().get("VmRSS")
    # a big index's integrity check runs on a thread after open (storage/integrity.py): the warm figures are
    # taken once it is done (the code before ran it inside the open), its remaining time reported on its own
    import threading

    t = time.perf_counter()
    for thread in threading.enumerate():
        if thread.name == "saipling-integrity-check":
            thread.join()
    out["integrity_wait_s"] = time.perf_counter() - t
    for q in qs:  # query vectors cached: what follows times the store and the search
        search(q, "semantic")
    cpu["semantic"].clear()
    pcpu["semantic"].clear()
    times: dict[str, list[float]] = {"semantic": [], "lexical": [], "hybrid": []}
    for i, q in enumerate(qs):
        modes = ["semantic", "lexical", "hybrid"] if i % 2 == 0 else ["hybrid", "lexical", "semantic"]
        for mode in modes:
            times[mode].append(search(q, mode))
    for mode, xs in times.items():
        out[f"{mode}_p50"] = bu.median(xs)
        out[f"{mode}_p95"] = bu.percentile(xs, 95)
        out[f"{mode}_cpu_p50"] = bu.median(cpu[mode])
        out[f"{mode}_cpu_p95"] = bu.percentile(cpu[mode], 95)
        out[f"{mode}_pcpu_p50"] = bu.median(pcpu[mode])
        out[f"{mode}_pcpu_p95"] = bu.percentile(pcpu[mode], 95)
    own: list[float] = []
    after_own: list[float] = []
    for n in range(3):
        rel = edit(Path(root), n)
        t = time.perf_counter()
        project.index(paths=[rel])
        own.append(time.perf_counter() - t)
        after_own.append(search(f"after my edit {n}", "semantic"))
    out["own_edit_s"] = bu.median(own)
    out["search_after_own_edit_s"] = bu.median(after_own)
    other: list[float] = []
    for n in range(3):
        subprocess.run(
            [sys.executable, __file__, "--child-edit", root], check=True, capture_output=True, env=os.environ
        )
        other.append(search(f"after their edit {n}", "semantic"))
    out["search_after_other_write_s"] = bu.median(other)
    status = bu.proc_status_mb()
    out["rss_mb"], out["hwm_mb"] = status.get("VmRSS"), status.get("VmHWM")
    project.close()
    print(json.dumps(out))


def child_first(root: str) -> None:
    """Open the project and run its first semantic search (what a server's or an agent's first question costs):
    the vector side loads (from the snapshot when there is one) inside it."""
    t0, c0 = time.perf_counter(), time.process_time()
    from saipling.project import Project

    project = Project.open(root)
    out: dict[str, Any] = {"open_s": time.perf_counter() - t0, "open_cpu_s": time.process_time() - c0}
    t, c = time.perf_counter(), time.process_time()
    project.search({"query": "the first question after opening", "mode": "semantic", "maxResults": 10})
    out["first_semantic_s"] = time.perf_counter() - t
    out["first_semantic_cpu_s"] = time.process_time() - c  # (the process's: a background check counts too)
    status = bu.proc_status_mb()
    out["rss_mb"], out["hwm_mb"] = status.get("VmRSS"), status.get("VmHWM")
    project.close()
    print(json.dumps(out))


def child_mcp(root: str, queries: int) -> None:
    """Warm hybrid searches through a real `saipling mcp` server (the official SDK's client over stdio): one pass
    of the queries to warm it, then the timed pass; the server process's RSS and peak RSS after them."""
    import asyncio

    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    qs = (QUERIES * (queries // len(QUERIES) + 1))[:queries]
    env = {k: v for k, v in child_env().items() if not k.startswith("SAIPLING_")} | {"SAIPLING_LOG_LEVEL": "WARNING"}
    params = StdioServerParameters(command=sys.executable, args=["-m", "saipling", "mcp", root], env=env)

    def server_pid() -> int | None:  # (the SDK starts it as our child)
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
                cmd = (stat.parent / "cmdline").read_bytes()
            except OSError:
                continue
            if int(fields[1]) == os.getpid() and b"mcp" in cmd:
                return int(stat.parent.name)
        return None

    async def run() -> dict[str, Any]:
        t0 = time.perf_counter()
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            out: dict[str, Any] = {}
            # the first answer (a status call while the first run still checks the files) and the end of that run
            while (await session.call_tool("status", {})).structured_content["isIndexing"]:
                out.setdefault("mcp_first_answer_s", time.perf_counter() - t0)
                await asyncio.sleep(0.1)
            out.setdefault("mcp_first_answer_s", time.perf_counter() - t0)
            out["mcp_ready_s"] = time.perf_counter() - t0

            async def call(q: str) -> float:
                t = time.perf_counter()
                result = await session.call_tool("search", {"query": q, "mode": "hybrid", "maxResults": 10})
                took = time.perf_counter() - t
                if result.is_error:
                    raise RuntimeError(result.content[0].text)
                return took

            out["mcp_first_hybrid_s"] = await call(qs[0])
            for q in qs:
                await call(q)
            times = [await call(q) for q in qs]
            out["mcp_hybrid_p50"], out["mcp_hybrid_p95"] = bu.median(times), bu.percentile(times, 95)
            pid = server_pid()
            status = bu.proc_status_mb(pid) if pid else {}
            out["mcp_rss_mb"], out["mcp_hwm_mb"] = status.get("VmRSS"), status.get("VmHWM")
            return out

    print(json.dumps(asyncio.run(run())))


def first_only(sizes: list[str], variants: list[tuple[str, str | None]], rounds: int, url: str) -> None:
    """`--first-only`: open + first semantic search and the cold CLI search, each code in fresh processes,
    alternating (A B / B A) for `rounds` rounds on the indexes `built` already made; medians and ratios."""
    for size in sizes:
        got: dict[str, dict[str, list[float]]] = {}
        for rnd in range(rounds):
            for prefix, server_dir in variants if rnd % 2 == 0 else variants[::-1]:
                root, _ = built(size, url, False, server_dir)
                r = child_json(["--child-first", str(root)], server_dir=server_dir)
                r["cold_cli_s"] = cold_cli(root, runs=1, server_dir=server_dir)
                for key, value in r.items():
                    got.setdefault(prefix, {}).setdefault(key, []).append(value)
                print(f"   {prefix}{size} round {rnd + 1}: {json.dumps(r)}", flush=True)
        keys = ["open_s", "first_semantic_s", "cold_cli_s"]
        print(f"\n| {size} | " + " | ".join(f"{p or 'this '}median" for p, _ in variants) + " | ratio |")
        print("|---|" + "---|" * (len(variants) + 1))
        for key in keys:
            meds = [bu.median(got[p][key]) for p, _ in variants]
            ratio = f"{meds[0] / meds[1]:.2f}x" if len(meds) > 1 and meds[1] else "-"
            print(f"| {key} | " + " | ".join(f"{m:.2f} s" for m in meds) + f" | {ratio} |")


def cold_cli(root: Path, runs: int = 3, server_dir: str | None = None, cpu: list[float] | None = None) -> float:
    """The median wall seconds of `runs` whole-process CLI searches; `cpu` gets each one's CPU seconds."""
    import resource

    script = Path(sys.executable).parent / "saipling"
    cmd = [str(script)] if script.is_file() else [sys.executable, "-m", "saipling"]
    times = []
    for i in range(runs):
        t = time.perf_counter()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(
            [*cmd, "search", QUERIES[i], "--mode", "semantic", "--json", "--root", str(root)],
            check=True,
            capture_output=True,
            env=child_env(server_dir),
        )
        times.append(time.perf_counter() - t)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if cpu is not None:
            cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return bu.median(times)


# -- recall of the compact matrix on real vectors ---------------------------------------------------------------------
def real_vectors(paths: list[str]) -> tuple[Any, list[str]]:
    """The distinct all-MiniLM-L6-v2 vectors in the embedding caches of `paths`, and chunk texts (for queries).
    Float32 indexes (schema 8 and before) give the exact vectors; a float16 one gives its rounded vectors."""
    import apsw
    import numpy as np

    seen: dict[str, Any] = {}
    texts: list[str] = []
    for path in paths:
        conn = apsw.Connection(f"file:{path}?mode=ro", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
        fmt = conn.execute("SELECT value FROM meta WHERE key = 'vector_format'").fetchall()
        dtype = np.float16 if fmt and fmt[0][0] == "float16" else np.float32
        for h, blob in conn.execute(
            "SELECT content_hash, vector FROM embedding_cache"
            " WHERE model LIKE 'all-MiniLM-L6-v2%' AND length(vector) = ?",
            (DIMS * np.dtype(dtype).itemsize,),
        ):
            seen.setdefault(h, np.frombuffer(blob, dtype=dtype).astype(np.float32))
        texts += [str(t) for (t,) in conn.execute("SELECT text FROM chunks WHERE id % 29 = 0 LIMIT 400")]
        conn.close()
    return np.stack(list(seen.values())), texts


def noisy_copies(real: Any, copies: int, cosines: Any, seed: int = 7) -> Any:
    """`real` (unit rows) and `copies` noisy copies of each, shuffled, as float16 (what the index stores): copy =
    unit(v + s g), g standard normal, s set so the copy's cosine to v is one of `cosines` (a sampler: n -> values)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    n, dims = real.shape
    out = np.empty(((copies + 1) * n, dims), dtype=np.float16)
    out[:n] = real
    for c in range(copies):
        cos = cosines(rng, n)
        s = np.sqrt((1.0 / cos**2 - 1.0) / dims).astype(np.float32)
        v = real + rng.standard_normal(real.shape, dtype=np.float32) * s[:, None]
        out[(c + 1) * n : (c + 2) * n] = v / np.linalg.norm(v, axis=1, keepdims=True)
    return out[rng.permutation(len(out))]


def recall_at_scale(real: Any, qv: Any, copies: int, provider: Any, texts: list[str]) -> None:
    """The sign pool at up to a million rows: real vectors and noisy copies of them (see the module docstring)."""
    import numpy as np

    import saipling.storage.vector_matrix as vm
    from saipling.storage.vector_matrix import VectorMatrix, quantize, signs, steps_for, unit_rows

    long = [t for t in texts if len(t.split()) > 60][:40]
    pert = []
    for t in long:  # how far a word-swapped copy of a chunk embeds from it (the fiction copies' perturbation)
        a = np.asarray(provider.embed_query(t), dtype=np.float32)
        for c in (1, 7, 13):
            b = np.asarray(provider.embed_query(perturb(t, c)), dtype=np.float32)
            pert.append(float(a @ b / np.linalg.norm(a) / np.linalg.norm(b)))
    pert_arr = np.asarray(pert or [0.98])
    print(f"   word-swapped copies of {len(long)} chunks embed at cosine {np.median(pert_arr):.4f} (median) of theirs")
    real = real / np.linalg.norm(real, axis=1, keepdims=True)
    q = qv / np.linalg.norm(qv, axis=1, keepdims=True)
    shares = (16, 24, 32, 40, 48, 64)
    samplers = {
        "near": lambda rng, n: rng.choice(pert_arr, n),
        "far": lambda rng, n: rng.uniform(0.55, 0.85, n),
    }
    for name, sampler in samplers.items():
        allv = noisy_copies(real, copies, sampler)
        total = len(allv)
        for n in sorted({s for s in (35_241, 125_000, 250_000, 500_000) if s < total} | {total}):
            mat = unit_rows(allv[:n])
            truth = np.empty((len(q), 10), dtype=np.int64)
            for j0 in range(0, len(q), 50):  # exact top 10 on the stored (float16) rows
                sims = q[j0 : j0 + 50] @ mat.T
                truth[j0 : j0 + 50] = np.argpartition(-sims, 10, axis=1)[:, :10]
            del sims
            steps = steps_for(mat[:20_000])
            m = VectorMatrix(
                np.arange(n, dtype=np.int64),
                quantize(mat, steps),
                steps=steps,
                exact=lambda ids, mat=mat: {i: mat[i] for i in ids},
            )
            need = []
            for j in range(len(q)):
                dist = m._hamming(signs((q[j] / steps)[None, :])[0])[0].copy()
                for t in truth[j]:  # the pool takes the rows at its threshold distance in row order
                    need.append(int(np.count_nonzero(dist < dist[t])) + int(np.count_nonzero(dist[:t] == dist[t])) + 1)
            need_a = np.asarray(need)
            cover = ", ".join(f"/{d} {np.mean(need_a <= max(vm.SIGN_POOL, n // d)):.4f}" for d in shares)
            print(
                f"   {name} copies, {n:,} rows: the sign pool the true top 10 need:"
                f" p50 {np.percentile(need_a, 50):.0f}, p99 {np.percentile(need_a, 99):.0f},"
                f" p99.9 {np.percentile(need_a, 99.9):.0f}; covered by max({vm.SIGN_POOL}, rows / d): {cover}"
            )
            if n == total:
                t0 = time.thread_time()
                got = [{c for c, _ in m.knn(q[j], 10)} for j in range(len(q))]
                took = (time.thread_time() - t0) / len(q)
                r = np.mean([len(g & set(truth[j].tolist())) / 10 for j, g in enumerate(got)])
                print(
                    f"   {name} copies, {n:,} rows: recall@10 of the search (pool {vm.sign_pool(n):,} = rows /"
                    f" {vm.SIGN_SHARE}): {r:.4f} ({took * 1000:.1f} ms CPU a query)"
                )
            del m, mat
        del allv


def recall(paths: list[str], n_queries: int, copies: int = 0) -> None:
    import numpy as np

    from saipling.config.settings import Settings
    from saipling.embeddings import create_provider
    from saipling.storage.vector_matrix import VectorMatrix, quantize, steps_for, unit_rows

    exact32, texts = real_vectors(paths)
    # what the index stores since schema 9 and searches: float16 on disk, read back as float32 unit vectors
    mat = unit_rows(exact32.astype(np.float16))
    print(f"   {len(mat):,} distinct real vectors from {len(paths)} index files")
    sentences = [s for s in (t.split(". ")[0][:200].strip() for t in texts) if len(s) > 20]
    queries = (QUERIES + sentences)[:n_queries]
    provider = create_provider(Settings(provider="local"))
    qv = np.stack([provider.embed_query(q) for q in queries]).astype(np.float32)
    ids = np.arange(len(mat), dtype=np.int64)
    exact = VectorMatrix(ids, exact32)
    stored = VectorMatrix(ids, mat)  # the float32 matrix of a small index, of float16 vectors
    steps = steps_for(mat[:20_000])
    lookups = [0]

    def fetch(cids: list[int]) -> dict[int, Any]:
        lookups[0] += len(cids)
        return {c: mat[c] for c in cids}

    compact = VectorMatrix(ids, quantize(mat, steps), steps=steps, exact=fetch)
    codes_only = VectorMatrix(ids, quantize(mat, steps), steps=steps)
    truth = [{c for c, _ in exact.knn(q, 10)} for q in qv]
    print(
        f"   {len(queries)} queries embedded by {provider.name}; bytes per vector: float32 {DIMS * 4}, on disk"
        f" (float16) {DIMS * 2}, codes {DIMS}; truth: exact search on the float32 vectors; all else on float16 ones"
    )
    rows = [("float16 vectors, exact search (an index below the compact size)", stored)]
    rows += [("codes only, nothing rescored", codes_only)]
    import saipling.storage.vector_matrix as vm

    def measure(label: str) -> None:
        t = time.perf_counter()
        got = [{c for c, _ in compact.knn(q, 10)} for q in qv]
        took = (time.perf_counter() - t) / len(qv)
        r = sum(len(g & t) for g, t in zip(got, truth, strict=True)) / (10 * len(qv))
        print(f"   recall@10, {label}: {r:.4f} ({took * 1000:.1f} ms a query, {lookups[0] / len(qv):.0f} exact reads)")
        lookups[0] = 0

    default_pool, default_rescore = vm.SIGN_POOL, vm.RESCORE
    print(f"   sign bits: {compact._bits is not None} (pool max({vm.SIGN_POOL}, rows / {vm.SIGN_SHARE}))")
    for pool in (500, 1000, 2000, 4000):
        vm.SIGN_POOL = pool
        measure(f"sign pool {pool}, {vm.RESCORE} rescored")
    vm.SIGN_POOL = default_pool
    for rescore in (50, 100, 200):
        vm.RESCORE = rescore
        measure(f"sign pool {vm.SIGN_POOL}, {rescore} rescored")
    vm.RESCORE = default_rescore
    compact._bits = None
    measure(f"codes for every row (no sign bits), {vm.RESCORE} rescored")
    for name, m in rows:
        got = [{c for c, _ in m.knn(q, 10)} for q in qv]
        r = sum(len(g & t) for g, t in zip(got, truth, strict=True)) / (10 * len(qv))
        print(f"   recall@10, {name}: {r:.4f}")
    if copies:
        recall_at_scale(exact32, qv, copies, provider, texts)


# -- the run ---------------------------------------------------------------------------------------------------------
ROWS = [
    ("chunks", "chunks", "{:,.0f}"),
    ("text phase (s)", "text_s", "{:.1f}"),
    ("index.db (MB)", "db_mb", "{:.0f}"),
    ("index.db / prose", "db_ratio", "{:.1f}x"),
    ("open: import + open (s)", "open_s", "{:.2f}"),
    ("open, its CPU (s)", "open_cpu_s", "{:.2f}"),
    ("first semantic after open (s)", "first_semantic_s", "{:.2f}"),
    ("first semantic after open, its CPU (s)", "first_semantic_cpu_s", "{:.2f}"),
    ("integrity check still running after it (s)", "integrity_wait_s", "{:.2f}"),
    ("semantic p50 / p95 (ms)", ("semantic_p50", "semantic_p95"), "ms"),
    ("lexical p50 / p95 (ms)", ("lexical_p50", "lexical_p95"), "ms"),
    ("hybrid p50 / p95 (ms)", ("hybrid_p50", "hybrid_p95"), "ms"),
    ("semantic CPU p50 / p95 (ms)", ("semantic_cpu_p50", "semantic_cpu_p95"), "ms"),
    ("lexical CPU p50 / p95 (ms)", ("lexical_cpu_p50", "lexical_cpu_p95"), "ms"),
    ("hybrid CPU p50 / p95 (ms)", ("hybrid_cpu_p50", "hybrid_cpu_p95"), "ms"),
    ("lexical process CPU p50 / p95 (ms)", ("lexical_pcpu_p50", "lexical_pcpu_p95"), "ms"),
    ("hybrid process CPU p50 / p95 (ms)", ("hybrid_pcpu_p50", "hybrid_pcpu_p95"), "ms"),
    ("one edit, own process (s)", "own_edit_s", "{:.3f}"),
    ("semantic after own edit (ms)", "search_after_own_edit_s", "ms1"),
    ("semantic after other's write (s)", "search_after_other_write_s", "{:.3f}"),
    ("cold CLI semantic (s)", "cold_cli_s", "{:.2f}"),
    ("cold CLI semantic, its CPU (s)", "cold_cli_cpu_s", "{:.2f}"),
    ("RSS after first search (MB)", "rss_after_first_mb", "{:.0f}"),
    ("RSS / peak after all (MB)", ("rss_mb", "hwm_mb"), "mb2"),
    ("`saipling mcp`: first answer (s)", "mcp_first_answer_s", "{:.2f}"),
    ("`saipling mcp`: ready (s)", "mcp_ready_s", "{:.2f}"),
    ("`saipling mcp`: first hybrid (s)", "mcp_first_hybrid_s", "{:.2f}"),
    ("`saipling mcp`: warm hybrid p50 / p95 (ms)", ("mcp_hybrid_p50", "mcp_hybrid_p95"), "ms"),
    ("`saipling mcp`: server RSS / peak (MB)", ("mcp_rss_mb", "mcp_hwm_mb"), "mb2"),
]


def cell(r: dict[str, Any], key: Any, fmt: str) -> str:
    try:
        if fmt == "ms":
            return f"{r[key[0]] * 1000:.1f} / {r[key[1]] * 1000:.1f}"
        if fmt == "ms1":
            return f"{r[key] * 1000:.1f}"
        if fmt == "mb2":
            return f"{r[key[0]]:.0f} / {r[key[1]]:.0f}"
        return fmt.format(r[key])
    except (KeyError, TypeError):
        return "-"


def main() -> None:
    p = bu.parser(__doc__.splitlines()[0])
    p.add_argument("--size", action="append", choices=list(SIZES), help="55k, 269k, 1.07M (repeatable)")
    p.add_argument("--queries", type=int, default=30)
    p.add_argument("--rebuild", action="store_true")
    p.add_argument("--no-cli", action="store_true", help="skip the cold CLI row")
    p.add_argument("--recall", help="index files (comma-separated) whose all-MiniLM-L6-v2 vectors to test on")
    p.add_argument("--recall-queries", type=int, default=300)
    p.add_argument("--recall-copies", type=int, default=0, help="with --recall: a million rows of noisy copies too")
    p.add_argument("--baseline", help="another server/ folder (e.g. from `git archive`) measured alternately")
    p.add_argument("--rounds", type=int, default=1, help="measurement rounds (medians; alternating order)")
    p.add_argument("--text-only", action="store_true", help="time the text phase alone (keyword-only, fresh copies)")
    p.add_argument("--first-only", action="store_true", help="open + first semantic search and cold CLI only")
    p.add_argument("--mcp", action="store_true", help="also warm hybrid searches through `saipling mcp`, its RSS")
    p.add_argument("--only-mcp", action="store_true", help="the `saipling mcp` rows alone (with --size)")
    args = p.parse_args()
    if args.text_only:
        bu.banner("bench_scale --text-only: the text phase of a first index", args.quick)
        variants = [("", None)] + ([("base ", args.baseline)] if args.baseline else [])
        text_only(["300"] if args.quick else (args.size or ["55k"]), variants, args.rounds)
        return
    if args.recall:
        bu.banner("bench_scale --recall: the compact matrix against exact float32", args.quick)
        recall(args.recall.split(","), args.recall_queries, args.recall_copies)
        return
    sizes = ["300"] if args.quick else (args.size or ["55k", "269k"])
    bu.banner("bench_scale: the store and search at size", args.quick)
    if not bu.need_shared(bu.FICTION, "the scale benchmark"):
        return
    bu.CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    server = EmbeddingServer(bu.CACHE_ROOT)
    if args.first_only:
        try:
            variants = [("", None)] + ([("base ", args.baseline)] if args.baseline else [])
            first_only(sizes, variants, max(2, args.rounds), server.url)
        finally:
            server.stop()
        return
    if args.only_mcp:
        try:
            for size in sizes:
                root, _ = built(size, server.url, False)
                print(f"   {size} mcp: {json.dumps(child_json(['--child-mcp', str(root), str(args.queries)]))}")
        finally:
            server.stop()
        return
    # columns: each size, and with --baseline each size on the baseline code too (measured alternately)
    variants = [("", None)] + ([("base ", args.baseline)] if args.baseline else [])
    results: dict[str, dict[str, Any]] = {}
    try:
        for size in sizes:
            builds = {d: built(size, server.url, args.rebuild, d) for _, d in variants}
            for rnd in range(args.rounds):
                order = variants if rnd % 2 == 0 else variants[::-1]
                for prefix, server_dir in order:
                    root, rec = builds[server_dir]
                    db = root / ".saipling" / "index.db"
                    r = results.setdefault(prefix + size, {**rec})
                    r["db_mb"] = db.stat().st_size / 1e6
                    r["db_ratio"] = db.stat().st_size / max(1, rec.get("prose_bytes", 1))
                    got = child_json(["--child-measure", str(root), str(args.queries)], server_dir=server_dir)
                    if not args.no_cli:
                        cli_cpu: list[float] = []
                        got["cold_cli_s"] = cold_cli(root, server_dir=server_dir, cpu=cli_cpu)
                        got["cold_cli_cpu_s"] = bu.median(cli_cpu)
                    if args.mcp:
                        got |= child_json(["--child-mcp", str(root), str(args.queries)], server_dir=server_dir)
                    for key, value in got.items():  # the median over rounds
                        r.setdefault("_rounds", {}).setdefault(key, []).append(value)
                        r[key] = bu.median(r["_rounds"][key])
                    print(f"   {prefix}{size} round {rnd + 1}: {json.dumps(got)}", flush=True)
    finally:
        server.stop()
    cols = [prefix + size for size in sizes for prefix, _ in variants]
    print()
    ratio_head = " | ratio |" if len(cols) > 1 else " |"
    print("| row | " + " | ".join(cols) + ratio_head)
    print("|---|" + "---|" * (len(cols) + (1 if len(cols) > 1 else 0)))
    for label, key, fmt in ROWS:
        cells = [cell(results[c], key, fmt) for c in cols]
        ratio = ""
        if len(cols) > 1:  # with a baseline: this / baseline for each size; else last size / first
            k = key[0] if isinstance(key, tuple) else key
            pairs = [(c, "base " + c) for c in sizes] if args.baseline else [(cols[-1], cols[0])]
            parts = []
            for a_col, b_col in pairs:
                a, b = results[a_col].get(k), results[b_col].get(k)
                ok = isinstance(a, (int, float)) and isinstance(b, (int, float)) and b
                parts.append(f"{a / b:.2f}x" if ok else "-")
            ratio = " | " + " ".join(parts)
        print(f"| {label} | " + " | ".join(cells) + ratio + " |")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--serve-embeddings":
        serve_embeddings(sys.argv[2])
    elif len(sys.argv) > 2 and sys.argv[1] == "--child-index":
        child_index(sys.argv[2])
    elif len(sys.argv) > 2 and sys.argv[1] == "--child-text":
        child_text(sys.argv[2])
    elif len(sys.argv) > 2 and sys.argv[1] == "--child-edit":
        child_edit(sys.argv[2])
    elif len(sys.argv) > 2 and sys.argv[1] == "--child-first":
        child_first(sys.argv[2])
    elif len(sys.argv) > 3 and sys.argv[1] == "--child-mcp":
        child_mcp(sys.argv[2], int(sys.argv[3]))
    elif len(sys.argv) > 3 and sys.argv[1] == "--child-measure":
        child_measure(sys.argv[2], int(sys.argv[3]))
    else:
        main()

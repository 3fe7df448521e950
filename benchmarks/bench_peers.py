"""saipling beside embedded peers on the 13th Age vault: chromadb, lancedb, and ripgrep for keywords.

Same corpus (../shared/corpora/13th-age-srd, copied per run), same chunks (saipling's chunker: every system
indexes the chunks `TextPhase.prepare` makes, embedding `heading path + text`), same model object (one local
all-MiniLM-L6-v2 provider per process, used by every system in that process). Each system runs in a fresh
Python process per round (so RSS per phase is its own), rounds interleaved A B C / C B A:

  index    full index from nothing: total seconds and the model's share (`embed`: time inside
           embed_documents, identical work for all); total/embed is the overhead
  no-op    index again with nothing changed. Peers get the obvious pipeline: hash every file, compare with the
           hashes stored at index time, rewrite nothing
  edit     one note changed (a sentence appended to the vault's largest note), then re-indexed. saipling: its own
  incremental run (it
           re-embeds only chunks whose hash is new). Peers: the obvious pipeline, replace the file's chunks:
           re-chunk the file, embed all its chunks, delete the file's rows, add the new ones (lancedb: and
           rebuild its FTS index so keyword search sees the edit)
  queries  vector (query vector precomputed; saipling Store.knn, chromadb collection.query on its HNSW,
           lancedb flat search), keyword (saipling lexical search: FTS5 + snippets; lancedb native FTS;
           ripgrep -l -i over the files), hybrid (saipling hybrid with the query vector cached; lancedb
           hybrid with its default RRF reranker); p50/p95 over every query x pass, with BUSY spinning
           processes running (default 4: load >= 4 on 2 cores; `runnable` is the run queue sampled each
           pass, the load the queries meet; the 1-minute load average is printed too, and lags behind it)
  quality  known-item: the query is a note's title, the answer that note; hit@10 per mode where a system can
           answer it (chromadb has no ranked keyword search). Vector recall@10 against exact numpy KNN over the
           same vectors

    python benchmarks/bench_peers.py            # whole vault, 2 rounds (~15 min at load 4)
    python benchmarks/bench_peers.py --quick    # 150 notes, 1 round

Needs the optional extra: pip install -e '.[bench]' (chromadb, lancedb; never installed by CI) and the local
model; ripgrep (`rg`) when installed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchutil as bu  # noqa: E402

CORPUS = bu.SHARED / "corpora" / "13th-age-srd"
K = 10
SYSTEMS = ["saipling", "chromadb", "lancedb"]
EDIT_TEXT = "\n\nA late errata note: the gnoll war drums of Axis were heard again at dawn.\n"


# -- the worker (one system, one fresh process) -------------------------------------------------------------
class Timer:
    def __init__(self) -> None:
        self.seconds = 0.0
        self.texts = 0


def _provider(root: Path, embed_timer: Timer):
    from saipling.config.settings import load_settings
    from saipling.embeddings import create_provider

    settings, _ = load_settings(root, overrides={"provider": "local"})
    provider = create_provider(settings)
    inner = provider.embed_documents

    def timed(texts):
        t = time.perf_counter()
        embed_timer.texts += len(texts)
        try:
            return inner(texts)
        finally:
            embed_timer.seconds += time.perf_counter() - t

    provider.embed_documents = timed  # type: ignore[method-assign]
    return provider


def _chunker(root: Path, provider):
    """saipling's own scan + chunking (no index written): {rel path: [(chunk key, embed text, text)]}."""
    from saipling.files.scanner import scan
    from saipling.indexing.indexer import IndexSummary
    from saipling.markdown.chunker import embed_text_for
    from saipling.project import Project

    project = Project.open(root, provider=provider, create=False)

    def chunks(paths: list[str] | None = None) -> dict[str, list[tuple[str, str, str]]]:
        out = {}
        for e in scan(root, project.settings).entries:
            if paths is not None and e.rel not in paths:
                continue
            prep = project.indexer.text.prepare(e, e.abs_path.read_bytes(), IndexSummary())
            if prep is not None:
                out[e.rel] = [
                    (f"{e.rel}#{c.chunk_index}", embed_text_for(c.heading_path, c.text), c.text) for c in prep.chunks
                ]
        return out

    return chunks


def _changed(root: Path, manifest: dict[str, str]) -> list[str]:
    """The files whose content hash differs from the one recorded at index time (the peers' obvious pipeline)."""
    return [r for r, h in _hashes(root, manifest).items() if manifest[r] != h]


def _hashes(root: Path, rels) -> dict[str, str]:
    return {r: hashlib.sha256((root / r).read_bytes()).hexdigest() for r in rels}


class Saipling:
    def __init__(self, root: Path, provider) -> None:
        from saipling.project import Project

        self.project = Project.open(root, provider=provider)

    def index(self) -> None:
        self.project.index()

    def noop(self) -> None:
        self.project.index()

    def edit(self, rel: str) -> None:
        self.project.index()

    def vectors(self):
        return self.project.store.vector_matrix()

    def vector(self, q) -> list[str]:
        return [self.path_of(cid) for cid, _ in self.project.store.knn(q, K)]

    def path_of(self, cid: int) -> str:
        if not hasattr(self, "_paths"):
            self._paths = {int(i): p for i, p in self.project.store.conn.execute("SELECT id, path FROM chunks")}
        return self._paths[int(cid)]

    def _search(self, text: str, mode: str) -> list[str]:
        from saipling.retrieval.search import SearchRequest, run_search

        req = SearchRequest(query=text, max_results=K, mode=mode, log=False, respect_context_settings=False)
        return [r["filePath"] for r in run_search(self.project, req)["results"]]

    def keyword(self, text: str, q) -> list[str]:
        return self._search(text, "lexical")

    def hybrid(self, text: str, q) -> list[str]:
        return self._search(text, "hybrid")


class Chroma:
    def __init__(self, root: Path, provider, chunker, data: Path) -> None:
        import chromadb
        from chromadb.config import Settings

        self.root, self.provider, self.chunker = root, provider, chunker
        self.client = chromadb.PersistentClient(path=str(data), settings=Settings(anonymized_telemetry=False))
        self.col = self.client.get_or_create_collection("chunks", metadata={"hnsw:space": "cosine"})
        self.manifest: dict[str, str] = {}
        self.max_batch = self.client.get_max_batch_size()

    def _add(self, chunks: dict[str, list[tuple[str, str, str]]]) -> None:
        flat = [(key, emb, text, rel) for rel, cs in chunks.items() for key, emb, text in cs]
        if not flat:
            return
        vecs = self.provider.embed_documents([f[1] for f in flat]).vectors
        for i in range(0, len(flat), self.max_batch):
            part = flat[i : i + self.max_batch]
            self.col.add(
                ids=[f[0] for f in part],
                embeddings=vecs[i : i + len(part)],
                documents=[f[2] for f in part],
                metadatas=[{"path": f[3]} for f in part],
            )

    def index(self) -> None:
        chunks = self.chunker()
        self._add(chunks)
        self.manifest = _hashes(self.root, chunks)

    def noop(self) -> None:
        assert not _changed(self.root, self.manifest)

    def edit(self, rel: str) -> None:
        changed = _changed(self.root, self.manifest)
        chunks = self.chunker(changed)
        for r in changed:
            self.col.delete(where={"path": r})
        self._add(chunks)
        self.manifest.update(_hashes(self.root, changed))

    def vector(self, q) -> list[str]:
        res = self.col.query(query_embeddings=[q], n_results=K, include=["metadatas"])
        return [m["path"] for m in res["metadatas"][0]]

    def vector_ids(self, q) -> list[str]:
        return self.col.query(query_embeddings=[q], n_results=K, include=[])["ids"][0]

    keyword = None
    hybrid = None


class Lance:
    def __init__(self, root: Path, provider, chunker, data: Path) -> None:
        import lancedb

        self.root, self.provider, self.chunker = root, provider, chunker
        self.db = lancedb.connect(str(data))
        self.tbl = None
        self.manifest: dict[str, str] = {}

    def _rows(self, chunks) -> list[dict[str, Any]]:
        flat = [(key, emb, text, rel) for rel, cs in chunks.items() for key, emb, text in cs]
        if not flat:
            return []
        vecs = self.provider.embed_documents([f[1] for f in flat]).vectors
        return [{"id": f[0], "path": f[3], "text": f[2], "vector": v} for f, v in zip(flat, vecs, strict=True)]

    def index(self) -> None:
        chunks = self.chunker()
        self.tbl = self.db.create_table("chunks", data=self._rows(chunks), mode="overwrite")
        self.tbl.create_fts_index("text", replace=True)
        self.manifest = _hashes(self.root, chunks)

    def noop(self) -> None:
        assert not _changed(self.root, self.manifest)

    def edit(self, rel: str) -> None:
        changed = _changed(self.root, self.manifest)
        rows = self._rows(self.chunker(changed))
        for r in changed:
            self.tbl.delete("path = '" + r.replace("'", "''") + "'")
        self.tbl.add(rows)
        self.tbl.create_fts_index("text", replace=True)
        self.manifest.update(_hashes(self.root, changed))

    def vector(self, q) -> list[str]:
        return [r["path"] for r in self.tbl.search(q).metric("cosine").limit(K).select(["path"]).to_list()]

    def vector_ids(self, q) -> list[str]:
        return [r["id"] for r in self.tbl.search(q).metric("cosine").limit(K).select(["id"]).to_list()]

    def keyword(self, text: str, q) -> list[str]:
        return [r["path"] for r in self.tbl.search(text, query_type="fts").limit(K).select(["path"]).to_list()]

    def hybrid(self, text: str, q) -> list[str]:
        return [
            r["path"]
            for r in self.tbl.search(query_type="hybrid").vector(q).text(text).limit(K).select(["path"]).to_list()
        ]


def _runnable() -> int:
    """Tasks running or ready to run right now (/proc/loadavg's 4th field, this process included): the load the
    queries meet, which the 1-minute load average only reaches after a minute or two of it."""
    try:
        with open("/proc/loadavg", encoding="ascii") as f:
            return int(f.read().split()[3].split("/")[0])
    except (OSError, IndexError, ValueError):
        return -1


def _rss(workers: float = 0.0) -> dict[str, float]:
    """This process's resident memory and peak, and `workers`: the peak of its child processes meanwhile
    (saipling's chunking workers); `total` counts both, as the machine holds both during a first index."""
    m = bu.proc_status_mb()
    rss = round(m.get("VmRSS", 0.0), 1)
    return {
        "rss": rss,
        "peak": round(m.get("VmHWM", 0.0), 1),
        "workers": round(workers, 1),
        "total": round(rss + workers, 1),
    }


def _children() -> list[str]:
    """This process's child processes (Linux /proc)."""
    out: list[str] = []
    for task in Path("/proc/self/task").glob("*/children"):
        try:
            out += task.read_text().split()
        except OSError:
            continue
    return out


class ChildPeak:
    """The summed peak resident memory (VmHWM) of this process's children while it runs (saipling's chunking
    workers and the resource tracker multiprocessing starts with them), sampled every 20 ms (getrusage's RUSAGE_CHILDREN
    would count the parent's pages a child had between fork and exec)."""

    def __init__(self) -> None:
        import threading

        self.mb, self._stop = 0.0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        peaks: dict[str, float] = {}  # pid -> MB, every child seen (workers and multiprocessing's resource tracker)
        while not self._stop.wait(0.02):
            for pid in _children():
                try:
                    with open(f"/proc/{pid}/status", encoding="ascii") as f:
                        kb = next((int(line.split()[1]) for line in f if line.startswith("VmHWM")), 0)
                except (OSError, ValueError):
                    continue
                peaks[pid] = max(peaks.get(pid, 0.0), kb / 1024)
            self.mb = max(self.mb, sum(peaks.values()))

    def __enter__(self) -> ChildPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _pct(xs: list[float]) -> dict[str, float]:
    return {"p50": bu.percentile(xs, 50) * 1000, "p95": bu.percentile(xs, 95) * 1000}


def worker(name: str, root: Path, data: Path, queries: list[dict], busy: int, passes: int, edited: str) -> dict:
    import numpy as np

    out: dict[str, Any] = {"system": name, "rss": {}}
    embed = Timer()
    provider = _provider(root, embed)
    provider.embed_query("warm up")  # the model loads outside the timed phases, in every system alike
    out["rss"]["model loaded"] = _rss()
    ours = name.startswith("saipling")
    chunker = _chunker(root, provider) if not ours else None
    sys_ = (
        Saipling(root, provider) if ours else (Chroma if name == "chromadb" else Lance)(root, provider, chunker, data)
    )
    t = time.perf_counter()
    with ChildPeak() as children:
        sys_.index()
    out["index"] = {"total": time.perf_counter() - t, "embed": embed.seconds}
    out["rss"]["index"] = _rss(children.mb)
    t = time.perf_counter()
    sys_.noop()
    out["noop"] = time.perf_counter() - t
    with open(root / edited, "a", encoding="utf-8") as f:
        f.write(EDIT_TEXT)
    embed.seconds, embed.texts = 0.0, 0
    t = time.perf_counter()
    sys_.edit(edited)
    out["edit"] = {"total": time.perf_counter() - t, "embed": embed.seconds, "chunks": embed.texts}
    out["rss"]["edit"] = _rss()

    qv = [np.asarray(provider.embed_query(q["text"]), dtype=np.float32) for q in queries]
    # recall@10 against exact KNN over the vectors this system holds (the same model and chunks: the same
    # vectors); a returned chunk counts when its cosine reaches the exact 10th best (ties: duplicate passages)
    if ours:
        ids, mat = sys_.vectors()
        key_vecs = dict(zip(ids.tolist(), mat, strict=True))
        got_ids = [[c for c, _ in sys_.project.store.knn(v, K)] for v in qv]
    else:
        if name == "chromadb":
            got = sys_.col.get(include=["embeddings"])
            key_vecs = dict(zip(got["ids"], got["embeddings"], strict=True))
        else:
            tbl = sys_.tbl.to_arrow()
            key_vecs = dict(zip(tbl["id"].to_pylist(), tbl["vector"].to_pylist(), strict=True))
        got_ids = [sys_.vector_ids(v) for v in qv]
    mat = np.stack([np.asarray(v, dtype=np.float32) for v in key_vecs.values()])
    found = 0
    for v, got_k in zip(qv, got_ids, strict=True):
        kth = np.sort(mat @ v)[-K]
        found += sum(float(np.dot(np.asarray(key_vecs[g], dtype=np.float32), v)) >= kth - 1e-5 for g in got_k)
    out["recall@10"] = found / (K * len(qv))

    modes = {
        "vector": lambda i: sys_.vector(qv[i]),
        "keyword": (lambda i: sys_.keyword(queries[i]["text"], qv[i])) if sys_.keyword else None,
        "hybrid": (lambda i: sys_.hybrid(queries[i]["text"], qv[i])) if sys_.hybrid else None,
    }
    for fn in modes.values():  # warm: first-call costs (query cache, FTS vocab, lazy imports) are not per query
        if fn:
            fn(0)
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    try:
        time.sleep(2 if busy else 0)
        times: dict[str, list[float]] = {m: [] for m, fn in modes.items() if fn}
        hits: dict[str, int] = dict.fromkeys(times, 0)
        runnable: list[int] = []
        for p in range(passes):
            if (now := _runnable()) >= 0:  # (-1: not readable here)
                runnable.append(now)
            for i in range(len(queries)):
                for m in times:
                    t = time.perf_counter()
                    paths = modes[m](i)
                    times[m].append(time.perf_counter() - t)
                    if p == 0:
                        hits[m] += queries[i]["path"] in paths
        out["load"] = os.getloadavg()[0]  # (the 1-minute average lags: the spinners started seconds ago)
        out["runnable"] = float(np.median(runnable)) if runnable else float("nan")
    finally:
        for s in spinners:
            s.kill()
    out["queries"] = {m: _pct(ts) | {"hit@10": hits[m] / len(queries)} for m, ts in times.items()}
    out["rss"]["queries"] = _rss()
    return out


# -- ripgrep ------------------------------------------------------------------------------------------------
def ripgrep(root: Path, queries: list[dict], passes: int) -> dict | None:
    rg = shutil.which("rg")
    if not rg:
        return None
    times: list[float] = []
    hits = 0
    for p in range(passes):
        for q in queries:
            t = time.perf_counter()
            res = subprocess.run([rg, "-l", "-i", "-F", q["text"], str(root)], capture_output=True, text=True)
            times.append(time.perf_counter() - t)
            if p == 0:
                files = [Path(x).relative_to(root).as_posix() for x in res.stdout.splitlines()][:K]
                hits += q["path"] in files
    return {"system": "ripgrep", "queries": {"keyword": _pct(times) | {"hit@10": hits / len(queries)}}}


# -- the parent ---------------------------------------------------------------------------------------------
def make_corpus(src: Path, dest: Path, limit: int | None) -> Path:
    bu.copy_corpus(src, dest, limit)
    return dest


def pick_queries(root: Path, n: int) -> list[dict]:
    notes = sorted(p for p in root.rglob("*.md") if ".saipling" not in p.parts and len(p.stem) > 3)
    step = max(1, len(notes) // n)
    return [
        {"text": p.stem.replace("-", " ").replace("_", " "), "path": p.relative_to(root).as_posix()}
        for p in notes[::step][:n]
    ]


def main() -> None:
    p = bu.parser(__doc__.splitlines()[0])
    p.add_argument("--busy", type=int, default=4, help="spinning processes during the query phase")
    p.add_argument("--corpus", type=Path, default=CORPUS, help="the vault (default ../shared/corpora/13th-age-srd)")
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--systems", default=",".join(SYSTEMS))
    p.add_argument("--worker", help=argparse_hidden())
    p.add_argument("--root")
    p.add_argument("--data")
    p.add_argument("--queries")
    p.add_argument("--passes", type=int, default=5)
    p.add_argument("--edit", help="the note to edit (default: the largest, where chunk reuse matters most)")
    args = p.parse_args()
    if args.worker:
        queries = json.loads(Path(args.queries).read_text())
        res = worker(args.worker, Path(args.root), Path(args.data), queries, args.busy, args.passes, args.edit)
        print("RESULT " + json.dumps(res))
        return
    bu.banner("saipling vs chromadb vs lancedb (+ ripgrep) on the 13th Age vault", args.quick)
    if not bu.need_shared(args.corpus, "bench_peers"):
        return
    if not bu.local_available():
        print("SKIPPED: the local model extra is not installed")
        return
    systems = [s for s in args.systems.split(",") if s]
    for s, mod in (("chromadb", "chromadb"), ("lancedb", "lancedb")):
        if s in systems and not _importable(mod):
            print(f"SKIPPED {s}: not installed (pip install -e '.[bench]')")
            systems.remove(s)
    rounds = args.rounds or (1 if args.quick else 2)
    limit = 150 if args.quick else None
    passes = 3 if args.quick else args.passes
    results: dict[str, list[dict]] = {s: [] for s in systems}
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as tmp:
        base = make_corpus(args.corpus, Path(tmp) / "corpus", limit)
        queries = pick_queries(base, 20 if args.quick else 40)
        edit = (
            args.edit
            or max((q for q in base.rglob("*.md")), key=lambda f: (f.stat().st_size, f.as_posix()))
            .relative_to(base)
            .as_posix()
        )
        print(f"   edited note: {edit} ({(base / edit).stat().st_size} bytes)")
        qfile = Path(tmp) / "queries.json"
        qfile.write_text(json.dumps(queries))
        rg = ripgrep(base, queries, passes)
        for r in range(rounds):
            order = systems if r % 2 == 0 else systems[::-1]  # A B C, C B A
            for s in order:
                root = Path(tmp) / f"{s}-{r}"
                shutil.copytree(base, root)
                data = Path(tmp) / f"{s}-{r}-data"
                print(f"   round {r + 1}/{rounds}: {s} ...", flush=True)
                proc = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--worker",
                        s,
                        "--root",
                        str(root),
                        "--data",
                        str(data),
                        "--queries",
                        str(qfile),
                        "--busy",
                        str(args.busy),
                        "--passes",
                        str(passes),
                        "--edit",
                        edit,
                    ],
                    capture_output=True,
                    text=True,
                    env=os.environ | {"SAIPLING_LOG_LEVEL": "WARNING"},
                )
                line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
                if line is None:
                    print(proc.stdout[-2000:], proc.stderr[-4000:])
                    raise SystemExit(f"{s} failed")
                results[s].append(json.loads(line[7:]))
                shutil.rmtree(root, ignore_errors=True)
                shutil.rmtree(data, ignore_errors=True)
        n_chunks = sum(1 for _ in base.rglob("*.md"))
    report(results, rg, rounds, n_chunks, args.busy)


def argparse_hidden() -> str:
    import argparse

    return argparse.SUPPRESS


def _importable(mod: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(mod) is not None


def _med(rs: list[dict], *path: str) -> float:
    vals = []
    for r in rs:
        v: Any = r
        for k in path:
            v = v.get(k) if isinstance(v, dict) else None
            if v is None:
                break
        if isinstance(v, int | float):
            vals.append(float(v))
    return bu.median(vals) if vals else float("nan")


def report(results: dict[str, list[dict]], rg: dict | None, rounds: int, notes: int, busy: int) -> None:
    systems = list(results)
    print(f"\n{notes} notes, {rounds} round(s) interleaved, medians over rounds; queries with {busy} busy processes")
    rows = []
    for s in systems:
        rs = results[s]
        tot, emb = _med(rs, "index", "total"), _med(rs, "index", "embed")
        rows.append(
            [
                s,
                bu.fmt_s(tot),
                bu.fmt_s(emb),
                f"{tot / emb:.3f}" if emb else "-",
                bu.fmt_ms(_med(rs, "noop")),
                bu.fmt_s(_med(rs, "edit", "total")),
                f"{_med(rs, 'edit', 'chunks'):.0f}",
                f"{_med(rs, 'rss', 'index', 'rss'):.0f}",
                f"{_med(rs, 'rss', 'index', 'peak'):.0f}",
                f"{_med(rs, 'rss', 'index', 'workers'):.0f}",
                f"{_med(rs, 'rss', 'queries', 'rss'):.0f}",
                f"{_med(rs, 'recall@10'):.3f}",
            ]
        )
    print(
        "\nIndexing (seconds; no-op in ms; RSS MB of the system's own fresh process, model included; workers: the"
        " peak of its child processes, saipling's chunking workers)"
    )
    print(
        bu.table(
            [
                "system",
                "index total",
                "embed",
                "total/embed",
                "no-op ms",
                "one edit",
                "re-embedded",
                "RSS index",
                "peak",
                "workers",
                "RSS queries",
                "vector recall@10",
            ],
            rows,
        )
    )
    qrows = []
    for s in systems:
        rs = results[s]
        for m in ("vector", "keyword", "hybrid"):
            if not any(m in r.get("queries", {}) for r in rs):
                qrows.append(
                    [
                        s,
                        m,
                        "-",
                        "-",
                        "cannot answer",
                        f"{_med(rs, 'load'):.1f}",
                        f"{_med(rs, 'runnable'):.0f}",
                    ]
                )
                continue
            qrows.append(
                [
                    s,
                    m,
                    bu.fmt_ms(_med(rs, "queries", m, "p50") / 1000),
                    bu.fmt_ms(_med(rs, "queries", m, "p95") / 1000),
                    f"{_med(rs, 'queries', m, 'hit@10'):.2f}",
                    f"{_med(rs, 'load'):.1f}",
                    f"{_med(rs, 'runnable'):.0f}",
                ]
            )
    if rg:
        q = rg["queries"]["keyword"]
        qrows.append(
            [
                "ripgrep",
                "keyword (rg -l -i, unranked)",
                bu.fmt_ms(q["p50"] / 1000),
                bu.fmt_ms(q["p95"] / 1000),
                f"{q['hit@10']:.2f}",
                "-",
                "-",
            ]
        )
    print("\nQueries (ms; hit@10: the note whose title is the query is in the top 10)")
    print(bu.table(["system", "mode", "p50", "p95", "hit@10", "load avg (1 min)", "runnable"], qrows))
    if "saipling" not in results:
        return
    sp = results["saipling"]
    print("\nRatios saipling / peer (< 1: saipling better)")
    rrows = []
    for s in systems:
        if s.startswith("saipling"):
            continue
        rs = results[s]

        def ratio(*path: str, rs: list[dict] = rs) -> str:
            a, b = _med(sp, *path), _med(rs, *path)
            return f"{a / b:.2f}" if b and b == b and a == a else "-"

        rrows.append(
            [
                s,
                ratio("index", "total"),
                ratio("noop"),
                ratio("edit", "total"),
                ratio("rss", "index", "total"),
                ratio("queries", "vector", "p50"),
                ratio("queries", "keyword", "p50"),
                ratio("queries", "hybrid", "p50"),
            ]
        )
    print(
        bu.table(
            [
                "peer",
                "index total",
                "no-op",
                "one edit",
                "RSS index+workers",
                "vector p50",
                "keyword p50",
                "hybrid p50",
            ],
            rrows,
        )
    )
    print(
        f"\nsaipling index total/embed {_med(sp, 'index', 'total') / _med(sp, 'index', 'embed'):.3f} "
        f"(target <= 1.05); load average now {bu._loadavg()}"
    )


if __name__ == "__main__":
    main()

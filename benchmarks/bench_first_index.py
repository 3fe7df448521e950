"""Benchmark: first index of the fiction corpus, keywords first, then embeddings streaming in (issue 14).

A fresh copy of ../shared/corpora/fiction-chapters (1,129 chapters) is indexed from nothing with the local model,
as a project opened for the first time. While the run goes on, a second thread searches (mode lexical, limited to
that file) for a word of the last file the run reads, every 0.25 s. Measured:

  keywords ready   seconds until that word is found by keyword search (every file keyword-searchable)
  semantic ready   seconds until the run ends with every chunk embedded (semantic search complete)
  ETA error        at 10 / 25 / 50 % of the embedding phase: the ETA the run reported (measured throughput)
                   against the time that phase actually took from there
  save -> current  afterwards, on the indexed project: a 10,000-word chapter gets 7 lines inserted at the top and
                   is saved; the time of the text pass the server runs at once (Project.refresh: re-read,
                   re-chunk with the model's tokenizer, replace chunks/keywords/line ranges; median of 5)

The machine is shared: the load average before and after is printed with the figures.

    python benchmarks/bench_first_index.py                      # the whole corpus, local model
    python benchmarks/bench_first_index.py --quick              # 120 chapters
    python benchmarks/bench_first_index.py --corpus PATH        # another folder of markdown files
    python benchmarks/bench_first_index.py --keywords-only      # stop (cancel) once keyword-searchable
    python benchmarks/bench_first_index.py --baseline main      # keywords ready: main vs this checkout, in
                                                                # alternating subprocesses (--rounds N each)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchutil as bu  # noqa: E402

try:
    from saipling.files.scanner import scan  # noqa: E402
except ImportError:  # a --baseline from before the folders by layer (issue 32)
    from saipling.scanner import scan  # noqa: E402  # type: ignore[no-redef]
from saipling.project import Project  # noqa: E402


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = bu.parser(__doc__.split("\n")[0])
    ap.add_argument("--corpus", type=Path, default=bu.FICTION, help="folder to copy and index")
    ap.add_argument("--provider", default="local", help="local (default) | none")
    ap.add_argument("--keywords-only", action="store_true", help="cancel the run once keyword-searchable")
    ap.add_argument("--baseline", help="git ref: time keywords-ready for its server/ vs this checkout's")
    ap.add_argument("--rounds", type=int, default=2, help="with --baseline: runs of each side (default 2)")
    ap.add_argument("--json", action="store_true", help=argparse_hidden())
    args = ap.parse_args()
    if not args.json:
        bu.banner("bench_first_index: keyword-searchable first, then embeddings", args.quick)
    if not bu.need_shared(args.corpus, "first index of the fiction corpus"):
        return
    if args.provider == "local" and not bu.local_available():
        print("SKIPPED: the local model is not installed")
        return
    if args.baseline:
        compare(args)
        return
    tmp = Path(tempfile.mkdtemp(prefix="saipling-bench-first-"))
    try:
        n = bu.copy_corpus(args.corpus, tmp, 120 if args.quick else None)
        project = Project.open(tmp, overrides={"provider": args.provider})
        entries = scan(tmp, project.settings).entries
        last = entries[-1].rel  # the run reads files in scan order: this one is read last
        words = re.findall(r"[A-Za-z]{7,}", (tmp / last).read_text(encoding="utf-8", errors="replace"))
        word = max(words[-200:], key=len) if words else "the"
        if not args.json:
            print(f"   {n} files copied to {tmp}; probe: {word!r} in {last}")
        t0 = time.perf_counter()
        marks: dict[str, float] = {}
        etas: dict[int, tuple[float, float]] = {}  # percent -> (time, eta reported)
        load_before = load()

        def progress(p) -> None:
            now = time.perf_counter() - t0
            if p.phase == "embedding":
                marks.setdefault("embedding", now)
                pct = 100 * p.chunks_done / max(1, p.chunks_total)
                for mark in (10, 25, 50):
                    if pct >= mark and mark not in etas and p.eta_seconds is not None:
                        etas[mark] = (now, p.eta_seconds)

        found = threading.Event()
        cancel = threading.Event()

        def probe() -> None:
            while not found.is_set() and "done" not in marks:
                try:
                    hits = project.search(
                        {"query": word, "mode": "lexical", "maxResults": 1, "filter": {"pathPrefix": last}}
                    )["results"]
                except Exception:  # noqa: BLE001 - the index is being written: try again
                    hits = []
                if hits:
                    marks["found"] = time.perf_counter() - t0
                    found.set()
                    if args.keywords_only:
                        cancel.set()
                    return
                time.sleep(0.25)

        prober = threading.Thread(target=probe, daemon=True)
        prober.start()
        summary = project.index(progress=progress, cancel=cancel)
        marks["done"] = time.perf_counter() - t0
        prober.join(5)
        if args.keywords_only:
            project.close()
            import saipling

            result = {
                "found": marks.get("found"),
                "files": n,
                "server": str(Path(saipling.__file__).parents[1]),
                "load_before": load_before,
                "load_after": load(),
            }
            if args.json:
                print(json.dumps(result))
            else:
                print(f"load average before {load_before}, after {load()} (2 cores, shared)")
                print(f"keyword search finds a word of the last file after {bu.fmt_s(result['found'] or 0)}")
            return
        st = project.status()
        # a 10,000-word chapter (chapters of the corpus joined), indexed, then 7 lines inserted at the top
        text, n_words = [], 0
        for e in entries:
            body = (tmp / e.rel).read_text(encoding="utf-8", errors="replace")
            text.append(body)
            n_words += len(body.split())
            if n_words >= 10_000:
                break
        big = tmp / "zz-big-chapter.md"
        big.write_text("\n\n".join(text), encoding="utf-8")
        project.index(paths=[big.name])
        refresh_times = []
        for k in range(5):
            big.write_text("".join(f"Inserted line {k}.{n}\n" for n in range(7)) + "\n\n".join(text), encoding="utf-8")
            t, s = bu.timed(lambda: project.refresh([big.name]))
            assert s.changed == 1 and s.embedded == 0
            refresh_times.append(t)
        project.close()
        print()
        print(f"load average before {load_before}, after {load()} (2 cores, shared)")
        rows = [
            ("files / chunks", f"{summary.files} / {summary.chunks}"),
            ("keyword search finds a word of the last file", bu.fmt_s(marks.get("found", float("nan")))),
            ("first round of embeddings stored", bu.fmt_s(marks.get("embedding", float("nan")))),
            ("semantic search complete (run ended)", bu.fmt_s(marks["done"])),
            ("unembedded chunks left", st["unembeddedChunks"]),
            (
                f"save -> text current, {n_words:,}-word chapter (median of 5)",
                bu.fmt_s(bu.median(refresh_times)),
            ),
        ]
        for mark, (at, eta) in sorted(etas.items()):
            actual = marks["done"] - at
            rows.append(
                (f"ETA at {mark}% of embedding vs actual", f"{eta:.0f} s vs {actual:.0f} s ({eta / actual:.2f}x)")
            )
        print(bu.table(["measure", "value"], rows))
        ok = marks.get("found", 1e9) < 60
        print(f"target: keyword-searchable in < 60 s: {bu.verdict(ok)}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def argparse_hidden() -> str:
    import argparse

    return argparse.SUPPRESS


def compare(args) -> None:
    """Keywords-ready time of REF's server/ vs this checkout's, alternating subprocesses (same corpus, same load)."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(
            ["git", "-C", str(bu.REPO), "archive", args.baseline, "server"], capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        sides = {args.baseline: str(Path(tmp) / "server"), "this checkout": str(bu.REPO / "server")}
        cmd = [
            sys.executable,
            __file__,
            "--keywords-only",
            "--json",
            "--corpus",
            str(args.corpus),
            "--provider",
            args.provider,
        ] + (["--quick"] if args.quick else [])
        results: dict[str, list[dict]] = {k: [] for k in sides}
        for r in range(args.rounds):
            for name, server in sides.items():
                env = {
                    **os.environ,
                    "SAIPLING_BENCH_SERVER": server,
                }  # imported ahead of the editable install
                out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
                res = json.loads(out.strip().splitlines()[-1])
                assert res["server"] == server, res  # the side we meant to time
                results[name].append(res)
                print(f"   round {r + 1} {name}: {res['found']:.1f} s (load {res['load_before']})", flush=True)
    base = bu.median([x["found"] for x in results[args.baseline]])
    new = bu.median([x["found"] for x in results["this checkout"]])
    rows = [
        (
            name,
            bu.fmt_s(bu.median([x["found"] for x in rs])),
            ", ".join(f"{x['found']:.1f}" for x in rs),
            "; ".join(x["load_before"] for x in rs),
        )
        for name, rs in results.items()
    ]
    print(bu.table(["server", "keywords ready (median)", "runs (s)", "load average before each run"], rows))
    print(f"ratio this checkout / {args.baseline}: {new / base:.2f}x")
    print(f"target: keyword-searchable in < 60 s: {bu.verdict(new < 60)}")


if __name__ == "__main__":
    main()

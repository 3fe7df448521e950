"""Chunks and identifiers on third-party markdown: the Node.js API docs (Debian's `nodejs-doc`), this checkout vs
a git ref side by side.

Needs `/usr/share/doc/nodejs/api/*.md.gz` or SAIPLING_NODEDOCS (Debian's `nodejs-doc` unpacked, not installed:
_devsets.APT_HINT); skips cleanly without it. The files are unpacked into a temp dir (nothing is written outside
it). Per side (the baseline's `server/` from `git archive REF`, and this checkout's), each in its own subprocess:

- chunks: count, and the share of noise chunks: a chunk whose text is nothing but HTML comments, link-reference
  definitions and heading lines (a chunk counts as `comment` when it held a comment, else `linkdef` when it held
  a link definition, else `heading-only`), with the local provider's limits and token counter;
- whether the lead-in at `child_process.md:758` ("Alternatively one can redirect ...:") is in one chunk with the
  code block it introduces (lines 760-771);
- with `--index`: `saipling index --provider local` of a fresh copy (wall seconds, index.db size), then the rank
  of the expected section for the issue's identifier queries, lexical and hybrid (`saipling search --json -k 10`).
  Sides run one after the other (baseline first), so load differs: run it on a quiet machine or twice.

    python benchmarks/bench_nodedocs.py                       # chunk figures only, vs main
    nice -n 10 python benchmarks/bench_nodedocs.py --index    # plus index time/size and the query ranks
    nice -n 10 python benchmarks/bench_nodedocs.py --index --provider none --rounds 3   # keywords only
    python benchmarks/bench_nodedocs.py --baseline 5b2b231 --index
    python benchmarks/bench_nodedocs.py --corpus ../shared/corpora/13th-age-srd   # chunk figures of another folder
"""

from __future__ import annotations

import gzip
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchutil as bu  # noqa: E402
import _devsets as ds  # noqa: E402

DOCS = ds.NODE_DOCS

# (query, file, the expected section heading starts with this): the examples of issue 31
QUERIES = [
    ("fs.createReadStream", "fs.md", "fs.createReadStream("),
    ("createReadStream", "fs.md", "fs.createReadStream("),
    ("create read stream", "fs.md", "fs.createReadStream("),
    ("timeout", "timers.md", "setTimeout("),
    ("setTimeout", "timers.md", "setTimeout("),
    ("child process redirect output into files", "child_process.md", "options.detached"),
]

CHILD = r"""
import json, re, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import tempfile
from saipling.markdown.chunker import chunk_document
from saipling.files.metadata import extract_metadata
from saipling.project import Project
corpus = Path(sys.argv[2])
with tempfile.TemporaryDirectory() as tmp:
    project = Project.open(Path(tmp), overrides={"provider": "local"})
    limits = project.indexer.limits()
    counter = getattr(project.indexer, "token_counter", None)
    count = counter() if callable(counter) else None
    project.close()
extra = {"count_tokens": count} if count is not None else {}
COMMENT = re.compile(r"<!--.*?-->", re.S)
LINKDEF = re.compile(r"(?m)^ {0,3}\[[^\]\n]+\]:[ \t]*\S.*$")
HEADING = re.compile(r"(?m)^ {0,3}#{1,6}(?:[ \t].*)?$")
kinds = {"comment": 0, "linkdef": 0, "heading-only": 0}
holding = 0  # chunks whose indexed text holds a comment or a link definition at all
n = 0
tokens = 0  # word pieces embedded (sum of the chunks' token counts): the embedding phase's work
lead_in = None
for f in sorted(corpus.rglob("*.md")):
    rel = f.relative_to(corpus).as_posix()
    text = f.read_text(encoding="utf-8")
    for c in chunk_document(text, extract_metadata(rel, text), limits, **extra):
        n += 1
        tokens += c.token_count
        holding += bool(COMMENT.search(c.text) or LINKDEF.search(c.text))
        rest = HEADING.sub("", LINKDEF.sub("", COMMENT.sub("", c.text)))
        if not rest.strip():
            kind = "comment" if COMMENT.search(c.text) else "linkdef" if LINKDEF.search(c.text) else "heading-only"
            kinds[kind] += 1
        if rel == "child_process.md" and c.start_line <= 758 <= c.end_line:
            lead_in = [c.start_line, c.end_line, "subprocess.unref();" in c.text.split("redirect", 1)[-1]]
print(json.dumps({"chunks": n, "tokens": tokens, "noise": kinds, "holding": holding,
                  "limits": [limits.max_tokens, limits.target_tokens,
                  limits.overlap_tokens, getattr(limits, "block_tokens", None)], "lead_in": lead_in}))
"""


def unpack(dest: Path) -> int:
    n = 0
    for gz in sorted(DOCS.glob("*.md.gz")):
        (dest / gz.name[:-3]).write_bytes(gzip.decompress(gz.read_bytes()))
        n += 1
    return n


def run_saipling(server: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(server))
    return subprocess.run([sys.executable, "-m", "saipling", *args], env=env, capture_output=True, text=True)


def index_side(server: Path, corpus: Path, work: Path, provider: str = "local") -> dict:
    root = work / "root"
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(corpus, root)
    t0, r0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    done = run_saipling(server, ["index", str(root), "--json", "--yes", "--provider", provider])
    seconds, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)  # (load on a shared machine: CPU time too)
    if done.returncode != 0:
        raise SystemExit(f"index failed: {done.stderr[-2000:]}")
    summary = json.loads(done.stdout)
    db = root / ".saipling" / "index.db"
    size = sum(p.stat().st_size for p in db.parent.glob("index.db*"))
    return {
        "seconds": seconds,
        "cpu": cpu,
        "chunks": summary.get("chunks"),
        "bytes": size,
        "ranks": query_ranks(server, root),
    }


def query_ranks(server: Path, root: Path) -> dict[str, tuple[int | None, int | None]]:
    """(rank of the expected section, rank of its file) per query and mode, in the top 10."""
    ranks = {}
    for query, file, heading in QUERIES:
        for mode in ("lexical", "hybrid"):
            out = run_saipling(server, ["search", query, "--root", str(root), "--json", "-k", "10", "--mode", mode])
            results = json.loads(out.stdout or "{}").get("results", []) if out.returncode == 0 else []
            sec = next(
                (
                    i
                    for i, r in enumerate(results, 1)
                    if r["filePath"] == file and (r.get("sectionHeading") or "").lstrip("#").strip().startswith(heading)
                ),
                None,
            )
            fil = next((i for i, r in enumerate(results, 1) if r["filePath"] == file), None)
            ranks[f"{query} [{mode}]"] = (sec, fil)
    return ranks


def main() -> None:
    p = bu.parser(__doc__.split("\n")[0])
    p.add_argument("--baseline", default="main", help="git ref of the baseline (default: main)")
    p.add_argument("--index", action="store_true", help="also index each side (with --provider)")
    p.add_argument("--provider", default="local", help="for --index: local (default) or none (keywords only)")
    p.add_argument("--rounds", type=int, default=1, help="for --index: index runs per side, alternating")
    p.add_argument("--corpus", type=Path, help="chunk figures of another markdown folder instead (read only)")
    args = p.parse_args()
    bu.banner("Node.js API docs: chunks and identifiers", args.quick)
    if args.corpus is None and (not DOCS.is_dir() or not any(DOCS.glob("*.md.gz"))):
        print(f"SKIPPED: {DOCS}/*.md.gz is absent ({ds.APT_HINT})")
        return
    with tempfile.TemporaryDirectory(prefix="saipling-nodedocs-") as tmp:
        tmpd = Path(tmp)
        if args.corpus is not None:
            if not bu.need_shared(args.corpus, "the corpus"):
                return
            corpus, files = args.corpus, sum(1 for _ in args.corpus.rglob("*.md"))
        else:
            corpus = tmpd / "api"
            corpus.mkdir()
            files = unpack(corpus)
        base = tmpd / "base"
        base.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(bu.REPO), "archive", args.baseline, "server"], capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
        sides = {"baseline": base / "server", "current": bu.REPO / "server"}
        print(f"   {files} files; baseline {args.baseline}\n")
        stats = {}
        for name, server in sides.items():
            out = subprocess.run(
                [sys.executable, "-c", CHILD, str(server), str(corpus)], capture_output=True, text=True, check=True
            )
            stats[name] = json.loads(out.stdout.strip().splitlines()[-1])
        print(
            "| side | chunks | tokens embedded | noise chunks | comment | linkdef | heading-only |"
            " holding a comment or linkdef | child_process.md:758 chunk | limits |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|")
        for name, s in stats.items():
            noise = sum(s["noise"].values())
            li = s["lead_in"]
            lead = f"{li[0]}-{li[1]}, code {'with it' if li[2] else 'apart'}" if li else "-"
            print(
                f"| {name} | {s['chunks']:,} | {s['tokens']:,} | {noise:,} ({100 * noise / max(1, s['chunks']):.1f}%) "
                f"| "
                f"{s['noise']['comment']:,} | {s['noise']['linkdef']:,} | {s['noise']['heading-only']:,} | "
                f"{s['holding']:,} | {lead} | {s['limits']} |"
            )
        if not args.index or args.corpus is not None:
            return
        indexed: dict[str, dict] = {}
        seconds: dict[str, list[float]] = {name: [] for name in sides}
        cpu: dict[str, list[float]] = {name: [] for name in sides}
        for i in range(max(1, args.rounds)):  # alternating: baseline first in even rounds, current in odd ones
            for name in list(sides) if i % 2 == 0 else list(sides)[::-1]:
                work = tmpd / f"idx-{name}"
                work.mkdir(exist_ok=True)
                indexed[name] = index_side(sides[name], corpus, work, args.provider)
                seconds[name].append(indexed[name]["seconds"])
                cpu[name].append(indexed[name]["cpu"])
        b, c = indexed["baseline"], indexed["current"]
        print(f"\nprovider {args.provider}, {args.rounds} round(s) a side, load average {bu._loadavg()}")
        print("\n| side | chunks | index s (median) | runs | CPU s (median) | runs | index.db MB |")
        print("|---|---|---|---|---|---|---|")
        for name, s in indexed.items():
            runs = ", ".join(f"{x:.1f}" for x in seconds[name])
            cpus = ", ".join(f"{x:.1f}" for x in cpu[name])
            print(
                f"| {name} | {s['chunks']:,} | {bu.median(seconds[name]):.1f} | {runs} | {bu.median(cpu[name]):.1f} "
                f"| {cpus} | {s['bytes'] / 1e6:.1f} |"
            )
        ratio = bu.median(seconds["current"]) / bu.median(seconds["baseline"])
        cratio = bu.median(cpu["current"]) / bu.median(cpu["baseline"])
        print(
            f"\nratio current/baseline: wall time {ratio:.2f}x, CPU time {cratio:.2f}x, size "
            f"{c['bytes'] / b['bytes']:.2f}x"
        )
        print("\n| query [mode] | baseline: section rank, file rank | current |\n|---|---|---|")
        for key in b["ranks"]:
            print(f"| {key} | {b['ranks'][key]} | {c['ranks'][key]} |")


if __name__ == "__main__":
    main()

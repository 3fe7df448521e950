"""Chunker alone on the fiction corpus: time, chunk count and edit locality, this checkout vs a git ref side by side.

The baseline's `server/` is taken from git (`git archive REF`) into a temp dir; each side runs in its own
subprocess, alternating (baseline, current, baseline, current, ...) so machine load hits both alike. Per run:
chunk all 1,129 chapters (extract_metadata + chunk_document) with the limits and token counter the indexer uses
for the provider (`local`: the MiniLM word-piece tokenizer, limits 217/173/43; `none`: the 4-characters-a-token
estimate), then append one sentence to one random long paragraph in 150 random chapters and count the chunks
whose text changed (each one is an embedding call).

    python benchmarks/bench_chunk.py                        # vs HEAD~ ... use --baseline REF (default: main)
    python benchmarks/bench_chunk.py --baseline 04537e6 --provider none --rounds 3
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchutil as bu  # noqa: E402

CHILD = r"""
import json, random, statistics, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from saipling.markdown.chunker import chunk_document
from saipling.files.metadata import extract_metadata
from saipling.project import Project
corpus, provider = Path(sys.argv[2]), sys.argv[3]
with tempfile.TemporaryDirectory() as tmp:
    project = Project.open(Path(tmp), overrides={"provider": provider})
    limits = project.indexer.limits()
    counter = getattr(project.indexer, "token_counter", None)
    count = counter() if callable(counter) else None
    project.close()
extra = {"count_tokens": count} if count is not None else {}
texts = [(f.relative_to(corpus).as_posix(), f.read_text(encoding="utf-8")) for f in sorted(corpus.rglob("*.md"))]
t0 = time.perf_counter()
n = sum(len(chunk_document(t, extract_metadata(rel, t), limits, **extra)) for rel, t in texts)
seconds = time.perf_counter() - t0
rng = random.Random(7)
changed = []
for rel, text in rng.sample(texts, min(150, len(texts))):
    lines = text.split("\n")
    prose = [i for i, ln in enumerate(lines) if len(ln) > 200 and not ln.lstrip().startswith(("#", ">", "|"))]
    if not prose:
        continue
    i = rng.choice(prose)
    edited = "\n".join(lines[:i] + [lines[i].rstrip() + " The lamp flickered once more."] + lines[i + 1 :])
    old = {c.content_hash for c in chunk_document(text, extract_metadata(rel, text), limits, **extra)}
    new = chunk_document(edited, extract_metadata(rel, edited), limits, **extra)
    changed.append(sum(c.content_hash not in old for c in new))
changed.sort()
print(json.dumps({"seconds": seconds, "chunks": n, "limits": [limits.max_tokens, limits.target_tokens,
      limits.overlap_tokens], "edit_median": statistics.median(changed), "edit_p90": changed[int(0.9 * len(changed))],
      "edit_max": changed[-1]}))
"""


def run(server: Path, provider: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(server), str(bu.FICTION), provider],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = bu.parser(__doc__.split("\n")[0])
    p.add_argument("--baseline", default="main", help="git ref whose chunker is the baseline (default main)")
    p.add_argument("--provider", default="auto", help="local | none | auto (local when installed)")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    provider = bu.provider_choice(args.provider)
    bu.banner(f"bench_chunk: chunker vs {args.baseline}, provider {provider}", args.quick)
    if not bu.need_shared(bu.FICTION, "fiction corpus"):
        return
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(
            ["git", "-C", str(bu.REPO), "archive", args.baseline, "server"], capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        sides = {f"baseline ({args.baseline})": Path(tmp) / "server", "this checkout": bu.REPO / "server"}
        got: dict[str, list[dict]] = {k: [] for k in sides}
        for _ in range(1 if args.quick else args.rounds):
            for name, server in sides.items():
                got[name].append(run(server, provider))
    base_s = bu.median([r["seconds"] for r in got[next(iter(sides))]])
    rows = []
    for name, runs in got.items():
        s = bu.median([r["seconds"] for r in runs])
        r = runs[-1]
        rows.append(
            (
                name,
                r["chunks"],
                "/".join(map(str, r["limits"])),
                bu.fmt_s(s),
                f"{s / base_s:.2f}x",
                r["edit_median"],
                r["edit_p90"],
                r["edit_max"],
            )
        )
    print(
        bu.table(
            [
                "chunker",
                "chunks",
                "limits",
                "chunk time s (median)",
                "vs baseline",
                "edit: chunks changed median",
                "p90",
                "max",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()

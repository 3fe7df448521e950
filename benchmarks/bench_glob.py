"""Glob matching, this checkout against a git ref, side by side in alternating subprocesses: microseconds per
`glob_match` over the fiction corpus's paths for the globs people write (include, exclude, filters), a
`scan()` of the corpus, and (this checkout only: the old regex takes seconds to hours) adversarial globs on
80-200 character paths.

    SAIPLING_SHARED=/work/shared python benchmarks/bench_glob.py --baseline main
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchutil as bu  # noqa: E402

COMMON = [
    "**/*.md",
    "*.md",
    "drafts",
    "drafts/",
    "books/*/ch-0[12]/*.md",
    "charles-dickens/**",
    "notes/privé.md",
]
ADVERSARIAL = [
    "**?**?**?**?**?**?**.mdx",
    "*a*a*a*a*a*a*a*a*b",
    "**/a/**/a/**/a/**/a/**/b",
    "a**a**a**a**a**b",
]

CHILD = r"""
import json, sys, time
from pathlib import Path
from saipling.config.settings import Settings
from saipling.paths import glob_match
from saipling.files.scanner import scan
corpus, patterns, adversarial = Path(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
paths = sorted(p.relative_to(corpus).as_posix() for p in corpus.rglob("*.md"))
out = {}
for pat in patterns:
    for p in paths[:50]:
        glob_match(p, pat)  # warm (compile, memo)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for p in paths:
            glob_match(p, pat)
        best = min(best, (time.perf_counter() - t0) / len(paths) * 1e6)
    out[pat] = best
best = float("inf")
for _ in range(3):
    t0 = time.perf_counter()
    scan(corpus, Settings(exclude=["drafts/", "*.tmp.md"]))
    best = min(best, time.perf_counter() - t0)
out["scan (s)"] = best
long_paths = ["a" * 80, "a" * 200, "a/" * 100, ("aaaa/" * 40)[:-1] + "x.md"]
for pat in adversarial:
    t0 = time.perf_counter()
    for p in long_paths:
        glob_match(p, pat)
    out["adversarial " + pat] = (time.perf_counter() - t0) / len(long_paths) * 1e6
print(json.dumps(out))
"""


def run_side(server_dir: Path, adversarial: list[str]) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(server_dir)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(bu.FICTION), json.dumps(COMMON), json.dumps(adversarial)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=600,
    )
    return json.loads(done.stdout)


def main() -> None:
    ap = bu.parser(__doc__ or "")
    ap.add_argument("--baseline", default="main", help="git ref of the old side")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    bu.banner("glob matching: old vs new", args.quick)
    if not bu.need_shared(bu.FICTION, "the fiction corpus"):
        return
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "old"
        old.mkdir()
        archive = subprocess.run(
            ["git", "archive", args.baseline, "server"], cwd=bu.REPO, capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive.stdout, check=True)
        olds, news = [], []
        for _ in range(args.runs):
            olds.append(run_side(old / "server", []))
            news.append(run_side(bu.REPO / "server", ADVERSARIAL))
    print(f"{'us per path / s':48} {'old':>9} {'new':>9} {'new/old':>8}")
    for key in news[0]:
        new = bu.median([n[key] for n in news])
        if key in olds[0]:
            old_v = bu.median([o[key] for o in olds])
            print(f"{key:48} {old_v:9.2f} {new:9.2f} {new / old_v:8.2f}")
        else:
            print(f"{key:48} {'not run':>9} {new:9.2f}")  # (old: seconds to hours a path)


if __name__ == "__main__":
    main()

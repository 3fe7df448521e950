"""`saipling mentions` latency on the whole fiction corpus (issue 35: <= 50 ms), side by side with
`textDocument/references` (retrieval.entities.references: index candidates + an exact scan of their text) for the same
entity, in-process; and what keeping mentions costs: the keyword-only index run, and the re-scan of every file
when an entity gains a name (indexing.mention_scan.settle).

p50/p95 are of the report computed (its cache cleared first: the first request after a change); "warm p95" is of
the same question asked again on an unchanged index (answered from the reports kept).

The corpus (1,129 chapters, frontmatter `chapter:` and `book:`) is copied to a temp folder with profiles for
Dracula's cast and two from the references benchmark (a frequent main character, a very common first name),
and indexed keyword-only. The copy is reused on later runs.

"after edit" is of the first request after a saved edit of a chapter's text (another author's chapter, so the
answer is the same; the refresh itself is not timed): what a hover or an agent meets while the writer works.

    python benchmarks/bench_mentions.py [--quick] [--rounds N] [--load N] [--root DIR]
    python benchmarks/bench_mentions.py --baseline <git archive of another commit>/server [--ab-rounds 3] ...

With `--load N`, N threads ask for the other entities' mentions without pause while the timed requests run (an
editor and agents asking at once, as the language server's worker threads do), on top of the machine's own load.
With `--baseline`, this code and the baseline's run in alternating processes (`--ab-rounds` each), each on its own
copy of the corpus (`DIR` and `DIR-base`: an index written by one version is never read by the other), and the
medians of their p50 and p95 are printed side by side with the ratio new / baseline.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchutil as bu  # noqa: E402

from saipling.project import Project  # noqa: E402
from saipling.retrieval import entities, mentions  # noqa: E402


def _profile(name: str, aliases: list[str]) -> str:
    return f"---\nname: {name}\ntype: character\naliases: [{', '.join(aliases)}]\n---\n# {name}\n\nA character.\n"


PROFILES = {
    "characters/mina/profile.md": _profile("Mina Harker", ["Mina", "Mina Murray", "Madam Mina"]),
    "characters/jonathan/profile.md": _profile("Jonathan Harker", ["Jonathan"]),
    "characters/van-helsing/profile.md": _profile("Abraham Van Helsing", ["Van Helsing", "the Professor"]),
    "characters/lucy/profile.md": _profile("Lucy Westenra", ["Lucy"]),
    "characters/dracula/profile.md": _profile("Count Dracula", ["Dracula", "the Count"]),
    "characters/renfield/profile.md": _profile("R. M. Renfield", ["Renfield"]),
    "characters/emma-woodhouse/profile.md": _profile("Emma Woodhouse", ["Emma", "Miss Woodhouse"]),
    "characters/john/profile.md": _profile("John", []),
}
ASKED = ["Mina Harker", "Count Dracula", "Emma Woodhouse", "John"]


def prepare(root: Path) -> None:
    done = root / ".bench-ready"
    if done.exists():
        return
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(bu.FICTION, root)
    for rel, text in PROFILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    t0 = time.perf_counter()
    project = Project.open(root, overrides={"provider": "none"})
    try:
        s = project.index()
    finally:
        project.close()
    print(
        f"   indexed {s.files} files ({s.chunks} chunks) keyword-only, mentions included, in "
        f"{time.perf_counter() - t0:.0f} s"
    )
    done.write_text("ok")


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


EDITED = "jules-verne"  # chapters edited between "after edit" requests: an author none of the asked entities is in


def edited_chapter(root: Path) -> str:
    return sorted(p.relative_to(root).as_posix() for p in (root / EDITED).rglob("*.md"))[0]


def measure(args: Any) -> dict[str, dict[str, float]]:
    """Times every asked entity's request (computed, repeated, after an edit) in this process; prints the table."""
    rounds = args.rounds or (5 if args.quick else 20)
    root = Path(args.root)
    prepare(root)
    project = Project.open(root, overrides={"provider": "none"})
    stop = threading.Event()
    served = [0]

    def hammer(i: int) -> None:
        while not stop.is_set():
            mentions.request(project, {"name": ASKED[(i + served[0]) % len(ASKED)]})
            served[0] += 1

    loaders = [threading.Thread(target=hammer, args=(i,), daemon=True) for i in range(args.load)]
    for t in loaders:
        t.start()
    if loaders:
        print(f"   with {args.load} threads asking for mentions meanwhile")
    results: dict[str, dict[str, float]] = {}
    edited = edited_chapter(root)
    original = (root / edited).read_text(encoding="utf-8")
    try:
        read = entities.disk_reader(project.root)
        index = entities.entity_index(project)
        print(
            f"   {'entity':<16} {'mentions':>8} {'chapters':>8} {'p50 ms':>8} {'p95 ms':>8} {'warm p95':>9}"
            f" {'edit p50':>9} {'edit p95':>9} {'refs p50':>9} {'ratio':>6}  summary"
        )
        for name in ASKED:
            (rep,) = mentions.report(project, name, limit=200)  # warm-up (and the request module imported)
            mentions.request(project, {"name": name})
            times, refs, warm, edit = [], [], [], []
            for i in range(rounds):
                mentions.clear_reports()  # cold: the report computed (the first request after a change)
                t0 = time.perf_counter()
                mentions.request(project, {"name": name})
                times.append((time.perf_counter() - t0) * 1000)
                t0 = time.perf_counter()  # warm: the same question again on an unchanged index
                mentions.request(project, {"name": name})
                warm.append((time.perf_counter() - t0) * 1000)
                # after a saved edit of another chapter (the refresh not timed)
                (root / edited).write_text(original + ("\nThe sea was calm.\n" if i % 2 == 0 else ""), "utf-8")
                project.refresh([edited])
                t0 = time.perf_counter()
                mentions.request(project, {"name": name})
                edit.append((time.perf_counter() - t0) * 1000)
                ent = [e for e in index.entities if e.path == rep.entity.path]
                t0 = time.perf_counter()
                entities.references(project, ent, read)
                refs.append((time.perf_counter() - t0) * 1000)
            m, r = statistics.median(times), statistics.median(refs)
            results[name] = {
                "mentions": rep.total,
                "p50": m,
                "p95": pct(times, 0.95),
                "warm_p95": pct(warm, 0.95),
                "edit_p50": statistics.median(edit),
                "edit_p95": pct(edit, 0.95),
            }
            print(
                f"   {name:<16} {rep.total:>8} {len(rep.chapters):>8} {m:>8.1f} {pct(times, 0.95):>8.1f}"
                f" {pct(warm, 0.95):>9.2f} {results[name]['edit_p50']:>9.1f} {results[name]['edit_p95']:>9.1f}"
                f" {r:>9.1f} {r / m:>6.1f}  {rep.summary()}"
            )
        stop.set()
        for t in loaders:
            t.join()
        if loaders:
            print(f"   (the load threads answered {served[0]} requests)")
        if not args.json:
            rescan(project, root)
    finally:
        stop.set()
        (root / edited).write_text(original, encoding="utf-8")
        project.refresh([edited])
        project.close()
    return results


def rescan(project: Project, root: Path) -> None:
    """An entity gains a name, then loses it: the files that may hold it are scanned again (the first time on an
    index made before the names were recorded: every file)."""
    rel = "characters/renfield/profile.md"
    path = root / rel
    old = path.read_text(encoding="utf-8")
    try:
        for label, text in (("gains", old.replace("[Renfield]", "[Renfield, the Madman]")), ("loses", old)):
            path.write_text(text, encoding="utf-8")
            t0 = time.perf_counter()
            project.refresh([rel])
            print(f"   a profile {label} an alias: refresh + re-scan {time.perf_counter() - t0:.2f} s")
    finally:
        path.write_text(old, encoding="utf-8")
        project.refresh([rel])


def side_by_side(args: Any) -> None:
    """This code and the baseline in alternating processes, each on its own copy; medians and ratios."""
    runs: dict[str, list[dict[str, dict[str, float]]]] = {"new": [], "base": []}
    child = [sys.executable, __file__, "--json", "--load", str(args.load)]
    child += ["--rounds", str(args.rounds)] if args.rounds else []
    child += ["--quick"] if args.quick else []
    variants = [("new", str(bu.REPO / "server"), args.root), ("base", args.baseline, args.root + "-base")]
    for i in range(args.ab_rounds):
        for label, server, root in variants if i % 2 == 0 else variants[::-1]:
            env = {**os.environ, "SAIPLING_BENCH_SERVER": server}
            out = subprocess.run([*child, "--root", root], env=env, capture_output=True, text=True, check=True).stdout
            print(f"   -- round {i + 1}, {label} ({server})")
            print("\n".join(line for line in out.splitlines() if not line.startswith("RESULT ")))
            runs[label].append(json.loads(out.split("RESULT ", 1)[1]))
    print(f"   medians of {args.ab_rounds} rounds: new / baseline (ratio)")
    print(f"   {'entity':<16} " + " ".join(f"{k:>24}" for k in ("p50", "p95", "edit p50", "edit p95")))
    for name in ASKED:
        cells = []
        for key in ("p50", "p95", "edit_p50", "edit_p95"):
            new = statistics.median(r[name][key] for r in runs["new"])
            base = statistics.median(r[name][key] for r in runs["base"])
            cells.append(f"{new:7.1f} / {base:7.1f} ({new / base:4.2f}x)")
        print(f"   {name:<16} " + " ".join(f"{c:>24}" for c in cells))


def main() -> None:
    p = bu.parser(__doc__ or "")
    p.add_argument("--rounds", type=int, default=None, help="timed requests per entity (default 20)")
    p.add_argument("--load", type=int, default=0, help="threads asking for mentions meanwhile (default 0)")
    p.add_argument("--root", default=str(Path(tempfile.gettempdir()) / "saipling-bench-mentions"))
    p.add_argument("--baseline", help="another server/ folder (e.g. from `git archive`), measured alternately")
    p.add_argument("--ab-rounds", type=int, default=3, help="with --baseline: processes of each (default 3)")
    p.add_argument("--json", action="store_true", help="print the figures as one RESULT line too")
    args = p.parse_args()
    if not args.json:
        bu.banner("mentions on the fiction corpus", args.quick)
    if args.baseline:
        side_by_side(args)
        return
    results = measure(args)
    if args.json:
        print("RESULT " + json.dumps(results))


if __name__ == "__main__":
    main()

"""`saipling mentions` latency on the whole fiction corpus (issue 35: <= 50 ms), side by side with
`textDocument/references` (retrieval.entities.references: index candidates + an exact scan of their text) for the same
entity, in-process; and what keeping mentions costs: the keyword-only index run, and the re-scan of every file
when an entity gains a name (indexing.mention_scan.settle).

p50/p95 are of the report computed (its cache cleared first: the first request after a change); "warm p95" is of
the same question asked again on an unchanged index (answered from the reports kept).

The corpus (1,129 chapters, frontmatter `chapter:` and `book:`) is copied to a temp folder with profiles for
Dracula's cast and two from the references benchmark (a frequent main character, a very common first name),
and indexed keyword-only. The copy is reused on later runs.

    python benchmarks/bench_mentions.py [--quick] [--rounds N] [--load N]

With `--load N`, N threads ask for the other entities' mentions without pause while the timed requests run (an
editor and agents asking at once, as the language server's worker threads do), on top of the machine's own load.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

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


def main() -> None:
    p = bu.parser(__doc__ or "")
    p.add_argument("--rounds", type=int, default=None, help="timed requests per entity (default 20)")
    p.add_argument("--load", type=int, default=0, help="threads asking for mentions meanwhile (default 0)")
    args = p.parse_args()
    rounds = args.rounds or (5 if args.quick else 20)
    bu.banner("mentions on the fiction corpus", args.quick)
    root = Path(tempfile.gettempdir()) / "saipling-bench-mentions"
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
    try:
        read = entities.disk_reader(project.root)
        index = entities.entity_index(project)
        print(
            f"   {'entity':<16} {'mentions':>8} {'chapters':>8} {'p50 ms':>8} {'p95 ms':>8} {'warm p95':>9}"
            f" {'refs p50':>9} {'ratio':>6}  summary"
        )
        for name in ASKED:
            (rep,) = mentions.report(project, name, limit=200)  # warm-up
            times, refs, warm = [], [], []
            for _ in range(rounds):
                mentions.clear_reports()  # cold: the report computed (the first request after a change)
                t0 = time.perf_counter()
                mentions.request(project, {"name": name})
                times.append((time.perf_counter() - t0) * 1000)
                t0 = time.perf_counter()  # warm: the same question again on an unchanged index
                mentions.request(project, {"name": name})
                warm.append((time.perf_counter() - t0) * 1000)
                ent = [e for e in index.entities if e.path == rep.entity.path]
                t0 = time.perf_counter()
                entities.references(project, ent, read)
                refs.append((time.perf_counter() - t0) * 1000)
            m, r = statistics.median(times), statistics.median(refs)
            print(
                f"   {name:<16} {rep.total:>8} {len(rep.chapters):>8} {m:>8.1f} {pct(times, 0.95):>8.1f}"
                f" {pct(warm, 0.95):>9.2f}"
                f" {r:>9.1f} {r / m:>6.1f}  {rep.summary()}"
            )
        stop.set()
        for t in loaders:
            t.join()
        if loaders:
            print(f"   (the load threads answered {served[0]} requests)")
        # an entity gains a name, then loses it: the files that may hold it are scanned again (the first time
        # on an index made before the names were recorded: every file)
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
    finally:
        stop.set()
        project.close()


if __name__ == "__main__":
    main()

"""Exact headings as queries, on a real vault: does a query that is a section's heading put that section first?

Every heading whose text occurs in one file only (ASCII case ignored) is a known item: its query is the heading
text as a reader sees it (no `#`s, no emphasis markers), its answer that section. A random sample of them is
searched in each mode; reported: the share whose top result is that section ("section first"), and the share
with the section's file in the top 3. The 13th Age vault has ~1,200 such headings (spells, feats, monsters,
rules); Obsidian notes often write headings with emphasis (`###### ***Ripping Vines***`).

    python benchmarks/bench_headings.py [--root INDEXED_COPY] [--sample 300] [--show-misses]

Without --root, the vault (../shared/corpora/13th-age-srd) is copied to the benchmark cache and indexed once.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import _benchutil as bu

VAULT = bu.SHARED / "corpora" / "13th-age-srd"


def indexed_vault(provider: str) -> Path:
    root = bu.CACHE_ROOT / f"headings-srd-{provider}"
    if not (root / ".saipling" / "index.db").exists():
        bu.copy_corpus(VAULT, root)
    from saipling.project import Project

    p = Project.open(root, overrides={"provider": provider})
    try:
        s = p.index()
        print(f"   index: {s.files} files, {s.chunks} chunks ({s.changed} changed) with {provider}")
    finally:
        p.close()
    return root


def known_items(project, seed: int, sample: int) -> list[tuple[str, str]]:
    """(heading text, file) for a sample of the headings that occur in one file only."""
    try:
        from saipling.markdown.blocks import heading_text
    except ImportError:  # a baseline tree (SAIPLING_BENCH_SERVER) from before headings were plain text

        def heading_text(raw: str) -> str:
            return " ".join(raw.replace("*", " ").replace("`", " ").split())

    files: dict[str, set[str]] = {}
    shown: dict[str, str] = {}
    sql = "SELECT path, heading_path FROM chunks WHERE kind != 'frontmatter' AND heading_path != ''"
    for path, heading_path in project.store.conn.execute(sql):
        # the raw text of the last heading, as the file wrote it; rendered here the way a reader sees it
        text = heading_text(heading_path.rsplit(" > ", 1)[-1])
        if len(text) > 3:
            files.setdefault(text.lower(), set()).add(path)
            shown.setdefault(text.lower(), text)
    unique = sorted((shown[k], next(iter(v))) for k, v in files.items() if len(v) == 1)
    random.Random(seed).shuffle(unique)
    print(f"   headings in one file only: {len(unique)}; sampled {min(sample, len(unique))}")
    return unique[:sample]


def main() -> int:
    ap = bu.parser(__doc__.split("\n")[0])
    ap.add_argument("--root", type=Path, help="an indexed copy of the vault (default: copy and index it)")
    ap.add_argument("--provider", default=None, help="local (default when installed) or none")
    ap.add_argument("--sample", type=int, default=300)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--show-misses", action="store_true")
    args = ap.parse_args()
    bu.banner("exact headings as queries (13th Age vault)", args.quick)
    if args.root is None and not bu.need_shared(VAULT, "the 13th Age vault"):
        return 0
    provider = bu.provider_choice(args.provider)
    root = args.root or indexed_vault(provider)
    from saipling.project import Project
    from saipling.retrieval.search import SearchRequest, run_search

    project = Project.open(root)
    items = known_items(project, args.seed, 40 if args.quick else args.sample)
    modes = ["lexical"] + (["hybrid", "semantic"] if project.provider.dimensions else [])
    rows = []
    for mode in modes:
        first = top3 = 0
        misses: list[str] = []
        for text, path in items:
            req = SearchRequest(query=text, max_results=10, mode=mode, source="benchmark", log=False)
            hits = run_search(project, req)["results"]
            ok = bool(hits) and hits[0]["filePath"] == path
            ok = ok and hits[0]["headingPath"].rsplit(" > ", 1)[-1].lower() == text.lower()
            first += ok
            top3 += any(h["filePath"] == path for h in hits[:3])
            if not ok:
                got = f"{hits[0]['filePath']} | {hits[0]['headingPath']}" if hits else "nothing"
                misses.append(f"{text!r} ({path}): top is {got}")
        n = len(items) or 1
        rows.append([mode, f"{first / n:.3f}", f"{top3 / n:.3f}", len(misses)])
        if args.show_misses:
            print(f"-- {mode} misses")
            print("\n".join(misses[:40]))
    project.close()
    print(bu.table(["mode", "section first", "file in top 3", "misses"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

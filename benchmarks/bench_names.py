"""`saipling names --drift` on one novel (issue 35 targets: of 20 misspellings injected, >= 18 flagged; <= 1 false
flag per 10,000 words of the untouched novel). Dracula's 27 chapters are copied to a temp project with profiles
for its cast and places (written here); the untouched text is checked first, then 20 names are misspelt once
each (a different chapter each) and the project re-indexed.

    python benchmarks/bench_names.py
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchutil as bu  # noqa: E402

from saipling.project import Project  # noqa: E402
from saipling.retrieval import names  # noqa: E402

CAST = {
    "Mina Harker": ["Mina", "Mina Murray"],
    "Jonathan Harker": ["Jonathan"],
    "Count Dracula": ["Dracula"],
    "Abraham Van Helsing": ["Van Helsing"],
    "Lucy Westenra": ["Lucy"],
    "John Seward": ["Seward"],
    "Arthur Holmwood": ["Arthur", "Lord Godalming", "Godalming"],
    "Quincey Morris": ["Quincey"],
    "Renfield": [],
    "Whitby": [],
    "Transylvania": [],
    "Bistritz": [],
    "Carfax": [],
    "Varna": [],
}
# (right, misspelt): each replaces one occurrence of `right` in a chapter that has it
TYPOS = [
    ("Mina", "Minna"),
    ("Jonathan", "Jonathon"),
    ("Helsing", "Helsnig"),
    ("Lucy", "Lucie"),
    ("Dracula", "Draculla"),
    ("Renfield", "Renfeld"),
    ("Seward", "Sewerd"),
    ("Quincey", "Quincy"),
    ("Arthur", "Arthor"),
    ("Holmwood", "Holmwod"),
    ("Westenra", "Westenro"),
    ("Harker", "Harkar"),
    ("Godalming", "Godalmin"),
    ("Morris", "Moriss"),
    ("Murray", "Muray"),
    ("Whitby", "Whitbey"),
    ("Transylvania", "Transylvannia"),
    ("Bistritz", "Bistriz"),
    ("Carfax", "Carfex"),
    ("Varna", "Varnna"),
]


def build(root: Path) -> None:
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(bu.FICTION / "bram-stoker" / "dracula", root / "books" / "dracula")
    for name, aliases in CAST.items():
        slug = name.lower().replace(" ", "-")
        (root / "characters" / slug).mkdir(parents=True)
        (root / "characters" / slug / "profile.md").write_text(
            f"---\nname: {name}\naliases: [{', '.join(aliases)}]\n---\n# {name}\n", encoding="utf-8"
        )


def run(root: Path) -> tuple[list[names.Drift], int]:
    project = Project.open(root, overrides={"provider": "none"})
    try:
        project.index()
        voc = names.vocabulary(project)
        t0 = time.perf_counter()
        found = names.drift(project, voc)
        print(f"   drift over {voc.words:,} words in {time.perf_counter() - t0:.2f} s (+ the vocabulary)")
        return found, voc.words
    finally:
        project.close()


def main() -> None:
    bu.banner("names --drift on Dracula", bu.parser(__doc__ or "").parse_args().quick)
    root = Path(tempfile.mkdtemp()) / "dracula"
    build(root)
    clean, words = run(root)
    print(f"   untouched: {len(clean)} flags = {len(clean) / words * 10_000:.2f} per 10,000 words")
    for d in clean:
        print(f"     {d.word} ~ {d.name_word} x{d.count} {d.first[0]}:{d.first[1]}")
    chapters = sorted((root / "books" / "dracula").glob("*.md"))
    injected = []
    for i, (right, wrong) in enumerate(TYPOS):
        for path in chapters[i % len(chapters) :] + chapters[: i % len(chapters)]:
            text = path.read_text(encoding="utf-8")
            body = text.index("\n# ")  # after the frontmatter
            at = text.find(f" {right} ", body)
            if at != -1:
                path.write_text(text[:at] + f" {wrong} " + text[at + len(right) + 2 :], encoding="utf-8")
                injected.append(wrong)
                break
    found, _ = run(root)
    flagged = {d.word for d in found}
    hits = [w for w in injected if w in flagged]
    print(f"   injected {len(injected)}: {len(hits)} flagged; missed {sorted(set(injected) - flagged)}")
    print(f"   other flags: {sorted(flagged - set(injected))}")


if __name__ == "__main__":
    main()

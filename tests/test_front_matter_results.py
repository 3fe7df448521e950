"""A frontmatter chunk in search results (retrieval/search.py fold_front_matter): evidence for its file, not a
passage beside the file's own text. An Obsidian vault's `aliases: Flee / tags: ...` took the second result slot
under the Flee page itself (13th Age dev questions: 42 of 43 frontmatter results repeated a file above them).
Real SQLite index, keyword search (no model needed), the CLI's JSON too."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from fixtures import make_project, need_local_model, open_project
from saipling.markdown.terms import is_label_frontmatter

FLEE = """---
aliases: [Flee]
tags: [combat/rules/flee, escape-rules]
created: 2023-05-14
---

## Flee

Fleeing is a party action. On any turn a player may propose that everyone retreats from the fight.
If all agree, the party gets away and carries the fallen with it, but suffers a campaign loss.
"""

RALLY = """---
aliases: [Rally]
tags: [combat/rules/rally]
---

## Rally

Once per battle a hero may rally as a standard action, spending a recovery to heal. Rallying again needs a
save. A hero who cannot flee the fight can still rally.
"""

MINA = """---
name: Mina
aliases: [Mina Harker]
eyes: green
hair: black, worn short
---

# Mina

She keeps the lighthouse and writes every ship into the ledger.
"""


def _project(tmp_path: Path) -> Path:
    files = {
        "rules/flee.md": FLEE,
        "rules/rally.md": RALLY,
        "characters/mina.md": MINA,
    }
    for n in range(6):
        files[f"notes/note-{n}.md"] = f"# Note {n}\n\nA note about the harbour, the tides and boat number {n}.\n"
    return make_project(tmp_path, files)


def _search(root: Path, query: str, **params) -> list[dict]:
    with open_project(root) as p:
        p.index()
        return p.search({"query": query, "maxResults": 10, **params})["results"]


def test_a_label_frontmatter_never_takes_a_slot_beside_its_own_page(tmp_path: Path) -> None:
    root = _project(tmp_path)
    results = _search(root, "flee")
    flee = [r for r in results if r["filePath"] == "rules/flee.md"]
    assert results and results[0]["filePath"] == "rules/flee.md"
    assert len(flee) == 1, flee  # its frontmatter was a second result of its own
    assert flee[0]["startLine"] >= 7 and "party action" in flee[0]["snippet"]  # the page's text, not its labels
    assert any(r["filePath"] == "rules/rally.md" for r in results)  # the slot went to another page


def test_a_match_on_the_labels_alone_shows_the_files_first_passage(tmp_path: Path) -> None:
    root = _project(tmp_path)
    results = _search(root, "escape rules")  # a tag: only the frontmatter holds these words
    assert results, "the alias found nothing"
    top = results[0]
    assert top["filePath"] == "rules/flee.md"
    assert top["sectionHeading"] == "## Flee" and top["startLine"] == 7, top
    assert "party action" in top["snippet"]
    assert not any(r["startLine"] == 1 and r["filePath"] == "rules/flee.md" for r in results)


def test_a_frontmatter_with_more_than_labels_keeps_its_place(tmp_path: Path) -> None:
    root = _project(tmp_path)
    results = _search(root, "green eyes")
    assert results and results[0]["filePath"] == "characters/mina.md"
    assert results[0]["startLine"] == 1 and "green" in results[0]["snippet"]  # the answer is in the frontmatter


def test_the_agent_context_gets_the_page_text_not_its_labels(tmp_path: Path) -> None:
    root = _project(tmp_path)
    with open_project(root) as p:
        p.index()
        ctx = p.enrich({"query": "escape rules", "maxSearchTokens": 2000})
    text = json.dumps(ctx)
    assert "party action" in text
    assert "combat/rules/flee" not in text  # (the frontmatter passage was what the agent got)


def test_the_cli_shows_the_page_text(tmp_path: Path) -> None:
    root = _project(tmp_path)
    run = [sys.executable, "-m", "saipling"]
    (root / ".saipling").mkdir(exist_ok=True)
    (root / ".saipling" / "config.toml").write_text('provider = "none"\n', encoding="utf-8")
    subprocess.run([*run, "index", str(root)], check=True, capture_output=True, timeout=120)
    out = subprocess.run(
        [*run, "search", "escape rules", "--json", "-k", "5", "--mode", "lexical"],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    results = json.loads(out.stdout)["results"]
    assert results and results[0]["filePath"] == "rules/flee.md" and results[0]["startLine"] == 7
    assert [r["startLine"] for r in results if r["filePath"] == "rules/flee.md"] == [7]


def test_which_frontmatter_is_a_label() -> None:
    path = "Compendium/Combat-Rules/Special-Actions/Flee.md"
    assert is_label_frontmatter("aliases: Flee\ntags: 13A/Combat/Rules/Flee", path, "Flee")
    assert is_label_frontmatter("title: Fleeing the Fight", path, "Fleeing the fight")  # (any case)
    assert not is_label_frontmatter("aliases: Flee, Escape Rules", path, "Flee")  # a name the page does not bear
    assert not is_label_frontmatter("aliases: Mina\neyes: green", "characters/mina.md", "Mina")
    assert not is_label_frontmatter("description: Clean install a project", "commands/npm-ci.md", "npm-ci")
    assert not is_label_frontmatter("", path, "Flee")


RULE_PAGES = {
    "Faraway": "Generally the heroes and their enemies are near each other; one far away needs a move to engage.",
    "Intercepting": "A hero can move to stop an enemy from reaching an ally, taking the hits in that ally's stead.",
    "Resistance": "A creature with resistance takes half damage from attacks of that kind unless the roll is high.",
    "Ambushes": "When one side surprises the other, the surprised side loses its first turn of the battle.",
}


def test_related_gives_passages_not_other_pages_labels(tmp_path: Path) -> None:
    """related(Flee.md) was four other rules pages' `aliases: ... / tags: 13A/Combat/...` blocks: the mean of the
    page's vectors held its own label block, which is most like every other label block. Local model."""
    need_local_model()
    files = {"rules/flee.md": FLEE, "rules/rally.md": RALLY}
    for name, text in RULE_PAGES.items():
        files[f"rules/{name.lower()}.md"] = (
            f"---\naliases: [{name}]\ntags: [combat/rules/{name.lower()}]\n---\n\n## {name}\n\n{text}\n"
        )
    root = make_project(tmp_path, files)
    with open_project(root, "local") as p:
        p.index()
        got = p.related({"path": "rules/flee.md", "maxResults": 5})["results"]
    assert got, "related found nothing"
    labels = [(r["filePath"], r["startLine"]) for r in got if r["startLine"] == 1]
    assert not labels, labels
    assert all(r["startLine"] >= 6 for r in got)  # every one a page's text


def test_folded_labels_leave_no_slot_empty(tmp_path: Path) -> None:
    """A label dropped under its page left its slot empty: 6 results for maxResults 10 while 14 files matched
    (the review of session 24). The next candidates fill it, and maxResults still bounds the answer."""
    files = {}
    for i in range(14):
        name = f"Rule{i:02d}"
        fm = f"---\naliases: [{name}]\ntags: [rules/{name.lower()}]\n---\n\n" if i < 6 else ""
        files[f"rules/{name}.md"] = (
            f"{fm}## {name}\n\nThe disengage rule number {i} says a hero may disengage from the fight.\n"
        )
    root = make_project(tmp_path, files)
    with open_project(root) as p:
        p.index()
        got = {k: p.search({"query": "disengage rule", "maxResults": k})["results"] for k in (5, 10, 12, 20)}
    for k, results in got.items():
        assert len(results) == min(k, 14), (k, len(results))
        labelled = {f"rules/Rule{i:02d}.md" for i in range(6)}
        assert not [r for r in results if r["filePath"] in labelled and r["startLine"] == 1]  # (no label's slot)

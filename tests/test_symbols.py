"""`workspace/symbol` (SPEC 10): entities (frontmatter name + aliases) first, then headings, fuzzy matched."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from fixtures import make_project, open_project, retrieval_project
from saipling.retrieval.symbols import MAX_SYMBOLS, fuzzy_score


@pytest.fixture(scope="module")
def novel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with open_project(retrieval_project(tmp_path_factory.mktemp("symbols"))) as p:
        p.index()
        yield p


def test_fuzzy_score_order() -> None:
    name = "Marcus Cole"
    scores = [fuzzy_score(q, name) for q in ("marcus cole", "marc", "cole", "cus c", "mcl", "zzz")]
    assert scores[0] > scores[1] > scores[2] > scores[3] > scores[4] > scores[5] == 0.0
    assert fuzzy_score("", name) > 0  # an empty query lists everything
    assert fuzzy_score("(", "a (b)") > 0 and fuzzy_score("[", "x") == 0.0  # regex characters are literal


def test_entities_by_name_and_alias(novel: Any) -> None:
    found = novel.symbols("marc")
    assert found[0]["kind"] == "entity"
    assert (found[0]["name"], found[0]["entityType"], found[0]["entityName"], found[0]["path"]) == (
        "Marcus Cole",
        "character",
        "marcus-cole",
        "characters/marcus-cole/profile.md",
    )
    (ferryman, *_) = novel.symbols("ferryman")
    assert (ferryman["name"], ferryman["matched"], ferryman["kind"]) == (
        "Marcus Cole",
        "The Ferryman",
        "entity",
    )
    (harbor, *_) = novel.symbols("greyhaven")
    assert (harbor["name"], harbor["entityType"]) == ("Greyhaven Harbor", "place")


def test_entities_come_before_headings(novel: Any) -> None:
    found = novel.symbols("marcus")
    kinds = [f["kind"] for f in found]
    assert kinds == sorted(kinds, key=lambda k: k != "entity")
    assert {"entity", "heading"} <= set(kinds)
    heading = next(f for f in found if f["kind"] == "heading")
    assert (heading["name"], heading["path"], heading["startLine"] >= 1) == (
        "Marcus Cole",
        "characters/marcus-cole/profile.md",
        True,
    )


def test_headings_with_line_ranges(novel: Any) -> None:
    (flaw,) = [f for f in novel.symbols("defining flaw") if f["kind"] == "heading"]
    assert flaw["name"] == "Defining Flaw" and flaw["headingPath"] == "Marcus Cole > Defining Flaw"
    lines = (novel.root / flaw["path"]).read_text(encoding="utf-8").split("\n")
    assert lines[flaw["startLine"] - 1] == "## Defining Flaw"
    assert flaw["startLine"] <= flaw["endLine"] <= len(lines)


def test_no_match_and_limits(novel: Any) -> None:
    assert novel.symbols("qqqqzzzz") == []
    assert len(novel.symbols("")) <= MAX_SYMBOLS
    assert novel.symbols("") and novel.symbols("")[0]["kind"] == "entity"
    for hostile in ("(", "*", "\\", "'; DROP TABLE files; --", "😀", "\x00"):
        assert isinstance(novel.symbols(hostile), list)


def test_a_long_section_is_one_symbol_and_scattered_letters_do_not_match(tmp_path: Any) -> None:
    """A section of many chunks was listed once per chunk (`Chapter 21` twelve times), and `Mina` listed every
    heading holding m, i, n, a in order ("CHAPTER IX-SMELLING DEATH") beside the names that hold it."""
    long_body = "\n\n".join(f"Paragraph {i} " + "word " * 120 for i in range(12))
    root = make_project(
        tmp_path,
        {
            "book/ch21.md": f"# Chapter 21\n\n{long_body}\n",
            "book/ch09.md": "# Chapter IX-Smelling Death\n\nThe garlic.\n",
            "people/mina.md": "# Mina Harker\n\nA teacher.\n",
        },
    )
    with open_project(root) as project:
        project.index()
        assert len(project.store.headings()) > 3  # (the long chapter has several chunks)
        chapter = project.symbols("Chapter 21")
        assert [(s["path"], s["name"]) for s in chapter] == [("book/ch21.md", "Chapter 21")]
        assert chapter[0]["startLine"] == 1 and chapter[0]["endLine"] >= 20
        assert [s["path"] for s in project.symbols("Mina")] == ["people/mina.md"]
        assert project.symbols("x" * 10_000) == []


def test_two_sections_of_one_name_in_a_file_stay_two_symbols(tmp_path: Any) -> None:
    """Merging a section's chunks by (path, heading path, title) made the two `## Notes` of a recipe file one
    symbol spanning the soup between them (a review's finding); only consecutive chunks of a section merge."""
    para = "\n\n".join(" ".join(f"w{i}x{j}" for j in range(60)) + "." for i in range(6))
    root = make_project(
        tmp_path,
        {"recipes.md": "# Recipes\n\n" + "".join(f"## {h}\n\n{para}\n\n" for h in ("Bread", "Notes", "Soup", "Notes"))},
    )
    with open_project(root) as project:
        project.index()
        notes = project.symbols("Notes")
        soup = project.symbols("Soup")
        assert len(notes) == 2 and len(soup) == 1
        first, second = sorted(notes, key=lambda s: s["startLine"])
        assert first["endLine"] < soup[0]["startLine"] <= soup[0]["endLine"] < second["startLine"]

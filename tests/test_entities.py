"""Entity mentions (retrieval/entities.py): case- and possessive-aware, longest name first, code skipped; manuscript
order."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from saipling.retrieval.entities import Entity, EntityIndex, first_paragraph, manuscript_key

MARCUS = Entity("characters/marcus-cole/profile.md", "Marcus Cole", "character", ("Marcus", "the Detective"))
ELENA = Entity("characters/elena-cole/profile.md", "Elena Cole", "character", ("Elena",))
ROSE = Entity("characters/rose/profile.md", "Rose", "character")
INDEX = EntityIndex.build([MARCUS, ELENA, ROSE])


def found(text: str, only: set[str] | None = None) -> list[tuple[int, str, str]]:
    return [(m.line, m.line_text[m.start : m.end], m.entities[0].name) for m in INDEX.mentions(text, only)]


def test_names_aliases_possessives_and_capitals() -> None:
    text = "Marcus's coat. THE DETECTIVE knew; the detective did not.\nA rose for Rose.\nMarcus' hat, Marcusian."
    assert found(text) == [
        (0, "Marcus", "Marcus Cole"),
        (0, "THE DETECTIVE", "Marcus Cole"),
        (1, "Rose", "Rose"),
        (2, "Marcus", "Marcus Cole"),
    ]


def test_longest_name_wins_and_shared_surname_is_nobody() -> None:
    assert found("Marcus Cole met Elena  Cole. Cole left.") == [
        (0, "Marcus Cole", "Marcus Cole"),
        (0, "Elena  Cole", "Elena Cole"),
    ]
    # restricted to Marcus's names, Elena Cole is still hers (never a "Cole" of his)
    assert found("Elena Cole and Marcus", only=set(MARCUS.names)) == [(0, "Marcus", "Marcus Cole")]


def test_frontmatter_fences_and_inline_code_skipped() -> None:
    text = (
        "---\nname: Marcus Cole\n---\n```\nMarcus\n```\n~~~md\nMarcus\n~~~\nUse `Marcus` or ``a `Marcus` b`` then "
        "Marcus."
    )
    assert found(text) == [(9, "Marcus", "Marcus Cole")]
    assert found(text, only={"Marcus"}) == [(9, "Marcus", "Marcus Cole")]
    indented = "Intro.\n\n    Marcus in an indented code block\n\nMarcus outside."
    assert found(indented) == found(indented, only={"Marcus"}) == [(4, "Marcus", "Marcus Cole")]


def test_at_cursor() -> None:
    text = "Then the Detective smiled."
    assert INDEX.at(text, 0, 10).entities == (MARCUS,)
    assert INDEX.at(text, 0, 2) is None and INDEX.at(text, 3, 0) is None


def test_manuscript_order() -> None:
    paths = [
        "notes/a.md",
        "books/b1/chapter-10/scene-1.md",
        "characters/x.md",
        "books/b1/chapter-2/scene-10.md",
        "books/b1/chapter-2/scene-2.md",
        "austen/emma/03-chapter-iii.md",
    ]
    chapters = {"austen/emma/03-chapter-iii.md": 3}
    assert sorted(paths, key=lambda p: manuscript_key(p, chapters.get(p))) == [
        "austen/emma/03-chapter-iii.md",
        "books/b1/chapter-2/scene-2.md",
        "books/b1/chapter-2/scene-10.md",
        "books/b1/chapter-10/scene-1.md",
        "characters/x.md",
        "notes/a.md",
    ]


def test_first_paragraph_skips_headings() -> None:
    assert first_paragraph(["# Marcus", "", "Line one", "line two.", "", "Next."]) == "Line one line two."
    assert first_paragraph(["Title", "=====", "", "Body."]) == "Body."


def test_windowed_scan_of_long_lines_finds_what_a_full_scan_finds() -> None:
    filler = "and the rain kept falling over the harbour while nobody spoke " * 3
    parts = [
        "Marcus Cole",
        "Elena Cole",
        "Marcus's",
        "`Marcus`",
        "the detective",
        "The Detective",
        "Marcusian",
        "THE  DETECTIVE",
        "Elena",
        "marcus",
        "Rose",
    ]
    line = " ".join(f"{filler}{p}" for p in parts) + " Marcus"
    text = f"---\nname: x\n---\n{line}\n\n{line}\n"
    for only in (set(MARCUS.names), set(ELENA.names), {"Rose"}):
        full = [(m.line, m.start, m.end) for m in INDEX.mentions(text) if m.surface in only]
        assert [(m.line, m.start, m.end) for m in INDEX.mentions(text, only)] == full
        assert full  # every entity is mentioned


def test_frontmatter_lines_agrees_with_frontmatter_end() -> None:
    from saipling.retrieval.entities import frontmatter_end, frontmatter_lines

    for text in [
        "---\na: 1\n---\nbody",
        "---\n---\n",
        "---  \nx\n...\nbody",
        "no\n---\n",
        "---\nnever closed\n",
        "---",
        "---\nx: 1\n---   \n\nMarcus",
        "---\nx\n----\n---\n",
    ]:
        assert frontmatter_lines(text) == frontmatter_end(text.split("\n")), text


def test_an_entitys_hash_does_not_read_every_alias() -> None:
    """Mentions are resolved to entities through dicts keyed by Entity: a hash over the aliases made a profile of
    60,000 aliases (a cloned repository's) take 24 s to index instead of 3.5 s (quadratic). Equality still reads
    everything."""
    few = Entity("people/bob.md", "Bob", "character", ("Bobby",))
    many = Entity("people/bob.md", "Bob", "character", tuple(f"a{i}" for i in range(50_000)))
    assert hash(few) == hash(many) and few != many
    assert len({few, many, Entity("people/bob.md", "Bob", "character", ("Bobby",))}) == 2


@given(st.lists(st.tuples(st.integers(1, 6), st.integers(0, 3)), max_size=40))
@settings(max_examples=150, deadline=None)
def test_an_outline_section_runs_to_the_next_heading_of_its_level_or_higher(heads: list[tuple[int, int]]) -> None:
    """Each heading's section ends on the line before the next heading of the same or a higher level (the end of
    the file if none): found in one pass now (searched onward from every heading, 100,000 headings took 14 s)."""
    from saipling.retrieval.entities import outline

    lines, starts = [], []
    for n, (level, body) in enumerate(heads):
        starts.append(len(lines))
        lines += ["#" * level + f" h{n}", *[f"text {n}"] * body]
    text = "\n".join(lines) + "\n"

    def flat(items: list[Any]) -> list[Any]:
        return [x for it in items for x in [it, *flat(it.children)]]

    got = flat(outline(text))
    assert [it.name for it in got] == [f"h{n}" for n in range(len(heads))]
    for n, (level, _body) in enumerate(heads):
        nxt = next((starts[m] for m in range(n + 1, len(heads)) if heads[m][0] <= level), len(lines))
        assert (got[n].first, got[n].last) == (starts[n], nxt - 1)


def test_the_name_at_a_column_of_a_long_line_resolves_only_the_names_near_it() -> None:
    """`at` (hover, go to definition) resolved every name on the line up to the cursor: 850,000 of them at the end
    of a one-line 5 MB paragraph, 6 s a hover (attacker pass 7). It looks only at the names that can reach the
    column now, however long the line."""
    index = EntityIndex.build([MARCUS, ELENA, ROSE])
    resolved: list[str] = []
    real = index.resolve

    def counting(name: str, only: Any = None) -> Any:
        resolved.append(name)
        return real(name, only)

    index.resolve = counting  # type: ignore[method-assign]
    line = "Elena " * 20_000 + "Marcus waited."
    col = line.index("Marcus") + 2
    hit = index.at("# Ending\n\n" + line + "\n", 2, col)
    assert hit is not None and hit.entities[0].name == "Marcus Cole"
    assert 1 <= len(resolved) <= 4, len(resolved)

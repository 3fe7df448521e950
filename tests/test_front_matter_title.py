"""A frontmatter `title:` of a page with no `# H1` (Hugo, Jekyll, Docusaurus, Obsidian) is the root of its heading
path: in every chunk's embedded text and keyword fields, in search results' section, in the workspace symbols.
A page with an H1 keeps its H1; a title that is not a non-empty string is ignored."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixtures import make_project, open_project, words
from saipling.embeddings.base import estimate_tokens
from saipling.files.metadata import extract_metadata
from saipling.markdown.chunker import ChunkLimits, chunk_document

HUGO_PAGE = """---
title: "Tidal locks: how the harbour keeps its water"
draft: false
---

The lock gates close at half tide so the basin never drains.

## Sluices

Sluices let the keeper level the water before a ship passes.
"""


def chunks_of(text: str, rel: str = "content/post.md", limits: ChunkLimits | None = None) -> list:
    return chunk_document(text, extract_metadata(rel, text), limits)


def test_front_matter_title_roots_every_heading_path() -> None:
    chunks = chunks_of(HUGO_PAGE)
    body = [c for c in chunks if c.kind != "frontmatter"]
    title = "Tidal locks: how the harbour keeps its water"
    assert [(c.section_heading, c.heading_path) for c in body] == [
        (f"# {title}", title),
        ("## Sluices", f"{title} > Sluices"),
    ]
    assert all(c.embed_text.startswith(c.heading_path + "\n\n") for c in body)
    assert body[0].start_line == 6 and body[0].text.startswith("The lock gates")  # the title is not in the text
    # a frontmatter with more than the title keeps its chunk (draft: no)
    assert [c.kind for c in chunks].count("frontmatter") == 1


def test_a_frontmatter_that_is_only_the_title_makes_no_chunk_of_its_own() -> None:
    text = "---\ntitle: Harbour lock gates and their keepers\n---\nThe gates close at half tide every day.\n"
    chunks = chunks_of(text)
    assert [c.kind for c in chunks] == ["window"]
    assert chunks[0].heading_path == "Harbour lock gates and their keepers"
    assert chunks[0].embed_text == "Harbour lock gates and their keepers\n\nThe gates close at half tide every day."
    # a page that is only a title keeps it as its frontmatter chunk: the title is still found
    only = chunks_of("---\ntitle: Harbour lock gates and their keepers\n---\n")
    assert [c.kind for c in only] == ["frontmatter"] and "Harbour lock gates" in only[0].text


def test_every_window_of_a_long_untitled_body_carries_the_title_within_the_budget() -> None:
    title = "Structural homeostasis of dendritic arbors"
    text = f"---\ntitle: {title}\n---\n\n" + "\n\n".join(words(120, seed=s) + "." for s in range(6)) + "\n"
    limits = ChunkLimits(max_tokens=120, target_tokens=90, overlap_tokens=10)
    chunks = chunks_of(text, limits=limits)
    assert len(chunks) > 3
    assert all(c.heading_path == title and c.embed_text.startswith(title + "\n\n") for c in chunks)
    assert all(c.token_count <= limits.max_tokens for c in chunks)
    assert all(c.token_count == estimate_tokens(c.embed_text) for c in chunks)


def test_a_huge_title_is_cut_to_a_quarter_of_the_chunk_limit() -> None:
    text = "---\ntitle: " + words(400) + "\n---\n\nA body that is long enough to be one chunk.\n"
    limits = ChunkLimits(max_tokens=200, target_tokens=150, overlap_tokens=20)
    (chunk,) = [c for c in chunks_of(text, limits=limits) if c.kind != "frontmatter"]
    assert chunk.heading_path and estimate_tokens(chunk.heading_path) <= 50
    assert words(400).startswith(chunk.heading_path + " ")
    assert chunk.token_count <= limits.max_tokens and chunk.text.startswith("A body")


def test_a_page_with_an_h1_keeps_its_h1() -> None:
    text = (
        "---\ntitle: The SEO title of the page\n---\n\n# Lock gates\n\nThey close at half tide every day.\n\n"
        "## Sluices\n\nThe keeper levels the water before a ship passes.\n"
    )
    body = [c for c in chunks_of(text) if c.kind != "frontmatter"]
    assert [(c.section_heading, c.heading_path) for c in body] == [
        ("# Lock gates", "Lock gates"),
        ("## Sluices", "Lock gates > Sluices"),
    ]
    assert all("SEO" not in c.embed_text for c in body)
    # (the control: without its H1 the same page is rooted at the frontmatter title)
    no_h1 = [c for c in chunks_of(text.replace("# Lock gates\n\n", "")) if c.kind != "frontmatter"]
    assert [c.heading_path for c in no_h1] == ["The SEO title of the page", "The SEO title of the page > Sluices"]
    # an H1 further down is the page's title too
    late = "---\ntitle: Page title\n---\n\nIntro before the heading, long enough.\n\n# Real title\n\nBody text here.\n"
    assert [c.heading_path for c in chunks_of(late) if c.kind != "frontmatter"] == ["", "Real title"]


@pytest.mark.parametrize(
    "value",
    ['""', "'   '", "", "1984", "[Lock, Gates]", "{name: gates}", "true", "2024-01-01", "~", "|\n  \n"],
    ids=["empty", "blank", "null", "int", "list", "mapping", "bool", "date", "tilde", "block-blank"],
)
def test_a_title_that_is_not_a_non_empty_string_is_ignored(value: str) -> None:
    text = f"---\ntitle: {value}\n---\n\nThe lock gates close at half tide so the basin never drains.\n"
    meta = extract_metadata("content/post.md", text)
    assert meta.warning is None  # valid YAML: the page is read, only the title is no heading
    body = [c for c in chunk_document(text, meta) if c.kind != "frontmatter"]
    assert [(c.heading_path, c.section_heading) for c in body] == [("", None)]
    assert body[0].embed_text == body[0].text
    # the same page with a string title: that one is the root
    titled = text.replace(f"title: {value}\n", "title: Lock gates\n")
    assert [c.heading_path for c in chunks_of(titled) if c.kind != "frontmatter"] == ["Lock gates"]


def test_search_results_and_symbols_carry_the_front_matter_title(tmp_path: Path) -> None:
    root = make_project(
        tmp_path,
        {
            "content/locks.md": HUGO_PAGE,
            "content/plain.md": "# Harbour cranes\n\nCranes lift cargo onto the quay at dawn.\n",
        },
    )
    with open_project(root) as p:
        p.index()
        # "tidal" is only in the title: the body chunks are found through their heading path
        hits = p.search({"query": "tidal sluices", "mode": "lexical"})["results"]
        assert hits and hits[0]["filePath"] == "content/locks.md"
        assert hits[0]["headingPath"] == "Tidal locks: how the harbour keeps its water > Sluices"
        first = p.search({"query": "tidal basin drains", "mode": "lexical"})["results"]
        assert first[0]["sectionHeading"] == "# Tidal locks: how the harbour keeps its water"
        assert first[0]["startLine"] == 6
        names = [(s["name"], s["path"]) for s in p.symbols("tidal locks")]
        assert ("Tidal locks: how the harbour keeps its water", "content/locks.md") in names
        # the page with its own H1 is unchanged
        crane = p.search({"query": "cranes quay", "mode": "lexical"})["results"]
        assert crane[0]["headingPath"] == "Harbour cranes"


def test_the_outline_is_rooted_at_the_front_matter_title() -> None:
    from saipling.retrieval.entities import outline

    items = outline(HUGO_PAGE)
    assert [(i.name, i.kind, i.first, i.last, i.detail) for i in items] == [
        ("Tidal locks: how the harbour keeps its water", "heading", 1, 9, "title")
    ]
    assert [(c.name, c.first) for c in items[0].children] == [("Sluices", 7)]
    # an H1 is the outline's root, as before; a non-string title is none
    assert [i.name for i in outline(HUGO_PAGE.replace("## Sluices", "# Sluices"))] == ["Sluices"]
    assert [
        i.name for i in outline(HUGO_PAGE.replace('title: "Tidal', 'title: ["Tidal').replace('water"', 'water"]'))
    ] == ["Sluices"]

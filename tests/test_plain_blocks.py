"""The block structure of plain prose read without the parser (markdown/blocks.py `_plain_blocks`) is the
parser's, exactly: on every file of the corpora and on generated documents made of every kind of line it tells
apart; and a document with any other block goes to the parser."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from saipling.markdown import blocks

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "corpora"


def _both(text: str) -> tuple[blocks.MarkdownBlocks | None, blocks.MarkdownBlocks]:
    """(the fast answer, None when it gives up; the parser's) for normalised `text`."""
    lines = text.split("\n")
    plain = blocks._plain_blocks(lines)
    fast = blocks._blocks(text, lines, *plain, set()) if plain is not None else None
    return fast, blocks._parsed(text, lines)


@pytest.mark.parametrize("corpus", ["fiction-chapters", "13th-age-srd"])
def test_every_corpus_file_read_without_the_parser_has_the_parsers_blocks(corpus: str) -> None:
    root = SHARED / corpus
    if not root.is_dir():
        pytest.skip(f"{root} is not here")
    taken = 0
    files = sorted(root.rglob("*.md"))
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")
        fast, parsed = _both(text)
        if fast is not None:
            taken += 1
            assert fast == parsed, path
        assert blocks.parse_blocks(text) == parsed, path
    assert files and taken > 0  # (the fast path is taken on some: a novel's chapters, most of them)


# every kind of line `_plain_blocks` tells apart, and a few it must not mistake for prose
_LINES = [
    "",
    "   ",
    "\t",
    " \t ",
    "Plain prose, a sentence.",
    "\u00a0",
    "\u3000indented by an ideographic space",
    "“Quoted,” she said.",
    "— a dash of dialogue",
    "# Chapter One",
    "## Two ##",
    "### Three #",
    "#### Four#",
    "   ##### Five  ###   ",
    "###### Six \\#",
    "####### seven is text",
    "#hashtag",
    "#",
    "#\tTabbed",
    "# *Emphasis* and `code` [[Page|alias]]",
    "* * *",
    "***",
    "*   *\t*  *",
    "*emphasis* line",
    "**bold** line",
    "** **",
    "* list item",
    "*",
    "_ _ _",
    "___",
    "_italic_ line",
    "+ plus item",
    "+plus",
    "- dash item",
    "-",
    "--",
    "---",
    "-word",
    "=",
    "===",
    "= not a heading",
    "=word",
    "``inline`` code",
    "```",
    "~~strike~~",
    "~~~",
    "> a quote",
    "<div>",
    "<!-- a comment -->",
    "[ref]: https://example.com",
    "1984 was a year.",
    "1. one",
    "2) two",
    "10.",
    "    indented code",
    "\tcode by tab",
    "   three spaces then text",
    "...",
    "title: x",
    "  - yaml item",
    "[[Wiki link]] at the start",
    "text with [[a/page#Part]] inside",
]


def test_generated_documents_read_without_the_parser_have_the_parsers_blocks() -> None:
    rng = random.Random(20261128)
    taken = refused = 0
    for n in range(3000):
        body = [rng.choice(_LINES) for _ in range(rng.randint(0, 14))]
        if n % 3 == 0:  # front matter first, sometimes closed oddly
            inner = [
                rng.choice(["title: x", "  - a", "", "----", "--- ", " ---", "...", "tags: [a]", "- b"])
                for _ in range(rng.randint(0, 4))
            ]
            closing = rng.choice(["---", "----", "---  ", "--", "", "..."])
            body = ["---", *inner, closing, *body]
        text = "\n".join(body)
        fast, parsed = _both(text)
        if fast is None:
            refused += 1
            continue
        taken += 1
        assert fast == parsed, repr(text)
    assert taken > 300 and refused > 300, (taken, refused)  # (both ways tried many times)


@pytest.mark.parametrize(
    "line",
    [
        "> quote",
        "- item",
        "* item",
        "+ item",
        "1. item",
        "```",
        "~~~",
        "    code",
        "\tcode",
        "<p>",
        "[a]: b",
        "Title\n===",
        "Title\n---",
    ],
)
def test_a_document_with_another_block_goes_to_the_parser(line: str) -> None:
    text = f"# Heading\n\nProse.\n{line}\n\nMore prose."
    assert blocks._plain_blocks(text.split("\n")) is None
    assert blocks.parse_blocks(text) == blocks._parsed(text, text.split("\n"))

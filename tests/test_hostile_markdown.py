"""Markdown built to make a scanner's time grow with the square of its size: unclosed `<!--` by the thousand, a
heading of blanks, backtick runs that nothing closes. Lazy regexes over these ran for minutes to hours with the
interpreter's lock held, so one such file (or open buffer) froze every request of a server. The scanners that
replaced them (markdown/spans.py, retrieval/entities._atx_heading, name_fixes._ALIASES_RE) give the regexes'
answers where CommonMark agrees, and the real server keeps answering."""

from __future__ import annotations

import asyncio
import random
import re
from pathlib import Path
from typing import Any

from lsprotocol import types

from fixtures import make_project, novel_project, open_project, write_file
from lsp_client import lsp_session, request, status, wait_for_index
from saipling.indexing import text_phase
from saipling.indexing.mention_scan import Finder
from saipling.markdown.blocks import MAX_HEADING_CHARS, indexed_lines, parse_blocks
from saipling.markdown.spans import blank_code_spans, code_spans, comment_spans, strip_comments
from saipling.retrieval import mentions
from saipling.retrieval.entities import _atx_heading
from saipling.retrieval.name_fixes import alias_change
from test_mentions import counts

OLD_COMMENT = re.compile(r"<!--.*?-->", re.S)


def test_comments_are_found_as_the_regex_found_them() -> None:
    rng = random.Random(7)
    parts = ["<!--", "-->", "-", ">", "<", "!", "a", "\n", "<!---->", "<!-->"]
    tried = 0
    for _ in range(5000):
        text = "".join(rng.choice(parts) for _ in range(rng.randint(0, 12)))
        assert list(comment_spans(text)) == [m.span() for m in OLD_COMMENT.finditer(text)], text
        assert strip_comments(text) == OLD_COMMENT.sub("", text), text
        tried += "<!--" in text and "-->" in text
    assert tried > 1000  # (most strings held a comment to find)


def test_code_spans_are_commonmarks() -> None:
    assert code_spans("use `Emma` and ``a ` b`` here") == [(4, 10), (15, 24)]
    assert blank_code_spans("`a` Emma `b`") == "    Emma    "
    assert blank_code_spans("``a` Emma") == "``a` Emma"  # a run of 2 is closed by a run of 2 only
    assert blank_code_spans("```x``` y `z`") == "        y    "
    assert blank_code_spans("no code") == "no code"


def test_atx_headings() -> None:
    assert _atx_heading("## Ch. 3 ##") == (2, "Ch. 3")
    assert _atx_heading("  # a #b") == (1, "a #b")
    assert _atx_heading("# a   ##   ") == (1, "a")
    assert _atx_heading("#") == (1, "")
    assert _atx_heading("# #") == (1, "")
    assert _atx_heading("####### x") is None and _atx_heading("#a") is None
    assert _atx_heading("# a" + " " * 200_000 + "b") == (1, "a" + " " * 200_000 + "b")


def test_an_alias_is_added_beside_a_value_followed_by_blanks() -> None:
    change = alias_change("---\nname: Dorman\naliases: Dor" + " " * 100_000 + "\n---\n", "Smith")
    assert (change.line, change.col, change.end_col, change.text) == (2, 9, 12, "[Dor, Smith]")


def test_a_file_of_unclosed_comments_is_read_in_one_pass() -> None:
    doc = parse_blocks("# Notes\n\n" + "<!--" * 250_000 + "\n\nA closing line.\n")  # 1 MB
    lines = indexed_lines(doc)
    assert lines[0] == "# Notes" and lines[-2] == "A closing line."


def test_a_heading_of_many_lines_is_not_carried_by_each_of_its_chunks(tmp_path: Path) -> None:
    """Every line before a `===` is the setext heading's: 20,000 of them made a 240 KB title that each of the
    section's chunks stored in its heading path (7 minutes to index one file). Titles are cut to
    MAX_HEADING_CHARS, at a word; every line is still indexed once, in the chunks' text."""
    lines = [f"Line{i} word" for i in range(20_000)]
    root = make_project(tmp_path, {"long.md": "\n".join(lines) + "\n===\n", "short.md": "# A real title\n\nText.\n"})
    with open_project(root) as project:
        summary = project.index()
        chunks = project.store.chunks_for_path("long.md")
        assert summary.chunks == len(chunks) + 1 and len(chunks) < 1000
        assert all(len(c.heading_path) <= MAX_HEADING_CHARS + 1 for c in chunks)
        assert chunks[0].heading_path.startswith("Line0 word Line1 word") and chunks[0].heading_path.endswith("…")
        assert sum(c.text.count("\n") + 1 for c in chunks) >= len(lines)  # (no line left out)
        assert project.store.chunks_for_path("short.md")[0].heading_path == "A real title"
        found = project.search({"query": "Line19999", "mode": "lexical"})["results"]
        assert found and found[0]["filePath"] == "long.md"


def test_many_mentions_on_one_line_and_an_alias_too_long_to_be_a_name(tmp_path: Path) -> None:
    """20,000 mentions in one paragraph: each was checked against every other on its line (40,000 took 75 s to
    index); an alias of 600 characters overflowed the recursion that built the names' pattern and failed the
    whole index run. Both are indexed, every mention counted; the long alias is simply never a mention."""
    root = novel_project(tmp_path)
    write_file(root, "characters/dorman/profile.md", "---\nname: Dorman\naliases: [" + "x" * 600 + "]\n---\n# Dorman\n")
    write_file(
        root, "books/book-01/phase-1-setup/ch-06/scene-01.md", "# Crowd\n\n" + "Mina walked on. " * 20_000 + "\n"
    )
    with open_project(root) as project:
        project.index()
        (mina,) = mentions.report(project, "Mina")
        assert counts(mina)[6] == 20_000
        (dorman,) = mentions.report(project, "Dorman")
        assert dorman.entity.path == "characters/dorman/profile.md"


def test_a_first_index_of_many_entity_pages_finds_every_mention(tmp_path: Path, monkeypatch: Any) -> None:
    """The run's finder is not built again for every batch that adds a few entity pages (8,000 pages: 16 s of
    20 spent building it); the mentions the batches before the last entity missed are found by the settle pass
    after the run. Small batches here, so entity pages arrive over many of them and chapters sit between them."""
    monkeypatch.setattr(text_phase, "TEXT_BATCH_CHUNKS", 8)
    files = {f"characters/c{i:03d}/profile.md": f"---\nname: Zorbel{i:03d}\n---\n# Zorbel{i:03d}\n" for i in range(200)}
    files |= {
        f"books/b1/p1/ch-{i:02d}/scene.md": f"# Scene\n\nZorbel{i * 4:03d} met Zorbel{i * 4 + 199 - 8 * i:03d}.\n"
        for i in range(25)
    }
    root = make_project(tmp_path, files)
    with open_project(root) as project:
        project.index()
        for i in range(25):
            for n in (i * 4, i * 4 + 199 - 8 * i):
                (report,) = mentions.report(project, f"Zorbel{n:03d}")
                assert report.total == 1 and report.first is not None, (n, report.total)  # its one scene
        assert not project.store.mention_stale_keys(Finder.for_store(project.store).key)


HOSTILE = {
    "notes/comments.md": "# Comments\n\n" + "<!--" * 100_000 + "\n",  # 400 KB: 6 minutes with the regex
    "notes/ticks.md": "# Ticks\n\nMina " + "".join("`" * k + "a" for k in range(1, 500)) + "\n",
}
BLANK_HEADING = "\n## From chapter 4" + " " * 150_000 + "x\n\nBitten by the Count.\n"


async def test_the_server_keeps_answering_over_hostile_markdown(tmp_path: Path) -> None:
    root = novel_project(tmp_path)
    for rel, text in HOSTILE.items():
        write_file(root, rel, text)
    profile = root / "characters/mina-harker/profile.md"
    profile.write_text(profile.read_text(encoding="utf-8") + BLANK_HEADING, encoding="utf-8")
    async with lsp_session(root, {"provider": "none", "watch": False}) as client:
        # (the old scanners: the index alone ran for minutes; the guard is that it ends at all in the time)
        await wait_for_index(client, timeout=120)
        indexed = await status(client)
        assert indexed["pendingFiles"] == 0 and indexed["totalFiles"] >= 7
        scene = root / "books/book-01/phase-1-setup/ch-03/scene-01.md"
        assert scene.read_text(encoding="utf-8").split("\n")[5].startswith("Mina read")
        at = types.Position(5, 1)
        doc = types.TextDocumentIdentifier(scene.as_uri())
        hover = client.text_document_hover_async(types.HoverParams(doc, at))
        other = await asyncio.wait_for(status(client), 60)  # answered beside the card's profile scan
        assert other["totalFiles"] == indexed["totalFiles"]
        card = await asyncio.wait_for(hover, 60)
        assert card is not None and "Mina Harker" in card.contents.value
        found = await request(client, "saipling/search", {"query": "Bitten by the Count", "mode": "lexical"})
        assert any(r["filePath"].endswith("mina-harker/profile.md") for r in found["results"])
        opened = root / "notes/comments.md"
        client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                types.TextDocumentItem(opened.as_uri(), "markdown", 1, opened.read_text(encoding="utf-8"))
            )
        )
        symbols = await asyncio.wait_for(
            client.text_document_document_symbol_async(
                types.DocumentSymbolParams(types.TextDocumentIdentifier(opened.as_uri()))
            ),
            60,
        )
        assert symbols and symbols[0].name == "Comments"

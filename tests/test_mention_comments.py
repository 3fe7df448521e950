"""Mentions are found in what the index holds of a file: an author's HTML comment or a link definition naming a
character is no appearance of it, and no scene that character knows (`knownBy`)."""

from __future__ import annotations

from pathlib import Path

from fixtures import novel_project, open_project, write_file
from saipling.retrieval import mentions

NOTE = "books/book-01/phase-1-setup/ch-06/scene-01.md"
MIXED = "books/book-01/phase-1-setup/ch-07/scene-01.md"


def test_no_mention_in_comments_or_link_definitions(tmp_path: Path) -> None:
    root = novel_project(tmp_path)
    write_file(
        root,
        NOTE,
        "---\npov: Lucy\n---\n# Chapter 6\n\nLucy waited by the quiet harbour. <!-- TODO: Mina arrives here? -->\n\n"
        "<!--\nMina is secretly\nthe narrator\n-->\n\n[Mina]: letters/mina.md\n",
    )
    write_file(root, MIXED, "# Chapter 7\n\n<!-- Mina? --> Mina smiled at the quiet harbour.\n")
    with open_project(root) as p:
        p.index()
        (mina,) = mentions.report(p, "Mina", limit=100)
        found = {(m["path"], m["line"], m["column"]) for m in mina.to_dict()["mentions"]}
        assert not any(path == NOTE for path, _, _ in found)
        assert {(line, col) for path, line, col in found if path == MIXED} == {(3, 15)}
        hits = p.search({"query": "quiet harbour", "mode": "lexical", "filter": {"knownBy": "Mina"}})["results"]
        assert [r["filePath"] for r in hits] == [MIXED]

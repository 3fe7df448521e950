"""A spoiler horizon (`maxChapter`) in search, agent context and check_passage goes by the chapter a passage
belongs to: a chapter file's (its folder, frontmatter or own name: `chapter-21.md`) and, inside a series bible's
pages, the chapter a section is headed for (`## Chapter 21: bitten`), as the hover card already went."""

from __future__ import annotations

from pathlib import Path

from fixtures import make_project, open_project
from saipling.retrieval.continuity import check_passage

LUCY = (
    "---\nname: Lucy Westenra\ntype: character\naliases: [Lucy]\n---\n# Lucy Westenra\n\n"
    "Mina's friend, courted by three suitors.\n\n"
    "## Chapter 3\n\nLucy writes to Mina about the three proposals.\n\n"
    "## Chapter 12: the transfusions\n\nLucy weakens night after night; after four transfusions of blood she "
    "dies, and the doctors grieve the lovely sleepwalker.\n"
)
FILES = {
    "characters/lucy-westenra/profile.md": LUCY,
    "books/book-01/ch-03/scene-01.md": "---\npov: Mina\n---\n# Chapter 3\n\nLucy wrote of her suitors at Whitby.\n",
    # a chapter known by its file name alone (no folder, no frontmatter): it passed every horizon
    "books/book-01/chapter-21.md": "# CHAPTER 21\n\nThe transfusions failed; the sleepwalker dies before dawn.\n",
}


def test_later_sections_and_chapters_stay_behind_the_horizon(tmp_path: Path) -> None:
    root = make_project(tmp_path, FILES)
    with open_project(root) as project:
        project.index()
        ask = {"query": "sleepwalker dies after four transfusions", "mode": "lexical", "maxResults": 10}
        everything = project.search(ask)["results"]
        assert {r["headingPath"] for r in everything} >= {"Lucy Westenra > Chapter 12: the transfusions", "CHAPTER 21"}
        assert {r["chapterId"] for r in everything if r["filePath"].endswith("chapter-21.md")} == {"ch-21"}
        horizon = project.search({**ask, "filter": {"maxChapter": 8}})["results"]
        assert not any("Chapter 12" in (r["headingPath"] or "") for r in horizon)
        assert not any(r["filePath"].endswith("chapter-21.md") for r in horizon)
        # the same profile's earlier sections, and the page's undated text, still answer
        early = project.search(
            {"query": "Lucy three proposals suitors", "mode": "lexical", "filter": {"maxChapter": 8}}
        )
        assert "Lucy Westenra > Chapter 3" in {r["headingPath"] for r in early["results"]}
        # agent context under the horizon
        enriched = project.enrich(
            {
                "query": "sleepwalker dies after four transfusions",
                "skillConfig": {"enabled": True, "mode": "always", "maxChapter": 8},
            }
        )
        assert "transfusions" not in enriched["contextBlock"]
        # check_passage as of chapter 5: the profile's text stops before its Chapter 12 section
        checked = check_passage(project, {"text": "Lucy sat by the window.", "chapter": 5})
        (lucy,) = [e for e in checked["entities"] if e["entity"]["name"] == "Lucy Westenra"]
        assert "Chapter 3" in lucy["profile"]["text"] and "transfusions" not in lucy["profile"]["text"]
        assert all("transfusions" not in p["text"] for p in lucy["passages"])
        later = check_passage(project, {"text": "Lucy sat by the window.", "chapter": 14})
        (lucy,) = [e for e in later["entities"] if e["entity"]["name"] == "Lucy Westenra"]
        assert "transfusions" in lucy["profile"]["text"]


def test_chapter_numbers_past_any_book_are_refused_or_ignored(tmp_path: Path) -> None:
    """A horizon or chapter of 2**63 was an OverflowError (an internal error over MCP); a file named
    `chapter-99999999999999999999.md` could not be indexed at all."""
    import pytest

    from saipling.errors import InvalidRequest

    root = make_project(tmp_path, {**FILES, "notes/chapter-99999999999999999999.md": "# Far\n\nA far chapter.\n"})
    with open_project(root) as project:
        summary = project.index()
        assert not summary.failed and "notes/chapter-99999999999999999999.md" in project.store.file_states()
        skill = {"enabled": True, "mode": "always", "maxChapter": 2**63}
        with pytest.raises(InvalidRequest, match="maxChapter"):
            project.enrich({"query": "sleepwalker", "skillConfig": skill})
        with pytest.raises(InvalidRequest) as info:
            check_passage(project, {"text": "Lucy sat by the window.", "chapter": 2**31})
        assert info.value.field == "chapter"


def test_a_book_that_is_no_book_id_is_told_the_ids(tmp_path: Path) -> None:
    """`--book Dracula` where the folders make the id `book-01-dracula` found nothing and said only that the
    filters matched nothing."""
    from saipling.retrieval.filter_notes import why_no_results
    from saipling.retrieval.search import parse_request, run_search

    files = {k.replace("book-01", "book-01-dracula"): v for k, v in FILES.items()}
    root = make_project(tmp_path, files)
    with open_project(root) as project:
        project.index()
        params = {"query": "Lucy suitors", "mode": "lexical", "filter": {"bookId": "Dracula"}}
        assert run_search(project, parse_request(params))["results"] == []
        said = why_no_results(project, parse_request(params), {"--book": "Dracula"}, "--path")
        assert said == (
            "book Dracula: no chapter is in a book of that id (did you mean book-01-dracula? the books: "
            "book-01-dracula)"
        )
        right = {**params, "filter": {"bookId": "book-01-dracula"}}
        assert run_search(project, parse_request(right))["results"]

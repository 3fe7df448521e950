"""The `mentions` MCP tool on the real `saipling mcp` process (issue 35)."""

from __future__ import annotations

from pathlib import Path

from fixtures import novel_project, write_file
from test_mcp import call, error, mcp_session

SCENE = "books/book-01/phase-1-setup/ch-{:02d}/scene-01.md"


async def test_mentions_tool_counts_per_chapter_and_follows_an_edit(tmp_path: Path) -> None:
    root = novel_project(tmp_path)
    async with mcp_session(root) as session:
        (entity,) = (await call(session, "mentions", {"name": "Jonathan", "limit": 0}))["entities"]
        assert {c["chapter"]: c["count"] for c in entity["chapters"]} == {"ch-01": 1, "ch-02": 2}
        assert entity["mentions"] == [] and entity["chaptersSinceLastSeen"] == 3
        write_file(root, SCENE.format(4), "---\npov: Mina\n---\n# Chapter 4\n\nJonathan's hands shook.\n")
        (entity,) = (await call(session, "mentions", {"name": "jonathan harker"}))["entities"]
        assert {c["chapter"]: c["count"] for c in entity["chapters"]} == {"ch-01": 1, "ch-02": 2, "ch-04": 1}
        assert [m["surface"] for m in entity["mentions"]].count("Jonathan") == 4
        assert "Lucy" in await error(session, "mentions", {"name": "Lucy"})


async def test_search_and_enrich_context_take_known_by(tmp_path: Path) -> None:
    root = novel_project(tmp_path)
    async with mcp_session(root) as session:
        args = {"query": "letter", "mode": "lexical", "maxResults": 20}
        everyone = {r["filePath"] for r in (await call(session, "search", args))["results"]}
        assert SCENE.format(3) in everyone
        flt = {"knownBy": "Jonathan", "maxChapter": 4}
        known = {r["filePath"] for r in (await call(session, "search", {**args, "filter": flt}))["results"]}
        assert known == {SCENE.format(2)}  # chapter 3's letter is Mina's: Jonathan is not in it
        enrich = await call(
            session,
            "enrich_context",
            {
                "query": "Mina read the letter",
                "knownBy": "Dracula",
                "maxChapter": 1,
                "skillConfig": {"min_relevance": 0},
            },
        )
        assert {r["filePath"] for r in enrich["searchResults"]} <= {
            SCENE.format(1),
            "characters/count-dracula/profile.md",
        }
        assert "knownBy" in await error(session, "search", {**args, "filter": {"knownBy": "Lucy"}})


async def test_check_passage_and_names_tools(tmp_path: Path) -> None:
    root = novel_project(tmp_path)
    write_file(root, SCENE.format(5), "# Five\n\nJonathon walked alone.\n")
    async with mcp_session(root) as session:
        found = await call(session, "names", {"drift": True})
        assert "Jonathon" in {d["word"] for d in found["drift"]}
        r = await call(session, "check_passage", {"text": "The Count wrote to Mina.", "chapter": 4, "maxTokens": 500})
        assert {e["entity"]["name"] for e in r["entities"]} == {"Count Dracula", "Mina Harker"}
        assert all(e["passages"] and e["profile"]["text"] for e in r["entities"]) and r["tokensUsed"] <= 500
        # errors in the project's words, as `search` says them (not pydantic's "String should have ...")
        assert await error(session, "check_passage", {"text": ""}) == "invalid argument text: must not be empty"
        # the CLI's PATH:START-END given to `get`: where the lines go instead
        said = await error(session, "get", {"path": "characters/mina.md:9-11"})
        assert "names lines: give the path alone (characters/mina.md) and the lines as startLine" in said

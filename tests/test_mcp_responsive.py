"""`saipling mcp` (the real process) stays responsive (issue 30): `status` is answered while a CPU-heavy search
runs (a glob that made the old regex backtrack for minutes with the GIL held)."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from lsp_client import server_env, write_project


def params(root: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "saipling", "mcp", str(root), "--provider", "none"],
        env={k: v for k, v in server_env().items() if k != "SAIPLING_TEST_CLOCK"},
    )


async def structured(session: ClientSession, tool: str, args: dict | None = None) -> dict:
    result = await session.call_tool(tool, args or {})
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[0].text)


async def test_status_is_answered_while_a_heavy_glob_search_runs(tmp_path: Path) -> None:
    deep = "/".join(["chapter-notes-and-drafts"] * 3)
    root = write_project(
        tmp_path / "p",
        {f"{deep}/storm-at-sea-scene-{i:03}-draft.md": f"# S{i}\n\nstorm {i}\n" for i in range(20)},
    )
    async with stdio_client(params(root)) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        deadline = time.monotonic() + 60
        while (await structured(session, "status"))["isIndexing"]:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        glob = "**?**?**?**?**?**?**?**.mdx"
        search = asyncio.ensure_future(structured(session, "search", {"query": "storm", "filter": {"glob": glob}}))
        await asyncio.sleep(0.2)  # the search is under way
        started = time.monotonic()
        st = await asyncio.wait_for(structured(session, "status"), 30)
        assert st["totalFiles"] == 20 and time.monotonic() - started < 30
        assert (await asyncio.wait_for(search, 120))["results"] == []

"""Changes made outside the editor (no LSP notification at all) reach the index through the file watcher."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from lsp_client import (
    STORY,
    lsp_session,
    search_paths,
    status,
    wait_for_index,
    wait_for_status,
    write_project,
)

FAST = {"provider": "none", "quietPeriodSeconds": 0.5, "tickSeconds": 0.2}


async def test_watcher_reindexes_changes_made_outside_the_editor(tmp_path: Path) -> None:
    root = write_project(tmp_path / "story", STORY)
    async with lsp_session(root, FAST) as client:
        await wait_for_index(client)
        await asyncio.sleep(1.0)  # the index's own writes (.saipling/) must not start passes
        assert (await status(client))["indexPasses"] == 1

        (root / "notes" / "ideas.md").write_text("# Ideas\n\nA submarine made of glass.\n", encoding="utf-8")
        (root / "notes" / "new.md").write_text("# New\n\nThe quicksilver orchard.\n", encoding="utf-8")
        (root / "places" / "fenwick.md").unlink()
        await wait_for_search(client, "submarine glass", ["notes/ideas.md"])
        await wait_for_status(client, lambda s: s["totalFiles"] == 4 and s["pendingFiles"] == 0, timeout=10)
        assert await search_paths(client, "quicksilver orchard", mode="lexical") == ["notes/new.md"]
        assert await search_paths(client, "stilts", mode="lexical") == []

        (root / ".hidden").mkdir()
        (root / ".hidden" / "x.md").write_text("# Hidden\n\nzeppelin\n", encoding="utf-8")
        shutil.move(root / "chapters", root / "book")  # a folder move: one rescan picks up the new paths
        await wait_for_search(client, "woke beneath", ["book/ch01.md"])
        # (a pass is counted once its run returns: its files are searchable a moment before)
        await wait_for_status(
            client,
            lambda s: s["pendingFiles"] == 0 and s["totalFiles"] == 4 and s["indexPasses"] >= 3,
            timeout=10,
        )
        assert await search_paths(client, "zeppelin", mode="lexical") == []


async def wait_for_search(client, query: str, expected: list[str], timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while (got := await search_paths(client, query, mode="lexical")) != expected:
        assert asyncio.get_running_loop().time() < deadline, f"{query!r} still finds {got}"
        await asyncio.sleep(0.1)


async def test_watch_off_ignores_outside_changes(tmp_path: Path) -> None:
    root = write_project(tmp_path / "story", STORY)
    async with lsp_session(root, {**FAST, "watch": False}) as client:
        await wait_for_index(client)
        (root / "notes" / "new.md").write_text("# New\n\nThe quicksilver orchard.\n", encoding="utf-8")
        await asyncio.sleep(1.2)
        st = await status(client)
        assert st["totalFiles"] == 4 and st["indexPasses"] == 1

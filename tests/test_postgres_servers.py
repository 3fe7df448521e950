"""The real `saipling serve` and `saipling mcp` processes on a PostgreSQL store (SAIPLING_STORE, tests/pg_fixture.py):
index, search, a save searchable at once, and two authors' servers on one shared workspace seeing each other's
saved edits by their next search."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fixtures import retrieval_project
from lsp_client import did_save, lsp_session, search_paths, status, wait_for_index
from test_mcp import SCENE_5, call, mcp_session, paths

pytest.importorskip("psycopg")


async def test_language_server_on_postgres(tmp_path: Path, pg_url: str) -> None:
    root = retrieval_project(tmp_path)
    async with lsp_session(root, {"provider": "none"}, env={"SAIPLING_STORE": pg_url}) as client:
        await wait_for_index(client)
        st = await status(client)
        assert st["totalFiles"] > 0 and st["totalChunks"] > 0
        assert (await search_paths(client, "zephyrine betrayal"))[0] == SCENE_5
        (root / "notes" / "late.md").write_text("# Late\n\nThe quetzalcoatl circles the tower.\n", encoding="utf-8")
        did_save(client, root / "notes" / "late.md")
        assert await search_paths(client, "quetzalcoatl") == ["notes/late.md"]
    assert not (root / ".saipling" / "index.db").exists(), "a SQLite index was written beside the PostgreSQL one"


async def test_two_authors_share_one_workspace(tmp_path: Path, pg_server) -> None:
    """Two servers (two authors, two copies of the project kept in step, as git or a sync tool does) on one
    workspace: what one saves, the other finds at its next search without being told of the file (no save, no
    watcher event): through the shared index; and the other's search never puts its copy's older text back."""
    url = pg_server.url("shared-bible")
    first = retrieval_project(tmp_path / "a")
    second = tmp_path / "b" / first.name
    shutil.copytree(first, second)
    env = {"SAIPLING_STORE": url}
    async with lsp_session(first, {"provider": "none"}, env=env) as one:
        await wait_for_index(one)
        async with lsp_session(second, {"provider": "none"}, env=env) as two:
            await wait_for_index(two)
            assert await search_paths(two, "quetzalcoatl") == []
            (first / "notes" / "late.md").write_text("# Late\n\nThe quetzalcoatl circles.\n", encoding="utf-8")
            did_save(one, first / "notes" / "late.md")
            assert await search_paths(one, "quetzalcoatl") == ["notes/late.md"]
            shutil.copy2(first / "notes" / "late.md", second / "notes" / "late.md")  # the copies synced
            assert await search_paths(two, "quetzalcoatl") == ["notes/late.md"]
            # an edit not yet in the other copy: the other server's search (its copy older) keeps it, for both
            with (first / SCENE_5).open("a", encoding="utf-8") as f:
                f.write("\nA narwhal surfaces by the quay.\n")
            did_save(one, first / SCENE_5)
            assert await search_paths(one, "narwhal") == [SCENE_5]
            assert await search_paths(two, "narwhal") == [SCENE_5]
            assert await search_paths(two, "zephyrine betrayal")  # (its results read and checked its copy)
            assert await search_paths(one, "narwhal") == [SCENE_5]
            # a note only the first copy has: the second's search leaves it out of its own results, not the index
            (first / "notes" / "only-here.md").write_text("# Mine\n\nThe platypus swims.\n", encoding="utf-8")
            did_save(one, first / "notes" / "only-here.md")
            assert await search_paths(one, "platypus") == ["notes/only-here.md"]
            assert await search_paths(two, "platypus") == []
            assert await search_paths(one, "platypus") == ["notes/only-here.md"]


async def test_mcp_server_on_postgres(tmp_path: Path, pg_url: str) -> None:
    root = retrieval_project(tmp_path)
    async with mcp_session(root, SAIPLING_STORE=pg_url) as session:
        response = await call(session, "search", {"query": "zephyrine betrayal", "maxResults": 3})
        assert response["results"][0]["filePath"] == SCENE_5
        assert set(await paths(session, "harbor", filter={"entityTypes": ["place"]})) == {"world/places/harbor.md"}
        st = await call(session, "status")
        assert st["totalFiles"] > 0
    assert not (root / ".saipling" / "index.db").exists()

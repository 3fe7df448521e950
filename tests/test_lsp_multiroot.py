"""Multi-root workspaces: one index per folder; results, status and symbols say which folder."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from lsp_client import (
    did_save,
    folder,
    lsp_session,
    request,
    status,
    wait_for_index,
    wait_for_status,
    write_project,
)

A = {
    "saga.md": "# Saga\n\nThe dragon of the north sleeps under ice.\n",
    "hero.md": "---\nname: Brenna\ntype: character\n---\n# Brenna\n\nA smith.\n",
}
B = {"notes.md": "# Notes\n\nA dragon kite over the harbour.\n"}
OPTIONS = {"provider": "none", "tickSeconds": 3600, "watch": False}


async def test_one_index_per_folder_and_results_name_their_folder(tmp_path: Path) -> None:
    a, b = write_project(tmp_path / "a", A), write_project(tmp_path / "b", B)
    async with lsp_session([a, b], OPTIONS) as client:
        await wait_for_index(client, runs=2)
        assert (a / ".saipling" / "index.db").is_file() and (b / ".saipling" / "index.db").is_file()

        found = await request(client, "saipling/search", {"query": "dragon"})
        assert {(r["workspaceFolder"], r["filePath"]) for r in found["results"]} == {
            (a.as_uri(), "saga.md"),
            (b.as_uri(), "notes.md"),
        }
        assert found["noConfidentMatch"] is False and found["confidence"] == 1.0  # merged: the best folder's
        only_b = await request(client, "saipling/search", {"query": "dragon", "workspaceFolder": "b"})
        assert [r["filePath"] for r in only_b["results"]] == ["notes.md"]

        st = await status(client)
        assert st["totalFiles"] == 3 and [f["workspaceFolder"] for f in st["folders"]] == [
            a.as_uri(),
            b.as_uri(),
        ]
        assert (await status(client, workspaceFolder=b.as_uri()))["totalFiles"] == 1

        got = await request(client, "saipling/get", {"path": str(b / "notes.md")})
        assert got["workspaceFolder"] == b.as_uri() and "kite" in got["text"]

        (b / "notes.md").write_text("# Notes\n\nA paper lantern.\n", encoding="utf-8")
        did_save(client, b / "notes.md")
        await request(client, "saipling/_test/advanceClock", {"seconds": 120})
        ticked = (await request(client, "saipling/_test/tick", {}))["folders"]
        assert [(f["workspaceFolder"], f["paths"]) for f in ticked] == [(a.as_uri(), 0), (b.as_uri(), 1)]

        symbols = await client.workspace_symbol_async(types.WorkspaceSymbolParams(query="brenna"))
        assert symbols[0].name == "Brenna" and symbols[0].location.uri == (a / "hero.md").as_uri()

        c = write_project(tmp_path / "c", {"map.md": "# Map\n\nThe dragon roads of the south.\n"})
        change = types.WorkspaceFoldersChangeEvent(added=[folder(c)], removed=[folder(b)])
        client.workspace_did_change_workspace_folders(types.DidChangeWorkspaceFoldersParams(change))
        await wait_for_index(client, runs=3)  # a, b, then c (small sync passes show no progress)
        found = await request(client, "saipling/search", {"query": "dragon"})
        assert {r["workspaceFolder"] for r in found["results"]} == {a.as_uri(), c.as_uri()}


def folders_change(added: list[Path], removed: list[Path]) -> types.DidChangeWorkspaceFoldersParams:
    event = types.WorkspaceFoldersChangeEvent(added=[folder(a) for a in added], removed=[folder(r) for r in removed])
    return types.DidChangeWorkspaceFoldersParams(event)


def saga_with_drafts(tmp_path: Path) -> tuple[Path, Path]:
    """A project (A) with a nested workspace folder `drafts` inside it."""
    outer = write_project(tmp_path / "saga", A)
    inner = write_project(outer / "drafts", {"draft.md": "# Draft\n\nThe dragon wakes in the last draft.\n"})
    return outer, inner


async def test_a_nested_folder_is_searched_through_the_enclosing_index_not_indexed_twice(
    tmp_path: Path,
) -> None:
    outer, inner = saga_with_drafts(tmp_path)
    # the nested folder listed first: the outer one must still be opened first
    async with lsp_session([inner, outer], OPTIONS) as client:
        await wait_for_index(client, runs=1)
        assert not (inner / ".saipling").exists()  # never opened on its own

        found = await request(client, "saipling/search", {"query": "dragon", "maxResults": 10})
        pairs = [(r["workspaceFolder"], r["filePath"]) for r in found["results"]]
        assert sorted(pairs) == [
            (outer.as_uri(), "drafts/draft.md"),
            (outer.as_uri(), "saga.md"),
        ]  # once each
        assert (await status(client))["totalFiles"] == 3
        by_name = await request(client, "saipling/search", {"query": "dragon", "workspaceFolder": "drafts"})
        assert {r["workspaceFolder"] for r in by_name["results"]} == {outer.as_uri()}

        # the enclosing folder closes: the nested one is opened and indexed on its own
        client.workspace_did_change_workspace_folders(folders_change([], [outer]))
        await wait_for_index(client, runs=2)
        found = await request(client, "saipling/search", {"query": "dragon"})
        assert [(r["workspaceFolder"], r["filePath"]) for r in found["results"]] == [(inner.as_uri(), "draft.md")]

        # and the enclosing folder added again takes it over
        client.workspace_did_change_workspace_folders(folders_change([outer], []))
        await wait_for_index(client, runs=3)
        st = await status(client)
        assert st["workspaceFolder"] == outer.as_uri() and "folders" not in st and st["totalFiles"] == 3


async def test_a_named_nested_folder_is_limited_to_its_own_files(tmp_path: Path) -> None:
    outer, inner = saga_with_drafts(tmp_path)
    async with lsp_session([outer, inner], OPTIONS) as client:
        await wait_for_index(client, runs=1)
        scoped = await request(client, "saipling/search", {"query": "dragon", "workspaceFolder": "drafts"})
        assert [r["filePath"] for r in scoped["results"]] == ["drafts/draft.md"]
        narrowed = await request(
            client,
            "saipling/search",
            {"query": "dragon", "workspaceFolder": inner.as_uri(), "filter": {"pathPrefix": "nothing-here/"}},
        )
        assert narrowed["results"] == []  # the caller's own prefix applies inside the nested folder
        got = await request(client, "saipling/get", {"path": "draft.md", "workspaceFolder": "drafts"})
        assert "last draft" in got["text"]
        with pytest.raises(JsonRpcException) as info:
            await request(client, "saipling/clearIndex", {"workspaceFolder": "drafts"})
        assert "saga" in info.value.message
        assert (await status(client))["totalFiles"] == 3  # the enclosing index was not cleared


async def test_three_levels_and_a_late_outermost_folder(tmp_path: Path) -> None:
    top = write_project(tmp_path / "top", {"top.md": "# Top\n\nA lantern.\n"})
    mid = write_project(top / "mid", {"mid.md": "# Mid\n\nA kettle.\n"})
    low = write_project(mid / "low", {"low.md": "# Low\n\nA dragon egg.\n"})
    async with lsp_session([mid, low], OPTIONS) as client:
        await wait_for_index(client, runs=1)
        client.workspace_did_change_workspace_folders(folders_change([top], []))
        await wait_for_index(client, runs=2)
        st = await status(client)
        assert st["workspaceFolder"] == top.as_uri() and st["totalFiles"] == 3
        found = await request(client, "saipling/search", {"query": "dragon", "workspaceFolder": "low"})
        assert [r["filePath"] for r in found["results"]] == ["mid/low/low.md"]


async def test_folder_changes_sent_back_to_back_never_open_a_nested_folder(tmp_path: Path) -> None:
    base = write_project(tmp_path / "x", {"x.md": "# X\n\nAn anchor.\n"})
    outer, inner = saga_with_drafts(tmp_path)
    async with lsp_session([base], OPTIONS) as client:
        await wait_for_index(client, runs=1)
        client.workspace_did_change_workspace_folders(folders_change([outer], []))
        client.workspace_did_change_workspace_folders(folders_change([inner], []))
        st = await wait_for_status(client, lambda s: s["totalFiles"] >= 4 and not s["isIndexing"])
        await asyncio.sleep(0.5)  # both changes applied
        st = await status(client)
        assert not (inner / ".saipling").exists()  # the nested folder was never opened on its own
        assert sorted(f["workspaceFolder"] for f in st["folders"]) == sorted([base.as_uri(), outer.as_uri()])
        found = await request(client, "saipling/search", {"query": "dragon", "maxResults": 10})
        paths = [r["filePath"] for r in found["results"]]
        assert sorted(paths) == ["drafts/draft.md", "saga.md"]  # each file once


async def test_closing_a_folder_and_its_nested_folder_together(tmp_path: Path) -> None:
    keep = write_project(tmp_path / "keep", B)
    outer, inner = saga_with_drafts(tmp_path)
    async with lsp_session([keep, outer, inner], OPTIONS) as client:
        await wait_for_index(client, runs=2)
        client.workspace_did_change_workspace_folders(folders_change([], [outer, inner]))
        st = await wait_for_status(client, lambda s: s["workspaceFolder"] == keep.as_uri() and "folders" not in s)
        assert st["totalFiles"] == 1
        await asyncio.sleep(0.5)  # an index run wrongly started for the nested folder would fail by now
        assert not (inner / ".saipling").exists()
        assert [m for m in client.messages if m.type == types.MessageType.Error] == []


async def test_a_home_folder_opened_as_a_workspace_folder_is_not_indexed(tmp_path: Path) -> None:
    home = write_project(tmp_path / "home", B)
    project = write_project(tmp_path / "novel", A)
    async with lsp_session([home, project], OPTIONS, env={"HOME": str(home)}) as client:
        await wait_for_index(client)
        shown = [m.message for m in client.messages if m.type == types.MessageType.Error]
        assert any("not indexed" in m and "is your home folder" in m for m in shown), shown
        assert (project / ".saipling").is_dir() and not (home / ".saipling").exists()
        found = await request(client, "saipling/search", {"query": "dragon", "mode": "lexical"})
        assert {r["filePath"] for r in found["results"]} == {"saga.md"}  # the project is served, home is not


async def test_a_folder_removed_by_another_spelling_of_its_uri_is_closed(tmp_path: Path) -> None:
    """The editor may spell a folder's URI another way when it removes it (a trailing `/`, a character
    percent-encoded, lower-case escapes): the folder stayed open and indexed (attacker pass 7)."""
    keep = write_project(tmp_path / "keep", B)
    accented = write_project(tmp_path / "b é", A)  # as_uri: .../b%20%C3%A9
    plain = write_project(tmp_path / "cc", {"c.md": "# C\n\nA dragon.\n"})
    nested = write_project(keep / "inner", {"i.md": "# I\n\nAn inner dragon.\n"})
    async with lsp_session([keep, accented, plain, nested], OPTIONS) as client:
        await wait_for_index(client, runs=3)
        removed = [
            types.WorkspaceFolder(uri=accented.as_uri().replace("%C3%A9", "%c3%a9") + "/", name="b é"),
            types.WorkspaceFolder(uri=plain.as_uri()[:-1] + "%63", name="cc"),  # cc spelt c%63
            types.WorkspaceFolder(uri=nested.as_uri() + "/", name="inner"),  # (served by keep's index)
        ]
        change = types.WorkspaceFoldersChangeEvent(added=[], removed=removed)
        client.workspace_did_change_workspace_folders(types.DidChangeWorkspaceFoldersParams(change))
        st = await wait_for_status(client, lambda s: s["workspaceFolder"] == keep.as_uri() and "folders" not in s)
        assert st["totalFiles"] == 2
        with pytest.raises(JsonRpcException):  # the nested folder is gone too
            await request(client, "saipling/search", {"query": "dragon", "workspaceFolder": "inner"})


async def test_a_name_two_folders_share_is_refused_naming_both(tmp_path: Path) -> None:
    """`workspaceFolder: "proj"` with /x/proj and /y/proj open searched both; it names both and asks for the
    URI, which picks one (attacker pass 7)."""
    x = write_project(tmp_path / "x" / "proj", A)
    y = write_project(tmp_path / "y" / "proj", B)
    async with lsp_session([x, y], OPTIONS) as client:
        await wait_for_index(client, runs=2)
        with pytest.raises(JsonRpcException) as info:
            await request(client, "saipling/search", {"query": "dragon", "workspaceFolder": "proj"})
        assert info.value.code == -32602
        assert x.as_uri() in info.value.message and y.as_uri() in info.value.message
        found = await request(client, "saipling/search", {"query": "dragon", "workspaceFolder": y.as_uri()})
        assert [r["filePath"] for r in found["results"]] == ["notes.md"]

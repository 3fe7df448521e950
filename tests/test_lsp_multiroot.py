"""Multi-root workspaces: one index per folder; results, status and symbols say which folder."""

from __future__ import annotations

from pathlib import Path

from lsprotocol import types

from lsp_client import did_save, folder, lsp_session, request, status, wait_for_index, write_project

A = {
    "saga.md": "# Saga\n\nThe dragon of the north sleeps under ice.\n",
    "hero.md": "---\nname: Brenna\ntype: character\n---\n# Brenna\n\nA smith.\n",
}
B = {"notes.md": "# Notes\n\nA dragon kite over the harbour.\n"}


async def test_one_index_per_folder_and_results_name_their_folder(tmp_path: Path) -> None:
    a, b = write_project(tmp_path / "a", A), write_project(tmp_path / "b", B)
    async with lsp_session([a, b], {"provider": "none", "tickSeconds": 3600, "watch": False}) as client:
        await wait_for_index(client, runs=2)
        assert (a / ".saipling" / "index.db").is_file() and (b / ".saipling" / "index.db").is_file()

        found = await request(client, "saipling/search", {"query": "dragon"})
        assert {(r["workspaceFolder"], r["filePath"]) for r in found["results"]} == {
            (a.as_uri(), "saga.md"),
            (b.as_uri(), "notes.md"),
        }
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


async def test_a_nested_folder_is_searched_through_the_enclosing_index_not_indexed_twice(
    tmp_path: Path,
) -> None:
    outer = write_project(tmp_path / "saga", A)
    inner = write_project(outer / "drafts", {"draft.md": "# Draft\n\nThe dragon wakes in the last draft.\n"})
    # the nested folder listed first: the outer one must still be opened first
    async with lsp_session(
        [inner, outer], {"provider": "none", "tickSeconds": 3600, "watch": False}
    ) as client:
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
        change = types.WorkspaceFoldersChangeEvent(added=[], removed=[folder(outer)])
        client.workspace_did_change_workspace_folders(types.DidChangeWorkspaceFoldersParams(change))
        await wait_for_index(client, runs=2)
        found = await request(client, "saipling/search", {"query": "dragon"})
        assert [(r["workspaceFolder"], r["filePath"]) for r in found["results"]] == [
            (inner.as_uri(), "draft.md")
        ]

        # and the enclosing folder added again takes it over
        change = types.WorkspaceFoldersChangeEvent(added=[folder(outer)], removed=[])
        client.workspace_did_change_workspace_folders(types.DidChangeWorkspaceFoldersParams(change))
        await wait_for_index(client, runs=3)
        st = await status(client)
        assert st["workspaceFolder"] == outer.as_uri() and "folders" not in st and st["totalFiles"] == 3

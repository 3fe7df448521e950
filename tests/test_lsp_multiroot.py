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

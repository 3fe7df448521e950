"""initialize -> `$/progress` for the initial index -> status, search with ranges, reindex, clear, shutdown."""

from __future__ import annotations

from pathlib import Path

from lsprotocol import types

from lsp_client import STORY, ended_tokens, lsp_session, request, status, wait_for_index, write_project


async def test_initial_index_progress_then_search_and_status(tmp_path: Path) -> None:
    root = write_project(tmp_path / "story", STORY)
    async with lsp_session(root) as client:
        await wait_for_index(client)
        (token,) = ended_tokens(client)
        kinds = [r.kind for r in client.progress_reports[token]]
        assert kinds[0] == "begin" and kinds[-1] == "end" and "report" in kinds
        begin = client.progress_reports[token][0]
        assert begin.title == "Indexing" and begin.cancellable
        reports = [r for r in client.progress_reports[token] if r.kind == "report"]
        assert any(r.message and ".md" in r.message for r in reports)
        assert all(0 <= (r.percentage or 0) <= 100 for r in reports)

        st = await status(client)
        assert st["totalFiles"] == 4 and st["isIndexing"] is False and st["lastIndexed"]
        assert st["root"] == str(root.resolve()) and st["workspaceFolder"] == root.as_uri()
        assert st["provider"] == "none" and st["degraded"]

        found = await request(client, "saipling/search", {"query": "dragon mountain"})
        assert found["results"] and found["indexing"] is False
        top = found["results"][0]
        assert top["filePath"] == "chapters/ch01.md" and top["workspaceFolder"] == root.as_uri()
        assert top["range"]["start"]["line"] == top["startLine"] - 1
        assert top["uri"].endswith("chapters/ch01.md")


async def test_reindex_reports_progress_and_clear_empties(tmp_path: Path) -> None:
    root = write_project(tmp_path / "story", STORY)
    async with lsp_session(root) as client:
        await wait_for_index(client)
        (root / "notes" / "new.md").write_text("# New\n\nA brand new lantern.\n", encoding="utf-8")
        assert await request(client, "saipling/reindex", {"full": True}) == {"started": True}
        await wait_for_index(client, runs=2)
        assert (await status(client))["totalFiles"] == 5

        assert await request(client, "saipling/clearIndex", {}) == {"cleared": True}
        assert (await status(client))["totalFiles"] == 0

        cmd = types.ExecuteCommandParams(command="saipling.reindex", arguments=[{"paths": ["notes/new.md"]}])
        assert await client.workspace_execute_command_async(cmd) == {"started": True}
        await wait_for_index(client, runs=3)
        cmd = types.ExecuteCommandParams(command="saipling.status")
        st = await client.workspace_execute_command_async(cmd)
        assert st["totalFiles"] == 1 and st["indexPasses"] == 3


async def test_registers_watched_files_and_advertises_file_operations(tmp_path: Path) -> None:
    root = write_project(tmp_path / "story", STORY)
    async with lsp_session(root) as client:
        await wait_for_index(client)
        (reg,) = client.registrations
        assert reg.method == types.WORKSPACE_DID_CHANGE_WATCHED_FILES
        assert [w["globPattern"] for w in reg.register_options["watchers"]] == ["**/*.md"]
        caps = client.init_result.capabilities
        ops = caps.workspace.file_operations
        for op in (ops.did_create, ops.did_rename, ops.did_delete):
            assert [f.pattern.glob for f in op.filters] == ["**/*.md", "**/*"]
        assert caps.text_document_sync.save is not None and caps.workspace_symbol_provider
        assert set(caps.execute_command_provider.commands) == {
            "saipling.reindex",
            "saipling.clearIndex",
            "saipling.status",
        }

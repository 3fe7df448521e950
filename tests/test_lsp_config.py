"""Configuration (SPEC 11): workspace/configuration over initializationOptions, warnings shown once,
didChangeConfiguration re-read; a provider or model change reopens the provider and rebuilds vectors."""

# ruff: noqa: F811  (fixture imported, then requested as a parameter)
from __future__ import annotations

from pathlib import Path

from lsprotocol import types

from apiserver import FakeEmbeddingAPI, api_server  # noqa: F401  (fixture)
from lsp_client import STORY, lsp_session, request, status, wait_for_index, write_project


async def test_workspace_configuration_wins_and_bad_keys_are_shown_once(tmp_path: Path) -> None:
    root = write_project(tmp_path / "story", STORY)
    init = {"provider": "none", "maxResultsDefault": 4, "bogusKey": 1}
    async with lsp_session(root, init, configuration={"maxResultsDefault": 2, "tickSeconds": 3600}) as client:
        await wait_for_index(client)
        found = await request(client, "saipling/search", {"query": "the"})
        assert len(found["results"]) == 2
        (message,) = client.messages
        assert "bogusKey" in message.message and message.type == types.MessageType.Warning
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
        await request(client, "saipling/status", {})
        assert len(client.messages) == 1  # the same warning is not shown again


async def test_provider_and_model_change_rebuild_the_vectors(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    root = write_project(tmp_path / "story", STORY)
    async with lsp_session(root, {"provider": "none", "watch": False}) as client:
        await wait_for_index(client)
        assert (await status(client))["embeddedChunks"] == 0

        async def switch(model: str, runs: int) -> dict:
            client.set_configuration(
                {"provider": "openai", "baseUrl": api_server.url + "/v1", "model": model}, section="saipling"
            )
            client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
            await wait_for_index(client, runs=runs)
            return await status(client)

        st = await switch("fake-a", 2)
        assert st["provider"] == "openai" and st["model"] == "fake-a" and st["indexedWith"] == "fake-a"
        assert st["embeddedChunks"] == st["totalChunks"] > 0 and st["degraded"] is None
        found = await request(client, "saipling/search", {"query": "who fears the dragon?"})
        assert any("vector" in r["matchedBy"] for r in found["results"])

        st = await switch("fake-b", 3)
        assert st["model"] == "fake-b" and st["indexedWith"] == "fake-b"
        assert st["embeddedChunks"] == st["totalChunks"]
        models = {r.body["model"] for r in api_server.requests}
        assert models == {"fake-a", "fake-b"}


async def test_list_settings_take_text_only_and_a_role_a_list_of_levels(tmp_path: Path) -> None:
    """`include: [1, 2]` became the patterns "1" and "2": every file left the index and nothing said why; `roles:
    {author: "private"}` gave the author the levels p, r, i, v, a, t, e (not public: every search came back empty).
    Now what is not text is told and left out: include keeps its default, the role sees public only
    (attacker pass 7)."""
    files = {**STORY, "notes/secret.md": "---\nvisibility: private\n---\n# Secret\n\nThe dragon is my uncle.\n"}
    root = write_project(tmp_path / "story", files)
    async with lsp_session(root, {"provider": "none", "watch": False}) as client:
        await wait_for_index(client)
        before = (await status(client))["totalFiles"]
        client.set_configuration(
            {
                "include": [1, 2],
                "exclude": ["notes/ideas.md", None],
                "defaultRole": "author",
                "roles": {"author": "private"},
            },
            section="saipling",
        )
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
        await wait_for_index(client, runs=2)
        shown = " | ".join(m.message for m in client.messages)
        assert "include: expected a list of text, got 1, 2; ignored" in shown, shown
        assert "exclude: expected a list of text, got None; left out" in shown, shown
        assert "author = 'private'" in shown and "sees public only" in shown, shown
        assert (await status(client))["totalFiles"] == before - 1  # (ideas.md excluded, the rest kept)
        found = await request(client, "saipling/search", {"query": "dragon"})
        paths = {r["filePath"] for r in found["results"]}
        assert "chapters/ch01.md" in paths and "notes/secret.md" not in paths


async def test_unchanged_settings_do_not_restart_the_first_index(tmp_path: Path) -> None:
    """VS Code's client sends `didChangeConfiguration` right after `initialized` with the settings the server just
    read: that cancelled the first index run and started it again ("Indexing: cancelled ... left: 40 files to read",
    then "Reindexing"; the status bar went 0..97% and back to 13%). Settings that did not change leave it running."""
    files = {**STORY, **{f"notes/n{i}.md": f"# Note {i}\n\nThe ferry leaves at {i} o'clock.\n" for i in range(40)}}
    root = write_project(tmp_path / "story", files)
    configuration = {"provider": "none", "watch": False}
    async with lsp_session(root, configuration, configuration=configuration) as client:
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
        await wait_for_index(client)
        await request(client, "saipling/status", {})
        ends = [r.message or "" for reports in client.progress_reports.values() for r in reports if r.kind == "end"]
        assert len(ends) == 1 and "cancelled" not in ends[0], ends
        assert (await status(client))["totalFiles"] == len(files)

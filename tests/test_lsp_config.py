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

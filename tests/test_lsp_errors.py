"""Bad input never kills the server: InvalidParams naming the field, MethodNotFound, a 401 told once."""

# ruff: noqa: F811  (fixture imported, then requested as a parameter)
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from apiserver import FakeEmbeddingAPI, api_server  # noqa: F401  (fixture)
from lsp_client import (
    STORY,
    fake_api_options,
    lsp_session,
    raw_request,
    request,
    status,
    wait_for_index,
    wait_until,
    write_project,
)

INVALID_PARAMS, METHOD_NOT_FOUND = -32602, -32601

WRONG_TYPES: list[tuple[str, Any, str]] = [
    ("saipling/search", {"query": 5}, "query"),
    ("saipling/search", {"query": "x", "maxResults": "3"}, "maxResults"),
    ("saipling/search", {"query": "x", "minScore": True}, "minScore"),
    (
        "saipling/search",
        {"query": "x", "filter": {"bookID": "book-01"}},
        "filter.bookID",
    ),  # a misspelt filter
    ("saipling/search", {"query": "x", "filter": {"entityTypes": "character"}}, "filter.entityTypes"),
    ("saipling/search", {"query": "x", "filter": {"maxChapter": "3"}}, "filter.maxChapter"),
    ("saipling/search", ["dragon"], "params"),
    ("saipling/enrichContext", {"query": "x", "loadedFiles": "a.md"}, "loadedFiles"),
    ("saipling/enrichContext", {"query": "x", "wantSearch": "yes"}, "wantSearch"),
    ("saipling/related", {"path": 3}, "path"),
    ("saipling/get", {"path": "notes/ideas.md", "startLine": "1"}, "startLine"),
    ("saipling/status", {"workspaceFolder": 1}, "workspaceFolder"),
    ("saipling/reindex", {"full": "yes"}, "full"),
    ("saipling/reindex", {"paths": ["a.md", 7]}, "paths[1]"),
    ("saipling/clearIndex", {"workspaceFolder": []}, "workspaceFolder"),
    ("workspace/symbol", {"query": 5}, "query"),
    # values the engine rejects come back the same way
    ("saipling/search", {"query": ""}, "query"),
    ("saipling/search", {"query": "x", "maxResults": 1000}, "maxResults"),
    ("saipling/search", {"query": "x", "mode": "psychic"}, "mode"),
    ("saipling/get", {"path": "../../etc/passwd"}, "path"),
    ("saipling/related", {"path": "x", "maxResults": 0}, "maxResults"),
    ("saipling/reindex", {"paths": ["/somewhere/else.md"]}, "paths[0]"),
    (
        "saipling/reindex",
        {"paths": ["a.md", "notes/../../else.md"]},
        "paths[1]",
    ),  # was accepted, then ignored
    ("saipling/status", {"workspaceFolder": "file:///not/open"}, "workspaceFolder"),
]


async def expect_error(coro, code: int) -> JsonRpcException:
    with pytest.raises(JsonRpcException) as info:
        await coro
    assert info.value.code == code, info.value.message
    return info.value


async def test_invalid_params_name_the_field_and_unknown_methods_are_not_found(tmp_path: Path) -> None:
    root = write_project(tmp_path / "story", STORY)
    async with lsp_session(root) as client:
        await wait_for_index(client)
        for method, params, field in WRONG_TYPES:
            err = await expect_error(raw_request(client, method, params), INVALID_PARAMS)
            assert field in err.message, (method, params, err.message)

        cmd = types.ExecuteCommandParams(command="saipling.reindex", arguments=[{"full": "yes"}])
        err = await expect_error(client.workspace_execute_command_async(cmd), INVALID_PARAMS)
        assert "full" in err.message
        cmd = types.ExecuteCommandParams(command="saipling.nothing")
        await expect_error(client.workspace_execute_command_async(cmd), INVALID_PARAMS)
        await expect_error(request(client, "saipling/nope", {}), METHOD_NOT_FOUND)
        await expect_error(request(client, "saipling/_test/nope", {}), METHOD_NOT_FOUND)

        st = await status(client)  # still alive, nothing shown to the user
        assert st["totalFiles"] == 4 and client.messages == []


async def test_provider_401_is_shown_once_and_search_falls_back_to_keywords(
    tmp_path: Path, api_server: FakeEmbeddingAPI
) -> None:
    root = write_project(tmp_path / "story", STORY)
    api_server.require_key("sk-good")
    # (the local model standing in: tests/test_lsp_live.py)
    options = fake_api_options(api_server, openaiApiKey="sk-bad", fallback="none")
    async with lsp_session(root, options) as client:
        await wait_for_index(client)
        (message,) = await wait_until(lambda: client.messages)
        assert message.type == types.MessageType.Error and "keyword search only" in message.message
        assert "sk-bad" not in message.message

        found = await request(client, "saipling/search", {"query": "where does the dragon sleep?"})
        assert found["degraded"] and found["results"]
        assert all(r["matchedBy"] == ["keyword"] for r in found["results"])
        assert await request(client, "saipling/reindex", {"full": True}) == {"started": True}
        await wait_for_index(client, runs=2)
        await request(client, "saipling/search", {"query": "bell"})
        st = await status(client)
        assert st["degraded"] and st["totalFiles"] == 4
        assert len(client.messages) == 1  # once per cause, however often it happens
        assert all(r.response_status == 401 for r in api_server.requests)


async def test_corrupted_index_is_rebuilt_and_the_user_told_once(tmp_path: Path) -> None:
    root = write_project(tmp_path / "story", STORY)
    (root / ".saipling").mkdir()
    (root / ".saipling" / "index.db").write_bytes(b"this is not a database" * 100)
    async with lsp_session(root) as client:
        await wait_for_index(client)
        (message,) = client.messages
        assert "corrupt" in message.message and "rebuilt" in message.message
        assert (await status(client))["totalFiles"] == 4
        assert any(p.name.startswith("index.db.corrupt-") for p in (root / ".saipling").iterdir())


async def test_embeddings_that_failed_are_retried_with_backoff_without_a_save(
    tmp_path: Path, api_server: FakeEmbeddingAPI
) -> None:
    root = write_project(tmp_path / "story", STORY)
    api_server.fail(503, times=1000)  # the provider is down
    options = fake_api_options(api_server, openaiApiKey="sk-test", maxRetries=0, tickSeconds=3600, fallback="none")
    async with lsp_session(root, options) as client:
        await wait_for_index(client)
        st = await status(client)
        assert st["degraded"] and st["embeddedChunks"] == 0 and st["totalChunks"] > 0

        async def tick() -> dict[str, Any]:
            return (await request(client, "saipling/_test/tick", {}))["folders"][0]

        assert (await tick())["retried"] is False  # not before the delay
        await request(client, "saipling/_test/advanceClock", {"seconds": 61})
        assert (await tick())["retried"] is True  # the provider is still down: the delay doubles
        assert (await status(client))["embeddedChunks"] == 0
        await request(client, "saipling/_test/advanceClock", {"seconds": 61})
        assert (await tick())["retried"] is False
        await request(client, "saipling/_test/advanceClock", {"seconds": 60})
        api_server.reset()  # the provider is back
        assert (await tick())["retried"] is True  # every chunk gets its vector, and no file was saved
        st = await status(client)
        assert st["embeddedChunks"] == st["totalChunks"] and not st["degraded"]
        await request(client, "saipling/_test/advanceClock", {"seconds": 3600})
        assert (await tick())["retried"] is False  # nothing left to retry

"""Shared helpers for the end-to-end LSP tests: a pytest-lsp client driving the real `saipling serve`.

    async with lsp_session(tmp_path, {"provider": "none"}) as client:
        await wait_for_index(client)
        result = await request(client, "saipling/search", {"query": "dragon"})

The server runs as `python -m saipling serve` with SAIPLING_TEST_CLOCK=1 (test-only clock requests) and
an environment cleared of API keys and SAIPLING_* settings, so runs are deterministic. Results of custom
requests come back as plain JSON (dicts), not pygls namedtuples.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.protocol import JsonRPCResponseMessage, default_converter
from pytest_lsp import LanguageClient
from pytest_lsp.client import register_lsp_features

SERVER_COMMAND = [sys.executable, "-m", "saipling", "serve"]

CAPABILITIES = types.ClientCapabilities(
    window=types.WindowClientCapabilities(work_done_progress=True),
    workspace=types.WorkspaceClientCapabilities(
        configuration=True,
        workspace_folders=True,
        did_change_watched_files=types.DidChangeWatchedFilesClientCapabilities(dynamic_registration=True),
        file_operations=types.FileOperationClientCapabilities(did_create=True, did_rename=True, did_delete=True),
    ),
    text_document=types.TextDocumentClientCapabilities(
        synchronization=types.TextDocumentSyncClientCapabilities(did_save=True)
    ),
)


def server_env(**extra: str) -> dict[str, str]:
    drop = ("SAIPLING_", "VOYAGE_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update({"SAIPLING_TEST_CLOCK": "1", "SAIPLING_LOG_LEVEL": "WARNING", **extra})
    return env


def fake_api_options(api: Any, **extra: Any) -> dict[str, Any]:
    """Client settings (camelCase) for the OpenAI-compatible provider pointed at tests/apiserver.py."""
    return {"provider": "openai", "baseUrl": api.url + "/v1", "model": "fake-embed", **extra}


def _raw_results_converter():
    """pygls turns untyped results into namedtuples; keep them as JSON dicts instead."""
    converter = default_converter()
    converter.register_structure_hook(JsonRPCResponseMessage, lambda obj, cls: cls(**obj))
    return converter


def make_client() -> LanguageClient:
    client = LanguageClient(converter_factory=_raw_results_converter)
    register_lsp_features(client)
    client.registrations: list[types.Registration] = []  # type: ignore[misc]

    @client.feature(types.CLIENT_REGISTER_CAPABILITY)
    def register_capability(params: types.RegistrationParams) -> None:
        client.registrations.extend(params.registrations)  # type: ignore[attr-defined]

    @client.feature(types.CLIENT_UNREGISTER_CAPABILITY)
    def unregister_capability(params: types.UnregistrationParams) -> None:
        return None

    # window/showMessageRequest: recorded, and answered with the action titled `client.message_answer` (None:
    # dismissed, as when the user closes the notification)
    client.message_requests: list[types.ShowMessageRequestParams] = []  # type: ignore[misc]
    client.message_answer: str | None = None  # type: ignore[misc]

    @client.feature(types.WINDOW_SHOW_MESSAGE_REQUEST)
    def show_message_request(params: types.ShowMessageRequestParams) -> types.MessageActionItem | None:
        client.message_requests.append(params)  # type: ignore[attr-defined]
        answer = client.message_answer  # type: ignore[attr-defined]
        return types.MessageActionItem(title=answer) if answer else None

    return client


def folder(path: Path, name: str | None = None) -> types.WorkspaceFolder:
    return types.WorkspaceFolder(uri=path.as_uri(), name=name or path.name)


@contextlib.asynccontextmanager
async def lsp_session(
    roots: Path | Iterable[Path],
    init_options: dict[str, Any] | None = None,
    *,
    capabilities: types.ClientCapabilities = CAPABILITIES,
    configuration: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
) -> AsyncIterator[LanguageClient]:
    """A started, initialized client talking to a fresh `saipling serve`; shut down cleanly after."""
    roots = [roots] if isinstance(roots, Path) else list(roots)
    client = make_client()
    if configuration is not None:
        client.set_configuration(configuration, section="saipling")
    await client.start_io(*SERVER_COMMAND, env=server_env(**(env or {})))
    try:
        client.init_result = await client.initialize_session(
            types.InitializeParams(
                capabilities=capabilities,
                root_uri=roots[0].as_uri(),
                workspace_folders=[folder(r) for r in roots],
                initialization_options=init_options or {"provider": "none"},
            )
        )
        yield client
        await asyncio.wait_for(client.shutdown_session(), 30)
    finally:
        await _stop(client)


async def _stop(client: LanguageClient) -> None:
    """Stop the client; a server still running (a test failed mid-session) is killed, never waited on."""
    server = client._server
    if server is not None and server.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            server.kill()
    await asyncio.wait_for(client.stop(), 15)


async def request(client: LanguageClient, method: str, params: Any = None, timeout: float = 30.0) -> Any:
    return await asyncio.wait_for(client.protocol.send_request_async(method, params), timeout)


async def advance(client: LanguageClient, seconds: float) -> None:
    """Move the server's sync clock forward (SAIPLING_TEST_CLOCK=1: quiet periods pass at once)."""
    await request(client, "saipling/_test/advanceClock", {"seconds": seconds})


async def tick(client: LanguageClient) -> dict[str, Any]:
    """One sync tick now, for a server with one folder: what it did there."""
    (folder,) = (await request(client, "saipling/_test/tick", {}))["folders"]
    return folder


async def wait_until(predicate: Callable[[], Any], timeout: float = 20.0, interval: float = 0.05) -> Any:
    """Poll `predicate` (sync) until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        if value := predicate():
            return value
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        await asyncio.sleep(interval)


def ended_tokens(client: LanguageClient) -> list[Any]:
    return [t for t, reports in client.progress_reports.items() if any(r.kind == "end" for r in reports)]


async def wait_for_index(client: LanguageClient, runs: int = 1, timeout: float = 30.0) -> None:
    """Wait until `runs` index runs reported `$/progress` end."""
    await wait_until(lambda: len(ended_tokens(client)) >= runs, timeout)


async def status(client: LanguageClient, **params: Any) -> dict[str, Any]:
    return await request(client, "saipling/status", params)


async def wait_for_status(
    client: LanguageClient, predicate: Callable[[dict[str, Any]], bool], timeout: float = 20.0
) -> dict[str, Any]:
    """Poll saipling/status until `predicate(status)` holds; returns that status."""
    deadline = time.monotonic() + timeout
    while True:
        st = await status(client)
        if predicate(st):
            return st
        if time.monotonic() > deadline:
            raise TimeoutError(f"status never matched: {st}")
        await asyncio.sleep(0.05)


def write_project(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


STORY = {
    "characters/alice.md": "---\nname: Alice Marsh\naliases: [Ally, The Cartographer]\ntype: character\n---\n"
    "# Alice Marsh\n\nAlice maps the northern marshes and fears the dragon.\n\n## Childhood\n\nShe grew up in "
    "Fenwick.\n",
    "places/fenwick.md": "---\nname: Fenwick\ntype: place\n---\n# Fenwick\n\nA fishing village on stilts above the "
    "marsh.\n",
    "chapters/ch01.md": "# Chapter 1: The Dragon Wakes\n\nThe dragon woke beneath the mountain and the village "
    "trembled.\n\n"
    "## The Bell\n\nThe old bell of Fenwick rang three times.\n",
    "notes/ideas.md": "# Ideas\n\nA lighthouse keeper who collects lost letters.\n",
}


def did_save(client: LanguageClient, path: Path) -> None:
    client.text_document_did_save(types.DidSaveTextDocumentParams(types.TextDocumentIdentifier(path.as_uri())))


async def search_paths(client: LanguageClient, query: str, **params: Any) -> list[str]:
    """File paths of a saipling/search, best first, without repeats."""
    found = await request(client, "saipling/search", {"query": query, **params})
    return list(dict.fromkeys(r["filePath"] for r in found["results"]))


async def raw_request(client: LanguageClient, method: str, params: Any, timeout: float = 30.0) -> Any:
    """Send params exactly as given (even ones lsprotocol could not serialize for a typed method)."""
    msg_id = f"raw-{uuid.uuid4()}"
    future: Future[Any] = Future()
    client.protocol._request_futures[msg_id] = future
    client.protocol._send_data({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
    return await asyncio.wait_for(asyncio.wrap_future(future), timeout)

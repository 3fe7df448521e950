"""The live index end to end (issue 14) on the real `saipling serve` with the injected clock: a save makes the
text, keywords and line ranges current at once while embedding waits for the quiet period; cancel, pause and
resume; the cost question of a paid provider; the local model standing in for an unusable API provider.

Embeddings go to the real local OpenAI/Voyage-compatible test server (tests/apiserver.py), which records every
request, so "exactly one embedding request" is counted at the HTTP level.
"""

# ruff: noqa: F811  (fixture imported, then requested as a parameter)
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types

from apiserver import FakeEmbeddingAPI, api_server  # noqa: F401  (fixture)
from lsp_client import (
    advance,
    did_save,
    ended_tokens,
    fake_api_options,
    lsp_session,
    request,
    status,
    tick,
    wait_for_index,
    wait_for_status,
    wait_until,
    write_project,
)

QUIET = 120.0
PASSAGE = "The harbourmaster counted seven lanterns drifting past the breakwater at midnight."


def api_options(api: FakeEmbeddingAPI, **extra: Any) -> dict[str, Any]:
    """Passes run only on `saipling/_test/tick`, after the quiet period; no watcher."""
    return fake_api_options(
        api, **{"quietPeriodSeconds": QUIET, "tickSeconds": 3600, "watch": False, "fallback": "none", **extra}
    )


def chapter(inserted: int = 0, extra: str = "") -> str:
    scenes = [f"## Scene {i}\n\nScene {i}: the tide turns slowly over the sand bar." for i in range(4)]
    scenes.insert(2, "## The Lanterns\n\n" + PASSAGE)
    top = "".join(f"A new line {n} written at the top.\n" for n in range(inserted))
    return "# Chapter Nine\n\n" + top + extra + "\n\n".join(scenes) + "\n"


def text_at(root: Path, hit: dict[str, Any]) -> str:
    """The file's text now in the hit's LSP range (0-based lines, end exclusive): what Enter would show."""
    lines = (root / hit["filePath"]).read_text(encoding="utf-8").split("\n")
    return "\n".join(lines[hit["range"]["start"]["line"] : hit["range"]["end"]["line"]])


def requests_with(api: FakeEmbeddingAPI, word: str, since: int = 0) -> list[Any]:
    return [r for r in api.requests[since:] if any(word in t for t in (r.body or {}).get("input") or [])]


async def search(client, query: str, **params: Any) -> list[dict[str, Any]]:
    return (await request(client, "saipling/search", {"query": query, **params}))["results"]


async def test_a_save_is_searchable_at_once_and_embedded_once_when_quiet(
    tmp_path: Path, api_server: FakeEmbeddingAPI
) -> None:
    root = write_project(tmp_path / "p", {"ch09.md": chapter(), "other.md": "# Other\n\nA field of barley.\n"})
    async with lsp_session(root, api_options(api_server)) as client:
        await wait_for_index(client)
        (old,) = await search(client, "harbourmaster lanterns breakwater", mode="lexical", maxResults=1)
        sent = len(api_server.requests)

        (root / "ch09.md").write_text(chapter(inserted=7, extra="Zeppelins hummed overhead.\n"), encoding="utf-8")
        did_save(client, root / "ch09.md")
        t0 = time.monotonic()  # no clock advance, no waiting: the very next requests see the saved text
        (hit,) = await search(client, "harbourmaster lanterns breakwater", mode="lexical", maxResults=1)
        assert hit["startLine"] == old["startLine"] + 8  # 8 lines inserted above: the range moved ...
        assert PASSAGE in text_at(root, hit)  # ... and the text there is the passage
        found = await request(client, "saipling/search", {"query": "zeppelins", "maxResults": 10})
        hits = found["results"]
        assert hits[0]["filePath"] == "ch09.md" and "Zeppelins" in text_at(root, hits[0])  # first, though new
        assert hits[0]["matchedBy"] == ["keyword"] and hits[0]["embeddingPending"]  # by keywords, and says so
        # the server embeds them when quiet: no "run saipling index" advice
        assert "once they have been quiet" in found["degraded"] and "saipling index" not in found["degraded"]
        always = {"enabled": True, "mode": "always"}  # (the query is the section's heading: it comes first
        enriched = await request(client, "saipling/enrichContext", {"query": "The Lanterns", "skillConfig": always})
        assert PASSAGE in enriched["contextBlock"]  # whatever the fake vectors say about the other passages)
        (passage,) = [r for r in enriched["searchResults"] if r["filePath"] == "ch09.md"][:1]
        assert passage["startLine"] == hit["startLine"]
        print(f"save -> search, enrichContext answered in {time.monotonic() - t0:.3f} s")  # (not asserted)

        st = await status(client)
        assert st["pendingFiles"] == 1 and st["unembeddedChunks"] > 0
        assert not requests_with(api_server, "hummed", sent)  # nothing embedded during the quiet period
        await advance(client, QUIET)
        done = await tick(client)
        assert done["paths"] == 1 and done["ran"]
        assert len(requests_with(api_server, "hummed", sent)) == 1  # exactly one embedding request
        st = await status(client)
        assert (st["pendingFiles"], st["unembeddedChunks"]) == (0, 0)
        hits = await search(client, "zeppelins", maxResults=10)
        embedded = next(r for r in hits if "Zeppelins" in text_at(root, r))
        assert "embeddingPending" not in embedded

        did_save(client, root / "ch09.md")  # saved again unchanged: nothing to embed, so nothing pending
        await wait_for_status(client, lambda s: s["pendingFiles"] == 0 and s["unembeddedChunks"] == 0)
        await advance(client, QUIET)
        await tick(client)
        assert len(requests_with(api_server, "hummed", sent)) == 1  # still one request


async def test_cancel_mid_index_shows_what_is_left_and_resume_finishes_it(
    tmp_path: Path, api_server: FakeEmbeddingAPI
) -> None:
    files = {f"ch/{i:02}.md": f"# Chapter {i}\n\nWord{i} by the harbour wall.\n" for i in range(40)}
    root = write_project(tmp_path / "p", files)
    api_server.slow(3.0)  # the first embedding request: long enough to cancel the run meanwhile
    async with lsp_session(root, api_options(api_server, batchSize=8, dimensions=16)) as client:
        token = await wait_until(lambda: next(iter(client.progress_reports), None))
        await wait_until(lambda: api_server.count > 0)
        client.window_work_done_progress_cancel(types.WorkDoneProgressCancelParams(token=token))
        await wait_for_index(client)
        assert "cancelled" in client.progress_reports[token][-1].message
        st = await status(client)
        assert st["totalFiles"] == 40 and not st["isIndexing"]  # keywords first: every file searchable ...
        assert st["pendingFiles"] == 0
        assert st["unembeddedChunks"] > 0 and st["indexPhase"] == "idle"  # ... and the rest is said to be left
        assert "left:" in client.progress_reports[token][-1].message

        assert await request(client, "saipling/resumeIndexing", {}) == {"resumed": True}
        await wait_for_index(client, runs=2)
        st = await status(client)
        assert st["unembeddedChunks"] == 0 and st["embeddedChunks"] == st["totalChunks"]


async def test_pause_keeps_saves_searchable_and_resume_embeds(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    root = write_project(tmp_path / "p", {"ch09.md": chapter(), "other.md": "# Other\n\nA field of barley.\n"})
    async with lsp_session(root, api_options(api_server)) as client:
        await wait_for_index(client)
        assert await request(client, "saipling/pauseIndexing", {}) == {"paused": True}
        sent = len(api_server.requests)
        (root / "other.md").write_text("# Other\n\nA field of barley and a quokka.\n", encoding="utf-8")
        did_save(client, root / "other.md")
        assert [r["filePath"] for r in await search(client, "quokka", mode="lexical")] == ["other.md"]
        await advance(client, QUIET)
        assert (await tick(client))["ran"]  # the quiet period's pass runs, but embeds nothing while paused
        st = await status(client)
        assert st["paused"] and st["indexPhase"] == "paused" and st["pauseReason"]
        assert st["unembeddedChunks"] == 1 and not requests_with(api_server, "quokka", sent)

        assert await request(client, "saipling/resumeIndexing", {}) == {"resumed": True}
        await wait_for_status(client, lambda s: s["unembeddedChunks"] == 0 and not s["isIndexing"])
        st = await status(client)
        assert not st["paused"] and st["pauseReason"] is None
        assert len(requests_with(api_server, "quokka", sent)) == 1


async def test_a_paid_provider_asks_before_embedding(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    root = write_project(tmp_path / "p", {"ch09.md": chapter(), "other.md": "# Other\n\nA field of barley.\n"})
    options = {
        "provider": "voyage",
        "baseUrl": api_server.url,
        "voyageApiKey": "vk-test",
        "tickSeconds": 3600,
        "watch": False,
        "confirmCostAboveUsd": 0,
    }
    async with lsp_session(root, options) as client:
        client.message_answer = "Not now"  # type: ignore[attr-defined]
        await wait_for_index(client)
        (asked,) = client.message_requests  # type: ignore[attr-defined]
        assert asked.message.startswith("saipling: index 2 files of p for about $0.00 (voyage/voyage-4)?")
        assert [a.title for a in asked.actions] == ["Index", "Not now"]
        assert api_server.count == 0  # no money spent ...
        assert [r["filePath"] for r in await search(client, "harbourmaster", mode="lexical")] == ["ch09.md"]
        st = await status(client)  # ... and the keyword index is there
        assert st["paused"] and "cost" in st["pauseReason"] and st["unembeddedChunks"] == st["totalChunks"]

        await request(client, "saipling/resumeIndexing", {})  # the go-ahead: embeds without asking again
        await wait_for_index(client, runs=2)
        st = await status(client)
        assert st["unembeddedChunks"] == 0 and not st["paused"]
        assert len(client.message_requests) == 1  # type: ignore[attr-defined]


async def test_an_unusable_api_falls_back_to_local_then_switches_back(
    tmp_path: Path, api_server: FakeEmbeddingAPI
) -> None:
    from saipling.embeddings import local_available

    if not local_available():
        pytest.skip("the local model extra is not installed")
    root = write_project(tmp_path / "p", {"ch09.md": chapter(), "other.md": "# Other\n\nA field of barley.\n"})
    api_server.require_key("sk-good")  # 401 for the key the server has
    options = api_options(api_server, fallback="local", openaiApiKey="sk-bad", dimensions=16)
    async with lsp_session(root, options) as client:
        await wait_for_index(client)
        st = await status(client)
        assert st["provider"] == "local" and st["fallbackFrom"]["provider"] == "openai"
        assert "401" in st["fallbackFrom"]["reason"]
        assert st["embeddedChunks"] == st["totalChunks"] > 0
        shown = [m.message for m in client.messages if "cannot be used" in m.message]
        assert len(shown) == 1 and "local model" in shown[0]
        assert await search(client, "lanterns at midnight", mode="semantic")

        api_server.require_key(None)  # the API answers 200 now
        await advance(client, 61)  # the first retry of the API
        done = await tick(client)
        assert done["retried"] and done["ran"]
        st = await status(client)
        assert st["provider"] == "openai" and st["fallbackFrom"] is None and st["dimensions"] == 16
        assert st["embeddedChunks"] == st["totalChunks"] and st["unembeddedChunks"] == 0  # rebuilt, not mixed
        assert any("works again" in m.message for m in client.messages)
        assert len(ended_tokens(client)) >= 1

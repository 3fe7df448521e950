"""`saipling/mentions` and the hover card's mentions line on the real `saipling serve` (issue 35): a saved edit
that adds a mention shows at once; an unknown name is InvalidParams naming `name`."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from fixtures import novel_project
from lsp_client import did_save, lsp_session, request, wait_for_index

SCENE = "books/book-01/phase-1-setup/ch-{:02d}/scene-01.md"


def chapter_counts(reply: dict) -> dict[str, int]:
    (entity,) = reply["entities"]
    return {c["chapter"]: c["count"] for c in entity["chapters"]}


async def test_mentions_request_follows_a_save_and_the_hover_shows_the_line(tmp_path: Path) -> None:
    root = novel_project(tmp_path)
    async with lsp_session(root, {"provider": "none", "watch": False}) as client:
        await wait_for_index(client)
        reply = await request(client, "saipling/mentions", {"name": "Mina"})
        assert chapter_counts(reply) == {"ch-02": 1, "ch-03": 2, "ch-04": 1}
        (entity,) = reply["entities"]
        assert entity["first"] == {"path": SCENE.format(2), "line": 6, "chapter": "ch-02"}
        assert entity["chaptersSinceLastSeen"] == 1

        scene = root / SCENE.format(5)
        scene.write_text("---\npov: Lucy\n---\n# Chapter 5\n\nLucy dreamt of Mina's voice.\n", encoding="utf-8")
        did_save(client, scene)
        t0 = time.monotonic()
        want = {"ch-02": 1, "ch-03": 2, "ch-04": 1, "ch-05": 1}
        while chapter_counts(reply := await request(client, "saipling/mentions", {"name": "Mina Harker"})) != want:
            assert time.monotonic() - t0 < 1.0, chapter_counts(reply)  # the target: within a second
            await asyncio.sleep(0.02)
        (entity,) = reply["entities"]
        assert entity["last"] == {"path": SCENE.format(5), "line": 6, "chapter": "ch-05"}

        hover = await client.text_document_hover_async(
            types.HoverParams(types.TextDocumentIdentifier(scene.as_uri()), types.Position(line=5, character=16))
        )
        assert hover is not None
        assert "first ch-02 l.6 · 5 mentions in 4 chapters · last seen ch-05 (as of chapter 5)" in hover.contents.value
        early = await client.text_document_hover_async(  # in chapter 2, chapters 3-5 are not told
            types.HoverParams(
                types.TextDocumentIdentifier((root / SCENE.format(2)).as_uri()), types.Position(line=5, character=19)
            )
        )
        assert early is not None
        assert "first ch-02 l.6 · 1 mention in 1 chapter · last seen ch-02 (as of chapter 2)" in early.contents.value

        with pytest.raises(JsonRpcException) as info:
            await request(client, "saipling/mentions", {"name": "Lucy"})
        assert "name" in info.value.message and "Lucy" in info.value.message
        with pytest.raises(JsonRpcException) as info:
            await request(client, "saipling/mentions", {"name": "Mina", "limitt": 3})
        assert "limitt" in info.value.message


async def test_names_and_check_passage_requests(tmp_path: Path) -> None:
    root = novel_project(tmp_path)
    (root / SCENE.format(5)).write_text("# Five\n\nMinna walked alone.\n", encoding="utf-8")
    async with lsp_session(root, {"provider": "none", "watch": False}) as client:
        await wait_for_index(client)
        found = await request(client, "saipling/names", {"drift": True})
        assert [d["word"] for d in found["drift"]] == ["Minal", "Minna"] and "unknown" not in found
        evidence = await request(client, "saipling/checkPassage", {"text": "Mina wrote to Jonathan.", "chapter": 3})
        assert {e["entity"]["name"] for e in evidence["entities"]} == {"Mina Harker", "Jonathan Harker"}
        assert all(e["passages"] for e in evidence["entities"]) and evidence["tokensUsed"] <= 4000
        with pytest.raises(JsonRpcException) as info:
            await request(client, "saipling/checkPassage", {"text": "x", "chapter": -1})
        assert "chapter" in info.value.message

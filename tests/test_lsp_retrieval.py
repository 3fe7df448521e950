"""The retrieval requests over LSP: search filters, get, related, enrichContext (plain JSON in and out)."""

from __future__ import annotations

from pathlib import Path

from lsp_client import STORY, lsp_session, request, search_paths, wait_for_index, write_project


async def test_search_get_related_enrich(tmp_path: Path) -> None:
    root = write_project(tmp_path / "story", STORY)
    async with lsp_session(root) as client:
        await wait_for_index(client)
        assert await search_paths(client, "Fenwick", filter={"entityTypes": ["place"]}) == ["places/fenwick.md"]
        assert await search_paths(client, "Fenwick", filter={"pathPrefix": "chapters/"}) == ["chapters/ch01.md"]
        one = await request(client, "saipling/search", {"query": "Fenwick", "maxResults": 1, "source": "agent"})
        assert len(one["results"]) == 1 and one["mode"] == "hybrid"
        assert one["noConfidentMatch"] is False and 0 < one["results"][0]["confidence"] <= 1
        off = await request(client, "saipling/search", {"query": "nginx websocket reverse proxy", "minScore": 0.5})
        assert off["noConfidentMatch"] is True and off["results"] == []
        # a filter that left nothing says why (an editor showed "no results" alone)
        nowhere = await request(client, "saipling/search", {"query": "Fenwick", "filter": {"pathPrefix": "chapter/"}})
        assert nowhere["results"] == [] and "filter.pathPrefix chapter/" in nowhere["note"]
        assert "note" not in await request(client, "saipling/search", {"query": "Fenwick"})

        got = await request(client, "saipling/get", {"path": "chapters/ch01.md", "startLine": 3, "lines": 1})
        assert got["text"].startswith("The dragon woke") and got["workspaceFolder"] == root.as_uri()
        by_uri = await request(client, "saipling/get", {"path": (root / "notes/ideas.md").as_uri()})
        assert "lighthouse" in by_uri["text"]

        related = await request(client, "saipling/related", {"uri": (root / "characters/alice.md").as_uri()})
        assert related["results"] and all(r["filePath"] != "characters/alice.md" for r in related["results"])
        assert all(r["workspaceFolder"] == root.as_uri() for r in related["results"])

        skill = {"enabled": True, "mode": "always", "max_results": 2}
        enriched = await request(
            client,
            "saipling/enrichContext",
            {"query": "dragon", "skillConfig": skill, "loadedFiles": ["chapters/ch01.md"]},
        )
        assert enriched["ran"] and "=== FILE: characters/alice.md (SEARCH) ===" in enriched["contextBlock"]
        assert {"path": "chapters/ch01.md", "reason": "already_loaded"} in enriched["skipped"]

"""The live index (issue 14): text, keywords and line ranges current at once, vectors when the writer pauses;
lazy sync before results; provider fallback to the local model. Real files, a real SQLite index, the real
OpenAI-compatible client against the local HTTP test server (tests/apiserver.py), the real local model."""

# ruff: noqa: F811  (the `api_server` fixture is imported, then requested as a parameter)

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from apiserver import FakeEmbeddingAPI, api_server, engine_options  # noqa: F401  (fixture)
from fixtures import make_project, open_project

DIMS = 32
PASSAGE = "The harbourmaster counted seven lanterns drifting past the breakwater at midnight."


def api_opts(api: FakeEmbeddingAPI, **kw: Any) -> dict[str, Any]:
    return engine_options(api, DIMS, **kw)


def chapter(inserted: int = 0, extra: str = "") -> str:
    sections = [f"## Scene {i}\n\nScene {i} of the chapter: the tide turns slowly over the sand bar." for i in range(4)]
    sections.insert(2, "## The Lanterns\n\n" + PASSAGE)
    top = "".join(f"A new line {n} written at the top.\n" for n in range(inserted))
    return "# Chapter Nine\n\n" + top + extra + "\n\n".join(sections) + "\n"


def lines_of(root: Path, hit: dict[str, Any]) -> str:
    text = (root / hit["filePath"]).read_text(encoding="utf-8").split("\n")
    return "\n".join(text[hit["startLine"] - 1 : hit["endLine"]])


def documents(api: FakeEmbeddingAPI, since: int = 0) -> list[str]:
    return [t for r in api.requests[since:] if isinstance(r.body, dict) for t in r.body.get("input") or []]


def test_refresh_moves_ranges_and_keeps_vectors_then_one_request_embeds_the_change(
    tmp_path: Path, api_server: FakeEmbeddingAPI
) -> None:
    root = make_project(tmp_path, {"ch09.md": chapter(), "other.md": "# Other\n\nA quiet field of barley.\n"})
    with open_project(root, **api_opts(api_server)) as project:
        project.index()
        before = {c.content_hash: c.start_line for c in project.store.chunks_for_path("ch09.md")}
        sent = len(api_server.requests)
        (root / "ch09.md").write_text(chapter(inserted=7, extra="Zeppelins hummed overhead.\n"), encoding="utf-8")
        s = project.refresh(["ch09.md"])
        assert s.changed == 1 and s.embedded == 0 and len(api_server.requests) == sent  # nothing sent
        after = project.store.chunks_for_path("ch09.md")
        moved = [c for c in after if c.content_hash in before]
        assert moved and all(c.start_line > before[c.content_hash] for c in moved)  # new line ranges
        assert project.status()["unembeddedChunks"] == len(after) - len(moved) > 0  # only changed text waits
        results = project.search({"query": "zeppelins", "mode": "hybrid"})["results"]
        hit = next(r for r in results if "keyword" in r["matchedBy"])  # (fake vectors rank any chunk too)
        assert "Zeppelins" in lines_of(root, hit)
        assert hit["matchedBy"] == ["keyword"] and hit["embeddingPending"]  # found by keywords, and says so
        lantern = project.search({"query": "harbourmaster lanterns breakwater", "mode": "lexical"})["results"][0]
        assert PASSAGE in lines_of(root, lantern)  # the range moved with the passage

        sent = len(api_server.requests)  # (the hybrid search embedded its query)
        s = project.index(paths=["ch09.md"])  # the quiet period is over: one request, only the changed chunks
        assert len(api_server.requests) == sent + 1 and s.embedded == len(after) - len(moved)
        assert project.status()["unembeddedChunks"] == 0


def test_search_refreshes_a_file_changed_on_disk_before_pointing_at_it(tmp_path: Path) -> None:
    root = make_project(tmp_path, {"ch09.md": chapter()})
    with open_project(root) as project:
        project.index()
        (root / "ch09.md").write_text(chapter(inserted=5), encoding="utf-8")  # no event: changed behind our back
        response = project.search({"query": "harbourmaster lanterns", "mode": "lexical"})
        hit = response["results"][0]
        assert PASSAGE in lines_of(root, hit)  # never the old lines
        enriched = project.enrich(
            {"query": "harbourmaster lanterns breakwater", "skillConfig": {"enabled": True, "mode": "always"}}
        )
        assert PASSAGE in enriched["contextBlock"] and not enriched["skipped"]


def test_an_unusable_api_on_a_new_project_falls_back_to_local_and_switches_back(
    tmp_path: Path, api_server: FakeEmbeddingAPI
) -> None:
    from saipling.embeddings import local_available

    if not local_available():
        pytest.skip("the local model extra is not installed")
    root = make_project(tmp_path, {"ch09.md": chapter(), "other.md": "# Other\n\nA quiet field of barley.\n"})
    api_server.require_key("sk-good")
    with open_project(root, **api_opts(api_server, openai_api_key="sk-bad", fallback="local")) as project:
        s = project.index()  # 401: the local model stands in
        st = project.status()
        assert st["provider"] == "local" and st["fallbackFrom"]["provider"] == "openai"
        assert "401" in st["fallbackFrom"]["reason"] and "fallback" in st["providerReason"]
        assert st["embeddedChunks"] == st["totalChunks"] == s.chunks and st["unembeddedChunks"] == 0
        assert project.store.vector_model()[0] == project.provider.model != "fake-embed"
        assert project.fallback_notices and "local model" in project.fallback_notices[0]
        assert project.search({"query": "lanterns at midnight", "mode": "semantic"})["results"]

        s = project.index()  # still 401: stays on the local model, nothing mixed
        assert project.status()["provider"] == "local"
    with open_project(root, **api_opts(api_server, openai_api_key="sk-bad", fallback="local")) as project:
        st = project.status()  # a new process (the CLI, a restarted server): the local vectors are still used
        assert st["provider"] == "local" and st["fallbackFrom"]["provider"] == "openai" and st["degraded"] is None
        assert project.search({"query": "lanterns at midnight", "mode": "semantic"})["results"]

        api_server.require_key(None)  # the key works now (200): back to the API, vectors rebuilt
        s = project.index()
        st = project.status()
        assert st["provider"] == "openai" and st["fallbackFrom"] is None
        assert project.store.vector_model() == ("fake-embed", DIMS)
        assert st["embeddedChunks"] == st["totalChunks"] and st["unembeddedChunks"] == 0
        assert project.fallback_notices == [n for n in project.fallback_notices if "works again" in n] != []


def test_no_fallback_where_vectors_of_the_api_model_exist_or_fallback_is_none(
    tmp_path: Path, api_server: FakeEmbeddingAPI
) -> None:
    root = make_project(tmp_path, {"ch09.md": chapter()})
    with open_project(root, **api_opts(api_server, fallback="local")) as project:
        project.index()
    api_server.require_key("sk-other")
    (root / "ch09.md").write_text(chapter(extra="Zeppelins hummed overhead.\n"), encoding="utf-8")
    with open_project(root, **api_opts(api_server, fallback="local")) as project:
        s = project.index()  # a passing outage: keyword-only for the new text, degraded, same model
        assert s.degraded and project.status()["provider"] == "openai" and project.fallback_from is None
    fresh = make_project(tmp_path / "new", {"a.md": chapter()})
    with open_project(fresh, **api_opts(api_server, fallback="none")) as project:
        s = project.index()
        assert s.degraded and project.status()["provider"] == "openai" and project.fallback_from is None


def test_embedding_order_open_files_then_the_most_recently_modified(
    tmp_path: Path, api_server: FakeEmbeddingAPI
) -> None:
    import os

    names = ("old", "mid", "new", "open")
    root = make_project(
        tmp_path, {f"{n}.md": f"# {n}\n\nThe {n} file tells of the harbour in winter.\n" for n in names}
    )
    for age, name in enumerate(("new", "mid", "old", "open")):  # "open" is the oldest file
        t = 1_700_000_000 - 3600 * age
        os.utime(root / f"{name}.md", (t, t))
    with open_project(root, **api_opts(api_server)) as project:
        project.index(embed=False)  # keywords only: every chunk waits for a vector
        project.indexer.ensure_vector_table()
        order = [path for _, path, _, _ in project.store.unembedded(first=["open.md"])]
        assert list(dict.fromkeys(order)) == ["open.md", "new.md", "mid.md", "old.md"]
        assert "new.md" not in [p for _, p, _, _ in project.store.unembedded(hold={"new.md"})]
        s = project.index(first=["open.md"])
        assert s.embedded == 4 and s.embedded_paths[0] == "open.md"

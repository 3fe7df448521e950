"""Query vectors of another size than the stored ones (llama.cpp ignores `model`: swapping its model file does
this), and searches on a partly embedded index: `degraded` keyword results saying why, never a traceback or an
"internal error"; the next index run rebuilds the vectors at the new size. A real local HTTP server speaking
the OpenAI API, real SQLite files, the real CLI, MCP and language server processes."""

# ruff: noqa: F811  (the `api_server` fixture is imported, then requested as a parameter)

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from apiserver import FakeEmbeddingAPI, Step, api_server  # noqa: F401  (fixture)
from lsp_client import fake_api_options, server_env, write_project
from rawlsp import RawServer
from saipling.project import Project
from test_mcp import call, mcp_session

FILES = {
    "keeper.md": "# The keeper\n\nThe lighthouse keeper trims the lamp at dusk.\n",
    "harbour.md": "# Harbour\n\nFishing boats come in with the tide and the gulls.\n",
    "market.md": "# Market\n\nThe chandlery sells rope, tar and lamp oil.\n",
    "tower.md": "# Tower\n\nThe north tower leans over the cliff path.\n",
    "inn.md": "# Inn\n\nThe inn by the quay serves fish stew to sailors.\n",
    "chapel.md": "# Chapel\n\nA bell rings in the chapel on the headland.\n",
}
MODEL = "swap-embed"  # not a known model: its size is learned from the server's answers


def env_for(api: FakeEmbeddingAPI, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in server_env().items() if k != "SAIPLING_TEST_CLOCK"}
    env.update(
        SAIPLING_PROVIDER="openai",
        SAIPLING_BASE_URL=api.url + "/v1",
        SAIPLING_MODEL=MODEL,
        SAIPLING_FALLBACK="none",
        **extra,
    )
    return env


def saipling(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "saipling", *args], capture_output=True, text=True, env=env, timeout=120
    )


def settings_for(api: FakeEmbeddingAPI, **extra: Any) -> dict[str, Any]:
    return {"provider": "openai", "base_url": api.url + "/v1", "model": MODEL, "fallback": "none", **extra}


def indexed(tmp_path: Path, api: FakeEmbeddingAPI) -> Path:
    root = write_project(tmp_path / "p", FILES)
    done = saipling("index", str(root), "--json", env=env_for(api))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["embedded"] == len(FILES)
    return root


# -- another size -------------------------------------------------------------------------------------------
def test_cli_search_with_query_vectors_of_another_size_is_degraded_keyword_search(
    tmp_path: Path, api_server: FakeEmbeddingAPI
) -> None:
    root = indexed(tmp_path, api_server)
    api_server.default_dims = 48  # the model file behind the server was swapped; the name stayed
    for mode in ("hybrid", "semantic"):
        done = saipling(
            "search",
            "lighthouse keeper",
            "--mode",
            mode,
            "--json",
            "--root",
            str(root),
            env=env_for(api_server),
        )
        assert done.returncode == 0, done.stderr
        response = json.loads(done.stdout)
        reason = response["degraded"] or ""
        assert "keyword search only" in reason and "48-dimensional" in reason and "32-dimensional" in reason, reason
        assert response["results"][0]["filePath"] == "keeper.md"
        assert "Traceback" not in done.stderr


async def test_mcp_search_and_enrich_with_query_vectors_of_another_size(
    tmp_path: Path, api_server: FakeEmbeddingAPI
) -> None:
    root = indexed(tmp_path, api_server)
    api_server.default_dims = 48
    extra = {k: v for k, v in env_for(api_server).items() if k.startswith("SAIPLING_") and k != "SAIPLING_PROVIDER"}
    async with mcp_session(root, provider="openai", SAIPLING_AUTO_INDEX="false", **extra) as session:
        found = await call(session, "search", {"query": "lighthouse keeper", "mode": "semantic"})
        assert found["degraded"] and "48-dimensional" in found["degraded"], found
        assert found["results"] and found["results"][0]["filePath"] == "keeper.md"
        enriched = await call(session, "enrich_context", {"query": "lighthouse keeper"})
        assert enriched["degraded"] and "48-dimensional" in enriched["degraded"]
        like = await call(session, "related", {"path": "keeper.md"})  # the stored vectors: same size
        assert like["indexed"] and like.get("degraded") is None and like["results"]


def test_a_server_whose_model_changed_is_followed_by_the_next_index_run(
    tmp_path: Path, api_server: FakeEmbeddingAPI
) -> None:
    """One process (as the language server): the size learned at 32; the server then answers 48. Searches are
    degraded naming the change, enrich and related keep working, and the next run rebuilds every vector at 48
    (it said so); searches are then semantic again."""
    root = write_project(tmp_path / "p", FILES)
    project = Project.open(root, overrides=settings_for(api_server))
    try:
        assert project.index().embedded == len(FILES)
        assert project.store.vector_model() == (MODEL, 32)
        api_server.default_dims = 48
        found = project.search({"query": "tide and gulls", "mode": "semantic"})
        assert found["degraded"] and "48-dimensional" in found["degraded"], found
        assert found["results"][0]["filePath"] == "harbour.md"
        assert project.enrich({"query": "tide and gulls"})["degraded"]
        assert project.related({"path": "harbour.md"})["results"]
        assert "48-dimensional" in (project.status()["degraded"] or "")  # status says it too, until the run
        summary = project.index()
        assert any("48-dimensional" in w and "32-dimensional" in w for w in summary.warnings), summary.warnings
        assert summary.embedded == len(FILES) and not summary.degraded
        assert project.store.vector_model() == (MODEL, 48)
        assert project.store.vector_matrix()[1].shape == (len(FILES), 48)
        again = project.search({"query": "tide and gulls", "mode": "semantic"})
        assert again["degraded"] is None and again["results"]
    finally:
        project.close()


def test_a_batch_meeting_the_new_size_rebuilds_in_the_same_run(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    root = write_project(tmp_path / "p", FILES)
    project = Project.open(root, overrides=settings_for(api_server))
    try:
        project.index()
        api_server.default_dims = 24
        (root / "new.md").write_text("# New\n\nA fresh note about the ferry.\n", encoding="utf-8")
        summary = project.index()
        assert summary.embedded == len(FILES) + 1 and not summary.degraded, summary
        assert any("24-dimensional" in w for w in summary.warnings)
        assert project.store.vector_model() == (MODEL, 24)
        assert project.status()["unembeddedChunks"] == 0 and project.status()["degraded"] is None
    finally:
        project.close()


def test_cli_index_after_the_model_changed_rebuilds_and_search_works_again(
    tmp_path: Path, api_server: FakeEmbeddingAPI
) -> None:
    root = indexed(tmp_path, api_server)
    api_server.default_dims = 48
    done = saipling("index", str(root), "--json", env=env_for(api_server))
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["embedded"] == len(FILES) and any("48-dimensional" in w for w in summary["warnings"]), summary
    found = saipling(
        "search", "north tower", "--mode", "semantic", "--json", "--root", str(root), env=env_for(api_server)
    )
    response = json.loads(found.stdout)
    assert response["degraded"] is None and response["results"], response


# -- partly embedded ----------------------------------------------------------------------------------------
def half_embedded(tmp_path: Path, api: FakeEmbeddingAPI) -> Path:
    """An index whose run embedded a few chunks, then lost its server (as after a Ctrl-C)."""
    root = write_project(tmp_path / "p", FILES)
    api.script(Step(), Step())  # the size probe and the first batch of two; then the server fails
    api.fail(500, times=1000)
    done = saipling("index", str(root), "--json", env=env_for(api, SAIPLING_BATCH_SIZE="2", SAIPLING_MAX_RETRIES="0"))
    assert done.returncode in (0, 1), done.stderr
    return root


def test_search_on_a_partly_embedded_index_says_how_many_chunks_lack_vectors(
    tmp_path: Path, api_server: FakeEmbeddingAPI
) -> None:
    root = half_embedded(tmp_path, api_server)
    api_server.reset()  # the server is back: queries are embedded; the chunks still lack vectors
    env = env_for(api_server)
    status = json.loads(saipling("status", str(root), "--json", env=env).stdout)
    missing, total = status["unembeddedChunks"], status["totalChunks"]
    assert 0 < missing < total and status["degraded"], status
    for mode in ("semantic", "hybrid"):
        done = saipling("search", "chapel bell", "--mode", mode, "--json", "--root", str(root), env=env)
        assert done.returncode == 0, done.stderr
        response = json.loads(done.stdout)
        assert response["degraded"] and f"{missing} of {total} chunks" in response["degraded"], response
    # the language server says it too
    with RawServer(root) as srv:
        srv.initialize(fake_api_options(api_server, model=MODEL, fallback="none", autoIndex=False))
        srv.request("saipling/search", {"query": "chapel bell", "mode": "semantic"}, msg_id="s")
        reply = srv.response("s")
        assert reply is not None and "result" in reply, (reply, srv.stderr())
        assert f"{missing} of {total} chunks" in (reply["result"]["degraded"] or ""), reply["result"]
    # once every chunk is embedded, nothing is said
    assert saipling("index", str(root), "--json", env=env).returncode == 0
    done = saipling("search", "chapel bell", "--mode", "semantic", "--json", "--root", str(root), env=env)
    assert json.loads(done.stdout)["degraded"] is None


async def test_mcp_search_on_a_partly_embedded_index_is_degraded(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    root = half_embedded(tmp_path, api_server)
    api_server.reset()
    extra = {k: v for k, v in env_for(api_server).items() if k.startswith("SAIPLING_") and k != "SAIPLING_PROVIDER"}
    async with mcp_session(root, provider="openai", SAIPLING_AUTO_INDEX="false", **extra) as session:
        status = await call(session, "status")
        found = await call(session, "search", {"query": "chapel bell", "mode": "semantic"})
        expected = f"{status['unembeddedChunks']} of {status['totalChunks']} chunks"
        assert status["unembeddedChunks"] > 0 and expected in (found["degraded"] or ""), found

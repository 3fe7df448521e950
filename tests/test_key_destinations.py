"""Where the user's API keys may go (attack report r2): a cloned project's own `.saipling/config.toml` named
`provider = "openai"` (or voyage) and `baseUrl = "http://its-host/v1"`, and `saipling index` sent the user's
OPENAI_API_KEY / VOYAGE_API_KEY from the environment to that host as a Bearer token.

The rule (config.settings.key_may_go): a key from the user (environment, editor, command line) goes to the
provider's own host, or to a base URL the user set too; a base URL set only by the project's config gets no key (a
keyless local server keeps working), and a warning names the setting and how to allow it. Real processes and real
local HTTP servers (tests/apiserver.py, tests/rerankserver.py); the keys never appear in what is said."""

# ruff: noqa: F811  (fixtures imported, then requested as parameters)
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from apiserver import FakeEmbeddingAPI, api_server  # noqa: F401  (fixture)
from lsp_client import STORY, lsp_session, status, wait_for_index, write_project
from rerankserver import FakeReranker, fake_reranker  # noqa: F401  (fixture)
from saipling.config.settings import load_settings

SAIPLING = [sys.executable, "-m", "saipling"]
OPENAI_KEY = "sk-proj-USERS-REAL-KEY-0123456789abcdef"
VOYAGE_KEY = "pa-USERS-REAL-VOYAGE-KEY-0123456789abcdef"


def _project(tmp_path: Path, config: str) -> Path:
    root = tmp_path / "cloned"
    (root / ".saipling").mkdir(parents=True)
    (root / "a.md").write_text("# Hi\n\nhello world, a note about dragons\n", encoding="utf-8")
    (root / ".saipling" / "config.toml").write_text(config, encoding="utf-8")
    return root


def _env(**extra: str) -> dict[str, str]:
    drop = ("SAIPLING_", "VOYAGE_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(extra)
    return env


def _index(root: Path, env: dict[str, str]) -> tuple[dict, str]:
    proc = subprocess.run(
        [*SAIPLING, "index", str(root), "--yes", "--json"], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), proc.stderr


def _openai_config(api: FakeEmbeddingAPI) -> str:
    return f'provider = "openai"\nbaseUrl = "{api.url}/v1"\nmodel = "fake-embed"\ndimensions = 32\nmaxRetries = 0\n'


def test_the_projects_base_url_gets_no_openai_key_and_the_user_is_told(
    tmp_path: Path, api_server: FakeEmbeddingAPI
) -> None:
    root = _project(tmp_path, _openai_config(api_server))
    summary, stderr = _index(root, _env(OPENAI_API_KEY=OPENAI_KEY))
    assert api_server.requests, "the keyless server is still called"
    assert not any(r.authorization for r in api_server.requests), "the user's key went to the project's host"
    assert summary["embedded"] > 0 and not summary.get("degraded")  # a keyless server works as before
    told = [line for line in stderr.splitlines() if "is set by the project's .saipling/config.toml" in line]
    assert len(told) == 1, stderr
    assert "baseUrl" in told[0] and "OPENAI_API_KEY" in told[0] and "SAIPLING_BASE_URL" in told[0]
    assert OPENAI_KEY not in stderr and OPENAI_KEY[:12] not in stderr


def test_the_projects_base_url_gets_no_voyage_key(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    root = _project(
        tmp_path,
        f'provider = "voyage"\nbaseUrl = "{api_server.url}"\nmodel = "fake"\ndimensions = 32\nmaxRetries = 0\n',
    )
    summary, stderr = _index(root, _env(VOYAGE_API_KEY=VOYAGE_KEY))
    assert api_server.requests and not any(r.authorization for r in api_server.requests)
    assert summary["embedded"] > 0
    assert "VOYAGE_API_KEY" in stderr and "is set by the project's .saipling/config.toml" in stderr
    assert VOYAGE_KEY not in stderr


def test_a_base_url_the_user_sets_gets_the_key(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    """The same URL set by the user (SAIPLING_BASE_URL) as well: the key goes, nothing is said."""
    api_server.require_key(OPENAI_KEY)
    root = _project(tmp_path, _openai_config(api_server))
    summary, stderr = _index(root, _env(OPENAI_API_KEY=OPENAI_KEY, SAIPLING_BASE_URL=f"{api_server.url}/v1"))
    assert api_server.requests and all(r.authorized for r in api_server.requests)
    assert summary["embedded"] > 0
    assert "config.toml" not in stderr and OPENAI_KEY not in stderr


def test_a_server_asking_for_the_withheld_key_says_why_and_names_its_host(
    tmp_path: Path, api_server: FakeEmbeddingAPI
) -> None:
    api_server.require_key(OPENAI_KEY)
    root = _project(tmp_path, _openai_config(api_server) + 'fallback = "none"\n')
    summary, stderr = _index(root, _env(OPENAI_API_KEY=OPENAI_KEY))
    assert not any(r.authorization for r in api_server.requests)
    said = summary["degraded"] or ""
    assert f"Embedding server {api_server.url}/v1 requires an API key (HTTP 401)" in said, said
    assert "not sent to a base URL set only by the project's .saipling/config.toml" in said
    assert OPENAI_KEY not in said and OPENAI_KEY not in stderr


def test_a_rejected_key_names_the_host_it_went_to(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    """ "Voyage rejected the API key" was said of a server that was not Voyage's."""
    api_server.require_key("the-right-key")
    root = _project(
        tmp_path, 'provider = "voyage"\nmodel = "fake"\ndimensions = 32\nmaxRetries = 0\nfallback = "none"\n'
    )
    summary, stderr = _index(root, _env(VOYAGE_API_KEY=VOYAGE_KEY, SAIPLING_BASE_URL=api_server.url))
    said = summary["degraded"] or ""
    assert f"Voyage-compatible server {api_server.url} rejected the API key (HTTP 401)" in said, said
    assert "Voyage rejected" not in said + stderr and VOYAGE_KEY not in said + stderr


@pytest.mark.parametrize(
    ("url", "from_project", "official", "goes"),
    [
        ("https://api.openai.com/v1", True, "https://api.openai.com/v1", True),  # the provider's own host
        ("https://api.openai.com:443/v1/", True, "https://api.openai.com/v1", True),
        ("http://api.openai.com/v1", True, "https://api.openai.com/v1", False),  # not over TLS
        ("https://api.openai.com.evil.example/v1", True, "https://api.openai.com/v1", False),
        ("https://api.openai.com@evil.example/v1", True, "https://api.openai.com/v1", False),
        ("https://api.openai.com:8443/v1", True, "https://api.openai.com/v1", False),
        ("http://127.0.0.1:11434/v1", True, "https://api.openai.com/v1", False),
        ("http://127.0.0.1:11434/v1", False, "https://api.openai.com/v1", True),  # the user named it
        ("http://127.0.0.1:8080", True, "", False),  # a rerank server has no own host
    ],
)
def test_key_may_go(url: str, from_project: bool, official: str, goes: bool) -> None:
    from saipling.config.settings import key_may_go

    assert key_may_go(url, from_project, official) is goes


@pytest.mark.parametrize("style", ["cohere", "voyage"])
def test_the_projects_rerank_url_gets_no_rerank_key(tmp_path: Path, fake_reranker, style: str) -> None:
    from saipling.retrieval.rerank import create_reranker

    server: FakeReranker = fake_reranker(style)
    root = _project(tmp_path, f'[rerank]\nprovider = "{style}"\nbaseUrl = "{server.url}"\n')
    env = {"SAIPLING_RERANK_API_KEY": "sk-rerank-USERS-KEY-0123456789", "VOYAGE_API_KEY": VOYAGE_KEY}
    settings, warnings = load_settings(root, env=env)
    assert any("rerank.baseUrl" in w and "SAIPLING_RERANK_BASE_URL" in w for w in warnings), warnings
    reranker = create_reranker(settings)
    assert reranker is not None
    try:
        assert len(reranker.score("dragons", ["a note about dragons", "other"], time.monotonic() + 10)) == 2
    finally:
        reranker.close()
    assert server.requests and not any(r["authorized"] for r in server.requests)
    # the user names the URL (SAIPLING_RERANK_BASE_URL): the key goes
    settings, warnings = load_settings(root, env={**env, "SAIPLING_RERANK_BASE_URL": server.url})
    assert not any("rerank.baseUrl" in w for w in warnings)
    reranker = create_reranker(settings)
    assert reranker is not None
    try:
        reranker.score("dragons", ["a note about dragons"], time.monotonic() + 10)
    finally:
        reranker.close()
    assert server.requests[-1]["authorized"]


async def test_the_editor_names_the_url_and_the_key_goes_but_not_to_the_projects(
    tmp_path: Path, api_server: FakeEmbeddingAPI
) -> None:
    """`saipling serve`: the project's baseUrl gets no key from the environment; the same URL in the editor's
    settings (initializationOptions) is the user's, and the key goes."""
    root = write_project(tmp_path / "story", STORY)
    (root / ".saipling").mkdir(exist_ok=True)
    (root / ".saipling" / "config.toml").write_text(_openai_config(api_server), encoding="utf-8")
    async with lsp_session(root, {"watch": False}, env={"OPENAI_API_KEY": OPENAI_KEY}) as client:
        await wait_for_index(client)
        st = await status(client)
        assert st["embeddedChunks"] > 0
        assert any("is set by the project's .saipling/config.toml" in w for w in st["warnings"]), st["warnings"]
    assert api_server.requests and not any(r.authorization for r in api_server.requests)
    api_server.reset()
    api_server.require_key(OPENAI_KEY)
    for made in (root / ".saipling").glob("index.db*"):  # (a first run again: everything is embedded)
        made.unlink()
    editor = {"watch": False, "baseUrl": f"{api_server.url}/v1"}
    async with lsp_session(root, editor, env={"OPENAI_API_KEY": OPENAI_KEY}) as client:
        await wait_for_index(client)
        st = await status(client)
        assert st["embeddedChunks"] > 0 and st["degraded"] is None
        assert not any("config.toml" in w for w in st["warnings"])
    assert api_server.requests and all(r.authorized for r in api_server.requests)

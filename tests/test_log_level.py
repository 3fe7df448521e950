"""SAIPLING_LOG_LEVEL in any case, and a value that is no level (attack report r4): `debug` made every CLI command,
`saipling mcp` included, die with `ValueError: Unknown level: 'debug'`; `saipling serve` upper-cased it but died the
same way on `verbose`. Now any case is read, and an unknown value is one warning on stderr and the default level.
Real processes: the CLI, and `saipling serve` answering a request."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rawlsp import RawServer

SAIPLING = [sys.executable, "-m", "saipling"]


def _env(level: str) -> dict[str, str]:
    from lsp_client import server_env

    return server_env(SAIPLING_LOG_LEVEL=level, SAIPLING_PROVIDER="none")


def _project(tmp_path: Path) -> Path:
    root = tmp_path / "p"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nhello world\n", encoding="utf-8")
    return root


@pytest.mark.parametrize(("value", "level"), [("debug", "DEBUG"), ("Info", "INFO"), (" warn ", "WARNING")])
def test_a_level_is_read_in_any_case(value: str, level: str) -> None:
    from saipling.config.settings import log_level

    assert log_level(value, "WARNING") == (level, None)


def test_an_unknown_level_is_told_once_and_the_default_kept() -> None:
    from saipling.config.settings import log_level

    level, problem = log_level("loud-please", "INFO")
    assert level == "INFO" and problem is not None and "SAIPLING_LOG_LEVEL" in problem
    assert log_level("loud-please", "INFO") == ("INFO", None)  # (once a process: `serve` reads it twice)


@pytest.mark.parametrize("value", ["debug", "info", "garbage"])
def test_cli_commands_run_with_a_lower_case_or_unknown_level(tmp_path: Path, value: str) -> None:
    root = _project(tmp_path)
    env = _env(value)
    index = subprocess.run([*SAIPLING, "index", str(root)], env=env, capture_output=True, text=True, timeout=120)
    assert index.returncode == 0 and "Traceback" not in index.stderr, index.stderr
    found = subprocess.run(
        [*SAIPLING, "search", "hello", "--root", str(root), "--mode", "lexical"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert found.returncode == 0 and "Traceback" not in found.stderr, found.stderr
    assert "a.md" in found.stdout
    told = [line for line in found.stderr.splitlines() if "is not a log level" in line]
    if value == "garbage":
        assert len(told) == 1 and told[0].startswith("warning: SAIPLING_LOG_LEVEL='garbage'"), found.stderr
    else:
        assert not told
    if value == "debug":  # the level applies: debug lines are logged
        assert "INFO saipling.embeddings: embedding provider none" in index.stderr, index.stderr


@pytest.mark.parametrize("value", ["verbose", "debug"])
def test_serve_runs_with_an_unknown_or_lower_case_level(tmp_path: Path, value: str) -> None:
    root = _project(tmp_path)
    with RawServer(root, env={"SAIPLING_LOG_LEVEL": value}) as srv:
        srv.initialize()
        srv.request("saipling/status", {}, msg_id=2)
        reply = srv.response(2, timeout=60)
        assert reply is not None and "result" in reply, (reply, srv.stderr())
        stderr = srv.stderr()
    assert "Traceback" not in stderr, stderr
    told = [line for line in stderr.splitlines() if "is not a log level" in line]
    assert len(told) == (1 if value == "verbose" else 0), stderr

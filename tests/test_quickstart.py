"""The README's quick start and `.ci/run` must say the same two commands (`.ci/run` itself proves they work)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_quickstart_commands(text: str) -> list[str]:
    """The commands in the fenced bash blocks of the README's "Quick start" section, in order."""
    section = re.search(r"^## Quick start\n(.*?)(?=^## )", text, re.S | re.M)
    assert section, "README.md has no '## Quick start' section"
    blocks = re.findall(r"```bash\n(.*?)```", section.group(1), re.S)
    commands = []
    for block in blocks[:2]:
        lines = [ln.strip() for ln in block.splitlines() if ln.strip() and not ln.strip().startswith("#")]
        commands.append(lines[0].split("  #")[0].strip())
    return commands


def ci_commands(text: str) -> list[str]:
    """The pip install and pytest lines `.ci/run` executes."""
    return [
        ln.strip()
        for ln in text.splitlines()
        if re.match(r"\s*python3 -m (pip install|pytest)\b", ln) and not ln.strip().startswith("#")
    ]


def test_readme_quickstart_and_ci_run_the_same_commands():
    readme = readme_quickstart_commands((ROOT / "README.md").read_text(encoding="utf-8"))
    ci = ci_commands((ROOT / ".ci" / "run").read_text(encoding="utf-8"))
    assert len(readme) == 2, readme
    assert readme[0].startswith("python3 -m pip install"), readme
    assert readme[1].startswith("python3 -m pytest"), readme
    assert ci == readme


def test_ci_run_uses_a_fresh_venv_outside_the_clone():
    text = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"python3 -m venv \"\$base/venv\"", text)
    assert "TMPDIR" in text and "mktemp -d" in text
    assert "--system-site-packages" not in text
    assert "pip install --upgrade pip" not in text and "-U pip" not in text
    # the venv is activated before the install and test commands run
    assert text.index("bin/activate") < text.index("python3 -m pip install")


def test_license_is_an_spdx_string():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert isinstance(meta["license"], str)

"""The README's "Develop" section and `.ci/run` must say the same two commands (`.ci/run` itself proves they work);
the README is a short front door whose links all lead somewhere."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_quickstart_commands(text: str) -> list[str]:
    """The commands in the fenced bash blocks of the README's "Develop" section, in order."""
    section = re.search(r"^## Develop\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert section, "README.md has no '## Develop' section"
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


def test_readme_is_a_front_door_of_at_most_20_kb():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.encode("utf-8")) <= 20_000
    first_screen = readme[: readme.index("## Documentation")]
    for needed in (
        "Python 3.11",
        "pipx install 'saipling-search[local] @ git+https://",
        "python3 -m venv",
        "saipling index",
        "saipling search",
        "claude mcp add",
        "not on PyPI",
    ):
        assert needed in first_screen, needed


def _relative_links(path: Path) -> list[tuple[str, str]]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)  # `[text](url)` in inline code is an example, not a link
    out = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        out.append((file, anchor))
    return out


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    anchors = set()
    for heading in re.findall(r"^#+ (.+)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


def test_every_link_of_the_readme_and_docs_leads_somewhere():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    assert len(pages) >= 10, pages  # the README and its docs/ pages by subject
    checked = 0
    for page in pages:
        for file, anchor in _relative_links(page):
            target = (page.parent / file).resolve() if file else page
            assert target.exists(), f"{page.name}: {file} does not exist"
            if anchor and target.suffix == ".md":
                assert anchor in _anchors(target), f"{page.name}: no heading #{anchor} in {target.name}"
            checked += 1
    assert checked >= 20

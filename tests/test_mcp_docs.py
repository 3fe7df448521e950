"""The MCP tools as the docs list them: every tool the server defines (`saipling.mcp.server.TOOLS`, what
`tools/list` answers) has a row in docs/mcp.md's tools table and is named, with a description, by docs/cli.md,
`saipling mcp --help`, the README and the server's instructions to agents; no doc lists a tool the server lacks."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from saipling.cli.main import main
from saipling.mcp.server import INSTRUCTIONS, TOOL_NAMES

DOCS = Path(__file__).resolve().parents[1] / "docs"
README = Path(__file__).resolve().parents[1] / "README.md"


def _tools_table(markdown: str) -> list[str]:
    """The tool names of the first table whose header starts `| tool |`, in row order."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| tool |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        m = re.match(r"\| `(\w+)` \|", line)
        assert m, f"a row of the tools table that names no tool: {line[:80]}"
        rows.append(m.group(1))
    return rows


def test_the_tools_table_of_docs_mcp_has_one_row_per_tool_of_the_server() -> None:
    assert len(TOOL_NAMES) == 8
    assert _tools_table((DOCS / "mcp.md").read_text(encoding="utf-8")) == list(TOOL_NAMES)


def test_docs_cli_names_and_describes_every_tool() -> None:
    lines = (DOCS / "cli.md").read_text(encoding="utf-8").splitlines()
    row = next(line for line in lines if line.startswith("| `saipling mcp"))
    for name in TOOL_NAMES:
        assert re.search(rf"`{name}` \([^)]+\)", row), f"docs/cli.md: no `{name}` (description) in the mcp row"
    assert set(re.findall(r"`(\w+)` \(", row)) == set(TOOL_NAMES)


def test_mcp_help_names_and_describes_every_tool() -> None:
    result = CliRunner().invoke(main, ["mcp", "--help"])
    assert result.exit_code == 0, result.output
    described = re.findall(r"^\s+(\w+)\s{2,}\S.*$", result.stdout.split("Options:")[0], re.MULTILINE)
    assert described == list(TOOL_NAMES)


def test_readme_and_the_instructions_name_every_tool() -> None:
    readme = " ".join(README.read_text(encoding="utf-8").split())  # (a list of names may wrap)
    for name in TOOL_NAMES:
        assert f"`{name}`" in readme, f"README.md does not name `{name}`"
        assert f"`{name}`" in INSTRUCTIONS, f"the server's instructions do not name `{name}`"

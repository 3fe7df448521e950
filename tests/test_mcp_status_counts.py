"""The MCP `status` tool counts only what the agent may see: its totals left the excluded and private files in, so
`totalFiles` less the files of `entityTypes` was exactly how many files the author keeps from agents."""

from __future__ import annotations

import json
from pathlib import Path

from fixtures import make_project, open_project


def test_status_totals_leave_out_what_the_agent_may_not_see(tmp_path: Path) -> None:
    files: dict[str, str | bytes] = {"notes/a.md": "# A\n\nThe harbor at dawn.\n", "notes/b.md": "# B\n\nA ship.\n"}
    files |= {f"diary/d{i}.md": f"# D{i}\n\nSecret entry {i}.\n" for i in range(7)}
    files |= {f"notes/p{i}.md": f"---\nvisibility: private\n---\n# P{i}\n\nPrivate {i}.\n" for i in range(5)}
    files[".context_settings.json"] = json.dumps({"diary/": "exclude"})
    root = make_project(tmp_path, files)
    with open_project(root) as project:
        project.index()
        assert project.status()["totalFiles"] == 14  # (the author's own status counts every file)
        from saipling.mcp.server import McpFace

        status = McpFace(project).call("status", {})
        seen = project.search({"query": "harbor ship", "role": "", "maxResults": 100, "mode": "lexical"})
    assert sum(status["entityTypes"].values()) == status["totalFiles"] == 2
    assert status["totalChunks"] == 2 and status["embeddedChunks"] == 0 and status["unembeddedChunks"] == 0
    assert {r["filePath"] for r in seen["results"]} == {"notes/a.md", "notes/b.md"}
    # sums over every file of the index (its tokens, its cost, its size on disk) are the author's
    assert not {"totalTokens", "estimatedReindexCostUsd", "indexBytes", "excludedFiles"} & set(status)

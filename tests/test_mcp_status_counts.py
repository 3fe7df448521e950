"""The MCP `status` tool counts only what the agent may see: its totals left the excluded and private files in, so
`totalFiles` less the files of `entityTypes` was exactly how many files the author keeps from agents."""

from __future__ import annotations

import json
import re
from pathlib import Path

from fixtures import make_project, need_local_model, open_project, write_file


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


def _harbor_with_a_diary(tmp_path: Path) -> Path:
    """A public note and six excluded diary entries, all of them about the harbor."""
    files: dict[str, str | bytes] = {"notes/a.md": "# A\n\nThe harbor at dawn.\n"}
    files |= {f"diary/d{i}.md": f"# D{i}\n\nSecret harbor entry {i}.\n" for i in range(6)}
    files[".context_settings.json"] = json.dumps({"diary/": "exclude"})
    return make_project(tmp_path, files)


def test_degraded_counts_only_the_chunks_the_agent_may_see(tmp_path: Path) -> None:
    """`degraded` said '2 of 9 chunks have no embeddings' to an agent that may see one chunk, embedded: the index's
    size, and that a private note was written a moment ago."""
    need_local_model()
    root = _harbor_with_a_diary(tmp_path)
    with open_project(root, "local") as project:
        project.index()
        write_file(root, "notes/p.md", "---\nvisibility: private\n---\n# P\n\nPrivate harbor.\n")
        write_file(root, "diary/new.md", "# New\n\nharbor.\n")
        project.index(paths=["notes/p.md", "diary/new.md"], embed=False)  # (read, not embedded yet)
        assert "2 of 9 chunks" in project.status()["degraded"]  # (the author's)
        from saipling.mcp.server import McpFace

        face = McpFace(project)
        said = [face.call("status", {}).get("degraded"), face.call("search", {"query": "harbor"}).get("degraded")]
        said.append(face.call("related", {"path": "notes/a.md"}).get("degraded"))
    # (its one chunk has its embedding: "0 of 1 chunks have no embeddings" told it a hidden file was just written)
    assert said == [None, None, None]


def test_degraded_counts_the_agents_own_chunks_without_embeddings(tmp_path: Path) -> None:
    need_local_model()
    root = _harbor_with_a_diary(tmp_path)
    with open_project(root, "local") as project:
        project.index()
        write_file(root, "notes/b.md", "# B\n\nThe harbor at dusk.\n")
        write_file(root, "diary/new.md", "# New\n\nharbor.\n")
        project.index(paths=["notes/b.md", "diary/new.md"], embed=False)  # (read, not embedded yet)
        from saipling.mcp.server import McpFace

        said = McpFace(project).call("status", {})["degraded"]
    assert said.startswith("1 of 2 chunks have no embeddings") and not re.search(r"\b[89]\b", said), said


def test_while_a_run_writes_the_agent_s_counts_stand_a_few_seconds(tmp_path: Path, monkeypatch) -> None:
    """Every status poll during a run is a new index state: the counts (seconds of a worker's time on a large index)
    are taken again at most every SEEN_WHILE_INDEXING seconds then, and at once when no run is going."""
    from saipling.mcp import server
    from saipling.mcp.server import McpFace

    monkeypatch.setattr(server, "SEEN_WHILE_INDEXING", 3600.0)  # (however slow the machine: no clock in the test)

    root = make_project(tmp_path, {"notes/a.md": "# A\n\nThe harbor.\n"})
    with open_project(root) as project:
        project.index()
        face = McpFace(project)
        assert face.call("status", {})["totalFiles"] == 1
        write_file(root, "notes/b.md", "# B\n\nA ship.\n")
        project.index()
        project.state.is_indexing = True  # (what a run going on says)
        try:
            assert face.call("status", {})["totalFiles"] == 1  # (counted a moment ago: it stands)
        finally:
            project.state.is_indexing = False
        assert face.call("status", {})["totalFiles"] == 2

"""A project inside another indexed project keeps the exclusions of the one above: `saipling mcp PROJECT/notes` made
an index of its own for `notes/` and read nothing of the project's `.context_settings.json` (attacker pass 6)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures import make_project, open_project
from saipling.errors import PathOutsideRoot


def test_a_folder_served_apart_keeps_the_exclusions_of_the_project_it_is_in(tmp_path: Path) -> None:
    outer = make_project(
        tmp_path,
        {
            "notes/pub.md": "# Pub\n\nThe harbor.\n",
            "notes/diary/affair.md": "# Diary\n\nMy zanzibarite affair at the harbor.\n",
            ".context_settings.json": json.dumps({"notes/diary/": "exclude", "**/*.secret.md": "exclude"}),
        },
    )
    (outer / "notes" / "x.secret.md").write_text("# X\n\nzanzibarite plans.\n", encoding="utf-8")
    (outer / ".saipling").mkdir()  # (indexed: a project)
    with open_project(outer / "notes") as project:  # what `saipling mcp PROJECT/notes` serves
        project.index()
        from saipling.mcp.server import McpFace

        face = McpFace(project)
        assert face.call("search", {"query": "zanzibarite"})["results"] == []
        assert [r["filePath"] for r in face.call("search", {"query": "harbor"})["results"]] == ["pub.md"]
        for path in ("diary/affair.md", "x.secret.md"):
            with pytest.raises(PathOutsideRoot):
                face.call("get", {"path": path})
        assert project.get({"path": "pub.md"})["text"].startswith("# Pub")


def test_a_folder_above_that_is_no_project_changes_nothing(tmp_path: Path) -> None:
    (tmp_path / ".context_settings.json").write_text(json.dumps({"inner/": "exclude"}), encoding="utf-8")
    inner = make_project(tmp_path, {"a.md": "# A\n\nzanzibarite.\n"}, name="inner")
    with open_project(inner) as project:
        project.index()
        assert [r["filePath"] for r in project.search({"query": "zanzibarite"})["results"]] == ["a.md"]

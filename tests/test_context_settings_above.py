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


def test_the_settings_of_a_folder_served_apart_stay_one_object_while_nothing_changes(tmp_path: Path) -> None:
    """Without a settings file of its own, the folder's settings were a new object every call once a project above
    applied: the caches keyed by them (the entity index, mentions, status's report over every indexed path) were
    worked out again on every request. A settings file written later still counts."""
    from saipling.files.context_settings import load_context_settings

    (tmp_path / ".saipling").mkdir()
    (tmp_path / ".context_settings.json").write_text(json.dumps({"notes/diary/": "exclude"}), encoding="utf-8")
    inner = tmp_path / "notes"
    inner.mkdir()
    first = load_context_settings(inner)
    assert first.mode_for("diary/a.md") == "exclude" and first.mode_for("private/a.md") == "auto"
    assert load_context_settings(inner) is first
    (inner / ".context_settings.json").write_text(json.dumps({"private/": "exclude"}), encoding="utf-8")
    later = load_context_settings(inner)
    assert later.mode_for("private/a.md") == "exclude" and later.mode_for("diary/a.md") == "exclude"
    assert load_context_settings(inner) is later


def _notes_linked_into_a_project(tmp_path: Path) -> tuple[Path, Path]:
    """(the project `proj`, whose `notes` links to a folder `elsewhere` holding a diary `proj` excludes; elsewhere)."""
    elsewhere = make_project(
        tmp_path,
        {"pub.md": "# Pub\n\nThe harbor.\n", "diary/a.md": "# Diary\n\nMy zanzibarite affair.\n"},
        name="elsewhere",
    )
    outer = make_project(tmp_path, {".context_settings.json": json.dumps({"notes/diary/": "exclude"})}, name="proj")
    (outer / ".saipling").mkdir()
    (outer / "notes").symlink_to(elsewhere, target_is_directory=True)
    return outer, elsewhere


def test_a_folder_served_through_a_link_keeps_the_exclusions_of_the_project_it_is_linked_into(tmp_path: Path) -> None:
    """`PROJECT/notes` a link to a folder elsewhere: the project opens it resolved, outside PROJECT, and the walk up
    from there never met PROJECT's `.context_settings.json` (the review of attacker pass 6's fix). The folders
    above the path it was opened by count too."""
    outer, elsewhere = _notes_linked_into_a_project(tmp_path)
    with open_project(outer / "notes") as project:
        project.index()
        assert project.root == elsewhere.resolve()
        assert project.search({"query": "zanzibarite"})["results"] == []
        assert [r["filePath"] for r in project.search({"query": "harbor"})["results"]] == ["pub.md"]


def test_an_outer_settings_file_that_links_to_nothing_fails_closed(tmp_path: Path) -> None:
    """A project above whose `.context_settings.json` is a dangling link cannot be read: everything is excluded (as
    for the project's own file), not nothing."""
    from saipling.files.context_settings import load_context_settings

    (tmp_path / ".saipling").mkdir()
    (tmp_path / ".context_settings.json").symlink_to(tmp_path / "gone.json")
    inner = tmp_path / "notes"
    inner.mkdir()
    assert load_context_settings(inner).mode_for("pub.md") == "exclude"


@pytest.mark.parametrize("spelt_by", ["argument", "working folder"])
def test_the_cli_keeps_the_exclusions_of_the_project_a_linked_root_is_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spelt_by: str
) -> None:
    """`saipling index PROJECT/notes` (or run from `cd PROJECT/notes`, $PWD spelling the link): the CLI resolved the
    root before `Project.open` saw it, so the path through the link was never remembered and the diary PROJECT
    excludes was indexed and found (each command is its own process: the spellings start empty)."""
    from click.testing import CliRunner

    from saipling.cli.main import main
    from saipling.files import context_settings

    outer, elsewhere = _notes_linked_into_a_project(tmp_path)
    linked = outer / "notes"
    root = [str(linked)] if spelt_by == "argument" else []
    if spelt_by == "working folder":
        monkeypatch.chdir(linked)
        monkeypatch.setenv("PWD", str(linked))

    def run(*args: str) -> dict:
        monkeypatch.setattr(context_settings, "_spellings", {})
        done = CliRunner().invoke(main, list(args), catch_exceptions=False)
        assert done.exit_code == 0, done.output
        return json.loads(done.stdout)

    run("index", *root, "--provider", "none", "--json")
    found = run("search", "zanzibarite", *(["--root", str(linked)] if root else []), "--json")
    assert found["results"] == []
    assert [
        r["filePath"] for r in run("search", "harbor", *(["--root", str(linked)] if root else []), "--json")["results"]
    ] == ["pub.md"]

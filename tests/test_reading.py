"""`get` (SPEC 10): line ranges read from disk, confined to the project root and to indexable files."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fixtures import make_project, open_project, write_file
from saipling.errors import InvalidRequest, PathOutsideRoot

POEM = "".join(f"line {n}\n" for n in range(1, 11))


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Any]:
    root = make_project(
        tmp_path,
        {
            "notes/poem.md": POEM,
            "notes/crlf.md": "one\r\ntwo\r\nthree\r\n",
            "notes/no-newline.md": "first\nlast",
            "notes/bom.md": "\ufeff# Title\nbody\n",
            "notes/binary.md": b"# x\x00\x01\x02",
            "notes/.hidden.md": "hidden\n",
            "node_modules/pkg/readme.md": "vendored\n",
            "drafts/skip.md": "excluded by config\n",
            "skills/writer.toml": "[context]\n",
        },
    )
    outside = make_project(tmp_path, {"secret.md": "outside the root\n", "dir/inner.md": "also outside\n"}, "outside")
    os.symlink(outside / "secret.md", root / "notes/escape.md")
    os.symlink(outside / "dir", root / "linked-dir")
    os.symlink(root / "notes/poem.md", root / "notes/alias.md")
    with open_project(root, exclude=["drafts/**"]) as p:
        p.index()
        yield p


def test_line_ranges(project: Any) -> None:
    whole = project.get({"path": "notes/poem.md"})
    assert whole == {
        "path": "notes/poem.md",
        "startLine": 1,
        "endLine": 10,
        "totalLines": 10,
        "text": POEM.rstrip("\n"),
    }
    part = project.get({"path": "notes/poem.md", "startLine": 3, "lines": 2})
    assert (part["text"], part["startLine"], part["endLine"]) == ("line 3\nline 4", 3, 4)
    tail = project.get({"path": "notes/poem.md", "startLine": 9, "lines": 50})
    assert (tail["text"], tail["endLine"]) == ("line 9\nline 10", 10)
    with pytest.raises(InvalidRequest) as info:  # past the end: refused (it was endLine < startLine)
        project.get({"path": "notes/poem.md", "startLine": 11})
    assert info.value.field == "startLine" and "10 lines" in str(info.value)
    assert project.get({"path": "notes/crlf.md", "startLine": 2, "lines": 1})["text"] == "two"
    assert project.get({"path": "notes/crlf.md"})["totalLines"] == 3
    assert project.get({"path": "notes/no-newline.md", "startLine": 2})["text"] == "last"
    assert project.get({"path": "notes/bom.md", "lines": 1})["text"] == "# Title"


def test_path_forms_inside_the_root(project: Any) -> None:
    for form in (
        "notes/poem.md",
        "./notes/poem.md",
        "notes\\poem.md",
        "notes/../notes/poem.md",
        str(project.root / "notes/poem.md"),
        (project.root / "notes/poem.md").as_uri(),
    ):
        got = project.get({"path": form, "startLine": 2, "lines": 1})
        assert (got["path"], got["text"]) == ("notes/poem.md", "line 2"), form
    assert project.get({"uri": (project.root / "notes/poem.md").as_uri(), "lines": 1})["text"] == "line 1"
    # a symlink that stays inside the root resolves to its target
    assert project.get({"path": "notes/alias.md", "lines": 1}) | {"text": ""} == {
        "path": "notes/poem.md",
        "startLine": 1,
        "endLine": 1,
        "totalLines": 10,
        "text": "",
    }


@pytest.mark.parametrize(
    "path",
    [
        "../outside/secret.md",
        "notes/../../outside/secret.md",
        "..\\outside\\secret.md",
        "notes/escape.md",  # symlink to a file outside the root
        "linked-dir/inner.md",  # symlinked folder outside the root
        "/etc/passwd",
        "file:///etc/passwd",
    ],
)
def test_escapes_are_path_outside_root(project: Any, path: str) -> None:
    with pytest.raises(PathOutsideRoot) as info:
        project.get({"path": path})
    assert info.value.field == "path"


def test_absolute_paths_outside_the_root(project: Any, tmp_path: Path) -> None:
    for path in (
        str(tmp_path / "outside/secret.md"),
        (tmp_path / "outside/secret.md").as_uri(),
        str(tmp_path),
    ):
        with pytest.raises(PathOutsideRoot):
            project.get({"path": path})


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        (".saipling/index.db", "hidden"),
        (".saipling/../.saipling/index.db", "hidden"),
        ("notes/.hidden.md", "hidden"),
        (".context_settings.json", "hidden"),
        ("node_modules/pkg/readme.md", "node_modules"),
        ("skills/writer.toml", "not included"),
        ("drafts/skip.md", "excluded by config"),
        ("notes", "not included"),
        ("", None),
    ],
)
def test_files_that_are_not_indexable(project: Any, path: str, reason: str | None) -> None:
    with pytest.raises(InvalidRequest) as info:
        project.get({"path": path})
    assert info.value.field == "path"
    if reason:
        assert isinstance(info.value, PathOutsideRoot) and reason in str(info.value)


@pytest.mark.parametrize(
    "path", ["notes/nope.md", "notes/binary.md", "notes/a\x00b.md", "\ud800.md", "x" * 5000 + ".md"]
)
def test_missing_binary_or_unusable_paths(project: Any, path: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        project.get({"path": path})
    assert info.value.field == "path"


def test_directory_named_like_a_markdown_file(project: Any) -> None:
    (project.root / "folder.md").mkdir()
    with pytest.raises(InvalidRequest, match="folder.md is not a regular file"):
        project.get({"path": "folder.md"})


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({}, "path"),
        ({"path": 3}, "path"),
        ({"path": ["a.md"]}, "path"),
        ({"path": "notes/poem.md", "startLine": 0}, "startLine"),
        ({"path": "notes/poem.md", "startLine": "2"}, "startLine"),
        ({"path": "notes/poem.md", "startLine": True}, "startLine"),
        ({"path": "notes/poem.md", "lines": 0}, "lines"),
        ({"path": "notes/poem.md", "lines": "3"}, "lines"),
        ({"path": "notes/poem.md", "lines": 2.0}, "lines"),
    ],
)
def test_parameter_validation(project: Any, params: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        project.get(params)
    assert info.value.field == field


def test_reads_the_disk_not_the_index(project: Any) -> None:
    write_file(project.root, "notes/poem.md", "changed\n")
    assert project.get({"path": "notes/poem.md"})["text"] == "changed"
    write_file(project.root, "notes/new.md", "never indexed\n")
    assert project.get({"path": "notes/new.md"})["text"] == "never indexed"


def test_a_file_over_max_file_bytes_is_refused_not_read(project: Any) -> None:
    (project.root / "notes" / "huge.md").write_text("# Huge\n\n" + "word " * 2_000_000, encoding="utf-8")
    with pytest.raises(InvalidRequest, match=r"notes/huge.md is too large \(\d+ bytes > maxFileBytes 5242880\)"):
        project.get({"path": "notes/huge.md", "lines": 2})

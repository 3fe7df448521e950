"""Lazy sync (`live.freshness.LazySync`, what `saipling mcp` runs before each call): every kind of change on disk is
indexed by the next sync, and a sync with nothing to do reads no file."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fixtures import bump_mtime, make_project, open_project, write_file
from saipling.live.freshness import LazySync, folder_mtimes

FILLER = "is the word this file is about, in a sentence long enough to make a chunk of its own."


@pytest.fixture
def synced(tmp_path: Path) -> Iterator[tuple[Path, Any, LazySync]]:
    root = make_project(
        tmp_path,
        {
            "a.md": f"# A\n\nalpha {FILLER}\n",
            "sub/b.md": f"# B\n\nbravo {FILLER}\n",
            "empty/.keep": "",
            "node_modules/x.md": "# X\n",
        },
    )
    (root / "hollow").mkdir()
    with open_project(root) as project:
        project.index()
        sync = LazySync(project)
        assert sync.sync() is None  # in step: nothing to index
        yield root, project, sync


def words_of(project: Any, word: str) -> list[str]:
    return [r["filePath"] for r in project.search({"query": word, "mode": "lexical"})["results"]]


def test_nothing_changed_reads_nothing(synced: tuple[Path, Any, LazySync], monkeypatch) -> None:
    root, project, sync = synced
    monkeypatch.setattr(project, "index", lambda **kw: pytest.fail("indexed with nothing changed"))
    assert sync.sync() is None and sync.changed_paths() == []


@pytest.mark.parametrize(
    "change",
    [
        "edit",
        "same-size-edit",
        "new-file",
        "new-file-in-empty-folder",
        "new-file-in-new-folder",
        "delete",
        "rename",
        "move-to-folder",
    ],
)
def test_every_change_is_indexed_by_the_next_sync(synced: tuple[Path, Any, LazySync], change: str) -> None:
    root, project, sync = synced
    expect: dict[str, list[str]] = {}
    if change == "edit":
        write_file(root, "a.md", f"# A\n\nalpha zeppelin {FILLER}\n")
        expect = {"zeppelin": ["a.md"]}
    elif change == "same-size-edit":
        write_file(root, "a.md", f"# A\n\nomega {FILLER}\n")
        bump_mtime(root / "a.md")
        expect = {"omega": ["a.md"], "alpha": []}
    elif change == "new-file":
        write_file(root, "c.md", f"# C\n\ncharlie {FILLER}\n")
        expect = {"charlie": ["c.md"]}
    elif change == "new-file-in-empty-folder":
        write_file(root, "hollow/d.md", f"# D\n\ndelta {FILLER}\n")
        expect = {"delta": ["hollow/d.md"]}
    elif change == "new-file-in-new-folder":
        write_file(root, "deep/er/e.md", f"# E\n\necho {FILLER}\n")
        expect = {"echo": ["deep/er/e.md"]}
    elif change == "delete":
        (root / "sub/b.md").unlink()
        expect = {"bravo": []}
    elif change == "rename":
        os.rename(root / "sub/b.md", root / "sub/b2.md")
        expect = {"bravo": ["sub/b2.md"]}
    elif change == "move-to-folder":
        os.rename(root / "sub", root / "moved")
        expect = {"bravo": ["moved/b.md"]}
    summary = sync.sync()
    assert summary is not None
    for word, paths in expect.items():
        assert words_of(project, word) == paths, word
    assert sync.sync() is None  # and then in step again


def test_a_file_that_cannot_be_indexed_is_retried_only_after_it_changes(
    synced: tuple[Path, Any, LazySync], monkeypatch
) -> None:
    root, project, sync = synced
    write_file(root, "bin.md", b"\x00\x01\x02binary\x00" * 50)
    assert sync.sync() is not None and "bin.md" not in project.store.file_states()
    calls: list[Any] = []
    real_index = project.index
    monkeypatch.setattr(project, "index", lambda **kw: calls.append(kw) or real_index(**kw))
    assert sync.sync() is None and calls == []
    write_file(root, "bin.md", f"# Now text\n\nfoxtrot {FILLER}\n")
    assert sync.sync() is not None and words_of(project, "foxtrot") == ["bin.md"]


def test_a_file_too_large_that_shrinks_is_indexed(tmp_path: Path) -> None:
    root = make_project(tmp_path, {"a.md": f"# A\n\nalpha {FILLER}\n", "big.md": "# Big\n\n" + "golf " * 400})
    with open_project(root, max_file_bytes=1000) as project:
        project.index()
        sync = LazySync(project)
        sync.sync()
        assert words_of(project, "golf") == []
        write_file(root, "big.md", f"# Big\n\ngolf {FILLER}\n")
        sync.sync()
        assert words_of(project, "golf") == ["big.md"]


def test_an_index_changed_by_another_process_is_checked_again(synced: tuple[Path, Any, LazySync]) -> None:
    root, project, sync = synced
    project.clear()  # as `saipling clear` in another process would
    assert sync.sync() is not None and words_of(project, "alpha") == ["a.md"]


def test_folder_mtimes_skips_what_the_scanner_skips(tmp_path: Path) -> None:
    root = make_project(tmp_path, {"a/x.md": "x", ".hidden/y.md": "y", "node_modules/z.md": "z"})
    (root / "link").symlink_to(root / "a")
    assert set(folder_mtimes(str(root))) == {str(root), str(root / "a")}


def test_a_file_that_cannot_be_opened_is_not_pending_forever_but_tried_once_readable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Permission denied (simulated: the tests may run as root, who reads anything): the file is remembered, so a
    one-shot command does not list it as changed at every run; once readable (a chmod keeps its mtime) it is."""
    from saipling.indexing import text_phase as index_text
    from saipling.live import unindexable
    from saipling.live.freshness import changed_on_disk

    root = make_project(tmp_path, {"a.md": "# A\n\nThe harbour.\n", "b.md": "# B\n\nThe locked diary.\n"})
    real_read = index_text.read_regular

    def denied(path: Path) -> bytes:
        if Path(path).name == "b.md":
            raise PermissionError(13, "Permission denied")
        return real_read(path)

    monkeypatch.setattr(index_text, "read_regular", denied)
    with open_project(root) as p:
        summary = p.index()
        assert ("b.md", "unreadable (Permission denied)") in summary.skipped
        readable = {"b.md": False}
        real_access = os.access
        monkeypatch.setattr(
            unindexable.os, "access", lambda f, m: readable.get(Path(f).name, True) and real_access(f, m)
        )
        assert changed_on_disk(p) == []  # not "changed" at every command while it stays unreadable
        readable["b.md"] = True  # chmod +r: same mtime and size
        assert changed_on_disk(p) == ["b.md"]


def test_a_one_shot_check_reads_the_index_file_rows_once_and_still_finds_every_change(tmp_path: Path) -> None:
    """refresh_before_reading read every file's row twice (the emptiness check, then the comparison: ~10 ms a read at
    5,000 files, row S29); once now, and an edit, an addition and a deletion are all still brought in."""
    from saipling.live.freshness import refresh_before_reading

    root = make_project(tmp_path, {"a.md": "# A\n\nThe harbour.\n", "b.md": "# B\n\nThe diary.\n"})
    with open_project(root) as p:
        p.index()
        write_file(root, "a.md", "# A\n\nThe harbour at dusk, the lamps lit.\n")
        bump_mtime(root / "a.md")
        write_file(root, "c.md", "# C\n\nA new chapter.\n")
        (root / "b.md").unlink()
        reads: list[int] = []
        real = p.store.file_states
        p.store.file_states = lambda: reads.append(1) or real()  # type: ignore[method-assign]
        try:
            assert refresh_before_reading(p) is None
        finally:
            del p.store.file_states
        assert len(reads) == 1
        assert sorted(p.store.file_states()) == ["a.md", "c.md"]
        assert p.search({"query": "lamps", "mode": "lexical"})["results"][0]["filePath"] == "a.md"

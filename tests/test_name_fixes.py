"""The edits behind the name code actions (retrieval/name_fixes.py), applied and re-read: whatever shape a
profile's `aliases` has, the word joins them and the frontmatter still parses with every old alias kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixtures import novel_project, open_project
from saipling.files.metadata import split_frontmatter
from saipling.retrieval.name_fixes import TextChange, alias_change


def apply(text: str, c: TextChange) -> str:
    lines = text.split("\n")

    def offset(line: int, col: int) -> int:
        return sum(len(x) + 1 for x in lines[:line]) + col

    return text[: offset(c.line, c.col)] + c.text + text[offset(c.end_line, c.end_col) :]


@pytest.mark.parametrize(
    ("profile", "aliases"),
    [
        ("---\nname: Dorman Vale\naliases: [Dorm, The Vale]\ntype: character\n---\n# Dorman\n", ["Dorm", "The Vale"]),
        ("---\nname: Dorman Vale\naliases: []\n---\nBody.\n", []),
        ("---\nname: Dorman Vale\naliases:\n  - Dorm\n  - The Vale\ntype: character\n---\n", ["Dorm", "The Vale"]),
        ("---\nname: Dorman Vale\naliases: Dorm\n---\n", ["Dorm"]),
        ("---\nname: Dorman Vale\naliases:\ntype: character\n---\n", []),
        ("---\nname: Dorman Vale\ntype: character\n---\n# Dorman\n", []),
        ("# Dorman Vale\n\nNo frontmatter at all.\n", []),
    ],
)
def test_alias_change_adds_the_word_and_keeps_the_rest(profile: str, aliases: list[str]) -> None:
    edited = apply(profile, alias_change(profile, "Dormaan"))
    fm, _, _ = split_frontmatter(edited)
    found = fm["aliases"] if isinstance(fm["aliases"], list) else [fm["aliases"]]
    assert found == [*aliases, "Dormaan"], edited
    assert edited.split("---\n")[-1] == profile.split("---\n")[-1]  # the body is untouched


def test_a_costly_vocabulary_is_reused_but_changed_names_always_count(tmp_path: Path) -> None:
    """On a large project the vocabulary (a pass over the whole index) is not read again after every save; a
    change of entity names (an alias added) still makes new lists at once, and once the wait is over a new
    misspelling is found."""
    from saipling.retrieval import name_fixes

    root = novel_project(tmp_path)
    scene = root / "books/book-01/phase-1-setup/ch-05/scene-01.md"
    profile = root / "characters/mina-harker/profile.md"
    with open_project(root) as p:
        p.index()
        assert set(name_fixes.project_lists(p).drift) == {"Minal"}
        name_fixes._passes[id(p)].cost = 3600.0  # as if the pass had taken an hour
        scene.write_text("# Five\n\nLucy wrote to Minna.\n", encoding="utf-8")
        p.refresh([scene.relative_to(root).as_posix()])
        assert set(name_fixes.project_lists(p).drift) == {"Minal"}  # the last pass's vocabulary
        profile.write_text(profile.read_text(encoding="utf-8").replace("Madam Mina]", "Madam Mina, Minal]"))
        p.refresh([profile.relative_to(root).as_posix()])
        assert set(name_fixes.project_lists(p).drift) == set()  # a name now: gone at once
        name_fixes._passes[id(p)].cost = 0.0
        assert set(name_fixes.project_lists(p).drift) == {"Minna"}


def test_name_diagnostics_setting_takes_a_severity_or_off(tmp_path: Path) -> None:
    from saipling.config.settings import load_settings

    settings, warnings = load_settings(tmp_path, env={}, init_options={"nameDiagnostics": "warning"})
    assert settings.name_diagnostics == "warning" and warnings == []
    settings, warnings = load_settings(tmp_path, env={}, init_options={"nameDiagnostics": "loud"})
    assert settings.name_diagnostics == "hint" and any("nameDiagnostics" in w and "loud" in w for w in warnings)


def test_a_request_never_waits_for_a_pass_over_the_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Code actions run on a request's worker: with wait=False the lists come as they stand: none while no pass
    has run (the vocabulary is not read on that worker), the last ones while another thread holds a pass."""
    import threading

    from saipling.retrieval import name_fixes

    root = novel_project(tmp_path)
    with open_project(root) as p:
        p.index()
        name_fixes._passes.pop(id(p), None)
        real = name_fixes.vocabulary
        monkeypatch.setattr(name_fixes, "vocabulary", lambda project: pytest.fail("read on a request's worker"))
        assert name_fixes.project_lists(p, wait=False) == name_fixes.Lists({}, set())
        monkeypatch.setattr(name_fixes, "vocabulary", real)
        assert set(name_fixes.project_lists(p).drift) == {"Minal"}  # a pass (the background thread's)
        held, release = threading.Event(), threading.Event()

        def pass_in_progress() -> None:
            with name_fixes._passes_lock:
                held.set()
                release.wait(30)

        other = threading.Thread(target=pass_in_progress)
        other.start()
        try:
            assert held.wait(10)
            assert set(name_fixes.project_lists(p, wait=False).drift) == {"Minal"}  # at once, the last lists
        finally:
            release.set()
            other.join()


def test_lists_older_than_the_index_say_when_they_may_be_made_again(tmp_path: Path) -> None:
    """A misspelling saved within the wait after a pass got the last pass's lists, and no publish came after the
    wait (a writer who saved soon after opening never saw the hint): reread_due_in tells the server when to
    publish again, and None once the lists are current."""
    from saipling.retrieval import name_fixes

    root = novel_project(tmp_path)
    scene = root / "books/book-01/phase-1-setup/ch-05/scene-01.md"
    with open_project(root) as p:
        p.index()
        name_fixes.project_lists(p)
        assert name_fixes.reread_due_in(p) is None  # current
        name_fixes._passes[id(p)].cost = 3600.0
        scene.write_text("# Five\n\nLucy wrote to Minna.\n", encoding="utf-8")
        p.refresh([scene.relative_to(root).as_posix()])
        assert "Minna" not in name_fixes.project_lists(p).drift  # the last pass's lists ...
        assert 30_000 < (name_fixes.reread_due_in(p) or 0) <= 36_000  # ... made again in about ten hours
        name_fixes._passes[id(p)].cost = 0.0
        assert name_fixes.reread_due_in(p) == 0.0  # due now
        assert "Minna" in name_fixes.project_lists(p).drift and name_fixes.reread_due_in(p) is None


def test_a_document_without_name_diagnostics_never_sets_a_timer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only an excluded document open, after a pass and an index change: its diagnostics read no lists, so the
    lists stayed stale and each publish set a timer for the next, 20 a second for ever (a review's finding)."""
    import json as _json
    from types import SimpleNamespace

    from saipling.lsp.features import name_diagnostics as nd
    from saipling.retrieval import name_fixes

    root = novel_project(tmp_path)
    (root / ".context_settings.json").write_text(_json.dumps({"secret/": "exclude"}), encoding="utf-8")
    (root / "secret").mkdir()
    (root / "secret/n.md").write_text("# Secret\n\nLucy.\n", encoding="utf-8")
    scene = root / "books/book-01/phase-1-setup/ch-05/scene-01.md"
    with open_project(root) as p:
        p.index()
        name_fixes.project_lists(p)
        scene.write_text("# Five\n\nLucy wrote to Minna.\n", encoding="utf-8")
        p.refresh([scene.relative_to(root).as_posix()])
        assert name_fixes.reread_due_in(p) is not None  # (the lists are stale)
        folder = SimpleNamespace(project=p, accepts=lambda rel: True)
        posted: list[object] = []
        ls = SimpleNamespace(stopping=False, name_timers={}, post=lambda *a: posted.append(a))
        ls.text_document_publish_diagnostics = None
        monkeypatch.setattr(nd, "locate", lambda _ls, uri: (folder, uri.rsplit("/root/", 1)[-1]))
        monkeypatch.setattr(nd, "document_diagnostics", lambda _ls, uri: [])
        nd._publish_all(ls, ["file:///root/secret/n.md"])
        assert len(posted) == 1 and ls.name_timers == {}
        nd._publish_all(ls, ["file:///root/books/book-01/phase-1-setup/ch-05/scene-01.md"])  # (a shown one)
        assert len(ls.name_timers) == 1
        for t in ls.name_timers.values():
            t.cancel()

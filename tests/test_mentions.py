"""Entity mentions stored at index time (issue 35): per chapter counts, first and last appearance, chapters
since last seen, kept current by a refresh and by an entity's new name; the files an entity knows (knownBy)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixtures import NOVEL_MENTIONS, novel_project, open_project, write_file
from saipling.errors import InvalidRequest
from saipling.retrieval import mentions

SCENE = "books/book-01/phase-1-setup/ch-{:02d}/scene-01.md"


def counts(report: mentions.MentionReport) -> dict[int, int]:
    return {int(c.chapter.removeprefix("ch-")): c.count for c in report.chapters}


def test_counts_first_last_and_since_match_the_hand_checked_list(tmp_path: Path) -> None:
    with open_project(novel_project(tmp_path)) as p:
        p.index()
        assert p.store.mentions_of(list(NOVEL_MENTIONS))  # stored by the index run itself
        for path, expected in NOVEL_MENTIONS.items():
            (report,) = mentions.report(p, path)
            assert report.entity.path == path
            assert counts(report) == expected
            assert report.total == sum(expected.values())
            assert report.other_files == {path: 1}  # its own page's heading
            first, last = min(expected), max(expected)
            assert report.first is not None and report.first.chapter == f"ch-{first:02d}"
            assert report.last is not None and report.last.chapter == f"ch-{last:02d}"
            assert report.chapters_since_last_seen == 5 - last
        (mina,) = mentions.report(p, "MINA", limit=100)  # any case, any of its names
        assert mina.first is not None and (mina.first.path, mina.first.line) == (SCENE.format(2), 6)
        assert mina.summary() == "first ch-02 l.6 · 4 mentions in 3 chapters · last seen ch-04 (1 chapter ago)"
        surfaces = {m["surface"] for m in mina.to_dict()["mentions"]}
        assert surfaces == {"Mina", "Mina Harker", "Madam Mina"}


def test_an_unknown_name_is_a_clear_error(tmp_path: Path) -> None:
    with open_project(novel_project(tmp_path)) as p:
        p.index()
        with pytest.raises(InvalidRequest, match="Lucy"):
            mentions.report(p, "Lucy")


def test_a_refresh_keeps_mentions_current_and_a_deleted_file_takes_its_mentions(tmp_path: Path) -> None:
    root = novel_project(tmp_path)
    with open_project(root) as p:
        p.index()
        write_file(root, SCENE.format(5), "---\npov: Lucy\n---\n# Chapter 5\n\nLucy saw Mina's shadow. Mina!\n")
        p.refresh([SCENE.format(5)])
        (mina,) = mentions.report(p, "Mina")
        assert counts(mina) == {2: 1, 3: 2, 4: 1, 5: 2} and mina.chapters_since_last_seen == 0
        (root / SCENE.format(3)).unlink()
        p.refresh([SCENE.format(3)])
        (mina,) = mentions.report(p, "Mina")
        assert counts(mina) == {2: 1, 4: 1, 5: 2}


def test_a_new_alias_finds_the_mentions_already_indexed(tmp_path: Path) -> None:
    root = novel_project(tmp_path)
    write_file(root, SCENE.format(5), "---\npov: Lucy\n---\n# Chapter 5\n\nLucy wrote to Wilhelmina.\n")
    with open_project(root) as p:
        p.index()
        profile = "characters/mina-harker/profile.md"
        text = (root / profile).read_text().replace("[Mina, Madam Mina]", "[Mina, Madam Mina, Wilhelmina]")
        write_file(root, profile, text)
        p.refresh([profile])  # only the profile changed: chapter 5 is scanned again for the new name
        (mina,) = mentions.report(p, "Wilhelmina")
        assert counts(mina) == {2: 1, 3: 2, 4: 1, 5: 1}


def test_an_index_made_before_mentions_is_scanned_on_first_use(tmp_path: Path) -> None:
    with open_project(novel_project(tmp_path)) as p:
        p.index()
        with p.store.atomic():  # (as the SQLite index was before it stored mentions)
            p.store.conn.execute("DELETE FROM mentions")
            p.store.conn.execute("DELETE FROM mention_files")
        (mina,) = mentions.report(p, "Mina")
        assert mina.total == 4


def test_known_paths_are_pov_scenes_and_mentions(tmp_path: Path) -> None:
    with open_project(novel_project(tmp_path)) as p:
        p.index()
        known = mentions.known_paths(p, "Mina Harker")
        assert sorted(k for k in known if k.startswith("books/")) == [SCENE.format(n) for n in (2, 3, 4)]
        jonathan = mentions.known_paths(p, "Jonathan")
        assert sorted(k for k in jonathan if k.startswith("books/")) == [SCENE.format(n) for n in (1, 2)]
        with pytest.raises(InvalidRequest, match="knownBy"):
            mentions.known_paths(p, "Lucy")  # not an entity: fail closed


def test_chapters_since_last_seen_count_within_the_book(tmp_path: Path) -> None:
    root = novel_project(tmp_path)
    for n in range(1, 4):  # a second book, without Mina
        write_file(root, f"books/book-02/phase-1/ch-{n:02d}/scene-01.md", f"# Book two, {n}\n\nRain.\n")
    with open_project(root) as p:
        p.index()
        (mina,) = mentions.report(p, "Mina")
        assert mina.last is not None and mina.last.chapter == "book-01/ch-04"
        assert mina.chapters_since_last_seen == 1 and mina.chapter_total == 8


def test_a_dropped_alias_and_a_deleted_profile_take_their_mentions_and_only_those(tmp_path: Path) -> None:
    root = novel_project(tmp_path)
    with open_project(root) as p:
        p.index()
        profile = "characters/mina-harker/profile.md"
        write_file(root, profile, (root / profile).read_text().replace("[Mina, Madam Mina]", "[Madam Mina]"))
        p.refresh([profile])
        (mina,) = mentions.report(p, "Mina Harker")
        assert counts(mina) == {4: 1}  # "Madam Mina" only: a bare "Mina" is no longer a name of hers
        (jonathan,) = mentions.report(p, "Jonathan")
        assert counts(jonathan) == {1: 1, 2: 2}  # untouched by her change
        (root / "characters/count-dracula/profile.md").unlink()
        p.refresh(["characters/count-dracula/profile.md"])
        assert p.store.mention_paths(["characters/count-dracula/profile.md"]) == []
        with pytest.raises(InvalidRequest):
            mentions.report(p, "the Count")

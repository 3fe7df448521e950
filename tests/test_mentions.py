"""Entity mentions stored at index time (issue 35): per chapter counts, first and last appearance, chapters
since last seen, kept current by a refresh and by an entity's new name; the files an entity knows (knownBy)."""

from __future__ import annotations

import json
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


def test_the_counts_kept_per_file_agree_with_the_mentions_through_every_change(tmp_path: Path) -> None:
    """The report reads one row per file (counts kept at index time) and a page of mentions: after an index run,
    an edit, a new chapter and a deletion, the counts equal the mentions', and a short page is the long one's
    start."""
    root = novel_project(tmp_path)

    def check(p: object) -> None:
        for path in NOVEL_MENTIONS:
            every = p.store.mentions_of([path])  # type: ignore[attr-defined]
            kept = {c.path: (c.count, c.first_line, c.last_line) for c in p.store.mention_counts([path])}  # type: ignore[attr-defined]
            want: dict[str, tuple[int, int, int]] = {}
            for m in every:
                n, first, last = want.get(m.path, (0, m.line, m.line))
                want[m.path] = (n + 1, min(first, m.line), max(last, m.line))
            assert kept == want and kept
            (long,) = mentions.report(p, path, limit=1000)  # type: ignore[arg-type]
            (short,) = mentions.report(p, path, limit=2)  # type: ignore[arg-type]
            assert len(long.mentions) == sum(n for n, _, _ in want.values())
            assert short.mentions == long.mentions[:2] and short.total == long.total

    with open_project(root) as p:
        p.index()
        check(p)
        write_file(root, SCENE.format(3), "# Chapter 3\n\nJonathan, Mina and Madam Mina.\n\nMina again.\n")
        write_file(root, SCENE.format(6), "# Chapter 6\n\nMina Harker and the Count.\n")
        p.refresh([SCENE.format(3), SCENE.format(6)])
        check(p)
        (mina,) = mentions.report(p, "Mina")
        assert counts(mina)[3] == 3 and counts(mina)[6] == 1
        (root / SCENE.format(2)).unlink()
        p.refresh([SCENE.format(2)])
        check(p)
        assert 2 not in counts(mentions.report(p, "Mina")[0])


def test_an_index_made_before_the_counts_were_kept_gets_them_when_opened(tmp_path: Path) -> None:
    root = novel_project(tmp_path)
    with open_project(root) as p:
        p.index()
        before = [r.to_dict() for path in NOVEL_MENTIONS for r in mentions.report(p, path, limit=100)]
        with p.store.atomic():  # (as the SQLite index was at schema 6: mentions but no counts)
            p.store.conn.execute("DROP TABLE mention_counts")
            p.store.conn.execute("PRAGMA user_version=6")
    mentions.clear_reports()
    with open_project(root) as p:
        after = [r.to_dict() for path in NOVEL_MENTIONS for r in mentions.report(p, path, limit=100)]
        assert after == before and all(r["total"] for r in after)


def test_the_chapter_order_follows_new_and_renumbered_chapters(tmp_path: Path) -> None:
    """The manuscript's chapters are read again only when a chapter file changed; a text edit keeps them, a new
    chapter or a new chapter number does not."""
    root = novel_project(tmp_path)
    with open_project(root) as p:
        p.index()
        (mina,) = mentions.report(p, "Mina")
        total, since = mina.chapter_total, mina.chapters_since_last_seen
        write_file(root, SCENE.format(1), (root / SCENE.format(1)).read_text() + "\nThe wind rose.\n")
        p.refresh([SCENE.format(1)])
        (mina,) = mentions.report(p, "Mina")
        assert (mina.chapter_total, mina.chapters_since_last_seen) == (total, since)
        write_file(root, SCENE.format(7), "# Chapter 7\n\nFog.\n")
        p.refresh([SCENE.format(7)])
        (mina,) = mentions.report(p, "Mina")
        assert (mina.chapter_total, mina.chapters_since_last_seen) == (total + 1, since + 1)
        (horizon,) = mentions.report(p, "Mina", max_chapter=3)
        assert max(counts(horizon)) == 3
        assert counts(horizon)[2] == 1
        write_file(root, "books/book-01/drafts/late.md", "---\nchapter: 9\n---\n# Late\n\nMina, at last.\n")
        p.refresh(["books/book-01/drafts/late.md"])
        (horizon,) = mentions.report(p, "Mina", max_chapter=3)
        assert counts(horizon)[2] == 1  # chapter 9: past the horizon
        write_file(root, "books/book-01/drafts/late.md", "---\nchapter: 2\n---\n# Late\n\nMina, at last.\n")
        p.refresh(["books/book-01/drafts/late.md"])
        (horizon,) = mentions.report(p, "Mina", max_chapter=3)
        assert counts(horizon)[2] == 2  # renumbered into chapter 2


def test_an_excluded_chapter_leaves_the_report_and_comes_back_when_the_exclusion_goes(tmp_path: Path) -> None:
    """`.context_settings.json` exclusions apply to every report, also when the per-file checks are kept between
    requests: an exclusion written, changed, then removed changes the next answer each time."""
    root = novel_project(tmp_path)
    with open_project(root) as p:
        p.index()
        assert counts(mentions.report(p, "Mina")[0]) == {2: 1, 3: 2, 4: 1}
        write_file(root, ".context_settings.json", json.dumps({SCENE.format(3): "exclude"}))
        assert counts(mentions.report(p, "Mina")[0]) == {2: 1, 4: 1}
        write_file(root, ".context_settings.json", json.dumps({SCENE.format(4): "exclude", "x.md": "force"}))
        assert counts(mentions.report(p, "Mina")[0]) == {2: 1, 3: 2}
        (root / ".context_settings.json").unlink()
        assert counts(mentions.report(p, "Mina")[0]) == {2: 1, 3: 2, 4: 1}


def test_an_entity_another_process_stores_during_a_run_is_found_in_the_files_stored_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long run scans its batches with the entity rows it read (RunFinders); another process's refresh (an
    editor's save of a new profile) is no write of this process, so the run went on scanning without that entity
    and its mentions in every file stored afterwards were missing until the settle that ends the text phase. The
    rows are read again every REREAD_SECONDS: the files stored once that time has passed hold the mentions at
    once, and the run's end leaves every file with them."""
    import subprocess
    import sys
    import time

    from fixtures import make_project
    from saipling.indexing import mention_scan, text_phase

    monkeypatch.setattr(text_phase, "TEXT_BATCH_FILES", 5)
    monkeypatch.setattr(mention_scan, "REREAD_SECONDS", 0.2, raising=False)
    files = {f"books/ch-{i:03d}.md": f"# Chapter {i}\n\nZed walked to the harbor in chapter {i}.\n" for i in range(60)}
    files["characters/ann/profile.md"] = "---\nname: Ann\n---\n# Ann\n\nAnn is a sailor.\n"
    root = make_project(tmp_path, files)
    profile = "characters/zed/profile.md"
    other = (
        "import sys; from pathlib import Path; from saipling.project import Project\n"
        "p = Project.open(Path(sys.argv[1]), env={}, overrides={'provider': 'none'})\n"
        "try:\n    p.refresh([sys.argv[2]])\nfinally:\n    p.close()\n"
    )
    with open_project(root) as p:
        flush = p.indexer.text.flush
        batches: list[list[str]] = []
        seen: dict[int, set[str]] = {}  # batch number -> the files holding a mention of Zed then

        def flush_then_look(batch: list, summary: object) -> None:
            flush(batch, summary)
            batches.append([prep.record.path for prep in batch])
            if len(batches) == 3:  # another process stores a new profile between two batches of the run
                write_file(root, profile, "---\nname: Zed\n---\n# Zed\n\nZed is a fisherman.\n")
                subprocess.run([sys.executable, "-c", other, str(root), profile], check=True, timeout=60)
                time.sleep(0.3)
            seen[len(batches)] = {m.path for m in p.store.mentions_of([profile])}

        p.indexer.text.flush = flush_then_look  # type: ignore[method-assign]
        p.index()
        later = [path for batch in batches[3:] for path in batch if path.startswith("books/")]
        assert len(batches) >= 6 and later
        for n in range(4, len(batches) + 1):  # each batch stored after the other's write: its mentions are there
            assert {x for x in batches[n - 1] if x.startswith("books/")} <= seen[n], n
        scenes = {path for path in files if path.startswith("books/")}
        assert {m.path for m in p.store.mentions_of([profile])} >= scenes  # (the end of the run: every file)

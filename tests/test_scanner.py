"""Scanning (SPEC 2), decoding (textio) and metadata (SPEC 3), and the issue's bad-input list end to end."""

from __future__ import annotations

import codecs
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures import SAIPLING_MARKDOWN, kw, make_project, open_project, saipling_project, words, write_file
from saipling.config.settings import Settings
from saipling.files.metadata import extract_metadata, file_type_for, slugify, split_frontmatter
from saipling.files.scanner import is_indexable, scan
from saipling.files.textio import BinaryFile, decode

# -- scan --------------------------------------------------------------------------------------------------


@pytest.fixture
def messy(tmp_path: Path) -> Path:
    outside = make_project(tmp_path, {"secret.md": "# Secret\n\nOutside the project root entirely.\n"}, "outside")
    root = make_project(
        tmp_path,
        {
            "a.md": "# A\n\nThe first note of the project.\n",
            "empty.md": "",
            "sub/deep/b.md": "# B\n\nA nested note.\n",
            "img/cover.png": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
            "photo.JPG": b"\xff\xd8\xff\xe0",
            "settings.json": '{"a": 1}',
            "notes.txt": "plain text is not included",
            ".hidden/x.md": "# Hidden folder\n",
            ".draft.md": "# Hidden file\n",
            "node_modules/pkg/README.md": "# Package readme\n",
            "sub/node_modules/other/index.md": "# Nested package\n",
            "drafts/old.md": "# Old draft, excluded by config\n",
            "big.md": "# Big\n\n" + words(400) + "\n",
            ".saipling/config.toml": "",
            ".saipling/stray.md": "# never indexed\n",
            "team/handbook/.saipling/config.toml": "",  # an index of its own: the enclosing one takes it over
            "team/handbook/intro.md": "# Handbook\n",
            "venv/pyvenv.cfg": "home = /usr/bin\n",  # a Python environment: its packages' READMEs are no notes
            "venv/lib/python3.11/site-packages/pkg/README.md": "# A package\n",
        },
    )
    os.symlink(outside / "secret.md", root / "leak.md")
    os.symlink(outside, root / "linked-out")
    os.symlink(root / "a.md", root / "alias.md")  # stays inside: indexed once, under its real path
    os.symlink(root / "sub", root / "sub-again")  # a folder link inside the root
    os.symlink(root, root / "sub" / "loop")  # a loop back to the root
    os.symlink(root / "missing.md", root / "dangling.md")
    return root


def test_scan_applies_every_skip_rule(messy: Path) -> None:
    settings = Settings(exclude=["drafts/**"], max_file_bytes=1000)
    result = scan(messy, settings)
    rels = [e.rel for e in result.entries]
    assert rels == sorted(rels)
    # links whose target is inside the root are not followed: their targets are indexed under their real
    # paths (no file twice, no folder walked twice, no loop back to the root)
    assert rels == ["a.md", "empty.md", "sub/deep/b.md", "team/handbook/intro.md"]
    skipped = dict(result.skipped)
    assert skipped["alias.md"] == "symlink to a.md (indexed under its real path)"
    assert skipped["sub-again"] == "symlink to sub (indexed under its real path)"
    assert skipped["sub/loop"] == "symlink to . (indexed under its real path)"
    assert skipped["leak.md"] == "symlink leaves the project root"
    assert skipped["linked-out"] == "symlink leaves the project root"
    assert skipped[".hidden"] == "hidden"
    assert skipped[".draft.md"] == "hidden"
    assert skipped["node_modules"] == "node_modules"
    assert skipped["sub/node_modules"] == "node_modules"
    assert skipped["venv"] == "a Python environment"
    assert is_indexable(messy, "venv/lib/python3.11/site-packages/pkg/README.md", settings) == "a Python environment"
    assert skipped["drafts/old.md"] == "excluded by config"
    assert skipped["big.md"].startswith("too large")
    assert skipped["img/cover.png"] == "not included"
    assert skipped["photo.JPG"] == "not included"
    assert skipped["notes.txt"] == "not included"
    assert "includeJson" in skipped["settings.json"]
    assert skipped["dangling.md"].startswith("unreadable")
    # the index folder is neither indexed nor reported
    assert not any(p.startswith(".saipling") for p in [*rels, *skipped])
    # no path is both indexed and skipped, every path is relative with / separators
    assert not set(rels) & set(skipped)
    assert all(not p.startswith("/") and "\\" not in p for p in [*rels, *skipped])


def test_scan_entries_carry_stat(messy: Path) -> None:
    entry = next(e for e in scan(messy, Settings()).entries if e.rel == "a.md")
    st = (messy / "a.md").stat()
    assert (entry.mtime_ns, entry.size) == (st.st_mtime_ns, st.st_size)
    assert entry.corpus == "content"


def test_include_json_and_corpora(tmp_path: Path) -> None:
    root = make_project(tmp_path, {"cfg/app.json": "{}", "memory/2024-01-01.md": "# Day\n", "MEMORY.md": "# M\n"})
    settings = Settings(include_json=True, corpora={"memory": ["memory/**", "MEMORY.md"]})
    entries = {e.rel: e for e in scan(root, settings).entries}
    assert set(entries) == {"cfg/app.json", "memory/2024-01-01.md", "MEMORY.md"}
    assert entries["memory/2024-01-01.md"].corpus == "memory"
    assert entries["MEMORY.md"].corpus == "memory"
    assert entries["cfg/app.json"].corpus == "content"
    assert file_type_for("cfg/app.json") == "config"


def test_custom_include_and_windows_style_exclude(tmp_path: Path) -> None:
    root = make_project(tmp_path, {"docs/a.md": "# A\n", "other/b.md": "# B\n", "docs/private/c.md": "# C\n"})
    settings = Settings(include=["docs/**/*.md"], exclude=["docs\\private\\*"])
    result = scan(root, settings)
    assert [e.rel for e in result.entries] == ["docs/a.md"]
    assert dict(result.skipped)["docs/private/c.md"] == "excluded by config"


@pytest.mark.parametrize(
    ("rel", "reason"),
    [
        ("a.md", None),
        ("deep/x/y.md", None),
        (".git/x.md", "hidden"),
        ("a/.obsidian/b.md", "hidden"),
        (".saipling/x.md", "hidden"),
        ("node_modules/x.md", "node_modules"),
        ("a/node_modules/b/c.md", "node_modules"),
        ("pic.png", "not included"),
        ("drafts/x.md", "excluded by config"),
    ],
)
def test_is_indexable(rel: str, reason: str | None, tmp_path: Path) -> None:
    assert is_indexable(tmp_path, rel, Settings(exclude=["drafts/"])) == reason


def test_scan_of_empty_and_missing_roots(tmp_path: Path) -> None:
    assert scan(tmp_path, Settings()).entries == []
    missing = scan(tmp_path / "nope", Settings())
    assert missing.entries == [] and missing.skipped and "unreadable" in missing.skipped[0][1]


# -- textio ------------------------------------------------------------------------------------------------


def test_decode_utf8_and_bom() -> None:
    d = decode(codecs.BOM_UTF8 + "# Café\r\nLine two\r\n".encode())
    assert d.text == "# Café\nLine two\n" and d.encoding == "utf-8-sig" and d.warning is None
    d = decode("# naïve\n".encode())
    assert d.text == "# naïve\n" and d.encoding == "utf-8" and d.warning is None


@pytest.mark.parametrize(
    "text",
    [
        "# Caf\xe9\n",
        "na\xefve",
        "# Café\n\nLe garçon était naïve à Noël.\n",
        "# Über Straße\n\nGrüße aus München.\n",
        "Café au lait with résumé and a naïve piñata.\n",  # a single-byte detector read this as mac_latin2
        "— “Quoted” words… and 5 € in cp1252 punctuation.\n",
    ],
)
def test_decode_latin1_with_warning(text: str) -> None:
    d = decode(text.encode("cp1252"), "x.md")
    assert d.text == text
    assert d.warning and "not UTF-8" in d.warning and "x.md" in d.warning


def test_decode_other_detected_encodings() -> None:
    ru = "# Глава\n\nМаркус встретил сестру у гавани, и ночь была тихой.\n"
    assert decode(ru.encode("cp1251")).text == ru
    jp = "# 第一章\n\nマーカスは港で妹に会った。夜は静かだった。\n"
    assert decode(jp.encode("shift_jis")).text == jp


def test_decode_utf16_with_bom_is_text() -> None:
    d = decode("# Notepad\r\nSaved as Unicode: é\r\n".encode("utf-16"), "n.md")
    assert d.text == "# Notepad\nSaved as Unicode: é\n" and d.warning


@pytest.mark.parametrize(
    "data",
    [
        b"# a\x00b\n",
        b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
        bytes(range(1, 32)) * 50,
        b"\xff\xd8\xff\xe0\x00\x10JFIF",
    ],
)
def test_decode_binary_raises(data: bytes) -> None:
    with pytest.raises(BinaryFile):
        decode(data, "bin.md")


def test_text_with_tabs_form_feeds_and_escapes_is_not_binary() -> None:
    """Only control characters text never holds count as binary: tab, newline, vertical tab, form feed, CR and
    ESC (ANSI colour codes in a pasted log) do not, even when they are most of the file."""
    assert decode(b"\t\x0b\x0c\x1b[1m bold\x1b[0m\n" * 200, "log.md").text.startswith("\t")
    with pytest.raises(BinaryFile):  # 1 in 10 characters a control character: binary
        decode(b"abcdefghi\x02" * 100, "ctl.md")
    assert decode(b"abcdefghijklmnopqrstuvwxyz\x02" * 100, "few.md").text  # under 5%: text


def test_newlines_normalised_line_count_kept() -> None:
    data = b"a\r\nb\rc\nd\r\n"
    text = decode(data).text
    assert text == "a\nb\nc\nd\n"
    assert decode(b"").text == ""


# -- metadata ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rel", "ftype"),
    [
        ("overview/overview.md", "overview"),
        ("overview/brainstorm.md", "brainstorm"),
        ("characters/marcus-cole/profile.md", "character"),
        ("characters/villains/vex/profile.md", "character"),
        ("characters/marcus-cole/brainstorm.md", "brainstorm"),
        ("world/places/harbor.md", "world"),
        ("world/magic.md", "world"),
        ("notes/ideas.md", "notes"),
        ("notes/deep/ideas.md", "document"),
        ("books/book-01/overview/synopsis.md", "book_overview"),
        ("books/book-01/phase-1-seed/premise.md", "seed"),
        ("books/book-01/phase-2-root/outline.md", "structure"),
        ("books/book-01/phase-3-sprout/arcs/marcus.md", "character_arc"),
        ("books/book-01/phase-4-flourish/ch-01/scene-01.md", "scene_outline"),
        ("books/book-01/phase-5-bloom/ch-01/scene-01.md", "scene_draft"),
        ("books/book-01/front-matter/dedication.md", "front_matter"),
        ("books/book-01/back-matter/appendix/a.md", "back_matter"),
        ("books/book-01/notes/todo.md", "notes"),
        ("cfg/settings.json", "config"),
        ("README.md", "document"),
        ("Compendium/13A/Monsters/Orc.md", "document"),
    ],
)
def test_file_type_rules(rel: str, ftype: str) -> None:
    assert file_type_for(rel) == ftype
    assert extract_metadata(rel, "").file_type == ftype


def test_character_frontmatter() -> None:
    root_text = "---\nname: Marcus Cole\ntype: character\naliases: [Marc, The Ferryman]\nstatus: draft\n---\n# Marcus\n"
    m = extract_metadata("characters/marcus-cole/profile.md", root_text)
    assert (m.entity_type, m.entity_name, m.display_name) == ("character", "marcus-cole", "Marcus Cole")
    assert m.aliases == ["Marc", "The Ferryman"]
    assert (m.status, m.visibility, m.body_start_line, m.warning) == ("draft", "public", 7, None)


def test_entity_name_fallbacks_and_book_chapter() -> None:
    m = extract_metadata("characters/jane-doe/profile.md", "# Jane\n")
    assert (m.entity_type, m.entity_name, m.display_name) == ("character", "jane-doe", "Jane Doe")
    s = extract_metadata("books/book-01/phase-5-bloom/ch-03/scene-02.md", "Text.\n")
    assert (s.entity_name, s.book_id, s.chapter_id, s.chapter_num) == (
        "ch-03-scene-02",
        "book-01",
        "ch-03",
        3,
    )
    assert s.entity_type == "scene_draft"
    scoped = extract_metadata("world/x.md", "---\nscope: book-02\nvisibility: internal\nchapter: 7\n---\nx\n")
    assert (scoped.book_id, scoped.visibility, scoped.chapter_id) == ("book-02", "internal", "ch-07")
    assert extract_metadata("world/x.md", "---\nscope: series\n---\n").book_id is None
    assert extract_metadata("notes/a.md", "---\naliases: Solo\n---\n").aliases == ["Solo"]
    assert slugify("Élodie  d'Arc!") == "elodie-d-arc"


@pytest.mark.parametrize(
    "text",
    [
        "---\nname: [unclosed\naliases: {\n---\n# Body\n\nStill indexed.\n",
        "---\nname: x\n  bad indent: : :\n---\nBody\n",
        "---\n- a list\n- not a mapping\n---\nBody\n",
        "---\njust a string\n---\nBody\n",
        "---\ndate: 2024-02-30\n---\nAn impossible date is not a crash.\n",
        "---\nwords: !!int many\n---\nBody\n",
    ],
)
def test_malformed_frontmatter_warns_and_keeps_body(text: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        m = extract_metadata("notes/bad.md", text)
    assert m.frontmatter == {} and m.body_start_line == 1
    assert m.warning and "notes/bad.md" in m.warning
    assert any("notes/bad.md" in r.getMessage() for r in caplog.records)


def test_a_frontmatter_warning_names_its_file_or_is_not_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The attacker's repro: the mention scan read a malformed file again without its path (a name added in a
    later run: the files mentioning it are scanned again) and the warning was printed nameless, a second time:
    `warning: : malformed YAML frontmatter (line 4)`. A reader that names no file logs nothing."""
    bad = "---\ntitle: x\nbad: [\n---\n# Bad\nMina was here\n"
    with caplog.at_level(logging.WARNING):
        data, start, warning = split_frontmatter(bad)
    assert (data, start) == ({}, 1) and warning and warning.startswith("malformed YAML frontmatter")
    assert caplog.records == []
    root = make_project(tmp_path, {".saipling/config.toml": 'provider = "none"\n', "bad.md": bad})
    saipling = [sys.executable, "-m", "saipling", "index", str(root)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAIPLING_")}
    first = subprocess.run(saipling, env=env, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0 and "warning: bad.md: malformed YAML frontmatter (line 4)" in first.stderr
    write_file(root, "characters/mina.md", "---\nname: Mina\n---\n# Mina\n")  # (bad.md is scanned again)
    second = subprocess.run(saipling, env=env, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    assert "warning: :" not in second.stderr and ": malformed YAML" not in second.stderr, second.stderr


def test_frontmatter_edge_cases() -> None:
    assert split_frontmatter("---\n---\nbody") == ({}, 3, None)
    assert split_frontmatter("---\nname: x\nno closing fence\n") == ({}, 1, None)
    assert split_frontmatter("text\n---\nname: x\n---\n") == ({}, 1, None)
    data, start, warning = split_frontmatter("---\r\nname: x\r\n---\r\nbody".replace("\r\n", "\n"))
    assert data == {"name": "x"} and start == 4 and warning is None
    assert split_frontmatter("---\nname: x\n...\nbody")[0] == {"name": "x"}


# -- bad input, end to end (issue 2) -----------------------------------------------------------------------

BAD_INPUT = {
    "empty.md": "",
    "malformed.md": "---\nname: [unclosed\n---\n# Malformed\n\nThe body is still indexed for search.\n",
    "bad-date.md": "---\ndate: 2024-02-30\n---\n# Leap\n\nThe thirtieth of February, in the story.\n",
    "crlf.md": "# First\r\n\r\nFirst section with CRLF endings.\r\n\r\n## Second\r\n\r\nSecond section, line "
    "seven.\r\n",
    "bom.md": codecs.BOM_UTF8 + b"# Bom Heading\n\nA file that starts with a byte order mark.\n",
    "latin1.md": "# Café\n\nLe garçon était naïve à Noël, près du café.\n".encode("latin-1"),
    "binary.md": b"# looks like markdown\n\x00\x01\x02\x03 but holds NUL bytes\n",
    "huge.md": words(30_000) + "\n",
    ".hidden/secret.md": "# Hidden\n\nIn a hidden folder.\n",
    "node_modules/pkg/readme.md": "# Package\n\nA dependency readme.\n",
}


def test_bad_input_each_indexed_or_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    outside = make_project(tmp_path, {"outside.md": "# Outside\n\nNot part of the project.\n"}, "elsewhere")
    root = make_project(tmp_path, BAD_INPUT)
    os.symlink(outside / "outside.md", root / "escape.md")
    with caplog.at_level(logging.INFO), open_project(root) as project:
        summary = project.index()
        store = project.store
        files = set(store.file_states())
        skipped = dict(summary.skipped)

        assert files == {
            "empty.md",
            "malformed.md",
            "bad-date.md",
            "crlf.md",
            "bom.md",
            "latin1.md",
            "huge.md",
        }
        assert skipped["binary.md"] == "binary or undecodable"
        assert skipped["escape.md"] == "symlink leaves the project root"
        assert skipped[".hidden"] == "hidden"
        assert skipped["node_modules"] == "node_modules"
        assert any("binary.md" in r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)

        # empty: indexed, no chunks
        assert store.get_file("empty.md").chunk_count == 0
        # malformed frontmatter: indexed as plain text, with a warning in the summary and the files row
        assert any("malformed.md" in w and "frontmatter" in w for w in summary.warnings)
        assert "malformed YAML" in store.get_file("malformed.md").warning
        assert "still indexed" in " ".join(c.text for c in store.chunks_for_path("malformed.md"))
        assert any("bad-date.md" in w for w in summary.warnings)
        assert "thirtieth" in store.chunks_for_path("bad-date.md")[-1].text
        # CRLF: line numbers are the file's own
        disk = (root / "crlf.md").read_bytes().split(b"\r\n")
        second = next(c for c in store.chunks_for_path("crlf.md") if c.section_heading == "## Second")
        assert disk[second.start_line - 1] == b"## Second"
        assert disk[second.end_line - 1] == b"Second section, line seven."
        assert "\r" not in second.text
        # BOM stripped
        bom = store.chunks_for_path("bom.md")[0]
        assert bom.text.startswith("# Bom Heading") and bom.heading_path == "Bom Heading"
        assert store.get_file("bom.md").encoding == "utf-8-sig"
        # latin-1 decoded, with a warning
        assert "café" in store.chunks_for_path("latin1.md")[0].text
        assert any("latin1.md" in w and "not UTF-8" in w for w in summary.warnings)
        # 30,000 words on one line: many chunks, all within the limit, all on line 1
        huge = store.chunks_for_path("huge.md")
        assert len(huge) > 50
        assert all(c.token_count <= project.indexer.limits().max_tokens for c in huge)
        assert all(c.start_line == c.end_line == 1 for c in huge)
        # keyword search reaches the text
        assert store.keyword_search(kw("café"), 5)


def test_file_name_that_is_not_utf8_is_skipped(tmp_path: Path) -> None:
    root = make_project(tmp_path, {"good.md": "# Good\n\nA normal note in the project.\n"})
    with open(os.path.join(os.fsencode(root), b"caf\xe9.md"), "wb") as f:  # a latin-1 name on a UTF-8 system
        f.write(b"# Named in latin-1\n\nThe name cannot be stored as text.\n")
    with open_project(root) as project:
        s = project.index()
        assert set(project.store.file_states()) == {"good.md"}
        assert ("caf\\udce9.md", "file name is not valid UTF-8") in s.skipped


def test_binary_file_that_was_text_is_removed(tmp_path: Path) -> None:
    root = make_project(tmp_path, {"a.md": "# A\n\nOnce upon a time it was text.\n"})
    with open_project(root) as project:
        project.index()
        assert "a.md" in project.store.file_states()
        write_file(root, "a.md", b"\x00\x01binary now")
        summary = project.index()
        assert "a.md" not in project.store.file_states()
        assert ("a.md", "binary or undecodable") in summary.skipped


def test_saipling_project_scan(tmp_path: Path) -> None:
    root = saipling_project(tmp_path)
    result = scan(root, Settings())
    assert [e.rel for e in result.entries] == SAIPLING_MARKDOWN
    skipped = dict(result.skipped)
    assert skipped[".context_settings.json"] == "hidden"
    assert skipped["skills/writer.toml"] == "not included"


def test_folder_name_exclude_matches_everything_under_it(tmp_path):
    from saipling.paths import glob_match

    assert glob_match("drafts/a.md", "drafts")
    assert glob_match("book/drafts/deep/a.md", "drafts")
    assert not glob_match("drafts.md", "drafts")
    assert not glob_match("notes/sub/x.md", "notes/*.md")


def test_a_scan_keeps_each_files_path_as_a_string_and_makes_its_path_object_on_demand(tmp_path: Path) -> None:
    """A one-shot search scans every file for changes and never opens one: the entries keep os.scandir's path
    string (a Path per file was half the scan's CPU at 5,126 files, row S29); abs_path is the same file as before."""
    root = make_project(tmp_path, {"a.md": "# A\n\nOne.\n", "sub/deep/b.md": "# B\n\nTwo.\n"})
    entries = scan(root, Settings()).entries
    assert [e.rel for e in entries] == ["a.md", "sub/deep/b.md"]
    assert all(type(e.path) is str and e.path == os.path.join(root, *e.rel.split("/")) for e in entries)
    assert [e.abs_path for e in entries] == [root / "a.md", root / "sub" / "deep" / "b.md"]
    assert entries[1].abs_path.read_text(encoding="utf-8") == "# B\n\nTwo.\n" and entries[1].abs_path is entries[1].path

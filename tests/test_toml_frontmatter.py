"""TOML front matter (`+++` lines, as Hugo writes it) is front matter: its keys feed the metadata as YAML's do
(visibility above all: a `visibility = "private"` file is private), its lines are no body, and a block that does
not parse fails closed (private, with a warning), as malformed YAML does."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures import make_project
from saipling.files.metadata import extract_metadata, read_frontmatter, split_frontmatter
from saipling.markdown.blocks import parse_blocks
from saipling.markdown.chunker import chunk_document
from saipling.retrieval.entities import frontmatter_end, frontmatter_lines
from saipling.retrieval.name_fixes import _fill, alias_change
from test_mcp import error, mcp_session, paths

HUGO = (
    '+++\ntitle = "Diary"\nvisibility = "private"\ntype = "character"\nname = "Mina Harker"\n'
    'aliases = ["Mina", "Mrs Harker"]\n# a TOML comment, no heading\n\n[params]\nmood = "grim"\n+++\n'
    "# Diary\n\nHUGOSECRET my bank PIN is 4711\n"
)


def test_toml_frontmatter_feeds_the_metadata_as_yaml_does() -> None:
    meta = extract_metadata("diary.md", HUGO)
    assert meta.visibility == "private"
    assert meta.entity_type == "character" and meta.entity_name == "mina-harker"
    assert meta.display_name == "Mina Harker" and meta.aliases == ["Mina", "Mrs Harker"]
    assert meta.body_start_line == 12 and meta.warning is None
    assert meta.frontmatter["params"] == {"mood": "grim"}
    yaml = extract_metadata("diary.md", "---\ntitle: Diary\nvisibility: private\n---\n# Diary\n")
    assert yaml.visibility == "private" and yaml.display_name == "Diary" and yaml.body_start_line == 5


@pytest.mark.parametrize(
    ("text", "level"),
    [
        ('+++\nVisibility = "Team"\n+++\nbody\n', "team"),  # (keys and values folded, as YAML's)
        ('+++\nvisibility = ""\n+++\nbody\n', "public"),  # (as YAML's `visibility: ""`)
        ("+++\nvisibility = 3\n+++\nbody\n", "private"),  # (no string: nothing readable)
        ('+++\nvisibility = ["public"]\n+++\nbody\n', "private"),
        ('+++  \r\nvisibility = "private"\r\n+++ \r\nbody\r\n', "private"),
        ('+++\ntitle = "t"\n+++\nbody\n', "public"),
        # Hugo's custom front matter lives under `params` (the review of session 24: it was public)
        ('+++\ntitle = "t"\n[params]\nvisibility = "private"\n+++\nbody\n', "private"),
        ('+++\nparams.visibility = "private"\n+++\nbody\n', "private"),
        ("---\nparams:\n  visibility: private\n---\nbody\n", "private"),
        ('+++\nvisibility = "public"\n[Params]\nVisibility = "team"\n+++\nbody\n', "team"),
        ("---\nparams:\n  colour: red\n---\nbody\n", "public"),
    ],
)
def test_toml_visibility_levels(text: str, level: str) -> None:
    assert extract_metadata("a.md", text).visibility == level


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('+++\ntitle = "unclosed\nvisibility = "public"\n+++\n# Body\n', "malformed TOML frontmatter"),
        ('+++\ntitle: "yaml in a toml block"\n+++\n# Body\n', "malformed TOML frontmatter"),
        ('+++\nvisibility = "public"\nvisibility = "public"\n+++\n# Body\n', "malformed TOML frontmatter"),
        ('+++\nvisibility = "private"\n# never closed\n', "TOML frontmatter is never closed"),
    ],
)
def test_a_toml_block_that_cannot_be_read_fails_closed(
    text: str, problem: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        meta = extract_metadata("notes/bad.md", text)
    assert meta.visibility == "private" and meta.frontmatter == {} and meta.body_start_line == 1
    assert meta.warning and meta.warning.startswith(f"notes/bad.md: {problem}") and "private" in meta.warning
    assert any(r.getMessage() == meta.warning for r in caplog.records)


def test_a_toml_warning_names_the_files_line() -> None:
    warning = read_frontmatter('+++\ntitle = "a"\nbad =\nmore = 1\n+++\n', "x.md").warning
    assert warning is not None and "(line 3, column" in warning  # (the parser says line 2 of the block)


def test_odd_and_displaced_toml_blocks_keep_their_visibility() -> None:
    assert extract_metadata("a.md", '\n+++\nvisibility = "private"\n+++\n# Body\n').visibility == "private"
    assert extract_metadata("a.md", '\ufeff+++\nvisibility = "team"\n+++\n# Body\n').visibility == "team"
    assert extract_metadata("a.md", '+++toml\nvisibility = "private"\n+++\n# Body\n').visibility == "private"
    assert extract_metadata("a.md", "++++\n\nA rule line above prose.\n").visibility == "public"
    assert extract_metadata("a.md", "+++ News +++\n\nNot a fence.\n").visibility == "public"


def test_yaml_frontmatter_reads_as_before() -> None:
    assert split_frontmatter("---\nname: x\n---\nbody") == ({"name": "x"}, 4, None)
    assert split_frontmatter("---\nname: x\n...\nbody")[0] == {"name": "x"}
    assert split_frontmatter("---\nname: x\n+++\nbody") == ({}, 1, None)  # (`+++` closes no YAML block)
    assert split_frontmatter('+++\nname = "x"\n---\nbody') == ({}, 1, None)  # (nor `---` a TOML one)


def test_toml_lines_are_front_matter_to_the_parse_and_the_chunker() -> None:
    doc = parse_blocks(HUGO)
    assert [h.title for h in doc.headings] == ["Diary"]  # (the TOML `# comment` is no heading)
    assert set(range(1, 12)) <= doc.code_lines
    assert doc.lines == HUGO.split("\n")
    fenced = '+++\nnote = """\n```\n"""\n+++\n# Body\n\nText after a fence opened in a TOML string.\n'
    assert [h.title for h in parse_blocks(fenced).headings] == ["Body"]
    meta = extract_metadata("diary.md", HUGO)
    chunks = chunk_document(HUGO, meta)
    assert chunks[0].kind == "frontmatter" and "Mina Harker" in chunks[0].text and "+++" not in chunks[0].text
    body = [c for c in chunks if c.kind != "frontmatter"]
    assert body and all(c.start_line >= 12 for c in body) and "HUGOSECRET" in body[0].text
    assert not any("TOML comment" in c.text or "+++" in c.text for c in chunks)


def test_entity_helpers_skip_toml_lines() -> None:
    lines = HUGO.split("\n")
    assert frontmatter_end(lines) == 11 and frontmatter_lines(HUGO) == 11
    assert frontmatter_end(["+++", 'a = "b"']) == 0 and frontmatter_lines('+++\na = "b"\n') == 0
    assert frontmatter_end("---\nname: x\n---\nbody".split("\n")) == 3


def _apply(text: str, word: str) -> str:
    change = alias_change(text, word)
    assert change is not None
    lines = text.split("\n")
    offsets = [0]
    for ln in lines:
        offsets.append(offsets[-1] + len(ln) + 1)
    a, b = offsets[change.line] + change.col, offsets[change.end_line] + change.end_col
    return text[:a] + change.text + text[b:]


@pytest.mark.parametrize(
    "profile",
    [
        '+++\nname = "Mina"\n+++\n# Mina\n',
        '+++\nname = "Mina"\naliases = ["Mi"]\n[params]\nx = 1\n+++\n# Mina\n',
        "+++\naliases = []\n+++\n",
        '+++\naliases = ["Mi",]\n+++\n',
        '+++\naliases = "Mi"\n+++\n',
        '+++\naliases = [\n  "Mi",\n]\n+++\n',
        '+++\naliases = [\n  "Mi"  # no comma\n]\n+++\n',
        '+++\nname = "Mina"\n[params]\nmood = "x"\n+++\n',
    ],
)
def test_an_alias_added_to_a_toml_profile_keeps_it_toml(profile: str) -> None:
    before = extract_metadata("characters/mina.md", profile).aliases
    edited = _apply(profile, 'Min"a')
    assert edited.startswith("+++\n")  # (a TOML block stays one, not a YAML block put above it)
    after = extract_metadata("characters/mina.md", edited)
    assert after.warning is None and after.visibility == "public"
    assert after.aliases == [*before, 'Min"a']


def test_an_alias_no_edit_keeps_readable_is_not_offered() -> None:
    assert alias_change("+++\naliases = 3\n+++\n", "Mina") is None


def test_a_toml_template_gets_its_name_in_toml() -> None:
    filled = _fill('+++\nname = ""\ntype = "character"\n+++\n# {{name}}\n', "Mina", "mina")
    meta = extract_metadata("characters/mina.md", filled)
    assert meta.warning is None and meta.display_name == "Mina" and meta.entity_type == "character"
    assert _fill('+++\nname = "X"\n+++\n', "Mina", "mina") == '+++\nname = "X"\n+++\n'


async def test_an_agent_neither_finds_nor_gets_a_private_hugo_file(tmp_path: Path) -> None:
    """The attacker's repro: a Hugo file that says `visibility = "private"` was public to an MCP agent."""
    root = make_project(
        tmp_path,
        {
            "diary.md": HUGO,
            "broken.md": '+++\ntitle = "Broken\n+++\n# Broken\nBROKENSECRET\n',
            "open.md": '+++\ntitle = "Open"\n+++\n# Open\nOPENWORD here\n',
        },
    )
    index = subprocess.run(
        [sys.executable, "-m", "saipling", "index", str(root), "--provider", "none"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert index.returncode == 0, index.stderr
    assert "broken.md: malformed TOML frontmatter" in index.stderr
    async with mcp_session(root) as session:  # no mcpRole: public only
        assert await paths(session, "HUGOSECRET", mode="lexical") == []
        assert await paths(session, "BROKENSECRET", mode="lexical") == []
        assert "not visible" in await error(session, "get", {"path": "diary.md"})
        assert "not visible" in await error(session, "get", {"path": "broken.md"})
        assert await paths(session, "OPENWORD", mode="lexical") == ["open.md"]


@pytest.mark.parametrize(
    ("text", "level"),
    [
        ('{\n  "title": "x",\n  "visibility": "private"\n}\n# X\n', "private"),
        ('{\n  "params": {"visibility": "team"}\n}\nbody\n', "team"),
        ('{\n  "visibility": "private",\n}\nbody\n', "private"),  # (not JSON: it cannot be read, fail closed)
        ('\ufeff{\n"visibility": "private"\n}\nbody\n', "private"),
        ('{\n  "title": "x"\n}\nbody\n', "public"),
        ('# Title\n\n{"visibility": "private"}\n', "public"),  # (not at the top: prose)
    ],
)
def test_json_front_matter_is_not_read_but_its_visibility_applies(text: str, level: str) -> None:
    """Hugo's JSON front matter (`{...}` at the top) named a private level nobody read: the file was public (the
    re-review of session 24)."""
    assert extract_metadata("a.md", text).visibility == level

"""Issue 30 items 5-7: one authorization path, visibility and context settings that fail closed.

A file whose frontmatter says `visibility: private` never reaches a request that may not see private files, however
its YAML is broken around that line or however the key and value are capitalised; `related` refuses what `get`
refuses, with the same error, on every face (engine, CLI, MCP, LSP); a `.context_settings.json` that does not parse
keeps its exclusions (the last good reading, else every file) and says so in the responses."""

# ruff: noqa: F811  (fixture imported, then requested as a parameter)
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fixtures import make_project, open_project, write_file
from saipling.config.visibility import role_levels, visible
from saipling.errors import InvalidRequest
from saipling.files.context_settings import load_context_settings
from saipling.files.metadata import extract_metadata

SAIPLING = [sys.executable, "-m", "saipling"]
WORD = "quillfeather"  # in every file: a role-less search for it must find the public file only
ROLES = '[roles]\nauthor = ["public", "private"]\n'
ALWAYS = {"enabled": True, "mode": "always", "max_results": 50, "min_relevance": 0}
OPEN = "# Open\n\nThe quillfeather archive is open to everyone.\n"

# -- the frontmatter mutations ----------------------------------------------------------------------------------
# lines that break the YAML around the visibility line (some leave it valid: the level must hold either way)
BREAKERS = [
    "date: 2024-02-30",  # an impossible date (a ValueError, not a YAMLError)
    'title: "an unclosed quote',
    "title: 'an unclosed quote",
    "run: !!python/object/apply:os.system ['true']",
    "obj: !!python/object:collections.OrderedDict {}",
    "tags: [one, two",
    "meta: {a: 1",
    "\tindented: with a tab",
    "  - a dangling list item",
    "key: value: another",
    "ref: *undefined_alias",
    "@reserved: indicator",
    "`backtick: start",
    "% a directive",
    "title: |\n bad\n  indentation\nx",
    "- a list item among mapping keys",
    "when: 2024-13-45 10:00:00",
    "big: !!int not-a-number",
    "bin: !!binary not base64!",
    "dup: 1\ndup: 2",
]
KEYS = [
    "visibility",
    "Visibility",
    "VISIBILITY",
    "visiBility",
    '"Visibility"',
    "'VISIBILITY'",
    "ｖｉｓｉｂｉｌｉｔｙ",
]
VALUES = [
    "private",
    "Private",
    "PRIVATE",
    "'private'",
    '"Private"',
    "  private  ",
    "pRiVaTe",
    "ＰＲＩＶＡＴＥ",
]
PLAIN = [
    "title: A Note",
    "tags: [archive, keeper]",
    "date: 2024-01-01",
    "status: draft",
    "aliases:\n  - Keeper",
]


def frontmatter_file(lines: list[str], body: str = "") -> str:
    return "---\n" + "\n".join(lines) + "\n---\n" + (body or f"# Secret\n\nThe {WORD} vault code is 4711.\n")


@st.composite
def mutated(draw: st.DrawFn) -> str:
    """A file whose frontmatter holds a `visibility: private` line (any capitalisation), broken around it."""
    vis = f"{draw(st.sampled_from(KEYS))}:{draw(st.sampled_from([' ', '  ', chr(9) + ' ']))}"
    vis += draw(st.sampled_from(VALUES))
    lines = draw(st.lists(st.sampled_from(PLAIN), max_size=3)) + [vis]
    # (no control characters: a NUL makes the file binary, never indexed at all)
    noise = st.text(
        st.characters(blacklist_categories=["Cs", "Cc"], blacklist_characters="\x85\u2028\u2029"), max_size=12
    ).filter(lambda t: t.strip() not in ("---", "..."))
    for _ in range(draw(st.integers(0, 3))):
        extra = draw(st.one_of(st.sampled_from(BREAKERS), noise))
        lines.insert(draw(st.integers(0, len(lines))), extra)
    return draw(st.sampled_from(["", "", "", "\n", " \n\t\n", "\ufeff"])) + frontmatter_file(lines)  # (above the fence)


PUBLIC_ONLY = role_levels({}, None)
AUTHOR = role_levels({"author": ["public", "private"]}, "author")


@settings(max_examples=400, deadline=None)
@given(mutated())
def test_a_visibility_line_broken_around_or_capitalised_is_never_public(text: str) -> None:
    meta = extract_metadata("notes/secret.md", text)
    assert not visible(meta.visibility, PUBLIC_ONLY), (text, meta.visibility)
    if "visible as private" in (meta.warning or ""):  # unreadable: private, so a role seeing private files sees it
        assert meta.visibility == "private"
    # (YAML read as written may fold a line into the value: `private` + `  - item` is `private - item`: no role's)


VARIANTS = [
    "---\nVisibility: Private\n---\n# x\n",
    "---\nvisibility: private\nvisibility: public\n---\n# x\n",  # a key given twice: the strictest
    "---\nVisibility: private\nvisibility: public\n---\n# x\n",
    "---\nvisibility: [private]\n---\n# x\n",  # not text: private
    "---\nvisibility: 7\n---\n# x\n",
    "---\n<<: {Visibility: Private}\n---\n# x\n",  # a merge key
    "---\n- visibility: private\n---\n# x\n",  # not a mapping
    "---\nvisibility: private\n\n# never closed\n",
    "---\r\nVISIBILITY: private\r\n---\r\n# x\r\n",
    "---\rvisibility: private\r---\r# x\r",  # lone CR line ends, as the markdown parser reads them
    "\n---\nvisibility: private\n---\n# x\n",  # a blank line put above the fence
    " \n\t\n---\nVisibility: Private\ndate: 2024-02-30\n---\n# x\n",
    "\ufeff---\nvisibility: private\n---\n# x\n",  # a BOM inside the text
    # lines that only look blank above the fence: no-break space, form feed, U+2028, ideographic space, word joiner
    *(f"{blank}\n---\nvisibility: private\n---\n# x\n" for blank in ("\u00a0", "\f", "\u2028", "\u3000", "\u2060")),
    "----\nvisibility: private\n---\n# x\n",  # no fence, but a block that names a level
    "---yaml\nVisibility: Secret\n---\n# x\n",
    *(
        f"---{tail}\nvisibility: private\n---\n# x\n"
        for tail in ("\u200b", "\ufeff", "\u2060", " yaml", " # meta", ":")
    ),
]


def test_visibility_variants_are_not_public_and_frontmatter_without_it_is() -> None:
    assert [t for t in VARIANTS if visible(extract_metadata("a.md", t).visibility, PUBLIC_ONLY)] == []
    # and no further: frontmatter that says nothing of visibility leaves a file public, its body where it was
    meta = extract_metadata("a.md", "---\ntitle: A\n---\n# A\n")
    assert (meta.visibility, meta.body_start_line, meta.warning) == ("public", 4, None)
    # a key with no value (`visibility:` left unfinished, `~`, `null`) says nothing readable: private (fail closed);
    # an empty string is text, and names no level: public
    for empty in ("visibility:", "visibility: ~", "visibility: null", "Visibility: Null"):
        assert extract_metadata("a.md", f"---\n{empty}\n---\n# A\n").visibility == "private", empty
    assert extract_metadata("a.md", '---\nvisibility: ""\n---\n# A\n').visibility == "public"
    assert extract_metadata("a.md", "---\nnot closed, says nothing of who sees it\n").visibility == "public"
    assert extract_metadata("a.md", "\n---\ntitle: A\n---\n# A\n").visibility == "public"
    assert extract_metadata("a.md", "# A\n\n---\n\nvisibility: private, as a body line\n").visibility == "public"
    assert extract_metadata("a.md", "----\n\nA rule line above prose.\n").visibility == "public"
    assert extract_metadata("a.md", "----\ntitle: A\n---\n# A\n").visibility == "public"
    meta = extract_metadata("a.md", "---\r\ntitle: A\r\n---\r\n# A\r\n")
    assert (meta.visibility, meta.body_start_line) == ("public", 4)


# -- the engine: search, get, related, enrich ---------------------------------------------------------------------
def _check_role_less(project: Any, secret: list[str]) -> None:
    """Nothing of `secret` reaches a request without a role; the author role sees every one."""
    found = {r["filePath"] for r in project.search({"query": WORD, "maxResults": 100, "mode": "lexical"})["results"]}
    assert found == {"open.md"}
    as_author = project.search({"query": WORD, "maxResults": 100, "mode": "lexical", "role": "author"})
    assert {r["filePath"] for r in as_author["results"]} == {"open.md", *secret}  # indexed, searchable
    enriched = project.enrich({"query": f"{WORD} vault code", "skillConfig": ALWAYS})
    assert enriched["searchResults"] and "4711" not in json.dumps(enriched)
    with pytest.raises(InvalidRequest) as by_absent:
        project.get({"path": "notes/absent.md"})
    for path in secret:
        with pytest.raises(InvalidRequest) as by_get:
            project.get({"path": path})
        with pytest.raises(InvalidRequest) as by_related:
            project.related({"path": path})
        assert "not visible" in str(by_get.value) and str(by_related.value) == str(by_get.value)
        # refused in the words of a file that is not there: a probe learns nothing of its existence
        assert str(by_get.value) == str(by_absent.value).replace("notes/absent.md", path)
        assert project.get({"path": path, "role": "author"})["text"]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(mutated(), min_size=1, max_size=6))
def test_mutated_private_files_never_reach_a_role_less_request(texts: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        files = {f"notes/secret-{i}.md": text for i, text in enumerate(texts)}
        root = make_project(Path(tmp), {"open.md": OPEN, ".saipling/config.toml": ROLES, **files})
        with open_project(root) as project:
            project.index()
            _check_role_less(project, sorted(files))


@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(mutated(), min_size=2, max_size=6))
def test_mutated_private_files_never_reach_an_mcp_agent(texts: list[str]) -> None:
    """The real `saipling mcp` (no mcpRole, no defaultRole): search, get, enrich_context and related."""
    import asyncio

    from test_mcp import call, error, mcp_session

    async def check(root: Path, secret: list[str]) -> None:
        async with mcp_session(root) as session:
            found = await call(session, "search", {"query": WORD, "maxResults": 100})
            assert {r["filePath"] for r in found["results"]} == {"open.md"}
            enriched = await call(session, "enrich_context", {"query": f"{WORD} vault code", "skillConfig": ALWAYS})
            assert enriched["searchResults"] and "4711" not in json.dumps(enriched)
            absent = await error(session, "get", {"path": "notes/absent.md"})
            for path in secret:
                refused = await error(session, "get", {"path": path})
                assert "not visible" in refused and await error(session, "related", {"path": path}) == refused
                assert refused == absent.replace("notes/absent.md", path)

    with tempfile.TemporaryDirectory() as tmp:
        files = {f"notes/secret-{i}.md": text for i, text in enumerate(texts)}
        root = make_project(Path(tmp), {"open.md": OPEN, **files})
        asyncio.run(check(root, sorted(files)))


# a fixed sample of the mutations for the process tests (CLI, MCP): each breaker once, keys and values varied
FIXED = {
    f"notes/secret-{i:02d}.md": frontmatter_file(
        ["title: Secret", breaker, f"{KEYS[i % len(KEYS)]}: {VALUES[i % len(VALUES)]}"][:: 1 if i % 2 else -1]
    )
    for i, breaker in enumerate(BREAKERS)
}
FIXED["notes/capitalised.md"] = frontmatter_file(["Visibility: Private"])


def cli(*args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    drop = ("SAIPLING_", "VOYAGE_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["SAIPLING_PROVIDER"] = "none"
    return subprocess.run([*SAIPLING, *args], env=env, capture_output=True, text=True, timeout=120, check=False)


def cli_json(*args: str) -> dict[str, Any]:
    done = cli(*args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_cli_role_less_requests_never_see_broken_or_capitalised_private_files(tmp_path: Path) -> None:
    root = make_project(tmp_path, {"open.md": OPEN, ".saipling/config.toml": ROLES, **FIXED})
    cli_json("index", str(root))
    found = cli_json("search", WORD, "--root", str(root), "-k", "100")
    assert {r["filePath"] for r in found["results"]} == {"open.md"}
    as_author = cli_json("search", WORD, "--root", str(root), "-k", "100", "--role", "author")
    # (a line folded into the value as YAML reads it, `private - a dangling list item`, is a level no role has)
    authors = {p for p, text in FIXED.items() if visible(extract_metadata(p, text).visibility, AUTHOR)}
    assert len(authors) >= len(FIXED) - 2 and {r["filePath"] for r in as_author["results"]} == {
        "open.md",
        *authors,
    }
    enriched = cli_json("enrich", f"{WORD} vault code", "--root", str(root))
    assert enriched["ran"] and "4711" not in json.dumps(enriched)
    assert "4711" in json.dumps(cli_json("enrich", f"{WORD} vault code", "--root", str(root), "--role", "author"))
    for path in ("notes/capitalised.md", "notes/secret-00.md", "notes/secret-01.md", "notes/secret-03.md"):
        got, rel = cli("get", path, "--root", str(root)), cli("related", path, "--root", str(root))
        assert got.returncode == rel.returncode == 2 and "not visible" in got.stderr
        absent = cli("get", "notes/absent.md", "--root", str(root)).stderr  # (its last line: a warning may precede)
        assert got.stderr.splitlines()[-1] == absent.splitlines()[-1].replace("notes/absent.md", path)
        assert rel.stderr == got.stderr and "4711" not in got.stdout + rel.stdout


# -- related refuses what get refuses: CLI, MCP, LSP ----------------------------------------------------------------
REFUSALS = {
    "open.md": OPEN,
    "other.md": "# Other\n\nAnother quillfeather note about the archive keeper.\n",
    "private.md": frontmatter_file(["visibility: private"]),
    "excluded.md": f"# Excluded\n\nThe {WORD} ledger, excluded from agents.\n",
    ".context_settings.json": json.dumps({"excluded.md": "exclude"}),
}
REFUSED = ("private.md", "excluded.md", "missing.md", "../outside.md")


def test_cli_related_refuses_as_get_does(tmp_path: Path) -> None:
    root = make_project(tmp_path, REFUSALS)
    cli_json("index", str(root))
    for path in REFUSED:
        got, rel = cli("get", path, "--root", str(root)), cli("related", path, "--root", str(root), "--json")
        assert got.returncode == rel.returncode == 2, (path, rel.stdout)
        assert rel.stderr == got.stderr and rel.stdout == "", path  # no `indexed`, no passages
    assert cli_json("related", "open.md", "--root", str(root))["results"]


async def test_mcp_related_refuses_as_get_does_and_agrees_with_the_cli(tmp_path: Path) -> None:
    from test_mcp import call, error, mcp_session

    root = make_project(tmp_path, {**REFUSALS, **FIXED, ".saipling/config.toml": ROLES})
    async with mcp_session(root) as session:
        assert (await call(session, "related", {"path": "open.md"}))["results"]
        for path in (*REFUSED, "notes/capitalised.md", "notes/secret-00.md"):
            by_get = await error(session, "get", {"path": path})
            by_related = await error(session, "related", {"path": path})
            assert by_related == by_get and "indexed" not in by_related, path
        found = await call(session, "search", {"query": WORD, "maxResults": 100})
        assert {r["filePath"] for r in found["results"]} == {"open.md", "other.md"}
        enriched = await call(session, "enrich_context", {"query": f"{WORD} vault code", "skillConfig": ALWAYS})
        assert enriched["searchResults"] and "4711" not in json.dumps(enriched)
        assert "excluded from agents" not in json.dumps(enriched)
        missing = await error(session, "related", {"path": "missing.md"})
    by_cli = cli("related", "missing.md", "--root", str(root))
    assert by_cli.returncode == 2 and by_cli.stderr.removeprefix("error: ").strip() in missing


async def test_lsp_related_refuses_as_get_does(tmp_path: Path) -> None:
    from pygls.exceptions import JsonRpcException

    from lsp_client import lsp_session, request, wait_for_index

    root = make_project(tmp_path, REFUSALS)
    async with lsp_session(root) as client:
        await wait_for_index(client)
        assert (await request(client, "saipling/related", {"path": "open.md"}))["results"]
        for path in REFUSED:
            with pytest.raises(JsonRpcException) as by_get:
                await request(client, "saipling/get", {"path": path})
            with pytest.raises(JsonRpcException) as by_related:
                await request(client, "saipling/related", {"path": path})
            assert (by_related.value.code, by_related.value.message) == (
                by_get.value.code,
                by_get.value.message,
            )
        # a broken settings file: the exclusion holds (last good reading) and the answers say so
        write_file(root, ".context_settings.json", '{"excluded.md": "exclude",')
        found = await request(client, "saipling/search", {"query": WORD, "maxResults": 100})
        assert {r["filePath"] for r in found["results"]} == {"open.md", "other.md"}
        assert any(".context_settings.json is invalid" in w for w in found["warnings"])


# -- .context_settings.json fails closed ----------------------------------------------------------------------------
def test_settings_that_do_not_parse_exclude_everything_without_a_good_reading(tmp_path: Path) -> None:
    for broken in ('{"secret.md": "exclude",', "[]", "", '{"secret.md": "exclude"} trailing', "\xff\xfe{"):
        root = make_project(tmp_path / f"p{len(list(tmp_path.iterdir()))}", {".context_settings.json": broken})
        cs = load_context_settings(root)
        assert cs.exclude_all and cs.mode_for("any/file.md") == "exclude", broken
        assert cs.excluded(["a.md", "b/c.md"]) == ["a.md", "b/c.md"]
        assert cs.warnings and "invalid" in cs.warnings[0]


def test_settings_that_cannot_be_read_fail_closed(tmp_path: Path) -> None:
    fifo = make_project(tmp_path / "fifo", {})
    os.mkfifo(fifo / ".context_settings.json")
    dangling = make_project(tmp_path / "dangling", {})
    (dangling / ".context_settings.json").symlink_to(tmp_path / "nowhere.json")
    folder = make_project(tmp_path / "folder", {".context_settings.json/x": "{}"})
    for root in (fifo, dangling, folder):
        cs = load_context_settings(root)
        assert cs.exclude_all and cs.warnings, root
    assert not load_context_settings(make_project(tmp_path / "none", {})).has("exclude")  # no file: no settings


def test_settings_entries_read_strictly(tmp_path: Path) -> None:
    root = make_project(
        tmp_path,
        {
            ".context_settings.json": '{"a.md": "exlude", "b.md": " Exclude ", "c.md": true, '
            '"d.md": "auto", "./d.md": "exclude", "e.md": "force", "f.md": "auto"}'
        },
    )
    cs = load_context_settings(root)
    assert not cs.exclude_all
    assert [cs.mode_for(p) for p in ("a.md", "b.md", "c.md", "d.md", "e.md", "f.md")] == [
        "exclude",
        "exclude",
        "exclude",
        "exclude",
        "force",
        "auto",
    ]
    assert "a.md" in cs.warnings[0] and "given twice" in cs.warnings[0]


def test_settings_keys_name_a_file_however_they_spell_its_path(tmp_path: Path) -> None:
    """`notes//a.md`, `notes/./b.md`, `notes/x/../c.md` name notes/a.md, b.md and c.md (an exclusion spelled so
    excluded nothing before); a key that climbs out of the project is ignored, with a warning."""
    settings = {"notes//a.md": "exclude", "notes/./b.md": "exclude", "notes/x/../c.md": "exclude"}
    settings |= {"notes\\\\d.md": "exclude", "../outside.md": "exclude", "notes/e.md": "auto"}
    root = make_project(tmp_path, {".context_settings.json": json.dumps(settings)})
    cs = load_context_settings(root)
    modes = [cs.mode_for(f"notes/{n}.md") for n in "abcde"]
    assert modes == ["exclude", "exclude", "exclude", "exclude", "auto"]
    assert [w for w in cs.warnings if "../outside.md" in w and "outside the project" in w]


def test_a_broken_edit_keeps_an_exclusion_however_its_path_is_spelled(tmp_path: Path) -> None:
    root = make_project(tmp_path, {".context_settings.json": '{"a.md": "exclude"}'})
    assert load_context_settings(root).mode_for("a.md") == "exclude"
    (root / ".context_settings.json").write_text('{"a.md": "exclude", "notes/x/../secret.md": "exclude", oops}')
    cs = load_context_settings(root)
    assert cs.mode_for("notes/secret.md") == "exclude" and cs.mode_for("a.md") == "exclude"


def test_a_broken_edit_keeps_the_last_good_settings_and_adds_the_exclusions_it_names(tmp_path: Path) -> None:
    root = make_project(tmp_path, {".context_settings.json": json.dumps({"secret.md": "exclude"})})
    assert load_context_settings(root).mode_for("secret.md") == "exclude"
    write_file(root, ".context_settings.json", '{"secret.md": "exclude", "later.md": "exclude", "x.md" "auto"}')
    cs = load_context_settings(root)
    assert not cs.exclude_all and cs.warnings and "last read" in cs.warnings[0]
    assert (cs.mode_for("secret.md"), cs.mode_for("later.md"), cs.mode_for("open.md")) == (
        "exclude",
        "exclude",
        "auto",
    )


GOOD_SETTINGS = json.dumps({"drafts/": "auto", "secret.md": "exclude", "notes/*.md": "force", "x.md": "auto"})


@st.composite
def broken_settings(draw: st.DrawFn) -> str:
    """GOOD_SETTINGS with one edit that leaves it no JSON: cut short, a character put in, or one taken out."""
    text = GOOD_SETTINGS
    at = draw(st.integers(0, len(text) - 1))
    edit = draw(st.sampled_from(["cut", "insert", "delete"]))
    if edit == "cut":
        text = text[:at]
    elif edit == "insert":
        text = text[:at] + draw(st.sampled_from(list('{}[]",:\\x \n') + ["//", "/*", "NaN", "\ufeff"])) + text[at:]
    else:
        text = text[:at] + text[at + 1 :]
    try:
        json.loads(text.removeprefix("\ufeff"))  # (a BOM put first is no break: the file is read as utf-8-sig)
    except ValueError:
        return text
    return text + ","  # (still JSON: broken at the end instead)


@settings(max_examples=150, deadline=None)
@given(broken_settings())
def test_a_settings_file_broken_anywhere_keeps_its_exclusion(text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        fresh = make_project(Path(tmp), {".context_settings.json": text}, "fresh")
        cs = load_context_settings(fresh)  # never read well in this process: everything excluded
        assert cs.mode_for("secret.md") == "exclude" and cs.mode_for("x.md") == "exclude" and cs.warnings
        served = make_project(Path(tmp), {".context_settings.json": GOOD_SETTINGS}, "served")
        assert load_context_settings(served).mode_for("x.md") == "auto"
        write_file(served, ".context_settings.json", text)
        os.utime(served / ".context_settings.json", ns=(1, 1))  # (a new stamp even within the clock's tick)
        cs = load_context_settings(served)  # a long-lived process: the last good reading holds
        assert cs.mode_for("secret.md") == "exclude" and cs.mode_for("x.md") == "auto" and cs.warnings


SETTINGS_PROJECT = {
    "open.md": OPEN,
    "secret.md": f"# Secret\n\nThe {WORD} ledger holds the vault code 4711.\n",
    "later.md": f"# Later\n\nThe {WORD} plans, excluded in a broken edit.\n",
}


def test_cli_with_a_broken_settings_file_excludes_everything_and_says_so(tmp_path: Path) -> None:
    root = make_project(tmp_path, {**SETTINGS_PROJECT, ".context_settings.json": '{"secret.md": "exclude",}'})
    cli_json("index", str(root))
    done = cli("search", WORD, "--root", str(root), "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["results"] == []
    assert any("invalid" in w for w in json.loads(done.stdout)["warnings"]) and "invalid" in done.stderr
    every = cli_json("search", WORD, "--root", str(root), "--all-files")  # the index holds them all
    assert {r["filePath"] for r in every["results"]} == {"open.md", "secret.md", "later.md"}
    refused = cli("get", "secret.md", "--root", str(root))
    assert refused.returncode == 2 and "invalid" in refused.stderr and "4711" not in refused.stdout
    assert "4711" in cli("get", "secret.md", "--root", str(root), "--all-files").stdout
    assert any("invalid" in w for w in cli_json("status", str(root))["warnings"])  # status says it too
    enriched = cli("enrich", f"{WORD} vault code", "--root", str(root), "--json")
    assert "4711" not in enriched.stdout and json.loads(enriched.stdout)["warnings"] and "invalid" in enriched.stderr


async def test_mcp_keeps_the_last_good_settings_when_an_edit_breaks_them(tmp_path: Path) -> None:
    from test_mcp import call, error, mcp_session

    root = make_project(tmp_path, {**SETTINGS_PROJECT, ".context_settings.json": json.dumps({"secret.md": "exclude"})})
    async with mcp_session(root) as session:
        found = await call(session, "search", {"query": WORD, "maxResults": 100})
        assert {r["filePath"] for r in found["results"]} == {"open.md", "later.md"} and not found.get("warnings")
        write_file(root, ".context_settings.json", '{"secret.md": "exclude", "later.md": "exclude" "x": 1}')
        found = await call(session, "search", {"query": WORD, "maxResults": 100})
        assert {r["filePath"] for r in found["results"]} == {"open.md"}
        assert any("invalid" in w and "last read" in w for w in found["warnings"])
        assert "excluded" in await error(session, "get", {"path": "secret.md"})
        assert "excluded" in await error(session, "get", {"path": "later.md"})
        got = await call(session, "get", {"path": "open.md"})
        assert got["warnings"] == found["warnings"]
        enriched = await call(session, "enrich_context", {"query": f"{WORD} vault code", "skillConfig": ALWAYS})
        assert enriched["warnings"] == found["warnings"] and "4711" not in json.dumps(enriched)
        assert (await call(session, "related", {"path": "open.md"}))["warnings"] == found["warnings"]


def test_related_of_a_missing_path_is_an_error_not_indexed_false(tmp_path: Path) -> None:
    root = make_project(tmp_path, REFUSALS)
    with open_project(root) as project:
        project.index()
        with pytest.raises(InvalidRequest, match="missing.md does not exist"):
            project.related({"path": "missing.md"})


def test_an_index_written_under_the_old_rules_is_re_read(tmp_path: Path) -> None:
    """A file indexed as public by the old reading of its frontmatter is re-read on the next run (no edit)."""
    from saipling.indexing.context import CHUNKING_META
    from saipling.storage.sqlite.schema import connect

    secret = frontmatter_file(["date: 2024-02-30", "visibility: private"])
    root = make_project(tmp_path, {"open.md": OPEN, "secret.md": secret})
    with open_project(root) as project:
        project.index()
        query = {"query": WORD, "maxResults": 100, "mode": "lexical"}
        assert {r["filePath"] for r in project.search(query)["results"]} == {"open.md"}
        # as an older saipling left it: public chunks, and a signature without the metadata rules
        old = json.loads(project.store.get_meta(CHUNKING_META))
        old.pop("metadata")
        project.store.set_meta(CHUNKING_META, json.dumps(old, sort_keys=True))
        other = connect(root / ".saipling" / "index.db")  # (another connection: the search caches see it)
        try:
            with other:
                other.execute("UPDATE chunks SET visibility = 'public'")
                other.execute("UPDATE files SET visibility = 'public'")
        finally:
            other.close()
        assert "secret.md" in {r["filePath"] for r in project.search(query)["results"]}  # the old state
        assert project.index().files_read == 2
        assert {r["filePath"] for r in project.search(query)["results"]} == {"open.md"}


def test_enrich_reads_no_passage_of_a_file_made_private_since_it_was_indexed(tmp_path: Path) -> None:
    """The passage reader's own check (the search that found the file went by its indexed level): a file whose
    bytes changed to `visibility: private` gives no lines to a role-less request, and is not named as missing."""
    from saipling.retrieval.enrich import _file_lines

    root = make_project(tmp_path, {"open.md": OPEN, "note.md": f"# Note\n\nThe {WORD} vault code is 4711.\n"})
    with open_project(root) as project:
        project.index()
        doc, unchanged, hidden = _file_lines(project, "note.md", PUBLIC_ONLY)
        assert unchanged and not hidden and doc and "4711" in "\n".join(doc.lines)
        write_file(root, "note.md", frontmatter_file(["Visibility: Private"]))
        assert _file_lines(project, "note.md", PUBLIC_ONLY) == (None, False, True)
        doc, _, hidden = _file_lines(project, "note.md", AUTHOR)
        assert not hidden and doc and "4711" in "\n".join(doc.lines)


def test_a_visibility_that_yaml_folds_into_several_words_is_private() -> None:
    """`visibility: private` with an indented line below it is one plain scalar to YAML (`private - item`): a level
    no role names, which hid the file from every role, its author too. Several words name no level: private."""
    from saipling.files.metadata import extract_metadata

    text = "---\ntitle: A Note\nvisibility: private\n  - a dangling list item\n---\n# Secret\n"
    assert extract_metadata("a.md", text).visibility == "private"
    assert extract_metadata("b.md", "---\nvisibility: Members\n---\n# M\n").visibility == "members"


def test_a_filter_note_never_names_or_betrays_a_hidden_file(tmp_path: Path) -> None:
    """The note of a filtered search that found nothing (MCP `note`, the CLI's) listed folders and files of every
    indexed file: `secrets` got "did you mean Secrets?", and a private file's path got "nothing matches" where a
    missing one got "no indexed file is under that folder"."""
    from saipling.retrieval.filter_notes import why_no_results
    from saipling.retrieval.search import parse_request, run_search

    files = {
        "open.md": OPEN,
        "Secrets/villain-plan.md": "---\nvisibility: private\n---\n# Plan\n\nThe vault code is 4711.\n",
        "Drafts/old.md": "# Old\n\nAn old vault draft.\n",
        ".context_settings.json": '{"Drafts/": "exclude"}',
    }
    root = make_project(tmp_path, files)
    with open_project(root) as project:
        project.index()

        def note(prefix: str) -> str:
            params = {"query": "vault code", "filter": {"pathPrefix": prefix}}
            req = parse_request(params)
            assert run_search(project, req)["results"] == []
            return why_no_results(project, parse_request(params), {"filter.pathPrefix": prefix}, "filter.pathPrefix")

        for hidden in ("secrets", "Secrets", "drafts"):  # (the prefix echoed back, never a hidden folder offered)
            assert note(hidden) == f"filter.pathPrefix {hidden}: no indexed file is under that folder"
        probes = ("Secrets/villain-plan.md", "Secrets/hero-plan.md", "Drafts/old.md", "Drafts/new.md")
        said = {p: note(p).replace(p, "P") for p in probes}
        assert len(set(said.values())) == 1, said

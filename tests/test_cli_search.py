"""CLI (SPEC 12): `search` (table and --json), `get PATH:START-END`, `related`, `enrich`, and usage errors (exit 2)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from fixtures import retrieval_project
from saipling.cli.main import main

ENV = {"SAIPLING_PROVIDER": "none", "COLUMNS": "220", "NO_COLOR": "1"}
MARCUS = "characters/marcus-cole/profile.md"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = retrieval_project(tmp_path_factory.mktemp("cli"))
    result = CliRunner(env=ENV).invoke(main, ["index", str(root), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["files"] == 12
    return root


def run(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner(env=ENV | (env or {})).invoke(main, list(args))


def search_json(root: Path, *args: str) -> dict[str, Any]:
    result = run("search", *args, "--root", str(root), "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# -- search ----------------------------------------------------------------------------------------------------
def test_search_table(root: Path) -> None:
    result = run("search", "chandlery", "--root", str(root))
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "score" in out and "file § section" in out and "lines" in out and "snippet" in out
    assert f"{MARCUS} § Childhood" in out
    assert "1.000" in out and "chandlery" in out and "**" not in out
    response = search_json(root, "chandlery")
    r = response["results"][0]
    assert f"{r['startLine']}-{r['endLine']}" in out
    assert "note: keyword search only" in result.stderr  # provider none: said so, on stderr


def test_search_json_fields(root: Path) -> None:
    response = search_json(root, "quillfeather", "-k", "3", "--mode", "lexical")
    assert (response["query"], response["mode"], response["degraded"]) == ("quillfeather", "lexical", None)
    (r,) = response["results"]
    assert r["filePath"] == "characters/elena-vance/profile.md" and r["matchedBy"] == ["keyword"]
    assert r["range"]["start"]["line"] == r["startLine"] - 1
    assert "explain" not in r


def test_search_explain(root: Path) -> None:
    response = search_json(root, "quillfeather", "--explain")
    assert response["results"][0]["explain"]["keywordRank"] == 1
    table = run("search", "quillfeather", "--root", str(root), "--explain")
    assert table.exit_code == 0 and "keyword rank 1, vector rank None, cosine -," in table.stdout
    assert "confidence 1.0, score 1.0" in table.stdout


@pytest.mark.parametrize(
    ("args", "check"),
    [
        (["--type", "character"], lambda r: r["entityType"] == "character"),
        (["--type", "place", "--type", "faction"], lambda r: r["entityType"] in ("place", "faction")),
        (["--file-type", "scene_draft"], lambda r: r["fileType"] == "scene_draft"),
        (["--book", "book-02"], lambda r: r["bookId"] == "book-02"),
        (["--chapter", "ch-03"], lambda r: r["chapterId"] == "ch-03"),
        (["--chapter", "3"], lambda r: r["chapterId"] == "ch-03"),  # as a writer types it
        (["--chapter", "Ch-3"], lambda r: r["chapterId"] == "ch-03"),
        (["--chapter", "Chapter 3"], lambda r: r["chapterId"] == "ch-03"),
        (["--max-chapter", "2"], lambda r: r["chapterId"] in (None, "ch-01", "ch-02")),
        (["--path", "world"], lambda r: r["filePath"].startswith("world/")),
        (["--glob", "books/**/*.md"], lambda r: r["filePath"].startswith("books/")),
        (["--role", "public"], lambda r: r["filePath"] != "characters/elena-vance/profile.md"),
        (["--min-score", "0.2"], lambda r: r["score"] >= 0.2),
    ],
)
def test_search_filters(root: Path, args: list[str], check: Any) -> None:
    results = search_json(root, "harbor ferry ledger marcus storm elena guild marigold", "-k", "100", *args)["results"]
    assert results and all(check(r) for r in results)


def test_a_chapter_that_is_no_chapter_is_a_usage_error(root: Path) -> None:
    """`--chapter five` matched no file and said only that nothing matched the filters."""
    result = run("search", "harbor", "--chapter", "five", "--root", str(root))
    assert result.exit_code == 2 and "--chapter: 'five' is not a chapter" in result.stderr, result.output


def test_search_respects_exclusion_unless_all_files(root: Path) -> None:
    assert search_json(root, "wolfsbane cipher")["results"] == []
    found = {r["filePath"] for r in search_json(root, "wolfsbane cipher", "--all-files")["results"]}
    assert found == {"notes/ideas.md", "notes/secret/plan.md"}
    table = run("search", "wolfsbane cipher", "--root", str(root))
    assert table.exit_code == 0 and "no results" in table.stdout


def test_search_finds_the_root_from_the_current_folder(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(root / "characters" / "marcus-cole")
    result = run("search", "chandlery", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["results"][0]["filePath"] == MARCUS


# -- get / related / enrich ------------------------------------------------------------------------------------
def test_get_line_ranges(root: Path) -> None:
    lines = (root / MARCUS).read_text(encoding="utf-8").split("\n")
    result = run("get", f"{MARCUS}:9-10", "--root", str(root))
    assert result.exit_code == 0, result.output
    assert result.stdout == "\n".join(lines[8:10]) + "\n"
    assert run("get", f"{MARCUS}:24", "--root", str(root)).stdout == "\n".join(lines[23:]).rstrip("\n") + "\n"
    assert run("get", MARCUS, "--root", str(root)).stdout == (root / MARCUS).read_text(encoding="utf-8")
    got = json.loads(run("get", f"{MARCUS}:2-3", "--root", str(root), "--json").stdout)
    assert got == {
        "path": MARCUS,
        "startLine": 2,
        "endLine": 3,
        "totalLines": len(lines) - 1,
        "text": "\n".join(lines[1:3]),
    }


@pytest.mark.parametrize(
    "location",
    [
        "../outside.md",
        "/etc/passwd",
        ".saipling/index.db",
        ".context_settings.json",
        "skills/writer.toml",
        "characters/nobody.md",
    ],
)
def test_get_rejections_exit_2(root: Path, location: str) -> None:
    result = run("get", location, "--root", str(root))
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("location", "says"), [(f"{MARCUS}:0-2", "numbered from 1"), (f"{MARCUS}:5-2", "before it starts")]
)
def test_get_impossible_ranges_say_why(root: Path, location: str, says: str) -> None:
    result = run("get", location, "--root", str(root))
    assert result.exit_code == 2 and says in result.stderr and "Traceback" not in result.output


def paths_of(response: dict) -> list[str]:
    return [r["filePath"] for r in response["results"]]


def test_related(root: Path) -> None:
    result = run("related", MARCUS, "--root", str(root), "--json", "-k", "20")
    assert result.exit_code == 0, result.output
    response = json.loads(result.stdout)
    got = {r["filePath"] for r in response["results"]}
    assert got and MARCUS not in got and not got & {"notes/ideas.md", "notes/secret/plan.md"}
    table = run("related", MARCUS, "--root", str(root))
    assert table.exit_code == 0 and "file § section" in table.stdout
    unknown = run("related", "characters/nobody/profile.md", "--root", str(root))  # a typo, not "not indexed yet"
    assert unknown.exit_code == 2 and unknown.stderr == (
        "error: path: characters/nobody/profile.md does not exist or is not visible to this request\n"
    )
    (root / "characters" / "new.md").write_bytes(b"\x00\x01binary")  # exists, but can never be indexed
    try:
        unindexed = run("related", "characters/new.md", "--root", str(root))
        refused = run("get", "characters/new.md", "--root", str(root))  # refused as `get` refuses it
        assert unindexed.exit_code == refused.exit_code == 2 and "binary" in unindexed.stderr
        assert unindexed.stderr == refused.stderr
    finally:
        (root / "characters" / "new.md").unlink()
    (root / "characters" / "new.md").write_text("# New\n\nA profile written since the last index.\n")
    try:  # a readable file not indexed yet: said so, no error
        unindexed = run("related", "characters/new.md", "--root", str(root))
        assert unindexed.exit_code == 0, unindexed.stderr
    finally:
        (root / "characters" / "new.md").unlink()
    assert run("related", "../x.md", "--root", str(root)).exit_code == 2
    at = json.loads(run("related", f"{MARCUS}:4-5", "--root", str(root), "--json").stdout)  # the passage there
    assert at["results"] and at["startLine"] <= 4 and at["endLine"] >= 5 and MARCUS not in paths_of(at)
    bad = run("related", f"{MARCUS}:0", "--root", str(root))
    assert bad.exit_code == 2 and "numbered from 1" in bad.stderr


def test_related_refuses_a_line_past_the_end_as_get_does(root: Path) -> None:
    total = len((root / MARCUS).read_text(encoding="utf-8").rstrip("\n").split("\n"))
    for location in (f"{MARCUS}:9999", f"{MARCUS}:{total + 1}-{total + 5}"):
        related = run("related", location, "--root", str(root))
        got = run("get", location, "--root", str(root))
        assert related.exit_code == got.exit_code == 2, related.output
        assert related.stderr == got.stderr == f"error: startLine: is past the end of {MARCUS} ({total} lines)\n"
    last = run("related", f"{MARCUS}:{total}", "--root", str(root), "--json")  # the last line is still a line
    assert last.exit_code == 0, last.output


def test_enrich(root: Path) -> None:
    result = run("enrich", "storm ledger sister", "--root", str(root), "--skill", "writer")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("=== FILE: ") and "(SEARCH) ===\n--- " in result.stdout
    assert "cipher" not in result.stdout and "wolfsbane" not in result.stdout
    response = json.loads(
        run("enrich", "storm ledger sister", "--root", str(root), "--loaded", MARCUS, "--json").stdout
    )
    assert response["ran"] and MARCUS not in {r["filePath"] for r in response["searchResults"]}
    assert {"path": MARCUS, "reason": "already_loaded"} in response["skipped"]
    empty = run("enrich", "storm ledger sister", "--root", str(root), "--max-tokens", "0")
    assert empty.exit_code == 0 and empty.stdout.startswith("(nothing added: ")
    tight = run("enrich", "storm ledger sister", "--root", str(root), "--max-tokens", "20")
    assert tight.exit_code == 0, tight.output  # the real reason, not why it searched
    assert re.fullmatch(r"\(nothing added: the \d+ passages found are each over the 20-token budget\)\n", tight.stdout)
    never = run("enrich", "storm ledger sister", "--root", str(root), "--skill", "never")
    assert never.stdout.strip() == "(nothing added: skill mode is never)"
    missing = run("enrich", "storm ledger", "--root", str(root), "--skill", "nope")
    assert missing.exit_code == 2 and missing.stderr.startswith("error: skill: ")
    # the request's own limits, as the MCP tool and the language server take them
    args = ("enrich", "storm ledger sister", "--root", str(root), "--json")
    wide = json.loads(run(*args, "--max-tokens", "50000").stdout)["searchResults"]
    assert len(wide) > 2 and any(re.search(r"/ch-0[2-9]/", r["filePath"]) for r in wide), wide
    assert len(json.loads(run(*args, "-k", "2").stdout)["searchResults"]) == 2
    early = json.loads(run(*args, "--max-chapter", "1").stdout)["searchResults"]
    assert early and not any(re.search(r"/ch-0[2-9]/", r["filePath"]) for r in early)
    assert run(*args, "--known-by", "nobody-at-all").exit_code == 2


# -- usage errors ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args",
    [
        ["search"],
        ["search", ""],
        ["search", "   "],
        ["search", "x" * 2001],
        ["search", "storm", "-k", "0"],
        ["search", "storm", "-k", "101"],
        ["search", "storm", "--mode", "fuzzy"],
        ["search", "storm", "--max-chapter", "three"],
        ["search", "storm", "--min-score", "2"],
        ["search", "storm", "--min-score", "nan"],
        ["search", "storm", "--no-such-flag"],
        ["get"],
        ["related"],
        ["enrich"],
        ["enrich", ""],
        ["no-such-command"],
    ],
)
def test_usage_errors_exit_2(root: Path, args: list[str]) -> None:
    result = run(*args, *(["--root", str(root)] if len(args) > 1 and args[0] != "no-such-command" else []))
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output


def test_missing_root_is_a_usage_error(tmp_path: Path) -> None:
    result = run("search", "storm", "--root", str(tmp_path / "missing"))
    assert result.exit_code == 2 and "not a folder" in result.stderr


def test_every_retrieval_command_has_help() -> None:
    for command in ("search", "get", "related", "enrich", "eval"):
        result = run(command, "--help")
        assert result.exit_code == 0 and "Usage:" in result.stdout


def test_installed_entry_point(root: Path) -> None:
    exe = shutil.which("saipling")
    cmd = [exe] if exe else [sys.executable, "-m", "saipling"]
    env = os.environ | ENV
    done = subprocess.run(
        [*cmd, "search", "chandlery", "--root", str(root), "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["results"][0]["filePath"] == MARCUS
    bad = subprocess.run([*cmd, "search", "", "--root", str(root)], capture_output=True, text=True, env=env, timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("error: query: ") and "Traceback" not in bad.stderr


def test_brackets_in_paths_and_headings_are_shown_as_text(tmp_path: Path) -> None:
    root = tmp_path / "brackets"
    root.mkdir()
    (root / "plan.md").write_text("# Plan [/draft]\n\nThe harbor plan for the winter storm season.\n", "utf-8")
    (root / "[red]x.md").write_text("# X\n\nAnother harbor note about the winter storm.\n", "utf-8")
    assert run("index", str(root)).exit_code == 0
    result = run("search", "harbor", "--root", str(root), "--explain")
    assert result.exit_code == 0, result.output
    assert "plan.md § Plan [/draft]" in result.stdout and "[red]x.md" in result.stdout


def test_a_malformed_glob_is_refused_or_ignored_never_a_crash(tmp_path: Path) -> None:
    root = tmp_path / "globs"
    (root / "notes").mkdir(parents=True)
    (root / "notes" / "a.md").write_text("# A\n\nThe storm at sea raged all night over the harbour.\n", "utf-8")
    (root / ".context_settings.json").write_text('{"notes/[z-a]*.md": "exclude"}', "utf-8")
    assert run("index", str(root)).exit_code == 0
    found = search_json(root, "storm")  # the bad settings entry matches nothing: the file is still found
    assert [r["filePath"] for r in found["results"]] == ["notes/a.md"]
    refused = run("search", "storm", "--root", str(root), "--glob", "[z-a]")
    assert refused.exit_code == 2 and "filter.glob" in refused.output and "Traceback" not in refused.output


def test_get_refuses_an_excluded_file_unless_all_files(root: Path) -> None:
    refused = run("get", "notes/ideas.md", "--root", str(root))
    assert refused.exit_code == 2 and "excluded" in refused.stderr and "cipher" not in refused.output
    allowed = run("get", "notes/ideas.md", "--root", str(root), "--all-files")
    assert allowed.exit_code == 0 and "cipher" in allowed.stdout


def test_the_table_marks_a_result_weak_by_its_own_confidence_not_its_relative_score(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A scene below a bible note that sums it up scores 0.39 (its score is relative to the note's) with a
    confidence of 0.9: it is not "low confidence"; a weak result ranked among strong ones goes under the divider."""
    from saipling.cli.main import _print_results

    def row(path: str, score: float, confidence: float) -> dict:
        return {
            "filePath": path,
            "sectionHeading": None,
            "startLine": 1,
            "endLine": 2,
            "snippet": "text",
            "score": score,
            "confidence": confidence,
        }

    _print_results({"results": [row("note.md", 0.99, 0.99), row("scene.md", 0.39, 0.9)]}, explain=False)
    assert "low confidence" not in capsys.readouterr().out
    _print_results(
        {
            "results": [
                row("note.md", 0.99, 0.99),
                row("vague.md", 0.6, 0.1),
                row("scene.md", 0.39, 0.9),
                row("far.md", 0.2, 0.05),
            ]
        },
        explain=False,
    )
    out = capsys.readouterr().out
    assert out.count("low confidence") == 1  # (confident ones first, then the weak under the divider, piped or not)
    assert out.index("scene.md") < out.index("low confidence") < out.index("vague.md") < out.index("far.md")

"""The CLI reads a live project: `search`, `enrich` and `related` see files edited, added, renamed or deleted since
the last `saipling index` (their text is re-read first; `index` embeds it), and an index with nothing in it says
so instead of answering "no results" as if the project held nothing relevant."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from fixtures import bump_mtime
from saipling.cli.main import main
from saipling.live import freshness
from saipling.storage.sqlite.lock import index_lock
from test_cli_cold import heavy_modules

ENV = {
    "SAIPLING_PROVIDER": "none",
    "COLUMNS": "220",
    "NO_COLOR": "1",
    "SAIPLING_LOG_LEVEL": None,
    "VOYAGE_API_KEY": None,
    "OPENAI_API_KEY": None,
    "OPENAI_BASE_URL": None,
}

CHAPTER = "# Chapter One\n\n" + "\n\n".join(
    f"Paragraph {n} of the harbour chapter: the tide turned and the gulls wheeled over the quay." for n in range(12)
)


def run(*args: str) -> Result:
    return CliRunner(env=ENV).invoke(main, list(args))


def search_json(root: Path, query: str, *args: str) -> dict[str, Any]:
    result = run("search", query, "--root", str(root), "--json", "--mode", "lexical", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "novel"
    (root / "chapters").mkdir(parents=True)
    (root / "chapters" / "01.md").write_text(CHAPTER + "\n", "utf-8")
    (root / "chapters" / "02.md").write_text("# Chapter Two\n\nThe lighthouse keeper counted ships.\n", "utf-8")
    (root / "notes.md").write_text("# Notes\n\nRemember the brass telescope in chapter two.\n", "utf-8")
    assert run("index", str(root)).exit_code == 0
    return root


def test_search_sees_an_edit_in_the_middle_of_a_file_at_its_new_lines(project: Path) -> None:
    path = project / "chapters" / "01.md"
    lines = path.read_text("utf-8").split("\n")
    lines[8:8] = ["Marguerite hid the zephyrine locket under the third floorboard.", ""]
    path.write_text("\n".join(lines), "utf-8")
    bump_mtime(path)
    found = search_json(project, "zephyrine locket")
    hit = found["results"][0]
    assert hit["filePath"] == "chapters/01.md" and hit["startLine"] <= 9 <= hit["endLine"]
    got = run("get", f"chapters/01.md:{hit['startLine']}-{hit['endLine']}", "--root", str(project))
    assert "zephyrine locket" in got.stdout
    assert hit["endLine"] == len(lines) - 1  # (one short section: its range ends at the file's new last line)


def test_search_sees_files_added_renamed_and_deleted_since_the_index(project: Path) -> None:
    (project / "chapters" / "03.md").write_text("# Chapter Three\n\nThe quorvath ferry sank at dawn.\n", "utf-8")
    (project / "chapters" / "02.md").rename(project / "chapters" / "02-lighthouse.md")
    (project / "notes.md").unlink()
    before = json.loads(run("status", str(project), "--json").stdout)
    assert (before["totalFiles"], before["pendingFiles"]) == (3, 4)  # (status reads nothing: it counts them)
    assert "left:       4 files not read yet" in run("status", str(project)).stdout
    assert [r["filePath"] for r in search_json(project, "quorvath")["results"]] == ["chapters/03.md"]
    assert [r["filePath"] for r in search_json(project, "lighthouse keeper")["results"]] == [
        "chapters/02-lighthouse.md"
    ]
    assert search_json(project, "brass telescope")["results"] == []
    status = json.loads(run("status", str(project), "--json").stdout)
    assert (status["totalFiles"], status["pendingFiles"]) == (3, 0)
    enrich = json.loads(run("enrich", "quorvath ferry sank", "--root", str(project), "--json").stdout)
    assert "quorvath" in enrich["contextBlock"]
    related = run("related", "chapters/03.md", "--root", str(project), "--json")
    assert related.exit_code == 0 and json.loads(related.stdout)["indexed"] is True


def test_many_changed_files_are_left_to_index_and_said(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(freshness, "REFRESH_LIMIT", 2)
    for n in range(3):
        (project / f"new-{n}.md").write_text(f"# New {n}\n\nThe velomorph sketch number {n}.\n", "utf-8")
    result = run("search", "velomorph", "--root", str(project), "--mode", "lexical", "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["results"] == []
    assert "3 files changed since the last index" in result.stderr and "saipling index" in result.stderr
    assert run("index", str(project)).exit_code == 0
    assert len(search_json(project, "velomorph")["results"]) == 3


def test_files_deleted_or_newly_excluded_leave_results_at_once_however_many(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dropping a file reads nothing: files deleted, or excluded by the config since the index, leave the results
    at once even when more than REFRESH_LIMIT changed (they were counted as changed files to read, and shown)."""
    monkeypatch.setattr(freshness, "REFRESH_LIMIT", 2)
    for n in range(4):
        (project / "drafts").mkdir(exist_ok=True)
        (project / "drafts" / f"d{n}.md").write_text(f"# Draft {n}\n\nThe velomorph draft {n}.\n", "utf-8")
    assert run("index", str(project)).exit_code == 0
    assert len(search_json(project, "velomorph")["results"]) == 4
    (project / ".saipling" / "config.toml").write_text('exclude = ["drafts/**"]\n', "utf-8")
    for n in range(3):
        (project / f"new-{n}.md").write_text(f"# New {n}\n\nThe quillfern sketch {n}.\n", "utf-8")
    result = run("search", "velomorph", "--root", str(project), "--mode", "lexical", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["results"] == []
    assert "3 files changed since the last index" in result.stderr  # (the new ones: left to `saipling index`)
    assert "4 files" not in result.stderr and "7 files" not in result.stderr


def test_a_search_beside_another_writer_answers_from_the_index_as_it_is(project: Path) -> None:
    (project / "chapters" / "03.md").write_text("# Chapter Three\n\nThe quorvath ferry sank at dawn.\n", "utf-8")
    with index_lock(project / ".saipling", wait=False):  # e.g. a running `saipling index` or server
        assert search_json(project, "quorvath")["results"] == []  # (that process indexes the new file itself)
    assert [r["filePath"] for r in search_json(project, "quorvath")["results"]] == ["chapters/03.md"]


def test_a_search_waits_for_another_commands_re_read_then_reads_what_it_left(project: Path) -> None:
    (project / "chapters" / "03.md").write_text("# Chapter Three\n\nThe quorvath ferry sank at dawn.\n", "utf-8")
    held = index_lock(project / ".saipling", wait=False, what="refresh")  # another search re-reading files
    held.__enter__()
    threading.Timer(1.0, held.__exit__, (None, None, None)).start()
    assert [r["filePath"] for r in search_json(project, "quorvath")["results"]] == ["chapters/03.md"]


def test_searches_started_at_once_after_an_edit_all_see_it(project: Path) -> None:
    """An agent's parallel tool calls right after it wrote a note: every process answers from the note as it is
    now (one re-reads it; the others waited for that instead of answering from the index before the edit)."""
    env = {k: v for k, v in os.environ.items() if k not in ENV} | {k: v for k, v in ENV.items() if v is not None}
    for n, word in enumerate(("quorvath", "zembrila")):
        note = project / "notes.md"
        note.write_text(f"# Notes\n\nRemember the brass telescope.\n\n## New\n\nThe {word} {n}.\n", "utf-8")
        bump_mtime(note, 5.0 * (n + 1))  # (a write within the same clock tick as the index still reads as new)
        command = [sys.executable, "-m", "saipling", "search", word, "--root", str(project), "--json", "-k", "1"]
        pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True, "env": env}
        runs = [subprocess.Popen(command, **pipes) for _ in range(3)]  # type: ignore[call-overload]
        outs = [p.communicate(timeout=120) for p in runs]
        assert all(p.returncode == 0 for p in runs), [err for _out, err in outs]
        found = [[r["filePath"] for r in json.loads(out)["results"]] for out, _err in outs]
        assert found == [["notes.md"]] * 3, found


def test_a_root_inside_a_project_reads_the_project_and_one_above_names_it(project: Path) -> None:
    """`--root novel/chapters` (a folder of an indexed project, no index of its own) reads the project's index, as
    running from that folder does, and a path given relative to that folder is found; the folder above the
    project is told where the project is, not to index itself (and the project again, nested)."""
    inner = project / "chapters"
    found = run("search", "lighthouse", "--root", str(inner), "--json", "--mode", "lexical")
    assert found.exit_code == 0, found.output
    assert [r["filePath"] for r in json.loads(found.stdout)["results"]] == ["chapters/02.md"]
    assert f"inside the project at {project}" in found.stderr and "--path chapters" in found.stderr
    got = run("get", "02.md", "--root", str(inner), "--json")
    assert got.exit_code == 0, got.output
    assert "lighthouse keeper" in json.loads(got.stdout)["text"]
    assert not (inner / ".saipling").exists()
    above = run("search", "lighthouse", "--root", str(project.parent))
    assert above.exit_code == 0 and "no results" in above.stdout
    assert f"the projects in its folders: {project.name} (use --root {project})" in above.stderr
    assert not (project.parent / ".saipling").exists()


def test_a_project_never_indexed_or_cleared_says_to_index_it(tmp_path: Path, project: Path) -> None:
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "a.md").write_text("# A\n\nThe harbour at dawn.\n", "utf-8")
    for args in (["search", "harbour"], ["search", "harbour", "--json"], ["enrich", "harbour at dawn"]):
        result = run(*args, "--root", str(fresh))
        assert result.exit_code == 0, result.output
        assert f"the index of {fresh} is empty" in result.stderr and f"run `saipling index {fresh}`" in result.stderr
    assert not (fresh / ".saipling").exists()  # a read never creates the index
    assert run("clear", str(project)).exit_code == 0
    cleared = run("search", "lighthouse", "--root", str(project))
    assert "is empty (never indexed, cleared" in cleared.stderr and "no results" in cleared.stdout
    assert json.loads(run("status", str(project), "--json").stdout)["totalFiles"] == 0  # (not refilled)


def test_the_installed_cli_finds_a_note_an_agent_just_wrote(project: Path) -> None:
    """An agent's memory: write a file, then ask the CLI in a new process (no index run between)."""
    (project / "memory").mkdir()
    (project / "memory" / "2026-11-24.md").write_text("# Session\n\nThe user prefers the oxblood cover.\n", "utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ENV} | {k: v for k, v in ENV.items() if v is not None}
    done = subprocess.run(
        [sys.executable, "-m", "saipling", "search", "oxblood cover", "--root", str(project), "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    (hit,) = [r for r in json.loads(done.stdout)["results"] if r["filePath"] == "memory/2026-11-24.md"]
    assert hit["startLine"] <= 3 <= hit["endLine"]


@pytest.mark.parametrize("command", [["search", "harbour", "--json"], ["search", "harbour"], ["status", "--json"]])
def test_a_reader_that_closes_the_pipe_early_ends_the_command_quietly(project: Path, command: list[str]) -> None:
    """`saipling search x | head -3`: no "error: BrokenPipeError" and no traceback on the terminal."""
    env = {k: v for k, v in os.environ.items() if k not in ENV} | {k: v for k, v in ENV.items() if v is not None}
    root = ["--root", str(project)] if command[0] == "search" else [str(project)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "saipling", *command, *root], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # (before the command writes anything: its first write meets a closed pipe)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 1, err  # (the output did not all arrive: not 0)
    assert "BrokenPipe" not in err and "Traceback" not in err and "Exception ignored" not in err


@pytest.mark.parametrize("columns", ["80", "50"])
def test_the_table_shows_whole_paths_in_a_narrow_terminal_or_a_pipe(tmp_path: Path, columns: str) -> None:
    """Piped output is 80 columns wide (or COLUMNS): a long path is wrapped in its column, not cut to
    `Compendium/13A/I…`, which would not say which file a result is in."""
    root = tmp_path / "vault"
    deep = root / "Compendium" / "13A" / "Icons"
    deep.mkdir(parents=True)
    (deep / "Great-Gold-Wyrm.md").write_text("# Great Gold Wyrm\n\nThe world's protector seals the Abyss.\n")
    (deep / "Lich-King.md").write_text("# Lich King\n\nThe lord of the undead would rule the Abyss too.\n")
    assert run("index", str(root)).exit_code == 0
    result = CliRunner(env=ENV | {"COLUMNS": columns}).invoke(main, ["search", "Abyss", "--root", str(root)])
    assert result.exit_code == 0, result.output
    cells = [line.split("│")[2].strip() for line in result.stdout.splitlines() if line.startswith("│")]
    column = "".join(cells)
    for name in ("Great-Gold-Wyrm.md", "Lich-King.md"):
        assert f"Compendium/13A/Icons/{name}" in column, result.stdout
    assert "…" not in column


def test_a_binary_note_is_not_pending_forever_nor_reread_by_every_search(project: Path) -> None:
    """A `*.md` the indexer refuses for its content (binary) is skipped once; status does not count it as a file
    not read yet, and a search does not try it again (loading the indexer) until it changes."""
    (project / "scan.md").write_bytes(b"\x00\x01\x02 not text")
    assert json.loads(run("status", str(project), "--json").stdout)["pendingFiles"] == 1
    assert run("index", str(project)).exit_code == 0
    assert json.loads(run("status", str(project), "--json").stdout)["pendingFiles"] == 0
    search = ["search", "harbour", "--mode", "lexical", "--json"]
    assert heavy_modules(project, *search, provider="none", heavy=("saipling.indexing.indexer", "numpy")) == []
    (project / "scan.md").write_bytes(b"# Scan\n\nNow the scan is text about the harbour.\n")
    assert json.loads(run("status", str(project), "--json").stdout)["pendingFiles"] == 1  # changed: tried again
    assert "scan.md" in {r["filePath"] for r in search_json(project, "harbour")["results"]}


def test_an_absolute_path_filter_inside_the_root_is_read_from_the_root(project: Path, tmp_path: Path) -> None:
    """`--path "$PWD/chapters"` (what shell completion gives) filters as `--path chapters`, not to nothing."""
    relative = [r["filePath"] for r in search_json(project, "harbour lighthouse", "--path", "chapters")["results"]]
    assert relative and all(p.startswith("chapters/") for p in relative)
    absolute = search_json(project, "harbour lighthouse", "--path", str(project / "chapters"))
    assert [r["filePath"] for r in absolute["results"]] == relative
    everything = search_json(project, "harbour lighthouse telescope", "--path", str(project))
    assert {r["filePath"] for r in everything["results"]} >= {"notes.md", "chapters/02.md"}
    outside = run("search", "harbour", "--root", str(project), "--path", str(tmp_path))
    assert outside.exit_code == 2 and "filter.pathPrefix" in outside.stderr and "outside" in outside.stderr


def test_path_dot_is_the_current_folder(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`cd chapters && saipling search x --path .` searches chapters/ (it matched nothing); at the root, `.` is
    every file."""
    monkeypatch.chdir(project / "chapters")
    here = {r["filePath"] for r in search_json(project, "harbour lighthouse telescope", "--path", ".")["results"]}
    assert here == {"chapters/01.md", "chapters/02.md"}
    monkeypatch.chdir(project)
    everywhere = {
        r["filePath"] for r in search_json(project, "harbour lighthouse telescope", "--path", "./")["results"]
    }
    assert everywhere == {"chapters/01.md", "chapters/02.md", "notes.md"}


def test_every_cli_command_and_option_is_in_the_readme_table() -> None:
    """The CLI table (docs/cli.md, linked from the README) is what a new user reads: each command has its row,
    and the row names every option the command takes (`saipling eval --limit`, `get --json`, ... were missing)."""
    import re

    import click

    readme = (Path(__file__).resolve().parent.parent / "docs" / "cli.md").read_text("utf-8")
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `saipling (\w+)[^`]*` \|", readme, re.M)}
    assert isinstance(main, click.Group)
    missing = []
    for name, command in main.commands.items():
        row = rows.get(name)
        if row is None:
            missing.append(name)
            continue
        for param in command.params:
            if isinstance(param, click.Option) and not any(opt in row for opt in param.opts):
                missing.append(f"{name} {param.opts[0]}")
    assert missing == []


def test_debug_logging_shows_saiplings_work_not_the_markdown_parsers_trace(project: Path) -> None:
    """`saipling -vv search` after an edit: saipling's DEBUG lines, not thousands of markdown-it rule traces."""
    (project / "chapters" / "01.md").write_text(CHAPTER + "\n\nA new paragraph about the quay.\n", "utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ENV} | {k: v for k, v in ENV.items() if v is not None}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "saipling",
            "-vv",
            "search",
            "quay",
            "--root",
            str(project),
            "--mode",
            "lexical",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "re-read 1 changed file(s)" in done.stderr  # (INFO saipling.live.freshness)
    assert "markdown_it" not in done.stderr, done.stderr[:500]


def test_get_and_related_take_a_path_typed_in_a_subfolder(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In `novel/chapters`, `saipling get 02.md:3` (shell completion) reads chapters/02.md, as git would; a path
    from the root (as search results give them) still wins, and `..` cannot leave the project."""
    monkeypatch.chdir(project / "chapters")
    got = run("get", "02.md:3", "--json")
    assert got.exit_code == 0, got.output
    assert json.loads(got.stdout)["path"] == "chapters/02.md" and "lighthouse keeper" in got.stdout
    assert "lighthouse keeper" in run("get", "./02.md").stdout
    assert "brass telescope" in run("get", "../notes.md:3").stdout  # (inside the project: fine)
    assert "Remember" in run("get", "notes.md:3").stdout  # the root's notes.md, though cwd is chapters/
    related = run("related", "02.md", "--json")
    assert related.exit_code == 0 and json.loads(related.stdout)["path"] == "chapters/02.md"
    outside = project.parent / "outside.md"
    outside.write_text("# Outside\n\nNot part of the novel.\n", "utf-8")
    refused = run("get", "../../outside.md")
    assert refused.exit_code == 2 and "Not part" not in refused.output


def test_a_settings_typo_is_warned_once_with_the_setting_it_is_close_to(project: Path) -> None:
    (project / ".saipling" / "config.toml").write_text('provder = "none"\n[rerank]\ntopn = 5\nzzq = 1\n', "utf-8")
    result = run("search", "lighthouse", "--root", str(project))
    assert result.exit_code == 0, result.output
    lines = [ln for ln in result.stderr.splitlines() if "unknown setting" in ln]
    assert lines == [
        "warning: config.toml: unknown setting provder (did you mean provider?)",
        "warning: config.toml: unknown setting rerank.topn (did you mean topN?)",
        "warning: config.toml: unknown setting rerank.zzq",
    ]


def test_filters_that_match_nothing_say_so(project: Path) -> None:
    """A search that finds nothing under a filter says whether the filter did it, instead of a bare "no results"
    (a new user's `--path Classes` for `Compendium/13A/Classes` concluded the content was not there)."""
    for prefix in ("Chapters", "chaptrs"):
        result = run("search", "lighthouse", "--root", str(project), "--path", prefix)
        assert result.exit_code == 0 and "no results" in result.stdout
        assert f"--path {prefix}: no indexed file is under that folder (did you mean --path chapters?)" in result.stderr
    typed = run("search", "lighthouse", "--root", str(project), "--type", "wizzard", "--json")
    assert typed.exit_code == 0 and json.loads(typed.stdout)["results"] == []
    assert "nothing matches the filters (--type wizzard); without them this query has 1 result" in typed.stderr
    capped = run("search", "lighthouse", "--root", str(project), "--type", "wizzard", "-k", "1")  # (-k caps it)
    assert "without them this query has at least 1 result" in capped.stderr, capped.stderr
    nothing = run("search", "zzqxv", "--root", str(project), "--type", "wizzard")
    assert "no results without the filters (--type wizzard) either" in nothing.stderr
    dotted = run("search", "telescope", "--root", str(project), "--path", "./chapters")  # (in notes.md only)
    assert "nothing matches the filters (--path ./chapters)" in dotted.stderr and "no indexed file" not in dotted.stderr
    found = run("search", "lighthouse", "--root", str(project), "--path", "chapters", "--json")
    assert [r["filePath"] for r in json.loads(found.stdout)["results"]] == ["chapters/02.md"]
    assert "no indexed file" not in found.stderr and "nothing matches" not in found.stderr


def test_an_index_deleted_while_a_run_writes_it_is_said_not_reported_done(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`rm -rf .saipling` during `saipling index`: the run writes to an unlinked file; it said "indexed N files"
    (exit 0) and nothing was on disk. The deletion is made here at the start of the run, as a user's would be."""
    from saipling.project import Project

    real_index = Project.index

    def index_after_a_deletion(self: Project, *args: Any, **kwargs: Any) -> Any:
        for name in ("index.db", "index.db-wal", "index.db-shm"):
            (project / ".saipling" / name).unlink(missing_ok=True)
        return real_index(self, *args, **kwargs)

    (project / "chapters" / "03.md").write_text("# Chapter Three\n\nThe quorvath ferry.\n", "utf-8")
    monkeypatch.setattr(Project, "index", index_after_a_deletion)
    result = run("index", str(project))
    assert result.exit_code == 1
    assert "was deleted or replaced while this run wrote it" in result.stderr and "saipling index" in result.stderr
    monkeypatch.setattr(Project, "index", real_index)
    assert run("index", str(project)).exit_code == 0  # and the next run builds it again
    assert [r["filePath"] for r in search_json(project, "quorvath")["results"]] == ["chapters/03.md"]


def test_a_path_filter_with_dot_dot_is_read_from_the_root(project: Path) -> None:
    """`--path ../` (a folder outside the root) found "no indexed file is under that folder", exit 0, where the same
    folder given absolute is refused; `--path notes/../chapters` (chapters/) filtered to nothing."""
    outside = run("search", "harbour", "--root", str(project), "--path", "../")
    assert outside.exit_code == 2 and "filter.pathPrefix" in outside.stderr and "outside" in outside.stderr
    found = search_json(project, "harbour lighthouse", "--path", "nothing/../chapters")["results"]
    assert found and all(r["filePath"].startswith("chapters/") for r in found)

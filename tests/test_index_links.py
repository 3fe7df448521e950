"""Issue 30, item 1: nothing outside the project is written through `.saipling/`.

A matrix of links (a symbolic link to a file outside, to a folder outside, a dangling one, a hard link to a file
outside) at every entry saipling writes or locks (`.saipling` itself, `index.lock`, `index.db` and SQLite's
`-wal`, `-shm`, `-journal`), crossed with every entry point: `saipling index/search/get/related/clear/status`, a
search that finds a changed file (click's runner in-process for the whole matrix, real subprocesses for a
rotation through it), `saipling serve` opening the folder with no request at all, and `saipling mcp` starting.
Each must leave everything outside byte-identical and unrenamed, and tell the user which entry it refused."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from fixtures import make_project
from rawlsp import RawServer
from saipling.cli.main import main

FILES = {
    "notes/lighthouse.md": "# Lighthouse\n\nThe keeper collects lost letters from the sea.\n",
    "notes/harbor.md": "# Harbor\n\nFishing boats return at dusk with silver herring.\n",
    "notes/mountain.md": "# Mountain\n\nA dragon sleeps beneath the snowy peak.\n",
}
ENTRIES = [".saipling", "index.lock", "index.db", "index.db-wal", "index.db-shm", "index.db-journal"]
KINDS = ["file", "dir", "dangling", "hardlink"]
CASES = [(e, k) for e in ENTRIES for k in KINDS if not (e == ".saipling" and k == "hardlink")]
COMMANDS = ["index", "search", "get", "related", "clear", "status", "search-changed"]


def env_for(**extra: str) -> dict[str, str]:
    drop = ("SAIPLING_", "VOYAGE_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update({"SAIPLING_PROVIDER": "none", **extra})
    return env


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project indexed once (keyword-only), copied for each case."""
    root = make_project(tmp_path_factory.mktemp("template"), FILES)
    done = subprocess.run(
        [sys.executable, "-m", "saipling", "index", str(root)],
        env=env_for(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return root


def outside_world(base: Path) -> Path:
    """What a link could reach: another application's SQLite file, a precious file, a folder holding what an
    index folder holds (a garbage `index.db` an old saipling renamed aside, a lock file)."""
    out = base / "outside"
    (out / "folder").mkdir(parents=True)
    conn = sqlite3.connect(out / "other-app.db")
    conn.execute("CREATE TABLE contacts (name TEXT)")
    conn.execute("INSERT INTO contacts VALUES ('Ada')")
    conn.commit()
    conn.close()
    (out / "precious.txt").write_bytes(b"do not truncate me\n")
    (out / "folder" / "index.db").write_bytes(b"not a database, but someone's file\n" * 10)
    (out / "folder" / "index.lock").write_bytes(b"12345")
    (out / "folder" / "notes.txt").write_bytes(b"keep\n")
    return out


def snapshot(out: Path) -> dict[str, Any]:
    """Every name under `out` with its bytes (or link target), kind and link count."""
    seen: dict[str, Any] = {}
    for path in sorted(out.rglob("*")):
        st = path.lstat()
        body = os.readlink(path) if path.is_symlink() else None if path.is_dir() else path.read_bytes()
        seen[path.relative_to(out).as_posix()] = (st.st_mode, body)
    return seen


def plant(root: Path, out: Path, entry: str, kind: str) -> Path:
    """Replace `entry` of the project's `.saipling/` by a link of `kind`; returns the planted path."""
    folder = root / ".saipling"
    where = root / entry if entry == ".saipling" else folder / entry
    if where.is_dir() and not where.is_symlink():
        shutil.rmtree(where)
    elif os.path.lexists(where):
        where.unlink()
    target = {
        "file": out / ("other-app.db" if entry.startswith("index.db") else "precious.txt"),
        "dir": out / "folder",
        "dangling": out / "missing" / "nothing-here",
    }
    if kind == "hardlink":
        os.link(out / ("other-app.db" if entry == "index.db" else "precious.txt"), where)
    else:
        os.symlink(target[kind], where)
    return where


def case(tmp_path: Path, indexed: Path, entry: str, kind: str) -> tuple[Path, Path, Path, dict[str, Any]]:
    root = tmp_path / "project"
    shutil.copytree(indexed, root, symlinks=True)
    out = outside_world(tmp_path)
    planted = plant(root, out, entry, kind)
    return root, out, planted, snapshot(out)


def argv(command: str, root: Path) -> list[str]:
    if command == "search-changed":  # a search that finds a file changed since it was indexed
        note = root / "notes" / "harbor.md"
        note.write_text(note.read_text() + "\nThe herring market opens at dawn.\n")
        os.utime(note, ns=(time.time_ns(), time.time_ns() + 5_000_000_000))
        return ["search", "herring", "--root", str(root), "--json"]
    return {
        "index": ["index", str(root)],
        "search": ["search", "dragon", "--root", str(root), "--json"],
        "get": ["get", "notes/mountain.md", "--root", str(root)],
        "related": ["related", "notes/mountain.md", "--root", str(root)],
        "clear": ["clear", str(root)],
        "status": ["status", str(root), "--json"],
    }[command]


def assert_refused(code: int, stderr: str, planted: Path, out: Path, before: dict[str, Any]) -> None:
    assert snapshot(out) == before  # nothing outside created, truncated, renamed or written
    assert not (out / "missing").exists()
    assert code == 1, stderr
    assert f"refusing {planted}:" in stderr, stderr
    assert "Traceback" not in stderr


@pytest.mark.parametrize(("entry", "kind"), CASES)
def test_every_command_refuses_a_link_in_the_index_folder(
    tmp_path: Path, indexed: Path, entry: str, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole matrix through the real CLI code in this process (click's runner)."""
    root, out, planted, before = case(tmp_path, indexed, entry, kind)
    for key in [k for k in os.environ if k.startswith("SAIPLING_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("SAIPLING_PROVIDER", "none")
    for command in COMMANDS:
        result = CliRunner().invoke(main, argv(command, root))
        assert_refused(result.exit_code, result.stderr, planted, out, before)
        assert os.path.lexists(planted), command  # refused, not removed or renamed either


@pytest.mark.parametrize(("n", "entry", "kind"), [(n, e, k) for n, (e, k) in enumerate(CASES)])
def test_the_real_cli_refuses_each_link(tmp_path: Path, indexed: Path, n: int, entry: str, kind: str) -> None:
    """Real processes, each case with one command (rotating, so every command meets several kinds)."""
    root, out, planted, before = case(tmp_path, indexed, entry, kind)
    command = COMMANDS[n % len(COMMANDS)]
    done = subprocess.run(
        [sys.executable, "-m", "saipling", *argv(command, root)],
        env=env_for(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert_refused(done.returncode, done.stderr, planted, out, before)


@pytest.mark.parametrize(("entry", "kind"), [(".saipling", "dir"), ("index.lock", "file"), ("index.db", "hardlink")])
def test_the_language_server_opening_the_folder_refuses_the_link(
    tmp_path: Path, indexed: Path, entry: str, kind: str
) -> None:
    """`saipling serve` opening the folder (initialize, initialized: no request at all) writes nothing outside
    and tells the user which entry it refused; it keeps answering."""
    root, out, planted, before = case(tmp_path, indexed, entry, kind)
    with RawServer(root, env={"SAIPLING_PROVIDER": "none"}) as server:
        server.initialize()
        shown = server.wait_for(
            lambda m: m.get("method") == "window/showMessage" and "refusing" in m["params"]["message"]
        )
        assert shown is not None, server.stderr()
        assert f"refusing {planted}:" in shown["params"]["message"]
        server.request("saipling/status", {}, msg_id=7)
        assert server.response(7) is not None  # the server is not dead
        time.sleep(0.5)  # anything a background start-up would have written
        assert snapshot(out) == before
    assert not (out / "missing").exists()


@pytest.mark.parametrize(
    ("entry", "kind"), [(".saipling", "dangling"), ("index.lock", "hardlink"), ("index.db", "file")]
)
def test_the_mcp_server_refuses_the_link_at_start(tmp_path: Path, indexed: Path, entry: str, kind: str) -> None:
    root, out, planted, before = case(tmp_path, indexed, entry, kind)
    proc = subprocess.Popen(
        [sys.executable, "-m", "saipling", "mcp", str(root), "--provider", "none"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env_for(),
        text=True,
    )
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert_refused(proc.returncode, err, planted, out, before)


# -- the mechanisms, one at a time ----------------------------------------------------------------------------
def test_a_folder_swapped_for_a_link_after_it_was_opened_cannot_redirect_our_files(tmp_path: Path) -> None:
    """The folder is held by a descriptor: a swap after the check writes into the folder we checked, never
    into the link's target; SQLite's path is refused outright (no link anywhere on it)."""
    from saipling.errors import IndexPathUnsafe
    from saipling.storage.sqlite import index_files

    root = tmp_path / "p"
    folder = root / ".saipling"
    out = tmp_path / "outside"
    out.mkdir()
    with index_files.open_folder(folder, create=True) as fd:
        assert fd is not None
        real = index_files.sqlite_path(folder, fd, "index.db")
        folder.rename(root / "moved")
        os.symlink(out, folder)
        lock = index_files.open_file(folder, fd, "index.lock", os.O_RDWR | os.O_CREAT)
        os.write(lock, b"1")
        os.close(lock)
        with pytest.raises(IndexPathUnsafe, match="changed while it was being opened"):
            index_files.sqlite_path(folder, fd, "index.db")
    assert list(out.iterdir()) == []
    assert (root / "moved" / "index.lock").read_bytes() == b"1"
    assert real == os.path.join(os.path.realpath(root), ".saipling", "index.db")


def test_a_corrupt_index_is_moved_aside_to_a_name_no_link_holds(tmp_path: Path) -> None:
    """`index.db.corrupt-<time>` names already taken (here by links to files outside) are skipped, never
    replaced or written through."""
    from saipling.storage.sqlite.store import SqliteStore as Store

    folder = tmp_path / "p" / ".saipling"
    folder.mkdir(parents=True)
    (folder / "index.db").write_bytes(b"garbage, not a database\n" * 50)
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious\n")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    later = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() + 1))
    for s in {stamp, later}:  # a dangling link (the name looks free) and one to a file outside
        os.symlink(tmp_path / "missing", folder / f"index.db.corrupt-{s}")
        os.symlink(victim, folder / f"index.db.corrupt-{s}-2")
    store = Store.open(folder / "index.db")
    store.close()
    assert store.rebuilt and "moved it to index.db.corrupt-" in store.rebuilt
    assert victim.read_bytes() == b"precious\n"
    links = [p for p in folder.iterdir() if p.is_symlink()]
    assert len(links) == 2 * len({stamp, later})  # still there, still links
    assert not (tmp_path / "missing").exists()
    moved = [p for p in folder.iterdir() if p.name.startswith("index.db.corrupt-") and not p.is_symlink()]
    assert len(moved) == 1 and moved[0].read_bytes().startswith(b"garbage")


def test_status_json_still_reports_when_nothing_is_wrong(tmp_path: Path, indexed: Path) -> None:
    """The checks refuse links only: a plain index folder is opened as before (the matrix's control)."""
    root = tmp_path / "project"
    shutil.copytree(indexed, root, symlinks=True)
    done = subprocess.run(
        [sys.executable, "-m", "saipling", "status", str(root), "--json"],
        env=env_for(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["totalFiles"] == len(FILES)


@pytest.mark.parametrize(("entry", "kind"), [(".saipling", "dir"), ("index.lock", "file"), ("index.lock", "hardlink")])
def test_a_link_planted_while_the_project_is_open_is_refused_by_the_next_run(
    tmp_path: Path, indexed: Path, entry: str, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long-lived server (`serve`, `mcp`) opened the index before the link arrived (a `git pull`): its next
    run, and a refresh of changed files before a read, refuse the link instead of locking through it."""
    from saipling.embeddings.base import NoneProvider
    from saipling.live.freshness import refresh_before_reading
    from saipling.project import Project

    root = tmp_path / "project"
    shutil.copytree(indexed, root, symlinks=True)
    out = outside_world(tmp_path)
    for key in [k for k in os.environ if k.startswith("SAIPLING_")]:
        monkeypatch.delenv(key)
    project = Project.open(root, provider=NoneProvider(reason="test"))
    try:
        if entry == ".saipling":
            (root / ".saipling").rename(root / "moved-aside")
            os.symlink(out / "folder", root / ".saipling")
            planted = root / ".saipling"
        else:
            planted = plant(root, out, entry, kind)
        before = snapshot(out)
        note = root / "notes" / "harbor.md"
        note.write_text(note.read_text() + "\nThe herring market opens at dawn.\n")
        os.utime(note, ns=(time.time_ns(), time.time_ns() + 5_000_000_000))
        with pytest.raises(Exception, match=f"refusing {planted}:"):
            refresh_before_reading(project)
        with pytest.raises(Exception, match=f"refusing {planted}:"):
            project.index()
        assert snapshot(out) == before
    finally:
        project.close()


def test_any_mix_of_links_is_refused_and_nothing_outside_changes(
    tmp_path_factory: pytest.TempPathFactory, indexed: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Property: several entries planted at once, each with its own kind of link, any command: refused, naming
    one of the planted entries, and nothing outside changes (hypothesis picks the mixes)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    for key in [k for k in os.environ if k.startswith("SAIPLING_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("SAIPLING_PROVIDER", "none")
    inner = [e for e in ENTRIES if e != ".saipling"]
    mixes = st.dictionaries(st.sampled_from(inner), st.sampled_from(KINDS), min_size=2, max_size=len(inner))

    @settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(mix=mixes, command=st.sampled_from(COMMANDS))
    def check(mix: dict[str, str], command: str) -> None:
        base = tmp_path_factory.mktemp("mix")
        root = base / "project"
        shutil.copytree(indexed, root, symlinks=True)
        out = outside_world(base)
        planted = [plant(root, out, entry, kind) for entry, kind in mix.items()]
        before = snapshot(out)
        result = CliRunner().invoke(main, argv(command, root))
        assert snapshot(out) == before
        assert result.exit_code == 1, result.stderr
        assert any(f"refusing {p}:" in result.stderr for p in planted), result.stderr
        assert all(os.path.lexists(p) for p in planted)

    check()

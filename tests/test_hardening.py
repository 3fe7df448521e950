"""Issue 12 hardening, through the real CLI (`python -m saipling ...` in a subprocess): poisoned vectors, visibility,
excluded files, unreadable files, FIFOs, an index that is a folder, a read-only index, two writers, a full disk,
missing vectors reported as degraded. Unprivileged cases run as `nobody` through `setpriv` (root only)."""

# ruff: noqa: F811  (fixture imported, then requested as a parameter)
from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from apiserver import FakeEmbeddingAPI, api_server  # noqa: F401  (fixture)
from fixtures import make_project
from saipling.storage.sqlite.schema import connect

SAIPLING = [sys.executable, "-m", "saipling"]
NOBODY = 65534
SETPRIV = shutil.which("setpriv")
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0

FILES = {
    "notes/lighthouse.md": "# Lighthouse\n\nThe keeper collects lost letters from the sea.\n",
    "notes/harbor.md": "# Harbor\n\nFishing boats return at dusk with silver herring.\n",
    "notes/mountain.md": "# Mountain\n\nA dragon sleeps beneath the snowy peak.\n",
}


def env_for(**extra: str) -> dict[str, str]:
    drop = ("SAIPLING_", "VOYAGE_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update({"SAIPLING_PROVIDER": "none", **extra})
    return env


def api_env(api: FakeEmbeddingAPI, **extra: str) -> dict[str, str]:
    """An OpenAI-compatible provider on the fake server, 32-dimensional vectors."""
    return env_for(
        SAIPLING_PROVIDER="openai",
        SAIPLING_BASE_URL=f"{api.url}/v1",
        SAIPLING_MODEL="fake-embed",
        SAIPLING_DIMENSIONS="32",
        SAIPLING_MAX_RETRIES="0",
        OPENAI_API_KEY="sk-test-0123456789abcdef",
        **extra,
    )


def cli(
    *args: str, env: dict[str, str] | None = None, user: int | None = None, timeout: float = 120, **kw: Any
) -> subprocess.CompletedProcess[str]:
    cmd = [*SAIPLING, *args]
    if user is not None:
        cmd = [SETPRIV, f"--reuid={user}", f"--regid={user}", "--clear-groups", *cmd]  # type: ignore[list-item]
    return subprocess.run(cmd, env=env or env_for(), capture_output=True, text=True, timeout=timeout, check=False, **kw)


def cli_json(*args: str, **kw: Any) -> dict[str, Any]:
    done = cli(*args, "--json", **kw)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def index_db(root: Path) -> Path:
    return root / ".saipling" / "index.db"


def db_rows(root: Path, sql: str) -> list[tuple[Any, ...]]:
    conn = connect(index_db(root))
    try:
        return list(conn.execute(sql))
    finally:
        conn.close()


def finite(blob: bytes) -> bool:
    v = np.frombuffer(blob, dtype=np.float32)
    return bool(np.isfinite(v).all() and (v != 0).any())


@contextlib.contextmanager
def nobody_project(files: dict[str, str]) -> Iterator[Path]:
    """A project owned by `nobody` in a world-readable temporary folder (pytest's tmp_path is private to root)."""
    if not (IS_ROOT and SETPRIV):
        pytest.skip("needs root and setpriv to run the CLI as an unprivileged user")
    base = Path(tempfile.mkdtemp(prefix="saipling-nobody-", dir="/tmp"))
    try:
        base.chmod(0o755)
        root = make_project(base, files)
        for path in [root, *root.rglob("*")]:
            os.chown(path, NOBODY, NOBODY)
        yield root
    finally:
        for path in [base, *base.rglob("*")]:  # undo chmods so the folder can be removed
            with contextlib.suppress(OSError):
                path.chmod(0o700 if path.is_dir() else 0o600)
        shutil.rmtree(base, ignore_errors=True)


# -- 1: NaN / Inf / zero / garbage vectors ---------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["nan", "inf", "zero", "garbage"])
def test_item01_unusable_vectors_are_refused_never_stored_and_embedded_later(
    tmp_path: Path, api_server: FakeEmbeddingAPI, kind: str
) -> None:
    root = make_project(tmp_path, FILES)
    env = api_env(api_server)
    api_server.poison(kind)  # every answer spoilt
    summary = cli_json("index", str(root), env=env)
    assert summary["embedded"] == 0 and summary["degraded"], summary
    assert "vectors" in summary["degraded"] or "format" in summary["degraded"], summary["degraded"]
    assert db_rows(root, "SELECT count(*) FROM embedding_cache") == [(0,)]  # nothing poisoned is cached
    status = cli_json("status", str(root), env=env)
    assert status["embeddedChunks"] == 0 and status["unembeddedChunks"] == status["totalChunks"] > 0
    assert status["degraded"]
    # keyword search still finds the files
    found = cli_json("search", "lighthouse keeper", "--root", str(root), "--mode", "lexical", env=env)
    assert found["results"][0]["filePath"] == "notes/lighthouse.md"

    api_server.poison(None)  # the provider recovers: the next run embeds every chunk
    summary = cli_json("index", str(root), env=env)
    status = cli_json("status", str(root), env=env)
    assert status["unembeddedChunks"] == 0 and status["degraded"] is None, status
    assert all(finite(blob) for (blob,) in db_rows(root, "SELECT vector FROM embedding_cache"))
    scores = [
        r["score"]
        for r in cli_json("search", "dragon", "--root", str(root), "--mode", "semantic", "-k", "3", env=env)["results"]
    ]
    assert scores and not all(s == 1.0 for s in scores)  # not "everything scores 1.0"


def test_item01_a_bad_batch_is_asked_for_again(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    root = make_project(tmp_path, FILES)
    api_server.poison("nan", times=1)  # only the first answer (the dimension probe or the batch)
    summary = cli_json("index", str(root), env=api_env(api_server))
    assert summary["degraded"] is None and summary["embedded"] == summary["chunks"] > 0, summary
    assert all(finite(b) for (b,) in db_rows(root, "SELECT vector FROM embedding_cache"))  # (vectors stored once)


def test_item01_poisoned_rows_already_stored_are_ignored_and_embedded_again(
    tmp_path: Path, api_server: FakeEmbeddingAPI
) -> None:
    root = make_project(tmp_path, FILES)
    env = api_env(api_server)
    cli_json("index", str(root), env=env)
    nan = np.full(32, np.nan, dtype=np.float32).tobytes()
    conn = connect(index_db(root))  # what an older saipling stored from a bad provider
    with conn:
        conn.execute("UPDATE embedding_cache SET vector = ?", (nan,))
        conn.execute("DELETE FROM meta WHERE key = 'vectors_checked'")
    conn.close()
    found = cli_json("search", "dragon", "--root", str(root), "--mode", "semantic", env=env)
    assert all(r["score"] < 1.0 for r in found["results"])  # NaN rows are never ranked (they scored 1.0)
    before = api_server.count
    summary = cli_json("index", str(root), "--full", env=env)
    assert api_server.count > before and summary["reused"] == 0  # the poisoned cache was not reused
    assert all(finite(b) for (b,) in db_rows(root, "SELECT vector FROM embedding_cache"))
    status = cli_json("status", str(root), env=env)
    assert status["unembeddedChunks"] == 0 and status["embeddedChunks"] == status["totalChunks"]


# -- 3: visibility --------------------------------------------------------------------------------------------
VISIBILITY_FILES = {
    "open.md": "# Open\n\nThe quillfeather archive is open to everyone.\n",
    "private.md": "---\nvisibility: private\n---\n# Private\n\nThe quillfeather archive hides a secret key.\n",
    "members.md": "---\nvisibility: MEMBERS\n---\n# Members\n\nThe quillfeather archive lounge for members.\n",
    ".saipling/config.toml": '[saipling.roles]\nmember = ["public", "members"]\n',
}


def _paths(response: dict[str, Any], key: str = "results") -> set[str]:
    return {r["filePath"] for r in response[key]}


def test_item03_no_role_sees_public_only_and_levels_fold_case(tmp_path: Path) -> None:
    root = make_project(tmp_path, VISIBILITY_FILES)
    cli_json("index", str(root))
    search = ["search", "quillfeather archive", "--root", str(root)]
    assert _paths(cli_json(*search)) == {"open.md"}  # no role: public only (private was returned)
    assert _paths(cli_json(*search, "--role", "member")) == {"open.md", "members.md"}  # MEMBERS == members
    enrich = cli_json("enrich", "quillfeather archive", "--root", str(root))
    assert _paths(enrich, "searchResults") == {"open.md"}
    enrich = cli_json("enrich", "quillfeather archive", "--root", str(root), "--role", "member")
    assert "members.md" in _paths(enrich, "searchResults") and "private.md" not in json.dumps(enrich)
    related = cli_json("related", "open.md", "--root", str(root))
    assert _paths(related) <= {"open.md"} and "private.md" not in json.dumps(related)
    refused = cli("get", "private.md", "--root", str(root))
    assert refused.returncode == 2 and "not visible" in refused.stderr
    assert cli("get", "members.md", "--root", str(root), "--role", "member").returncode == 0
    # the defaultRole setting gives requests without a role that role's view
    env = env_for(SAIPLING_DEFAULT_ROLE="member")
    assert _paths(cli_json(*search, env=env)) == {"open.md", "members.md"}


# -- 4: get refuses excluded files ----------------------------------------------------------------------------
def test_item04_get_refuses_files_context_settings_exclude(tmp_path: Path) -> None:
    root = make_project(
        tmp_path,
        {
            **FILES,
            "secret.md": "# Secret\n\nThe vault code.\n",
            ".context_settings.json": json.dumps({"secret.md": "exclude"}),
        },
    )
    cli_json("index", str(root))
    refused = cli("get", "secret.md", "--root", str(root))
    assert refused.returncode == 2 and "excluded by .context_settings.json" in refused.stderr
    assert "vault code" not in refused.stdout
    allowed = cli("get", "secret.md", "--root", str(root), "--all-files")
    assert allowed.returncode == 0 and "vault code" in allowed.stdout


# -- 5: a file made unreadable --------------------------------------------------------------------------------
def test_item05_a_file_made_unreadable_leaves_the_index(tmp_path: Path) -> None:
    with nobody_project(FILES) as root:
        assert cli("index", str(root), user=NOBODY).returncode == 0
        search = ["search", "dragon", "--root", str(root), "--json"]
        assert "notes/mountain.md" in _paths(json.loads(cli(*search, user=NOBODY).stdout))
        (root / "notes/mountain.md").chmod(0o000)  # mtime and size unchanged
        assert "notes/mountain.md" not in _paths(json.loads(cli(*search, user=NOBODY).stdout))  # not served
        (root / "notes/mountain.md").chmod(0o644)
        assert cli("index", str(root), user=NOBODY).returncode == 0  # (the search dropped it: back again)
        assert "notes/mountain.md" in _paths(json.loads(cli(*search, user=NOBODY).stdout))
        (root / "notes/mountain.md").chmod(0o000)
        done = cli("index", str(root), "--json", user=NOBODY)
        assert done.returncode == 0, done.stderr
        assert any(s["path"] == "notes/mountain.md" for s in json.loads(done.stdout)["skipped"])
        assert "notes/mountain.md" not in _paths(json.loads(cli(*search, user=NOBODY).stdout))


# -- 6: a FIFO named *.md -------------------------------------------------------------------------------------
def test_item06_a_fifo_named_md_is_skipped_not_waited_on(tmp_path: Path) -> None:
    root = make_project(tmp_path, FILES)
    os.mkfifo(root / "notes" / "pipe.md")
    summary = cli_json("index", str(root), timeout=60)  # hung forever before
    assert {"path": "notes/pipe.md", "reason": "not a regular file"} in summary["skipped"]
    assert summary["files"] == len(FILES)


# -- 7: index.db that is a folder -----------------------------------------------------------------------------
def test_item07_an_index_that_is_a_folder_is_moved_aside_and_rebuilt(tmp_path: Path) -> None:
    root = make_project(tmp_path, FILES)
    index_db(root).mkdir(parents=True)
    status = cli("status", str(root), "--json")
    assert status.returncode == 0 and "was a folder" in status.stderr, status.stderr
    assert str(index_db(root)) in status.stderr or "index.db" in status.stderr
    assert index_db(root).is_file() and list(index_db(root).parent.glob("index.db.corrupt-*"))
    summary = cli_json("index", str(root))
    assert summary["files"] == len(FILES)
    assert cli_json("status", str(root))["totalFiles"] == len(FILES)


# -- 8: a read-only index -------------------------------------------------------------------------------------
def test_item08_a_read_only_index_is_searched_read_only(tmp_path: Path) -> None:
    with nobody_project(FILES) as root:
        assert cli("index", str(root), user=NOBODY).returncode == 0
        (root / ".saipling").chmod(0o555)
        (root / "notes/harbor.md").write_text("# Harbor\n\nA dragon boat, changed since indexing.\n")  # stale
        found = cli("search", "dragon", "--root", str(root), "--json", user=NOBODY)
        assert found.returncode == 0, found.stderr  # was ReadOnlyError
        assert "notes/mountain.md" in _paths(json.loads(found.stdout))
        assert found.stderr.count("read-only") == 1  # said once
        stale = cli("search", "fishing boats herring", "--root", str(root), "--json", user=NOBODY)
        assert stale.returncode == 0 and "could not be indexed" not in stale.stderr, stale.stderr  # no write tried
        status = cli("status", str(root), "--json", user=NOBODY)
        assert status.returncode == 0 and json.loads(status.stdout)["readOnly"] is True
        assert json.loads(status.stdout)["totalFiles"] == len(FILES)
        refused = cli("index", str(root), user=NOBODY)
        assert refused.returncode == 1 and "read-only" in refused.stderr
        assert "Traceback" not in refused.stderr


# -- 9: one writer per index ----------------------------------------------------------------------------------
def test_item09_two_index_runs_embed_each_chunk_once(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    files = {f"notes/n{i:02d}.md": f"# Note {i}\n\nThe tide {i} turns the mill wheel {i}.\n" for i in range(40)}
    root = make_project(tmp_path, files)
    env = api_env(api_server, SAIPLING_BATCH_SIZE="8")
    gate = api_server.hold(times=3)  # the first run is still embedding until the second is seen waiting
    first = subprocess.Popen(
        [*SAIPLING, "index", str(root), "--json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        lock = root / ".saipling" / "index.lock"
        deadline = time.monotonic() + 60
        while not (lock.exists() and lock.read_text().split("\n")[0] == str(first.pid)):
            assert time.monotonic() < deadline, "the first run never took the lock"
            time.sleep(0.02)
        busy = cli("index", str(root), "--no-wait", env=env)
        assert busy.returncode == 1 and f"index in use by PID {first.pid}" in busy.stderr
        second = subprocess.Popen(  # waits for the first, then has nothing to embed
            [*SAIPLING, "index", str(root), "--json"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert second.stderr is not None
        said = ""  # the second says it waits (read until it does, or exits)
        while f"in use by PID {first.pid}" not in said and (line := second.stderr.readline()):
            said += line
        assert f"in use by PID {first.pid}" in said, said
    finally:
        gate.set()
    out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    second_out, second_err = second.communicate(timeout=120)
    assert second.returncode == 0, said + second_err
    texts = [t for r in api_server.requests if isinstance(r.body, dict) for t in r.body["input"]]
    chunks = json.loads(out)["chunks"]
    assert json.loads(second_out)["embedded"] == 0
    assert len([t for t in texts if t != "dimension probe"]) == chunks  # each chunk paid for once


def test_item09_a_cli_run_beside_a_writer_never_fails_files(tmp_path: Path) -> None:
    """Many searches (each writes the search log) while `saipling index` writes: no BusyError anywhere."""
    files = {f"notes/n{i:03d}.md": f"# Note {i}\n\nwords about the harbor {i}\n" for i in range(150)}
    root = make_project(tmp_path, files)
    cli_json("index", str(root))
    for i in range(150):  # every file changed: the next run writes each one
        (root / f"notes/n{i:03d}.md").write_text(f"# Note {i}\n\nnew words about the lighthouse {i}\n")
    writer = subprocess.Popen(
        [*SAIPLING, "index", str(root), "--json"],
        env=env_for(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    searches = [cli("search", "lighthouse", "--root", str(root), "--json") for _ in range(6)]
    out, err = writer.communicate(timeout=120)
    assert writer.returncode == 0 and "Busy" not in err, err
    assert json.loads(out)["failed"] == []
    for s in searches:
        assert s.returncode == 0 and "Busy" not in s.stderr, s.stderr


# -- 10: disk full --------------------------------------------------------------------------------------------
def test_item10_a_full_disk_exits_1_with_one_line_per_cause(tmp_path: Path) -> None:
    if not IS_ROOT:
        pytest.skip("needs root to mount a small tmpfs")
    mnt = tmp_path / "small"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode(errors='replace').strip()}")
    try:
        body = "lorem ipsum dolor sit amet " * 40
        files = {f"notes/n{i:03d}.md": f"# Note {i}\n\n{body} {i}\n" for i in range(150)}
        root = make_project(mnt, files)
        done = cli("index", str(root), timeout=120)
        assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr
        errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        assert errors and len(errors) == len(set(errors)) <= 3, done.stderr  # one line per cause, not per file
        assert done.stderr.count("could not be indexed") <= 2 * len(errors)
        assert any("full" in line.lower() or "no space" in line.lower() for line in errors), done.stderr
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


# -- 11: missing vectors are reported -------------------------------------------------------------------------
def test_item11_wrong_size_vectors_leave_status_degraded(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    root = make_project(tmp_path, FILES)
    env = api_env(api_server)
    cli_json("index", str(root), env=env)
    assert cli_json("status", str(root), env=env)["degraded"] is None
    api_server.poison(16)  # the provider now answers 16-dimensional vectors
    (root / "notes" / "forest.md").write_text("# Forest\n\nOwls nest in the old oak.\n", encoding="utf-8")
    cli_json("index", str(root), env=env)
    status = cli_json("status", str(root), env=env)  # a new process: no memory of the failed run
    assert (
        status["unembeddedChunks"] >= 1
        and status["embeddedChunks"] == status["totalChunks"] - status["unembeddedChunks"]
    )
    assert status["degraded"] and "no embeddings" in status["degraded"], status
    shown = cli("status", str(root), env=env)
    assert "degraded:" in shown.stdout


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            b'{"jsonrpc": "2.0", "id": 7, "method": "x", "params": {"a": ' + b"[" * 50_000 + b"]" * 50_000 + b"}}",
            7,
        ),
        (
            b'{"jsonrpc": "2.0", "method": "x", "params": {"id": 5, "a": ' + b"[" * 50_000 + b"]" * 50_000 + b"}}",
            None,
        ),
        (b'{"method": "x", "params": {"id": 5}, "id": "abc"', "abc"),  # cut short after its own id
        (b'{"s": "{\\"id\\": 9}", "method": "m", "id": 2,', 2),  # an "id" inside a string is text
        (b'{"method": "id", "x": 1,', None),  # "id" as a value, not a key
        (b'{"id": 3, "result": [[[', None),  # a response: nothing to answer
        (b'[{"id": 1, "method": "x"}]', None),
        (b'{"id": true, "method": "x"', None),
        (b'{"id": 1.5, "method": "x"', None),
        (b"garbage", None),
    ],
)
def test_the_id_of_an_unparseable_request_is_its_own_top_level_id(body: bytes, expected: object) -> None:
    """Both faces answer a request they cannot parse with its id (else the client waits for ever); a nested
    "id" (a notification's params) must never be taken for it: the client would fail an unrelated request."""
    from saipling.jsonrpc_salvage import salvage_id

    assert salvage_id(body) == expected

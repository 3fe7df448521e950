"""SyncQueue (SPEC 7): per-file quiet period, deletions on the next tick, renames, drain, requeue."""

from __future__ import annotations

import pytest

from saipling.live.sync_queue import SyncQueue


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def queue(clock: Clock) -> SyncQueue:
    return SyncQueue(quiet_period=120, clock=clock)


def test_every_save_restarts_the_quiet_period(queue: SyncQueue, clock: Clock) -> None:
    for _ in range(120):
        queue.changed("a.md")
        clock.now += 30
        assert not queue.due()
    clock.now += 89
    assert not queue.due()
    clock.now += 1
    assert queue.due().paths == ["a.md"] and len(queue) == 0
    assert not queue.due()


def test_deletions_are_due_on_the_next_tick_and_win_over_an_earlier_change(queue: SyncQueue) -> None:
    queue.changed("a.md")
    queue.deleted("a.md")
    queue.deleted("b.md")
    assert queue.due().paths == ["a.md", "b.md"]


def test_a_change_after_a_deletion_waits_for_its_quiet_period(queue: SyncQueue, clock: Clock) -> None:
    queue.deleted("a.md")
    queue.changed("a.md")
    assert not queue.due()
    clock.now += 120
    assert queue.due().paths == ["a.md"]


def test_rename_is_delete_now_and_create_later(queue: SyncQueue, clock: Clock) -> None:
    queue.renamed("old.md", "new.md")
    assert queue.due().paths == ["old.md"]
    clock.now += 120
    assert queue.due().paths == ["new.md"]


def test_a_burst_becomes_one_batch(queue: SyncQueue, clock: Clock) -> None:
    for n in range(500):
        queue.changed(f"f{n % 200}.md")
    clock.now += 120
    batch = queue.due()
    assert len(batch) == 200 and len(set(batch.paths)) == 200 and len(queue) == 0


def test_only_quiet_files_are_taken(queue: SyncQueue, clock: Clock) -> None:
    queue.changed("early.md")
    clock.now += 100
    queue.changed("late.md")
    clock.now += 20
    assert queue.due().paths == ["early.md"]
    assert len(queue) == 1 and queue.next_due() == clock.now + 100


def test_drain_ignores_the_quiet_period(queue: SyncQueue) -> None:
    queue.changed("a.md")
    queue.deleted("b.md")
    queue.rescan()
    batch = queue.drain()
    assert batch.paths == ["a.md", "b.md"] and batch.rescan and len(queue) == 0 and not queue.drain()


def test_rescan_waits_for_quiet(queue: SyncQueue, clock: Clock) -> None:
    queue.rescan()
    assert not queue.due()
    clock.now += 120
    batch = queue.due()
    assert batch and batch.rescan and batch.paths == []


def test_requeue_is_due_at_once_but_newer_changes_win(queue: SyncQueue, clock: Clock) -> None:
    queue.changed("newer.md")
    queue.requeue(["failed.md", "newer.md"], rescan=True)
    batch = queue.due()
    assert batch.paths == ["failed.md"] and batch.rescan
    assert queue.next_due() == clock.now + 120


def test_listener_hears_every_change_and_waiting_lists_the_quiet_period(clock: Clock) -> None:
    q = SyncQueue(quiet_period=120, clock=clock)
    heard: list[str] = []
    q.listener = heard.append
    q.changed("a.md")
    q.renamed("b.md", "c.md")
    q.deleted("d.md")
    assert heard == ["a.md", "c.md"]  # text refreshed at once; deletions wait for the tick
    assert q.waiting() == ["a.md", "c.md"]
    clock.now += 120
    q.due()
    assert q.waiting() == []

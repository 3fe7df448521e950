"""Test-only requests, registered only when the environment has SAIPLING_TEST_CLOCK=1:
`saipling/_test/advanceClock {seconds}` moves the sync clock forward (quiet periods pass instantly) and
`saipling/_test/tick` runs one sync tick now and waits for the passes it starts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .sync import due_pass

if TYPE_CHECKING:
    from ..server import SaiplingServer


def register(server: SaiplingServer) -> None:
    server.handle("saipling/_test/advanceClock", test_advance_clock)
    server.handle("saipling/_test/tick", test_tick)


async def test_advance_clock(ls: SaiplingServer, p: dict[str, Any]) -> dict[str, Any]:
    """Move the sync clock forward."""
    assert ls.test_clock is not None
    return {"offset": ls.test_clock.advance(float(p["seconds"]))}


async def test_tick(ls: SaiplingServer, p: dict[str, Any]) -> dict[str, Any]:
    """One sync tick now (after any run in progress), waiting for the passes it starts."""
    await ls.wait_ready()
    out = []
    for folder in list(ls.folders.values()):
        async with folder.lock:
            due = folder.live.take_due()
        work = due_pass(ls, folder, due)
        summary = await work if work is not None else None
        out.append(
            {
                "workspaceFolder": folder.uri,
                "paths": len(due.batch),
                "rescan": due.batch.rescan,
                "ran": summary is not None,
                "retried": due.retry,
                "passes": folder.live.passes,
                "pending": len(folder.live.queue),
            }
        )
    return {"folders": out}

"""Test-only requests, registered only when the environment has SAIPLING_TEST_CLOCK=1:
`saipling/_test/advanceClock {seconds}` moves the sync clock forward (quiet periods pass instantly) and
`saipling/_test/tick` runs one sync tick now and waits for the passes it starts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..runs import run_index
from .sync import sync_pass

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
            batch = folder.queue.due()
            retry = not batch and folder.retry_at is not None and ls.clock() >= folder.retry_at
        if batch:
            summary = await sync_pass(ls, folder, batch)
        elif retry:
            folder.retry_at = None
            summary = await run_index(ls, folder, paths=[], title="Embedding", progress=False)
        else:
            summary = None
        out.append(
            {
                "workspaceFolder": folder.uri,
                "paths": len(batch),
                "rescan": batch.rescan,
                "ran": summary is not None,
                "retried": retry,
                "passes": folder.passes,
                "pending": len(folder.queue),
            }
        )
    return {"folders": out}

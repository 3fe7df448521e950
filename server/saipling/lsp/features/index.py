"""Index requests and commands: `saipling/status`, `saipling/reindex`, `saipling/clearIndex`, and the same
as `workspace/executeCommand` commands (`saipling.status`, `saipling.reindex`, `saipling.clearIndex`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...sync import Batch
from .. import convert, params
from ..folders import Folder, covered_by, folders_for
from ..protocol import engine_errors, request_failed
from ..runs import run_index

if TYPE_CHECKING:
    from ..server import SaiplingServer


def register(server: SaiplingServer) -> None:
    server.handle("saipling/status", status, threaded=True)
    server.handle("saipling/reindex", reindex)
    server.handle("saipling/clearIndex", clear_index)
    server.handle_command("saipling.reindex", cmd_reindex)
    server.handle_command("saipling.clearIndex", cmd_clear_index)
    server.handle_command("saipling.status", cmd_status, threaded=True)


def status(ls: SaiplingServer, p: dict[str, Any]) -> dict[str, Any]:
    with ls.engine_call():
        folders = folders_for(ls, p)
        for f in folders:
            f.project.state.pending_files = len(f.queue)
        statuses = [(f.uri, {**f.project.status(), "indexPasses": f.passes}) for f in folders]
    return convert.merge_status(statuses)


async def reindex(ls: SaiplingServer, p: dict[str, Any]) -> dict[str, Any]:
    """Background run that bypasses the quiet period: pending changes are included now."""
    await ls.wait_ready()
    for folder in folders_for(ls, p):
        with engine_errors():
            wanted = [
                convert.to_rel(folder.project.root, x, f"paths[{i}]")
                for i, x in enumerate(p.get("paths", []))
            ]
        pending = folder.queue.drain()  # after the checks: a rejected request leaves the queue as it was
        paths = None if "paths" not in p or pending.rescan else list(dict.fromkeys(wanted + pending.paths))
        ls.spawn(reindex_run(ls, folder, pending, full=bool(p.get("full")), paths=paths))
    return {"started": True}


async def reindex_run(
    ls: SaiplingServer, folder: Folder, pending: Batch, *, full: bool, paths: list[str] | None
) -> None:
    """A manual run; the pending changes it took go back to the queue if it is cancelled or fails."""
    summary = await run_index(ls, folder, full=full, paths=paths, title="Reindexing")
    if (summary is None or summary.cancelled) and not ls.stopping:
        folder.queue.requeue(pending.paths, pending.rescan)


async def clear_index(ls: SaiplingServer, p: dict[str, Any]) -> dict[str, Any]:
    await ls.wait_ready()
    wanted = p.get("workspaceFolder")
    if isinstance(wanted, str) and wanted not in {n for f in ls.folders.values() for n in (f.uri, f.name)}:
        if (held := covered_by(ls, wanted)) is not None:
            raise request_failed(
                f"{wanted} is searched through the index of {held[0].name}: clear that folder's index instead"
            )
    for folder in folders_for(ls, p):
        if folder.cancel is not None:
            folder.cancel.set()
        async with folder.lock:
            await ls.call(folder.project.clear)
    return {"cleared": True}


# -- commands (`workspace/executeCommand`): the requests above, params from the command's arguments --------
async def cmd_reindex(ls: SaiplingServer, *args: Any) -> dict[str, Any]:
    return await reindex(ls, params.command_params("saipling.reindex", args))


async def cmd_clear_index(ls: SaiplingServer, *args: Any) -> dict[str, Any]:
    return await clear_index(ls, params.command_params("saipling.clearIndex", args))


def cmd_status(ls: SaiplingServer, *args: Any) -> dict[str, Any]:
    return status(ls, params.command_params("saipling.status", args))

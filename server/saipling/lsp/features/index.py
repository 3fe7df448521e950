"""Index requests and commands: `saipling/status`, `saipling/reindex`, `saipling/clearIndex`, and the same
as `workspace/executeCommand` commands (`saipling.status`, `saipling.reindex`, `saipling.clearIndex`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...errors import StorageUnavailable
from ...live.sync_queue import Batch
from .. import convert, params
from ..folders import Folder, covered_by, folders_for
from ..protocol import engine_errors, request_failed
from ..runs import COST_NOT_CONFIRMED, run_index

if TYPE_CHECKING:
    from ..server import SaiplingServer


def register(server: SaiplingServer) -> None:
    server.handle("saipling/status", status, light=True)  # (never queued behind long searches)
    server.handle("saipling/reindex", reindex)
    server.handle("saipling/clearIndex", clear_index)
    server.handle("saipling/pauseIndexing", pause_indexing)
    server.handle("saipling/resumeIndexing", resume_indexing)
    server.handle_command("saipling.reindex", cmd_reindex)
    server.handle_command("saipling.clearIndex", cmd_clear_index)
    server.handle_command("saipling.status", cmd_status, threaded=True)


def status(ls: SaiplingServer, p: dict[str, Any]) -> dict[str, Any]:
    with ls.engine_call():
        statuses = []
        for f in folders_for(ls, p):
            try:
                f.project.state.pending_files = pending_files(f)
                statuses.append((f.uri, {**f.project.status(), "indexPasses": f.passes, "pauseReason": f.pause_reason}))
            except StorageUnavailable:
                if ls.folders.get(f.uri) is f:
                    raise
                # closed by a workspace change while this request ran: no longer reported (it failed the
                # whole request: seen in CI, test_lsp_multiroot, status polled while two folders closed)
        if not statuses:
            raise request_failed("no workspace folder is open")
    return convert.merge_status(statuses)


PENDING_CHECK_MAX = 500  # queued files checked one by one for work left; beyond, every queued file counts


def pending_files(folder: Folder) -> int:
    """Deletions waiting for the tick, plus the changed files that still have work left (a save whose text is
    current and embedded, e.g. a watcher event for what a reindex just read, is no pending work)."""
    changed, deleted = folder.queue.pending()
    if len(changed) > PENDING_CHECK_MAX:
        return len(changed) + deleted
    return len(folder.project.with_work_left(changed)) + deleted


async def reindex(ls: SaiplingServer, p: dict[str, Any]) -> dict[str, Any]:
    """Background run that bypasses the quiet period: pending changes are included now."""
    await ls.wait_ready()
    for folder in folders_for(ls, p):
        with engine_errors():
            wanted = [convert.to_rel(folder.project.root, x, f"paths[{i}]") for i, x in enumerate(p.get("paths", []))]
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


async def pause_indexing(ls: SaiplingServer, p: dict[str, Any]) -> dict[str, Any]:
    """Stop embedding (at the end of the round in progress) until resumed; saves still refresh the text index
    at once, so search stays current: a writer on battery stops paying for embeddings, not for search."""
    await ls.wait_ready()
    for folder in folders_for(ls, p):
        folder.project.pause()
        folder.pause_reason = PAUSED_BY_REQUEST
    return {"paused": True}


async def resume_indexing(ls: SaiplingServer, p: dict[str, Any]) -> dict[str, Any]:
    """Embed again, and finish what a pause, a cancel or an unconfirmed cost left: a run that reads the files not
    read yet and embeds every chunk without a vector (files in their quiet period still wait for it)."""
    await ls.wait_ready()
    for folder in folders_for(ls, p):
        if folder.pause_reason == COST_NOT_CONFIRMED:
            folder.cost_confirmed = True  # resuming after "Not now" is the go-ahead
        folder.pause_reason = None
        folder.project.resume()
        ls.spawn(run_index(ls, folder, title="Indexing"))
    return {"resumed": True}


PAUSED_BY_REQUEST = "paused by saipling/pauseIndexing"


# -- commands (`workspace/executeCommand`): the requests above, params from the command's arguments --------
async def cmd_reindex(ls: SaiplingServer, *args: Any) -> dict[str, Any]:
    return await reindex(ls, params.command_params("saipling.reindex", args))


async def cmd_clear_index(ls: SaiplingServer, *args: Any) -> dict[str, Any]:
    return await clear_index(ls, params.command_params("saipling.clearIndex", args))


def cmd_status(ls: SaiplingServer, *args: Any) -> dict[str, Any]:
    return status(ls, params.command_params("saipling.status", args))

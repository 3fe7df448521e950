"""Document sync: saves, file operations (create/rename/delete) and watched-file changes go to each folder's
`SyncQueue`; the tick loop starts one batched pass per folder once its changes are quiet (and retries
embeddings that failed earlier)."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from ...indexing.indexer import IndexSummary
from ...live.service import Due
from ...live.sync_queue import Batch
from ...live.watcher import ignored_folder
from ..folders import Folder, locate
from ..runs import run_index
from .name_diagnostics import clear as clear_name_diagnostics
from .name_diagnostics import schedule as schedule_name_diagnostics

if TYPE_CHECKING:
    from ..server import SaiplingServer

log = logging.getLogger(__name__)

SYNC_PROGRESS_MIN_FILES = 50  # sync passes this large (or rescans) show $/progress
MARKDOWN_GLOB = "**/*.md"
FILE_OPERATIONS = types.FileOperationRegistrationOptions(
    filters=[
        types.FileOperationFilter(
            types.FileOperationPattern(MARKDOWN_GLOB, types.FileOperationPatternKind.File), scheme="file"
        ),
        types.FileOperationFilter(
            types.FileOperationPattern("**/*", types.FileOperationPatternKind.Folder), scheme="file"
        ),
    ]
)


def register(server: SaiplingServer) -> None:
    server.handle(types.TEXT_DOCUMENT_DID_OPEN, on_did_open)
    server.handle(types.TEXT_DOCUMENT_DID_CLOSE, on_did_close)
    server.handle(types.TEXT_DOCUMENT_DID_SAVE, on_did_save, types.SaveOptions(include_text=False))
    server.handle(types.WORKSPACE_DID_CREATE_FILES, on_did_create_files, FILE_OPERATIONS)
    server.handle(types.WORKSPACE_DID_RENAME_FILES, on_did_rename_files, FILE_OPERATIONS)
    server.handle(types.WORKSPACE_DID_DELETE_FILES, on_did_delete_files, FILE_OPERATIONS)
    server.handle(types.WORKSPACE_DID_CHANGE_WATCHED_FILES, on_did_change_watched_files)


# -- handlers ----------------------------------------------------------------------------------------------
async def on_did_open(ls: SaiplingServer, p: types.DidOpenTextDocumentParams) -> None:
    """Files open in the editor are embedded first (a first index, a resume)."""
    await ls.wait_ready()
    if hit := locate(ls, p.text_document.uri):
        folder, rel = hit
        folder.open_files[rel] = None
        schedule_name_diagnostics(ls, [p.text_document.uri])


async def on_did_close(ls: SaiplingServer, p: types.DidCloseTextDocumentParams) -> None:
    await ls.wait_ready()
    if hit := locate(ls, p.text_document.uri):
        folder, rel = hit
        folder.open_files.pop(rel, None)
        clear_name_diagnostics(ls, p.text_document.uri)


def when_ready(handler: Callable[[SaiplingServer, Any], None]) -> Callable[[SaiplingServer, Any], None]:
    """A notification that changes the queue, handled at once when the server is ready: before the next message
    is dispatched, so a search sent right after a save finds the saved text (as a coroutine it ran on a later
    turn of the loop, and a search's worker thread could sync the index first: a flaky "searchable at once").
    Before the server is ready, once it is."""

    def on_notification(ls: SaiplingServer, p: Any) -> None:
        if ls.ready.is_set():
            handler(ls, p)
            return

        async def later() -> None:
            await ls.wait_ready()
            handler(ls, p)

        asyncio.ensure_future(later())

    functools.update_wrapper(on_notification, handler)
    return on_notification


@when_ready
def on_did_save(ls: SaiplingServer, p: types.DidSaveTextDocumentParams) -> None:
    file_changed(ls, p.text_document.uri)
    # the saved text is in the lists once refreshed (name_fixes refreshes first); every open document of the
    # folder, as a saved profile may have gained an alias
    schedule_name_diagnostics(ls, folder=(locate(ls, p.text_document.uri) or (None,))[0])


@when_ready
def on_did_create_files(ls: SaiplingServer, p: types.CreateFilesParams) -> None:
    for f in p.files:
        file_changed(ls, f.uri, folders_too=True)


@when_ready
def on_did_rename_files(ls: SaiplingServer, p: types.RenameFilesParams) -> None:
    for f in p.files:
        file_deleted(ls, f.old_uri, folders_too=True)
        file_changed(ls, f.new_uri, folders_too=True)


@when_ready
def on_did_delete_files(ls: SaiplingServer, p: types.DeleteFilesParams) -> None:
    for f in p.files:
        file_deleted(ls, f.uri, folders_too=True)


@when_ready
def on_did_change_watched_files(ls: SaiplingServer, p: types.DidChangeWatchedFilesParams) -> None:
    for change in p.changes:
        if change.type == types.FileChangeType.Deleted:
            file_deleted(ls, change.uri)
        else:
            file_changed(ls, change.uri)


# -- changes to the queue ----------------------------------------------------------------------------------
def file_changed(ls: SaiplingServer, uri: str, folders_too: bool = False) -> None:
    """A saved or created file is indexed once quiet; a created folder asks for a rescan."""
    if not (hit := locate(ls, uri)):
        return
    folder, rel = hit
    if folders_too and (folder.project.root / rel).is_dir():
        # a folder (even one `include` names: globs match a path's folders) is no file to index
        if not ignored_folder(rel):
            folder.live.queue.rescan()
    elif folder.accepts(rel):
        folder.live.queue.changed(rel)


def file_deleted(ls: SaiplingServer, uri: str, folders_too: bool = False) -> None:
    """A deleted file leaves the index on the next tick; a deleted folder asks for a rescan."""
    if not (hit := locate(ls, uri)):
        return
    folder, rel = hit
    if folder.accepts(rel):
        inside = stored_under(folder, rel) if folders_too else []
        for path in inside or [rel]:  # a deleted folder `include` names: the files it held leave
            folder.live.queue.deleted(path)
    elif folders_too and not ignored_folder(rel):
        folder.live.queue.rescan()


def stored_under(folder: Folder, rel: str) -> list[str]:
    """The indexed files inside `rel` when `rel` is no indexed file itself (it was a folder); on a shared store,
    those this copy wrote (another copy's note in that folder, which this copy never had, stays)."""
    store = folder.project.store
    try:
        if store.get_file(rel) is not None:
            return []
        here = store.copy_id
        return [p for p, st in store.file_states().items() if p.startswith(rel + "/") and st.mine(here)]
    except Exception:  # noqa: BLE001 - the store is closing: a rescan finds what is gone
        folder.live.queue.rescan()
        return []


# -- the tick loop -----------------------------------------------------------------------------------------
def tick_interval(ls: SaiplingServer) -> float:
    return max(0.05, min((f.project.settings.tick_seconds for f in ls.folders.values()), default=10.0))


async def tick_loop(ls: SaiplingServer) -> None:
    while not ls.stopping:
        await asyncio.sleep(tick_interval(ls))
        try:
            tick(ls)
        except Exception:
            log.exception("sync tick failed")


def tick(ls: SaiplingServer) -> list[asyncio.Task[Any]]:
    """Start one batched pass per folder with due changes (skipped while that folder is indexing)."""
    tasks = []
    for folder in list(ls.folders.values()):
        if folder.project.settings.enabled and not folder.lock.locked() and (work := due_work(ls, folder)):
            tasks.append(ls.spawn(work))
    return tasks


def due_work(ls: SaiplingServer, folder: Folder) -> Coroutine[Any, Any, IndexSummary | None] | None:
    """The pass a folder needs now: its due changes, else a retry of embeddings that failed earlier."""
    return due_pass(ls, folder, folder.live.take_due())


def due_pass(ls: SaiplingServer, folder: Folder, due: Due) -> Coroutine[Any, Any, IndexSummary | None] | None:
    if due.batch:
        return sync_pass(ls, folder, due.batch)
    if due.retry:  # chunks without vectors (the run sets the next retry if the provider still fails)
        return run_index(ls, folder, paths=[], title="Embedding", progress=False)
    return None


async def sync_pass(ls: SaiplingServer, folder: Folder, batch: Batch) -> IndexSummary | None:
    big = batch.rescan or len(batch) >= SYNC_PROGRESS_MIN_FILES
    paths = None if batch.rescan else batch.paths
    summary = await run_index(ls, folder, paths=paths, title="Syncing", progress=big)
    if (summary is None or summary.cancelled) and not ls.stopping:
        folder.live.requeue(batch)
    return summary

"""Life cycle: `initialize`/`initialized` (start-up: configuration, one project per folder, watched-file
registration, the sync tick, the first index), `shutdown`, progress cancellation, configuration changes and
workspace folders added or removed."""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.capabilities import get_capability

from ...config.settings import load_settings
from .. import params
from ..folders import (
    CLIENT_TIMEOUT,
    Folder,
    add_folder,
    engine_env,
    folder_depth,
    folder_specs,
    read_configuration,
    remove_folders,
    set_watching,
)
from ..runs import run_index
from .sync import MARKDOWN_GLOB, tick_loop

if TYPE_CHECKING:
    from ..server import SaiplingServer

log = logging.getLogger(__name__)


def register(server: SaiplingServer) -> None:
    server.handle(types.INITIALIZE, on_initialize)
    server.handle(types.INITIALIZED, on_initialized)
    server.handle(types.SHUTDOWN, on_shutdown)
    server.handle(types.EXIT, on_exit)
    server.handle(types.WINDOW_WORK_DONE_PROGRESS_CANCEL, on_progress_cancel)
    server.handle(types.WORKSPACE_DID_CHANGE_CONFIGURATION, on_did_change_configuration)
    server.handle(types.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS, on_did_change_workspace_folders)


# -- handlers ----------------------------------------------------------------------------------------------
def on_initialize(ls: SaiplingServer, p: types.InitializeParams) -> None:
    ls.bind_loop()
    opts = params.to_plain(p.initialization_options) or {}
    if isinstance(opts, dict) and isinstance(opts.get("saipling"), dict):
        opts = opts["saipling"]
    if not isinstance(opts, dict):
        ls.feedback.show_once("initializationOptions", "initializationOptions must be an object; ignored")
        opts = {}
    ls.init_options = opts


def on_initialized(ls: SaiplingServer, p: types.InitializedParams) -> None:
    ls.begin_start_up()


def on_exit(ls: SaiplingServer, p: Any) -> None:
    """`exit` (pygls then ends the message loop): exit code 0 after `shutdown`, else 1 (LSP)."""
    ls.exit_code = 0 if ls.protocol._shutdown else 1
    ls.exiting.set()


async def on_shutdown(ls: SaiplingServer, p: Any) -> None:
    await stop(ls)


def on_progress_cancel(ls: SaiplingServer, p: types.WorkDoneProgressCancelParams) -> None:
    if (cancel := ls.progress_cancels.get(str(p.token))) is not None:
        cancel.set()


async def on_did_change_configuration(ls: SaiplingServer, p: types.DidChangeConfigurationParams) -> None:
    await ls.wait_ready()
    await reconfigure(ls, p.settings)


async def on_did_change_workspace_folders(ls: SaiplingServer, p: types.DidChangeWorkspaceFoldersParams) -> None:
    await ls.wait_ready()
    async with ls.folders_lock:  # pygls runs notifications concurrently: folder changes apply in order
        opened = await remove_folders(ls, [f.uri for f in p.event.removed])
        for added in sorted(p.event.added, key=lambda f: folder_depth(f.uri)):
            (config,) = await read_configuration(ls, [added.uri])
            if (folder := await add_folder(ls, added.uri, added.name, config)) is not None:
                opened.append(folder)
        for folder in opened:
            if ls.folders.get(folder.uri) is folder:  # not taken over by a folder added after it
                folder.project.expect_run()
                ls.spawn(run_index(ls, folder))


# -- start-up, settings, shutdown --------------------------------------------------------------------------
async def start_up(ls: SaiplingServer) -> None:
    """After `initialized`: configuration, one project per folder, registrations, watcher, tick, index."""
    ls.bind_loop()
    try:
        specs = folder_specs(ls)
        configs = await read_configuration(ls, [uri for uri, _ in specs])
        async with ls.folders_lock:
            for (uri, name), config in sorted(zip(specs, configs, strict=True), key=lambda sc: folder_depth(sc[0][0])):
                await add_folder(ls, uri, name, config)  # outer folders first: nested ones never open
        for folder in ls.folders.values():  # (before `ready`: a status from now on says `scanning`)
            if folder.project.settings.auto_index and folder.project.settings.enabled:
                folder.project.expect_run()
        await register_watched_files(ls)
        ls.tick_task = ls.spawn(tick_loop(ls))
    finally:
        ls.ready.set()
        ls.ready_threads.set()
    if not ls.folders:
        ls.feedback.log("saipling: no workspace folder to index", types.MessageType.Warning)
    for folder in ls.folders.values():
        if folder.project.settings.auto_index and folder.project.settings.enabled:
            ls.spawn(run_index(ls, folder))


async def register_watched_files(ls: SaiplingServer) -> None:
    """Ask the client to send `workspace/didChangeWatchedFiles` for markdown files (dynamic only)."""
    if not get_capability(ls.client_capabilities, "workspace.did_change_watched_files.dynamic_registration", False):
        return
    globs = [MARKDOWN_GLOB] + (
        ["**/*.json"] if any(f.project.settings.include_json for f in ls.folders.values()) else []
    )
    options = types.DidChangeWatchedFilesRegistrationOptions(watchers=[types.FileSystemWatcher(g) for g in globs])
    registration = types.Registration(str(uuid.uuid4()), types.WORKSPACE_DID_CHANGE_WATCHED_FILES, options)
    try:
        await asyncio.wait_for(
            ls.client_register_capability_async(types.RegistrationParams([registration])), CLIENT_TIMEOUT
        )
    except Exception as exc:  # noqa: BLE001 - the watcher and didSave still sync
        log.warning("client/registerCapability failed: %s", exc)


async def reconfigure(ls: SaiplingServer, pushed: Any) -> None:
    """`workspace/didChangeConfiguration`: re-read settings; a provider or scope change reindexes."""
    pushed = params.to_plain(pushed)
    fallback = pushed.get("saipling") if isinstance(pushed, dict) else None
    folders = list(ls.folders.values())
    configs = await read_configuration(ls, [f.uri for f in folders])
    for folder, config in zip(folders, configs, strict=True):
        cfg = config if config is not None else (fallback if isinstance(fallback, dict) else None)
        settings, warnings = load_settings(folder.project.root, engine_env(), ls.init_options, cfg)
        ls.feedback.warnings(folder, warnings)
        ls.spawn(apply_settings(ls, folder, settings))


async def apply_settings(ls: SaiplingServer, folder: Folder, settings: Any) -> None:
    if settings == folder.project.settings:  # (VS Code pushes its settings once after `initialized`)
        return  # nothing to switch: a running index pass goes on
    was_full = folder.live.running_full
    interrupted = folder.live.cancel_run()  # never switch providers under a running pass
    async with folder.lock:
        reindex = await ls.call(folder.project.apply_settings, settings)
    folder.live.queue.quiet_period = settings.quiet_period_seconds
    await set_watching(ls, folder, settings.watch and settings.enabled)
    if reindex or interrupted:  # an interrupted full reindex resumes as a full one
        await run_index(ls, folder, full=reindex == "full" or (interrupted and was_full), title="Reindexing")


async def stop(ls: SaiplingServer) -> None:
    """`shutdown`: cancel runs (each file stays old or new), stop watchers and timers, close stores."""
    ls.stopping = True
    if ls.tick_task is not None:
        ls.tick_task.cancel()
    await asyncio.get_running_loop().run_in_executor(None, ls.close_all)

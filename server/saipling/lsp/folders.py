"""Workspace folders: per-folder state (the project, its sync queue and watcher, its one index run at a time)
and how the server opens, nests, closes and finds them for a request.

Folder functions take the server (`ls`) for its state: `ls.folders` (uri -> `Folder`), `ls.covered` (nested
folders searched through an enclosing folder's index) and `ls.folders_lock` (one folder change at a time)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from lsprotocol import types
from pygls.capabilities import get_capability
from pygls.exceptions import JsonRpcException

from ..files.scanner import is_indexable
from ..live.service import LiveIndex
from ..paths import too_broad
from ..project import Project
from . import convert, params
from .protocol import request_failed

if TYPE_CHECKING:
    from .server import SaiplingServer

log = logging.getLogger(__name__)

T = TypeVar("T")
CLIENT_TIMEOUT = 10.0  # seconds to wait for the client to answer our requests
TEST_CLOCK_ENV = "SAIPLING_TEST_CLOCK"
SERVER_ONLY_ENV = {TEST_CLOCK_ENV, "SAIPLING_LOG_LEVEL"}  # not settings: kept away from the engine


def engine_env() -> dict[str, str]:
    """The environment the engine reads settings from, without the server's own variables."""
    return {k: v for k, v in os.environ.items() if k not in SERVER_ONLY_ENV}


class TestClock:
    """A monotonic clock that tests can move forward (quiet periods pass without sleeping)."""

    __test__ = False  # not a pytest class

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset

    def advance(self, seconds: float) -> float:
        self.offset += seconds
        return self.offset


@dataclass
class Folder:
    """One workspace folder: its live index (project, sync queue, watcher, runs) and what the editor adds."""

    uri: str
    name: str
    live: LiveIndex
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # held by the run in progress (runs on the loop)
    open_files: dict[str, None] = field(default_factory=dict)  # open in the editor: embedded first
    cost_confirmed: bool = False  # the user agreed to what embedding costs (asked once per session)
    pause_reason: str | None = None  # why embedding is paused (saipling/pauseIndexing, cost not confirmed)

    @property
    def project(self) -> Project:
        return self.live.project

    def accepts(self, rel: str) -> bool:
        """True for a path the project indexes (under its current settings)."""
        return is_indexable(self.project.root, rel, self.project.settings) is None

    def run_in_thread(self, fn: Callable[[], T]) -> asyncio.Future[T]:
        """Run `fn` on the live index's daemon thread, awaitable from the event loop."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()

        def settle(result: Any, error: BaseException | None) -> None:
            if not fut.done():
                fut.set_exception(error) if error is not None else fut.set_result(result)

        def target() -> None:
            try:
                result, error = fn(), None
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
                result, error = None, exc
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits any more
                loop.call_soon_threadsafe(settle, result, error)

        self.live.start_run(target)
        return fut


def text_changed(ls: SaiplingServer, folder: Folder, rel: str) -> None:
    """A file was saved, created or changed (from the event loop or the watcher thread): its text, keywords
    and line ranges are refreshed now on a worker thread (`Project.refresh_dirty`, the cheap pass; a search
    meanwhile waits for it); its new text is embedded once the file is quiet (the sync queue)."""
    folder.project.mark_dirty(rel)
    if ls.stopping or not folder.project.settings.enabled:
        return
    try:
        ls.thread_pool.submit(refresh_now, ls, folder)
    except RuntimeError:  # the pool is shutting down: the server is closing
        pass


def refresh_now(ls: SaiplingServer, folder: Folder) -> None:
    if ls.stopping or ls.folders.get(folder.uri) is not folder:
        return
    try:
        folder.project.refresh_dirty()
    except Exception:  # noqa: BLE001 - logged; the next save or search tries again
        log.exception("refreshing the text of changed files in %s failed", folder.name)


def queue_for_embedding(folder: Folder, paths: list[str]) -> None:
    """Files a search found changed on disk (no editor or watcher event): embedded once quiet."""
    for path in paths:
        folder.live.queue.changed(path)


def folder_depth(uri: str) -> int:
    """How deep a folder URI is (outer folders sort first)."""
    path = convert.uri_to_path(uri)
    return len(path.resolve().parts) if path is not None else 0


def scope_to_folder(p: dict[str, Any], rel: str, with_filter: bool = True) -> None:
    """Limit a request to the files under `rel` (a nested workspace folder inside the folder that serves it):
    search results by path prefix (`with_filter`: requests whose schema has a `filter`), and relative paths
    (`path`, `paths`) taken as relative to the nested folder."""
    if with_filter:
        flt = p.get("filter") if isinstance(p.get("filter"), dict) else {}
        inner = flt.get("pathPrefix")
        flt["pathPrefix"] = f"{rel}/{inner.lstrip('/')}" if isinstance(inner, str) and inner else f"{rel}/"
        p["filter"] = flt
    if isinstance(p.get("path"), str) and not p["path"].startswith("file:") and not os.path.isabs(p["path"]):
        p["path"] = f"{rel}/{p['path']}"
    if isinstance(p.get("paths"), list):
        p["paths"] = [
            f"{rel}/{x}" if isinstance(x, str) and not x.startswith("file:") and not os.path.isabs(x) else x
            for x in p["paths"]
        ]


# -- opening and closing -----------------------------------------------------------------------------------
def folder_specs(ls: SaiplingServer) -> list[tuple[str, str]]:
    """(uri, name) of each workspace folder the client opened (the root URI when it sent no folders)."""
    folders = [(f.uri, f.name) for f in ls.workspace.folders.values()]
    if not folders and ls.workspace.root_uri:
        uri = ls.workspace.root_uri
        folders = [(uri, Path(convert.uri_to_path(uri) or uri).name)]
    return folders


async def read_configuration(ls: SaiplingServer, uris: list[str]) -> list[dict[str, Any] | None]:
    """`workspace/configuration` section `saipling` for each folder (None when unsupported or failed)."""
    if not uris or not get_capability(ls.client_capabilities, "workspace.configuration", False):
        return [None] * len(uris)
    items = [types.ConfigurationItem(scope_uri=uri, section="saipling") for uri in uris]
    try:
        got = await asyncio.wait_for(
            ls.workspace_configuration_async(types.ConfigurationParams(items=items)), CLIENT_TIMEOUT
        )
    except Exception as exc:  # noqa: BLE001 - a client that cannot answer: use the other sources
        log.warning("workspace/configuration failed: %s", exc)
        return [None] * len(uris)
    values = [params.to_plain(v) for v in (got or [])] + [None] * len(uris)
    return [v if isinstance(v, dict) else None for v in values[: len(uris)]]


async def open_folder(ls: SaiplingServer, uri: str, name: str, config: dict[str, Any] | None) -> Folder | None:
    root = convert.uri_to_path(uri)
    if root is None or not root.is_dir():
        ls.feedback.show_once(f"folder:{uri}", f"cannot index {uri}: not a local folder")
        return None
    if why := too_broad(root):
        ls.feedback.show_once(f"folder:{uri}", f"not indexed: {why}", types.MessageType.Error)
        return None
    try:
        project = await ls.call(
            partial(Project.open, root, env=engine_env(), init_options=ls.init_options, workspace_config=config)
        )
    except JsonRpcException as exc:
        ls.feedback.show_once(
            f"folder:{uri}", f"cannot open the index of {root}: {exc.message}", types.MessageType.Error
        )
        return None
    folder = Folder(uri, name, LiveIndex(project, clock=ls.clock, name=name))
    project.on_missing_file = folder.live.queue.deleted  # search drops vanished files (search.project_missing)
    folder.live.queue.listener = partial(text_changed, ls, folder)  # every change: its text is refreshed at once
    project.on_refreshed = partial(queue_for_embedding, folder)  # a search found a file changed on disk
    ls.folders[uri] = folder
    ls.feedback.warnings(folder, project.warnings)
    await set_watching(ls, folder, project.settings.watch and project.settings.enabled)
    return folder


def enclosing(ls: SaiplingServer, root: Path) -> Folder | None:
    """The open folder whose root holds `root` (or is it)."""
    for f in list(ls.folders.values()):
        if convert.relative_to(f.project.root, root) is not None:
            return f
    return None


async def add_folder(ls: SaiplingServer, uri: str, name: str, config: dict[str, Any] | None) -> Folder | None:
    """Open a workspace folder, unless an open folder already holds it (then it is searched through that
    folder's index: a nested folder indexed twice would cost its embeddings twice and repeat its results).
    A folder that holds open folders takes them over. Callers hold `folders_lock`."""
    root = convert.uri_to_path(uri)
    outer = enclosing(ls, root.resolve()) if root is not None else None
    if outer is not None:
        ls.covered[uri] = (name, outer.uri)
        ls.feedback.log(f"{name} is inside {outer.name}: searched through its index, not indexed twice")
        return None
    folder = await open_folder(ls, uri, name, config)
    if folder is not None:
        for inner in [f for f in ls.folders.values() if f is not folder]:
            if convert.relative_to(folder.project.root, inner.project.root) is not None:
                await close_folder(ls, inner.uri)
                ls.covered[inner.uri] = (inner.name, folder.uri)
                ls.feedback.log(f"{inner.name} is inside {folder.name}: now searched through its index")
                for nested, (nested_name, by) in list(ls.covered.items()):
                    if by == inner.uri:  # what the taken-over folder held, the new one holds
                        ls.covered[nested] = (nested_name, folder.uri)
    return folder


async def close_folder(ls: SaiplingServer, uri: str) -> None:
    folder = ls.folders.pop(uri, None)
    if folder is None:
        return
    folder.live.cancel_run()
    await set_watching(ls, folder, False)
    async with folder.lock:
        await ls.call(folder.project.close)


def known_uri(ls: SaiplingServer, uri: str) -> str:
    """The URI an open or nested folder was added under that names the same folder as `uri`, else `uri`. An
    editor may spell it another way when it removes it (a trailing `/`, a character percent-encoded, escapes in
    lower case): the folder stayed open and indexed. Compared as the add path compares them: resolved paths."""
    if uri in ls.folders or uri in ls.covered:
        return uri
    wanted = resolved(uri)
    if wanted is not None:
        for known in [*ls.folders, *ls.covered]:
            if resolved(known) == wanted:
                return known
    return uri


def resolved(uri: str) -> Path | None:
    path = convert.uri_to_path(uri)
    try:
        return path.resolve() if path is not None else None
    except (OSError, RuntimeError):  # (a symlink loop)
        return None


async def remove_folders(ls: SaiplingServer, uris: list[str]) -> list[Folder]:
    """Close workspace folders (however their URIs are spelt). Folders they held that stay in the workspace are
    opened on their own again (returned, to be indexed). Callers hold `folders_lock`."""
    uris = [known_uri(ls, uri) for uri in uris]
    gone = set(uris)
    for uri in uris:
        ls.covered.pop(uri, None)
        await close_folder(ls, uri)
    reopened = []
    for inner_uri, (name, outer) in sorted(ls.covered.items(), key=lambda kv: folder_depth(kv[0])):
        if outer in gone and inner_uri in ls.covered:
            del ls.covered[inner_uri]
            (config,) = await read_configuration(ls, [inner_uri])
            if (f := await add_folder(ls, inner_uri, name, config)) is not None:
                reopened.append(f)
    return reopened


async def set_watching(ls: SaiplingServer, folder: Folder, on: bool) -> None:
    try:
        await asyncio.get_running_loop().run_in_executor(None, folder.live.watch, on)
    except Exception as exc:  # noqa: BLE001 - e.g. inotify watch limit reached
        ls.feedback.show_once(
            f"watch:{folder.uri}", f"{folder.name}: cannot watch files ({exc}); editor saves still sync"
        )


# -- finding the folder of a request or a file -------------------------------------------------------------
def covered_by(ls: SaiplingServer, wanted: str) -> tuple[Folder, str] | None:
    """For a nested workspace folder (by URI or name): the open folder holding it and its path there."""
    for uri, (name, outer_uri) in list(ls.covered.items()):
        outer = ls.folders.get(outer_uri)
        if wanted in (uri, name) and outer is not None:
            path = convert.uri_to_path(uri)
            rel = convert.relative_to(outer.project.root, path.resolve()) if path is not None else None
            if rel is not None:
                return outer, rel
    return None


def folders_for(ls: SaiplingServer, p: dict[str, Any], *, with_filter: bool = True) -> list[Folder]:
    """The folder named by `workspaceFolder` (uri or name), else every folder. A nested folder is served by
    its enclosing one, scoped by a `filter.pathPrefix` when `with_filter` (search) and by relative paths. A name
    two folders share (/a/proj and /b/proj) is refused, naming their URIs: it searched both."""
    if not ls.folders:
        raise request_failed("no workspace folder is open")
    wanted = p.pop("workspaceFolder", None)
    if wanted is None:
        return list(ls.folders.values())
    if wanted not in ls.folders and wanted not in ls.covered:
        named = [f.uri for f in list(ls.folders.values()) if f.name == wanted]
        named += [uri for uri, (name, _) in list(ls.covered.items()) if name == wanted]
        if len(named) > 1:
            raise params.invalid(
                "workspaceFolder", f"{wanted!r} names {len(named)} workspace folders ({', '.join(named)}): give its URI"
            )
    found = [f for f in list(ls.folders.values()) if wanted in (f.uri, f.name)]
    if not found and (held := covered_by(ls, wanted)) is not None:
        outer, rel = held  # a nested folder: its enclosing folder's index, limited to its files
        scope_to_folder(p, rel, with_filter)
        found = [outer]
    if not found:
        raise params.invalid("workspaceFolder", f"{wanted!r} is not an open workspace folder")
    return found


def folder_for(ls: SaiplingServer, p: dict[str, Any], key: str = "path") -> Folder:
    """The folder for a one-file request: named, or containing the absolute path/uri, or the first."""
    folders = folders_for(ls, p, with_filter=False)
    target = p.get("uri") or p.get(key)
    path = convert.uri_to_path(target) if isinstance(target, str) and target.startswith("file:") else None
    if path is None and isinstance(target, str) and os.path.isabs(target):
        path = Path(target)
    if path is not None:
        return folder_of(ls, path) or folders[0]
    return folders[0]


def folder_of(ls: SaiplingServer, path: Path) -> Folder | None:
    """The innermost open folder holding `path`."""
    best: Folder | None = None
    for f in ls.folders.values():
        if convert.relative_to(f.project.root, path) is not None:
            if best is None or len(str(f.project.root)) > len(str(best.project.root)):
                best = f
    return best


def locate(ls: SaiplingServer, uri: str) -> tuple[Folder, str] | None:
    """The folder holding a file URI and the path relative to it."""
    path = convert.uri_to_path(uri)
    folder = folder_of(ls, path) if path is not None else None
    if folder is None or path is None:
        return None
    rel = convert.relative_to(folder.project.root, path)
    return (folder, rel) if rel else None

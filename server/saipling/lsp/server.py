"""The language server (`saipling serve`): thin wiring from the protocol to the engine (SPEC 7, 9, 10, 11).

`create_server()` builds a `SaiplingServer` and registers one short handler per method. Params arrive
validated (`protocol.py` + `params.py`); a handler calls one engine function off the event loop (read-only
requests run on a worker thread, the rest await `SaiplingServer.call`), guarded so engine errors become
JSON-RPC errors, and converts the result (`convert.py`). State lives on the server object: one `Folder`
per workspace folder (`folders.py`) with its `Project`, `SyncQueue`, optional `Watcher` and one index run
at a time; what the user is told goes through `Feedback` (`feedback.py`).

Test-only requests, registered only when the environment has SAIPLING_TEST_CLOCK=1:
`saipling/_test/advanceClock {seconds}` moves the sync clock forward (quiet periods pass instantly) and
`saipling/_test/tick` runs one sync tick now and waits for the passes it starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from lsprotocol import types
from pygls.capabilities import get_capability
from pygls.exceptions import JsonRpcException
from pygls.io_ import StdoutWriter
from pygls.lsp.server import LanguageServer

from .. import __version__
from ..config import load_settings
from ..indexer import IndexSummary
from ..project import Project
from ..sync import Batch, Clock, SyncQueue
from ..watcher import Watcher, ignored_folder
from . import convert, params, protocol
from .feedback import ClientLogHandler, Feedback
from .folders import Folder, ProgressReporter, TestClock
from .protocol import engine_errors, request_failed

log = logging.getLogger(__name__)

T = TypeVar("T")

TEST_CLOCK_ENV = "SAIPLING_TEST_CLOCK"
SERVER_ONLY_ENV = {TEST_CLOCK_ENV, "SAIPLING_LOG_LEVEL"}  # not settings: kept away from the engine
SYNC_PROGRESS_MIN_FILES = 50  # sync passes this large (or rescans) show $/progress
READY_TIMEOUT = 120.0  # seconds a request waits for start-up before failing
CLIENT_TIMEOUT = 10.0  # seconds to wait for the client to answer our requests
SHUTDOWN_GRACE = 10.0  # seconds to wait for index threads to stop after a cancel
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


def engine_env() -> dict[str, str]:
    """The environment the engine reads settings from, without the server's own variables."""
    return {k: v for k, v in os.environ.items() if k not in SERVER_ONLY_ENV}


def scope_to_folder(p: dict[str, Any], rel: str) -> None:
    """Limit a request to the files under `rel` (a nested workspace folder inside the folder that serves it):
    search results by path prefix, and relative paths (`path`, `paths`) taken as relative to the nested folder."""
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


def folder_depth(uri: str) -> int:
    """How deep a folder URI is (outer folders sort first)."""
    path = convert.uri_to_path(uri)
    return len(path.resolve().parts) if path is not None else 0


class LoopWriter:
    """pygls' writer interface over an asyncio StreamWriter, safe to call from worker threads (responses are
    written from the thread that ran the request; asyncio transports may only be used on their loop)."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self._loop = asyncio.get_running_loop()

    def write(self, data: bytes) -> None:
        if self._writer.is_closing():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._writer.write(data)
        else:
            with contextlib.suppress(RuntimeError):  # the loop closed: the client is gone
                self._loop.call_soon_threadsafe(self._writer.write, data)

    def close(self) -> None:
        self._writer.close()


class SaiplingServer(LanguageServer):
    """The server and all its state (no module globals)."""

    def __init__(self, *, test_clock: bool = False) -> None:
        super().__init__(
            "saipling",
            __version__,
            text_document_sync_kind=types.TextDocumentSyncKind.None_,
            protocol_cls=protocol.SaiplingProtocol,
            max_workers=4,  # engine requests (and pygls' stdin reader when stdin is not a pipe)
        )
        self.test_clock: TestClock | None = TestClock() if test_clock else None
        self.clock: Clock = self.test_clock or time.monotonic
        self.folders: dict[str, Folder] = {}
        # workspace folders inside another open folder: searched through that folder's index (uri -> (name,
        # enclosing folder uri)), never indexed twice
        self.covered: dict[str, tuple[str, str]] = {}
        self.folders_lock = asyncio.Lock()  # opening/closing folders: one change at a time
        self.init_options: dict[str, Any] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.loop_thread: int | None = None
        self.ready = asyncio.Event()  # start-up done (for coroutines) ...
        self.ready_threads = threading.Event()  # ... and for handlers running on worker threads
        self.progress_cancels: dict[str, threading.Event] = {}
        self.feedback = Feedback(self, self.post)
        self.tick_task: asyncio.Task[None] | None = None
        self.stopping = False
        self._closed = False
        self._close_lock = threading.Lock()
        self._tokens = itertools.count(1)
        self._background: set[asyncio.Task[Any]] = set()

    # -- transport -----------------------------------------------------------------------------------------
    def start_io(self, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> None:
        """Serve on stdio, reading stdin on the event loop itself.

        pygls reads every header line and body in its thread pool (three thread hops per message); watching
        the pipe with asyncio is faster. Falls back to pygls when stdin cannot be watched (a regular file)
        or shares its open file with stdout (non-blocking reads would make its writes non-blocking too).
        """
        stdin, stdout = stdin or sys.stdin.buffer, stdout or sys.stdout.buffer
        if not protocol.watchable(stdin, stdout):
            return super().start_io(stdin, stdout)
        self._stop_event = threading.Event()
        self.protocol.set_writer(StdoutWriter(stdout))
        try:
            asyncio.run(protocol.serve_pipe(self, stdin))
        except (BrokenPipeError, ConnectionResetError, asyncio.IncompleteReadError):
            log.info("the client closed the connection")
        except (KeyboardInterrupt, SystemExit):
            pass
        finally:
            self.shutdown()

    def start_tcp(self, host: str, port: int) -> None:
        """Serve one client on a TCP socket (debugging: `saipling serve --tcp HOST:PORT`; port 0 picks a free
        one). Logs the address it listens on; ends when that client exits or disconnects, like stdio."""
        self._stop_event = threading.Event()

        async def serve() -> None:
            finished = asyncio.get_running_loop().create_future()
            served = False

            async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                nonlocal served
                if served:  # one client per server process, as on stdio: later connections are refused
                    log.warning("refused a second TCP client: this server already serves one")
                    writer.close()
                    return
                served = True
                self.protocol.set_writer(LoopWriter(writer))  # type: ignore[arg-type]
                try:
                    await protocol.serve_stream(self, reader)
                except (SystemExit, ConnectionError, asyncio.IncompleteReadError):
                    pass  # `exit` (pygls ends with sys.exit) or the client went away
                finally:
                    writer.close()
                    if not finished.done():
                        finished.set_result(None)

            tcp = await asyncio.start_server(connection, host, port)
            for sock in tcp.sockets:
                log.info("listening on %s:%s", *sock.getsockname()[:2])
            async with tcp:
                await finished

        try:
            asyncio.run(serve())
        except (KeyboardInterrupt, SystemExit):
            pass
        finally:
            self.shutdown()

    # -- plumbing ------------------------------------------------------------------------------------------
    def bind_loop(self) -> None:
        """Remember the event loop (called on it) so other threads can post to the client."""
        self.loop, self.loop_thread = asyncio.get_running_loop(), threading.get_ident()

    def post(self, fn: Callable[..., Any], *args: Any) -> None:
        """Call `fn(*args)` on the event loop: notifications from threads keep their order there."""
        loop = self.loop
        if loop is None or loop.is_closed():
            return
        if threading.get_ident() == self.loop_thread:
            fn(*args)
            return
        with contextlib.suppress(RuntimeError):  # loop closing: nobody listens any more
            loop.call_soon_threadsafe(fn, *args)

    def spawn(self, coro: Any) -> asyncio.Task[Any]:
        """A background task that is kept alive and whose failure is logged, never raised."""
        task = asyncio.ensure_future(coro)
        self._background.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self._background.discard(t)
            if not t.cancelled() and t.exception() is not None:
                log.error("background task failed", exc_info=t.exception())

        task.add_done_callback(done)
        return task

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run blocking engine work in the worker pool; engine errors become JSON-RPC errors."""
        with engine_errors():
            return await asyncio.get_running_loop().run_in_executor(self.thread_pool, partial(fn, *args))

    @contextlib.contextmanager
    def engine_call(self) -> Iterator[None]:
        """For handlers on worker threads: wait for start-up, then guard like `call`."""
        if not self.ready_threads.wait(READY_TIMEOUT):
            raise request_failed("the server is still starting")
        with engine_errors():
            yield

    async def wait_ready(self) -> None:
        if self.ready.is_set():
            return
        try:
            await asyncio.wait_for(self.ready.wait(), READY_TIMEOUT)
        except TimeoutError:
            raise request_failed("the server is still starting") from None

    def report_server_error(self, error: Exception, source: Any) -> None:
        """pygls' default shows every failed notification to the user; log it. A failed request already
        carries its error in the response."""
        request = getattr(source, "__name__", "") == "FeatureRequestError"
        log.log(
            logging.DEBUG if request else logging.ERROR, "%s: %s", getattr(source, "__name__", source), error
        )

    # -- folders -------------------------------------------------------------------------------------------
    def folder_specs(self) -> list[tuple[str, str]]:
        folders = [(f.uri, f.name) for f in self.workspace.folders.values()]
        if not folders and self.workspace.root_uri:
            uri = self.workspace.root_uri
            folders = [(uri, Path(convert.uri_to_path(uri) or uri).name)]
        return folders

    async def read_configuration(self, uris: list[str]) -> list[dict[str, Any] | None]:
        """`workspace/configuration` section `saipling` for each folder (None when unsupported or failed)."""
        if not uris or not get_capability(self.client_capabilities, "workspace.configuration", False):
            return [None] * len(uris)
        items = [types.ConfigurationItem(scope_uri=uri, section="saipling") for uri in uris]
        try:
            got = await asyncio.wait_for(
                self.workspace_configuration_async(types.ConfigurationParams(items=items)), CLIENT_TIMEOUT
            )
        except Exception as exc:  # noqa: BLE001 - a client that cannot answer: use the other sources
            log.warning("workspace/configuration failed: %s", exc)
            return [None] * len(uris)
        values = [params.to_plain(v) for v in (got or [])] + [None] * len(uris)
        return [v if isinstance(v, dict) else None for v in values[: len(uris)]]

    async def open_folder(self, uri: str, name: str, config: dict[str, Any] | None) -> Folder | None:
        root = convert.uri_to_path(uri)
        if root is None or not root.is_dir():
            self.feedback.show_once(f"folder:{uri}", f"cannot index {uri}: not a local folder")
            return None
        try:
            project = await self.call(
                partial(
                    Project.open,
                    root,
                    env=engine_env(),
                    init_options=self.init_options,
                    workspace_config=config,
                )
            )
        except JsonRpcException as exc:
            self.feedback.show_once(
                f"folder:{uri}", f"cannot open the index of {root}: {exc.message}", types.MessageType.Error
            )
            return None
        folder = Folder(uri, name, project, SyncQueue(project.settings.quiet_period_seconds, self.clock))
        project.on_missing_file = folder.queue.deleted  # type: ignore[attr-defined] - search drops vanished files
        self.folders[uri] = folder
        self.feedback.warnings(folder, project.warnings)
        await self.set_watching(folder, project.settings.watch and project.settings.enabled)
        return folder

    def enclosing(self, root: Path) -> Folder | None:
        """The open folder whose root holds `root` (or is it)."""
        for f in list(self.folders.values()):
            if convert.relative_to(f.project.root, root) is not None:
                return f
        return None

    async def add_folder(self, uri: str, name: str, config: dict[str, Any] | None) -> Folder | None:
        """Open a workspace folder, unless an open folder already holds it (then it is searched through that
        folder's index: a nested folder indexed twice would cost its embeddings twice and repeat its results).
        A folder that holds open folders takes them over. Callers hold `folders_lock`."""
        root = convert.uri_to_path(uri)
        outer = self.enclosing(root.resolve()) if root is not None else None
        if outer is not None:
            self.covered[uri] = (name, outer.uri)
            self.feedback.log(f"{name} is inside {outer.name}: searched through its index, not indexed twice")
            return None
        folder = await self.open_folder(uri, name, config)
        if folder is not None:
            for inner in [f for f in self.folders.values() if f is not folder]:
                if convert.relative_to(folder.project.root, inner.project.root) is not None:
                    await self.close_folder(inner.uri)
                    self.covered[inner.uri] = (inner.name, folder.uri)
                    self.feedback.log(f"{inner.name} is inside {folder.name}: now searched through its index")
                    for nested, (nested_name, by) in list(self.covered.items()):
                        if by == inner.uri:  # what the taken-over folder held, the new one holds
                            self.covered[nested] = (nested_name, folder.uri)
        return folder

    async def close_folder(self, uri: str) -> None:
        folder = self.folders.pop(uri, None)
        if folder is None:
            return
        if folder.cancel is not None:
            folder.cancel.set()
        await self.set_watching(folder, False)
        async with folder.lock:
            await self.call(folder.project.close)

    async def remove_folders(self, uris: list[str]) -> list[Folder]:
        """Close workspace folders. Folders they held that stay in the workspace are opened on their own again
        (returned, to be indexed). Callers hold `folders_lock`."""
        gone = set(uris)
        for uri in uris:
            self.covered.pop(uri, None)
            await self.close_folder(uri)
        reopened = []
        for inner_uri, (name, outer) in sorted(self.covered.items(), key=lambda kv: folder_depth(kv[0])):
            if outer in gone and inner_uri in self.covered:
                del self.covered[inner_uri]
                (config,) = await self.read_configuration([inner_uri])
                if (f := await self.add_folder(inner_uri, name, config)) is not None:
                    reopened.append(f)
        return reopened

    def covered_by(self, wanted: str) -> tuple[Folder, str] | None:
        """For a nested workspace folder (by URI or name): the open folder holding it and its path there."""
        for uri, (name, outer_uri) in list(self.covered.items()):
            outer = self.folders.get(outer_uri)
            if wanted in (uri, name) and outer is not None:
                path = convert.uri_to_path(uri)
                rel = convert.relative_to(outer.project.root, path.resolve()) if path is not None else None
                if rel is not None:
                    return outer, rel
        return None

    async def set_watching(self, folder: Folder, on: bool) -> None:
        if on and folder.watcher is None:
            folder.watcher = Watcher.for_project(folder.project, folder.queue)
            try:
                await asyncio.get_running_loop().run_in_executor(None, folder.watcher.start)
            except Exception as exc:  # noqa: BLE001 - e.g. inotify watch limit reached
                folder.watcher = None
                self.feedback.show_once(
                    f"watch:{folder.uri}",
                    f"{folder.name}: cannot watch files ({exc}); editor saves still sync",
                )
        elif not on and folder.watcher is not None:
            watcher, folder.watcher = folder.watcher, None
            await asyncio.get_running_loop().run_in_executor(None, watcher.stop)

    def folders_for(self, p: dict[str, Any]) -> list[Folder]:
        """The folder named by `workspaceFolder` (uri or name), else every folder."""
        if not self.folders:
            raise request_failed("no workspace folder is open")
        wanted = p.pop("workspaceFolder", None)
        if wanted is None:
            return list(self.folders.values())
        found = [f for f in list(self.folders.values()) if wanted in (f.uri, f.name)]
        if not found and (held := self.covered_by(wanted)) is not None:
            outer, rel = held  # a nested folder: its enclosing folder's index, limited to its files
            scope_to_folder(p, rel)
            found = [outer]
        if not found:
            raise params.invalid("workspaceFolder", f"{wanted!r} is not an open workspace folder")
        return found

    def folder_for(self, p: dict[str, Any], key: str = "path") -> Folder:
        """The folder for a one-file request: named, or containing the absolute path/uri, or the first."""
        folders = self.folders_for(p)
        target = p.get("uri") or p.get(key)
        path = convert.uri_to_path(target) if isinstance(target, str) and target.startswith("file:") else None
        if path is None and isinstance(target, str) and os.path.isabs(target):
            path = Path(target)
        if path is not None:
            return self.folder_of(path) or folders[0]
        return folders[0]

    def folder_of(self, path: Path) -> Folder | None:
        best: Folder | None = None
        for f in self.folders.values():
            if convert.relative_to(f.project.root, path) is not None:
                if best is None or len(str(f.project.root)) > len(str(best.project.root)):
                    best = f
        return best

    def locate(self, uri: str) -> tuple[Folder, str] | None:
        """The folder holding a file URI and the path relative to it."""
        path = convert.uri_to_path(uri)
        folder = self.folder_of(path) if path is not None else None
        if folder is None or path is None:
            return None
        rel = convert.relative_to(folder.project.root, path)
        return (folder, rel) if rel else None

    # -- sync ----------------------------------------------------------------------------------------------
    def file_changed(self, uri: str, folders_too: bool = False) -> None:
        """A saved or created file is indexed once quiet; a created folder asks for a rescan."""
        if not (hit := self.locate(uri)):
            return
        folder, rel = hit
        if folders_too and (folder.project.root / rel).is_dir():
            # a folder (even one `include` names: globs match a path's folders) is no file to index
            if not ignored_folder(rel):
                folder.queue.rescan()
        elif folder.accepts(rel):
            folder.queue.changed(rel)

    def file_deleted(self, uri: str, folders_too: bool = False) -> None:
        """A deleted file leaves the index on the next tick; a deleted folder asks for a rescan."""
        if not (hit := self.locate(uri)):
            return
        folder, rel = hit
        if folder.accepts(rel):
            inside = self.stored_under(folder, rel) if folders_too else []
            for path in inside or [rel]:  # a deleted folder `include` names: the files it held leave
                folder.queue.deleted(path)
        elif folders_too and not ignored_folder(rel):
            folder.queue.rescan()

    def stored_under(self, folder: Folder, rel: str) -> list[str]:
        """The indexed files inside `rel` when `rel` is no indexed file itself (it was a folder)."""
        store = folder.project.store
        try:
            if store.get_file(rel) is not None:
                return []
            return [p for p in store.file_states() if p.startswith(rel + "/")]
        except Exception:  # noqa: BLE001 - the store is closing: a rescan finds what is gone
            folder.queue.rescan()
            return []

    def tick_interval(self) -> float:
        return max(0.05, min((f.project.settings.tick_seconds for f in self.folders.values()), default=10.0))

    async def tick_loop(self) -> None:
        while not self.stopping:
            await asyncio.sleep(self.tick_interval())
            try:
                self.tick()
            except Exception:
                log.exception("sync tick failed")

    def tick(self) -> list[asyncio.Task[Any]]:
        """Start one batched pass per folder with due changes (skipped while that folder is indexing)."""
        tasks = []
        for folder in list(self.folders.values()):
            if (
                folder.project.settings.enabled
                and not folder.lock.locked()
                and (work := self.due_work(folder))
            ):
                tasks.append(self.spawn(work))
        return tasks

    def due_work(self, folder: Folder) -> Coroutine[Any, Any, IndexSummary | None] | None:
        """The pass a folder needs now: its due changes, else a retry of embeddings that failed earlier."""
        if batch := folder.queue.due():
            return self.sync_pass(folder, batch)
        if folder.retry_at is not None and self.clock() >= folder.retry_at:
            folder.retry_at = None  # set again by the run if the provider still fails
            return self.run_index(
                folder, paths=[], title="Embedding", progress=False
            )  # chunks without vectors
        return None

    async def sync_pass(self, folder: Folder, batch: Batch) -> IndexSummary | None:
        big = batch.rescan or len(batch) >= SYNC_PROGRESS_MIN_FILES
        paths = None if batch.rescan else batch.paths
        summary = await self.run_index(folder, paths=paths, title="Syncing", progress=big)
        if (summary is None or summary.cancelled) and not self.stopping:
            folder.queue.requeue(batch.paths, batch.rescan)
        return summary

    # -- index runs ----------------------------------------------------------------------------------------
    async def begin_progress(self, title: str, cancel: threading.Event) -> ProgressReporter | None:
        if not get_capability(self.client_capabilities, "window.work_done_progress", False):
            return None
        token = f"saipling/index/{next(self._tokens)}"
        try:
            await asyncio.wait_for(self.work_done_progress.create_async(token), CLIENT_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - no progress UI; the run still happens
            log.warning("window/workDoneProgress/create failed: %s", exc)
            return None
        self.progress_cancels[token] = cancel
        begin = types.WorkDoneProgressBegin(title=title, cancellable=True, message="scanning", percentage=0)
        self.work_done_progress.begin(token, begin)
        return ProgressReporter(
            self.work_done_progress, token, self.post, lambda t: self.progress_cancels.pop(t, None)
        )

    async def run_index(
        self, folder: Folder, *, full: bool = False, paths: list[str] | None = None, title: str = "Indexing",
        progress: bool = True,
    ) -> IndexSummary | None:  # fmt: skip
        """One index run of a folder (runs of a folder queue behind each other), with `$/progress`."""
        async with folder.lock:
            if self.stopping or self.folders.get(folder.uri) is not folder:  # shutting down, or closed
                return None
            folder.cancel = cancel = threading.Event()
            folder.running_full = full
            reporter = await self.begin_progress(title, cancel) if progress else None
            summary: IndexSummary | None = None
            run = partial(folder.project.index, full, paths, reporter.update if reporter else None, cancel)
            try:
                summary = await folder.run_in_thread(run)
            except Exception:
                log.exception("indexing %s failed", folder.project.root)
            finally:
                folder.cancel = None
                folder.passes += 1
                if reporter:
                    reporter.end(convert.summary_message(summary))
            folder.schedule_retry(summary, self.clock())
            self.feedback.index_done(folder, summary, title)
            return summary

    # -- life cycle ----------------------------------------------------------------------------------------
    async def start_up(self) -> None:
        """After `initialized`: configuration, one project per folder, registrations, watcher, tick, index."""
        self.bind_loop()
        try:
            specs = self.folder_specs()
            configs = await self.read_configuration([uri for uri, _ in specs])
            async with self.folders_lock:
                for (uri, name), config in sorted(
                    zip(specs, configs, strict=True), key=lambda sc: folder_depth(sc[0][0])
                ):
                    await self.add_folder(uri, name, config)  # outer folders first: nested ones never open
            await self.register_watched_files()
            self.tick_task = self.spawn(self.tick_loop())
        finally:
            self.ready.set()
            self.ready_threads.set()
        if not self.folders:
            self.feedback.log("saipling: no workspace folder to index", types.MessageType.Warning)
        for folder in self.folders.values():
            if folder.project.settings.auto_index and folder.project.settings.enabled:
                self.spawn(self.run_index(folder))

    async def register_watched_files(self) -> None:
        """Ask the client to send `workspace/didChangeWatchedFiles` for markdown files (dynamic only)."""
        if not get_capability(
            self.client_capabilities, "workspace.did_change_watched_files.dynamic_registration", False
        ):
            return
        globs = [MARKDOWN_GLOB] + (
            ["**/*.json"] if any(f.project.settings.include_json for f in self.folders.values()) else []
        )
        options = types.DidChangeWatchedFilesRegistrationOptions(
            watchers=[types.FileSystemWatcher(g) for g in globs]
        )
        registration = types.Registration(
            str(uuid.uuid4()), types.WORKSPACE_DID_CHANGE_WATCHED_FILES, options
        )
        try:
            await asyncio.wait_for(
                self.client_register_capability_async(types.RegistrationParams([registration])),
                CLIENT_TIMEOUT,
            )
        except Exception as exc:  # noqa: BLE001 - the watcher and didSave still sync
            log.warning("client/registerCapability failed: %s", exc)

    async def reconfigure(self, pushed: Any) -> None:
        """`workspace/didChangeConfiguration`: re-read settings; a provider or scope change reindexes."""
        pushed = params.to_plain(pushed)
        fallback = pushed.get("saipling") if isinstance(pushed, dict) else None
        folders = list(self.folders.values())
        configs = await self.read_configuration([f.uri for f in folders])
        for folder, config in zip(folders, configs, strict=True):
            cfg = config if config is not None else (fallback if isinstance(fallback, dict) else None)
            settings, warnings = load_settings(folder.project.root, engine_env(), self.init_options, cfg)
            self.feedback.warnings(folder, warnings)
            self.spawn(self.apply_settings(folder, settings))

    async def apply_settings(self, folder: Folder, settings: Any) -> None:
        interrupted = folder.cancel is not None
        interrupted_full = interrupted and folder.running_full
        if folder.cancel is not None:
            folder.cancel.set()  # never switch providers under a running pass
        async with folder.lock:
            reindex = await self.call(folder.project.apply_settings, settings)
        folder.queue.quiet_period = settings.quiet_period_seconds
        await self.set_watching(folder, settings.watch and settings.enabled)
        if reindex or interrupted:  # an interrupted full reindex resumes as a full one
            await self.run_index(folder, full=reindex == "full" or interrupted_full, title="Reindexing")

    async def stop(self) -> None:
        """`shutdown`: cancel runs (each file stays old or new), stop watchers and timers, close stores."""
        self.stopping = True
        if self.tick_task is not None:
            self.tick_task.cancel()
        await asyncio.get_running_loop().run_in_executor(None, self.close_all)

    def close_all(self, grace: float = SHUTDOWN_GRACE) -> None:
        """Idempotent, from any thread: also runs when the client vanished without `shutdown`."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = self.stopping = True
        folders = list(self.folders.values())
        for f in folders:
            if f.cancel is not None:
                f.cancel.set()
        for f in folders:
            if f.watcher is not None:
                f.watcher.stop()
        deadline = time.monotonic() + grace
        for f in folders:
            if f.worker is not None:
                f.worker.join(max(0.0, deadline - time.monotonic()))
        if self._thread_pool is not None:  # requests in flight finish before the stores close
            self._thread_pool.shutdown(wait=True, cancel_futures=True)
        for f in folders:
            if f.worker is not None and f.worker.is_alive():
                log.warning("%s: an index run is still finishing; the next start resumes it", f.name)
                continue
            with contextlib.suppress(Exception):
                f.project.close()


# -- handlers: life cycle ----------------------------------------------------------------------------------
def on_initialize(ls: SaiplingServer, p: types.InitializeParams) -> None:
    ls.bind_loop()
    opts = params.to_plain(p.initialization_options) or {}
    if isinstance(opts, dict) and isinstance(opts.get("saipling"), dict):
        opts = opts["saipling"]
    if not isinstance(opts, dict):
        ls.feedback.show_once("initializationOptions", "initializationOptions must be an object; ignored")
        opts = {}
    ls.init_options = opts


async def on_initialized(ls: SaiplingServer, p: types.InitializedParams) -> None:
    await ls.start_up()


async def on_shutdown(ls: SaiplingServer, p: Any) -> None:
    await ls.stop()


def on_progress_cancel(ls: SaiplingServer, p: types.WorkDoneProgressCancelParams) -> None:
    if (cancel := ls.progress_cancels.get(str(p.token))) is not None:
        cancel.set()


async def on_did_change_configuration(ls: SaiplingServer, p: types.DidChangeConfigurationParams) -> None:
    await ls.wait_ready()
    await ls.reconfigure(p.settings)


async def on_did_change_workspace_folders(
    ls: SaiplingServer, p: types.DidChangeWorkspaceFoldersParams
) -> None:
    await ls.wait_ready()
    async with ls.folders_lock:  # pygls runs notifications concurrently: folder changes apply in order
        opened = await ls.remove_folders([f.uri for f in p.event.removed])
        for added in sorted(p.event.added, key=lambda f: folder_depth(f.uri)):
            (config,) = await ls.read_configuration([added.uri])
            if (folder := await ls.add_folder(added.uri, added.name, config)) is not None:
                opened.append(folder)
        for folder in opened:
            if ls.folders.get(folder.uri) is folder:  # not taken over by a folder added after it
                ls.spawn(ls.run_index(folder))


# -- handlers: sync ----------------------------------------------------------------------------------------
async def on_did_save(ls: SaiplingServer, p: types.DidSaveTextDocumentParams) -> None:
    await ls.wait_ready()
    ls.file_changed(p.text_document.uri)


async def on_did_create_files(ls: SaiplingServer, p: types.CreateFilesParams) -> None:
    await ls.wait_ready()
    for f in p.files:
        ls.file_changed(f.uri, folders_too=True)


async def on_did_rename_files(ls: SaiplingServer, p: types.RenameFilesParams) -> None:
    await ls.wait_ready()
    for f in p.files:
        ls.file_deleted(f.old_uri, folders_too=True)
        ls.file_changed(f.new_uri, folders_too=True)


async def on_did_delete_files(ls: SaiplingServer, p: types.DeleteFilesParams) -> None:
    await ls.wait_ready()
    for f in p.files:
        ls.file_deleted(f.uri, folders_too=True)


async def on_did_change_watched_files(ls: SaiplingServer, p: types.DidChangeWatchedFilesParams) -> None:
    await ls.wait_ready()
    for change in p.changes:
        if change.type == types.FileChangeType.Deleted:
            ls.file_deleted(change.uri)
        else:
            ls.file_changed(change.uri)


# -- handlers: requests ------------------------------------------------------------------------------------
# Read-only requests run on a worker thread (pygls `thread()`), which also writes the response: one thread
# hop fewer than awaiting the work from the event loop.
def search(ls: SaiplingServer, p: dict[str, Any]) -> dict[str, Any]:
    with ls.engine_call():
        folders = ls.folders_for(p)
        responses = [(f.uri, f.project.search(p)) for f in folders]
    for folder in folders:
        ls.feedback.provider(folder)
    return convert.merge_search(
        responses, p.get("maxResults") or folders[0].project.settings.max_results_default
    )


def enrich_context(ls: SaiplingServer, p: dict[str, Any]) -> dict[str, Any]:
    with ls.engine_call():
        folder = ls.folders_for(p)[0]
        result = folder.project.enrich(p)
    ls.feedback.provider(folder)
    return {**result, "workspaceFolder": folder.uri}


def related(ls: SaiplingServer, p: dict[str, Any]) -> dict[str, Any]:
    with ls.engine_call():
        folder = ls.folder_for(p, "uri")
        result = folder.project.related(p)
    return {**result, "results": convert.tag_folder(result.get("results") or [], folder.uri)}


def get(ls: SaiplingServer, p: dict[str, Any]) -> dict[str, Any]:
    with ls.engine_call():
        folder = ls.folder_for(p)
        return {**folder.project.get(p), "workspaceFolder": folder.uri}


def status(ls: SaiplingServer, p: dict[str, Any]) -> dict[str, Any]:
    with ls.engine_call():
        folders = ls.folders_for(p)
        for f in folders:
            f.project.state.pending_files = len(f.queue)
        statuses = [(f.uri, {**f.project.status(), "indexPasses": f.passes}) for f in folders]
    return convert.merge_status(statuses)


async def reindex(ls: SaiplingServer, p: dict[str, Any]) -> dict[str, Any]:
    """Background run that bypasses the quiet period: pending changes are included now."""
    await ls.wait_ready()
    for folder in ls.folders_for(p):
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
    summary = await ls.run_index(folder, full=full, paths=paths, title="Reindexing")
    if (summary is None or summary.cancelled) and not ls.stopping:
        folder.queue.requeue(pending.paths, pending.rescan)


async def clear_index(ls: SaiplingServer, p: dict[str, Any]) -> dict[str, Any]:
    await ls.wait_ready()
    wanted = p.get("workspaceFolder")
    if isinstance(wanted, str) and wanted not in {n for f in ls.folders.values() for n in (f.uri, f.name)}:
        if (held := ls.covered_by(wanted)) is not None:
            raise request_failed(
                f"{wanted} is searched through the index of {held[0].name}: clear that folder's index instead"
            )
    for folder in ls.folders_for(p):
        if folder.cancel is not None:
            folder.cancel.set()
        async with folder.lock:
            await ls.call(folder.project.clear)
    return {"cleared": True}


def workspace_symbol(ls: SaiplingServer, p: types.WorkspaceSymbolParams) -> list[types.SymbolInformation]:
    with ls.engine_call():
        folders = list(ls.folders.values())
        found = [(f, s) for f in folders for s in f.project.symbols(p.query)]
    found.sort(key=lambda fs: fs[1].get("kind") != "entity")  # stable: entities of every folder first
    return [convert.symbol_information(s, f.project.root) for f, s in found]


async def test_advance_clock(ls: SaiplingServer, p: dict[str, Any]) -> dict[str, Any]:
    """Test only: move the sync clock forward."""
    assert ls.test_clock is not None
    return {"offset": ls.test_clock.advance(float(p["seconds"]))}


async def test_tick(ls: SaiplingServer, p: dict[str, Any]) -> dict[str, Any]:
    """Test only: one sync tick now (after any run in progress), waiting for the passes it starts."""
    await ls.wait_ready()
    out = []
    for folder in list(ls.folders.values()):
        async with folder.lock:
            batch = folder.queue.due()
            retry = not batch and folder.retry_at is not None and ls.clock() >= folder.retry_at
        if batch:
            summary = await ls.sync_pass(folder, batch)
        elif retry:
            folder.retry_at = None
            summary = await ls.run_index(folder, paths=[], title="Embedding", progress=False)
        else:
            summary = None
        out.append({"workspaceFolder": folder.uri, "paths": len(batch), "rescan": batch.rescan,
                    "ran": summary is not None, "retried": retry, "passes": folder.passes,
                    "pending": len(folder.queue)})  # fmt: skip
    return {"folders": out}


# -- commands ----------------------------------------------------------------------------------------------
async def cmd_reindex(ls: SaiplingServer, *args: Any) -> dict[str, Any]:
    return await reindex(ls, params.command_params("saipling.reindex", args))


async def cmd_clear_index(ls: SaiplingServer, *args: Any) -> dict[str, Any]:
    return await clear_index(ls, params.command_params("saipling.clearIndex", args))


def cmd_status(ls: SaiplingServer, *args: Any) -> dict[str, Any]:
    return status(ls, params.command_params("saipling.status", args))


FEATURES: list[tuple[str, Callable[..., Any], Any]] = [
    (types.INITIALIZE, on_initialize, None),
    (types.INITIALIZED, on_initialized, None),
    (types.SHUTDOWN, on_shutdown, None),
    (types.WINDOW_WORK_DONE_PROGRESS_CANCEL, on_progress_cancel, None),
    (types.WORKSPACE_DID_CHANGE_CONFIGURATION, on_did_change_configuration, None),
    (types.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS, on_did_change_workspace_folders, None),
    (types.TEXT_DOCUMENT_DID_SAVE, on_did_save, types.SaveOptions(include_text=False)),
    (types.WORKSPACE_DID_CREATE_FILES, on_did_create_files, FILE_OPERATIONS),
    (types.WORKSPACE_DID_RENAME_FILES, on_did_rename_files, FILE_OPERATIONS),
    (types.WORKSPACE_DID_DELETE_FILES, on_did_delete_files, FILE_OPERATIONS),
    (types.WORKSPACE_DID_CHANGE_WATCHED_FILES, on_did_change_watched_files, None),
    (types.WORKSPACE_SYMBOL, workspace_symbol, None),
    ("saipling/search", search, None),
    ("saipling/enrichContext", enrich_context, None),
    ("saipling/related", related, None),
    ("saipling/get", get, None),
    ("saipling/status", status, None),
    ("saipling/reindex", reindex, None),
    ("saipling/clearIndex", clear_index, None),
]
TEST_FEATURES = [
    ("saipling/_test/advanceClock", test_advance_clock, None),
    ("saipling/_test/tick", test_tick, None),
]
COMMANDS = {
    "saipling.reindex": cmd_reindex,
    "saipling.clearIndex": cmd_clear_index,
    "saipling.status": cmd_status,
}

THREADED = {search, enrich_context, related, get, status, workspace_symbol, cmd_status}


def create_server(*, test_clock: bool | None = None) -> SaiplingServer:
    """A new server with every handler registered (test requests only with SAIPLING_TEST_CLOCK=1)."""
    if test_clock is None:
        test_clock = os.environ.get(TEST_CLOCK_ENV) == "1"
    server = SaiplingServer(test_clock=test_clock)
    threaded = server.thread()
    for method, handler, options in FEATURES + (TEST_FEATURES if test_clock else []):
        server.feature(method, options)(threaded(handler) if handler in THREADED else handler)
    for name, handler in COMMANDS.items():
        server.command(name)(threaded(handler) if handler in THREADED else handler)
    return server


def configure_logging(server: SaiplingServer) -> None:
    """Logs go to stderr (stdout is the protocol); engine records also reach the client's log."""
    level = os.environ.get("SAIPLING_LOG_LEVEL", "INFO").upper()
    logging.basicConfig(
        stream=sys.stderr, level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("saipling").setLevel(level)
    for noisy in ("pygls", "watchdog", "httpx", "httpcore"):  # pygls logs every message at INFO
        logging.getLogger(noisy).setLevel(logging.DEBUG if level == "DEBUG" else logging.WARNING)
    handler = ClientLogHandler(server.feedback)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logging.getLogger("saipling").addHandler(handler)


def run(tcp: str | None = None) -> None:
    """`saipling serve`: stdio (what editors start), or `--tcp HOST:PORT` for debugging."""
    server = create_server()
    configure_logging(server)
    try:
        if tcp:
            host, _, port = tcp.rpartition(":")
            server.start_tcp(host or "127.0.0.1", int(port))
        else:
            protocol_out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
            os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # a stray print must not corrupt the protocol
            sys.stdout = sys.stderr
            server.start_io(sys.stdin.buffer, protocol_out)
    finally:
        server.close_all()

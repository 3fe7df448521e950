"""The language server (`saipling serve`): the `SaiplingServer` (its state, transport and threading
helpers), `create_server()` and `run()` (SPEC 7, 9, 10, 11).

Handlers live in `features/` (one module per feature, each with `register(server)`) and are registered
through `SaiplingServer.handle()`, which guards each at the dispatch point: an engine error becomes the
right JSON-RPC error and anything unexpected is logged and answered with InternalError, never a dead server.
Params arrive validated (`protocol.py` + `params.py`); a handler calls one engine function off the event
loop (read-only requests run on a worker thread, the rest await `SaiplingServer.call`) and converts the
result (`convert.py`). State lives on the server object: one `Folder` per workspace folder (`folders.py`)
with its `Project`, `SyncQueue`, optional `Watcher` and one index run at a time (`runs.py`); what the user
is told goes through `Feedback` (`feedback.py`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import itertools
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, BinaryIO, TypeVar

from lsprotocol import types
from pygls.io_ import StdoutWriter
from pygls.lsp.server import LanguageServer

from .. import __version__, redact
from ..live.sync_queue import Clock
from . import features, protocol
from .feedback import ClientLogHandler, Feedback
from .folders import TEST_CLOCK_ENV, Folder, TestClock
from .protocol import engine_errors, request_failed

log = logging.getLogger(__name__)

T = TypeVar("T")

READY_TIMEOUT = 120.0  # seconds a request waits for start-up before failing
SHUTDOWN_GRACE = 10.0  # seconds to wait for index threads to stop after a cancel (`shutdown`)
EXIT_GRACE = 0.5  # seconds the same gets on `exit` without `shutdown` or when stdin closes (the process ends)
# seconds between checks, while a request waits for start-up, that the server is not exiting
READY_POLL = 0.05


def guarded(method: str, handler: Callable[..., Any]) -> Callable[..., Any]:
    """`handler` behind the dispatch guard: engine errors become JSON-RPC errors, anything unexpected is
    logged and becomes InternalError (`protocol.engine_errors`). Keeps the signature (pygls passes the server
    to a first parameter named `ls`) and whether it is a coroutine."""
    if asyncio.iscoroutinefunction(handler):

        async def run_async(*args: Any, **kwargs: Any) -> Any:
            with engine_errors(method):
                return await handler(*args, **kwargs)

        return _like(run_async, handler)

    def run_sync(*args: Any, **kwargs: Any) -> Any:
        with engine_errors(method):
            return handler(*args, **kwargs)

    return _like(run_sync, handler)


def _like(wrapper: Callable[..., Any], handler: Callable[..., Any]) -> Callable[..., Any]:
    """`wrapper` with `handler`'s name and signature but no annotations: pygls reads a command's parameter
    types with `get_type_hints`, which cannot resolve the feature modules' TYPE_CHECKING-only imports."""
    functools.update_wrapper(wrapper, handler)
    wrapper.__annotations__ = {}
    wrapper.guarded = True  # type: ignore[attr-defined] - checked by tests/test_lsp_dispatch.py
    return wrapper


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
            text_document_sync_kind=types.TextDocumentSyncKind.Full,  # buffers for hover/definition/outline
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
        self.index_listeners: list[Callable[[Folder], None]] = []  # told of each finished index run of a folder
        # per folder: a name-diagnostics pass due later (lists older than the index, features/name_diagnostics.py)
        self.name_timers: dict[int, threading.Timer] = {}
        self.feedback = Feedback(self, self.post)
        self.tick_task: asyncio.Task[None] | None = None
        self.stopping = False
        self.start_requested = False  # start-up began (`initialized`, or the first request without it)
        self.exiting = threading.Event()  # the message loop ended (`exit` or stdin closed)
        self.exit_code = 0  # `exit` without `shutdown`: 1 (LSP)
        self.progress_tokens = itertools.count(1)
        self._closed = False
        self._close_lock = threading.Lock()
        self._background: set[asyncio.Task[Any]] = set()
        self._start_pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._light_pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._background_pool: concurrent.futures.ThreadPoolExecutor | None = None

    # -- transport -----------------------------------------------------------------------------------------
    def start_io(self, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> None:
        """Serve on stdio, reading stdin on the event loop itself.

        pygls reads every header line and body in its thread pool (three thread hops per message); watching
        the pipe with asyncio is faster. Falls back to reading in a thread when stdin cannot be watched (a regular file)
        or shares its open file with stdout (non-blocking reads would make its writes non-blocking too).
        """
        stdin, stdout = stdin or sys.stdin.buffer, stdout or sys.stdout.buffer
        watch = protocol.watchable(stdin, stdout)
        self._stop_event = threading.Event()
        self.protocol.set_writer(StdoutWriter(stdout))
        try:
            asyncio.run(protocol.serve_pipe(self, stdin) if watch else protocol.serve_blocking(self, stdin))
        except (BrokenPipeError, ConnectionResetError, asyncio.IncompleteReadError):
            log.info("the client closed the connection")
        except (KeyboardInterrupt, SystemExit):
            pass
        finally:
            self.abort_provider_calls()  # (pygls' shutdown waits for the requests in flight)
            self.shutdown()

    def shutdown(self) -> None:
        """The message loop ended (`exit` or stdin closed): requests waiting for start-up give up, and nothing
        waits here for the pool (pygls' shutdown joined it: a request waiting 120 s for start-up kept a
        process whose client was gone alive for two minutes)."""
        self.exiting.set()
        if self._stop_event is not None:
            self._stop_event.set()
        for pool in (self._thread_pool, self._start_pool, self._light_pool, self._background_pool):
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)
        # pygls' own TCP server (not used): closed as pygls does
        if getattr(self, "_server", None) is not None:
            self._server.close()

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
            self.abort_provider_calls()
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
        """Run blocking engine work in the worker pool; engine errors become JSON-RPC errors. Start-up's work
        (opening the folders) has a pool of its own: requests that arrived first wait for start-up on worker
        threads, and four of them took every worker it needed (nothing was answered for 120 s)."""
        pool = self.thread_pool if self.ready_threads.is_set() else self._start_up_pool()
        with engine_errors():
            return await asyncio.get_running_loop().run_in_executor(pool, partial(fn, *args))

    def _start_up_pool(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._start_pool is None:
            self._start_pool = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="saipling-start")
        return self._start_pool

    @contextlib.contextmanager
    def engine_call(self) -> Iterator[None]:
        """For handlers on worker threads: wait for start-up, then guard like `call`."""
        if not self.ready_threads.is_set():
            self.post(self.begin_start_up)
            deadline = time.monotonic() + READY_TIMEOUT
            while not self.ready_threads.wait(READY_POLL):
                if self.exiting.is_set():
                    raise request_failed("the server is exiting")
                if time.monotonic() > deadline:
                    raise request_failed("the server is still starting")
        with engine_errors():
            yield

    def begin_start_up(self) -> None:
        """Start up once (on the loop): on `initialized`, or on the first request of a client that never sends
        it (it is still answered). Before `initialize` there is nothing to start."""
        if self.start_requested or self.stopping or not self.protocol.initialize_received:
            return
        self.start_requested = True
        from .features.lifecycle import start_up

        self.spawn(start_up(self))

    async def wait_ready(self) -> None:
        if self.ready.is_set():
            return
        self.begin_start_up()
        try:
            await asyncio.wait_for(self.ready.wait(), READY_TIMEOUT)
        except TimeoutError:
            raise request_failed("the server is still starting") from None

    def report_server_error(self, error: Exception, source: Any) -> None:
        """pygls' default shows every failed notification to the user; log it. A failed request already
        carries its error in the response."""
        request = getattr(source, "__name__", "") == "FeatureRequestError"
        log.log(logging.DEBUG if request else logging.ERROR, "%s: %s", getattr(source, "__name__", source), error)

    # -- registration --------------------------------------------------------------------------------------
    def handle(
        self,
        method: str,
        handler: Callable[..., Any],
        options: Any = None,
        *,
        threaded: bool = False,
        light: bool = False,
    ) -> None:
        """Register a feature handler, guarded at the dispatch point (on a worker thread if `threaded`; on the
        pool of quick requests if `light`: `status` is answered while every worker runs a long search)."""
        wrapped = guarded(method, handler)
        if light:
            self.feature(method, options)(self._on_light_pool(wrapped))
            return
        self.feature(method, options)(self.thread()(wrapped) if threaded else wrapped)

    def _on_light_pool(self, handler: Callable[..., Any]) -> Callable[..., Any]:
        async def run_light(ls: Any, params: Any) -> Any:
            if self._light_pool is None:
                self._light_pool = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="saipling-light")
            return await asyncio.get_running_loop().run_in_executor(self._light_pool, partial(handler, ls, params))

        return _like(run_light, handler)

    def background(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run `fn(*args)` on one background thread of its own (work the server does unasked, like publishing
        diagnostics): it never takes a worker from the requests. Nothing when the server is closing."""
        if self._background_pool is None:
            self._background_pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="saipling-background")
        with contextlib.suppress(RuntimeError):  # the pool is shutting down
            self._background_pool.submit(fn, *args)

    def handle_command(self, name: str, handler: Callable[..., Any], *, threaded: bool = False) -> None:
        """Register a `workspace/executeCommand` command, guarded like `handle`."""
        wrapped = guarded(name, handler)
        self.command(name)(self.thread()(wrapped) if threaded else wrapped)

    # -- shutdown ------------------------------------------------------------------------------------------
    def abort_provider_calls(self) -> None:
        """Embedding calls in flight return at once and no new ones start: shutdown and exit never wait on a
        provider (a search in flight answers keyword-only; an index run stops embedding)."""
        for f in list(self.folders.values()):
            with contextlib.suppress(Exception):
                f.project.abort_calls()

    def close_all(self, grace: float = SHUTDOWN_GRACE) -> None:
        """Idempotent, from any thread: also runs when the client vanished without `shutdown`."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = self.stopping = True
        folders = list(self.folders.values())
        for f in folders:  # (provider calls aborted, runs cancelled, watchers stopped: the stores stay open)
            f.live.stop()
        deadline = time.monotonic() + grace
        for f in folders:
            f.live.wait(deadline)
        if not self._pools_drained(deadline):
            log.warning("requests still running at exit: the index is left open (SQLite recovers it)")
            return  # requests in flight finish before the stores close: never close one under them
        for f in folders:
            if not f.live.wait(deadline):  # (a run that ended meanwhile counts as stopped)
                log.warning("%s: an index run is still finishing; the next start resumes it", f.name)
                continue
            with contextlib.suppress(Exception):
                f.project.close()

    def _pools_drained(self, deadline: float) -> bool:
        """Stop the worker pools (queued requests cancelled) and wait until `deadline` for the running ones: the
        requests' pool, start-up's and the light one `saipling/status` runs on (it reads the stores too)."""
        threads = []
        for pool in (self._thread_pool, self._start_pool, self._light_pool, self._background_pool):
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)
                threads += list(getattr(pool, "_threads", ()))
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in threads)


def create_server(*, test_clock: bool | None = None) -> SaiplingServer:
    """A new server with every feature registered (test requests only with SAIPLING_TEST_CLOCK=1)."""
    if test_clock is None:
        test_clock = os.environ.get(TEST_CLOCK_ENV) == "1"
    server = SaiplingServer(test_clock=test_clock)
    features.register_all(server, test_clock=test_clock)
    return server


def configure_logging(server: SaiplingServer) -> None:
    """Logs go to stderr (stdout is the protocol); engine records also reach the client's log."""
    from ..config.settings import LOG_LEVEL_ENV, log_level

    # (any case; an unknown value is told once and INFO is kept: `verbose` ended the server with a traceback)
    chosen, problem = log_level(os.environ.get(LOG_LEVEL_ENV), "INFO")
    level = chosen or "INFO"
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if problem:
        logging.getLogger(__name__).warning("%s", problem)
    logging.getLogger("saipling").setLevel(level)
    for noisy in ("pygls", "watchdog", "httpx", "httpcore"):  # pygls logs every message at INFO
        logging.getLogger(noisy).setLevel(logging.DEBUG if level == "DEBUG" else logging.WARNING)
    logging.getLogger("pygls.protocol.json_rpc").addFilter(_client_mistakes_without_tracebacks)
    handler = ClientLogHandler(server.feedback)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logging.getLogger("saipling").addHandler(handler)
    # API keys never reach a log at any level (pygls logs whole `initialize` params at debug level)
    redact.remember(os.environ.get("OPENAI_API_KEY"), os.environ.get("VOYAGE_API_KEY"))
    redact.install(*logging.getLogger().handlers, handler)


def _client_mistakes_without_tracebacks(record: logging.LogRecord) -> bool:
    """pygls logs a client's mistake (params of the wrong type, in a request or a notification) at ERROR with
    one or two pages of traceback; the request's error response says it already. A notification's becomes one
    warning line; a request's is left to report_server_error (debug)."""
    if str(record.msg).startswith("Unable to deserialize message"):
        record.msg = (
            "params of the wrong type from the client (a request gets InvalidParams, a notification is ignored)"
        )
        record.args = ()
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True
    exc = record.exc_info[1] if record.exc_info else None
    from pygls.exceptions import JsonRpcException, JsonRpcInternalError

    return not isinstance(exc, JsonRpcException) or isinstance(exc, JsonRpcInternalError)


def run(tcp: str | None = None) -> None:
    """`saipling serve`: stdio (what editors start), or `--tcp HOST:PORT` for debugging."""
    server = create_server()
    configure_logging(server)
    exited = False
    try:
        if tcp:
            host, _, port = tcp.rpartition(":")
            server.start_tcp(host or "127.0.0.1", int(port))
        else:
            protocol_out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
            os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # a stray print must not corrupt the protocol
            sys.stdout = sys.stderr
            server.start_io(sys.stdin.buffer, protocol_out)
        exited = True
    finally:
        server.close_all(grace=SHUTDOWN_GRACE if not exited else EXIT_GRACE)
    # The process ends now (LSP: `exit` ends it, 1 without `shutdown`; a client that closed stdin is gone), not
    # when the last request thread does: the interpreter would join every pool thread first. An index run
    # still writing is left to SQLite's recovery (each file old or new), as after kill -9.
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(server.exit_code)

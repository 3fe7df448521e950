"""The protocol edge: framing, JSON-RPC 2.0 / LSP conformance, params validated at the message boundary, engine
errors mapped to JSON-RPC errors, plain-JSON responses, and stdin read on the event loop.

The message loop (`serve_frames`) replaces pygls' reader, which went silent for good after one bad frame (a
`Content-Length` short by a few bytes, non-numeric or missing). Here a broken frame is answered with a parse
error (-32700) and the reader resynchronises on the next `Content-Length` header, found even in the middle of a
line (the tail of a short frame) or inside a body (a frame counted too long). What the spec asks of the
envelope and the life cycle is answered, never dropped: an invalid JSON body (-32700), a missing or wrong
`jsonrpc`, an `id` that is not a string or an integer, a batch (-32600 Invalid Request), a request before
`initialize` (-32002 ServerNotInitialized), after `shutdown` (-32600). Error responses never carry a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import stat
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, BinaryIO
from urllib.parse import unquote

import cattrs
from lsprotocol import types
from lsprotocol.types import ResponseError
from pygls.exceptions import JsonRpcException, JsonRpcInternalError, JsonRpcInvalidParams
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.json_rpc import JsonRPCNotification, JsonRPCRequestMessage, JsonRPCResponseMessage
from pygls.protocol.language_server import lsp_method

from ..errors import InvalidRequest, SaiplingError
from ..jsonrpc_salvage import is_request_id, salvage_id
from . import params

log = logging.getLogger(__name__)

REQUEST_FAILED = -32803  # LSP RequestFailed: the engine refused or failed a valid request
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
SERVER_NOT_INITIALIZED = -32002
INTERNAL_ERROR = -32603
MAX_BODY = 64 << 20  # bytes: a Content-Length over this is a broken frame, not a wait for 64 MB+
SALVAGE_BYTES = 1 << 16  # of a body over MAX_BODY, read for its id
BODY_IDLE_SECONDS = 5.0  # a body that stops arriving for this long is taken as it is (a length counted too long)
_CONTENT_LENGTH = b"content-length:"
_HEADER = re.compile(rb"^[A-Za-z][A-Za-z0-9-]*:")
_REJECTED = JsonRPCNotification(method="", jsonrpc="rejected", params=None)


@contextlib.contextmanager
def engine_errors(what: str = "request") -> Iterator[None]:
    """The dispatch guard: InvalidRequest -> InvalidParams naming the field, other engine errors ->
    RequestFailed with their message, anything unexpected -> InternalError (logged with `what` failed,
    e.g. the method); never a crash."""
    try:
        yield
    except InvalidRequest as exc:
        raise JsonRpcInvalidParams(f"Invalid params: {exc}", data={"field": exc.field}) from exc
    except SaiplingError as exc:
        raise JsonRpcException(str(exc), code=REQUEST_FAILED) from exc
    except JsonRpcException:
        raise
    except Exception as exc:
        log.exception("%s failed", what)
        raise JsonRpcInternalError(f"{type(exc).__name__}: {exc}") from exc


def request_failed(message: str) -> JsonRpcException:
    return JsonRpcException(message, code=REQUEST_FAILED)


class SaiplingProtocol(LanguageServerProtocol):
    """Validates params at the message boundary and answers bad ones with InvalidParams.

    pygls would otherwise drop a request whose params fail to structure (and the client would hang), and
    lsprotocol quietly coerces some wrong types (`query: 5` -> "5"). Custom requests reach their handlers
    as validated plain dicts instead of namedtuples, and their results are sent as they are (plain JSON)
    instead of going through cattrs.
    """

    def structure_message(self, data: dict[str, Any]) -> Any:
        if "jsonrpc" not in data or "method" not in data or "id" not in data:
            return super().structure_message(data)
        method = data["method"]
        try:
            if method in params.SCHEMAS and method in self.fm.features:
                checked = params.validate(method, data.get("params"))
                if method.startswith("saipling/"):
                    return JsonRPCRequestMessage(id=data["id"], method=method, jsonrpc=data["jsonrpc"], params=checked)
            return super().structure_message(data)
        except JsonRpcException as exc:
            if isinstance(exc, JsonRpcInvalidParams) and isinstance(exc.__cause__, cattrs.ClassValidationError):
                exc = JsonRpcInvalidParams("Invalid params: " + "; ".join(cattrs.transform_error(exc.__cause__)))
            self._send_response(data["id"], error=exc.to_response_error())
            return _REJECTED

    def handle_message(self, message: Any) -> None:
        if message is not _REJECTED:
            super().handle_message(message)

    # -- document sync -----------------------------------------------------------------------------------
    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams) -> Any:
        """The buffer copy hover, definition, the outline and name diagnostics read. pygls applies a change with a
        range (a client that ignores the Full sync the server announced) as the whole new text: the buffer became
        the typed fragment, and quick fixes were computed on it. Such a change is applied in place when its range
        lies in the text; one that does not (past the end, end before start) leaves the buffer untrustworthy: it
        is dropped, and the features read the file on disk until the next didOpen."""
        uri = params.text_document.uri
        for change in params.content_changes:
            doc = self.workspace.text_documents.get(unquote(uri))
            if doc is None:  # (never opened, or dropped below)
                log.debug("didChange for %s, which is not open: ignored", uri)
                return
            rng = getattr(change, "range", None)
            if rng is None:
                doc._source = change.text
            elif _fits(rng, len(doc.lines)):
                doc._apply_incremental_change(change)
            else:
                log.warning("didChange of %s with a range outside the text: its buffer is dropped", uri)
                self.workspace.remove_text_document(uri)
                return
            doc.version = params.text_document.version
        if (handler := self.fm.features.get(types.TEXT_DOCUMENT_DID_CHANGE)) is not None:
            yield handler, (params,), None

    # -- progress ----------------------------------------------------------------------------------------
    @lsp_method(types.WINDOW_WORK_DONE_PROGRESS_CANCEL)
    def lsp_work_done_progress_cancel(self, params: types.WorkDoneProgressCancelParams) -> Any:
        """A token that is not a string or an integer (an object, a list) is none of the server's: ignored with
        one line. pygls looked it up in its table of tokens and logged an ERROR (unhashable type: 'dict')."""
        if not isinstance(params.token, (str, int)):
            log.warning("window/workDoneProgress/cancel with a token that is not a string or an integer: ignored")
            return
        yield from super().lsp_work_done_progress_cancel(params)

    # -- conformance -------------------------------------------------------------------------------------
    initialize_received = False

    def send_error(self, msg_id: Any, code: int, message: str) -> None:
        """An error response (id null when the request's id cannot be known), built as plain JSON: JSON-RPC
        wants `"id": null` there, which lsprotocol's converter would drop."""
        self._send_data({"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}})

    def parse_error(self, reason: str, msg_id: Any = None) -> None:
        log.warning("broken message from the client: %s", reason)
        self.send_error(msg_id, PARSE_ERROR, f"Parse error: {reason}")

    def receive(self, data: Any) -> None:
        """One decoded message: checked against JSON-RPC 2.0 and the LSP life cycle, then dispatched."""
        problem = envelope_problem(data)
        if problem is not None:
            message, reply_id = problem
            log.warning("invalid message from the client: %s", message)
            if not (isinstance(data, dict) and "method" not in data and ("result" in data or "error" in data)):
                self.send_error(reply_id, INVALID_REQUEST, f"Invalid Request: {message}")
            return
        method, is_request = data.get("method"), "method" in data and "id" in data
        if method is not None and method != "exit":
            if not self.initialize_received:
                if method == "initialize" and is_request:
                    self.initialize_received = True
                elif is_request:
                    self.send_error(data["id"], SERVER_NOT_INITIALIZED, f"{method}: the server is not initialized yet")
                    return
                else:
                    log.debug("dropped notification %s: the server is not initialized yet", method)
                    return
            elif method == "initialize" and is_request:
                self.send_error(data["id"], INVALID_REQUEST, "Invalid Request: initialize was already received")
                return
            if self._shutdown:
                if is_request:
                    self.send_error(data["id"], INVALID_REQUEST, f"Invalid Request: {method}: the server is shut down")
                else:
                    log.debug("dropped notification %s after shutdown", method)
                return
        cancel = data.get("params") if method == "$/cancelRequest" else None
        if method == "$/cancelRequest" and not (isinstance(cancel, dict) and is_request_id(cancel.get("id"))):
            log.warning("invalid message from the client: $/cancelRequest without a string or integer id")
            return
        try:
            self.handle_message(self.structure_message(data))
        except JsonRpcException as exc:
            if is_request:
                self.send_error(data["id"], exc.code, exc.message)
        except Exception as exc:  # noqa: BLE001 - one odd message must never stop the loop
            log.exception("cannot handle %s", method or "a message")
            if is_request:
                self.send_error(data["id"], INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")

    def _send_response(self, msg_id: Any, result: Any = None, error: ResponseError | None = None) -> None:
        if error is not None and error.code == INTERNAL_ERROR and error.data is not None:
            error = ResponseError(code=error.code, message=error.message.splitlines()[0] if error.message else "")
        super()._send_response(msg_id, result, error)  # no traceback (pygls puts one in `data`) on the wire

    def _serialize_message(self, data: Any) -> Any:
        if type(data) is JsonRPCResponseMessage:  # a custom request's result is plain JSON already
            return {"id": data.id, "jsonrpc": data.jsonrpc, "result": data.result}
        return super()._serialize_message(data)


def _fits(rng: Any, lines: int) -> bool:
    """A change's range lies in a text of `lines` lines (the line after the last one included: an edit at the very
    end) and does not end before it starts."""
    start, end = rng.start, rng.end
    if not (0 <= start.line <= end.line <= lines and start.character >= 0 and end.character >= 0):
        return False
    return start.line < end.line or start.character <= end.character


def watchable(stdin: BinaryIO, stdout: BinaryIO) -> bool:
    """True when asyncio can watch stdin (a pipe, socket or tty) without affecting stdout: a non-blocking
    stdin that shares its open file with stdout would make stdout's writes non-blocking too."""
    try:
        st_in, st_out = os.fstat(stdin.fileno()), os.fstat(stdout.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    if not (stat.S_ISFIFO(st_in.st_mode) or stat.S_ISSOCK(st_in.st_mode) or stat.S_ISCHR(st_in.st_mode)):
        return False
    return (st_in.st_dev, st_in.st_ino) != (st_out.st_dev, st_out.st_ino)


def envelope_problem(data: Any) -> tuple[str, Any] | None:
    """(what is wrong, the id to answer with) for a message JSON-RPC 2.0 calls an Invalid Request, else None."""
    if not isinstance(data, dict):
        kind = "a batch (an array): batches are not part of LSP" if isinstance(data, list) else type(data).__name__
        return f"a message must be a JSON object, got {kind}", None
    msg_id = data.get("id")
    id_ok = isinstance(msg_id, str | int) and not isinstance(msg_id, bool)
    reply_id = msg_id if id_ok else None
    if data.get("jsonrpc") != "2.0":
        return f'"jsonrpc" must be "2.0", got {data.get("jsonrpc")!r:.40}', reply_id
    if "method" in data:
        if not isinstance(data["method"], str):
            return '"method" must be a string', reply_id
        if "id" in data and not id_ok:
            return f'"id" must be a string or an integer, got {type(msg_id).__name__}', None
        if data.get("params") is not None and not isinstance(data["params"], dict | list):
            return '"params" must be an object or an array', reply_id
        return None
    if not id_ok or not ("result" in data or "error" in data):
        return "neither a request, a notification nor a response", reply_id
    return None


_DECODER = json.JSONDecoder()


def decode_body(body: bytes) -> tuple[Any, bytes] | None:
    """(the JSON value a body starts with, the bytes after it), or None when it holds no valid JSON value.

    Bytes after the value are what a client that counted its Content-Length too long made part of the
    frame: the start of the next frame, given back to the reader."""
    text = body.decode("utf-8", "surrogateescape")
    try:
        data, end = _DECODER.raw_decode(text, len(text) - len(text.lstrip()))
    except (ValueError, RecursionError):  # (arrays nested thousands deep: the whole server died)
        return None
    head = text[:end].encode("utf-8", "surrogateescape")
    try:
        head.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return data, body[len(head) :]


class FrameReader:
    """Bytes from the client with a buffer that can be pushed back into (for resynchronising)."""

    def __init__(self, read: Callable[[int], Awaitable[bytes]], idle: float | None) -> None:
        self._read = read
        self._idle = idle  # None: reads cannot be timed out (a thread reads, cancelling would lose data)
        self.buf = bytearray()
        self.eof = False

    async def _more(self, idle: bool = False) -> bool:
        if self.eof:
            return False
        if idle and self._idle:
            data = await asyncio.wait_for(self._read(1 << 16), self._idle)
        else:
            data = await self._read(1 << 16)
        if not data:
            self.eof = True
            return False
        self.buf += data
        return True

    async def readline(self) -> bytes | None:
        """One line (with its newline), the rest at EOF, or None when nothing is left."""
        while True:
            end = self.buf.find(b"\n")
            if end >= 0 or len(self.buf) > MAX_BODY:
                end = end if end >= 0 else len(self.buf) - 1
                line = bytes(self.buf[: end + 1])
                del self.buf[: end + 1]
                return line
            if not await self._more():
                line = bytes(self.buf) or None
                self.buf.clear()
                return line

    async def read(self, n: int) -> bytes:
        """n bytes, or fewer at EOF or when nothing arrives for BODY_IDLE_SECONDS."""
        while len(self.buf) < n:
            try:
                if not await self._more(idle=True):
                    break
            except TimeoutError:
                log.warning("a message body stopped %d bytes short of its Content-Length", n - len(self.buf))
                break
        data = bytes(self.buf[:n])
        del self.buf[:n]
        return data

    def unread(self, data: bytes) -> None:
        self.buf[:0] = data


async def next_body(frames: FrameReader, proto: SaiplingProtocol) -> bytes | None:
    """The body of the next frame, or None at EOF. Broken headers are answered with a parse error and
    skipped up to the next `Content-Length` header."""
    reported = False  # one parse error per run of bytes outside a frame
    while True:
        length: int | None = None
        problem: str | None = None
        started = False
        while True:
            line = await frames.readline()
            if line is None:
                return None
            if not started:
                at = line.lower().find(_CONTENT_LENGTH)
                if at > 0:  # the tail of a frame counted short, or junk, then a header
                    log.debug("skipped %d bytes before a header", at)
                    line = line[at:]
                elif at < 0 and not _HEADER.match(line):
                    if line.strip() and not reported:
                        reported = True
                        proto.parse_error("bytes outside a message frame (expected a Content-Length header)")
                    continue
                started = True
            text = line.strip()
            if not text:
                break
            name, sep, value = text.partition(b":")
            if not sep:
                problem = f"malformed header line {text[:40]!r}"
            elif name.strip().lower() == b"content-length":
                value = value.strip()
                if value.isdigit() and len(value) <= 12:
                    length = int(value)
                else:
                    problem = f"Content-Length is not a number ({value[:40]!r})"
        if problem is None and length is None:
            problem = "missing Content-Length header"
        if problem is None and length is not None and length > MAX_BODY:
            problem = f"Content-Length {length} is over the {MAX_BODY}-byte limit"
        if problem is not None:
            reported = True  # its body follows as bytes outside a frame: already answered
            msg_id = None
            if length is not None and length > MAX_BODY:
                # the id is near the start of the body: the bytes already here are read for it (a client waited
                # for ever), with one read when none are; they stay, skipped as what follows (up to the next
                # header). Never a wait for more: a short body stalled every later request.
                if not frames.buf:
                    with contextlib.suppress(TimeoutError):
                        await frames._more(idle=True)
                msg_id = salvage_id(bytes(frames.buf[:SALVAGE_BYTES]))
            proto.parse_error(problem, msg_id)
            continue
        assert length is not None
        return await frames.read(length)


async def serve_frames(server: Any, read: Callable[[int], Awaitable[bytes]], idle: float | None) -> None:
    """The message loop: frames in, each message checked and dispatched, until EOF or `exit`."""
    proto: SaiplingProtocol = server.protocol
    frames = FrameReader(read, idle)
    while not server._stop_event.is_set():
        body = await next_body(frames, proto)
        if body is None:
            log.info("the client closed its end of the connection")
            return
        decoded = decode_body(body)
        if decoded is None:
            proto.parse_error("the body is not valid JSON", salvage_id(body))
            continue
        data, rest = decoded
        if rest.strip():  # counted too long: the next frame (or part of its header) is inside this one
            log.warning("a message was followed by %d bytes inside its frame: read again as what follows", len(rest))
            frames.unread(rest)
        proto.receive(data)


async def serve_pipe(server: Any, stdin: BinaryIO) -> None:
    """The message loop, reading stdin on the event loop (pygls reads each header line and body in its
    thread pool: three thread hops per message)."""
    reader = asyncio.StreamReader(limit=1 << 20)
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin)
    await serve_stream(server, reader)


async def serve_stream(server: Any, reader: asyncio.StreamReader) -> None:
    """The message loop over a stream (a pipe or a socket)."""
    await serve_frames(server, reader.read, BODY_IDLE_SECONDS)


async def serve_blocking(server: Any, stdin: BinaryIO) -> None:
    """The message loop over a file asyncio cannot watch (a regular file): reads in a thread."""
    loop = asyncio.get_running_loop()
    read = getattr(stdin, "read1", stdin.read)
    await serve_frames(server, lambda n: loop.run_in_executor(None, read, n), None)

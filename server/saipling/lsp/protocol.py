"""The protocol edge: params validated at the message boundary, engine errors mapped to JSON-RPC errors,
plain-JSON responses, and stdin read on the event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
from collections.abc import Iterator
from typing import Any, BinaryIO

import cattrs
from pygls.exceptions import JsonRpcException, JsonRpcInternalError, JsonRpcInvalidParams
from pygls.io_ import run_async
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.json_rpc import JsonRPCNotification, JsonRPCRequestMessage, JsonRPCResponseMessage

from ..errors import InvalidRequest, SaiplingError
from . import params

log = logging.getLogger(__name__)

REQUEST_FAILED = -32803  # LSP RequestFailed: the engine refused or failed a valid request
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
                    return JsonRPCRequestMessage(
                        id=data["id"], method=method, jsonrpc=data["jsonrpc"], params=checked
                    )
            return super().structure_message(data)
        except JsonRpcException as exc:
            if isinstance(exc, JsonRpcInvalidParams) and isinstance(
                exc.__cause__, cattrs.ClassValidationError
            ):
                exc = JsonRpcInvalidParams(
                    "Invalid params: " + "; ".join(cattrs.transform_error(exc.__cause__))
                )
            self._send_response(data["id"], error=exc.to_response_error())
            return _REJECTED

    def handle_message(self, message: Any) -> None:
        if message is not _REJECTED:
            super().handle_message(message)

    def _serialize_message(self, data: Any) -> Any:
        if type(data) is JsonRPCResponseMessage:  # a custom request's result is plain JSON already
            return {"id": data.id, "jsonrpc": data.jsonrpc, "result": data.result}
        return super()._serialize_message(data)


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


async def serve_pipe(server: Any, stdin: BinaryIO) -> None:
    """pygls' message loop, reading stdin on the event loop (pygls reads each header line and body in its
    thread pool: three thread hops per message)."""
    reader = asyncio.StreamReader(limit=1 << 20)
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin)
    await serve_stream(server, reader)


async def serve_stream(server: Any, reader: asyncio.StreamReader) -> None:
    """pygls' message loop over a stream (a pipe or a socket)."""
    await run_async(server._stop_event, reader, server.protocol, log, server.report_server_error)

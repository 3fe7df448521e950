"""The network side of the provider client: a wall-clock deadline per request, a cap on a reply's size, and
abandoning every request in flight at shutdown.

httpx's timeouts are per socket operation: a server that sends its headers and then a byte a second never
trips a read timeout, and a reply streamed without end is read into memory until the process dies. Here every
socket read, write and connect of a request is bounded by what is left of that request's deadline (set per
thread by `request_deadline()`), so no trickle can extend it; the reply is read in pieces and given up as soon as it
passes its cap (`read_capped`); and `GuardedBackend.abort()` shuts every open socket, so a thread blocked in a
provider call returns at once (the language server's `shutdown`/`exit`, the MCP server's end of input).

httpx takes no network backend of its own; its transports' httpcore pools do (`network_backend`): the pools of
a client are given one here (`guard_client`), including those of proxies from the environment.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import ssl
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

import httpcore
import httpx

log = logging.getLogger(__name__)

_request = threading.local()  # .deadline: the time.monotonic() by which this thread's request must be over


@contextlib.contextmanager
def request_deadline(at: float | None) -> Iterator[None]:
    """Socket operations on this thread inside the block end by `at` (time.monotonic(); None: no deadline)."""
    previous = getattr(_request, "deadline", None)
    _request.deadline = at
    try:
        yield
    finally:
        _request.deadline = previous


def _left(timeout: float | None, expired: type[Exception]) -> float | None:
    """`timeout` shortened to what is left of this thread's deadline; `expired` raised once it has passed."""
    at = getattr(_request, "deadline", None)
    if at is None:
        return timeout
    left = at - time.monotonic()
    if left <= 0:
        raise expired("the request's deadline passed")
    return left if timeout is None else min(timeout, left)


class Aborted(Exception):
    """Raised in a request abandoned by `GuardedBackend.abort()`."""


class _GuardedStream(httpcore.NetworkStream):
    """A socket stream whose every read and write ends by the calling thread's deadline."""

    def __init__(self, inner: httpcore.NetworkStream, backend: GuardedBackend) -> None:
        self._inner = inner
        self._backend = backend

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        self._backend.check()
        return self._inner.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._backend.check()
        self._inner.write(buffer, _left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._backend.forget(self)
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> Any:
        inner = self._inner.start_tls(ssl_context, server_hostname, _left(timeout, httpcore.ConnectTimeout))
        self._backend.forget(self)
        return self._backend.track(inner)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)

    def shut(self) -> None:
        """Shut the socket down (from another thread): a read blocked on it returns at once."""
        sock = self._inner.get_extra_info("socket")
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):
                # (socket.socket's own: an SSLSocket's shutdown also drops its TLS state under the reader)
                socket.socket.shutdown(sock, socket.SHUT_RDWR)


class GuardedBackend(httpcore.NetworkBackend):
    """httpcore's synchronous backend with deadlines on every operation, and `abort()` for shutdown."""

    def __init__(self, abort: threading.Event | None = None) -> None:
        """`abort`: the event that abandons the calls (its owner's, set before this backend existed: aborted from
        the start), else one of its own."""
        self._inner = httpcore.SyncBackend()
        self._streams: set[_GuardedStream] = set()
        self._lock = threading.Lock()
        self._abort = threading.Event() if abort is None else abort

    @property
    def aborted(self) -> bool:
        return self._abort.is_set()

    def pause(self, seconds: float) -> None:
        """Sleep between retries; over at once when the calls are abandoned."""
        self._abort.wait(seconds)

    def check(self) -> None:
        if self.aborted:
            raise httpcore.ReadError("abandoned: the process is shutting down")

    def track(self, inner: httpcore.NetworkStream) -> _GuardedStream:
        stream = _GuardedStream(inner, self)
        with self._lock:
            self._streams.add(stream)
            aborted = self.aborted
        if aborted:  # (aborted while this one was connecting)
            stream.shut()
        return stream

    def forget(self, stream: _GuardedStream) -> None:
        with self._lock:
            self._streams.discard(stream)

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        if self.aborted:
            raise httpcore.ConnectError("abandoned: the process is shutting down")
        inner = self._inner.connect_tcp(
            host, port, _left(timeout, httpcore.ConnectTimeout), local_address, socket_options
        )
        return self.track(inner)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        if self.aborted:
            raise httpcore.ConnectError("abandoned: the process is shutting down")
        inner = self._inner.connect_unix_socket(path, _left(timeout, httpcore.ConnectTimeout), socket_options)
        return self.track(inner)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)

    def abort(self) -> None:
        """Abandon every request in flight and refuse new ones (idempotent, from any thread)."""
        with self._lock:
            self._abort.set()
            streams = list(self._streams)
        for stream in streams:
            stream.shut()


def guard_client(client: httpx.Client, backend: GuardedBackend) -> None:
    """Give every connection pool of `client` (its transport, and proxies mounted from the environment) the
    guarded backend. Raises RuntimeError if httpx's transports no longer hold an httpcore pool: a client
    without deadlines must never be used (a trickling server would hang the process)."""
    transports = [client._transport, *(t for t in client._mounts.values() if t is not None)]
    for transport in transports:
        pool = getattr(transport, "_pool", None)
        if pool is None or not hasattr(pool, "_network_backend"):
            raise RuntimeError(f"cannot set deadlines on {type(transport).__name__} (httpx {httpx.__version__})")
        pool._network_backend = backend


class DeferredTrust(ssl.SSLContext):
    """httpx's default TLS context (`httpx.create_ssl_context()`: hostnames checked, certificates required, the CAs
    of SSL_CERT_FILE, else SSL_CERT_DIR, else certifi's bundle; SSLKEYLOGFILE honoured as the ssl module does) with
    the CAs read before the first TLS connection instead of when the client is made: reading certifi's bundle was
    ~25 ms of CPU of every process that embeds a query, though a local `http://` server never uses it (row S29).
    Every connection is wrapped by `wrap_socket` or `wrap_bio` (httpcore's sync backend, TLS through a proxy):
    both load the CAs first, so nothing is ever verified against an empty store."""

    _loaded: bool
    _loading: threading.Lock

    def __new__(cls) -> DeferredTrust:
        ctx = super().__new__(cls, ssl.PROTOCOL_TLS_CLIENT)  # (check_hostname on, CERT_REQUIRED)
        ctx._loaded, ctx._loading = False, threading.Lock()
        if sys.version_info >= (3, 13):  # (what ssl.create_default_context, httpx's, sets since 3.13)
            ctx.verify_flags |= ssl.VERIFY_X509_STRICT | ssl.VERIFY_X509_PARTIAL_CHAIN
        keylog = os.environ.get("SSLKEYLOGFILE")
        if keylog and not sys.flags.ignore_environment:
            ctx.keylog_filename = keylog
        return ctx

    def __init__(self) -> None:  # (the protocol is chosen in __new__)
        pass

    def load_trust(self) -> None:
        """Read the CAs once (idempotent, thread-safe)."""
        if self._loaded:
            return
        with self._loading:
            if self._loaded:
                return
            if cafile := os.environ.get("SSL_CERT_FILE"):
                self.load_verify_locations(cafile=cafile)
            elif capath := os.environ.get("SSL_CERT_DIR"):
                self.load_verify_locations(capath=capath)
            else:
                import certifi

                self.load_verify_locations(cafile=certifi.where())
            self._loaded = True

    def wrap_socket(self, *args: Any, **kwargs: Any) -> ssl.SSLSocket:
        self.load_trust()
        return super().wrap_socket(*args, **kwargs)

    def wrap_bio(self, *args: Any, **kwargs: Any) -> ssl.SSLObject:
        self.load_trust()
        return super().wrap_bio(*args, **kwargs)


class TooLarge(Exception):
    """A reply passed its size cap (`read_capped`)."""

    def __init__(self, cap: int, declared: int | None = None) -> None:
        super().__init__(cap, declared)
        self.cap = cap
        self.declared = declared


def read_capped(response: httpx.Response, cap: int) -> httpx.Response:
    """The body of a streamed `response`, read in pieces and given up past `cap` bytes (decoded: a compressed
    reply counts at its real size), as an ordinary read response. Raises TooLarge."""
    declared = response.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > cap:
        raise TooLarge(cap, int(declared))
    body = bytearray()
    for piece in response.iter_bytes():
        body += piece
        if len(body) > cap:
            raise TooLarge(cap)
    return read_response(response, bytes(body))


def read_head(response: httpx.Response, limit: int) -> httpx.Response:
    """At most the first `limit` bytes of a streamed `response` (an error reply: enough to quote it)."""
    head = bytearray()
    for piece in response.iter_bytes():
        head += piece
        if len(head) >= limit:
            break
    return read_response(response, bytes(head[:limit]))


def read_response(response: httpx.Response, body: bytes) -> httpx.Response:
    """An ordinary (read) response with the status and headers of `response` and the decoded `body`."""
    headers = [
        (k, v)
        for k, v in response.headers.multi_items()
        if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")
    ]
    return httpx.Response(response.status_code, headers=headers, content=body, request=response.request)

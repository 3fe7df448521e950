"""A raw byte-level client for the real `saipling serve` (protocol tests: broken frames, invalid envelopes).

pytest-lsp's client only sends well-formed messages; this one writes whatever bytes a test gives it to the
server's stdin and parses the server's (well-formed) output into messages on a reader thread:

    with RawServer(root) as srv:
        srv.initialize()
        srv.send_raw(b"Content-Length: abc\\r\\n\\r\\n{}")
        srv.request("saipling/status", {}, msg_id=2)
        reply = srv.response(2)
"""

from __future__ import annotations

import json
import queue
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from lsp_client import SERVER_COMMAND, server_env


def frame(body: bytes | str, length: int | str | None = None) -> bytes:
    """One message frame; `length` overrides the Content-Length value (a wrong count, or not a number)."""
    data = body.encode("utf-8") if isinstance(body, str) else body
    value = len(data) if length is None else length
    return f"Content-Length: {value}\r\n\r\n".encode("ascii") + data


def message(method: str, params: Any = None, msg_id: Any = None, **extra: Any) -> str:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method, **extra}
    if msg_id is not None:
        msg["id"] = msg_id
    if params is not None:
        msg["params"] = params
    return json.dumps(msg, ensure_ascii=False)


class RawServer:
    def __init__(self, root: Path, env: dict[str, str] | None = None, command: list[str] | None = None) -> None:
        self.root = root
        self._stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            command or SERVER_COMMAND,  # another install's server (tests/test_wheel.py), else this checkout's
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=server_env(**(env or {})),
        )
        self.messages: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        self.raw = bytearray()  # everything the server wrote
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def __enter__(self) -> RawServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- output ------------------------------------------------------------------------------------------
    def _read(self) -> None:
        out = self.proc.stdout
        assert out is not None
        while True:
            header = b""
            while not header.endswith(b"\r\n\r\n"):
                ch = out.read(1)
                if not ch:
                    return
                header += ch
            self.raw += header
            length = int(header.split(b"Content-Length:")[1].split(b"\r\n")[0])
            body = out.read(length)
            self.raw += body
            self.messages.put(json.loads(body))

    def _pump(self, timeout: float) -> bool:
        try:
            self.seen.append(self.messages.get(timeout=timeout))
            return True
        except queue.Empty:
            return False

    def wait_for(self, predicate: Any, timeout: float = 20.0) -> dict[str, Any] | None:
        """The first message matching `predicate` (already seen or arriving within `timeout`), else None."""
        deadline = time.monotonic() + timeout
        while True:
            for msg in self.seen:
                if predicate(msg):
                    return msg
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if not self._pump(min(left, 0.2)) and self.proc.poll() is not None and self.messages.empty():
                return None

    def response(self, msg_id: Any, timeout: float = 20.0) -> dict[str, Any] | None:
        return self.wait_for(lambda m: m.get("id") == msg_id and ("result" in m or "error" in m), timeout)

    def errors_without_id(self) -> list[dict[str, Any]]:
        while self._pump(0.05):
            pass
        return [m for m in self.seen if "error" in m and m.get("id") is None]

    def notifications(self, method: str) -> list[dict[str, Any]]:
        while self._pump(0.05):
            pass
        return [m for m in self.seen if m.get("method") == method]

    def stderr(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode("utf-8", "replace")

    # -- input -------------------------------------------------------------------------------------------
    def send_raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, body: str) -> None:
        self.send_raw(frame(body))

    def request(self, method: str, params: Any = None, msg_id: Any = 1) -> None:
        self.send(message(method, params, msg_id))

    def notify(self, method: str, params: Any = None) -> None:
        self.send(message(method, params))

    def initialize(self, options: dict[str, Any] | None = None, msg_id: Any = "init") -> dict[str, Any]:
        self.request(
            "initialize",
            {
                "processId": None,
                "rootUri": self.root.as_uri(),
                "capabilities": {},
                "workspaceFolders": [{"uri": self.root.as_uri(), "name": self.root.name}],
                "initializationOptions": options or {"provider": "none"},
            },
            msg_id,
        )
        reply = self.response(msg_id)
        assert reply is not None and "result" in reply, (reply, self.stderr())
        self.notify("initialized", {})
        return reply

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()
        self._stderr.close()

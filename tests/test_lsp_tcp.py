"""`saipling serve --tcp HOST:PORT` (debugging mode): the same server over a socket, ending cleanly on `exit`."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from fixtures import make_project


class SocketClient:
    """Content-Length framed JSON-RPC over a socket; answers the server's own requests with null."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.ids = itertools.count(1)
        self.notifications: list[dict[str, Any]] = []

    def send(self, message: dict[str, Any]) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        self.writer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    async def receive(self) -> dict[str, Any]:
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        assert line, "the server closed the connection"
        return json.loads(await self.reader.readexactly(length))

    async def request(self, method: str, params: Any) -> dict[str, Any]:
        rid = next(self.ids)
        self.send({"id": rid, "method": method, "params": params})
        while True:
            message = await asyncio.wait_for(self.receive(), 30)
            if "method" not in message and message.get("id") == rid:
                return message
            if "method" in message and "id" in message:
                self.send({"id": message["id"], "result": None})
            elif "method" in message:
                self.notifications.append(message)

    async def wait_for_index(self) -> None:
        while not any(
            n["method"] == "$/progress" and n["params"]["value"].get("kind") == "end" for n in self.notifications
        ):
            message = await asyncio.wait_for(self.receive(), 30)
            if "method" in message and "id" in message:
                self.send({"id": message["id"], "result": None})
            elif "method" in message:
                self.notifications.append(message)


def start_server(stderr_lines: list[str]) -> tuple[subprocess.Popen[str], str, int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAIPLING_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "saipling", "serve", "--tcp", "127.0.0.1:0"],
        env={**env, "SAIPLING_PROVIDER": "none"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    found = threading.Event()
    address: list[tuple[str, int]] = []

    def drain() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            stderr_lines.append(line)
            m = re.search(r"listening on ([\d.]+):(\d+)", line)
            if m and not found.is_set():
                address.append((m.group(1), int(m.group(2))))
                found.set()

    threading.Thread(target=drain, daemon=True).start()
    assert found.wait(30), "the server never said where it listens:\n" + "".join(stderr_lines)
    return proc, *address[0]


async def test_tcp_mode_serves_a_client_and_exits_cleanly(tmp_path: Path) -> None:
    root = make_project(tmp_path, {"world/harbor.md": "# Harbor\n\nThe lighthouse keeper watches the harbor.\n"})
    stderr: list[str] = []
    proc, host, port = start_server(stderr)
    try:
        reader, writer = await asyncio.open_connection(host, port)
        client = SocketClient(reader, writer)
        init = await client.request(
            "initialize",
            {
                "processId": os.getpid(),
                "rootUri": root.as_uri(),
                "capabilities": {"window": {"workDoneProgress": True}},
                "workspaceFolders": [{"uri": root.as_uri(), "name": root.name}],
            },
        )
        assert init["result"]["serverInfo"]["name"] == "saipling"
        client.send({"method": "initialized", "params": {}})
        await client.wait_for_index()

        # a second client is refused; the first keeps its session and its answers
        r2, w2 = await asyncio.open_connection(host, port)
        assert await asyncio.wait_for(r2.read(), 10) == b""  # closed by the server
        w2.close()

        found = await client.request("saipling/search", {"query": "lighthouse keeper"})
        assert [r["filePath"] for r in found["result"]["results"]] == ["world/harbor.md"]
        bad = await client.request("saipling/search", {"query": 5})
        assert bad["error"]["code"] == -32602 and bad["error"]["data"]["field"] == "query"

        assert (await client.request("shutdown", None))["result"] is None
        client.send({"method": "exit"})
        await writer.drain()
        assert await asyncio.to_thread(proc.wait, 30) == 0
        writer.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.stdout is not None and proc.stdout.read() == ""  # nothing on stdout in TCP mode either
    log = "".join(stderr)
    assert "Traceback" not in log and "ERROR" not in log, log
    assert "refused a second TCP client" in log

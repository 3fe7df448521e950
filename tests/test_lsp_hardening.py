"""Issue 12 faults through the real `saipling serve`: a FIFO named *.md (item 6) and a CLI index run beside the
server (item 9)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from lsp_client import lsp_session, request, status, wait_for_index, wait_for_status, write_project


async def test_item06_a_fifo_never_leaves_the_server_indexing(tmp_path: Path) -> None:
    root = write_project(tmp_path / "proj", {"a.md": "# A\n\nalpha\n", "b.md": "# B\n\nbeta\n"})
    os.mkfifo(root / "pipe.md")
    async with lsp_session(root) as client:
        await wait_for_index(client, timeout=60)  # it never ended before
        st = await wait_for_status(client, lambda s: not s["isIndexing"])
        assert st["totalFiles"] == 2


async def test_item09_a_cli_index_beside_the_server_never_fails_its_files(tmp_path: Path) -> None:
    files = {f"notes/n{i:03d}.md": f"# Note {i}\n\nthe harbor bell {i}\n" for i in range(120)}
    root = write_project(tmp_path / "proj", files)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SAIPLING_", "OPENAI_", "VOYAGE_"))}
    env["SAIPLING_PROVIDER"] = "none"
    async with lsp_session(root) as client:
        await wait_for_index(client)
        for rel in files:  # every file changed: both writers have work
            (root / rel).write_text(f"# {rel}\n\nthe lighthouse lamp {rel}\n", encoding="utf-8")
        cli = subprocess.Popen(
            [sys.executable, "-m", "saipling", "index", str(root), "--json"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        await request(client, "saipling/reindex", {"full": True})
        await wait_for_index(client, runs=2, timeout=90)
        out, err = cli.communicate(timeout=90)
        assert cli.returncode == 0, err
        assert json.loads(out)["failed"] == []
        logged = " ".join(m.message for m in client.log_messages) + " ".join(m.message for m in client.messages)
        assert "could not be indexed" not in logged and "Busy" not in logged, logged
        st = await status(client)
        assert st["totalFiles"] == len(files)
        found = await request(client, "saipling/search", {"query": "lighthouse lamp", "mode": "lexical"})
        assert found["results"]

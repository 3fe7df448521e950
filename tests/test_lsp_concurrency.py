"""Blocking work stays off the event loop: requests answer while a slow index runs; the run is cancellable."""

# ruff: noqa: F811  (fixture imported, then requested as a parameter)
from __future__ import annotations

import time
from pathlib import Path

from lsprotocol import types

from apiserver import FakeEmbeddingAPI, api_server  # noqa: F401  (fixture)
from lsp_client import (
    ended_tokens,
    fake_api_options,
    lsp_session,
    request,
    status,
    wait_for_index,
    wait_until,
    write_project,
)

FILES = 400


async def test_search_answers_promptly_during_a_slow_index_and_cancel_keeps_it_consistent(
    tmp_path: Path, api_server: FakeEmbeddingAPI
) -> None:
    root = write_project(
        tmp_path / "big",
        {f"part{i // 100}/f{i:03}.md": f"# File {i}\n\nToken{i} alpha.\n" for i in range(FILES)},
    )
    api_server.slow(1.0, times=1000)  # every embedding request takes a second
    options = fake_api_options(api_server, batchSize=32)
    async with lsp_session(root, options) as client:
        token = await wait_until(lambda: next(iter(client.progress_reports), None))
        await wait_until(lambda: (s := api_server.count) >= 2 and s)  # past the probe: batches are embedding

        t0 = time.perf_counter()
        found = await request(client, "saipling/search", {"query": "Token0 alpha", "mode": "lexical"})
        st = await status(client)
        elapsed = time.perf_counter() - t0
        assert found["indexing"] is True and st["isIndexing"] is True
        assert elapsed < 0.8, f"search + status took {elapsed:.2f} s while indexing"
        assert st["progress"]["filesTotal"] == FILES

        client.window_work_done_progress_cancel(types.WorkDoneProgressCancelParams(token=token))
        await wait_for_index(client)
        end = client.progress_reports[token][-1]
        assert end.kind == "end" and "cancelled" in end.message
        st = await status(client)
        assert st["isIndexing"] is False and st["totalFiles"] == FILES  # keywords first: every file is there
        assert st["unembeddedChunks"] > 0 and st["embeddedChunks"] < st["totalChunks"]  # and what is left

        api_server.reset()  # fast again; the next run resumes by hash
        assert await request(client, "saipling/reindex", {}) == {"started": True}
        await wait_until(lambda: len(ended_tokens(client)) == 2, timeout=30)
        st = await status(client)
        assert st["totalFiles"] == FILES and st["embeddedChunks"] == st["totalChunks"] and st["degraded"] is None

"""Editor sync (SPEC 7) with the injected clock: quiet period, deletions on the next tick, batched passes.

Embeddings go to the real local OpenAI-compatible test server (tests/apiserver.py), which records every
request, so "exactly one re-embed" is counted at the HTTP level.
"""

# ruff: noqa: F811  (fixture imported, then requested as a parameter)
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from lsprotocol import types

from apiserver import FakeEmbeddingAPI, api_server  # noqa: F401  (fixture)
from lsp_client import (
    advance,
    did_save,
    ended_tokens,
    fake_api_options,
    lsp_session,
    request,
    search_paths,
    status,
    tick,
    wait_for_index,
    wait_for_status,
    wait_until,
    write_project,
)

QUIET = 120.0


def api_options(api: FakeEmbeddingAPI, **extra: Any) -> dict[str, Any]:
    """Passes run only on `saipling/_test/tick`, after the quiet period; no watcher."""
    return fake_api_options(api, **{"quietPeriodSeconds": QUIET, "tickSeconds": 3600, "watch": False, **extra})


def embedded_texts(api: FakeEmbeddingAPI, since: int = 0) -> list[str]:
    return [t for r in api.requests[since:] if isinstance(r.body, dict) for t in r.body.get("input") or []]


async def test_120_saves_30s_apart_embed_once_after_the_quiet_period(
    tmp_path: Path, api_server: FakeEmbeddingAPI
) -> None:
    root = write_project(
        tmp_path / "p", {"draft.md": "# Draft\n\nMarker-start text.\n", "other.md": "# Other\n\nStill.\n"}
    )
    draft = root / "draft.md"
    async with lsp_session(root, api_options(api_server)) as client:
        await wait_for_index(client)
        before = len(api_server.requests)
        for i in range(120):
            draft.write_text(f"# Draft\n\nRevision Marker-{i} of the scene.\n", encoding="utf-8")
            did_save(client, draft)
            await advance(client, 30)
            assert (await tick(client))["paths"] == 0  # every save restarted the quiet period
        assert (await status(client))["pendingFiles"] == 1
        await advance(client, QUIET - 30 - 1)
        assert (await tick(client))["paths"] == 0
        await advance(client, 2)
        done = await tick(client)
        assert done["paths"] == 1 and done["ran"] and done["pending"] == 0

        texts = [t for t in embedded_texts(api_server, before) if "Marker-" in t]
        assert len(texts) == 1 and "Marker-119" in texts[0]
        assert len([r for r in api_server.requests[before:] if any("Marker-" in t for t in r.body["input"])]) == 1
        # the saved text is found first (other.md, a short note, is a weak vector match further down)
        assert (await search_paths(client, "Marker-119 revision"))[0] == "draft.md"
        assert await search_paths(client, "Marker-119 revision", mode="lexical") == ["draft.md"]


async def test_delete_on_next_tick_and_rename_reuses_embeddings(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    files = {"a.md": "# A\n\nThe amber lantern glows.\n", "b.md": "# B\n\nThe brass compass spins.\n"}
    root = write_project(tmp_path / "p", files)
    async with lsp_session(root, api_options(api_server)) as client:
        await wait_for_index(client)
        (root / "b.md").unlink()
        client.workspace_did_delete_files(types.DeleteFilesParams([types.FileDelete((root / "b.md").as_uri())]))
        done = await tick(client)  # no clock advance: deletions skip the quiet period
        assert done["paths"] == 1 and (await status(client))["totalFiles"] == 1
        assert await search_paths(client, "brass compass", mode="lexical") == []

        before = len(api_server.requests)
        (root / "a.md").rename(root / "renamed.md")
        rename = types.FileRename((root / "a.md").as_uri(), (root / "renamed.md").as_uri())
        client.workspace_did_rename_files(types.RenameFilesParams([rename]))
        assert (await tick(client))["paths"] == 1  # the old name leaves now
        # ... and the new one is there at once, without a search (the text pass runs on a worker thread: a status
        # asked at the same moment answered 0 files once under load, so it is polled for a few seconds at most)
        await wait_for_status(client, lambda st: st["totalFiles"] == 1, timeout=5.0)
        assert await search_paths(client, "amber lantern", mode="lexical") == ["renamed.md"]
        st = await status(client)
        assert st["unembeddedChunks"] == 0  # its vectors came back from the embedding cache
        await advance(client, QUIET)
        assert (await tick(client))["paths"] == 1  # the quiet period's pass has nothing left to embed
        assert await search_paths(client, "amber lantern", mode="lexical") == ["renamed.md"]
        assert not [t for t in embedded_texts(api_server, before) if "amber" in t]  # reused from the cache


async def test_burst_of_500_saves_over_200_files_is_one_batched_pass(tmp_path: Path) -> None:
    root = write_project(tmp_path / "p", {f"ch/{i:03}.md": f"# Chapter {i}\n\nWord{i} text.\n" for i in range(200)})
    async with lsp_session(
        root, {"provider": "none", "quietPeriodSeconds": QUIET, "tickSeconds": 3600, "watch": False}
    ) as client:
        await wait_for_index(client)
        passes = (await status(client))["indexPasses"]
        for n in range(500):
            i = n % 200
            (root / f"ch/{i:03}.md").write_text(f"# Chapter {i}\n\nWord{i} edit {n}.\n", encoding="utf-8")
            did_save(client, root / f"ch/{i:03}.md")
        # every save's text is current at once; keyword-only, nothing is left to do for them
        await wait_for_status(client, lambda st: st["pendingFiles"] == 0)
        assert (await search_paths(client, "Word7 edit 407", mode="lexical"))[0] == "ch/007.md"
        await advance(client, QUIET)
        done = await tick(client)
        assert done["paths"] == 200 and done["pending"] == 0
        assert done["passes"] == passes + 1  # one pass, not 500
        assert (await search_paths(client, "Word7 edit 407", mode="lexical"))[0] == "ch/007.md"


async def test_cancelled_reindex_puts_the_pending_edits_back(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    root = write_project(tmp_path / "p", {"zz.md": "# Z\n\nThe amber lantern glows.\n"})
    async with lsp_session(root, api_options(api_server, batchSize=8)) as client:
        await wait_for_index(client)
        # new files the reindex run embeds first (in batches of 32 chunks), then the saved edit (sorted last)
        write_project(root, {f"new/f{i:02}.md": f"# New {i}\n\nFresh{i} words.\n" for i in range(40)})
        (root / "zz.md").write_text("# Z\n\nThe brass compass spins.\n", encoding="utf-8")
        did_save(client, root / "zz.md")
        await wait_for_status(client, lambda st: st["pendingFiles"] == 1)  # status may overtake the save
        tokens, sent = set(client.progress_reports), len(api_server.requests)
        api_server.slow(3.0)  # the run's first embedding request: long enough to cancel the run meanwhile
        assert await request(client, "saipling/reindex", {}) == {"started": True}
        token = await wait_until(lambda: next((t for t in client.progress_reports if t not in tokens), None))
        await wait_until(lambda: len(api_server.requests) > sent)
        client.window_work_done_progress_cancel(types.WorkDoneProgressCancelParams(token=token))
        await wait_for_index(client, runs=2)
        assert "cancelled" in client.progress_reports[token][-1].message
        done = await tick(client)  # the drained edit is back in the queue, due at once (it waited out its quiet
        # period); `pendingFiles` may already be 0: the run embedded it in its first round (most recent first)
        assert done["paths"] == 1 and done["ran"] and done["pending"] == 0
        assert await search_paths(client, "brass compass", mode="lexical") == ["zz.md"]


async def test_folder_events_with_an_include_that_names_folders(tmp_path: Path) -> None:
    files = {
        "manuscript/part1/ch1.md": "# Ch1\n\nThe amber lantern glows.\n",
        "manuscript/part1/ch2.md": "# Ch2\n\nThe brass compass spins.\n",
    }
    root = write_project(tmp_path / "p", files)
    options = {
        "provider": "none",
        "include": ["manuscript/**"],
        "quietPeriodSeconds": QUIET,
        "tickSeconds": 3600,
        "watch": False,
    }
    async with lsp_session(root, options) as client:
        await wait_for_index(client)
        assert (await status(client))["totalFiles"] == 2
        ms = root / "manuscript"

        (ms / "part1").rename(ms / "part2")
        rename = types.FileRename((ms / "part1").as_uri(), (ms / "part2").as_uri())
        client.workspace_did_rename_files(types.RenameFilesParams([rename]))
        done = await tick(client)  # the files of the old folder leave now ...
        assert done["paths"] == 2 and not done["rescan"] and (await status(client))["totalFiles"] == 0
        await advance(client, QUIET)
        done = await tick(client)  # ... the new folder is scanned after its quiet period
        assert done["rescan"] and (await status(client))["totalFiles"] == 2
        assert await search_paths(client, "amber lantern", mode="lexical") == ["manuscript/part2/ch1.md"]

        write_project(root, {"manuscript/part3/ch3.md": "# Ch3\n\nThe copper kettle sings.\n"})
        client.workspace_did_create_files(types.CreateFilesParams([types.FileCreate((ms / "part3").as_uri())]))
        await advance(client, QUIET)
        assert (await tick(client))["rescan"]
        assert await search_paths(client, "copper kettle", mode="lexical") == ["manuscript/part3/ch3.md"]

        shutil.rmtree(ms / "part2")
        client.workspace_did_delete_files(types.DeleteFilesParams([types.FileDelete((ms / "part2").as_uri())]))
        assert (await tick(client))["paths"] == 2  # no quiet period for deletions
        assert (await status(client))["totalFiles"] == 1
        assert await search_paths(client, "amber lantern", mode="lexical") == []


async def test_a_full_reindex_interrupted_by_a_settings_change_resumes_as_a_full_one(
    tmp_path: Path, api_server: FakeEmbeddingAPI
) -> None:
    root = write_project(
        tmp_path / "p", {f"f{i:02}.md": f"# F{i}\n\nThe amber lantern number {i}.\n" for i in range(20)}
    )
    async with lsp_session(root, api_options(api_server, batchSize=8)) as client:
        await wait_for_index(client)
        for i in range(10):  # edited outside the editor (no watcher): the full run has these to embed
            (root / f"f{i:02}.md").write_text(f"# F{i}\n\nThe brass compass number {i}.\n", encoding="utf-8")
        tokens, sent = set(client.progress_reports), len(api_server.requests)
        api_server.slow(3.0)  # holds the full run's first embedding request
        assert await request(client, "saipling/reindex", {"full": True}) == {"started": True}
        await wait_until(lambda: next((t for t in client.progress_reports if t not in tokens), None))
        await wait_until(lambda: len(api_server.requests) > sent)
        client.set_configuration({"quietPeriodSeconds": 30}, section="saipling")  # any settings change
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
        await wait_for_index(client, runs=3)  # initial, the interrupted full run, its resumption
        last = client.progress_reports[ended_tokens(client)[-1]][-1].message
        assert "20 changed" in last, last  # every file re-chunked, not just the 10 edited ones


def test_a_search_sent_with_a_save_in_one_write_finds_the_saved_text(tmp_path: Path) -> None:
    """didSave was a coroutine run on a later turn of the loop, while the search after it went to a worker thread
    at once: under load the search synced the index first and missed the saved text (a CI flake). A change
    notification is now handled before the next message is dispatched."""
    from rawlsp import RawServer, frame, message

    root = tmp_path / "p"
    root.mkdir()
    (root / "other.md").write_text("# Other\n\nA field of barley.\n", encoding="utf-8")
    with RawServer(root) as srv:
        srv.initialize({"provider": "none"})
        srv.request("saipling/status", {}, "ready")
        assert srv.response("ready") is not None
        for n in range(12):
            word = f"quokka{n}x"
            (root / "other.md").write_text(f"# Other\n\nA field of barley and a {word}.\n", encoding="utf-8")
            save = message("textDocument/didSave", {"textDocument": {"uri": (root / "other.md").as_uri()}})
            search = message("saipling/search", {"query": word, "mode": "lexical"}, f"s{n}")
            srv.send_raw(frame(save) + frame(search))
            got = srv.response(f"s{n}")
            assert got is not None and [r["filePath"] for r in got["result"]["results"]] == ["other.md"], (n, got)

"""Hostile project content and a hostile embedding server, through the real `saipling serve`: YAML alias bombs
in frontmatter, numbers SQLite cannot store, FIFOs and devices named `*.md` under editor requests, and an
embedding server that rate-limits or hangs while someone searches. Each must get a clear answer at once and
leave the server answering."""

# ruff: noqa: F811  (fixture imported, then requested as a parameter)
from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest
from pygls.exceptions import JsonRpcException

from apiserver import FakeEmbeddingAPI, api_server  # noqa: F401  (fixture)
from lsp_client import (
    STORY,
    fake_api_options,
    lsp_session,
    raw_request,
    request,
    status,
    wait_for_index,
    write_project,
)
from rawlsp import RawServer

BOMB = (
    "---\n"
    + "".join(
        f"{k}: &{k} [{', '.join([f'*{p}'] * 9) if p else ', '.join(['lol'] * 9)}]\n"
        for p, k in zip(["", *"abcdefgh"], "abcdefghi", strict=True)
    )
    + "name: Laugh\n---\n# Laughs\n\nthe quokka laughs at the marsh\n"
)


async def search_paths(client, query: str) -> list[str]:
    found = await request(client, "saipling/search", {"query": query, "mode": "lexical"}, timeout=30)
    return [r["filePath"] for r in found["results"]]


async def test_frontmatter_alias_bombs_and_huge_numbers_are_indexed_as_text(tmp_path: Path) -> None:
    root = write_project(
        tmp_path / "proj",
        {
            "notes/bomb.md": BOMB,  # 9**9 "lol"s once expanded: the chunker walked them forever
            "notes/cycle.md": "---\nname: Loop\nsee: &a [*a]\n---\n# Loop\n\nthe heron circles\n",  # endless
            "notes/chapter.md": "---\nname: Big\nchapter: 99999999999999999999\n---\n# Big\n\nthe ibis waits\n",
            "notes/plain.md": "# Plain\n\nthe otter swims\n",
        },
    )
    async with lsp_session(root) as client:
        await wait_for_index(client, timeout=60)
        assert (await status(client))["totalFiles"] == 4
        for word, path in (("quokka", "bomb"), ("heron", "cycle"), ("ibis", "chapter"), ("otter", "plain")):
            assert await search_paths(client, word) == [f"notes/{path}.md"], word
        logged = " ".join(m.message for m in client.log_messages)
        assert "could not be indexed" not in logged
        assert "notes/bomb.md: YAML frontmatter expands far beyond its text" in logged


async def test_fifos_and_devices_named_md_get_answers_not_a_hang(tmp_path: Path) -> None:
    root = write_project(tmp_path / "proj", STORY)
    os.mkfifo(root / "pipe.md")
    special = ["pipe.md"]
    try:  # /dev/zero under a project name: read to the end, it never ends (root only)
        os.mknod(root / "zero.md", 0o644 | stat.S_IFCHR, os.makedev(1, 5))
        special.append("zero.md")
    except PermissionError:
        pass
    async with lsp_session(root) as client:
        await wait_for_index(client, timeout=60)
        for rel in special:
            doc = {"uri": (root / rel).as_uri()}
            at = {"textDocument": doc, "position": {"line": 0, "character": 1}}
            assert await raw_request(client, "textDocument/documentSymbol", {"textDocument": doc}, 20) == []
            assert await raw_request(client, "textDocument/hover", at, 20) is None
            refs = {**at, "context": {"includeDeclaration": True}}
            assert await raw_request(client, "textDocument/references", refs, 20) is None
            with pytest.raises(JsonRpcException) as info:
                await raw_request(client, "saipling/get", {"path": rel}, 20)
            assert f"{rel} is not a regular file" in info.value.message
        assert await search_paths(client, "dragon")  # still answering
        assert (await status(client))["totalFiles"] == 4


async def test_a_search_does_not_wait_on_a_rate_limiting_or_hanging_embedding_server(
    tmp_path: Path, api_server: FakeEmbeddingAPI
) -> None:
    root = write_project(tmp_path / "proj", STORY)
    async with lsp_session(root, fake_api_options(api_server, openaiApiKey="sk-test-0123456789")) as client:
        await wait_for_index(client)
        api_server.fail(429, times=100, retry_after="60")  # before: 3 retries 60 s apart, per search
        found = await request(client, "saipling/search", {"query": "where does the dragon sleep"}, timeout=45)
        assert "429" in found["degraded"] and found["results"]
        api_server.reset()
        api_server.slow(600, times=100)  # before: a 30 s timeout, then 60 s waiting for the server to settle
        found = await request(client, "saipling/search", {"query": "who maps the marshes"}, timeout=45)
        assert "timed out" in found["degraded"] and found["results"]
        assert (await status(client))["totalFiles"] == 4


def test_json_nested_too_deep_and_odd_messages_never_kill_the_server_or_print_tracebacks(
    tmp_path: Path,
) -> None:
    root = write_project(tmp_path / "proj", STORY)
    deep = '{"jsonrpc": "2.0", "id": 50, "method": "saipling/search", "params": {"query": "x", "filter": '
    deep += "[" * 100_000 + "]" * 100_000 + "}}"  # json's recursion limit: the server died of a RecursionError
    with RawServer(root) as srv:
        srv.initialize()
        srv.send(deep)
        reply = srv.response(50)
        assert reply is not None and reply["error"]["code"] == -32700, (reply, srv.stderr()[-500:])
        srv.notify("$/cancelRequest", {"id": {"not": "an id"}})  # a traceback went to the client's log
        srv.notify("$/setTrace", {"value": 5})  # and pages of them to stderr, for wrong types
        srv.request("textDocument/hover", {"textDocument": 5, "position": {"line": 0, "character": 0}}, 51)
        assert srv.response(51)["error"]["code"] == -32602
        srv.request("saipling/status", {}, 52)
        assert "result" in (srv.response(52) or {})
        assert srv.proc.poll() is None
        assert "Traceback" not in srv.stderr() and b"Traceback" not in srv.raw


def test_settings_out_of_range_are_refused_by_name_and_the_folder_still_served(tmp_path: Path) -> None:
    root = write_project(tmp_path / "proj", STORY)
    uri = root.as_uri()
    init = (
        '{"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {"processId": null, "capabilities": {},'
        f' "rootUri": "{uri}", "workspaceFolders": [{{"uri": "{uri}", "name": "proj"}}],'
        ' "initializationOptions": {"provider": "openai", "baseUrl": "http://[::1", "fallback": "none",'
        ' "openaiApiKey": "sk-test-0123456789", "maxFileBytes": 1e400, "tickSeconds": 0}}}'
    )  # 1e400 is infinity: the folder was never opened; the broken URL failed the whole index run
    with RawServer(root) as srv:
        srv.send(init)
        assert "result" in (srv.response("init") or {}), srv.stderr()[-500:]
        srv.notify("initialized", {})
        assert srv.wait_for(lambda m: "Indexing proj" in str(m.get("params", {}).get("message")), 30)
        srv.request("saipling/search", {"query": "dragon", "mode": "lexical"}, 2)
        assert srv.response(2)["result"]["results"]
        shown = " ".join(m["params"]["message"] for m in srv.notifications("window/showMessage"))
        assert "maxFileBytes: expected an integer, got inf" in shown
        assert "tickSeconds must be >= 0.1" in shown
        assert "the URL is not valid" in shown and "sk-test" not in shown
        assert "Traceback" not in srv.stderr()


async def test_project_files_that_are_fifos_or_nested_too_deep_get_warnings_not_hangs(tmp_path: Path) -> None:
    nested = "[" * 100_000 + "]" * 100_000  # tomllib and json recurse: RecursionError
    root = write_project(
        tmp_path / "proj",
        {
            **STORY,
            ".saipling/config.toml": f'provider = "none"\nx = {nested}\n',  # the folder never opened
            "skills/deep.toml": f"[context.vector_search]\nenabled = true\nx = {nested}\n",
        },
    )
    os.mkfifo(root / ".context_settings.json")  # read by every search: each one blocked for ever
    async with lsp_session(root) as client:
        await wait_for_index(client, timeout=60)
        # settings that cannot be read exclude every file (fail closed), and the answer says why
        found = await request(client, "saipling/search", {"query": "dragon"}, 20)
        assert found["results"] == [] and "not a regular file" in found["warnings"][0]
        every = await request(client, "saipling/search", {"query": "dragon", "respectContextSettings": False}, 20)
        assert every["results"]  # (still answering; the index holds them)
        with pytest.raises(JsonRpcException) as info:
            await raw_request(client, "saipling/enrichContext", {"query": "dragon cave", "skill": "deep"}, 20)
        assert "deep.toml is not valid TOML" in info.value.message
        shown = " ".join(m.message for m in client.messages)
        assert "config.toml: invalid TOML" in shown


def test_credentials_inside_base_url_never_reach_messages_logs_or_the_index(tmp_path: Path) -> None:
    root = write_project(tmp_path / "proj", STORY)
    url = "http://bob:hunter2pass@127.0.0.1:9/v1?api-key=opensesame42"  # port 9: refused at once
    with RawServer(root, env={"SAIPLING_LOG_LEVEL": "DEBUG"}) as srv:
        srv.initialize({"provider": "openai", "baseUrl": url, "fallback": "none", "openaiApiKey": "x" * 12})
        assert srv.wait_for(lambda m: m.get("method") == "window/showMessage", 30), srv.stderr()[-500:]
        srv.request("saipling/search", {"query": "where does the dragon sleep"}, 2)
        found = srv.response(2)["result"]
        assert found["results"] and "127.0.0.1:9" in found["degraded"]  # the server is still named
        srv.request("saipling/status", {}, 3)
        assert srv.response(3)
        said = srv.raw.decode("utf-8", "replace") + srv.stderr()
    stored = b"".join(p.read_bytes() for p in (root / ".saipling").iterdir() if p.is_file())
    for secret in ("hunter2pass", "opensesame42"):
        assert secret not in said and secret.encode() not in stored, secret


def test_a_key_in_the_base_urls_query_is_sent_on_the_right_path_and_never_logged(
    tmp_path: Path, api_server: FakeEmbeddingAPI
) -> None:
    """Proxies take keys in the query (`?key=...`): the request goes to `/v1/embeddings?key=...` (not a query
    ending in `.../embeddings`), and httpx's DEBUG line naming the URL shows the value as <redacted>."""
    root = write_project(tmp_path / "proj", STORY)
    url = api_server.url + "/v1?key=qsecret9876543"
    with RawServer(root, env={"SAIPLING_LOG_LEVEL": "DEBUG"}) as srv:
        srv.initialize({"provider": "openai", "baseUrl": url, "model": "fake-embed", "fallback": "none"})
        for n in range(10, 400):  # the first index run (keywords, then vectors)
            srv.request("saipling/status", {}, n)
            st = srv.response(n)["result"]
            if st["totalChunks"] and not st["isIndexing"] and not st["unembeddedChunks"]:
                break
            time.sleep(0.1)
        srv.request("saipling/search", {"query": "where does the dragon sleep"}, 3)
        found = srv.response(3)["result"]
        said = srv.raw.decode("utf-8", "replace") + srv.stderr()
    assert found["results"] and found["degraded"] is None, found.get("degraded")
    paths = {r.path for r in api_server.requests}
    assert paths == {"/v1/embeddings?key=qsecret9876543"}, paths
    assert "HTTP Request: POST" in said  # (httpx logged the URL: redacted)
    assert "qsecret9876543" not in said


def test_a_change_with_a_range_is_applied_in_place_or_drops_the_buffer(tmp_path: Path) -> None:
    """The server announces Full sync; a client that sends ranges anyway had each change taken as the whole new
    text (pygls): the buffer became the typed fragment, and the outline, hover and quick fixes were computed on it
    (a `Replace with` edit at the fragment's positions lands elsewhere in the real text). A range inside the text
    is applied in place; one outside it (past the end) drops the buffer: the file on disk is read instead
    (attacker pass 7)."""
    text = "# Alpha\n\nThe dragon sleeps.\n\n## Beta\n\nmore text\n"
    root = write_project(tmp_path / "p", {"a.md": text})
    uri = (root / "a.md").as_uri()
    with RawServer(root) as srv:
        srv.initialize()
        item = {"uri": uri, "languageId": "markdown", "version": 1, "text": text}
        srv.notify("textDocument/didOpen", {"textDocument": item})

        def outline(msg_id: int) -> list[str]:
            srv.request("textDocument/documentSymbol", {"textDocument": {"uri": uri}}, msg_id)
            reply = srv.response(msg_id)
            assert reply is not None and "result" in reply, reply
            names = []
            for sym in reply["result"]:
                names += [sym["name"]] + [c["name"] for c in sym.get("children") or []]
            return names

        def change(version: int, start: tuple[int, int], end: tuple[int, int], new: str) -> None:
            rng = {"start": {"line": start[0], "character": start[1]}, "end": {"line": end[0], "character": end[1]}}
            doc = {"uri": uri, "version": version}
            srv.notify("textDocument/didChange", {"textDocument": doc, "contentChanges": [{"range": rng, "text": new}]})

        change(2, (4, 3), (4, 7), "Gamma")  # `## Beta` -> `## Gamma`
        assert outline(10) == ["Alpha", "Gamma"]
        change(3, (99, 0), (99, 0), "# Zeta\n")  # past the end: the buffer cannot be trusted
        assert outline(11) == ["Alpha", "Beta"]  # (the file on disk)
        change(4, (0, 0), (0, 1), "#")  # a change to a dropped buffer is ignored, the server still answers
        assert outline(12) == ["Alpha", "Beta"]
        assert "Traceback" not in srv.stderr()


def test_a_progress_cancel_with_a_token_that_is_not_a_string_or_an_integer_is_ignored(tmp_path: Path) -> None:
    """A token that is an object or a list cannot be one of the server's: pygls looked it up in its table and
    logged an ERROR with a traceback (unhashable type: 'dict'). It is ignored with one line (attacker pass 7)."""
    root = write_project(tmp_path / "proj", STORY)
    with RawServer(root) as srv:
        srv.initialize()
        for token in ({"a": 1}, [1, 2], None):
            srv.notify("window/workDoneProgress/cancel", {"token": token})
        srv.request("saipling/status", {}, 2)
        assert "result" in (srv.response(2) or {})
        err = srv.stderr()
        assert "unhashable" not in err and "Traceback" not in err and "ERROR" not in err, err[-2000:]


async def test_a_document_outside_every_folder_by_dot_dot_segments_gets_empty_answers(tmp_path: Path) -> None:
    """A document URI whose `..` (or `%2e%2e`) segments lead out of the workspace folder was read anyway: the
    outline and hover of a file outside the project (any file the server can read). Its path is normalised
    first: outside every folder, the answer is empty; a `..` that stays inside reads the file it names
    (attacker pass 7)."""
    root = write_project(tmp_path / "proj", STORY)
    write_project(tmp_path / "outside", {"secret.md": "# Outside Secret\n\nAlice Marsh reads the letters.\n"})
    async with lsp_session(root) as client:
        await wait_for_index(client)
        base = root.as_uri()
        for uri in (
            f"{base}/../outside/secret.md",
            f"{base}/%2e%2e/outside/secret.md",
            f"{base}/notes/%2E%2E/%2E%2E/outside/secret.md",
        ):
            doc = {"uri": uri}
            assert await raw_request(client, "textDocument/documentSymbol", {"textDocument": doc}) == [], uri
            at = {"textDocument": doc, "position": {"line": 2, "character": 2}}  # on `Alice Marsh`
            assert await raw_request(client, "textDocument/hover", at) is None, uri
        inside = {"uri": f"{base}/notes/../chapters/ch01.md"}
        got = await raw_request(client, "textDocument/documentSymbol", {"textDocument": inside})
        assert [s["name"] for s in got] == ["Chapter 1: The Dragon Wakes"]


def test_dot_dot_after_a_link_is_applied_as_the_filesystem_applies_it(tmp_path: Path) -> None:
    """`root/link/../x.md`, `link` a folder elsewhere, is the file beside that folder, outside the root: the
    lexical normalisation made it `root/x.md`, another file (its outline, hover and the buffer's text given for it);
    and `root/inner/link/../x.md`, the link to a folder deeper in the root, is that folder's parent's `x.md`."""
    from saipling.lsp.convert import relative_to

    root, outside = tmp_path / "proj", tmp_path / "elsewhere"
    (outside / "deep").mkdir(parents=True)
    (root / "inner" / "a" / "b").mkdir(parents=True)
    (root / "link").symlink_to(outside / "deep", target_is_directory=True)
    (root / "inner" / "deep").symlink_to(root / "inner" / "a" / "b", target_is_directory=True)
    for p in (outside / "x.md", root / "x.md", root / "inner" / "a" / "x.md"):
        p.write_text("# X\n", encoding="utf-8")
    root = root.resolve()
    assert relative_to(root, root / "link" / ".." / "x.md") is None
    assert relative_to(root, root / "inner" / "deep" / ".." / "x.md") == "inner/a/x.md"
    assert relative_to(root, root / "notes" / ".." / "x.md") == "x.md"
    assert relative_to(root, root / ".." / "elsewhere" / "x.md") is None

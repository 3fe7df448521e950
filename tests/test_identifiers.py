"""Identifiers in keyword search (issue 31): the parts of camelCase, snake_case and dotted names match as well as
the whole, and a section whose heading is the name ranks before sections that mention it. Through the real
store (SQLite FTS5) of an indexed project."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apsw
import pytest

from fixtures import fts_query, kw, make_project, open_project
from saipling.markdown.terms import identifier_parts, identifier_words, make_snippet
from saipling.storage.sqlite.schema import _MIGRATIONS
from saipling.storage.sqlite.store import SqliteStore as Store

FS = """# File system

## `fs.createReadStream(path[, options])`

* `path` {string|Buffer|URL}
* `options` {string|Object}

Returns a new `ReadStream` for the file. Unlike the 16 KiB default `highWaterMark` elsewhere, the object
returned by this method has a default `highWaterMark` of 64 KiB.

## Example: copying a file

This example copies a file with `fs.createReadStream()` piped into a writer. `fs.createReadStream()`
opens the file lazily; call `fs.createReadStream()` once per file and close what `fs.createReadStream()`
returns when done, as `fs.createReadStream()` does not close it for you on error.

## `fs.open(path[, flags[, mode]], callback)`

Asynchronous file open: read, write or create. See the POSIX open(2) documentation for more details.
"""

TIMERS = """# Timers

## `setTimeout(callback[, delay[, ...args]])`

Schedules execution of a one-time `callback` after `delay` milliseconds.

## `setInterval(callback[, delay[, ...args]])`

Schedules repeated execution of `callback` every `delay` milliseconds.
"""

OTHER = """# Process

## `child_process.spawn(command[, args][, options])`

Spawns a new process using the given `command`, with command-line arguments in `args`.
"""


@pytest.fixture
def docs(tmp_path: Path) -> Any:
    root = make_project(tmp_path, {"fs.md": FS, "timers.md": TIMERS, "process.md": OTHER})
    with open_project(root) as p:
        p.index()
        yield p


def _top(p: Any, query: str, k: int = 5) -> list[tuple[str, str]]:
    results = p.search({"query": query, "mode": "lexical", "maxResults": k})["results"]
    return [(r["filePath"], (r["sectionHeading"] or "").lstrip("#").strip()) for r in results]


def test_identifier_parts_and_words() -> None:
    assert identifier_parts("createReadStream") == ["create", "read", "stream"]
    assert identifier_parts("XMLHttpRequest") == ["xml", "http", "request"]
    assert identifier_parts("HTTP2Stream") == ["http2", "stream"]
    assert identifier_parts("timeout") == [] and identifier_parts("utf8") == [] and identifier_parts("Emma") == []
    words = identifier_words("Call `fs.createReadStream()` then setTimeout(); base64 and plain words.").split("\n")
    assert words == ["create read stream", "set timeout"]


def test_a_part_of_a_camel_case_name_finds_it(docs: Any) -> None:
    top = _top(docs, "timeout")
    assert top and top[0] == ("timers.md", "setTimeout(callback[, delay[, ...args]])")
    # the snippet marks the name the word was found in
    (hit,) = [r for r in docs.search({"query": "timeout", "mode": "lexical"})["results"]][:1]
    assert "**setTimeout**" in hit["snippet"]


def test_the_parts_of_a_name_in_words_find_it(docs: Any) -> None:
    top = _top(docs, "create read stream")
    assert top and top[0][0] == "fs.md"
    assert top[0][1] == "fs.createReadStream(path[, options])"


@pytest.mark.parametrize("query", ["fs.createReadStream", "createReadStream", "fs.createReadStream()"])
def test_the_section_named_by_an_identifier_ranks_before_those_that_mention_it(docs: Any, query: str) -> None:
    top = _top(docs, query)
    assert top[0] == ("fs.md", "fs.createReadStream(path[, options])"), top
    assert ("fs.md", "Example: copying a file") in top  # the mentions are still found, after it


def test_a_snake_case_name_and_its_parts(docs: Any) -> None:
    assert _top(docs, "child_process")[0] == ("process.md", "child_process.spawn(command[, args][, options])")
    assert _top(docs, "child process spawn")[0][0] == "process.md"


def test_a_plain_word_query_gets_no_name_heading_boost(docs: Any) -> None:
    # "open" is not a name in code: the sections are ranked by their words alone, and no result is marked an
    # exact heading match
    for query in ("open", "file open", "asynchronous file open"):
        results = docs.search({"query": query, "mode": "lexical", "explain": True})["results"]
        assert results
        assert all(not (r.get("explain") or {}).get("exactMatch") for r in results), query


def test_words_that_join_into_an_indexed_name_find_its_section_first(docs: Any) -> None:
    results = docs.search({"query": "create read stream", "mode": "lexical", "explain": True})["results"]
    assert results[0]["sectionHeading"] == "## fs.createReadStream(path[, options])"
    assert results[0]["explain"]["exactMatch"] == "heading"


def test_fts_query_adds_phrases_for_names() -> None:
    q = fts_query("fs.createReadStream")
    assert q is not None and '"fs createreadstream"' in q and '"create read stream"' in q
    assert fts_query("create read stream") == '"create" OR "read" OR "stream" OR "create read stream"'
    assert fts_query("the old man walked to the sea") == '"old" OR "man" OR "walked" OR "sea"'


def test_snippet_marks_a_name_by_its_part() -> None:
    assert "**setTimeout**" in make_snippet("Call setTimeout(cb, 10) later.", ["timeout"])
    assert "**" not in make_snippet("Call setInterval(cb, 10) later.", ["timeout"])


def test_an_index_of_schema_3_gains_the_identifier_column(tmp_path: Path) -> None:
    path = tmp_path / "index.db"
    conn = apsw.Connection(str(path))
    for number, sql in enumerate(_MIGRATIONS[:3]):
        conn.execute(sql)
        conn.execute(f"PRAGMA user_version={number + 1}")
    conn.execute(
        "INSERT INTO chunks(path, chunk_index, kind, heading_path, start_line, end_line, content_hash, text)"
        " VALUES ('a.md', 0, 'section', 'Timers', 1, 3, 'h', 'Call setTimeout once.')"
    )
    conn.close()
    store = Store.open(path)
    try:
        assert [i for i, _ in store.keyword_search(kw("settimeout"), 5)] == [1]  # the keywords were rebuilt
        store.conn.execute("UPDATE chunks SET ident_words = 'set timeout' WHERE id = 1")
        assert [i for i, _ in store.keyword_search(kw("timeout"), 5)] == [1]  # ... and follow the new column
        store.conn.execute("DELETE FROM chunks WHERE id = 1")
        assert store.keyword_search(kw("timeout"), 5) == []
    finally:
        store.close()

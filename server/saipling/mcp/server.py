"""The MCP face (`saipling mcp [ROOT]`): the engine's retrieval requests as tools for AI agents, over stdio.

A thin edge like `cli/main.py` and `lsp/`: each tool's input schema is generated from the engine's request model
(retrieval/requests.py) and its arguments are checked by the same code as the language server's (an error result naming
the field), brings the index up to date with the files on disk
(`live.freshness.LazySync`), calls one `Project` method and returns the engine's answer as `structuredContent`
(and the same JSON as text, for clients that only read text). Nothing here ranks, reads or filters.

Rules the agent cannot change: results are searched as the `mcpRole` setting sees the project (unset: `public`
content only, whatever `defaultRole` says), `.context_settings.json` exclusions always apply, and every search is
logged in `search_log` with source `agent`. The protocol is the official `mcp` SDK's; it is imported only
when the server starts, so other commands never pay for it.
"""

from __future__ import annotations

import difflib
import functools
import json
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import __version__
from ..errors import InvalidRequest, SaiplingError
from ..files.context_settings import FILE_NAME as CONTEXT_FILE
from ..jsonrpc_salvage import is_request_id, salvage_id
from ..live.service import SHUTDOWN_GRACE, LiveIndex
from ..retrieval.requests import (
    CheckPassageParams,
    EnrichParams,
    GetParams,
    MentionsParams,
    NamesParams,
    RelatedParams,
    Request,
    SearchParams,
    StatusParams,
    arguments_schema,
    parse_arguments,
)

if TYPE_CHECKING:
    from ..project import Project

log = logging.getLogger(__name__)

SERVER_NAME = "saipling"

INSTRUCTIONS = (
    "saipling searches one markdown project (notes, documentation, agent memory files, fiction) by meaning "
    "and by words. "
    "Use `search` to find passages, then `get` to read exact lines of a file it returned. `enrich_context` "
    "assembles the passages worth adding to your context for a task under a token budget. `related` finds "
    "passages like a given file; `status` says what is indexed. For fiction, `mentions` says where a character "
    "or place is mentioned, `check_passage` gathers the evidence to check a passage against the profiles and "
    "`names` lists names that drift or have no page. Paths are relative to the project root. "
    "The index follows the files on disk: edits are searchable on the next call."
)

# -- tools: schemas and descriptions ---------------------------------------------------------------------------
# A tool's input schema is generated from the engine's request model (retrieval/requests.py), restricted to the fields
# an
# agent may set, and its arguments are checked by the same code as the language server's (parse_arguments).
# Output fields that would be null are left out (optional, never a nullable type): _present.
_OPTIONAL_STR = {"type": "string"}


_RESULT = {
    "type": "object",
    "properties": {
        "filePath": {"type": "string"},
        "sectionHeading": _OPTIONAL_STR,
        "headingPath": {"type": "string"},
        "startLine": {"type": "integer"},
        "endLine": {"type": "integer"},
        "snippet": {"type": "string"},
        "score": {"type": "number"},
        "confidence": {"type": "number"},
        "modified": _OPTIONAL_STR,
    },
    "required": ["filePath", "startLine", "endLine", "snippet", "score"],
}
SEARCH_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string"},
        "mode": {"type": "string"},
        "results": {"type": "array", "items": _RESULT},
        "confidence": {"type": "number"},
        "noConfidentMatch": {"type": "boolean"},
        "degraded": _OPTIONAL_STR,
        "indexing": {"type": "boolean"},
        "note": {"type": "string"},
    },
    "required": ["query", "mode", "results", "confidence", "noConfidentMatch", "indexing"],
}
GET_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "startLine": {"type": "integer"},
        "endLine": {"type": "integer"},
        "totalLines": {"type": "integer"},
        "text": {"type": "string"},
    },
    "required": ["path", "startLine", "endLine", "totalLines", "text"],
}
ENRICH_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "contextBlock": {"type": "string"},
        "searchResults": {"type": "array", "items": {"type": "object"}},
        "tokensUsed": {"type": "integer"},
        "skipped": {"type": "array", "items": {"type": "object"}},
        "ran": {"type": "boolean"},
        "reason": {"type": "string"},
        "degraded": _OPTIONAL_STR,
        "noConfidentMatch": {"type": "boolean"},
        "indexing": {"type": "boolean"},
    },
    "required": ["contextBlock", "searchResults", "tokensUsed", "skipped", "ran", "reason", "noConfidentMatch"],
}
RELATED_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "results": {"type": "array", "items": _RESULT},
        "indexed": {"type": "boolean"},
        "degraded": _OPTIONAL_STR,
    },
    "required": ["path", "results", "indexed"],
}
STATUS_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "root": {"type": "string"},
        "totalFiles": {"type": "integer"},
        "totalChunks": {"type": "integer"},
        "provider": {"type": "string"},
        "isIndexing": {"type": "boolean"},
        "degraded": _OPTIONAL_STR,
        "entityTypes": {"type": "object", "additionalProperties": {"type": "integer"}},
    },
    "required": ["root", "totalFiles", "totalChunks", "provider", "isIndexing"],
}


CHECK_PASSAGE_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "entities": {"type": "array", "items": {"type": "object"}},
        "tokensUsed": {"type": "integer"},
        "budget": {"type": "integer"},
        "chapter": {"type": "integer"},
    },
    "required": ["entities", "tokensUsed", "budget"],
}
NAMES_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "words": {"type": "integer"},
        "drift": {"type": "array", "items": {"type": "object"}},
        "unknown": {"type": "array", "items": {"type": "object"}},
    },
    "required": ["words"],
}
_PLACE = {"type": "object"}  # (absent before the first mention)
MENTIONS_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "entities": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "entity": {"type": "object"},
                    "total": {"type": "integer"},
                    "summary": {"type": "string"},
                    "chapters": {"type": "array", "items": {"type": "object"}},
                    "first": _PLACE,
                    "last": _PLACE,
                    "chaptersSinceLastSeen": {"type": "integer"},
                    "chapterTotal": {"type": "integer"},
                    "otherFiles": {"type": "array", "items": {"type": "object"}},
                    "mentions": {"type": "array", "items": {"type": "object"}},
                },
                "required": ["entity", "total", "summary", "chapters", "mentions"],
            },
        },
    },
    "required": ["entities"],
}


@dataclass(frozen=True)
class ToolSpec:
    name: str
    title: str
    description: str
    request: type[Request]  # the engine request the tool makes: its schema and its checks
    fields: tuple[str, ...]  # the request's fields an agent may set (camelCase)
    output_schema: dict[str, Any]
    required: tuple[str, ...] = ()  # fields the tool requires beyond the request's own (path, not path or uri)

    @functools.cached_property
    def input_schema(self) -> dict[str, Any]:
        return arguments_schema(self.request, self.fields, self.required)


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "search",
        "Search the project",
        "Find passages in the project's markdown files (notes, documentation, agent memory files, a manuscript) "
        "by meaning and by words (hybrid search). Use it before answering or writing anything that depends on "
        "what the project already says: a decision, a definition, an earlier note, a remembered conversation, "
        "a person, place or character. Returns the best passages first, each with filePath, sectionHeading and "
        "headingPath, startLine/endLine (1-based, for `get`), a snippet with the matched words in **bold**, a "
        "score from 0 to 1, a confidence from 0 to 1 (how likely the passage is relevant at all) and modified "
        "(the file's last change, UTC: where two notes disagree, the newer is likely the current one; `related` "
        "on an old decision finds what replaced it). `noConfidentMatch` is true when nothing in the project "
        "looks relevant: say so rather than use the results; but when a `filter` left nothing, `note` says why "
        "(a folder no file is under, with the folders of that name; how many results the query has without the "
        "filter). `degraded` is present when "
        "the search could not see everything (keyword search only, chunks not embedded yet: a miss may still be "
        "in the project) or the rerank stage could not run; `indexing` is true while the index is still being "
        "built (an empty answer then says so in `note`, never noConfidentMatch). Read the lines around a hit "
        "with `get` before quoting it.",
        SearchParams,
        ("query", "maxResults", "mode", "minScore", "filter"),
        SEARCH_OUTPUT,
    ),
    ToolSpec(
        "get",
        "Read lines of a file",
        "Read exact lines of one project file from disk (the memory_get of an agent memory). Use it after "
        "`search` or `related` to read a hit in full, or to read a file you know by path. The path is relative "
        "to the project root and must be a file the project indexes; paths outside the root and files the "
        "project excludes are refused. Returns path, startLine, endLine, totalLines and the text (at most "
        "5000 lines per call: page on with startLine).",
        GetParams,
        ("path", "startLine", "lines"),
        GET_OUTPUT,
        required=("path",),
    ),
    ToolSpec(
        "enrich_context",
        "Assemble context for a task",
        "Assemble the project passages worth adding to your context for a task, within a token budget: it "
        "searches with the query, drops excluded files, files you already have (loadedFiles) and passages "
        "that are not relevant, and lays out one block per file (`=== FILE: <path> (SEARCH) ===`), each "
        "passage headed by its section's heading path and line numbers. Use it once at the start of a task "
        "instead of several searches when you want ready-to-use context. Without a skill it searches with "
        "the defaults; a skill (or an inline skillConfig, which must say `enabled: true`: {enabled, mode, "
        "max_results, max_search_tokens, min_relevance, filter_entity_types, known_by, max_chapter}) sets the "
        "budget, filters, the relevance floor (min_relevance, 0.5 by default: lower it for terse notes) and "
        'whether to search at all; in auto mode a bare remark ("ok thanks") is not searched unless wantSearch: '
        "true. Returns contextBlock (the text to add), searchResults (path, "
        "section, score, token estimate per passage), tokensUsed, skipped (path and reason), ran/reason (why it "
        "did or did not search), noConfidentMatch (it searched and nothing looked relevant: an empty block "
        "means the project has nothing on it) and indexing (the index is still being built: an empty block is "
        "no sign the project lacks it).",
        EnrichParams,
        (
            "query",
            "skill",
            "skillConfig",
            "loadedFiles",
            "maxSearchTokens",
            "maxResults",
            "bookId",
            "knownBy",
            "maxChapter",
            "wantSearch",
        ),
        ENRICH_OUTPUT,
    ),
    ToolSpec(
        "related",
        "Find passages like a file",
        "Find passages in other files most similar to one project file, or to the passage at startLine of it "
        "(by meaning when embeddings exist, else by its most distinctive words). Use it to gather what else "
        "the project says about the subject of a file: notes on the same topic, earlier decisions about it, "
        "other scenes with a character, possible contradictions. Returns results in the same shape as "
        "`search`, and indexed=false when the file exists but is not indexed yet. A path that does not exist, "
        "a startLine past its end, or a file that `get` would refuse (excluded by the project's context settings, "
        "not visible), is an error.",
        RelatedParams,
        ("path", "startLine", "endLine", "maxResults", "maxChapter"),
        RELATED_OUTPUT,
        required=("path",),
    ),
    ToolSpec(
        "status",
        "Index status",
        "Report what the search index holds: project root, number of files and chunks, how many chunks have "
        "embeddings, the embedding provider and model, when it last indexed, whether indexing is running, and "
        "`degraded` (why search is keyword-only, if it is), and `entityTypes`: the file types you can filter "
        "search by (filter.entityTypes) with how many files each. Use it when search results look incomplete or "
        "empty, to tell whether the project is still being indexed, or to learn the types before filtering.",
        StatusParams,
        (),
        STATUS_OUTPUT,
    ),
    ToolSpec(
        "mentions",
        "Where a character or place is mentioned",
        "Every mention of one entity (a character, place or thing with a profile page: its name and aliases, "
        "any case, possessives too, never inside other words, code or frontmatter) across the project: per "
        "chapter counts, the first and last appearance (path and 1-based line), chapters since it was last "
        "seen, mentions outside chapters, and the single mentions (path, line, surface). Use it for continuity "
        "work: when a character was introduced, whether they have been absent too long, where to check what "
        "was said about them. An unknown name is an error naming it.",
        MentionsParams,
        ("name", "maxChapter", "limit"),
        MENTIONS_OUTPUT,
    ),
    ToolSpec(
        "check_passage",
        "Evidence for a continuity check",
        "Gather the evidence to check a passage (one you wrote or drafted) against the project's profiles: for "
        "every character, place or thing it names, the profile's facts and text and the earlier passages (up to "
        "`chapter`, only scenes that entity is in or mentioned in) most related to what the passage says about "
        "it, within maxTokens. It does not judge: read the evidence and say whether the passage contradicts it "
        "(a changed eye colour, someone knowing what they cannot know yet).",
        CheckPassageParams,
        ("text", "chapter", "maxTokens"),
        CHECK_PASSAGE_OUTPUT,
    ),
    ToolSpec(
        "names",
        "Names that drift and names without a page",
        "List words close to an entity's name or alias but not equal (`Dormaan` for `Dorman`: edit distance "
        "and sound; words the project also writes in lower case are ignored), with where each first appears, "
        "and capitalised names used often mid-sentence that have no entity page. Use it to find misspelt names "
        "and people or places the profiles are missing.",
        NamesParams,
        ("drift", "unknown", "minCount"),
        NAMES_OUTPUT,
    ),
)
TOOL_NAMES = tuple(t.name for t in TOOLS)
_SPECS = {t.name: t for t in TOOLS}


def check_arguments(spec: ToolSpec, arguments: Any) -> dict[str, Any]:
    """The arguments when they fit the tool's input schema (null fields dropped); InvalidRequest naming the
    first bad field otherwise."""
    return parse_arguments(spec.request, arguments, spec.fields, spec.required, spec.name)


def _present(value: Any) -> Any:
    """`value` without the null fields of its objects, at any depth (absent means null)."""
    if isinstance(value, Mapping):
        return {k: _present(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_present(v) for v in value]
    return value


# -- the face ----------------------------------------------------------------------------------------------------
class McpFace:
    """One project served to agents: tool calls in, engine answers out. Blocking; safe from several threads."""

    def __init__(self, project: Project) -> None:
        self.project = project
        self.live = LiveIndex(project, name="mcp")
        # (unset: public only, never what `defaultRole` sees: that is the author's own role on their machine, and an
        # agent got their private notes)
        self.role = project.settings.mcp_role
        # what the agent may see (entityTypes, files, chunks, embedded chunks), by index state and filter
        self._seen: tuple[tuple[Any, ...], _Seen, float] | None = None  # (key, counts, when)

    # -- index life cycle ------------------------------------------------------------------------------------
    def start(self) -> None:
        """Bring the index up to date in the background (answers meanwhile come from the index as it stands),
        and with `watch`, index files changed on disk once they have been quiet for `quietPeriodSeconds`."""
        s = self.project.settings
        if not s.enabled:
            return
        if s.auto_index:
            self.project.expect_run()  # status says `scanning` from the first call, never idle with 0 files
            self.live.start_run()
        if s.watch:
            try:
                self.live.watch(True)
            except Exception as exc:  # noqa: BLE001 - e.g. the inotify watch limit: calls still sync lazily
                log.warning("not watching %s (%s); files are synced before each call", self.project.root, exc)
                return
            self.live.follow()

    @property
    def indexing_in_background(self) -> bool:
        return self.live.running_in_background

    def refresh(self) -> None:
        """Index files changed on disk since the last call (skipped while the first full run is going)."""
        self.live.sync_before_call()

    def close(self) -> None:
        """Stop watching and indexing, then close the index (left open if a run does not stop in time)."""
        self.live.close(SHUTDOWN_GRACE)

    # -- tools -----------------------------------------------------------------------------------------------
    def call(self, name: str, arguments: Any) -> dict[str, Any]:
        """Run one tool; InvalidRequest / SaiplingError for anything the caller should fix or know."""
        spec = _SPECS.get(name)
        if spec is None:
            close = difflib.get_close_matches(str(name), TOOL_NAMES, n=1)
            hint = f"did you mean {close[0]}?" if close else f"tools are {', '.join(TOOL_NAMES)}"
            raise InvalidRequest("name", f"{name!r} is not a tool ({hint})")
        args = check_arguments(spec, arguments)
        handler: Callable[[dict[str, Any]], dict[str, Any]] = getattr(self, f"_tool_{name}")
        self.refresh()
        out = handler(args)
        if isinstance(out.get("warnings"), list):
            out = {**out, "warnings": _agent_warnings(out["warnings"])}
        if isinstance(out.get("degraded"), str) and _COUNTED.search(out["degraded"]):
            out = {**out, "degraded": self._agent_degraded(out["degraded"])}
        return _present(out)

    def _agent_degraded(self, text: str) -> str | None:
        """`degraded` with the agent's own counts: "N of M chunks have no embeddings" counts every chunk of the index
        (M: its size, private and excluded files included; N: a private note written a moment ago), and "N file(s)
        changed" every file saved. None when every chunk it may see has its embedding ("0 of 1 chunks have no
        embeddings" told it that a file it may not see was written a moment ago)."""
        seen = self._what_it_sees()
        if _CHUNKS_COUNTED.search(text) and seen.chunks - seen.embedded <= 0:
            return None
        text = _CHUNKS_COUNTED.sub(f"{seen.chunks - seen.embedded} of {seen.chunks} chunks", text)
        return _FILES_COUNTED.sub("files changed", text)

    def _visible(self, params: dict[str, Any]) -> dict[str, Any]:
        """The rules an agent cannot change: the MCP role ("": a role no setting defines, public only), exclusions
        respected."""
        params["role"] = self.role
        return params

    def _tool_search(self, args: dict[str, Any]) -> dict[str, Any]:
        params = self._visible({**args, "source": "agent", "respectContextSettings": True})
        response = self.project.search(params)
        out = {**response, "results": self._agent_results(response["results"])}
        if not out["results"] and "note" not in out:
            # (the agent is told to say nothing relevant exists on an empty answer: not when its filter did it)
            from ..retrieval.filter_notes import empty_search_note

            if note := empty_search_note(self.project, params):
                out["note"] = note
        return out

    def _tool_get(self, args: dict[str, Any]) -> dict[str, Any]:
        return self.project.get(self._visible({**args, "respectContextSettings": True}))

    def _tool_enrich_context(self, args: dict[str, Any]) -> dict[str, Any]:
        return self.project.enrich(self._visible(args))

    def _tool_related(self, args: dict[str, Any]) -> dict[str, Any]:
        response = self.project.related(self._visible({**args, "respectContextSettings": True}))
        return {**response, "results": self._agent_results(response["results"])}

    def _agent_results(self, results: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Results without the editor-only fields, each with its file's `modified` time (UTC, as last indexed): an
        agent's memory holds notes a later one contradicts, and nothing else in a result says which is newer."""
        states = self.project.store.file_states_for({r["filePath"] for r in results}) if results else {}
        out = []
        for r in results:
            item = _agent_result(r)
            if (st := states.get(r["filePath"])) is not None and st.mtime_ns:
                item["modified"] = _iso_utc(st.mtime_ns)
            out.append(item)
        return out

    def _tool_mentions(self, args: dict[str, Any]) -> dict[str, Any]:
        from ..retrieval import mentions

        return mentions.request(self.project, self._visible(args))

    def _tool_check_passage(self, args: dict[str, Any]) -> dict[str, Any]:
        from ..retrieval import continuity

        return continuity.check_passage(self.project, self._visible(args))

    def _tool_names(self, args: dict[str, Any]) -> dict[str, Any]:
        from ..retrieval import names

        return names.request(self.project, self._visible(args))

    def _tool_status(self, args: dict[str, Any]) -> dict[str, Any]:
        status = self.project.status()
        status["isIndexing"] = status["isIndexing"] or self.indexing_in_background
        status.pop("excludedFiles", None)  # (how many files the author keeps from agents is the author's)
        # (sums over every indexed file: the index's totals less what the agent sees told it how many files, and
        # how much text, it may not see)
        for key in _WHOLE_INDEX:
            status.pop(key, None)
        if isinstance(status.get("progress"), dict):  # the file being read may be one the agent may not see
            status["progress"]["currentFile"] = None
        seen = self._what_it_sees()
        status["entityTypes"] = dict(seen.types)
        status["totalFiles"], status["totalChunks"] = seen.files, seen.chunks
        status["embeddedChunks"] = seen.embedded
        if status.get("unembeddedChunks"):  # (0 when there is nothing to embed: provider none)
            status["unembeddedChunks"] = seen.chunks - seen.embedded
        return status

    def _what_it_sees(self) -> _Seen:
        """The files and chunks an agent may see: each type of its files and how many (what `entityTypes` filters
        by: a rules vault's `document`, its monsters' `giant`, `dragon`...), its files, chunks and embedded chunks."""
        from ..retrieval.search import SearchRequest, build_filter

        flt = build_filter(self.project, SearchRequest(query="", role=self.role, respect_context_settings=True))
        store = self.project.store
        # (a count over every chunk: 0.2 s at 56k chunks; asked again only when the index or the filter changed)
        key = (id(store), store.index_version(), repr(flt))
        # while a run writes, every poll is a new index state: counted again at most every SEEN_WHILE_INDEXING s
        # (a count over a large index is seconds of a worker's time, and the figures move under it anyway)
        fresh = self._seen is not None and (
            self._seen[0] == key
            or (
                self._seen[0][2] == key[2]
                and (self.project.state.is_indexing or self.indexing_in_background)
                and time.monotonic() - self._seen[2] < SEEN_WHILE_INDEXING
            )
        )
        if not fresh:
            counts = store.entity_type_counts(flt)
            ids = store.filtered_ids(flt) if counts else ()
            whole = store.stats()
            if not len(ids) or not whole.embedded_chunks:
                embedded = 0
            elif whole.embedded_chunks >= whole.total_chunks:  # (every chunk has its vector: no need to look)
                embedded = len(ids)
            else:  # (a run is embedding: which of the agent's chunks have theirs)
                embedded = len(ids) - len(store.without_vectors([int(i) for i in ids]))
            types = dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
            self._seen = (key, _Seen(types, sum(counts.values()), len(ids), embedded), time.monotonic())
        return self._seen[1]


SEEN_WHILE_INDEXING = 5.0  # seconds: how long the agent's counts stand while a run changes the index
# what status.degraded and search.partly_embedded count over the whole index
_CHUNKS_COUNTED = re.compile(r"\b\d+ of \d+ chunks\b")
_FILES_COUNTED = re.compile(r"\b\d+ file\(s\) changed\b")
_COUNTED = re.compile(f"{_CHUNKS_COUNTED.pattern}|{_FILES_COUNTED.pattern}")
# status fields that add up every indexed file, the agent's hidden ones too
_WHOLE_INDEX = ("totalTokens", "estimatedReindexCostUsd", "indexBytes")


@dataclass(frozen=True)
class _Seen:
    types: dict[str, int]
    files: int
    chunks: int
    embedded: int


def _agent_warnings(warnings: list[Any]) -> list[Any]:
    """An agent's warnings: what `.context_settings.json` says of its own entries names the paths its author
    excludes (a misspelt key, one with spaces, one that names no indexed file: `diary/affair.txt`), so it gets how
    many notes there are, not them; that the file cannot be read (and what applies meanwhile) it is told."""
    out: list[Any] = []
    for w in warnings:
        if isinstance(w, str) and w.startswith(f"{CONTEXT_FILE}: "):
            line = f"{CONTEXT_FILE} has notes for the project's author (`saipling status` shows them)"
            if line not in out:
                out.append(line)
        else:
            out.append(w)
    return out


_EDITOR_ONLY = ("uri", "range", "preview")  # LSP conveniences (0-based ranges, file URIs): not for agents


def _agent_result(r: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in r.items() if k not in _EDITOR_ONLY}


def _iso_utc(mtime_ns: int) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(mtime_ns / 1e9, dt.UTC).isoformat(timespec="seconds")


# -- the protocol (official SDK) -------------------------------------------------------------------------------
def to_json(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, default=str)


def build_server(face: McpFace) -> Any:
    """The SDK's low-level server with our tools; each call runs on a worker thread."""
    import anyio
    import mcp.types as types
    from mcp.server.lowlevel import Server

    tools = [
        types.Tool(
            name=t.name,
            title=t.title,
            description=t.description,
            input_schema=t.input_schema,
            output_schema=t.output_schema,
            annotations=types.ToolAnnotations(
                title=t.title, read_only_hint=True, idempotent_hint=True, open_world_hint=False
            ),
        )
        for t in TOOLS
    ]

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    def error(message: str) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(text=message)], is_error=True)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            result = await anyio.to_thread.run_sync(face.call, params.name, params.arguments)
        except InvalidRequest as exc:
            return error(f"invalid argument {exc}")
        except SaiplingError as exc:
            return error(str(exc))
        except Exception as exc:  # noqa: BLE001 - a tool call must never take the server down
            log.exception("tool %s failed", params.name)
            return error(f"internal error: {type(exc).__name__}: {exc}")
        return types.CallToolResult(content=[types.TextContent(text=to_json(result))], structured_content=result)

    return Server(
        SERVER_NAME,
        version=__version__,
        title="saipling search",
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def broken_line_reply(exc: Exception) -> Any:
    """The JSON-RPC error for a stdin line the SDK could not read as a message (invalid JSON, a lone
    surrogate, not an object, a bad id), with the request's id when it can still be read; None without one
    (a notification, or nothing readable: only logged)."""
    from mcp import types
    from mcp.shared.message import SessionMessage

    errors = exc.errors() if hasattr(exc, "errors") else []
    line = next((e.get("input") for e in errors if isinstance(e.get("input"), str)), None)
    invalid_json = any(e.get("type") == "json_invalid" for e in errors)
    log.warning("unreadable message on stdin: %s", str(errors[0].get("msg")) if errors else exc)
    try:
        data = json.loads(line) if line is not None else None
    except (ValueError, RecursionError):
        # cut short, or nested thousands deep: its top-level id may still be readable
        msg_id, invalid_json = salvage_id(str(line).encode("utf-8", "surrogateescape")), True
    else:
        msg_id = data.get("id") if isinstance(data, dict) and "method" in data else None
    if not is_request_id(msg_id):
        return None
    code, what = (types.PARSE_ERROR, "Parse error") if invalid_json else (types.INVALID_REQUEST, "Invalid Request")
    detail = " ".join(str(errors[0].get("msg", "")).split())[:200] if errors else ""
    error = types.ErrorData(code=code, message=f"{what}: {detail}" if detail else what)
    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=msg_id, error=error))


def run(project: Project) -> None:
    """Serve `project` over stdio until the client closes the connection."""
    import anyio
    from mcp.server.stdio import stdio_server

    face = McpFace(project)
    server = build_server(face)

    async def main() -> None:
        async with stdio_server() as (read_stream, write_stream):
            checked_in, checked_out = anyio.create_memory_object_stream[Any](0)

            async def answer_broken_lines() -> None:  # the SDK drops them in silence: the client would wait
                async with checked_in:
                    async for item in read_stream:
                        if isinstance(item, Exception):
                            if (reply := broken_line_reply(item)) is not None:
                                await write_stream.send(reply)
                            continue
                        await checked_in.send(item)
                # end of input: the client is gone; calls in flight must not wait on a provider
                face.project.abort_calls()

            async with anyio.create_task_group() as tg:
                tg.start_soon(answer_broken_lines)
                await server.run(checked_out, write_stream, server.create_initialization_options())
                tg.cancel_scope.cancel()

    face.start()
    try:
        anyio.run(main)
    finally:
        face.close()

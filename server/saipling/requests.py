"""One declarative schema per engine request, shared by every face (the language server, the CLI, an MCP server).

Each request is a pydantic model: camelCase names on the wire (snake_case accepted too), strict types (no
"3" for 3, no true for 1), value ranges and choices, and no unknown fields: a misspelt field is refused, never
silently ignored. `parse(Model, params)` returns the model or raises InvalidRequest naming the field (dotted,
with list indexes: `filter.bookID`, `paths[1]`) and, for an unknown name, the closest valid one. The language
server answers InvalidRequest with JSON-RPC InvalidParams; the CLI prints it and exits 2.

Defaults that come from the user's settings (maxResults, maxSearchTokens) stay None here: the engine applies them.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from .errors import InvalidRequest
from .paths import glob_problem
from .request_checks import MAX_QUERY_CHARS, MAX_RESULTS, MODES, SOURCES, check_query  # noqa: F401 - re-exported

Mode = Literal["hybrid", "semantic", "lexical"]
Source = Literal["editor", "agent", "cli", "eval"]


class Request(BaseModel):
    """Base of every request schema."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        strict=True,
        allow_inf_nan=False,
        frozen=True,
    )

    # every request that works on one folder may name it; the server resolves it and removes it
    workspace_folder: str | None = None


_query = check_query  # (request_checks.py: the CLI's search checks its query without pydantic)


class SearchFilter(BaseModel):
    """`saipling/search` `filter`: conditions applied before ranking."""

    model_config = Request.model_config

    entity_types: list[str] | None = None
    file_types: list[str] | None = None
    book_id: str | None = None
    chapter_id: str | None = None
    path_prefix: str | None = None
    glob: str | None = None
    corpus: str | None = None
    max_chapter: int | None = None
    known_by: str | None = Field(None, min_length=1, max_length=500)

    @field_validator("glob")
    @classmethod
    def _glob(cls, value: str | None) -> str | None:
        if value is not None and (problem := glob_problem(value)) is not None:
            raise ValueError(problem)
        return value


FILTER_FIELDS = tuple(to_camel(name) for name in SearchFilter.model_fields)


class SearchParams(Request):
    """`saipling/search` (SPEC 8)."""

    query: str
    max_results: int | None = Field(None, ge=1, le=MAX_RESULTS)
    min_score: float | None = Field(None, ge=0.0, le=1.0)
    mode: Mode | None = None
    filter: SearchFilter | None = None
    role: str | None = None
    respect_context_settings: bool | None = None
    source: Source | None = None
    explain: bool | None = None

    @field_validator("query")
    @classmethod
    def _text(cls, value: str) -> str:
        return _query(value, MAX_QUERY_CHARS)


class EnrichParams(Request):
    """`saipling/enrichContext` (SPEC 9)."""

    query: str
    skill: str | None = None
    skill_config: dict[str, Any] | None = None
    loaded_files: list[str] | None = None
    book_id: str | None = None
    want_search: bool | None = None
    max_results: int | None = Field(None, ge=1)
    max_search_tokens: int | None = Field(None, ge=0)
    total_budget_tokens: int | None = Field(None, ge=0)
    loaded_tokens: int | None = Field(None, ge=0)
    role: str | None = None
    known_by: str | None = Field(None, min_length=1, max_length=500)
    max_chapter: int | None = Field(None, ge=0)

    @field_validator("query")
    @classmethod
    def _text(cls, value: str) -> str:
        return _query(value, None)


class RelatedParams(Request):
    """`saipling/related`: `path` (or `uri`) of the file to find passages like; `startLine`..`endLine` (1-based,
    inclusive) narrow it to the passage at those lines (a scene of a long chapter)."""

    path: str | None = None
    uri: str | None = None
    start_line: int | None = Field(None, ge=1)
    end_line: int | None = Field(None, ge=1)
    max_results: int | None = Field(None, ge=1, le=MAX_RESULTS)
    role: str | None = None


class GetParams(Request):
    """`saipling/get`: lines of a project file."""

    path: str | None = None
    uri: str | None = None
    start_line: int | None = Field(None, ge=1)
    lines: int | None = Field(None, ge=1)
    role: str | None = None
    respect_context_settings: bool | None = None


class MentionsParams(Request):
    """`saipling/mentions`: where the entity called `name` (a name, an alias, its file or slug) is mentioned:
    per chapter counts, first and last appearance, chapters since last seen; up to `limit` mentions listed
    (0: none), none past chapter `maxChapter`."""

    name: str = Field(min_length=1, max_length=500)
    max_chapter: int | None = Field(None, ge=0)
    limit: int | None = Field(None, ge=0, le=100_000)
    role: str | None = None


class NamesParams(Request):
    """`saipling/names`: words close to an entity's name (`drift`) and capitalised names with no entity page
    (`unknown`, seen mid-sentence at least `minCount` times); both lists when neither is asked."""

    drift: bool | None = None
    unknown: bool | None = None
    min_count: int | None = Field(None, ge=1, le=1_000_000)
    role: str | None = None


class CheckPassageParams(Request):
    """`saipling/checkPassage`: for each entity `text` names, its profile facts and the passages up to chapter
    `chapter` most related to what `text` says about it, within `maxTokens` (default 4000)."""

    text: str = Field(min_length=1, max_length=100_000)
    chapter: int | None = Field(None, ge=0)
    max_tokens: int | None = Field(None, ge=1, le=200_000)
    role: str | None = None


class StatusParams(Request):
    """`saipling/status`."""


class ReindexParams(Request):
    """`saipling/reindex`."""

    full: bool | None = None
    paths: list[str] | None = None


class ClearIndexParams(Request):
    """`saipling/clearIndex`."""


class PauseIndexingParams(Request):
    """`saipling/pauseIndexing`: stop embedding (the text index stays live)."""


class ResumeIndexingParams(Request):
    """`saipling/resumeIndexing`."""


class AdvanceClockParams(Request):
    """`saipling/_test/advanceClock` (test builds only)."""

    seconds: float


class TickParams(Request):
    """`saipling/_test/tick` (test builds only)."""


class WorkspaceSymbolParams(Request):
    """`workspace/symbol`, checked raw: lsprotocol would coerce `query: 5` to "5"."""

    query: str
    work_done_token: int | str | None = None
    partial_result_token: int | str | None = None


REQUESTS: dict[str, type[Request]] = {
    "saipling/search": SearchParams,
    "saipling/enrichContext": EnrichParams,
    "saipling/related": RelatedParams,
    "saipling/get": GetParams,
    "saipling/status": StatusParams,
    "saipling/mentions": MentionsParams,
    "saipling/names": NamesParams,
    "saipling/checkPassage": CheckPassageParams,
    "saipling/reindex": ReindexParams,
    "saipling/clearIndex": ClearIndexParams,
    "saipling/pauseIndexing": PauseIndexingParams,
    "saipling/resumeIndexing": ResumeIndexingParams,
    "saipling/_test/advanceClock": AdvanceClockParams,
    "saipling/_test/tick": TickParams,
    "workspace/symbol": WorkspaceSymbolParams,
}

_EXPECTED = {
    "string_type": "a string",
    "string_unicode": "a string",
    "int_type": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "bool_type": "a boolean",
    "list_type": "a list",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
}


def field_name(loc: tuple[int | str, ...]) -> str:
    """('filter', 'bookID') -> 'filter.bookID'; ('paths', 1) -> 'paths[1]'."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "params"


def _model_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The model that holds the last element of `loc` (a nested object's model), if any."""
    for part in loc:
        if isinstance(part, int):
            continue
        info = next((f for n, f in model.model_fields.items() if part in (n, f.alias)), None)
        if info is None:
            return None
        nested = _nested_model(info.annotation)
        if nested is None:
            return None
        model = nested
    return model


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        for arg in typing.get_args(annotation):
            if (found := _nested_model(arg)) is not None:
                return found
    return None


def suggestion(name: str, valid: list[str]) -> str | None:
    """The valid name closest to a misspelt one (case differences first), or None."""
    folded = {v.casefold(): v for v in valid}
    if name.casefold() in folded:
        return folded[name.casefold()]
    close = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
    return close[0] if close else None


def _describe(value: Any) -> str:
    return f"{type(value).__name__} {value!r:.60}"


def error_message(model: type[BaseModel], err: Mapping[str, Any]) -> tuple[str, str]:
    """(field, message) for one pydantic error, in the project's wording."""
    loc = tuple(err.get("loc") or ())
    name = field_name(loc)
    kind = err.get("type", "")
    ctx = err.get("ctx") or {}
    if kind == "extra_forbidden":
        holder = _model_at(model, loc[:-1]) or model
        valid = [f.alias or n for n, f in holder.model_fields.items()]
        close = suggestion(str(loc[-1]), valid)
        what = "a filter" if holder is SearchFilter else "a field of this request"
        hint = f"did you mean {close}?" if close else f"expected one of {', '.join(valid)}"
        return name, f"is not {what} ({hint})"
    if kind == "missing":
        return name, "is required"
    if kind == "literal_error":
        return name, f"must be one of {ctx.get('expected', '')}".replace("'", "")
    if kind in _EXPECTED:
        return name, f"expected {_EXPECTED[kind]}, got {_describe(err.get('input'))}"
    if kind == "value_error":
        return name, str(ctx.get("error", err.get("msg", "")))
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        op = {"greater_than_equal": ">=", "less_than_equal": "<=", "greater_than": ">", "less_than": "<"}[
            kind
        ]
        bound = next(iter(ctx.values()), "")
        return name, f"must be {op} {bound}, got {err.get('input')!r:.60}"
    if kind == "finite_number":
        return name, "must be a finite number"
    return name, str(err.get("msg", "is invalid"))


def parse(model: type[Request], params: Any) -> Any:
    """`params` (a dict from JSON, the CLI or code) checked against `model`; InvalidRequest naming the first
    bad field otherwise. Null fields count as absent."""
    if params is None:
        params = {}
    if not isinstance(params, Mapping):
        raise InvalidRequest("params", f"expected an object, got {type(params).__name__}")
    try:
        return model.model_validate({k: v for k, v in params.items() if v is not None})
    except ValidationError as exc:
        field, message = error_message(model, exc.errors()[0])
        raise InvalidRequest(field, message) from None


def validate(method: str, params: Any) -> dict[str, Any]:
    """The params of `method` (a known request) checked and returned as a plain dict, without null fields."""
    model = REQUESTS[method]
    parse(model, params)
    return {k: v for k, v in (params or {}).items() if v is not None}

"""One declarative schema per engine request, shared by every face (the language server, the CLI, an MCP server).

Each request is a pydantic model: camelCase names on the wire (snake_case accepted too), strict types (no
"3" for 3, no true for 1), value ranges and choices, and no unknown fields: a misspelt field is refused, never
silently ignored. `parse(Model, params)` returns the model or raises InvalidRequest naming the field (dotted,
with list indexes: `filter.bookID`, `paths[1]`) and, for an unknown name, the closest valid one. The language
server answers InvalidRequest with JSON-RPC InvalidParams; the CLI prints it and exits 2.

Defaults that come from the user's settings (maxResults, maxSearchTokens) stay None here: the engine applies them.
"""

from __future__ import annotations

import copy
import difflib
import functools
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue

from ..config.settings import MAX_CHAPTER
from ..errors import InvalidRequest
from ..paths import glob_problem
from .request_checks import MAX_QUERY_CHARS, MAX_RESULTS, check_query

# List arguments past any real project's needs are refused with a clear error (100,000 entity types reached SQLite
# as one `?` each: "too many SQL variables")
MAX_TYPES = 1000
MAX_LOADED_FILES = 100_000

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


_query = check_query  # (retrieval/request_checks.py: the CLI's search checks its query without pydantic)


class SearchFilter(BaseModel):
    """Narrow the search to some files before ranking (every condition given must hold)."""

    model_config = Request.model_config

    entity_types: list[str] | None = Field(
        None,
        max_length=MAX_TYPES,
        description="Only files of these types: frontmatter `type` (e.g. decision, person, character; `document` "
        "for files without one). The MCP `status` tool lists the types there are.",
    )
    file_types: list[str] | None = Field(
        None,
        max_length=MAX_TYPES,
        description="Only these file types, as the project's path rules classify them (e.g. note, scene).",
    )
    book_id: str | None = Field(
        None, description="Only files of this book or volume (frontmatter `book`, or a books/<id>/ folder)."
    )
    chapter_id: str | None = Field(None, description="Only this chapter (ch-NN).")
    path_prefix: str | None = Field(None, description="Only files under this folder, relative to the root.")
    glob: str | None = Field(None, description="Only files matching this glob, e.g. notes/**/*.md.")
    corpus: str | None = Field(None, description="Only this named corpus of the project.")
    max_chapter: int | None = Field(
        None, ge=0, le=MAX_CHAPTER, description="Nothing from a chapter after this number (a reader's spoiler horizon)."
    )
    known_by: str | None = Field(
        None,
        min_length=1,
        max_length=500,
        description="Only what this character knows: scenes whose pov they are or that mention them (with "
        "maxChapter: by that chapter).",
    )

    @field_validator("glob")
    @classmethod
    def _glob(cls, value: str | None) -> str | None:
        if value is not None and (problem := glob_problem(value)) is not None:
            raise ValueError(problem)
        return value


FILTER_FIELDS = tuple(to_camel(name) for name in SearchFilter.model_fields)


class SearchParams(Request):
    """`saipling/search` (SPEC 8)."""

    query: str = Field(
        description="What to look for: a question, a description, or exact words (quote a phrase to match it "
        "as written).",
        json_schema_extra={"minLength": 1, "maxLength": MAX_QUERY_CHARS},
    )
    max_results: int | None = Field(
        None,
        ge=1,
        le=MAX_RESULTS,
        description="How many passages to return (default: the project's setting, 5).",
    )
    min_score: float | None = Field(None, ge=0.0, le=1.0, description="Drop results scoring below this (0..1).")
    mode: Mode | None = Field(
        None, description="hybrid (default): meaning and words; semantic: meaning only; lexical: words only."
    )
    filter: SearchFilter | None = Field(None, description="Narrow the search to some files before ranking.")
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

    query: str = Field(description="The task or question the context is for.", json_schema_extra={"minLength": 1})
    skill: str | None = Field(
        None,
        description="Name of a skill TOML in the project's skills folder (its [context.vector_search] settings apply).",
    )
    skill_config: dict[str, Any] | None = Field(
        None,
        description="The same settings inline: {enabled, mode: auto|always|never, max_results, max_search_tokens, "
        "min_relevance (0.5: passages scoring lower are left out), filter_entity_types, known_by, max_chapter}.",
    )
    loaded_files: list[str] | None = Field(
        None, max_length=MAX_LOADED_FILES, description="Files already in your context: their passages are not repeated."
    )
    book_id: str | None = Field(None, description="Only this book or volume (and files that belong to none).")
    want_search: bool | None = Field(
        None, description="With a skill in auto mode: whether to search (absent: decided from the query)."
    )
    max_results: int | None = Field(None, ge=1, description="At most this many passages.")
    max_search_tokens: int | None = Field(
        None, ge=0, description="Token budget for the passages (default: the skill's, else 15000)."
    )
    total_budget_tokens: int | None = Field(None, ge=0)
    loaded_tokens: int | None = Field(None, ge=0)
    role: str | None = None
    known_by: str | None = Field(
        None,
        min_length=1,
        max_length=500,
        description="Only what this character knows: scenes whose pov they are or that mention them.",
    )
    max_chapter: int | None = Field(None, ge=0, le=MAX_CHAPTER, description="Spoiler horizon: nothing after chapter N.")

    @field_validator("query")
    @classmethod
    def _text(cls, value: str) -> str:
        return _query(value, None)


class RelatedParams(Request):
    """`saipling/related`: `path` (or `uri`) of the file to find passages like; `startLine`..`endLine` (1-based,
    inclusive) narrow it to the passage at those lines (a scene of a long chapter)."""

    path: str | None = Field(None, description="A project file, relative to the root.")
    uri: str | None = None
    start_line: int | None = Field(
        None, ge=1, description="Only the passage at this line (1-based) of the file, not the whole file."
    )
    end_line: int | None = Field(None, ge=1, description="With startLine: the passage's last line.")
    max_results: int | None = Field(None, ge=1, le=MAX_RESULTS, description="How many passages (default 5).")
    max_chapter: int | None = Field(None, ge=0, le=MAX_CHAPTER, description="Spoiler horizon: nothing after chapter N.")
    role: str | None = None
    respect_context_settings: bool | None = None  # (false: an author's own files `.context_settings.json` excludes)


class GetParams(Request):
    """`saipling/get`: lines of a project file."""

    path: str | None = Field(None, description="A project file, relative to the root (as search results give it).")
    uri: str | None = None
    start_line: int | None = Field(None, ge=1, description="First line to return (1-based; default 1).")
    lines: int | None = Field(None, ge=1, description="How many lines (default: to the end of the file, at most 5000).")
    role: str | None = None
    respect_context_settings: bool | None = None


class MentionsParams(Request):
    """`saipling/mentions`: where the entity called `name` (a name, an alias, its file or slug) is mentioned:
    per chapter counts, first and last appearance, chapters since last seen; up to `limit` mentions listed
    (0: none), none past chapter `maxChapter`."""

    name: str = Field(
        min_length=1,
        max_length=500,
        description="A character's or place's name or alias (any case), or its file's path.",
    )
    max_chapter: int | None = Field(None, ge=0, le=MAX_CHAPTER, description="Spoiler horizon: nothing after chapter N.")
    limit: int | None = Field(
        None,
        ge=0,
        le=100_000,
        description="How many single mentions to list (default 200; 0: only the counts).",
    )
    role: str | None = None


class NamesParams(Request):
    """`saipling/names`: words close to an entity's name (`drift`) and capitalised names with no entity page
    (`unknown`, seen mid-sentence at least `minCount` times); both lists when neither is asked."""

    drift: bool | None = Field(
        None, description="List words close to an entity's name or alias but not equal (misspelt names)."
    )
    unknown: bool | None = Field(
        None, description="List capitalised names used often mid-sentence that have no entity page."
    )
    min_count: int | None = Field(
        None, ge=1, le=1_000_000, description="With unknown: how often a name must appear mid-sentence (default 5)."
    )
    role: str | None = None


class CheckPassageParams(Request):
    """`saipling/checkPassage`: for each entity `text` names, its profile facts and the passages up to chapter
    `chapter` most related to what `text` says about it, within `maxTokens` (default 4000)."""

    text: str = Field(
        min_length=1, max_length=100_000, description="The passage to check (written or drafted), as markdown."
    )
    chapter: int | None = Field(
        None,
        ge=0,
        le=MAX_CHAPTER,
        description="The passage's chapter: evidence comes from this chapter and earlier ones only.",
    )
    max_tokens: int | None = Field(
        None, ge=1, le=200_000, description="Token budget for all the evidence returned (default 4000)."
    )
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
        op = {"greater_than_equal": ">=", "less_than_equal": "<=", "greater_than": ">", "less_than": "<"}[kind]
        bound = next(iter(ctx.values()), "")
        return name, f"must be {op} {bound}, got {err.get('input')!r:.60}"
    if kind == "finite_number":
        return name, "must be a finite number"
    if kind in ("string_too_short", "too_short") and ctx.get("min_length") == 1:  # (as `search` says of its query)
        return name, "must not be empty"
    if kind in ("string_too_long", "too_long"):
        unit = "characters" if kind == "string_too_long" else "items"
        return name, f"is too long (at most {ctx.get('max_length')} {unit})"
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


# -- one request as a tool's arguments (the MCP face) -------------------------------------------------------------
class _PortableJsonSchema(GenerateJsonSchema):
    """JSON Schema that every MCP client reads: an optional field is left out of `required` (never a nullable
    `anyOf [T, null]` or `type: [T, "null"]`, which some clients refuse), no titles, no `default: null`."""

    def nullable_schema(self, schema: Any) -> JsonSchemaValue:  # (a pydantic_core NullableSchema)
        return self.generate_inner(schema["schema"])  # null counts as absent (parse): optional, not nullable

    def default_schema(self, schema: Any) -> JsonSchemaValue:
        out = super().default_schema(schema)
        if out.get("default", ...) is None:
            del out["default"]
        return out

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


def _inline(node: Any, defs: Mapping[str, Any]) -> Any:
    """The schema `node` with every `$ref` to `defs` replaced by the definition itself (no `$defs` left; some
    clients do not resolve references) and without titles."""
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        return _inline({**target, **{k: v for k, v in node.items() if k != "$ref"}}, defs)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("$defs", "title"):
            continue
        if key == "properties" and isinstance(value, dict):  # (field names, not keywords: a field may be `title`)
            out[key] = {name: _inline(sub, defs) for name, sub in value.items()}
        else:
            out[key] = _inline(value, defs)
    return out


@functools.cache
def _schema(model: type[Request]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, schema_generator=_PortableJsonSchema)
    return _inline(raw, raw.get("$defs", {}))


def arguments_schema(model: type[Request], fields: tuple[str, ...], required: tuple[str, ...] = ()) -> dict[str, Any]:
    """The JSON Schema of `model` restricted to `fields` (camelCase), `required` added to the model's own
    required fields: a tool's input schema generated from the request it makes, checked by `parse_arguments`."""
    full = _schema(model)
    props = full["properties"]
    missing = [f for f in (*fields, *required) if f not in props]
    if missing:
        raise ValueError(f"{model.__name__} has no field {', '.join(missing)}")
    need = [f for f in fields if f in required or f in full.get("required", ())]
    schema: dict[str, Any] = {"type": "object", "properties": {f: copy.deepcopy(props[f]) for f in fields}}
    if need:
        schema["required"] = need
    schema["additionalProperties"] = False
    return schema


def parse_arguments(
    model: type[Request],
    arguments: Any,
    fields: tuple[str, ...],
    required: tuple[str, ...] = (),
    what: str = "",
) -> dict[str, Any]:
    """`arguments` checked as `arguments_schema(model, fields, required)` describes them, by the same code
    as every other face (`parse`); InvalidRequest naming the first bad field otherwise. Returns the arguments
    without null fields (null counts as absent)."""
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, Mapping):
        raise InvalidRequest("arguments", f"expected an object, got {type(arguments).__name__}")
    for name in arguments:
        if name not in fields:
            close = suggestion(str(name), list(fields))
            hint = f"did you mean {close}?" if close else f"parameters are {', '.join(fields) or 'none'}"
            raise InvalidRequest(str(name), f"is not a parameter{' of ' + what if what else ''} ({hint})")
    args = {k: v for k, v in arguments.items() if v is not None}
    for name in required:
        if name not in args:
            raise InvalidRequest(name, "is required")
    parse(model, args)
    return args

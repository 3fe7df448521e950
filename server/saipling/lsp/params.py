"""Validation of the custom requests' params: plain dicts out, InvalidParams naming the field otherwise.

Only types are checked here (the engine checks values and ranges and raises InvalidRequest, which the
server maps to the same error). Unknown keys pass through untouched. `workspaceFolder` is accepted by
every request that works on one folder; the server removes it before calling the engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pygls.exceptions import JsonRpcInvalidParams


@dataclass(frozen=True)
class Field:
    kind: str  # str | int | num | bool | strs | obj
    required: bool = False
    fields: dict[str, Field] = field(default_factory=dict)  # for obj: known keys (others pass through)


STR, INT, NUM, BOOL, STRS, OBJ = (Field(k) for k in ("str", "int", "num", "bool", "strs", "obj"))
REQUIRED_STR = Field("str", required=True)
FOLDER = {"workspaceFolder": STR}

_EXPECTED = {
    "str": "a string",
    "int": "an integer",
    "num": "a number",
    "bool": "a boolean",
    "strs": "a list of strings",
    "obj": "an object",
}

SEARCH_FILTER = Field(
    "obj",
    fields={
        "entityTypes": STRS, "fileTypes": STRS, "bookId": STR, "chapterId": STR, "pathPrefix": STR,
        "glob": STR, "corpus": STR, "maxChapter": INT,
    },
)  # fmt: skip

SCHEMAS: dict[str, dict[str, Field]] = {
    "saipling/search": {
        "query": REQUIRED_STR, "maxResults": INT, "minScore": NUM, "mode": STR, "filter": SEARCH_FILTER,
        "role": STR, "respectContextSettings": BOOL, "source": STR, **FOLDER,
    },
    "saipling/enrichContext": {
        "query": REQUIRED_STR, "skill": STR, "skillConfig": OBJ, "loadedFiles": STRS, "bookId": STR,
        "wantSearch": BOOL, "maxResults": INT, "maxSearchTokens": INT, **FOLDER,
    },
    "saipling/related": {"uri": STR, "path": STR, "maxResults": INT, **FOLDER},
    "saipling/get": {"path": REQUIRED_STR, "startLine": INT, "lines": INT, **FOLDER},
    "saipling/status": {**FOLDER},
    "saipling/reindex": {"full": BOOL, "paths": STRS, **FOLDER},
    "saipling/clearIndex": {**FOLDER},
    "saipling/pauseIndexing": {**FOLDER},
    "saipling/resumeIndexing": {**FOLDER},
    "saipling/_test/advanceClock": {"seconds": Field("num", required=True)},
    "saipling/_test/tick": {},
    # LSP requests whose params lsprotocol would coerce instead of rejecting (5 -> "5"): checked raw.
    "workspace/symbol": {"query": REQUIRED_STR},
}  # fmt: skip


def invalid(name: str, message: str) -> JsonRpcInvalidParams:
    return JsonRpcInvalidParams(f"Invalid params: {name}: {message}", data={"field": name})


def to_plain(value: Any) -> Any:
    """pygls' namedtuple `Object`s (and any nesting of them) -> dicts and lists."""
    if hasattr(value, "_asdict"):
        return {k: to_plain(v) for k, v in value._asdict().items()}
    if isinstance(value, Mapping):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_plain(v) for v in value]
    return value


def _type_ok(kind: str, value: Any) -> bool:
    if kind == "str":
        return isinstance(value, str)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "num":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "strs":
        return isinstance(value, list)
    return isinstance(value, dict)


def check(value: Any, spec: Field, name: str) -> None:
    """Raise InvalidParams naming the first field (dotted, with list indexes) of the wrong type."""
    if not _type_ok(spec.kind, value):
        raise invalid(name, f"expected {_EXPECTED[spec.kind]}, got {type(value).__name__} {value!r:.60}")
    if spec.kind == "strs":
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise invalid(f"{name}[{i}]", f"expected a string, got {type(item).__name__} {item!r:.60}")
    if spec.kind == "obj":
        check_fields(value, spec.fields, f"{name}.")


def check_fields(obj: dict[str, Any], fields: dict[str, Field], prefix: str = "") -> None:
    for key, spec in fields.items():
        value = obj.get(key)
        if value is None:
            if spec.required:
                raise invalid(prefix + key, "required")
            continue
        check(value, spec, prefix + key)


def validate(method: str, params: Any) -> dict[str, Any]:
    """The params of `method` as a plain dict, or InvalidParams naming the offending field."""
    plain = {} if params is None else to_plain(params)
    if not isinstance(plain, dict):
        raise invalid("params", f"expected an object, got {type(plain).__name__}")
    check_fields(plain, SCHEMAS.get(method, {}))
    return {k: v for k, v in plain.items() if v is not None}


def command_params(command: str, arguments: list[Any] | tuple[Any, ...]) -> dict[str, Any]:
    """`workspace/executeCommand` arguments (none, or one object) validated as the matching request."""
    if len(arguments) > 1:
        raise invalid("arguments", f"{command} takes at most one argument (an object)")
    method = "saipling/" + command.removeprefix("saipling.")
    return validate(method, arguments[0] if arguments else None)

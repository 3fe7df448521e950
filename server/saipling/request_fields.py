"""Checks for the fields of engine requests (plain dicts from the CLI, the language server or code).

Every failure is an InvalidRequest naming the field, which the CLI prints and the server answers with JSON-RPC
InvalidParams. The server checks types at the message boundary too (lsp/params.py); these checks also cover
values and ranges, and callers that never pass through the server.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import InvalidRequest


def require_object(params: Any) -> Mapping[str, Any]:
    if not isinstance(params, Mapping):
        raise InvalidRequest("params", "must be an object")
    return params


def typed(params: Mapping[str, Any], key: str, kind: type | tuple[type, ...], default: Any = None) -> Any:
    """params[key] when it has type `kind` (an int is accepted as a float, a bool never as a number),
    `default` when missing or null."""
    value = params.get(key, default)
    if value is None:
        return default
    if kind in (int, float) and isinstance(value, bool):
        raise InvalidRequest(key, f"must be a {getattr(kind, '__name__', kind)}, got a boolean")
    if kind is float and isinstance(value, int):
        return float(value)
    if not isinstance(value, kind):
        name = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise InvalidRequest(key, f"must be a {name}, got {type(value).__name__}")
    return value


def bounded_int(
    params: Mapping[str, Any], key: str, default: int | None, minimum: int, maximum: int | None = None
) -> int | None:
    """An integer field within [minimum, maximum]; `default` (brought into the range: it may come from a
    user's settings) when missing or null."""
    value = params.get(key)
    if value is None:
        if default is None:
            return None
        return max(minimum, default if maximum is None else min(default, maximum))
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidRequest(
            key, f"must be an integer >= {minimum}" + (f" and <= {maximum}" if maximum is not None else "")
        )
    if maximum is not None and value > maximum:
        raise InvalidRequest(key, f"must be between {minimum} and {maximum}")
    return value


def str_list(params: Mapping[str, Any], key: str, prefix: str = "") -> list[str]:
    """A list of strings (a single string counts as a list of one); [] when missing."""
    value = params.get(key)
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise InvalidRequest(prefix + key, "must be a list of strings")
    return list(value)


def required_str(params: Mapping[str, Any], *keys: str) -> str:
    """The first of `keys` holding a non-empty string (e.g. "path", then "uri"); InvalidRequest naming the
    first key otherwise."""
    for key in keys:
        value = params.get(key)
        if isinstance(value, str) and value:
            return value
    raise InvalidRequest(keys[0], "is required and must be a non-empty string")


def query_text(query: Any, max_chars: int | None = None) -> str:
    """The stripped query; InvalidRequest('query') if it is not a string, is empty, too long or not encodable
    text (lone surrogates)."""
    if not isinstance(query, str):
        raise InvalidRequest("query", "is required and must be a string")
    query = query.strip()
    if not query:
        raise InvalidRequest("query", "must not be empty")
    if max_chars is not None and len(query) > max_chars:
        raise InvalidRequest("query", f"is {len(query)} characters; the limit is {max_chars}")
    try:
        query.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRequest("query", "is not valid Unicode text (it holds a lone surrogate)") from None
    return query

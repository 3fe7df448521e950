"""The id of a JSON-RPC request that cannot be parsed (invalid JSON, nested too deep for the parser), read
from its raw bytes, so that both faces (the language server and the MCP server) answer it with an error instead
of leaving the client waiting for ever."""

from __future__ import annotations

import json
import re

# brackets, and whole strings (skipped over: a bracket or an "id" inside a string is never taken for one)
_TOKEN = re.compile(rb'[\[\]{}]|"(?:[^"\\]|\\.)*"')
_KEY = re.compile(rb"\s*:\s*")  # a string followed by a colon is a key
_ID = re.compile(rb'-?\d{1,15}(?![\d.eE])|"(?:[^"\\]|\\.){0,200}"')


def salvage_id(body: bytes) -> int | str | None:
    """The id of a request whose body cannot be parsed: the top-level object's `"id"`, when it is an integer or
    a string and the object has a `"method"` key (a request: not a notification, nor a response). An `"id"`
    nested in the params is never taken for it. None otherwise."""
    text = body.lstrip()
    if not text.startswith(b"{"):
        return None
    depth = 0
    msg_id: int | str | None = None
    is_request = False
    for m in _TOKEN.finditer(text):
        tok = m.group()
        if tok in (b"{", b"["):
            depth += 1
        elif tok in (b"}", b"]"):
            depth -= 1
            if depth <= 0:
                break  # the end of the top-level object
        elif depth == 1 and (key := _KEY.match(text, m.end())) is not None:
            if tok == b'"method"':
                is_request = True
            elif tok == b'"id"' and (value := _ID.match(text, key.end())) is not None:
                msg_id = _id_value(value.group())
    return msg_id if is_request else None


def is_request_id(value: object) -> bool:
    """A JSON-RPC request id: a string or an integer (JSON's true and false are not)."""
    return isinstance(value, str | int) and not isinstance(value, bool)


def _id_value(raw: bytes) -> int | str | None:
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if is_request_id(value) else None

"""The id of a JSON-RPC request that cannot be parsed (invalid JSON, nested too deep for the parser), read
from its raw bytes, so that both faces (the language server and the MCP server) answer it with an error instead
of leaving the client waiting for ever."""

from __future__ import annotations

import contextlib
import json
import re

# the first `"id": <integer or short string>` in the raw message (a heuristic: the message is unparseable)
_REQUEST_ID = re.compile(rb'"id"\s*:\s*(-?\d{1,15}|"(?:[^"\\]|\\.){0,200}")')


def salvage_id(body: bytes) -> int | str | None:
    """The id of a request whose body cannot be parsed, when it can still be read; None otherwise (no
    `"method"`: not a request; no readable id: a notification or garbage)."""
    if b'"method"' not in body:
        return None
    m = _REQUEST_ID.search(body)
    if m is None:
        return None
    with contextlib.suppress(ValueError):
        value = json.loads(m.group(1))
        return value if isinstance(value, int | str) and not isinstance(value, bool) else None
    return None

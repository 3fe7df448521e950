"""The custom requests' params at the message boundary: checked against their schema (saipling/retrieval/requests.py,
shared with the CLI and other faces), plain dicts out, InvalidParams naming the field (and the closest valid name for an
unknown one) otherwise. `workspaceFolder` is accepted by every request that works on one folder; the server
resolves it before calling the engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pygls.exceptions import JsonRpcInvalidParams

from ..errors import InvalidRequest
from ..retrieval import requests

SCHEMAS = requests.REQUESTS  # method -> schema: the methods checked here


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


def validate(method: str, params: Any) -> dict[str, Any]:
    """The params of `method` as a plain dict, or InvalidParams naming the offending field."""
    plain = {} if params is None else to_plain(params)
    try:
        return requests.validate(method, plain)
    except InvalidRequest as exc:
        raise invalid(exc.field, str(exc).removeprefix(f"{exc.field}: ")) from None


def command_params(command: str, arguments: list[Any] | tuple[Any, ...]) -> dict[str, Any]:
    """`workspace/executeCommand` arguments (none, or one object) validated as the matching request."""
    if len(arguments) > 1:
        raise invalid("arguments", f"{command} takes at most one argument (an object)")
    method = "saipling/" + command.removeprefix("saipling.")
    return validate(method, arguments[0] if arguments else None)

"""Every handler of the server is guarded at the dispatch point: a failure in one becomes a logged error and
a proper JSON-RPC error, never an exception that escapes into pygls (or a dead server)."""

from __future__ import annotations

import asyncio
import logging

import pytest
from pygls.exceptions import JsonRpcException, JsonRpcInternalError, JsonRpcInvalidParams

from saipling.errors import InvalidRequest, SaiplingError
from saipling.lsp.protocol import REQUEST_FAILED
from saipling.lsp.server import create_server, guarded


def registered(test_clock: bool) -> dict[str, object]:
    fm = create_server(test_clock=test_clock).protocol.fm
    return {**fm.features, **{f"command {k}": v for k, v in fm.commands.items()}}


@pytest.mark.parametrize("test_clock", [False, True])
def test_every_registered_handler_is_guarded(test_clock: bool) -> None:
    handlers = registered(test_clock)
    assert "saipling/search" in handlers and "command saipling.status" in handlers
    assert ("saipling/_test/tick" in handlers) is test_clock
    unguarded = [name for name, h in handlers.items() if not getattr(getattr(h, "func", h), "guarded", False)]
    assert unguarded == []


def test_a_failing_handler_becomes_a_logged_internal_error(caplog: pytest.LogCaptureFixture) -> None:
    def broken(ls: object, p: object) -> None:
        raise KeyError("boom")

    with caplog.at_level(logging.ERROR, logger="saipling"), pytest.raises(JsonRpcInternalError) as info:
        guarded("saipling/broken", broken)(None, {})
    assert "KeyError" in info.value.message
    assert any("saipling/broken failed" in r.getMessage() for r in caplog.records)


def test_engine_errors_keep_their_json_rpc_codes_in_sync_and_async_handlers() -> None:
    def invalid(ls: object, p: object) -> None:
        raise InvalidRequest("maxResults", "must be at most 100")

    async def refused(ls: object, p: object) -> None:
        raise SaiplingError("the index is being rebuilt")

    with pytest.raises(JsonRpcInvalidParams) as bad:
        guarded("saipling/search", invalid)(None, {})
    assert "maxResults" in bad.value.message
    wrapped = guarded("saipling/reindex", refused)
    assert asyncio.iscoroutinefunction(wrapped)
    with pytest.raises(JsonRpcException) as failed:
        asyncio.run(wrapped(None, {}))
    assert failed.value.code == REQUEST_FAILED and "rebuilt" in failed.value.message

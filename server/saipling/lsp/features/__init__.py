"""One module per feature of the language server, each with `register(server)` adding its handlers.

Handlers stay short: validate (params arrive checked by `protocol.py`), call one engine function, convert.
`SaiplingServer.handle()` guards every handler at the dispatch point (`protocol.engine_errors`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import entities, index, lifecycle, name_diagnostics, search, symbols, sync, testclock

if TYPE_CHECKING:
    from ..server import SaiplingServer

MODULES = (lifecycle, sync, search, index, symbols, entities, name_diagnostics)


def register_all(server: SaiplingServer, *, test_clock: bool = False) -> None:
    """Register every feature's handlers (the test-clock requests only when `test_clock`)."""
    for module in MODULES:
        module.register(server)
    if test_clock:
        testclock.register(server)

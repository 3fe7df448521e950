"""`workspace/symbol`: entities and headings of every open folder (read-only, on a worker thread)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

from .. import convert

if TYPE_CHECKING:
    from ..server import SaiplingServer


def register(server: SaiplingServer) -> None:
    server.handle(types.WORKSPACE_SYMBOL, workspace_symbol, threaded=True)


def workspace_symbol(ls: SaiplingServer, p: types.WorkspaceSymbolParams) -> list[types.SymbolInformation]:
    with ls.engine_call():
        folders = list(ls.folders.values())
        found = [(f, s) for f in folders for s in f.project.symbols(p.query)]
    found.sort(key=lambda fs: fs[1].get("kind") != "entity")  # stable: entities of every folder first
    return [convert.symbol_information(s, f.project.root) for f, s in found]

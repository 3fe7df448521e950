"""Retrieval requests: `saipling/search`, `saipling/enrichContext`, `saipling/related`, `saipling/get`.

They are read-only and run on a worker thread (pygls `thread()`), which also writes the response: one thread
hop fewer than awaiting the work from the event loop."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...retrieval.filter_notes import empty_search_note
from .. import convert
from ..folders import folder_for, folders_for

if TYPE_CHECKING:
    from ..server import SaiplingServer


def register(server: SaiplingServer) -> None:
    server.handle("saipling/search", search, threaded=True)
    server.handle("saipling/enrichContext", enrich_context, threaded=True)
    server.handle("saipling/related", related, threaded=True)
    server.handle("saipling/get", get, threaded=True)


def search(ls: SaiplingServer, p: dict[str, Any]) -> dict[str, Any]:
    with ls.engine_call():
        folders = folders_for(ls, p)
        responses = [(f.uri, f.project.search(p)) for f in folders]
        merged = convert.merge_search(responses, p.get("maxResults") or folders[0].project.settings.max_results_default)
        if not merged["results"] and "note" not in merged and len(folders) == 1:
            # why a filter left nothing (`path: nowhere/`, a type no file has): "no results" alone says nothing
            if note := empty_search_note(folders[0].project, p):
                merged["note"] = note
    for folder in folders:
        ls.feedback.provider(folder)
    return merged


def enrich_context(ls: SaiplingServer, p: dict[str, Any]) -> dict[str, Any]:
    with ls.engine_call():
        folder = folders_for(ls, p, with_filter=False)[0]
        result = folder.project.enrich(p)
    ls.feedback.provider(folder)
    return {**result, "workspaceFolder": folder.uri}


def related(ls: SaiplingServer, p: dict[str, Any]) -> dict[str, Any]:
    with ls.engine_call():
        folder = folder_for(ls, p, "uri")
        result = folder.project.related(p)
    return {**result, "results": convert.tag_folder(result.get("results") or [], folder.uri)}


def get(ls: SaiplingServer, p: dict[str, Any]) -> dict[str, Any]:
    with ls.engine_call():
        folder = folder_for(ls, p)
        return {**folder.project.get(p), "workspaceFolder": folder.uri}

"""Drifting names and names without a page as diagnostics of the open documents (issue 35), and the code actions
that fix them: "Replace with Dorman" (a TextEdit), "Add `Dormaan` as an alias of Dorman" (an edit of the
entity file's frontmatter) and "Create a profile for X" (CreateFile + its text). The server never writes a file:
the editor applies the WorkspaceEdit.

Published when a document opens and after each save or index run (for every open document of that folder: a
profile that gained an alias clears the others' diagnostics), at the severity of the `nameDiagnostics` setting
(`off`: none); never for a file the settings exclude, `.context_settings.json` excludes, or that is not indexed.
The engine side is `retrieval/name_fixes.py`."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from ...files.context_settings import load_context_settings
from ...retrieval import name_fixes
from .. import convert
from ..folders import Folder, locate
from .entities import buffer_text, open_document, open_uris, reader

if TYPE_CHECKING:
    from ..server import SaiplingServer

log = logging.getLogger(__name__)

SOURCE = "saipling"
SEVERITY = {
    "error": types.DiagnosticSeverity.Error,
    "warning": types.DiagnosticSeverity.Warning,
    "information": types.DiagnosticSeverity.Information,
    "hint": types.DiagnosticSeverity.Hint,
}
CODES = {"drift": "name-drift", "unknown": "name-without-page"}


def register(server: SaiplingServer) -> None:
    server.handle(
        types.TEXT_DOCUMENT_CODE_ACTION,
        code_action,
        types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix]),
        threaded=True,
    )
    server.index_listeners.append(lambda folder: schedule(server, folder=folder))


# -- publishing ----------------------------------------------------------------------------------------------
def schedule(ls: SaiplingServer, uris: list[str] | None = None, folder: Folder | None = None) -> None:
    """Compute and publish on a worker thread: `uris`, else every open document (of `folder` if given)."""
    if ls.stopping:
        return
    if uris is None:
        uris = [u for u in open_uris(ls) if folder is None or _folder_of(ls, u) is folder]
    if not uris:
        return
    ls.background(_publish_all, ls, uris)  # (the lists take a pass over the index: never on a request's worker)


def _folder_of(ls: SaiplingServer, uri: str) -> Folder | None:
    hit = locate(ls, uri)
    return hit[0] if hit is not None else None


def _publish_all(ls: SaiplingServer, uris: list[str]) -> None:
    stale: dict[int, tuple[Folder, float]] = {}
    for uri in uris:
        if ls.stopping:
            return
        try:
            diagnostics = document_diagnostics(ls, uri)
        except Exception:  # noqa: BLE001 - a diagnostic pass must never take the server down
            log.exception("name diagnostics for %s failed", uri)
            continue
        if diagnostics is not None:
            ls.post(ls.text_document_publish_diagnostics, types.PublishDiagnosticsParams(uri, diagnostics))
        hit = locate(ls, uri)
        if hit is None or not shown_for(*hit):
            continue  # (its diagnostics read no lists: nothing to publish again; a timer for it looped for ever)
        if (due := name_fixes.reread_due_in(hit[0].project)) is not None:
            stale[id(hit[0])] = (hit[0], due)
    for folder, due in stale.values():  # (lists of a pass older than the index: publish again when one may run)
        _later(ls, due, folder)


def _later(ls: SaiplingServer, delay: float, folder: Folder) -> None:
    """schedule() for `folder` after `delay` seconds (one timer a folder at a time)."""
    timers = ls.name_timers
    if (old := timers.get(id(folder))) is not None and old.is_alive():
        return
    timer = threading.Timer(delay + 0.05, lambda: schedule(ls, folder=folder))
    timer.daemon = True
    timers[id(folder)] = timer
    timer.start()


def clear(ls: SaiplingServer, uri: str) -> None:
    ls.post(ls.text_document_publish_diagnostics, types.PublishDiagnosticsParams(uri, []))


def shown_for(folder: Folder, rel: str) -> bool:
    """Diagnostics only for indexed files the settings and `.context_settings.json` keep."""
    project = folder.project
    if project.settings.name_diagnostics == "off" or not folder.accepts(rel):
        return False
    if load_context_settings(project.root).mode_for(rel) == "exclude":
        return False
    return project.store.get_file(rel) is not None


def document_findings(
    ls: SaiplingServer, uri: str, wait: bool = True
) -> tuple[Folder, str, list[name_fixes.NameFinding]] | None:
    """The findings in an open document (None: not one of ours; [] when it gets none). wait=False (a request's
    worker): from the lists as they stand, never waiting for a pass over the index."""
    if (hit := locate(ls, uri)) is None:
        return None
    folder, rel = hit
    text = buffer_text(ls, uri)
    if text is None:
        return None
    ls.ready_threads.wait(60)
    if not shown_for(folder, rel):
        return folder, text, []
    return folder, text, name_fixes.file_findings(folder.project, text, wait=wait)


def document_diagnostics(ls: SaiplingServer, uri: str) -> list[types.Diagnostic] | None:
    found = document_findings(ls, uri)
    if found is None:
        return None
    folder, text, items = found
    severity = SEVERITY.get(folder.project.settings.name_diagnostics, types.DiagnosticSeverity.Hint)
    lines, codec = text.split("\n"), ls.workspace.position_codec
    return [
        types.Diagnostic(
            range=convert.client_range(codec, lines[f.line], f.line, f.start, f.end),
            message=f.message,
            severity=severity,
            code=CODES[f.kind],
            source=SOURCE,
            data=f.to_dict(),
        )
        for f in items
    ]


# -- code actions --------------------------------------------------------------------------------------------
def code_action(ls: SaiplingServer, p: types.CodeActionParams) -> list[types.CodeAction] | None:
    """Quick fixes for the findings the range touches (recomputed on the current text: a diagnostic's `data`
    from the client is never trusted to name a file to edit)."""
    with ls.engine_call():
        uri = p.text_document.uri
        found = document_findings(ls, uri, wait=False)  # (a pass over a big index runs on the background thread)
        if found is None:
            return None
        folder, text, items = found
        lines, codec = text.split("\n"), ls.workspace.position_codec
        start = codec.position_from_client_units(lines, p.range.start)
        end = codec.position_from_client_units(lines, p.range.end)
        hits = [
            f
            for f in items
            if (f.line, f.end) >= (start.line, start.character) and (f.line, f.start) <= (end.line, end.character)
        ]
        if not hits:
            return None
        by_diag = {(d.range.start.line, d.range.start.character, d.code): d for d in p.context.diagnostics}
        create_ok = _can_create(ls)
        out: list[types.CodeAction] = []
        seen: set[tuple[str, str]] = set()
        for f in hits:
            rng = convert.client_range(codec, lines[f.line], f.line, f.start, f.end)
            diag = by_diag.get((rng.start.line, rng.start.character, CODES[f.kind]))
            diags = [diag] if diag is not None else None
            if f.kind == "drift" and f.entity is not None:
                out.append(_replace(uri, rng, f, diags))
                if ("alias", f.word) not in seen:
                    seen.add(("alias", f.word))
                    if (action := _add_alias(ls, folder, f, diags)) is not None:
                        out.append(action)
            elif f.kind == "unknown" and create_ok and ("create", f.word) not in seen:
                seen.add(("create", f.word))
                if (action := _create_profile(ls, folder, f, diags)) is not None:
                    out.append(action)
        return out


def _replace(uri: str, rng: types.Range, f: name_fixes.NameFinding, diags: Any) -> types.CodeAction:
    return types.CodeAction(
        title=f"Replace with {f.close_to}",
        kind=types.CodeActionKind.QuickFix,
        diagnostics=diags,
        is_preferred=True,
        edit=types.WorkspaceEdit(changes={uri: [types.TextEdit(rng, f.close_to)]}),
    )


def _add_alias(ls: SaiplingServer, folder: Folder, f: name_fixes.NameFinding, diags: Any) -> types.CodeAction | None:
    assert f.entity is not None
    profile = reader(ls, folder)(f.entity.path)
    if profile is None:
        return None
    change = name_fixes.alias_change(profile, f.word)
    if change is None:  # (a TOML frontmatter no edit of which keeps readable)
        return None
    lines, codec = profile.split("\n"), ls.workspace.position_codec
    start = codec.position_to_client_units(lines, types.Position(change.line, change.col))
    end = codec.position_to_client_units(lines, types.Position(change.end_line, change.end_col))
    uri = (folder.project.root / f.entity.path).as_uri()
    doc = open_document(ls, uri)
    return types.CodeAction(
        title=f"Add `{f.word}` as an alias of {f.entity.name}",
        kind=types.CodeActionKind.QuickFix,
        diagnostics=diags,
        edit=types.WorkspaceEdit(
            document_changes=[
                types.TextDocumentEdit(
                    types.OptionalVersionedTextDocumentIdentifier(uri, doc.version if doc is not None else None),
                    [types.TextEdit(types.Range(start, end), change.text)],
                )
            ]
        ),
    )


def _create_profile(
    ls: SaiplingServer, folder: Folder, f: name_fixes.NameFinding, diags: Any
) -> types.CodeAction | None:
    made = name_fixes.new_profile(folder.project, f.word, reader(ls, folder))
    if made is None:
        return None
    uri = (folder.project.root / made.path).as_uri()
    return types.CodeAction(
        title=f"Create a profile for {f.word}",
        kind=types.CodeActionKind.QuickFix,
        diagnostics=diags,
        edit=types.WorkspaceEdit(
            document_changes=[
                types.CreateFile(uri=uri),  # (fails if the file appeared meanwhile: nothing overwritten)
                types.TextDocumentEdit(
                    types.OptionalVersionedTextDocumentIdentifier(uri, None),
                    [types.TextEdit(types.Range(types.Position(0, 0), types.Position(0, 0)), made.text)],
                ),
            ]
        ),
    )


def _can_create(ls: SaiplingServer) -> bool:
    """The client applies CreateFile in a WorkspaceEdit (workspace.workspaceEdit.resourceOperations)."""
    caps = ls.client_capabilities
    edit = getattr(getattr(caps, "workspace", None), "workspace_edit", None)
    ops = getattr(edit, "resource_operations", None) or []
    return bool(getattr(edit, "document_changes", False)) and types.ResourceOperationKind.Create in ops

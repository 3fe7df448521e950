"""Writer-aware features on entity names (`retrieval/entities.py`): `textDocument/hover` (a card: type, summary,
aliases, link), `textDocument/definition` (the profile's frontmatter), `textDocument/references` (every
mention, grouped by file in manuscript order) and `textDocument/documentSymbol` (entity + heading outline).

Hover, definition and the outline read the open buffer (full text sync), so unsaved text works;
references take candidates from the index and verify them on current text (open buffers first). All run
on a worker thread (read-only)."""

from __future__ import annotations

import collections
import hashlib
import logging
import threading
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from lsprotocol import types

from ...errors import InvalidRequest
from ...files.textio import normalise_newlines
from ...retrieval import continuity, entities, mentions, names
from .. import convert
from ..folders import Folder, folders_for, locate

log = logging.getLogger(__name__)

# at most this many symbols a document (its first, in document order): VS Code's outline shows a few thousand; a
# file of 100,000 headings answered 25 MB and held a worker 5 s a request (4 such requests: a search waited 13 s)
MAX_DOCUMENT_SYMBOLS = 5000
# the outlines of the last few document texts (by folder, path, text digest and the file's own entity)
_OUTLINES: collections.OrderedDict[tuple[Any, ...], list[entities.OutlineItem]] = collections.OrderedDict()
_OUTLINE_LOCK = threading.Lock()  # (guards the two dicts only)
_PARSING: dict[tuple[Any, ...], threading.Lock] = {}  # a text being parsed: its lock, for those asking meanwhile

if TYPE_CHECKING:
    from ..server import SaiplingServer


def register(server: SaiplingServer) -> None:
    # buffers: pygls' built-in didOpen/didChange/didClose handlers keep a copy of each open document (full
    # sync, announced by the server); features/sync.py registers open/close for its own use
    server.handle(types.TEXT_DOCUMENT_HOVER, hover, threaded=True)
    server.handle(types.TEXT_DOCUMENT_DEFINITION, definition, threaded=True)
    server.handle(types.TEXT_DOCUMENT_REFERENCES, references, threaded=True)
    server.handle(types.TEXT_DOCUMENT_DOCUMENT_SYMBOL, document_symbol, threaded=True)
    server.handle("saipling/mentions", mentions_request, threaded=True)
    server.handle("saipling/names", names_request, threaded=True)
    server.handle("saipling/checkPassage", check_passage, threaded=True)


# -- buffers ---------------------------------------------------------------------------------------------
def open_document(ls: SaiplingServer, uri: str) -> Any:
    """The open document of `uri` as the client spells it (pygls keeps them under the percent-decoded URI: a
    `Chapter%202.md` from the editor was never found, so it got no name diagnostics or quick fixes), else None."""
    docs = ls.workspace.text_documents
    return docs.get(uri) or docs.get(unquote(uri))


def open_uris(ls: SaiplingServer) -> list[str]:
    """The URIs of the open documents as the client sent them (pygls' keys are percent-decoded)."""
    return [getattr(doc, "uri", key) for key, doc in list(ls.workspace.text_documents.items())]


def buffer_text(ls: SaiplingServer, uri: str) -> str | None:
    doc = open_document(ls, uri)
    return normalise_newlines(doc.source) if doc is not None else None  # (LSP breaks lines at a lone \r too)


def reader(ls: SaiplingServer, folder: Folder) -> entities.TextSource:
    """Open buffers of this folder (unsaved text) first, else files on disk; a text over `maxFileBytes` reads
    as None (the file is skipped, like the index skips it): finding its headings, code blocks and names would hold
    a worker thread for seconds (15 s for 200 MB), for a hover, an outline, a card or a reference scan alike.
    A buffer's text is taken when asked for: a request must not copy every open buffer."""
    buffers = {}
    for uri in open_uris(ls):
        hit = locate(ls, uri)
        if hit is not None and hit[0] is folder:
            buffers[hit[1]] = uri
    read = entities.with_buffers(
        folder.project.root, lambda rel: buffer_text(ls, uri) if (uri := buffers.get(rel)) else None
    )
    limit = folder.project.settings.max_file_bytes

    def within_limit(rel: str) -> str | None:
        text = read(rel)
        if text is None or not too_large(text, limit):
            return text
        log.debug("%s is over maxFileBytes: skipped (no hover, definition, references or outline)", rel)
        return None

    return within_limit


def too_large(text: str, limit: int) -> bool:
    """Over `limit` bytes in UTF-8 (a character is 1 to 4 bytes: encoded only when that decides it)."""
    return len(text) > limit or (len(text) * 4 > limit and len(text.encode("utf-8", "surrogatepass")) > limit)


def at_cursor(
    ls: SaiplingServer, p: types.TextDocumentPositionParams
) -> tuple[Folder, entities.TextSource, entities.Mention | None, list[entities.Entity]] | None:
    if (hit := locate(ls, p.text_document.uri)) is None:
        return None
    folder, rel = hit
    read = reader(ls, folder)
    text = read(rel)
    if text is None:
        return None
    lines = text.split("\n")
    pos = ls.workspace.position_codec.position_from_client_units(lines, p.position)
    mention, found = entities.entities_at(folder.project, rel, text, pos.line, pos.character)
    return folder, read, mention, found


# -- handlers --------------------------------------------------------------------------------------------
def hover(ls: SaiplingServer, p: types.HoverParams) -> types.Hover | None:
    with ls.engine_call():
        if (hit := at_cursor(ls, p)) is None or hit[2] is None:
            return None
        folder, read, m, found = hit
        project = folder.project
        shown_in = (locate(ls, p.text_document.uri) or (None, None))[1]
        # as of the open file's chapter (the spoiler horizon), unless the user asks for everything
        horizon = None
        if shown_in is not None and not project.settings.hover_all_chapters:
            horizon = project.store.chapter_num_of(shown_in)
        cards = [entities.card(e, read, horizon) for e in found]
        for c in cards:
            c.mentions = mentions.summary_for(project, c.entity, horizon=horizon)
    codec = ls.workspace.position_codec
    return types.Hover(
        contents=types.MarkupContent(types.MarkupKind.Markdown, convert.hover_markdown(folder.project.root, cards)),
        range=convert.client_range(codec, m.line_text, m.line, m.start, m.end),
    )


def definition(ls: SaiplingServer, p: types.DefinitionParams) -> list[types.Location] | None:
    with ls.engine_call():
        if (hit := at_cursor(ls, p)) is None or not hit[3]:
            return None
        folder, read, _, found = hit
        return [convert.declaration_location(folder.project.root, entities.card(e, read)) for e in found]


def references(ls: SaiplingServer, p: types.ReferenceParams) -> list[types.Location] | None:
    with ls.engine_call():
        if (hit := at_cursor(ls, p)) is None or not hit[3]:
            return None
        folder, read, _, found = hit
        limit = folder.project.settings.references_max_chapter or None
        files = entities.references(folder.project, found, read, max_chapter=limit)
        root, codec = folder.project.root, ls.workspace.position_codec
        out = (
            [convert.declaration_location(root, entities.card(e, read)) for e in found]
            if (p.context.include_declaration)
            else []
        )
        return out + convert.mention_locations(root, files, codec)


def document_symbol(ls: SaiplingServer, p: types.DocumentSymbolParams) -> list[types.DocumentSymbol]:
    with ls.engine_call():
        if (hit := locate(ls, p.text_document.uri)) is None:
            return []
        folder, rel = hit
        text = reader(ls, folder)(rel)
        if text is None:
            return []
        entity = entities.entity_index(folder.project).for_path(rel)
        key = (folder.uri, rel, hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest(), entity)
        with _OUTLINE_LOCK:  # (an editor's outline, breadcrumbs and sticky scroll ask at once: one parse for them)
            items = _OUTLINES.get(key)
            parsing = _PARSING.setdefault(key, threading.Lock()) if items is None else None
        if parsing is not None:
            with parsing:  # (another text's outline is not held up: one lock a text)
                with _OUTLINE_LOCK:
                    items = _OUTLINES.get(key)
                if items is None:
                    try:
                        items = entities.capped(entities.outline(text, entity), MAX_DOCUMENT_SYMBOLS)
                    except BaseException:  # (a parse that raised leaves no entry behind: the next one parses)
                        with _OUTLINE_LOCK:
                            _PARSING.pop(key, None)
                        raise
                    with _OUTLINE_LOCK:
                        _OUTLINES[key] = items
                        _PARSING.pop(key, None)
                        while len(_OUTLINES) > 8:
                            _OUTLINES.popitem(last=False)
    return convert.outline_symbols(items, text.split("\n"), ls.workspace.position_codec)


def mentions_request(ls: SaiplingServer, p: dict[str, Any]) -> dict[str, Any]:
    """`saipling/mentions`: the entity's reports from every folder that has it (an unknown name in all of them
    is InvalidParams naming `name`)."""
    with ls.engine_call():
        out: list[dict[str, Any]] = []
        missing: InvalidRequest | None = None
        for folder in folders_for(ls, p, with_filter=False):
            try:
                found = mentions.request(folder.project, dict(p))
            except InvalidRequest as exc:
                if exc.field != "name":
                    raise
                missing = exc
                continue
            out += [{**e, "workspaceFolder": folder.uri} for e in found["entities"]]
        if not out and missing is not None:
            raise missing
    return {"entities": out}


def names_request(ls: SaiplingServer, p: dict[str, Any]) -> dict[str, Any]:
    """`saipling/names`: drifting names and names without a page, of the named folder (else the first)."""
    with ls.engine_call():
        folder = folders_for(ls, p, with_filter=False)[0]
        return {**names.request(folder.project, p), "workspaceFolder": folder.uri}


def check_passage(ls: SaiplingServer, p: dict[str, Any]) -> dict[str, Any]:
    """`saipling/checkPassage`: evidence for a continuity check of a passage, from the named folder (else the
    first)."""
    with ls.engine_call():
        folder = folders_for(ls, p, with_filter=False)[0]
        return {**continuity.check_passage(folder.project, p), "workspaceFolder": folder.uri}

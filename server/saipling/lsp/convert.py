"""Engine results -> LSP shapes: URIs and root-relative paths, ranges, symbols, progress, multi-root merges.

Every conversion between what the engine speaks (root-relative POSIX paths, 1-based inclusive lines, plain
dicts) and what the protocol speaks lives here, so handlers stay a few lines long.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.uris import from_fs_path, to_fs_path

from ..errors import InvalidRequest
from ..indexing.indexer import IndexProgress, IndexSummary
from ..paths import normalise_rel

SYMBOL_KINDS = {
    "character": types.SymbolKind.Class,
    "place": types.SymbolKind.Namespace,
    "location": types.SymbolKind.Namespace,
    "faction": types.SymbolKind.Module,
    "organization": types.SymbolKind.Module,
}


# -- paths ---------------------------------------------------------------------------------------------
def uri_to_path(uri: str) -> Path | None:
    """The absolute path of a file:// URI (None for other schemes)."""
    if not uri.startswith("file:"):
        return None
    fs = to_fs_path(uri)
    return Path(fs) if fs else None


def path_to_uri(path: Path | str) -> str:
    return from_fs_path(str(path)) or Path(path).as_uri()


def relative_to(root: Path, path: Path) -> str | None:
    """`path` relative to `root` in POSIX form, or None when it is not inside. Its `..` segments are applied
    first: `root/../x` (a document URI spelt so, `%2e%2e` too) is outside, never `../x` inside (the outline and
    hover of any file the server could read). They are applied as the filesystem applies them (links first):
    `root/link/../x`, `link` a folder elsewhere, is that folder's parent's `x`, not `root/x`."""
    if ".." in path.parts:
        path = Path(os.path.realpath(path))
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        try:
            return path.resolve().relative_to(root).as_posix()
        except (ValueError, OSError):
            return None


def to_rel(root: Path, path: str, name: str = "path") -> str:
    """A request's path (root-relative, absolute or file URI) -> root-relative; InvalidRequest if outside."""
    if path.startswith("file:") or os.path.isabs(path):
        absolute = uri_to_path(path) if path.startswith("file:") else Path(path)
        rel = relative_to(root, absolute) if absolute is not None else None
        if rel is None:
            raise InvalidRequest(name, f"{path!r} is outside the workspace folder {root}")
        return rel
    rel = normalise_rel(path)
    if posixpath.normpath(rel).split("/")[0] == "..":  # (was accepted, then silently not indexed)
        raise InvalidRequest(name, f"{path!r} is outside the workspace folder {root}")
    return rel


def file_uri(root: Path, rel: str) -> str:
    return path_to_uri(root / rel)


# -- ranges and symbols --------------------------------------------------------------------------------
def lsp_range(start_line: int, end_line: int) -> types.Range:
    """1-based inclusive lines -> a 0-based LSP range covering them whole (end = start of the next line)."""
    start = max(0, int(start_line) - 1)
    return types.Range(types.Position(start, 0), types.Position(max(start, int(end_line)), 0))


def symbol_kind(sym: dict[str, Any]) -> types.SymbolKind:
    if sym.get("kind") == "heading":
        return types.SymbolKind.String
    return SYMBOL_KINDS.get(str(sym.get("entityType") or "").lower(), types.SymbolKind.Object)


def symbol_information(sym: dict[str, Any], root: Path) -> types.SymbolInformation:
    """An engine symbol {name, kind, path, startLine, endLine, entityType?} -> SymbolInformation."""
    container = sym.get("entityType") if sym.get("kind") == "entity" else sym.get("path")
    return types.SymbolInformation(
        name=str(sym["name"]),
        kind=symbol_kind(sym),
        location=types.Location(file_uri(root, sym["path"]), lsp_range(sym["startLine"], sym["endLine"])),
        container_name=container or None,
    )


# -- progress ------------------------------------------------------------------------------------------
def percentage(p: IndexProgress) -> int:
    return int(100 * p.fraction)


def eta_text(seconds: float | None) -> str:
    if seconds is None:
        return ""
    s = int(round(seconds))
    return f", about {s // 60}:{s % 60:02d} left" if s >= 60 else f", about {s} s left"


def progress_report(p: IndexProgress) -> types.WorkDoneProgressReport:
    """The phase, where it is, and the ETA measured from its throughput so far."""
    if p.phase == "embedding":
        message = f"embedding: {p.chunks_done}/{p.chunks_total} chunks{eta_text(p.eta_seconds)}"
    elif p.phase == "done":
        message = f"{p.files_total} files done"
    elif p.phase == "file_keywords":  # (keyword-searchable already: its passages are)
        message = f"whole-file keywords: {p.files_done}/{p.files_total} files"
    elif p.current_file:
        message = f"keywords: {p.current_file} ({p.files_done + 1}/{p.files_total}){eta_text(p.eta_seconds)}"
    else:
        message = f"keywords: {p.files_done}/{p.files_total} files"
    return types.WorkDoneProgressReport(message=message, percentage=percentage(p), cancellable=True)


def summary_message(s: IndexSummary | None, cancelled: bool = False) -> str:
    if s is None:
        return "indexing failed (see the log)"
    text = (
        f"{s.files} files, {s.chunks} chunks ({s.changed} changed, {s.deleted} removed, "
        f"{s.embedded} embedded, {s.reused} reused) in {s.seconds:.1f} s"
    )
    if s.cancelled or cancelled:
        left = f"; left: {s.pending_files} files to read, {s.unembedded} chunks to embed"
        return "cancelled; the index is consistent: " + text + left
    if s.paused or s.declined:
        return text + f"; embedding paused ({s.unembedded} chunks keyword-searchable only)"
    return text + (f"; keyword search only: {s.degraded}" if s.degraded else "")


# -- multi-root ----------------------------------------------------------------------------------------
def tag_folder(items: list[dict[str, Any]], folder_uri: str) -> list[dict[str, Any]]:
    return [{**item, "workspaceFolder": folder_uri} for item in items]


def merge_search(responses: list[tuple[str, dict[str, Any]]], max_results: int | None) -> dict[str, Any]:
    """Search responses of several folders -> one response, best scores first, each result tagged."""
    first = responses[0][1]
    results = [r for uri, resp in responses for r in tag_folder(resp.get("results") or [], uri)]
    if len(responses) > 1:
        results.sort(key=lambda r: r.get("score") or 0.0, reverse=True)
        results = results[:max_results] if max_results else results
    merged = {
        **first,
        "results": results,
        "degraded": next((resp.get("degraded") for _, resp in responses if resp.get("degraded")), None),
        "indexing": any(bool(resp.get("indexing")) for _, resp in responses),
        "elapsedMs": max(float(resp.get("elapsedMs") or 0.0) for _, resp in responses),
        # scores are calibrated per folder's model, so the best folder speaks for the whole workspace
        "confidence": max(float(resp.get("confidence") or 0.0) for _, resp in responses),
        "noConfidentMatch": all(bool(resp.get("noConfidentMatch")) for _, resp in responses),
    }
    merged.pop("warnings", None)
    warnings = list(dict.fromkeys(w for _, resp in responses for w in resp.get("warnings") or ()))
    if warnings:  # (each folder's `.context_settings.json` that cannot be read)
        merged["warnings"] = warnings
    return merged


SUMMED_STATUS = (
    "totalFiles",
    "totalChunks",
    "embeddedChunks",
    "unembeddedChunks",
    "pendingFiles",
    "totalCostUsd",
    "totalTokens",
    "excludedFiles",
)


def merge_status(statuses: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """One folder: its status. Several: the first folder's status with totals summed, plus `folders`."""
    first = {**statuses[0][1], "workspaceFolder": statuses[0][0]}
    if len(statuses) == 1:
        return first
    for key in SUMMED_STATUS:
        first[key] = sum(s.get(key) or 0 for _, s in statuses)
    first["isIndexing"] = any(s.get("isIndexing") for _, s in statuses)
    # degraded when any folder is (e.g. chunks without vectors in the second folder)
    first["degraded"] = next((s["degraded"] for _, s in statuses if s.get("degraded")), None)
    first["folders"] = [{**s, "workspaceFolder": uri} for uri, s in statuses]
    return first


# -- writer-aware features (retrieval/entities.py) ---------------------------------------------------------------
def client_units(codec: Any, text: str) -> int:
    """Length of `text` in the client's position units (pygls counts them char by char in Python: too slow for
    a thousand mentions on long prose lines)."""
    if text.isascii():
        return len(text)
    encoding = str(codec.encoding or types.PositionEncodingKind.Utf16)
    if encoding == types.PositionEncodingKind.Utf8:
        return len(text.encode("utf-8"))
    if encoding == types.PositionEncodingKind.Utf32:
        return len(text)
    return len(text.encode("utf-16-le")) // 2


def client_range(codec: Any, line_text: str, line: int, start: int, end: int) -> types.Range:
    """0-based line and code-point columns of `line_text` -> a range in the client's position encoding."""
    return types.Range(
        types.Position(line, client_units(codec, line_text[:start])),
        types.Position(line, client_units(codec, line_text[:end])),
    )


def mention_locations(root: Path, files: list[Any], codec: Any) -> list[types.Location]:
    """Mentions grouped by file (retrieval.entities.FileMentions) -> Locations in the client's position encoding.

    A line's columns are converted once for all its mentions (`_line_columns`): converting each mention's prefix
    of the line cost the line's length per mention (40,000 mentions on one 0.9 MB paragraph)."""
    out = []
    columns: dict[int, Callable[[int], int]] = {}  # id(line_text) -> its column converter (the texts live on)
    for f in files:
        uri = file_uri(root, f.path)
        for m in f.mentions:
            to_client = columns.get(id(m.line_text))
            if to_client is None:
                to_client = columns[id(m.line_text)] = _line_columns(codec, m.line_text)
            at = types.Range(types.Position(m.line, to_client(m.start)), types.Position(m.line, to_client(m.end)))
            out.append(types.Location(uri, at))
    return out


def _line_columns(codec: Any, line_text: str) -> Callable[[int], int]:
    """Code-point column -> client units on one line: the same for an ASCII line (or UTF-32), else a prefix sum
    of each character's units made once."""
    encoding = str(codec.encoding or types.PositionEncodingKind.Utf16)
    if line_text.isascii() or encoding == types.PositionEncodingKind.Utf32:
        return lambda col: col
    units = [0]
    for ch in line_text:
        units.append(units[-1] + client_units(codec, ch))
    return lambda col: units[col]


def declaration_location(root: Path, card: Any) -> types.Location:
    first, last = card.declaration
    return types.Location(file_uri(root, card.entity.path), lsp_range(first + 1, last + 1))


def hover_markdown(root: Path, cards: list[Any]) -> str:
    """One card per entity: name and type, summary, aliases, a link to its file."""
    parts = []
    for c in cards:
        e = c.entity
        lines = [f"**{e.name}** · _{e.entity_type}_"]
        if c.summary:
            lines.append(c.summary)
        for heading, note in getattr(c, "chapter_notes", []):  # (as of the card's chapter: later ones left out)
            lines.append(f"**{heading}**" + (f" — {note}" if note else ""))
        if c.mentions:
            lines.append(f"_{c.mentions}_")
        if e.aliases:
            lines.append("Also: " + ", ".join(e.aliases))
        lines.append(f"[{e.path}]({file_uri(root, e.path)}#L{c.declaration[0] + 1})")
        parts.append("\n\n".join(lines))
    return "\n\n---\n\n".join(parts)


def outline_symbols(items: list[Any], lines: list[str], codec: Any) -> list[types.DocumentSymbol]:
    """Engine outline items {name, kind, detail, entityType, first, last, children} -> DocumentSymbols."""

    def one(item: Any) -> types.DocumentSymbol:
        first, last = item.first, item.last
        end_char = client_units(codec, lines[last]) if 0 <= last < len(lines) else 0
        full = types.Range(types.Position(first, 0), types.Position(last, end_char))
        sel_end = client_units(codec, lines[first]) if 0 <= first < len(lines) else 0
        kind = (
            types.SymbolKind.String
            if item.kind == "heading"
            else SYMBOL_KINDS.get(item.entity_type.lower(), types.SymbolKind.Object)
        )
        return types.DocumentSymbol(
            name=item.name or "(untitled)",
            kind=kind,
            range=full,
            selection_range=types.Range(types.Position(first, 0), types.Position(first, sel_end)),
            detail=item.detail or None,
            children=[one(c) for c in item.children],
        )

    return [one(i) for i in items]

"""Context enrichment for AI agents (SPEC 9): search results assembled under a token budget."""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from .context_settings import load_context_settings
from .embeddings.base import estimate_tokens
from .errors import InvalidRequest
from .paths import normalise_rel
from .request_fields import bounded_int, query_text, require_object, typed
from .search import MAX_RESULTS, STOPWORDS, SearchRequest, parse_filter, run_search
from .skills import VectorSearchConfig, load_skill, parse_block
from .textio import BinaryFile, decode

if TYPE_CHECKING:
    from .project import Project

log = logging.getLogger(__name__)


@dataclass
class EnrichRequest:
    query: str
    config: VectorSearchConfig
    loaded_files: list[str] = field(default_factory=list)
    book_id: str | None = None
    want_search: bool | None = None
    max_results: int = 5
    max_search_tokens: int = 15000
    total_budget_tokens: int | None = None
    loaded_tokens: int = 0


def parse_enrich(project: Project, params: Mapping[str, Any]) -> EnrichRequest:
    params = require_object(params)
    query = query_text(params.get("query"))
    skill, inline = typed(params, "skill", str), typed(params, "skillConfig", Mapping)
    if inline is not None:
        block: Any = inline
        if "context" in inline:  # a whole skill document: take its [context.vector_search] table
            context = inline["context"]
            block = context.get("vector_search", {}) if isinstance(context, Mapping) else None
        if not isinstance(block, Mapping):
            raise InvalidRequest("skillConfig", "context.vector_search must be an object")
        config = parse_block(block, "skillConfig")
    elif skill:
        config = load_skill(project.root / project.settings.skills_dir, skill)
    else:
        config = VectorSearchConfig(enabled=True, max_results=project.settings.max_results_default,
                                    max_search_tokens=project.settings.max_search_tokens_default)  # fmt: skip
    loaded = params.get("loadedFiles") or []
    if not isinstance(loaded, list) or not all(isinstance(p, str) for p in loaded):
        raise InvalidRequest("loadedFiles", "must be a list of paths")
    book_id = typed(params, "bookId", str)
    want = typed(params, "wantSearch", bool)
    max_results = bounded_int(params, "maxResults", None, 1)
    max_tokens = bounded_int(params, "maxSearchTokens", None, 0)
    return EnrichRequest(
        query=query[:2000],
        config=config,
        loaded_files=[_rel(project, p) for p in loaded],
        book_id=book_id,
        want_search=want,
        max_results=min(MAX_RESULTS, max_results or config.max_results),
        max_search_tokens=config.max_search_tokens if max_tokens is None else max_tokens,
        total_budget_tokens=bounded_int(params, "totalBudgetTokens", None, 0),
        loaded_tokens=bounded_int(params, "loadedTokens", 0, 0) or 0,
    )


def _rel(project: Project, path: str) -> str:
    """A loaded file as the agent names it (root-relative, absolute, `file://` URI, `./` or `..` segments,
    backslashes) -> its root-relative path; a path outside the project is kept as given (it matches nothing)."""
    if path.startswith("file:"):
        path = unquote(urlparse(path).path)
    p = normalise_rel(path) if not os.path.isabs(path) else path
    target = Path(p) if os.path.isabs(p) else project.root / p
    try:
        return Path(os.path.normpath(target)).relative_to(project.root).as_posix()
    except ValueError:
        try:
            return target.resolve().relative_to(project.root.resolve()).as_posix()
        except (ValueError, OSError):
            return path


def should_search(req: EnrichRequest) -> tuple[bool, str]:
    """Whether to run, and why. With mode auto and no wantSearch: run when the query has 2+ content words."""
    cfg = req.config
    if not cfg.enabled:
        return False, "vector search is not enabled for this skill"
    if cfg.mode == "never":
        return False, "skill mode is never"
    if cfg.mode == "always":
        return True, "skill mode is always"
    if req.want_search is not None:
        return req.want_search, f"auto: wantSearch is {str(req.want_search).lower()}"
    words = [w for w in re.findall(r"\w+", req.query.lower()) if w not in STOPWORDS and len(w) > 2]
    if len(words) >= 2:
        return True, "auto: the query has enough content words to search"
    return False, "auto: the query is too short to search usefully"


def enrich_context(project: Project, params: Mapping[str, Any]) -> dict[str, Any]:
    req = parse_enrich(project, params)
    ran, reason = should_search(req)
    out: dict[str, Any] = {"contextBlock": "", "searchResults": [], "tokensUsed": 0, "skipped": [], "ran": ran,
                           "reason": reason, "degraded": None, "noConfidentMatch": False}  # fmt: skip
    if not ran:
        return out
    budget = req.max_search_tokens
    if req.total_budget_tokens is not None:
        budget = max(0, min(budget, req.total_budget_tokens - req.loaded_tokens))
    flt = parse_filter(
        {"entityTypes": req.config.filter_entity_types} if req.config.filter_entity_types else None
    )
    flt.book_scope = req.book_id
    cs = load_context_settings(project.root)
    loaded = set(req.loaded_files)
    forced = set(cs.forced())

    def already_loaded(path: str) -> bool:
        return path in loaded or path in forced or cs.mode_for(path) == "force"

    def search(exclude: list[str], log: bool) -> dict[str, Any]:
        f = dataclasses.replace(flt, exclude_paths=list(exclude))
        sreq = SearchRequest(query=req.query, max_results=min(100, req.max_results * 3), filter=f,
                             source="agent", log=log)  # fmt: skip
        return run_search(project, sreq)

    response = search([], log=True)
    out["degraded"] = response["degraded"]
    results = response["results"]
    dropped = sorted({r["filePath"] for r in results if already_loaded(r["filePath"])})
    skipped: dict[tuple[str, str], None] = {(path, "already_loaded"): None for path in dropped}
    if dropped and sum(not already_loaded(r["filePath"]) for r in results) < req.max_results:
        # Loaded files crowded the page: search again with them excluded before ranking.
        dup = loaded | {p for p in project.store.file_states() if already_loaded(p)}
        results = search(sorted(dup), log=False)["results"]
    floor = req.config.min_relevance
    relevant = [r for r in results if r["score"] >= floor]
    for r in results:
        if r["score"] < floor and not already_loaded(r["filePath"]):
            skipped.setdefault((r["filePath"], "low_relevance"), None)
    if not any(not already_loaded(r["filePath"]) for r in relevant):
        best = max((r["score"] for r in results), default=0.0)
        out["reason"] = f"{reason}; the search found nothing relevant" + (
            f" (best score {best:.2f} is below min_relevance {floor:.2f})" if results else ""
        )
    results = relevant
    out["noConfidentMatch"] = bool(response.get("noConfidentMatch", not results))
    blocks: list[str] = []
    seen: set[tuple[str, str]] = set()
    files: dict[str, _FileView] = {}
    used = 0
    taken = 0
    for r in results:
        path = r["filePath"]
        if already_loaded(path):
            continue
        if taken >= req.max_results:
            break
        text = _passage(project, r, files)
        if text is None:
            skipped[(path, "missing")] = None
            continue
        if (path, text) in seen:  # chunks of one long line share its range: one copy
            continue
        seen.add((path, text))
        heading = r["sectionHeading"] or r["headingPath"] or "(start of file)"
        block = f"=== FILE: {path} (SEARCH) ===\n(matched section: {heading})\n{text.rstrip()}\n"
        cost = estimate_tokens(block)
        if used + cost > budget:
            skipped[(path, "over_budget")] = None
            continue
        blocks.append(block)
        used += cost
        taken += 1
        out["searchResults"].append({"filePath": path, "section": heading, "similarityScore": r["score"],
                                     "confidence": r["confidence"],
                                     "tokensEst": cost, "contentPreview": r["preview"],
                                     "startLine": r["startLine"], "endLine": r["endLine"]})  # fmt: skip
    out["skipped"] = [{"path": path, "reason": reason} for path, reason in skipped]
    out["contextBlock"] = "\n".join(blocks)
    out["tokensUsed"] = used
    return out


def _passage(project: Project, r: Mapping[str, Any], files: dict[str, _FileView]) -> str | None:
    """The text of a search result as the file holds it now, or None when the file no longer holds it.

    Lines are read from disk (the source of truth), then checked against the indexed chunk: after an edit not
    yet indexed, the recorded line range can point at other text or past the end of the file. A chunk that is
    only part of a long line (a paragraph written on one line) is given as its own text, not the whole line.
    `files` keeps each file's lines and chunks for the request: several results often share a file."""
    path = r["filePath"]
    if path not in files:
        files[path] = _FileView(_file_lines(project, path), project.store.chunks_for_path(path))
    view = files[path]
    if view.lines is None:
        return None
    current = "\n".join(view.lines[r["startLine"] - 1 : r["endLine"]])
    chunk = next(
        (c for c in view.chunks
         if c["start_line"] == r["startLine"] and c["end_line"] == r["endLine"] and c["preview"] == r["preview"]),
        None,
    )  # fmt: skip
    if chunk is None or chunk.get("kind") == "frontmatter":
        return current if current.strip() else None
    indexed, now = " ".join(chunk["text"].split()), " ".join(current.split())
    if indexed not in now:
        return None  # changed since it was indexed: the passage is gone or moved
    if len(now) > 1.5 * len(indexed) + 200:
        return chunk["text"]
    return current


@dataclass
class _FileView:
    lines: list[str] | None  # None: the file is gone or unreadable
    chunks: list[dict[str, Any]]


def _file_lines(project: Project, rel: str) -> list[str] | None:
    try:
        return decode((project.root / rel).read_bytes(), rel).text.split("\n")
    except (OSError, BinaryFile):
        return None

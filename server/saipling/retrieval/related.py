"""`saipling/related` (SPEC 8): passages in other files most similar to a file, or to the passage at some of its
lines; by meaning (the mean of the chunks' vectors) when vectors exist, else by the file's most distinctive words."""

from __future__ import annotations

import collections
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..config.visibility import role_levels
from ..errors import InvalidRequest
from ..files.context_settings import load_context_settings
from ..lazy import np
from ..markdown.terms import WORD_RE, is_label_frontmatter
from ..storage.base import ChunkFilter, KeywordQuery, StoredChunk
from .confidence import ramp
from .reading import authorize, check_start_line, file_lines
from .request_checks import MAX_RESULTS
from .search import (
    Ranked,
    fold_front_matter,
    live_rows,
    result_dict,
    settings_gate,
    vector_calibration,
    vector_unavailable,
)

if TYPE_CHECKING:
    from .project_view import ProjectView


def related(project: ProjectView, params: Mapping[str, Any]) -> dict[str, Any]:
    """Passages from other files most similar to this file (mean of its chunk vectors), or to the passage at
    `startLine`..`endLine` of it (the chunks those lines fall in); with `maxChapter`, none past that chapter (as
    search's spoiler horizon)."""
    from .requests import RelatedParams, parse

    m = parse(RelatedParams, params)
    target = m.path or m.uri
    if not target:
        raise InvalidRequest("path", "is required and must be a non-empty string")
    if m.end_line is not None and (m.start_line is None or m.end_line < m.start_line):
        raise InvalidRequest("endLine", "needs a startLine at or before it")
    max_results = m.max_results or max(1, min(project.settings.max_results_default, MAX_RESULTS))
    # `get`'s check, to the letter: a file `get` refuses (private, excluded, missing, outside) is refused here with
    # the same error, before its chunks, vectors or words are looked at
    respect = m.respect_context_settings is not False
    authorized = authorize(project, target, m.role, respect)
    rel = authorized.rel
    if m.start_line is not None:  # a line past the end is refused as `get` refuses it, never clamped to the last
        check_start_line(rel, m.start_line, len(file_lines(authorized.text)))
    t0 = time.perf_counter()
    sync = getattr(project, "lazy_sync", None)
    if sync is not None:
        sync([rel])  # edited since its text was read: its lines (and `startLine`) are today's
    chunks = project.store.chunks_for_path(rel)
    if chunks and m.start_line is not None:
        chunks = _chunks_at(chunks, m.start_line, m.end_line or m.start_line)
    else:
        chunks = _without_labels(chunks)
    flt = ChunkFilter(
        exclude_paths=[rel],
        visibility=role_levels(project.settings.roles, m.role, project.settings.default_role),
        max_chapter=m.max_chapter,  # (from chapter 5, passages of chapter 25 spoiled the book)
    )
    cs = load_context_settings(project.root)
    warnings = list(dict.fromkeys(cs.warnings + authorized.warnings))
    if respect and cs.has("exclude"):
        flt.exclude_paths += cs.excluded(list(project.store.file_states()))
    degraded = vector_unavailable(project)
    ranked: list[Ranked] = []
    vecs = project.store.chunk_vectors([c.id for c in chunks]) if chunks and degraded is None else {}
    if vecs:
        mean = np.mean(np.stack(list(vecs.values())), axis=0)
        mean /= np.linalg.norm(mean) or 1.0
        ranked = [
            Ranked(cid, max(0.0, s), None, i + 1, None, s)
            for i, (cid, s) in enumerate(project.store.knn(mean, max_results * 3, flt))
        ]
    elif chunks:  # keyword only, or text not embedded yet (a passage just written): by its distinctive words
        words = collections.Counter(w.lower() for c in chunks for w in WORD_RE.findall(c.text or "") if len(w) > 4)
        match = KeywordQuery.parse(" ".join(w for w, _ in words.most_common(24)))
        if match:
            hits = project.store.keyword_search(match, max_results * 3, flt)
            best = abs(hits[0][1]) if hits else 1.0
            ranked = [Ranked(cid, abs(b) / best if best else 0.0, i + 1, None, b) for i, (cid, b) in enumerate(hits)]
    gate = settings_gate(cs) if respect else None
    pairs, _, _ = live_rows(project, ranked, max_results * 2, horizon=m.max_chapter, excluded=gate)
    pairs = fold_front_matter(project, pairs, m.max_chapter)[:max_results]
    cal = vector_calibration(project)
    for _, r in pairs:
        r.confidence = ramp(r.cosine, cal.low, cal.high) if cal and r.cosine is not None else r.score
    results = [result_dict(project, row, r.score, [], r) for row, r in pairs]
    out = {
        "path": rel,
        "results": results,
        "degraded": degraded if chunks else None,
        "indexed": bool(chunks),
        "elapsedMs": round((time.perf_counter() - t0) * 1000, 2),
    }
    if warnings:
        out["warnings"] = warnings
    if chunks and m.start_line is not None:  # the passage the results are like
        out["startLine"], out["endLine"] = chunks[0].start_line, chunks[-1].end_line
    return out


def _without_labels(chunks: list[StoredChunk]) -> list[StoredChunk]:
    """A file's chunks without a frontmatter that only labels it (markdown.terms.is_label_frontmatter): in the
    mean of its vectors `aliases: Flee / tags: 13A/Combat/...` pulled in the labels of other pages (related to
    Flee.md: four frontmatter blocks of four other rules pages, then a Bugbear's statblock)."""
    body = [c for c in chunks if c.kind != "frontmatter"]
    if not body:
        return chunks
    return [
        c
        for c in chunks
        if c.kind != "frontmatter" or not is_label_frontmatter(c.text or "", c.path, body[0].heading_path)
    ]


def _chunks_at(chunks: list[StoredChunk], lo: int, hi: int) -> list[StoredChunk]:
    """The chunks of a file that lines lo..hi fall in; between chunks (a blank line, a lone heading), the one
    before (else the first). Frontmatter only when the lines are in it."""
    inside = [c for c in chunks if c.start_line <= hi and c.end_line >= lo]
    body = [c for c in inside if c.kind != "frontmatter"] or inside
    if body:
        return body
    text = [c for c in chunks if c.kind != "frontmatter"] or chunks
    before = [c for c in text if c.start_line <= lo]
    return [before[-1] if before else text[0]]

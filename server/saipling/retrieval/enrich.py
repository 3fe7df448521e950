"""Context enrichment for AI agents (SPEC 9): search results assembled under a token budget."""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from ..config.skills import VectorSearchConfig, load_skill, parse_block
from ..config.visibility import role_levels, visible
from ..embeddings.base import estimate_tokens
from ..errors import InvalidRequest
from ..files.context_settings import load_context_settings
from ..files.metadata import extract_metadata
from ..files.textio import BinaryFile, decode, read_regular
from ..markdown.blocks import MarkdownBlocks, indexed_lines, parse_blocks
from ..markdown.terms import FUNCTION_WORDS
from ..paths import normalise_rel
from ..storage.base import ChunkFilter, StoredChunk
from .requests import MAX_RESULTS, EnrichParams, parse
from .search import INDEXING_NOTE, SearchRequest, run_search

if TYPE_CHECKING:
    from .project_view import ProjectView

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
    role: str | None = None
    known_by: str | None = None  # only what this entity knows (retrieval/mentions.py), by chapter `max_chapter`
    max_chapter: int | None = None


def parse_enrich(project: ProjectView, params: Mapping[str, Any]) -> EnrichRequest:
    m = parse(EnrichParams, params)
    skill, inline = m.skill, m.skill_config
    if inline is not None:
        block: Any = inline
        if "context" in inline:  # a whole skill document: take its [context.vector_search] table
            context = inline["context"]
            block = context.get("vector_search", {}) if isinstance(context, Mapping) else None
        if not isinstance(block, Mapping):
            raise InvalidRequest("skillConfig", "context.vector_search must be an object")
        config = parse_block(block, "skillConfig")
    elif skill:
        config = load_skill(project.root / project.settings.skills_dir, skill, root=project.root)
    else:
        config = VectorSearchConfig(
            enabled=True,
            max_results=project.settings.max_results_default,
            max_search_tokens=project.settings.max_search_tokens_default,
        )
    return EnrichRequest(
        query=m.query[:2000],
        config=config,
        loaded_files=[_rel(project, p) for p in m.loaded_files or []],
        book_id=m.book_id,
        want_search=m.want_search,
        max_results=min(MAX_RESULTS, m.max_results or config.max_results),
        max_search_tokens=config.max_search_tokens if m.max_search_tokens is None else m.max_search_tokens,
        total_budget_tokens=m.total_budget_tokens,
        loaded_tokens=m.loaded_tokens or 0,
        role=m.role,
        known_by=m.known_by or config.known_by,
        max_chapter=m.max_chapter if m.max_chapter is not None else config.max_chapter,
    )


def _rel(project: ProjectView, path: str) -> str:
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


# Words of conversation, not of a subject: a message of these alone ("ok thanks", "yes please") asks for nothing
# to look up (kept to words no project is about: "undo", "retry" or "next" may be a subject)
CHAT_WORDS = frozenset("yes yeah yep nope okay ok sure thanks thank please hello hey hi bye cool".split())
_NOT_CONTENT = FUNCTION_WORDS | CHAT_WORDS


def should_search(req: EnrichRequest) -> tuple[bool, str]:
    """Whether to run, and why. With mode auto and no wantSearch: run when the query has a content word (neither a
    function word nor a word of conversation, CHAT_WORDS): "flee" and "how do I disengage?" in a rules vault run,
    "ok thanks" does not. Decided from the query alone: whether the project holds a word is not the agent's to learn
    from it (a private or excluded file's words would show)."""
    cfg = req.config
    if not cfg.enabled:
        return False, "vector search is not enabled for this skill (`enabled = true` turns it on)"
    if cfg.mode == "never":
        return False, "skill mode is never"
    if cfg.mode == "always":
        return True, "skill mode is always"
    if req.want_search is not None:
        return req.want_search, f"auto: wantSearch is {str(req.want_search).lower()}"
    if any(w not in _NOT_CONTENT and len(w) > 2 for w in re.findall(r"\w+", req.query.lower())):
        return True, "auto: the query has content words to search"
    return False, "auto: the query has no content word to search (wantSearch: true searches anyway)"


def enrich_context(project: ProjectView, params: Mapping[str, Any]) -> dict[str, Any]:
    req = parse_enrich(project, params)
    ran, reason = should_search(req)
    cs = load_context_settings(project.root)
    out: dict[str, Any] = {
        "contextBlock": "",
        "searchResults": [],
        "tokensUsed": 0,
        "skipped": [],
        "ran": ran,
        "reason": reason,
        "degraded": None,
        "noConfidentMatch": False,
        "indexing": False,
    }
    if cs.warnings:  # (a `.context_settings.json` that cannot be read, and what applies instead)
        out["warnings"] = cs.warnings
    if not ran:
        return out
    budget = req.max_search_tokens
    if req.total_budget_tokens is not None:
        budget = max(0, min(budget, req.total_budget_tokens - req.loaded_tokens))
    flt = ChunkFilter(
        entity_types=list(req.config.filter_entity_types or []), max_chapter=req.max_chapter, known_by=req.known_by
    )
    flt.book_scope = req.book_id
    loaded = set(req.loaded_files)
    forced = set(cs.forced())

    def already_loaded(path: str) -> bool:
        return path in loaded or path in forced or cs.mode_for(path) == "force"

    def search(exclude: list[str], log: bool) -> dict[str, Any]:
        f = dataclasses.replace(flt, exclude_paths=list(exclude))
        sreq = SearchRequest(
            query=req.query, max_results=min(100, req.max_results * 3), filter=f, source="agent", log=log, role=req.role
        )
        return run_search(project, sreq)

    response = search([], log=True)
    out["degraded"] = response["degraded"]
    results = response["results"]
    dropped = sorted({r["filePath"] for r in results if already_loaded(r["filePath"])})
    skipped: dict[tuple[str, str], None] = {(path, "already_loaded"): None for path in dropped}
    if dropped:
        # Loaded files are among the results: search again with them excluded before ranking. They crowded the
        # page, and each result's score is measured against the best one: below a loaded file that answered
        # best, every other passage fell under min_relevance and the agent got nothing.
        dup = loaded | {p for p in project.store.file_states() if already_loaded(p)}
        results = search(sorted(dup), log=False)["results"]
    floor = req.config.min_relevance
    relevant = [r for r in results if r["score"] >= floor]
    for r in results:
        if r["score"] < floor and not already_loaded(r["filePath"]):
            skipped.setdefault((r["filePath"], "low_relevance"), None)
    if not any(not already_loaded(r["filePath"]) for r in relevant):
        best = max((r["score"] for r in results if not already_loaded(r["filePath"])), default=0.0)
        out["reason"] = f"{reason}; the search found nothing relevant" + (
            f" (best score {best:.2f} is below min_relevance {floor:.2f})" if results else ""
        )
    results = relevant
    out["noConfidentMatch"] = bool(response.get("noConfidentMatch", not results))
    out["indexing"] = bool(response.get("indexing"))
    if out["indexing"] and not results:
        out["reason"] = f"{reason}; {INDEXING_NOTE}"
    ctx = _ContextBuilder()
    files: dict[str, _FileView] = {}
    levels = role_levels(project.settings.roles, req.role, project.settings.default_role)
    taken = 0
    over_budget = 0  # passages that did not fit (the reason an empty context gives when they are all it found)
    for r in results:
        path = r["filePath"]
        if already_loaded(path):
            continue
        if taken >= req.max_results:
            break
        passage = _passage(project, r, files, levels)
        if passage is None:
            if not files[path].hidden:  # (a file made invisible since it was indexed is not named at all)
                skipped[(path, "missing")] = None
            continue
        wider = _wider(files[path], r, passage)
        text, whole_lines, first, last = passage
        # (a passage under no heading: at line 1 the file's start, else a file without headings or the part of it
        # before the first one; a Bestiary passage at lines 25-30 was labelled "(start of file)")
        unheaded = "(start of file)" if first <= 1 else "(no heading)"
        if whole_lines or r["headingPath"] or r["sectionHeading"]:
            heading = r["headingPath"] or r["sectionHeading"] or unheaded
        else:
            heading = "(frontmatter)" if files[path].is_frontmatter(r) else unheaded
        span = _Span(first, last, text.rstrip(), [heading], whole_lines)
        view = files[path]
        sections = view.sections
        added = None
        if wider is not None:  # the whole paragraph or small section when it fits, else the passage alone
            wide = dataclasses.replace(span, start=wider[0], end=wider[1], text=wider[2], whole_lines=True)
            added = ctx.add(path, wide, view.lines or [], budget, view.indexed, sections)
        if added is None or added < 0:
            added = ctx.add(path, span, view.lines or [], budget, view.indexed, sections)
        if added is None:
            continue  # already in the context (a chunk inside a section given before): nothing new
        if added < 0:
            skipped[(path, "over_budget")] = None
            over_budget += 1
            continue
        taken += 1
        out["searchResults"].append(
            {
                "filePath": path,
                "section": heading,
                "similarityScore": r["score"],
                "confidence": r["confidence"],
                "tokensEst": added,
                "contentPreview": r["preview"],
                "startLine": r["startLine"],
                "endLine": r["endLine"],
            }
        )
    if over_budget and not out["searchResults"]:  # nothing added, and not for want of relevant passages
        found = f"the {over_budget} passages found are each" if over_budget > 1 else "the one passage found is"
        out["reason"] = f"{reason}; {found} over the {budget}-token budget"
    # (a file with a passage in the context is not one skipped for low relevance: its weaker passages were left)
    added_paths = {r["filePath"] for r in out["searchResults"]}
    out["skipped"] = [
        {"path": path, "reason": why} for path, why in skipped if not (why == "low_relevance" and path in added_paths)
    ]
    out["contextBlock"] = ctx.render()
    out["tokensUsed"] = ctx.tokens
    return out


# A passage whose whole section (its heading's chunks; a file without headings: its body) is at most this many
# tokens is given as that section: a spell's passage came without the table of effects its own text points to
# (`roll a d4 for the effect`), a rule's without its exceptions
SECTION_TOKENS = 400
# A chunk that is part of a paragraph written on one long line is given as the whole paragraph up to this many
# tokens (a paragraph past it, a chapter on one line, as its own piece)
WHOLE_PARAGRAPH_TOKENS = 600
# Two passages of one file with at most this many lines (and tokens) between them are given as one, the lines
# between included, when the budget allows: a class's spell-choice rule came as lines 122-128 and 142-147 without
# 132-140, the mechanism itself
GAP_LINES = 12
GAP_TOKENS = 250


@dataclass
class _Span:
    """One passage of a file in the context: a line range, its text, the heading paths it covers."""

    start: int
    end: int
    text: str
    headings: list[str]
    whole_lines: bool  # the text is lines start..end as the file holds them (else part of one long line)


class _ContextBuilder:
    """The context block: one block per file (files in rank order of their best passage), its passages in file
    order, each headed by its heading path and lines; passages that overlap or touch (only blank lines between)
    merge into one. `add` keeps the whole rendering within the budget."""

    def __init__(self) -> None:
        self.files: dict[str, list[_Span]] = {}
        self.tokens = 0

    def add(
        self,
        path: str,
        span: _Span,
        lines: list[str],
        budget: int,
        indexed: list[str] | None = None,
        sections: list[tuple[int, int, str]] | None = None,
    ) -> int | None:
        """The tokens the passage adds (it is added); None when it adds nothing; -1 when it does not fit.
        `indexed`: the file's lines as indexed (comments and link definitions blank: they do not part passages).
        `sections`: the file's chunks as (first line, last line, heading path), for the lines between passages."""
        spans = self.files.get(path, [])
        for gaps in (True, False):  # the lines between nearby passages when they fit, else the passages alone
            merged = _merge([*spans, span], lines, indexed, sections if gaps else None)
            if [(x.start, x.end, x.text) for x in merged] == [(x.start, x.end, x.text) for x in spans]:
                return None
            trial = dict(self.files)
            trial[path] = merged
            cost = estimate_tokens(_render(trial))
            if cost <= budget:
                added, self.files, self.tokens = cost - self.tokens, trial, cost
                return added
        return -1

    def render(self) -> str:
        return _render(self.files)


def _merge(
    spans: list[_Span],
    lines: list[str],
    indexed: list[str] | None = None,
    sections: list[tuple[int, int, str]] | None = None,
) -> list[_Span]:
    """Passages of one file in file order, those that overlap or touch (only blank lines between) as one; with the
    file's `sections` (its chunks' lines and heading paths), also those at most GAP_LINES / GAP_TOKENS apart whose
    lines between lie in their own sections, those lines included."""
    blank = indexed if indexed is not None and len(indexed) == len(lines) else lines

    def joins(prev: _Span, sp: _Span) -> bool:
        between = range(prev.end + 1, sp.start)
        if sp.start <= prev.end + 1 + sum(1 for k in between if not blank[k - 1].strip()):
            return True
        if sections is None or len(between) > GAP_LINES:
            return False
        # (only lines of the passages' own sections: another section between them, a setext `Chapter 21` past a
        # spoiler horizon among them, is no missing part of either)
        own = set(prev.headings) | set(sp.headings)
        unheaded = any(h.startswith("(") for h in own)
        crossed = {h for a, b, h in sections if a <= sp.start - 1 and b >= prev.end + 1}
        if not all(h in own or (not h and unheaded) for h in crossed):
            return False
        gap = lines[prev.end : sp.start - 1]
        heads = [m.group(1).strip("#* ").strip() for line in gap if (m := _HEADING_RE.match(line))]
        # (a setext heading: a line of `=` or `-` under text; a section of a heading alone has no chunk of its own)
        heads += [
            gap[i - 1].strip("#* ").strip()
            for i in range(1, len(gap))
            if _SETEXT_RE.match(gap[i]) and gap[i - 1].strip()
        ]
        parts = {part.strip() for h in own for part in h.split(" > ")}
        return all(h in parts for h in heads) and estimate_tokens("\n".join(gap)) <= GAP_TOKENS

    # A piece of a long line (a window of a paragraph written on one line) inside lines another passage gives
    # whole is text the context holds already: Dracula's chapter 8 line 26 came whole, then its second half again.
    # (by text too: a passage of whole lines may begin inside its first line, from its chunk's first sentence, and
    # a piece of that line before it lies within its lines but not its text)
    wholes = [(x.start, x.end, " ".join(x.text.split())) for x in spans if x.whole_lines]
    spans = [
        x
        for x in spans
        if x.whole_lines or not any(a <= x.start and x.end <= b and " ".join(x.text.split()) in t for a, b, t in wholes)
    ]
    out: list[_Span] = []
    for sp in sorted(spans, key=lambda x: (x.start, x.end)):
        prev = out[-1] if out else None
        if prev is not None and prev.whole_lines and sp.whole_lines and joins(prev, sp):
            start, end = prev.start, max(prev.end, sp.end)
            heads = prev.headings + [h for h in sp.headings if h not in prev.headings]
            # the first line as the earlier passage gives it (from its first sentence: _FileView.sentence_start)
            firsts = [prev.text.split("\n", 1)[0]] + ([sp.text.split("\n", 1)[0]] if sp.start == start else [])
            first = max(firsts, key=len) if start <= len(lines) else ""
            text = "\n".join([first, *lines[start:end]]).rstrip()
            out[-1] = _Span(start, end, text, heads, True)
        elif prev is not None and (prev.start, prev.end, prev.text) == (sp.start, sp.end, sp.text):
            continue  # chunks of one long line can share its range and text: one copy
        else:
            out.append(sp)
    return out


def _render(files: dict[str, list[_Span]]) -> str:
    blocks = []
    for path, spans in files.items():
        parts = [f"=== FILE: {path} (SEARCH) ==="]
        for sp in spans:
            where = f"line {sp.start}" if sp.start == sp.end else f"lines {sp.start}-{sp.end}"
            parts.append(f"--- {' | '.join(sp.headings)} ({where}) ---\n{sp.text}")
        blocks.append("\n".join(parts) + "\n")
    return "\n".join(blocks)


def _passage(
    project: ProjectView, r: Mapping[str, Any], files: dict[str, _FileView], levels: list[str]
) -> tuple[str, bool, int, int] | None:
    """The text of a search result as the file holds it now, whether it is whole lines of the file, and its first
    and last line; or None when the file no longer holds it.

    Whole lines start at a sentence or block boundary: a chunk that begins inside a line (a window whose first
    sentence follows another on its line) is given from that sentence on, and the comments and link definitions
    at either end of its range (not indexed: markdown/chunker.py) are left out.

    Lines are read from disk (the source of truth; wiki-links shown as their display text, as indexed), then
    checked against the indexed chunk: after an edit not yet indexed, the recorded line range can point at other
    text or past the end of the file. A chunk that is only part of a long line (a paragraph written on one line)
    is given as its own text, not the whole line; a frontmatter chunk as its readable `key: value` prose.
    `files` keeps each file's lines and chunks for the request: several results often share a file."""
    path = r["filePath"]
    if path not in files:
        doc, unchanged, hidden = _file_lines(project, path, levels)
        files[path] = _FileView(
            doc.lines if doc else None,
            project.store.chunks_for_path(path),
            unchanged,
            indexed_lines(doc) if doc else None,
            doc.code_lines if doc else frozenset(),
            hidden,
        )
    view = files[path]
    if view.lines is None or view.indexed is None:
        return None
    a, b = r["startLine"], r["endLine"]
    chunk = next(
        (c for c in view.chunks if c.start_line == a and c.end_line == b and c.preview == r["preview"]),
        None,
    )
    if chunk is None:
        current = "\n".join(view.lines[a - 1 : b])
        return (current, True, a, b) if current.strip() else None
    text = chunk.text or ""
    if chunk.kind == "frontmatter":
        return (text, False, a, b) if text.strip() else None
    indexed, now = " ".join(text.split()), " ".join("\n".join(view.indexed[a - 1 : b]).split())
    if not view.unchanged and indexed not in now:
        return None  # changed since it was indexed: the passage is gone or moved
    if len(now) > 1.5 * len(indexed) + 200:  # part of a paragraph written on one long line (or a few)
        return text, False, a, b  # (its whole paragraph, when small: _wider)
    while a < b and not view.indexed[a - 1].strip():  # comments, link definitions at the ends
        a += 1
    while b > a and not view.indexed[b - 1].strip():
        b -= 1
    first = view.sentence_start(a, text)
    return "\n".join([first, *view.lines[a:b]]), True, a, b


def _wider(view: _FileView, r: Mapping[str, Any], passage: tuple[str, bool, int, int]) -> tuple[int, int, str] | None:
    """(first line, last line, text) of more than the passage, tried first when it fits the budget: for a piece of
    a paragraph written on one long line, the whole paragraph up to WHOLE_PARAGRAPH_TOKENS (the piece alone lost
    the sentence it leaned on: "That animal companion will be one level lower..."); for a passage of whole lines,
    its whole section when that is at most SECTION_TOKENS (the run of the file's chunks around it under the same
    heading path). None for a frontmatter, or when the file changed since it was indexed (line ranges may not
    hold)."""
    _text, whole_lines, first, last = passage
    if not view.unchanged or view.lines is None or view.indexed is None or view.is_frontmatter(r):
        return None
    if not whole_lines:
        text = "\n".join(view.lines[first - 1 : last])
        return (first, last, text) if estimate_tokens(text) <= WHOLE_PARAGRAPH_TOKENS else None
    body = [c for c in view.chunks if c.kind != "frontmatter"]
    at = next((i for i, c in enumerate(body) if c.start_line == r["startLine"] and c.preview == r["preview"]), None)
    if at is None:
        return None
    heading = body[at].heading_path
    lo = hi = at
    while lo > 0 and body[lo - 1].heading_path == heading:
        lo -= 1
    while hi + 1 < len(body) and body[hi + 1].heading_path == heading:
        hi += 1
    a, b = min(body[lo].start_line, first), max(body[hi].end_line, last)
    while a < b and not view.indexed[a - 1].strip():
        a += 1
    while b > a and not view.indexed[b - 1].strip():
        b -= 1
    if (a, b) == (first, last):
        return None
    text = "\n".join(view.lines[a - 1 : b])
    return (a, b, text) if estimate_tokens(text) <= SECTION_TOKENS else None


@dataclass
class _FileView:
    lines: list[str] | None  # None: the file is gone or unreadable
    chunks: list[StoredChunk]
    unchanged: bool = False  # the file's bytes are the ones indexed: every chunk's line range holds
    indexed: list[str] | None = None  # the lines as indexed (markdown.blocks.indexed_lines)
    code: frozenset[int] = frozenset()
    hidden: bool = False  # its visibility on disk is not the request's (changed since it was indexed)

    def sentence_start(self, line: int, text: str) -> str:
        """The passage's first line: line `line` from where the chunk's `text` starts on it, when that is after
        the line's start (a window whose first sentence follows another sentence on its line: whole, the passage
        would begin with the end of that other sentence)."""
        assert self.lines is not None and self.indexed is not None
        shown = self.lines[line - 1]
        head = text.split()[:2]
        if not head or line in self.code or " ".join(self.indexed[line - 1].split()).startswith(" ".join(head)):
            return shown
        found = [m.start() for m in re.finditer(r"\s+".join(map(re.escape, head)), shown)]
        after_end = [i for i in found if _SENTENCE_END_RE.search(shown[:i])]
        cut = (after_end or found or [0])[-1]
        return shown[cut:]

    @functools.cached_property
    def sections(self) -> list[tuple[int, int, str]] | None:
        """Its chunks as (first line, last line, heading path), for the lines between passages; None when the file
        changed since it was indexed (the chunks' lines may not hold)."""
        if not self.unchanged:
            return None
        return [(c.start_line, c.end_line, c.heading_path or "") for c in self.chunks if c.kind != "frontmatter"]

    def is_frontmatter(self, r: Mapping[str, Any]) -> bool:
        return any(
            c.kind == "frontmatter" and c.start_line == r["startLine"] and c.preview == r["preview"]
            for c in self.chunks
        )


_SETEXT_RE = re.compile(r"^ {0,3}(=+|-+)\s*$")
_HEADING_RE = re.compile(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_SENTENCE_END_RE = re.compile(r"[.!?…。！？][\"'”’»)\]]*\s+$")


def _file_lines(project: ProjectView, rel: str, levels: list[str]) -> tuple[MarkdownBlocks | None, bool, bool]:
    """The file's parse (its lines with wiki-links as display text), whether its bytes are the indexed ones, and
    whether it is hidden: its bytes changed since it was indexed and its visibility now is one `levels` do not see
    (the search that found it went by the indexed level). No parse when the file is gone, unreadable or hidden."""
    import hashlib

    try:
        data = read_regular(project.root / rel)
        text = decode(data, rel).text
    except (OSError, BinaryFile):
        return None, False, False
    record = project.store.get_file(rel)
    unchanged = record is not None and record.content_hash == hashlib.sha256(data).hexdigest()
    if not unchanged and not visible(extract_metadata(rel, text).visibility, levels):
        return None, False, True
    return parse_blocks(text), unchanged, False

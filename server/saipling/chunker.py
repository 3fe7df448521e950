"""Section-aware chunking with on-disk line ranges (SPEC 4).

A file becomes: an optional frontmatter chunk, then one chunk per heading section; a section over the limit
is split at paragraphs, then sentences, then words. A file without headings becomes paragraph windows with
overlap. Tiny pieces are merged into a neighbour so every non-blank body line stays covered.
"""

from __future__ import annotations

import bisect
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass

from .embeddings.base import estimate_tokens
from .metadata import BOOKKEEPING_KEYS, FileMeta

MIN_CHUNK_CHARS = 20
PREVIEW_CHARS = 200
_HEADING_RE = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_FENCE_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
# a sentence ends at . ! ? before whitespace; CJK full stops need no space after them
_SENTENCE_END_RE = re.compile(r"(?<=[.!?。！？])[\"')\]]*\s+|(?<=[。！？])(?=[^\s\"')\]」』）])")

TokenCounter = Callable[[str], int]


@dataclass(frozen=True)
class ChunkLimits:
    max_tokens: int = 1000
    target_tokens: int = 500
    overlap_tokens: int = 50


def limits_for(max_tokens: int, target_tokens: int, overlap_tokens: int, model_max_input: int) -> ChunkLimits:
    """Chunk limits that never exceed the model's input window (with headroom for the heading path)."""
    cap = max(32, int(model_max_input * 0.85)) if model_max_input else max_tokens
    mx = max(16, min(max_tokens, cap))
    tgt = max(8, min(target_tokens, int(mx * 0.8)))
    ovl = max(0, min(overlap_tokens, tgt // 4))
    return ChunkLimits(mx, tgt, ovl)


@dataclass
class Chunk:
    chunk_index: int
    kind: str  # frontmatter | section | window
    text: str
    embed_text: str
    section_heading: str | None
    heading_path: str
    start_line: int
    end_line: int
    token_count: int
    content_hash: str
    preview: str


@dataclass
class _Unit:
    start: int  # 1-based on-disk line
    end: int
    text: str
    tokens: int


@dataclass
class _Piece:
    start: int
    end: int
    text: str
    heading: str | None
    path: str
    kind: str


def embed_text_for(heading_path: str, text: str) -> str:
    return f"{heading_path}\n\n{text}" if heading_path else text


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def make_preview(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= PREVIEW_CHARS else flat[: PREVIEW_CHARS - 1].rstrip() + "…"


def render_frontmatter(fm: dict) -> str:
    lines = []
    for key, value in fm.items():
        if str(key).lower() in BOOKKEEPING_KEYS or value in (None, "", [], {}):
            continue
        if isinstance(value, list | tuple):
            value = ", ".join(str(v) for v in value)
        elif isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items())
        lines.append(f"{key}: {value}")
    return "\n".join(lines)


def chunk_document(
    text: str,
    meta: FileMeta | None = None,
    limits: ChunkLimits | None = None,
    count_tokens: TokenCounter = estimate_tokens,
) -> list[Chunk]:
    """Chunk normalised text (\\n newlines; line N = on-disk line N)."""
    limits = limits or ChunkLimits()
    lines = text.split("\n")
    body_start = meta.body_start_line if meta else 1
    pieces: list[_Piece] = []
    if meta and meta.frontmatter and body_start > 1:
        rendered = render_frontmatter(meta.frontmatter)
        if len(rendered) >= MIN_CHUNK_CHARS or (rendered and meta.display_name):
            for part in _fit_lines(rendered, limits.max_tokens, count_tokens):  # a long `description:` too
                pieces.append(_Piece(1, body_start - 1, part, None, "", "frontmatter"))
    sections = _sections(lines, body_start)
    has_headings = any(s[2] is not None for s in sections)
    for start, end, heading, path in sections:
        while end > start and not lines[end - 1].strip():  # ranges end on text, not on trailing blank lines
            end -= 1
        while start < end and not lines[start - 1].strip():
            start += 1
        body_units = _paragraphs(lines, start, end, count_tokens)
        if not body_units:
            continue
        kind = "section" if has_headings else "window"
        budget = max(8, limits.max_tokens - (count_tokens(path) if path else 0))
        section_text = "\n".join(lines[start - 1 : end])
        if has_headings and count_tokens(section_text) <= budget:
            pieces.append(_Piece(start, end, section_text, heading, path, kind))
            continue
        target = min(limits.target_tokens, budget)
        units = _split_units(body_units, budget, target, count_tokens)
        for u_start, u_end, u_text in _pack(
            units, target, budget, limits.overlap_tokens, lines, count_tokens
        ):
            pieces.append(_Piece(u_start, u_end, u_text, heading, path, kind))
    pieces = _merge_tiny(pieces, lines, limits, count_tokens)
    chunks = []
    for i, p in enumerate(pieces):
        etext = embed_text_for(p.path, p.text)
        chunks.append(
            Chunk(
                chunk_index=i,
                kind=p.kind,
                text=p.text,
                embed_text=etext,
                section_heading=p.heading,
                heading_path=p.path,
                start_line=p.start,
                end_line=p.end,
                token_count=count_tokens(etext),
                content_hash=content_hash(etext),
                preview=make_preview(p.text),
            )
        )
    return chunks


def _sections(lines: list[str], body_start: int) -> list[tuple[int, int, str | None, str]]:
    """(start, end, heading line text, heading path) per section; heading-only sections fold into the next."""
    heads: list[tuple[int, int, str]] = []  # (line, level, title)
    fence: str | None = None
    for n in range(body_start, len(lines) + 1):
        line = lines[n - 1]
        fm = _FENCE_RE.match(line)
        if fm:
            marker = fm.group(1)
            if fence is None:
                fence = marker[0] * 3
            elif marker.startswith(fence):
                fence = None
            continue
        if fence is None:
            hm = _HEADING_RE.match(line)
            if hm:
                heads.append((n, len(hm.group(1)), (hm.group(2) or "").strip()))
    out: list[tuple[int, int, str | None, str]] = []
    first = heads[0][0] if heads else len(lines) + 1
    if first > body_start:
        out.append((body_start, first - 1, None, ""))
    stack: list[tuple[int, str]] = []
    carry: int | None = None
    for i, (n, level, title) in enumerate(heads):
        end = heads[i + 1][0] - 1 if i + 1 < len(heads) else len(lines)
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, title or "#" * level))
        path = " > ".join(t for _, t in stack)
        heading_line = f"{'#' * level} {title}".rstrip()
        start = carry if carry is not None else n
        if not any(lines[k - 1].strip() for k in range(n + 1, end + 1)) and i + 1 < len(heads):
            carry = start  # heading with no body: its line joins the next section's chunk
            continue
        carry = None
        out.append((start, end, heading_line, path))
    return out


def _paragraphs(lines: list[str], start: int, end: int, count: TokenCounter) -> list[_Unit]:
    """Blank-line separated blocks (a fenced code block stays whole)."""
    units: list[_Unit] = []
    cur: list[int] = []
    fence: str | None = None
    for n in range(start, end + 1):
        line = lines[n - 1]
        fm = _FENCE_RE.match(line)
        if fm:
            marker = fm.group(1)[0] * 3
            fence = marker if fence is None else (None if fm.group(1).startswith(fence) else fence)
        if not line.strip() and fence is None:
            if cur:
                units.append(_unit(lines, cur[0], cur[-1], count))
                cur = []
            continue
        cur.append(n)
    if cur:
        units.append(_unit(lines, cur[0], cur[-1], count))
    return units


def _unit(lines: list[str], a: int, b: int, count: TokenCounter) -> _Unit:
    text = "\n".join(lines[a - 1 : b])
    return _Unit(a, b, text, count(text))


def _split_units(units: list[_Unit], budget: int, target: int, count: TokenCounter) -> list[_Unit]:
    out: list[_Unit] = []
    for u in units:
        if u.tokens <= budget:
            out.append(u)
            continue
        for s in _split_text(u, _SENTENCE_END_RE, count):
            if s.tokens <= budget:
                out.append(s)
            else:
                out.extend(_split_words(s, target, count))
    return out


def _line_finder(u: _Unit) -> Callable[[int], int]:
    """offset in u.text -> on-disk line; a bisect over the unit's newlines (linear time for huge units)."""
    newlines = [m.start() for m in re.finditer("\n", u.text)]
    return lambda offset: u.start + bisect.bisect_left(newlines, offset)


def _split_text(u: _Unit, sep: re.Pattern[str], count: TokenCounter) -> list[_Unit]:
    out: list[_Unit] = []
    line_at = _line_finder(u)
    pos = 0
    for m in sep.finditer(u.text):
        seg = u.text[pos : m.start()]
        if seg.strip():
            out.append(_Unit(line_at(pos), line_at(m.start()), seg, count(seg)))
        pos = m.end()
    seg = u.text[pos:]
    if seg.strip():
        out.append(_Unit(line_at(pos), line_at(len(u.text)), seg, count(seg)))
    return out or [u]


def _split_words(u: _Unit, budget: int, count: TokenCounter) -> list[_Unit]:
    out: list[_Unit] = []
    line_at = _line_finder(u)
    words = list(re.finditer(r"\S+", u.text))
    i = 0
    while i < len(words):
        a = words[i].start()
        # the longest run of words from i that fits the budget (counts grow with length): binary search
        j, hi = i, min(len(words) - 1, i + 4 * budget + 8)
        while j < hi:
            mid = (j + hi + 1) // 2
            if count(u.text[a : words[mid].end()]) <= budget:
                j = mid
            else:
                hi = mid - 1
        b = words[j].end()
        if j == i and count(u.text[a:b]) > budget:  # a single giant "word": cut by characters
            k = a
            while k < b:
                e, hi = k + 1, min(b, k + 4 * budget)  # the longest slice that fits (a real tokenizer may
                while e < hi:  # count a token per character: CJK text has no spaces to split at)
                    mid = (e + hi + 1) // 2
                    if count(u.text[k:mid]) <= budget:
                        e = mid
                    else:
                        hi = mid - 1
                seg = u.text[k:e]
                out.append(_Unit(line_at(k), line_at(e), seg, count(seg)))
                k = e
        else:
            seg = u.text[a:b]
            out.append(_Unit(line_at(a), line_at(b), seg, count(seg)))
        i = j + 1
    return out


def _fit_lines(text: str, budget: int, count: TokenCounter) -> list[str]:
    """`text` in pieces of whole lines within `budget` (a line over it is split at words)."""
    if count(text) <= budget:
        return [text]
    out: list[str] = []
    cur = ""
    for line in text.split("\n"):
        u = _Unit(1, 1, line, count(line))
        for part in [u] if u.tokens <= budget else _split_words(u, budget, count):
            joined = f"{cur}\n{part.text}" if cur else part.text
            if cur and count(joined) > budget:
                out.append(cur)
                joined = part.text
            cur = joined
    if cur:
        out.append(cur)
    return out


def _pack(units: list[_Unit], target: int, budget: int, overlap: int, lines: list[str], count: TokenCounter):
    """Greedy windows of about `target` tokens (never over `budget`), with trailing-unit overlap."""
    windows: list[list[_Unit]] = []
    cur: list[_Unit] = []
    total = 0
    for u in units:
        if cur and not (total + u.tokens <= target or (total < target * 0.6 and total + u.tokens <= budget)):
            windows.append(cur)
            carry: list[_Unit] = []
            ctotal = 0
            for prev in reversed(cur):
                if ctotal + prev.tokens > overlap or ctotal + prev.tokens + u.tokens > budget:
                    break
                carry.insert(0, prev)
                ctotal += prev.tokens
            if len(carry) == len(cur):
                carry, ctotal = [], 0
            if not carry and overlap > 0:  # the last unit is too long: carry its trailing sentences
                tail: list[_Unit] = []
                for sent in reversed(_split_text(cur[-1], _SENTENCE_END_RE, count)[1:]):
                    if ctotal + sent.tokens > overlap or ctotal + sent.tokens + u.tokens > budget:
                        break
                    tail.insert(0, sent)
                    ctotal += sent.tokens
                carry = tail
            cur, total = carry, ctotal
        cur.append(u)
        total += u.tokens
    if cur:
        windows.append(cur)
    for w in windows:
        yield w[0].start, w[-1].end, _window_text(w, lines)


def _window_text(w: list[_Unit], lines: list[str]) -> str:
    parts: list[str] = []
    prev_end: int | None = None
    for u in w:
        if prev_end is not None:
            parts.append("\n\n" if u.start > prev_end else " ")
        parts.append(u.text)
        prev_end = u.end
    return "".join(parts)


def _merge_tiny(
    pieces: list[_Piece], lines: list[str], limits: ChunkLimits, count: TokenCounter
) -> list[_Piece]:
    """Fold pieces under MIN_CHUNK_CHARS into a neighbour so no line is lost.

    A tiny piece joins the previous chunk, else the next one, as long as the result stays within the chunk
    limit; tiny pieces that fit nowhere gather together, and one that still fits nowhere is kept as it is
    (coverage wins over the size rule). Tiny pieces are dropped only when the whole body is tiny.
    """

    def fits(p: _Piece) -> bool:
        return count(p.text) <= max(8, limits.max_tokens - (count(p.path) if p.path else 0))

    def tiny(p: _Piece) -> bool:
        return p.kind != "frontmatter" and len(p.text.strip()) < MIN_CHUNK_CHARS

    out: list[_Piece] = []
    pending: _Piece | None = None

    def place(p: _Piece) -> None:
        if out and out[-1].kind != "frontmatter":
            joined = _join(out[-1], p, lines, keep=out[-1])
            if fits(joined):
                out[-1] = joined
                return
        out.append(p)

    for p in pieces:
        if pending is not None and p.kind != "frontmatter":
            joined = _join(pending, p, lines, keep=p)
            if fits(joined):
                p = joined
            else:
                place(pending)
            pending = None
        if not tiny(p):
            out.append(p)
            continue
        if out and out[-1].kind != "frontmatter":
            joined = _join(out[-1], p, lines, keep=out[-1])
            if fits(joined):
                out[-1] = joined
                continue
        pending = p
    if pending is not None:
        place(pending)
    if sum(len(p.text.strip()) for p in out if p.kind != "frontmatter") < MIN_CHUNK_CHARS:
        out = [p for p in out if p.kind == "frontmatter"]  # the whole body is tiny: nothing worth a chunk
    return [p for p in out if p.text.strip()]


def _is_whole_lines(p: _Piece, lines: list[str]) -> bool:
    return p.text == "\n".join(lines[p.start - 1 : p.end])


def _join(a: _Piece, b: _Piece, lines: list[str], keep: _Piece) -> _Piece:
    """`a` followed by `b` as one piece (heading and kind of `keep`).

    Pieces made of whole lines are re-read from the file (overlapping windows are not doubled); a piece
    cut from inside a line (sentence or word split) keeps its own text, so a merge never pulls in the
    rest of a long line (a tiny piece's overlap with its neighbour may then repeat: a few characters).
    """
    start, end = min(a.start, b.start), max(a.end, b.end)
    gap_blank = all(not lines[k - 1].strip() for k in range(a.end + 1, b.start))
    if _is_whole_lines(a, lines) and _is_whole_lines(b, lines) and gap_blank:
        text = "\n".join(lines[start - 1 : end])
    else:
        text = a.text + (" " if b.start <= a.end else "\n\n") + b.text
    return _Piece(start, end, text, keep.heading, keep.path, keep.kind)

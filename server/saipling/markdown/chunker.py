"""Section-aware chunking with on-disk line ranges (SPEC 4).

A file becomes: an optional frontmatter chunk, then one chunk per heading section; a section over the limit
is split at paragraphs, then sentences, then words. A file without headings becomes paragraph windows with
overlap. Tiny pieces are merged into a neighbour so every non-blank body line stays covered.
"""

from __future__ import annotations

import bisect
import datetime
import hashlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import Any

from ..embeddings.base import estimate_tokens
from ..files.metadata import BOOKKEEPING_KEYS, FileMeta
from .blocks import MarkdownBlocks, display_text, indexed_lines, parse_blocks
from .preview import make_preview
from .terms import identifier_words

# Bumped whenever the same text and limits chunk differently: an index made by an older chunker is re-chunked
# once (vectors of unchanged chunk text come back from the embedding cache). 2: CommonMark parser, wiki-links
# as display text, frontmatter prose. 3: windows measured on their joined text (never over the budget), a tiny
# note's body kept as one chunk. 4: headings as plain text (`#### ***Ripping Vines***` is `Ripping Vines`); a
# sentence cut keeps its closing quote or bracket (`home."`), a sentence closed by a typographic quote (`home.”`,
# `’`, `»`) or ending in `…` is one, and CJK sentences or a word cut in two are rejoined without a space.
# 5: HTML comments and link-reference definitions are neither embedded nor keyword-indexed (their lines stay inside
# the line range of the chunk before them); a heading line or a lead-in ending in `:` is packed with the block it
# introduces; a code block's sentences are not carried into the next window; identifier words (`ident_words`).
# 6: a frontmatter `title:` of a file with no `# H1` is the root of its heading path (`front_matter_title`), and a
# frontmatter that says nothing but that title is no chunk of its own.
# 7: a lead-in glued to the block it introduces keeps the file's line breaks between them (a sentence after it was
# read one or more lines off); windows stay in file order (an overlap reaching before the window before is left
# out); a heading's text is cut to 300 characters (markdown.blocks.MAX_HEADING_CHARS).
# 8: a piece with no letter or digit (a long table delimiter row cut into windows) is no chunk (`_drop_wordless`).
# 9: a MyST target line (`(config-file)=`, Sphinx docs in markdown) is noise like a link-reference definition.
CHUNKER_VERSION = 9
MIN_CHUNK_CHARS = 20
# a sentence ends at . ! ? … (and the quotes or brackets closing it, straight or typographic: group 1) before
# whitespace; CJK full stops need no space after them
_CLOSERS = "\"'”’»)\\]」』）"
_SENTENCE_END_RE = re.compile(rf"(?<=[.!?。！？…])([{_CLOSERS}]*)\s+|(?<=[。！？])(?=[^\s{_CLOSERS}])")
# The same cuts found from the stop itself (`sentence_cuts`): a pattern opening with one class is searched for at C
# speed (sre skips to the next stop), one opening with a lookbehind is tried at every character (1.6 s over the
# 17 MB fiction corpus, ~0.3 s this way)
_SENTENCE_STOP_RE = re.compile(rf"[.!?。！？…](?:([{_CLOSERS}]*)\s+|(?<=[。！？])(?=[^\s{_CLOSERS}]))")

TokenCounter = Callable[[str], int]
# whitespace a WordPieceCounter does not split words at (it splits at ASCII space, tab, newline, CR only)
_ODD_SPACE_RE = re.compile(r"[^\S \t\n\r]")


def _specials(count: TokenCounter) -> int | None:
    """The counter's special tokens when its counts add up over ASCII whitespace (tokencount.WordPieceCounter:
    count(a + " " + b) == count(a) + count(b) - specials), else None: then joined texts are counted again."""
    return count.specials if getattr(count, "additive", False) else None  # type: ignore[attr-defined]


def _joined(count: TokenCounter, counts: list[int], text: Callable[[], str]) -> int:
    """count(text()) for a text made of pieces with these counts joined by ASCII whitespace."""
    specials = _specials(count)
    if specials is None or not counts:
        return count(text())
    return sum(counts) - specials * (len(counts) - 1)


@dataclass(frozen=True)
class ChunkLimits:
    max_tokens: int = 1000
    target_tokens: int = 500
    overlap_tokens: int = 50
    # a code block (with the lead-in or heading before it) may fill the model's whole window, past `max_tokens`
    # when that is the shorter passage length the model was trained on: a block is split only when it alone
    # exceeds the window. 0: `max_tokens`.
    block_tokens: int = 0

    @property
    def block_max(self) -> int:
        return max(self.max_tokens, self.block_tokens)


def limits_for(
    max_tokens: int, target_tokens: int, overlap_tokens: int, model_max_input: int, passage_tokens: int = 0
) -> ChunkLimits:
    """Chunk limits that never exceed the model's input window (with headroom for the heading path), nor the
    passage length the model was trained on when it names one (`passage_tokens`)."""
    window = max(32, int(model_max_input * 0.85)) if model_max_input else max_tokens
    cap = min(window, max(32, passage_tokens)) if passage_tokens > 0 else window
    mx = max(16, min(max_tokens, cap))
    tgt = max(8, min(target_tokens, int(mx * 0.8)))
    ovl = max(0, min(overlap_tokens, tgt // 4))
    return ChunkLimits(mx, tgt, ovl, max(mx, min(max_tokens, window)))


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
    # the parts of the identifiers in its text and heading path (`setTimeout` -> `set timeout`): a keyword column
    ident_words: str = ""


chunk_fields = attrgetter(*(f.name for f in fields(Chunk)))  # a Chunk as the tuple of its fields: Chunk(*those)


@dataclass
class _Unit:
    start: int  # 1-based on-disk line
    end: int
    text: str
    tokens: int
    # follows the unit before it with no whitespace between (a cut inside a word, or CJK text)
    glued: bool = False


@dataclass
class _Piece:
    start: int
    end: int
    text: str
    heading: str | None
    path: str
    kind: str
    tokens: int | None = None  # count(text), when already known
    glued: bool = False  # its text follows the piece before it with no whitespace between (see _Unit)


def embed_text_for(heading_path: str, text: str) -> str:
    return f"{heading_path}\n\n{text}" if heading_path else text


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def render_frontmatter(fm: dict) -> str:
    """Frontmatter as readable `key: value` prose for embedding and keyword search, not YAML.

    Bookkeeping keys (files.metadata.BOOKKEEPING_KEYS: ids, dates, created/updated, cssclass, ...) and empty values
    are left out; `snake_case`/`kebab-case` keys read as words; lists are comma-separated; a nested mapping
    reads `key: sub: value; sub: value`; booleans read yes/no; wiki-links read as their display text."""
    lines = []
    for key, value in fm.items():
        if str(key).lower() in BOOKKEEPING_KEYS or _empty(value):
            continue
        shown = _fm_value(value)
        if shown:
            lines.append(f"{_fm_key(key)}: {shown}")
    return "\n".join(lines)


def _fm_key(key: Any) -> str:
    return " ".join(re.sub(r"[_-]+", " ", str(key)).split()) or str(key)


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, str | list | tuple | dict) and not value)


def _fm_value(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return ", ".join(s for v in value if not _empty(v) and (s := _fm_value(v)))
    if isinstance(value, dict):
        parts = (
            f"{_fm_key(k)}: {_fm_value(v)}"
            for k, v in value.items()
            if str(k).lower() not in BOOKKEEPING_KEYS and not _empty(v)
        )
        return "; ".join(p for p in parts if not p.endswith(": "))
    return " ".join(display_text(str(value)).split())


def chunk_document(
    text: str,
    meta: FileMeta | None = None,
    limits: ChunkLimits | None = None,
    count_tokens: TokenCounter = estimate_tokens,
    blocks: MarkdownBlocks | None = None,
    previews: bool = True,
) -> list[Chunk]:
    """Chunk normalised text (\\n newlines; line N = on-disk line N); `blocks`: its parse, when already made;
    `previews` False: every chunk's `preview` left "" (a chunking worker's: the SQLite index stores none)."""
    limits = limits or ChunkLimits()
    doc = blocks or parse_blocks(text)
    path_counts: dict[str, int] = {}
    additive = _specials(count_tokens) is not None  # else joined texts are counted, never summed

    def path_count(path: str) -> int:  # one count per heading path (each section asks several times)
        n = path_counts.get(path)
        if n is None:
            n = path_counts[path] = count_tokens(path)
        return n

    # as indexed: the same line numbers as on disk, wiki-links as display text, comments and link definitions blank
    lines = indexed_lines(doc)
    body_start = meta.body_start_line if meta else 1
    root = front_matter_title(meta, doc, limits.max_tokens // 4, count_tokens)
    pieces: list[_Piece] = []
    if meta and meta.frontmatter and body_start > 1:
        rendered = render_frontmatter(meta.frontmatter)
        only_title = root is not None and rendered == render_frontmatter({"title": meta.frontmatter.get("title")})
        if only_title and any(line.strip() for line in lines[body_start - 1 :]):
            rendered = ""  # every body chunk carries the title in its heading path: no chunk for it alone
        if len(rendered) >= MIN_CHUNK_CHARS or (rendered and meta.display_name):
            for part in _fit_lines(rendered, limits.max_tokens, count_tokens):  # a long `description:` too
                pieces.append(_Piece(1, body_start - 1, part, None, "", "frontmatter"))
    sections = _sections(lines, body_start, doc, root)
    heads = {h.start for h in doc.headings}  # (heading lines: a unit that introduces the next, _glue_lead_ins)
    has_headings = any(h.start >= body_start for h in doc.headings)  # (a title alone: paragraph windows still)
    for start, end, heading, path in sections:
        while end > start and not lines[end - 1].strip():  # ranges end on text, not on trailing blank lines
            end -= 1
        while start < end and not lines[start - 1].strip():
            start += 1
        body_units = _paragraphs(lines, start, end, count_tokens, doc.keep_whole)
        if not body_units:
            continue
        kind = "section" if has_headings else "window"
        budget = max(8, limits.max_tokens - (path_count(path) if path else 0))
        section_text = "\n".join(lines[start - 1 : end])
        if has_headings:
            tokens = _section_count(count_tokens, section_text, body_units, lines, start, end)
            if tokens <= budget:
                pieces.append(_Piece(start, end, section_text, heading, path, kind, tokens))
                continue
        target = min(limits.target_tokens, budget)
        room = _Room(budget, max(budget, limits.block_max - (path_count(path) if path else 0)), doc.code_lines)
        body_units = _glue_lead_ins(body_units, heads, room, lines, count_tokens)
        units = _glue_lead_ins(_split_units(body_units, room, target, count_tokens), heads, room, lines, count_tokens)
        for u_start, u_end, u_text, u_tokens, glued in _pack(
            units,
            target,
            budget,
            limits.overlap_tokens,
            lines,
            count_tokens,
            doc.code_lines,
            lambda u: _introduces(u, heads),  # noqa: B023 (used at once)
        ):
            pieces.append(_Piece(u_start, u_end, u_text, heading, path, kind, u_tokens, glued))
    pieces = _merge_tiny(pieces, lines, limits, count_tokens)
    _cover_noise(pieces, doc)
    pieces = _drop_wordless(pieces)
    chunks = []
    for i, p in enumerate(pieces):
        etext = embed_text_for(p.path, p.text)
        if additive:  # embed_text_for joins by "\n\n": the sum of the two counts
            tokens = p.tokens if p.tokens is not None else count_tokens(p.text)
            parts = [path_count(p.path), tokens] if p.path else [tokens]
            token_count = _joined(count_tokens, parts, lambda: etext)  # noqa: B023 (called at once)
        else:
            token_count = count_tokens(etext)
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
                token_count=token_count,
                content_hash=content_hash(etext),
                preview=make_preview(p.text) if previews else "",
                ident_words=identifier_words(f"{p.path}\n{p.text}"),
            )
        )
    return chunks


def front_matter_title(
    meta: FileMeta | None, doc: MarkdownBlocks, max_tokens: int, count: TokenCounter = estimate_tokens
) -> str | None:
    """The frontmatter `title:` that stands for a `# H1` (Hugo, Jekyll, Docusaurus, Obsidian render it as the page's
    heading): a non-empty string, in a file whose body has no level-1 heading (an H1 in the body is the title).
    Plain text on one line, wiki-links as their display text; cut at a word to `max_tokens` (it is part of every
    chunk's heading path, which counts toward the chunk's budget). None: no such title (absent, empty, not a string:
    `title: 1984` or a list is no heading)."""
    if meta is None or meta.body_start_line <= 1:
        return None
    value = meta.frontmatter.get("title")
    if not isinstance(value, str):
        return None
    title = " ".join(display_text(value).split())
    if not title or any(h.level == 1 and h.start >= meta.body_start_line for h in doc.headings):
        return None
    words = title.split(" ")
    while len(words) > 1 and count(" ".join(words)) > max(8, max_tokens):
        words.pop()
    return " ".join(words)


def _sections(
    lines: list[str], body_start: int, doc: MarkdownBlocks, root: str | None = None
) -> list[tuple[int, int, str | None, str]]:
    """(start, end, heading line text, heading path) per section; heading-only sections fold into the next.
    `root`: the file's title (front_matter_title), the H1 above every section: the text before the first heading is
    its section."""
    heads = [h for h in doc.headings if h.start >= body_start]
    out: list[tuple[int, int, str | None, str]] = []
    first = heads[0].start if heads else len(lines) + 1
    if first > body_start:
        out.append((body_start, first - 1, f"# {root}" if root else None, root or ""))
    stack: list[tuple[int, str]] = [(1, root)] if root else []
    carry: int | None = None
    for i, h in enumerate(heads):
        end = heads[i + 1].start - 1 if i + 1 < len(heads) else len(lines)
        while stack and stack[-1][0] >= h.level:
            stack.pop()
        stack.append((h.level, h.title or "#" * h.level))
        path = " > ".join(t for _, t in stack)
        heading_line = f"{'#' * h.level} {h.title}".rstrip()
        start = carry if carry is not None else h.start
        if not any(lines[k - 1].strip() for k in range(h.end + 1, end + 1)) and i + 1 < len(heads):
            carry = start  # heading with no body: its lines join the next section's chunk
            continue
        carry = None
        out.append((start, end, heading_line, path))
    return out


@dataclass(frozen=True)
class _Room:
    """A section's token budget: `budget` for prose, `block` for a unit holding a code block (the window)."""

    budget: int
    block: int
    code: frozenset[int]

    def of(self, u: _Unit) -> int:
        if self.block > self.budget and any(n in self.code for n in range(u.start, u.end + 1)):
            return self.block
        return self.budget


def _glue_lead_ins(
    units: list[_Unit], heads: set[int], room: _Room, lines: list[str], count: TokenCounter
) -> list[_Unit]:
    """A unit that introduces the next one joined to it while the two fit: a heading line alone (up to the
    model's window, `room.block`), or a lead-in ending in a colon ("Alternatively one can redirect the output into
    files:" before its code block; up to the window when that block is code). Packed apart, a window could end on
    the lead-in and the next start with the block it announces, or a heading be a chunk of its own."""
    out: list[_Unit] = []
    for u in units:
        prev = out[-1] if out else None
        if prev is not None and prev.end < u.start and _introduces(prev, heads):
            # (a piece cut from inside lines is joined by as many line breaks as the file has between the two:
            # a sentence's line is read back from the text's line breaks, `_line_finder`)
            gap = "\n" * (u.start - prev.end)
            text = (
                "\n".join(lines[prev.start - 1 : u.end])
                if _whole(prev, lines) and _whole(u, lines)
                else f"{prev.text}{gap}{u.text}"
            )
            tokens = count(text)
            joined = _Unit(prev.start, u.end, text, tokens, prev.glued)
            heading = prev.start in heads and "\n" not in prev.text.strip()
            if tokens <= (room.block if heading else room.of(joined)):  # (a heading: with its block, up to the window)
                out[-1] = joined
                continue
            if room.of(u) == room.budget:  # prose too long to join whole: the introduction takes its first sentence
                first, *rest = _sentences(u, count)
                if rest:
                    text = f"{prev.text}{gap}{first.text}"
                    tokens = count(text)
                    if tokens <= room.budget:
                        out[-1] = _Unit(prev.start, first.end, text, tokens, prev.glued)
                        out.extend(rest)
                        continue
        out.append(u)
    return out


def _introduces(u: _Unit, heads: set[int]) -> bool:
    """A heading line alone, or text ending in a colon (trailing whitespace aside)."""
    text = u.text
    if u.start in heads and "\n" not in text.rstrip():
        return True
    # (the end of a paragraph of prose, not a stripped copy of it all: this is asked of every unit packed)
    return (text[-64:].rstrip() or text.rstrip()).endswith((":", "："))


def _whole(u: _Unit, lines: list[str]) -> bool:
    return u.text == "\n".join(lines[u.start - 1 : u.end])


def _drop_wordless(pieces: list[_Piece]) -> list[_Piece]:
    """A piece with no letter or digit (a table's `|---|---|` row too long for one window, cut into windows of its
    own; a run of `***`) is no chunk: it ranked as a confident result by its heading path alone (143 of the 13th
    Age vault's 8,410 chunks). Its lines go into the range of the piece before it (else after it), as noise lines
    do; a file of nothing else keeps them."""
    keep = [p for p in pieces if p.kind == "frontmatter" or any(c.isalnum() for c in p.text)]
    body = [p for p in keep if p.kind != "frontmatter"]
    if len(keep) == len(pieces) or not body:
        return pieces
    kept = {id(p) for p in keep}
    for p in pieces:
        if id(p) in kept:
            continue
        host = next((k for k in reversed(body) if k.start <= p.start), body[0])
        host.start, host.end = min(host.start, p.start), max(host.end, p.end)
    return keep


def _cover_noise(pieces: list[_Piece], doc: MarkdownBlocks) -> None:
    """Noise lines (comments, link definitions: blank in the indexed text) between two chunks, or after the last,
    inside the line range of the chunk before them (of the first chunk, when they come before it): every line of
    the file stays in some chunk's range. The text stays the same."""
    if not doc.noise_lines:
        return
    body = [p for p in pieces if p.kind != "frontmatter"]
    for i, p in enumerate(body):
        stop = body[i + 1].start if i + 1 < len(body) else len(doc.lines) + 1
        gap = [n for n in range(p.end + 1, stop) if n in doc.noise_lines]
        if gap:
            p.end = gap[-1]
    if body:
        first = body[0]
        floor = max((p.end for p in pieces if p.kind == "frontmatter"), default=0)
        before = [n for n in range(floor + 1, first.start) if n in doc.noise_lines]
        if before:
            first.start = before[0]


def _section_count(count: TokenCounter, text: str, units: list[_Unit], lines: list[str], start: int, end: int) -> int:
    """count(text) of a section (its lines start..end) from its paragraph units, when the counter is additive
    and every line between them is blank in ASCII whitespace (a blank line with a no-break space is a word to
    a WordPieceCounter: then the text is counted again)."""
    if _specials(count) is None or not units:
        return count(text)
    covered = {n for u in units for n in range(u.start, u.end + 1)}
    if any(lines[n - 1].strip(" \t\r") for n in range(start, end + 1) if n not in covered):
        return count(text)
    return _joined(count, [u.tokens for u in units], lambda: text)


def _paragraphs(lines: list[str], start: int, end: int, count: TokenCounter, keep_whole: frozenset[int]) -> list[_Unit]:
    """Blank-line separated blocks (a blank line inside a code block or HTML block does not split it)."""
    units: list[_Unit] = []
    run = 0  # first line of the current run of lines that are not a paragraph break (0: none)

    def flush(a: int, b: int) -> None:  # units start and end on text (a run may hold only kept blank lines)
        while b >= a and not lines[b - 1].strip():
            b -= 1
        if b >= a:
            while not lines[a - 1].strip():
                a += 1
            units.append(_unit(lines, a, b, count))

    for n in range(start, end + 1):
        if not lines[n - 1].strip() and n not in keep_whole:
            if run:
                flush(run, n - 1)
                run = 0
        elif not run:
            run = n
    if run:
        flush(run, end)
    return units


def _unit(lines: list[str], a: int, b: int, count: TokenCounter) -> _Unit:
    text = "\n".join(lines[a - 1 : b])
    return _Unit(a, b, text, count(text))


def _split_units(units: list[_Unit], room: _Room, target: int, count: TokenCounter) -> list[_Unit]:
    out: list[_Unit] = []
    budget = room.budget
    for u in units:
        if u.tokens <= room.of(u):  # (a code block up to the window)
            out.append(u)
            continue
        for s in _sentences(u, count):
            if s.tokens <= budget:
                out.append(s)
            else:
                words = _split_words(s, target, count)
                if words and s.glued:  # (a CJK sentence glued to the one before: so is its first piece)
                    words[0].glued = True
                out.extend(words)
    return out


def _line_finder(u: _Unit) -> Callable[[int], int]:
    """offset in u.text -> on-disk line; a bisect over the unit's newlines (linear time for huge units)."""
    newlines = [m.start() for m in re.finditer("\n", u.text)]
    return lambda offset: u.start + bisect.bisect_left(newlines, offset)


def _sentences(u: _Unit, count: TokenCounter) -> list[_Unit]:
    """`u` cut at its sentence ends (_SENTENCE_END_RE); `u` itself when it has none."""
    text = u.text
    if "\n" not in text:  # (a paragraph of prose on one line: every sentence is on it)
        n = u.start
        out = [_Unit(n, n, text[a:b], count(text[a:b]), glued) for a, b, glued in _spans(text)]
    else:
        line_at = _line_finder(u)
        out = [_Unit(line_at(a), line_at(b), text[a:b], count(text[a:b]), glued) for a, b, glued in _spans(text)]
    return out or [u]


def _last_sentences(u: _Unit, count: TokenCounter) -> Iterator[_Unit]:
    """`reversed(_sentences(u, count)[1:])`, each sentence made (and counted) only when the caller asks for it: a
    window's overlap takes the last one or two sentences of a paragraph of dozens."""
    spans = _spans(u.text)[1:]
    if not spans:
        return
    line_at = _line_finder(u) if "\n" in u.text else lambda _offset: u.start
    for a, b, glued in reversed(spans):
        yield _Unit(line_at(a), line_at(b), u.text[a:b], count(u.text[a:b]), glued)


def _spans(text: str) -> list[tuple[int, int, bool]]:
    """The sentences of `text` that hold more than whitespace: (start, end, glued to the one before)."""
    out: list[tuple[int, int, bool]] = []
    pos = 0
    glued = False
    for m in _SENTENCE_STOP_RE.finditer(text):  # (sentence_cuts, inline: a closing quote or bracket stays with
        after = m.end()  # its sentence)
        end = m.end(1) if m.start(1) >= 0 else after
        # (a sentence starts after the whitespace the match ate: its first character says it holds text)
        if (pos < end and not text[pos].isspace()) or text[pos:end].strip():
            out.append((pos, end, glued))
        pos = after
        glued = pos == end  # after a CJK full stop the next sentence follows without a space
    if text[pos:].strip():
        out.append((pos, len(text), glued))
    return out


def sentence_cuts(text: str) -> list[tuple[int, int]]:
    """Where `text` is cut into sentences: (end of a sentence, start of what follows) for each match of
    `_SENTENCE_END_RE.finditer(text)`, in order: the end after its closing quotes or brackets (group 1), else
    (a CJK stop with no space after it) where the match starts; what follows after the match."""
    out: list[tuple[int, int]] = []
    for m in _SENTENCE_STOP_RE.finditer(text):
        nxt = m.end()
        out.append((m.end(1) if m.start(1) >= 0 else nxt, nxt))
    return out


def _split_words(u: _Unit, budget: int, count: TokenCounter) -> list[_Unit]:
    out: list[_Unit] = []
    line_at = _line_finder(u)
    words = list(re.finditer(r"\S+", u.text))
    span = _span_counter(u.text, words, count)
    i = 0
    while i < len(words):
        a = words[i].start()
        # the longest run of words from i that fits the budget (counts grow with length): binary search
        j, hi = i, min(len(words) - 1, i + 4 * budget + 8)
        while j < hi:
            mid = (j + hi + 1) // 2
            if span(i, mid) <= budget:
                j = mid
            else:
                hi = mid - 1
        b = words[j].end()
        if j == i and span(i, i) > budget:  # a single giant "word": cut by characters
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
                out.append(_Unit(line_at(k), line_at(e), seg, count(seg), k > a))
                k = e
        else:
            out.append(_Unit(line_at(a), line_at(b), u.text[a:b], span(i, j)))
        i = j + 1
    return out


def _span_counter(text: str, words: list[re.Match[str]], count: TokenCounter) -> Callable[[int, int], int]:
    """count(text from words[i] to words[j]): prefix sums of per-word counts when the counter is additive and
    the text has no whitespace it does not split at; else the slice is counted."""
    specials = _specials(count)
    if specials is None or _ODD_SPACE_RE.search(text):
        return lambda i, j: count(text[words[i].start() : words[j].end()])
    prefix = [0]
    for m in words:
        prefix.append(prefix[-1] + count(m.group()) - specials)
    return lambda i, j: specials + prefix[j + 1] - prefix[i]


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


def _pack(
    units: list[_Unit],
    target: int,
    budget: int,
    overlap: int,
    lines: list[str],
    count: TokenCounter,
    code: frozenset[int] = frozenset(),
    introduces: Callable[[_Unit], bool] = lambda u: False,
):
    """Greedy windows of about `target` tokens (never over `budget`), with trailing-unit overlap; a window does
    not end on a unit that `introduces` the next (a heading, a lead-in): that unit opens the next window instead.

    Windows are packed on the sum of their units' counts, but a window's text is more than its units: units on
    different lines are joined by a blank line, and a token count is not additive (`estimate_tokens` rounds
    each piece up). A window whose joined text counts over `budget` is re-cut by its real count (`_fit_window`).
    """
    windows: list[tuple[list[_Unit], int]] = []  # (units, how many leading units repeat the previous window)
    cur: list[_Unit] = []
    n_carry = 0
    total = 0
    for u in units:
        if cur and not (total + u.tokens <= target or (total < target * 0.6 and total + u.tokens <= budget)):
            if len(cur) - n_carry > 1 and introduces(cur[-1]) and cur[-1].tokens + u.tokens <= budget:
                intro = cur.pop()
                windows.append((cur, n_carry))
                cur, total, n_carry = [intro, u], intro.tokens + u.tokens, 0
                continue
            windows.append((cur, n_carry))
            carry: list[_Unit] = []
            ctotal = 0
            for prev in reversed(cur):
                if ctotal + prev.tokens > overlap or ctotal + prev.tokens + u.tokens > budget:
                    break
                if code and any(n in code for n in range(prev.start, prev.end + 1)):
                    break  # a piece of a code block is not repeated as the next window's overlap
                carry.insert(0, prev)
                ctotal += prev.tokens
            if len(carry) == len(cur):
                carry, ctotal = [], 0
            last = cur[-1]
            in_code = bool(code) and any(n in code for n in range(last.start, last.end + 1))
            if not carry and overlap > 0 and not in_code:  # the last unit is too long: carry its trailing sentences
                tail: list[_Unit] = []
                for sent in _last_sentences(cur[-1], count):
                    if ctotal + sent.tokens > overlap or ctotal + sent.tokens + u.tokens > budget:
                        break
                    tail.insert(0, sent)
                    ctotal += sent.tokens
                carry = tail
            cur, total, n_carry = carry, ctotal, len(carry)
        cur.append(u)
        total += u.tokens
    if cur:
        windows.append((cur, n_carry))
    additive = _specials(count) is not None
    last_start = 0
    for w, carried in windows:
        for part, text in _fit_window(w, carried, budget, lines, count):
            if part[0].start < last_start <= part[-1].start:
                # (a window cut back to its own units by _fit_window leaves the next one's overlap reaching before
                # it: those units are in a window before already, and chunks stay in file order)
                part, text = [u for u in part if u.start >= last_start], None
            last_start = part[0].start
            tokens = _window_count(part, count) if additive else None  # (free when additive)
            yield part[0].start, part[-1].end, text if text is not None else _window_text(part), tokens, part[0].glued


def _fit_window(
    w: list[_Unit], carried: int, budget: int, lines: list[str], count: TokenCounter
) -> list[tuple[list[_Unit], str | None]]:
    """`w` as it is when its joined text fits `budget` (one count per window: the usual case); else without
    its overlap units, else cut greedily into runs whose joined text fits (every unit fits on its own). Each run
    with its joined text when counting it made that text (a counter that is not additive), else None."""
    if len(w) == 1:
        return [(w, None)]
    tokens, text = _window_count_text(w, count)
    if tokens <= budget:
        return [(w, text)]
    if 0 < carried < len(w):
        w = w[carried:]  # the overlap is a nicety: the window's own units come first
        if len(w) == 1:
            return [(w, None)]
        tokens, text = _window_count_text(w, count)
        if tokens <= budget:
            return [(w, text)]
    out: list[tuple[list[_Unit], str | None]] = []
    cur: list[_Unit] = []
    for u in w:
        if cur and _window_count([*cur, u], count) > budget:
            out.append((cur, None))
            cur = []
        cur.append(u)
    if cur:
        out.append((cur, None))
    return out


def _window_count_text(w: list[_Unit], count: TokenCounter) -> tuple[int, str | None]:
    """_window_count(w, count) (`w` of two units or more), with the joined text when it was made to count it."""
    if _specials(count) is None or any(u.glued for u in w[1:]):
        text = _window_text(w)
        return count(text), text
    return _joined(count, [u.tokens for u in w], lambda: _window_text(w)), None


def _window_count(w: list[_Unit], count: TokenCounter) -> int:
    if len(w) == 1:
        return w[0].tokens
    if any(u.glued for u in w[1:]):  # glued pieces are one word: their counts do not add up
        return count(_window_text(w))
    return _joined(count, [u.tokens for u in w], lambda: _window_text(w))


def _window_text(w: list[_Unit]) -> str:
    parts: list[str] = []
    prev_end: int | None = None
    for u in w:
        if prev_end is not None:
            parts.append("\n\n" if u.start > prev_end else "" if u.glued else " ")
        parts.append(u.text)
        prev_end = u.end
    return "".join(parts)


def _merge_tiny(pieces: list[_Piece], lines: list[str], limits: ChunkLimits, count: TokenCounter) -> list[_Piece]:
    """Fold pieces under MIN_CHUNK_CHARS into a neighbour so no line is lost.

    A tiny piece joins the previous chunk, else the next one, as long as the result stays within the chunk
    limit; tiny pieces that fit nowhere gather together, and one that still fits nowhere is kept as it is
    (coverage wins over the size rule). A body that is tiny as a whole (`# Todo` over `Call Bob.`) is one chunk:
    a short note must be found by its words like any other.
    """

    def fits(p: _Piece) -> bool:
        if p.tokens is None:
            p.tokens = count(p.text)
        return p.tokens <= max(8, limits.max_tokens - (count(p.path) if p.path else 0))

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
        text = a.text + (("" if b.glued else " ") if b.start <= a.end else "\n\n") + b.text
    return _Piece(start, end, text, keep.heading, keep.path, keep.kind, glued=a.glued)

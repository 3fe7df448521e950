"""Re-parsing an edited file from its last unchanged top-level heading instead of from its first line.

The CommonMark parse is most of the chunker's time on a large note (40 ms of 70 for a 150 KB one), and an edit
usually changes a few lines near one place. A top-level ATX heading (`# Title` outside any list, quote or
block) starts from a fresh parser state: every block before it has ended, and nothing after it changes how
the lines before it parse (a block only looks at the line after its end, here the heading line itself). So
when every line up to and including such a heading is unchanged, the blocks before it are the old ones and the
rest parses on its own, line numbers shifted. The memo keeps no text: a digest of the lines up to each such
heading (the proof that they are unchanged) and the old parse's structure (headings, code and keep-whole
lines), a few kilobytes per file.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from .blocks import Heading, MarkdownBlocks, display_text, parse_blocks

_ATX_RE = re.compile(r" {0,3}#{1,6}(?:[ \t]|$)")
MAX_MEMO_LINES = 50_000  # a memo's code/keep-whole line sets are bounded (a huge code file is parsed whole)


@dataclass(frozen=True)
class ParseMemo:
    """What a later parse of an edited version of the same file can reuse."""

    marks: tuple[tuple[int, bytes], ...]  # (line of a top-level ATX heading, digest of lines 1..that line)
    headings: tuple[Heading, ...]
    keep_whole: frozenset[int]
    code_lines: frozenset[int]
    noise_lines: frozenset[int] = frozenset()


def _digests(lines: list[str], at: list[int]) -> list[bytes]:
    """Running digest of lines 1..n for each n in `at` (ascending)."""
    h = hashlib.blake2b(digest_size=16)
    out, pos = [], 0
    for n in at:
        h.update("\n".join(lines[pos:n]).encode("utf-8", "surrogatepass") + b"\n")
        pos = n
        out.append(h.digest())
    return out


def memo_of(text: str, blocks: MarkdownBlocks) -> ParseMemo | None:
    lines = text.split("\n")
    if len(blocks.code_lines) + len(blocks.keep_whole) + len(blocks.noise_lines) > MAX_MEMO_LINES:
        return None
    starts = [h.start for h in blocks.headings if h.start == h.end and _ATX_RE.match(lines[h.start - 1])]
    return ParseMemo(
        tuple(zip(starts, _digests(lines, starts), strict=True)),
        tuple(blocks.headings),
        blocks.keep_whole,
        blocks.code_lines,
        blocks.noise_lines,
    )


def parse_with_memo(text: str, memo: ParseMemo | None) -> MarkdownBlocks:
    """parse_blocks(text), re-using `memo` (of an earlier version of the file) up to its last heading whose
    lines, and every line before it, are unchanged."""
    if memo is None or not memo.marks:
        return parse_blocks(text)
    lines = text.split("\n")
    restart = 0
    usable = [n for n, _ in memo.marks if n < len(lines)]
    for (n, digest), now in zip(memo.marks, _digests(lines, usable), strict=False):
        if digest != now:
            break
        restart = n
    if restart <= 1:
        return parse_blocks(text)
    shift = restart - 1
    tail = parse_blocks("\n".join(lines[shift:]))
    headings = [h for h in memo.headings if h.start < restart]
    headings += [Heading(h.start + shift, h.end + shift, h.level, h.title) for h in tail.headings]
    keep = {n for n in memo.keep_whole if n < restart} | {n + shift for n in tail.keep_whole}
    code = {n for n in memo.code_lines if n < restart} | {n + shift for n in tail.code_lines}
    noise = {n for n in memo.noise_lines if n < restart} | {n + shift for n in tail.noise_lines}
    shown = [ln if n in code or "[[" not in ln else display_text(ln) for n, ln in enumerate(lines[:shift], 1)]
    return MarkdownBlocks(headings, frozenset(keep), frozenset(code), shown + tail.lines, frozenset(noise))

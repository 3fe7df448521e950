"""Spans of a markdown line or block that hold no prose to index or scan for names: HTML comments and inline code.

Found by plain string scanning, in time linear in the text. Lazy regexes over these (`<!--.*?-->`, a backtick run
to its twin) scanned to the end of the text from every opener nothing closes, in time growing with the square of
the text, and Python's regex engine holds the interpreter's lock all along: one hostile file froze every request
of a server."""

from __future__ import annotations

import re
from collections.abc import Iterator


def comment_spans(text: str) -> Iterator[tuple[int, int]]:
    """The (start, end) of each HTML comment `<!-- ... -->` in `text`, in order: a comment inside a paragraph or
    beside other HTML on one line, or a block of comments (a whole `html_block`, found by the parse).

    Found with `str.find`, in time linear in the text: the regex `<!--.*?-->` scans to the end of the text from every
    `<!--` that no `-->` closes (a file of 80 KB of `<!--` took 15 s to index, and the regex engine holds the
    interpreter's lock all along: every other request of a server waited)."""
    at = 0
    while (start := text.find("<!--", at)) >= 0:
        end = text.find("-->", start + 4)
        if end < 0:  # (no later `<!--` is closed either)
            return
        yield start, end + 3
        at = end + 3


def strip_comments(text: str) -> str:
    """`text` without its HTML comments (`comment_spans`)."""
    out, at = [], 0
    for start, end in comment_spans(text):
        out.append(text[at:start])
        at = end
    return "".join(out) + text[at:] if out else text


_TICKS_RE = re.compile(r"`+")


def code_spans(line: str) -> list[tuple[int, int]]:
    """The (start, end) of each inline code span of a line, as CommonMark reads them: a run of N backticks opens one
    that the next run of exactly N closes (a run no later run matches is plain text).

    Each run is looked at once (a pointer per run length only moves forward): the regex `(`+)(?!`).*?(?<!`)\1(?!`)`
    scanned to the end of the line from every backtick of a run that nothing closes, and a 20 KB line of growing
    runs took 2.7 s with the interpreter's lock held (a hover card or a name check froze the server)."""
    runs = [(m.start(), m.end()) for m in _TICKS_RE.finditer(line)]
    by_length: dict[int, list[int]] = {}
    for i, (a, b) in enumerate(runs):
        by_length.setdefault(b - a, []).append(i)
    at = dict.fromkeys(by_length, 0)
    out: list[tuple[int, int]] = []
    i = 0
    while i < len(runs):
        a, b = runs[i]
        same, k = by_length[b - a], at[b - a]
        while k < len(same) and same[k] <= i:
            k += 1
        at[b - a] = k
        if k < len(same):
            out.append((a, runs[same[k]][1]))
            i = same[k] + 1
        else:
            i += 1
    return out


def blank_code_spans(line: str) -> str:
    """`line` with its inline code spans (`code_spans`) turned to spaces: the same columns, no code left."""
    if "`" not in line:
        return line
    out, at = [], 0
    for start, end in code_spans(line):
        out += [line[at:start], " " * (end - start)]
        at = end
    return "".join(out) + line[at:]

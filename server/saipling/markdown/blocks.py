"""The markdown block structure the chunker needs (headings, unsplittable blocks, lines as a reader sees
them), from markdown-it-py's CommonMark parser; wiki-links as their display text, headings as plain text."""

from __future__ import annotations

import importlib
import logging
import re
from dataclasses import dataclass
from functools import lru_cache

from markdown_it import MarkdownIt
from mdit_py_plugins.front_matter import front_matter_plugin

from ..files.metadata import TOML_FENCE, frontmatter_close
from ..files.textio import normalise_newlines
from .spans import strip_comments

# Obsidian wiki-links: `![[map.png]]` embeds are dropped, `[[page|alias]]` reads `alias`, `[[folder/page#Part]]`
# reads `page > Part` (the display text, as a reader sees it). Never across lines: line numbers stay exact.
_EMBED_RE = re.compile(r"!\[\[[^\[\]\n]*\]\]")
_WIKI_RE = re.compile(r"\[\[([^\[\]|\n]*)(?:\|([^\[\]\n]*))?\]\]")
# characters that can start inline markup in a heading (emphasis, code, links, HTML, escapes, entities)
_INLINE_MARKUP_RE = re.compile(r"[*_`\[<\\&!]")
# a MyST target (`(config-file)=` on its own line, above the heading it names: Sphinx docs written in markdown)
_MYST_TARGET_RE = re.compile(r"[ \t]{0,3}\([^()\n]+\)=[ \t]*")


@dataclass(frozen=True)
class Heading:
    start: int  # first on-disk line (1-based); a setext heading is its text line(s) plus the underline
    end: int
    level: int
    title: str  # plain text as a reader sees it: `***Fireball***` -> `Fireball`, wiki-links as their display text


@dataclass(frozen=True)
class MarkdownBlocks:
    """What the chunker needs from the markdown parse of one file (line numbers 1-based, on disk)."""

    headings: list[Heading]  # top-level headings only (a `#` line inside a list item or quote is not a section)
    keep_whole: frozenset[int]  # blank lines inside code, HTML and frontmatter blocks: never a paragraph break
    code_lines: frozenset[int]  # lines of fenced/indented code blocks and frontmatter: wiki-links left alone
    lines: list[str]  # the file's lines as a reader sees them: wiki-links shown as their display text, embeds dropped
    # lines that carry no meaning for a reader: HTML blocks made only of comments (`<!-- YAML ... -->` changelogs),
    # link-reference definitions (`[fs]: fs.md`) and MyST targets (`(config-file)=`); not embedded nor
    # keyword-indexed (`indexed_lines`)
    noise_lines: frozenset[int] = frozenset()


@lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    """CommonMark block parser. Inline parsing is off: the chunker needs block structure and line ranges only
    (every block token carries `.map`, its [first, last) 0-based line range), and it halves the parse time."""
    md = MarkdownIt("commonmark").use(front_matter_plugin)
    md.disable("inline")
    # the core rules after the block parse work on inline tokens' children, which a block parse has none of
    md.disable(["linkify", "replacements", "smartquotes", "text_join"])
    return md


# markdown-it's block rules each call `LOGGER.debug(...)` once per rule tried at each block: ~10 calls a paragraph,
# ~5% of a chunking worker's CPU (benchmarks row S30), though nothing is logged below WARNING
_RULE_MODULES = "blockquote code fence heading hr html_block lheading list paragraph reference".split()


class _NoDebug:
    """A rule module's logger whose `debug` is a C call that takes any arguments and does nothing."""

    debug = staticmethod("".format)

    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger

    def __getattr__(self, name: str) -> object:
        return getattr(self._logger, name)


def quiet_parser_logs() -> bool:
    """Make markdown-it's block rules skip their debug log calls (a chunking worker, which logs nothing below
    CRITICAL: indexing/chunk_pool.py); left alone when the `markdown_it` logger is enabled for DEBUG. True when
    done."""
    if logging.getLogger("markdown_it").isEnabledFor(logging.DEBUG):
        return False
    for name in _RULE_MODULES:
        mod = importlib.import_module(f"markdown_it.rules_block.{name}")
        logger = getattr(mod, "LOGGER", None)
        if isinstance(logger, logging.Logger):
            mod.LOGGER = _NoDebug(logger)  # type: ignore[attr-defined]
    return True


def parse_blocks(text: str) -> MarkdownBlocks:
    """Parse normalised text (\\n newlines) into headings, unsplittable ranges and display lines."""
    if "\r" in text:  # the parser breaks lines at a lone \r too: so must the line numbers
        text = normalise_newlines(text)
    lines = text.split("\n")
    if lines[0].rstrip() == TOML_FENCE and (close := frontmatter_close(lines)) is not None:
        return _toml_fronted(text, lines, close + 1)
    plain = _plain_blocks(lines) if "\x00" not in text else None  # (the parser reads a NUL as U+FFFD)
    if plain is not None:
        return _blocks(text, lines, *plain, set())
    return _parsed(text, lines)


def _toml_fronted(text: str, lines: list[str], end: int) -> MarkdownBlocks:
    """parse_blocks of a text whose lines 1..`end` are TOML front matter (`+++` ... `+++`, Hugo), which the
    CommonMark parser knows nothing of: the body is parsed below blank lines in their place (a TOML `# comment` is
    no heading, a ``` in a string opens no fence over the body), and those lines are the front matter block, as a
    `---` block's front_matter token is: code lines (no wiki-link read), kept whole."""
    blanked = "\n" * end + "\n".join(lines[end:])
    body = parse_blocks(blanked)
    code = set(body.code_lines) | set(range(1, end + 1))
    keep = set(body.keep_whole) | set(_blank_lines(lines, 1, end))
    return _blocks(text, lines, list(body.headings), keep, code, set(body.noise_lines))


def _parsed(text: str, lines: list[str]) -> MarkdownBlocks:
    """parse_blocks by markdown-it's block parse (normalised `text`, its `lines`)."""
    tokens = _parser().parse(text)
    headings: list[Heading] = []
    keep: set[int] = set()
    code: set[int] = set()
    noise: set[int] = set()
    covered = 0  # the last line a top-level block covers so far
    for i, tok in enumerate(tokens):
        if tok.map is None:
            continue
        a, b = tok.map[0] + 1, tok.map[1]  # 1-based inclusive
        if tok.level == 0:
            # a non-blank line between top-level blocks belongs to none: link-reference definitions, which the
            # block parser consumes without a token
            if covered + 1 < a:  # (between two paragraphs: one blank line at most, so it is asked of ~each)
                noise.update(n for n in range(covered + 1, a) if lines[n - 1].strip())
            covered = max(covered, b)
        if tok.type == "html_block" and "<!--" in tok.content and not strip_comments(tok.content).strip():
            noise.update(range(a, min(b, len(lines)) + 1))
        if (
            tok.type == "paragraph_open"
            and i + 1 < len(tokens)
            and all(_MYST_TARGET_RE.fullmatch(line) for line in tokens[i + 1].content.split("\n"))
        ):  # (a label line for cross-references: as a chunk of its own it was a search's top row, no section)
            noise.update(range(a, min(b, len(lines)) + 1))
        if tok.type == "heading_open" and tok.level == 0:
            raw = tokens[i + 1].content if i + 1 < len(tokens) else ""
            title = heading_text(raw)
            headings.append(Heading(a, max(a, b), int(tok.tag[1]), title))
        elif tok.type in ("fence", "code_block", "front_matter", "html_block"):
            if tok.type != "html_block":
                code.update(range(a, b + 1))
            keep.update(_blank_lines(lines, a, b))
    if tokens:  # (trailing link definitions)
        noise.update(n for n in range(covered + 1, len(lines) + 1) if lines[n - 1].strip())
    return _blocks(text, lines, headings, keep, code, noise)


def _blank_lines(lines: list[str], first: int, last: int) -> list[int]:
    """The blank lines among lines `first`..`last` (1-based; a block's map may end past the last line)."""
    return [n for n in range(first, min(last, len(lines)) + 1) if not lines[n - 1].strip()]


def _blocks(
    text: str, lines: list[str], headings: list[Heading], keep: set[int], code: set[int], noise: set[int]
) -> MarkdownBlocks:
    if "[[" not in text:  # no wiki-link anywhere: every line shows as it is
        shown = lines
    else:
        shown = [ln if n in code or "[[" not in ln else display_text(ln) for n, ln in enumerate(lines, 1)]
    return MarkdownBlocks(headings, frozenset(keep), frozenset(code), shown, frozenset(noise))


# -- plain prose without the parser ----------------------------------------------------------------------------------
# Most of a novel's chapters are front matter, `#` headings and paragraphs: for them the block parse (~40% of a
# chunking worker's CPU, benchmarks row S30) finds nothing but those headings. `_plain_blocks` gives the parse's
# answer for such a file from its lines, and gives up (None: the parser decides) at the first line that could start
# any other block: a quote, a list item, a fence, indented code, HTML, a link definition, a setext underline, a
# tab in the indent. Lines that can only be paragraph text or a thematic break (`* * *`, `___`, `*emphasis*`) are
# kept: neither changes what the chunker is told. tests/test_plain_blocks.py checks it against the parser on the
# corpora and on generated documents of every kind of line it tells apart.
_ATX_RE = re.compile(r" {0,3}(#{1,6})(?:[ \t]|$)")
_ORDERED_RE = re.compile(r"[0-9]{1,9}[.)](?:[ \t]|$)")
_SETEXT_EQ_RE = re.compile(r"=+[ \t]*$")
_PROSE_START = frozenset("#>-+*_=`~<[")  # (and digits, spaces, tabs: asked of below)


def _plain_blocks(lines: list[str]) -> tuple[list[Heading], set[int], set[int]] | None:
    """(headings, keep_whole, code_lines) as the block parse gives them for a document of front matter, ATX
    headings, paragraphs and thematic breaks only; None for any other document."""
    headings: list[Heading] = []
    keep: set[int] = set()
    code: set[int] = set()
    start = 0
    if lines[0].startswith("-"):
        end = _front_matter_end(lines)
        if end is None:
            return None
        code.update(range(1, end + 1))  # (as the parse's front_matter token: its lines through the closing one)
        keep.update(_blank_lines(lines, 1, end))
        start = end
    for i in range(start, len(lines)):
        line = lines[i]
        if not line:
            continue
        c = line[0]
        if c == " ":
            body = line.lstrip(" ")
            if len(line) - len(body) >= 4 or not body:
                if not body:
                    continue
                return None  # (indented code, or a lazy continuation: the parser tells them apart)
            c = body[0]
        else:
            body = line
        if c == "\t":
            if body.strip(" \t"):
                return None
            continue
        if c.isdigit():
            if _ORDERED_RE.match(body):
                return None
            continue
        if c == "(" and _MYST_TARGET_RE.fullmatch(line):
            return None  # (a MyST target: the block parse marks it as noise)
        if c not in _PROSE_START:
            continue
        after = body[1:2]
        if c == "#":
            m = _ATX_RE.match(line)
            if m:
                level = len(m.group(1))
                headings.append(Heading(i + 1, i + 1, level, heading_text(_atx_content(body, level))))
            continue
        if c in "*_":  # a thematic break or emphasis: paragraph text either way; `* ` a list item
            if c == "_" or after not in ("", " ", "\t") or _is_break(body, "*"):
                continue
            return None
        if c == "+" and after not in ("", " ", "\t"):
            continue
        if c == "-" and after not in ("", " ", "\t", "-"):
            continue
        if c == "=" and not _SETEXT_EQ_RE.match(body):
            continue
        if c in "`~" and not body.startswith(c * 3):
            continue
        return None
    return headings, keep, code


def _is_break(body: str, mark: str) -> bool:
    """Whether a line (its indent taken off) is a thematic break of `mark` (three or more, spaces and tabs between)."""
    rest = body.replace(" ", "").replace("\t", "")
    return len(rest) >= 3 and rest == mark * len(rest)


def _front_matter_end(lines: list[str]) -> int | None:
    """The number of lines of front matter opened by a first line of exactly `---` and closed by a line of three
    dashes or more (trailing spaces allowed) as mdit_py_plugins' front_matter rule finds it (1-based, the closing
    line's number); None where that rule could read it otherwise (`...`, an indent, a tab, no closing line)."""
    if lines[0] != "---":
        return None
    for k in range(1, len(lines)):
        line = lines[k]
        body = line.lstrip(" ")
        if "\t" in line[: len(line) - len(body) + 1] or (body[:1] != "-" and body.startswith("...")):
            return None
        if len(line) - len(body) >= 4 or not body.startswith("-"):
            continue
        dashes = len(body) - len(body.lstrip("-"))
        if dashes < 3:
            continue
        if body[dashes:].strip(" \t") or line != body:
            return None
        return k + 1
    return None


def _atx_content(body: str, level: int) -> str:
    """An ATX heading's text as markdown-it's heading rule takes it (`body`: the line without its indent): the
    closing `#`s dropped when a space comes before them, spaces around taken off."""
    pos, end = level, len(body)
    while end > pos and body[end - 1] in " \t":
        end -= 1
    tail = end
    while tail > pos and body[tail - 1] == "#":
        tail -= 1
    if tail > pos and body[tail - 1] in " \t":
        end = tail
    return body[pos:end].strip()


def indexed_lines(doc: MarkdownBlocks) -> list[str]:
    """The lines as embedded and keyword-indexed: `doc.lines` with noise lines blank and one-line HTML comments
    outside code removed (the same number of lines: line N is still the file's line N)."""
    # (one search of the joined lines, not one a line: `<!--` holds no newline, so it is in one line of them)
    if not doc.noise_lines and "<!--" not in "\n".join(doc.lines):
        return doc.lines
    out = []
    for n, ln in enumerate(doc.lines, 1):
        if n in doc.noise_lines:
            ln = ""
        elif "<!--" in ln and n not in doc.code_lines:
            ln = strip_comments(ln)
            ln = ln if ln.strip() else ""
        out.append(ln)
    return out


@lru_cache(maxsize=1)
def _inline_parser() -> MarkdownIt:
    return MarkdownIt("commonmark")


# A heading's text is cut to this many characters. Every chunk of a section carries its heading path (a keyword
# column, and the text embedded with it): a setext heading of 20,000 lines (each line of text before a `===` is
# the heading's) was stored in each of its 10,000 chunks, and indexing that one 240 KB file took 7 minutes.
MAX_HEADING_CHARS = 300


def heading_text(raw: str) -> str:
    """A heading's text as a reader sees it: inline markup rendered away (`***Ripping Vines***`, `` `get()` ``,
    `[Fireball](spells.md)` -> their text; images and inline HTML dropped), wiki-links as their display text, whitespace
    collapsed. Section headings, heading paths and exact-heading matches all use this text."""
    text = display_text(raw)
    if _INLINE_MARKUP_RE.search(text):  # (most headings have none: no inline parse)
        parts: list[str] = []
        for block in _inline_parser().parseInline(text):
            for tok in block.children or []:
                if tok.type in ("text", "code_inline"):  # (images dropped, like `![[embeds]]`)
                    parts.append(tok.content)
                elif tok.type in ("softbreak", "hardbreak"):
                    parts.append(" ")
        text = "".join(parts)
    text = " ".join(text.split())
    if len(text) > MAX_HEADING_CHARS:  # (cut at a word: what a reader takes for its title)
        text = text[:MAX_HEADING_CHARS].rsplit(" ", 1)[0].rstrip() + "…"
    return text


def display_text(text: str) -> str:
    """Wiki-links as a reader sees them: `[[page|alias]]` -> `alias`, `[[a/page#Part]]` -> `page > Part`,
    `![[map.png]]` (an embed) -> nothing. Never changes the number of lines."""
    if "[[" not in text:
        return text
    text = _EMBED_RE.sub("", text)
    return _WIKI_RE.sub(_link_text, text)


def _link_text(m: re.Match[str]) -> str:
    alias = (m.group(2) or "").strip()
    if alias:
        return alias
    target = m.group(1).strip()
    page, _, part = target.partition("#")
    page = page.rstrip("/").rsplit("/", 1)[-1]
    if page.lower().endswith(".md"):
        page = page[:-3]
    part = part.lstrip("^") if not part.startswith("^") else ""  # `#^block-id` is an anchor, not a heading
    return f"{page} > {part}" if page and part else page or part

"""Writer-aware language features (engine side): entities from frontmatter, their mentions in prose, hover
cards, definitions, references in manuscript order and the document outline.

An entity is a file whose frontmatter has a `name` (or `aliases`), or a character profile
(`characters/<slug>/profile.md`); its names are the display name plus every alias. A mention is a whole-word
occurrence of one of those names in a file's body: ASCII/Unicode case is ignored except that a capital in the
name must be a capital in the text ("the Detective" matches "The Detective" and "THE DETECTIVE", not "the
detective"; "Rose" never matches "rose"), a possessive (`Marcus's`, `Marcus'`) still counts, the longest name
wins ("Marcus Cole" is one mention, never also "Marcus"), and nothing inside frontmatter, fenced or indented
code, or inline code counts.

References take their candidate files from the keyword index (FTS5: one phrase query over every name) and
verify each candidate's current text (an open editor buffer, else the file on disk) for exact positions, so
they cost one index query plus a scan of the files that mention a name. Positions are 0-based lines and
code-point columns (the LSP edge converts them to the client's encoding).
"""

from __future__ import annotations

import bisect
import dataclasses
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..config.visibility import role_levels, visible
from ..files.context_settings import load_context_settings
from ..files.metadata import FENCES, TOML_FENCE, frontmatter_close, slugify, split_frontmatter
from ..files.textio import BinaryFile, decode, normalise_newlines, read_regular
from ..markdown.spans import blank_code_spans
from ..storage.base import ChunkFilter, EntityRow, KeywordQuery

if TYPE_CHECKING:
    from ..config.settings import Settings
    from ..markdown.blocks import MarkdownBlocks
    from ..storage.base import IndexStore


class EntityProject(Protocol):
    """What these features use of a project (in practice a `Project`; not imported: the indexer finds
    mentions with this module, and the project imports the indexer)."""

    @property
    def root(self) -> Path: ...
    @property
    def settings(self) -> Settings: ...
    @property
    def store(self) -> IndexStore: ...
    def refresh_dirty(self) -> Any: ...


Project = EntityProject

TextSource = Callable[[str], "str | None"]  # root-relative path -> its current text (None: unreadable)

MIN_NAME_CHARS = 2
FRONTMATTER_MAX_CHARS = 65536  # a longer frontmatter block is scanned as body
SUMMARY_FIELDS = ("summary", "description")
SUMMARY_MAX_CHARS = 600
_WORD_CHAR_RE = re.compile(r"\w")
_FRONTMATTER_CLOSE_RE = re.compile(r"(?<=\n)(?:---|\.\.\.)[ \t\r\f\v]*(?:\n|$)")
_TOML_CLOSE_RE = re.compile(r"(?<=\n)\+\+\+[ \t\r\f\v]*(?:\n|$)")  # (Hugo's TOML front matter: `+++` lines)
_DIGITS_RE = re.compile(r"(\d+)")
_HEADING_LINE_RE = re.compile(r"^ {0,3}#{1,6}(?:\s|$)")
_SETEXT_RE = re.compile(r"^ {0,3}(?:=+|-+)[ \t]*$")


@dataclass(frozen=True)
class Entity:
    path: str  # root-relative path of the profile / world entry
    name: str
    entity_type: str
    aliases: tuple[str, ...] = ()

    def __hash__(self) -> int:  # (not over every alias: a profile may list thousands, hashed at each mention)
        return hash((self.path, self.name))

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    @classmethod
    def of_row(cls, row: EntityRow) -> Entity:
        """The entity a stored row names (`is_entity(row)` holds): its display name, else its first alias."""
        return cls(
            path=row.path,
            name=str(row.display_name or row.aliases[0]),
            entity_type=str(row.entity_type or row.file_type or "entity"),
            aliases=row.aliases,
        )


@dataclass(frozen=True)
class Mention:
    line: int  # 0-based
    start: int  # code-point columns, end exclusive
    end: int
    surface: str  # the name as written in the entity's frontmatter
    entities: tuple[Entity, ...]
    line_text: str = field(repr=False, compare=False, default="")


@dataclass
class EntityIndex:
    """Every entity of a project and one regex over all their names."""

    entities: list[Entity]
    by_name: dict[str, list[tuple[str, Entity]]]  # casefolded name -> (name as written, entity)
    pattern: re.Pattern[str] | None
    longest: int = 0  # characters of the longest name
    _word_patterns: dict[frozenset[str], re.Pattern[str]] = field(default_factory=dict, repr=False, compare=False)
    _last_only: tuple[set[str], re.Pattern[str]] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def build(cls, entities: Iterable[Entity]) -> EntityIndex:
        ents = sorted(entities, key=lambda e: e.path)
        by_name: dict[str, list[tuple[str, Entity]]] = {}
        for e in ents:
            for n in dict.fromkeys(n.strip() for n in e.names):
                if len(n) >= MIN_NAME_CHARS:
                    by_name.setdefault(n.casefold(), []).append((n, e))
        names = [s for pairs in by_name.values() for s, _ in pairs]
        return cls(ents, by_name, names_pattern(names), max((len(s) for s in names), default=0))

    def for_path(self, path: str) -> Entity | None:
        return next((e for e in self.entities if e.path == path), None)

    def mentions(self, text: str, only: set[str] | None = None) -> Iterator[Mention]:
        """Mentions in a file's text (frontmatter and code skipped); with `only`, just those whose name (as
        written) is in `only`, and only lines holding the longest word of one of them are scanned (a plain
        substring search over the lower-cased text finds them)."""
        if self.pattern is None:
            return
        low = text.lower()
        if only is None or len(low) != len(text):  # (lower() must keep every offset)
            lines = text.split("\n")
            skip = code_lines(text)
            for n in range(frontmatter_end(lines), len(lines)):
                if n not in skip:
                    yield from self.line_mentions(lines[n], n, only)
            return
        offsets = [m.start() for m in self._words_pattern(only).finditer(low)]
        if not offsets:
            return
        body = frontmatter_lines(text)
        skip = code_lines(text)
        n, pos, line_start, hits = 0, 0, -1, []
        for i in offsets:
            k = text.count("\n", pos, i)
            if k and hits:  # the line before is complete
                yield from self._hits(text, line_start, n, hits, only)
                hits = []
            n, pos = n + k, i
            if n >= body and n not in skip:
                if k or line_start < 0:  # (once a line: a search back from every hit was quadratic on a long one)
                    line_start = text.rfind("\n", 0, i) + 1
                hits.append(i - line_start)
        if hits:
            yield from self._hits(text, line_start, n, hits, only)

    def _words_pattern(self, only: set[str]) -> re.Pattern[str]:
        """Where any of the longest words of the names in `only` starts (plain substrings of the lower-cased text,
        overlapping ones too: a lookahead at every position), compiled once per set of words; the same `only`
        set object as the last call (an index run's scan passes one set for every file) reuses it at once (a
        caller must not change that set in place)."""
        if self._last_only is not None and self._last_only[0] is only:
            return self._last_only[1]
        words = frozenset(max(n.lower().split(), key=len) for n in only if n.split())
        pattern = self._word_patterns.get(words)
        if pattern is None:
            if len(self._word_patterns) > 8:
                self._word_patterns.clear()
            body = trie_regex([[w] for w in words], "") if words else "(?!)"
            pattern = self._word_patterns[words] = re.compile(f"(?={body})")
        self._last_only = (only, pattern)
        return pattern

    def _hits(self, text: str, start: int, n: int, hits: list[int], only: set[str] | None) -> Iterator[Mention]:
        end = text.find("\n", start)
        yield from self.line_mentions(text[start : end if end != -1 else len(text)], n, only, hits)

    def resolve(self, found: str, only: set[str] | None) -> tuple[str, tuple[Entity, ...]] | None:
        """The name (as written) and entities a matched text stands for, after the capitals check."""
        pairs = [
            (s, e)
            for s, e in self.by_name.get(" ".join(found.split()).casefold(), [])
            if capitals_match(s, found) and (only is None or s in only)
        ]
        return (pairs[0][0], tuple(dict.fromkeys(e for _, e in pairs))) if pairs else None

    def line_mentions(
        self, line: str, n: int, only: set[str] | None = None, hits: list[int] | None = None
    ) -> Iterator[Mention]:
        """Mentions in one line; with `hits` (columns where a wanted name's word was found), only mentions
        covering one of them, looked for in a window around each (long prose lines are not scanned whole)."""
        if self.pattern is None:
            return
        masked = blank_code_spans(line)
        if hits is None or len(line) <= 8 * self.longest:
            windows = [(0, len(line))]
        else:
            windows = []
            for h in hits:  # every name covering column h starts within `longest` of it
                a, b = max(0, h - self.longest), min(len(line), h + self.longest + 1)
                if windows and a <= windows[-1][1]:
                    windows[-1] = (windows[-1][0], b)
                else:
                    windows.append((a, b))
        last_end = -1
        for a, b in windows:
            for m in self.pattern.finditer(masked, a, b):
                if m.start() < last_end or (m.end() == b < len(line) and _WORD_CHAR_RE.match(line, b)):
                    continue  # seen in the window before, or cut short by the window's end
                if hits is not None and not _covers(hits, m.start(), m.end()):
                    continue
                found = self.resolve(m.group(0), only)
                if found is not None:
                    last_end = m.end()
                    yield Mention(n, m.start(), m.end(), found[0], found[1], line)

    def at(self, text: str, line: int, col: int) -> Mention | None:
        """The mention under (line, col) of `text` (0-based, code points), if any."""
        lines = text.split("\n")
        if not 0 <= line < len(lines):
            return None
        if line < frontmatter_end(lines) or line in code_lines(text):
            return None
        # only the names that can reach the cursor are looked at (the whole line was: resolving every mention before
        # the cursor took 6 s a hover at the end of a 5 MB paragraph, and four such hovers held every worker)
        near = sorted({max(0, col - 1), max(0, col)})
        return next((m for m in self.line_mentions(lines[line], line, hits=near) if m.start <= col <= m.end), None)


def _covers(hits: list[int], start: int, end: int) -> bool:
    """Whether a column of `hits` (ascending) lies in [start, end): a bisect, not a pass over a line's hits for
    every match (20,000 mentions on one line took 12 s to index, 40,000 75 s)."""
    i = bisect.bisect_left(hits, start)
    return i < len(hits) and hits[i] < end


def names_pattern(names: Iterable[str]) -> re.Pattern[str] | None:
    """Whole-word, case-insensitive, the longest name first (so "Marcus Cole" beats "Marcus"): the names as one
    trie-shaped alternation (`trie_regex`), which matches what the flat alternation of the names sorted longest
    first matched, at a cost that does not grow with the number of names (a vault of a thousand entity pages: the
    flat one cost ~8 ms a line; tests/test_entity_scan.py checks the two agree)."""
    unique = sorted(set(names), key=lambda s: (-len(s), s))
    if not unique:
        return None
    return re.compile(rf"(?<!\w){trie_regex([s.split() for s in unique], _NAME_GAP)}(?!\w)", re.IGNORECASE)


_NAME_GAP = r"[^\S\n]+"  # between a name's words: spaces within one line


# A name or alias longer than this is not looked for in the text: no character's name is, and each of its
# characters is a node of the trie (an alias of 600 characters overflowed the recursion that built the pattern and
# failed the whole index run)
MAX_NAME_CHARS = 120


def trie_regex(names: Iterable[list[str]], gap: str) -> str:
    """One regex (no group captures) matching any of `names` (each a list of words, matched with `gap` between
    them) that prefers the longest: a trie of their lower-cased characters, each node's ending made optional after
    its longer branches (greedy), so the engine tries longer names first and backs off to shorter ones exactly as
    an alternation of the names sorted longest first does. For re.IGNORECASE: a character whose lower case is
    not one character (e.g. "İ") stays as written."""
    end = ""
    root: dict[str, Any] = {}
    for words in names:
        if sum(len(w) for w in words) > MAX_NAME_CHARS:  # (an alias of 600 characters is no name)
            continue
        node = root
        for k, word in enumerate(words):
            if k:
                node = node.setdefault(gap, {})
            for ch in word:
                low = ch.lower()
                node = node.setdefault(re.escape(low if len(low) == 1 else ch), {})
        node[end] = {}

    # each node's pattern after its children's (post-order, no recursion: a name's characters are a chain of nodes)
    done: dict[int, str] = {}
    stack: list[tuple[dict[str, Any], bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if not children_done:
            stack.append((node, True))
            stack.extend((child, False) for tok, child in node.items() if tok != end)
            continue
        branches = [tok + done.pop(id(child)) for tok, child in sorted(node.items()) if tok != end]
        body = "" if not branches else branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        done[id(node)] = f"(?:{body})?" if branches and end in node else body
    return "(?:" + done[id(root)] + ")"


def capitals_match(name: str, found: str) -> bool:
    """Every capital letter of `name` is a capital in `found` (other letters may be any case)."""
    a, b = name.split(), found.split()
    if len(a) != len(b) or any(len(x) != len(y) for x, y in zip(a, b, strict=True)):
        return True  # case folding changed the length (e.g. "ß"): the case-insensitive match stands
    return all(not c.isupper() or d.isupper() for x, y in zip(a, b, strict=True) for c, d in zip(x, y, strict=True))


def frontmatter_lines(text: str) -> int:
    """`frontmatter_end` of a whole text, without splitting more than the frontmatter into lines."""
    nl = text.find("\n")
    fence = text[:nl].rstrip() if nl != -1 else ""
    if fence not in FENCES:
        return 0
    close = _TOML_CLOSE_RE if fence == TOML_FENCE else _FRONTMATTER_CLOSE_RE
    m = close.search(text, nl + 1, FRONTMATTER_MAX_CHARS)
    return text.count("\n", 0, m.start()) + 1 if m is not None else 0


def frontmatter_end(lines: list[str]) -> int:
    """0-based number of the first line after a leading frontmatter block, `---` (YAML) or `+++` (TOML) (0 when
    there is none)."""
    close = frontmatter_close(lines)
    return 0 if close is None else close + 1


def code_lines(text: str) -> set[int]:
    """0-based numbers of the lines in code blocks (fenced or indented; the chunker's CommonMark parse). Text
    with no fence marker and no indented line has none, and is not parsed."""
    if "```" not in text and "~~~" not in text and "\n    " not in text and "\n\t" not in text:
        return set()
    from ..markdown.blocks import parse_blocks

    fm = frontmatter_lines(text)
    return {n - 1 for n in parse_blocks(text).code_lines if n > fm}


# -- the project's entities ----------------------------------------------------------------------------------
def is_entity(row: EntityRow) -> bool:
    """A frontmatter `name` (its slug is the entity name), any alias, or a character profile; a chapter's
    `title` alone makes no entity."""
    if row.aliases:
        return True
    if not row.display_name:
        return False
    return row.file_type == "character" or slugify(str(row.display_name)) == (row.entity_name or "")


_cache: dict[tuple[int, tuple[str, ...]], tuple[tuple[Any, ...], EntityIndex]] = {}
_fast: dict[
    tuple[int, tuple[str, ...]], tuple[tuple[Any, ...], EntityIndex]
] = {}  # by index version, levels and exclusions


def entity_index(project: Project, role: str | None = None) -> EntityIndex:
    """The entities `role` may see (None: the editor's, the `defaultRole`): visible to it and not excluded by
    `.context_settings.json` (the rule of every request that returns content, as `workspace/symbol`). A request
    made as a role (an agent's `mcpRole`) never resolves a profile that role may not see."""
    levels = role_levels(project.settings.roles, role, project.settings.default_role)
    cs = load_context_settings(project.root)
    store = project.store
    version = (id(store), store.path, store.index_version(), tuple(levels), id(cs) if cs.has("exclude") else None)
    slot = (id(project), tuple(levels))  # (one cache per set of levels: roles do not evict each other)
    fast = _fast.get(slot)
    if fast is not None and fast[0] == version:  # nothing changed in the index: no rows read
        return fast[1]
    rows = [r for r in project.store.entities() if visible(r.visibility, levels) and cs.mode_for(r.path) != "exclude"]
    key = tuple(rows)
    hit = _cache.get(slot)
    if hit is not None and hit[0] == key:
        _fast[slot] = (version, hit[1])
        return hit[1]
    ents = [Entity.of_row(r) for r in rows if is_entity(r)]
    index = EntityIndex.build(ents)
    _cache[slot] = (key, index)
    _fast[slot] = (version, index)
    return index


def disk_reader(root: Path) -> TextSource:
    def read(rel: str) -> str | None:
        try:
            data = read_regular(root / rel)
            if b"\0" in data:
                return None
            try:  # the common case, without textio's slower checks (a NUL byte already ruled binary out)
                text = data.decode("utf-8-sig")
                return normalise_newlines(text) if "\r" in text else text
            except UnicodeDecodeError:
                return decode(data, rel).text
        except (OSError, BinaryFile):
            return None

    return read


def with_buffers(root: Path, buffers: Callable[[str], str | None] | None) -> TextSource:
    """Open editor buffers first (unsaved text), else the file on disk."""
    disk = disk_reader(root)
    if buffers is None:
        return disk
    return lambda rel: text if (text := buffers(rel)) is not None else disk(rel)


# -- hover and definition ------------------------------------------------------------------------------------
@dataclass
class Card:
    entity: Entity
    summary: str
    declaration: tuple[int, int]  # 0-based first and last line of the frontmatter (the definition)
    mentions: str = ""  # where it is mentioned, in one line (retrieval.mentions.MentionReport.summary), when known
    # the profile's sections headed for a chapter (`## Chapter 4`, `## From ch-12`), up to the horizon:
    # (heading, its first paragraph), the latest CARD_CHAPTER_NOTES
    chapter_notes: list[tuple[str, str]] = field(default_factory=list)
    horizon: int | None = None  # the chapter the card is as of (None: everything)


CARD_CHAPTER_NOTES = 3
CHAPTER_NOTE_MAX_CHARS = 300
# a heading for a chapter: "Chapter 4", "ch-12", "Ch. 3", "From chapter 7: the bite"
_CHAPTER_HEADING_RE = re.compile(r"(?<![^\W\d_])(?:chapter|ch)[ .\-]*(\d+)(?!\d)", re.IGNORECASE)
_ATX_OPEN_RE = re.compile(r" {0,3}(#{1,6})(?=[ \t]|$)")


def _atx_heading(line: str) -> tuple[int, str] | None:
    """An ATX heading line's level and title (its closing run of `#` dropped), else None. In Python, not one regex
    with a lazy title before optional blanks: that backtracked through a long run of blanks (a 60 KB heading of
    spaces held a hover for 31 s, and the whole server with it)."""
    if (m := _ATX_OPEN_RE.match(line)) is None:
        return None
    title = line[m.end() :].strip(" \t")
    bare = title.rstrip("#")
    if not bare or bare[-1] in " \t":  # (a closing sequence: only #s, or #s after a blank)
        title = bare.rstrip(" \t")
    return len(m.group(1)), title


def card(entity: Entity, read: TextSource, horizon: int | None = None) -> Card:
    """The hover card of an entity; with `horizon` (the chapter of the file it is shown in), as of that
    chapter: sections of the profile headed for a later chapter are left out of its summary and notes."""
    text = read(entity.path) or ""
    fm, body_start, _ = split_frontmatter(text)
    summary = ""
    for key in SUMMARY_FIELDS:
        value = fm.get(key)
        if isinstance(value, str) and value.strip():
            summary = value.strip()
            break
    body = text.split("\n")[body_start - 1 :]
    sections = chapter_sections(body)
    hidden = {n for first, last, ch, _ in sections if horizon is not None and ch > horizon for n in range(first, last)}
    if not summary:  # outside the chapter sections (shown as notes), else the first the horizon shows
        dated = {n for first, last, _, _ in sections for n in range(first, last)}
        summary = first_paragraph([ln for n, ln in enumerate(body) if n not in dated]) or first_paragraph(
            [ln for n, ln in enumerate(body) if n not in hidden]
        )
    if len(summary) > SUMMARY_MAX_CHARS:
        summary = summary[:SUMMARY_MAX_CHARS].rsplit(" ", 1)[0] + " …"
    notes = []
    for first, last, ch, heading in sections:
        if horizon is None or ch <= horizon:
            note = first_paragraph([ln for n, ln in enumerate(body[first:last], first) if n not in hidden])
            if len(note) > CHAPTER_NOTE_MAX_CHARS:
                note = note[:CHAPTER_NOTE_MAX_CHARS].rsplit(" ", 1)[0] + " …"
            notes.append((heading, note))
    return Card(entity, summary, declaration(text), chapter_notes=notes[-CARD_CHAPTER_NOTES:], horizon=horizon)


def chapter_sections(lines: list[str]) -> list[tuple[int, int, int, str]]:
    """The sections of a profile body headed for a chapter: (first line, end line exclusive, chapter, heading),
    a section running to the next heading of its level or above (code blocks skipped)."""
    skip = code_lines("\n".join(lines))
    heads = []
    for n, line in enumerate(lines):
        if n not in skip and (head := _atx_heading(line)) is not None:
            heads.append((n, *head))
    out = []
    for i, (n, level, title) in enumerate(heads):
        if (m := _CHAPTER_HEADING_RE.search(title)) is None:
            continue
        end = next((h[0] for h in heads[i + 1 :] if h[1] <= level), len(lines))
        out.append((n, end, int(m.group(1)), title))
    return out


def past_horizon(heading_path: str | None, horizon: int) -> bool:
    """Whether a passage under `heading_path` sits in a section headed for a chapter after `horizon` (a profile's
    `## Chapter 21: bitten`): the hover leaves such sections out, and so do search, agent context and
    check_passage under a spoiler horizon."""
    if not heading_path:
        return False
    return any(
        (m := _CHAPTER_HEADING_RE.search(part)) is not None and int(m.group(1)) > horizon
        for part in heading_path.split(" > ")
    )


def body_as_of(body: str, horizon: int | None) -> str:
    """A profile body without its sections headed for a chapter after `horizon` (None: the whole body)."""
    if horizon is None:
        return body
    lines = body.split("\n")
    hidden = {n for first, last, ch, _ in chapter_sections(lines) if ch > horizon for n in range(first, last)}
    return "\n".join(line for n, line in enumerate(lines) if n not in hidden)


def declaration(text: str) -> tuple[int, int]:
    """The frontmatter block's lines (0-based, inclusive); line 0 alone when there is none."""
    _, body_start, _ = split_frontmatter(text)
    return (0, max(0, body_start - 2))


def first_paragraph(lines: list[str]) -> str:
    """The first paragraph of a body, skipping headings (ATX and setext) and code."""
    out: list[str] = []
    skip = code_lines("\n".join(lines))
    for n, line in enumerate(lines):
        setext = not out and n + 1 < len(lines) and _SETEXT_RE.match(lines[n + 1]) is not None
        if n in skip or _HEADING_LINE_RE.match(line) or _SETEXT_RE.match(line) or setext or not line.strip():
            if out:
                break
            continue
        out.append(line.strip())
    return " ".join(out)


def entities_at(project: Project, rel: str, text: str, line: int, col: int) -> tuple[Mention | None, list[Entity]]:
    """The mention under the cursor and its entities; on no mention inside an entity's own file, that entity."""
    index = entity_index(project)
    mention = index.at(text, line, col)
    if mention is not None:
        return mention, list(mention.entities)
    own = index.for_path(rel)
    return None, [own] if own is not None else []


# -- references ----------------------------------------------------------------------------------------------
@dataclass
class FileMentions:
    path: str
    mentions: list[Mention]


def reference_filter(project: Project, max_chapter: int | None = None) -> ChunkFilter:
    """Excluded files (.context_settings.json), what the `defaultRole` may see (config/visibility.py) and a chapter
    limit."""
    settings = project.settings
    flt = ChunkFilter(max_chapter=max_chapter, visibility=role_levels(settings.roles, None, settings.default_role))
    cs = load_context_settings(project.root)
    if cs.has("exclude"):
        flt.exclude_paths = cs.excluded(list(project.store.file_states()))
    return flt


def references(
    project: Project,
    entities: list[Entity],
    read: TextSource,
    *,
    max_chapter: int | None = None,
) -> list[FileMentions]:
    """Every mention of `entities` across the indexed project, grouped by file in manuscript order."""
    names = {n for e in entities for n in e.names if len(n.strip()) >= MIN_NAME_CHARS}
    match = KeywordQuery.phrases(names)
    if match is None:
        return []
    project.refresh_dirty()  # files saved a moment ago: their text and keywords first (the live index)
    index = entity_index(project)
    wanted = set(entities)
    out = []
    cs = load_context_settings(project.root)
    for path, chapter in project.store.keyword_paths(match, reference_filter(project, max_chapter)):
        if cs.excludes(path):  # (indexed since the filter's path list was read)
            continue
        text = read(path)
        if text is None:
            continue
        found = [m for m in index.mentions(text, only=names) if wanted & set(m.entities)]
        if found:
            out.append((manuscript_key(path, chapter), FileMentions(path, found)))
    out.sort(key=lambda kv: kv[0])
    return [fm for _, fm in out]


def natural_key(path: str) -> tuple[Any, ...]:
    return tuple(int(p) if p.isdigit() else p.lower() for p in _DIGITS_RE.split(path))


def manuscript_key(path: str, chapter: int | None) -> tuple[Any, ...]:
    """Manuscript files (under books/, or with a chapter number) first in book, chapter, scene order (natural
    order of their paths: chapter-2 before chapter-10), then every other file in natural path order."""
    manuscript = path.startswith("books/") or "/books/" in path or chapter is not None
    return (0 if manuscript else 1, natural_key(path))


# -- document outline ----------------------------------------------------------------------------------------
@dataclass
class OutlineItem:
    name: str
    kind: str  # heading | entity
    first: int  # 0-based lines, inclusive
    last: int
    detail: str = ""
    entity_type: str = ""
    children: list[OutlineItem] = field(default_factory=list)


def outline(text: str, entity: Entity | None = None) -> list[OutlineItem]:
    """The file's own entity (its frontmatter) then its headings nested by level, each spanning its section
    (setext headings included: the chunker's CommonMark parse finds them). A frontmatter `title:` of a page with no
    H1 (markdown.chunker.front_matter_title) is the outline's root heading, from its `title:` line to the end."""
    from ..markdown.blocks import parse_blocks

    lines = text.split("\n")
    while len(lines) > 1 and not lines[-1].strip():
        lines.pop()
    items: list[OutlineItem] = []
    if entity is not None:
        first, last = declaration(text)
        detail = ", ".join(entity.aliases)
        items.append(OutlineItem(entity.name, "entity", first, last, detail, entity.entity_type))
    doc = parse_blocks("\n".join(lines))
    heads = doc.headings
    stack: list[tuple[int, OutlineItem]] = []
    end = len(lines) - 1
    if (title := _title_item(text, doc, end)) is not None:
        items.append(title)
        stack.append((1, title))  # (the page has no H1: every heading nests under its title)
    # a section runs to the line before the next heading of the same or a higher level (one pass: a file of 100,000
    # headings, searched onward from each, took 14 s)
    nxt = [end + 2] * len(heads)
    open_: list[int] = []
    for i, g in enumerate(heads):
        while open_ and heads[open_[-1]].level >= g.level:
            nxt[open_.pop()] = g.start
        open_.append(i)
    for i, h in enumerate(heads):
        item = OutlineItem(h.title, "heading", h.start - 1, max(h.end - 1, nxt[i] - 2), f"h{h.level}")
        while stack and stack[-1][0] >= h.level:
            stack.pop()
        (stack[-1][1].children if stack else items).append(item)
        stack.append((h.level, item))
    return items


def capped(items: list[OutlineItem], limit: int) -> list[OutlineItem]:
    """The outline's first `limit` items in document order (depth first), their nesting kept: an editor asks for a
    document's symbols again and again (outline, breadcrumbs, after each edit), and 100,000 headings made a 25 MB
    answer that kept a worker thread 5 s at each request."""
    left = [limit]

    def take(xs: list[OutlineItem]) -> list[OutlineItem]:
        out = []
        for x in xs:
            if left[0] <= 0:
                break
            left[0] -= 1
            out.append(dataclasses.replace(x, children=take(x.children)))
        return out

    return take(items)


def _title_item(text: str, doc: MarkdownBlocks, end: int) -> OutlineItem | None:
    from ..files.metadata import FileMeta
    from ..markdown.chunker import front_matter_title

    data, body_start, _ = split_frontmatter(text)
    if body_start <= 1:
        return None
    title = front_matter_title(FileMeta(frontmatter=data, body_start_line=body_start), doc, 1 << 30)
    if title is None:
        return None
    lines = text.split("\n")
    at = next((n for n in range(1, body_start - 1) if re.match(r"title\s*:", lines[n])), 0)
    return OutlineItem(title, "heading", at, max(at, end), "title")

"""Names that drift and names without a page, in one file (the editor's diagnostics, issue 35), and the edits
that fix them: replace the word with the name it is close to, add it to the entity's frontmatter `aliases`,
or create a profile for a name that has none (from the project's template when there is one).

The lists come from the whole index (`names.drift`, `names.unknown`: cached per index version); this module
finds their words in one file's current text (frontmatter, code and inline code skipped) and describes the
edits as plain data (0-based lines, code-point columns). The engine never writes a file: the edge turns
these into a WorkspaceEdit the editor applies.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass
from typing import Any

from ..files.metadata import TOML_FENCE, slugify
from ..markdown.spans import blank_code_spans
from .entities import Entity, EntityProject, code_lines, entity_index, frontmatter_end
from .names import Vocabulary, drift, unknown, vocabulary

SEVERITIES = ("off", "error", "warning", "information", "hint")
# where a project keeps its profile template (the first that exists); `{{name}}` and `{{slug}}` are filled in
TEMPLATES = (
    "templates/character.md",
    "templates/profile.md",
    "characters/_template.md",
    "characters/_template/profile.md",
)


@dataclass(frozen=True)
class NameFinding:
    kind: str  # "drift" | "unknown"
    word: str
    line: int  # 0-based
    start: int  # code-point columns, end exclusive
    end: int
    close_to: str = ""  # drift: the word of the entity's name it is close to
    entity: Entity | None = None  # drift: that entity

    @property
    def message(self) -> str:
        if self.kind == "drift" and self.entity is not None:
            return f"`{self.word}` is close to `{self.close_to}` ({self.entity.name}): a misspelling?"
        return f"`{self.word}` is a name with no entity page"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "word": self.word}
        if self.entity is not None:
            out.update(closeTo=self.close_to, entity=self.entity.name, entityPath=self.entity.path)
        return out


@dataclass(frozen=True)
class Lists:
    drift: dict[str, tuple[str, Entity]]  # word -> (name word it is close to, entity)
    unknown: set[str]


@dataclass
class _Pass:
    """The last pass over a project's index: its vocabulary (what it cost, when it ended) and the lists made
    from it for one set of entity names."""

    version: Any
    voc: Vocabulary
    cost: float  # seconds the vocabulary took
    ended: float  # time.monotonic() when it ended
    names: tuple[tuple[str, tuple[str, ...]], ...]
    lists: Lists


_passes: dict[int, _Pass] = {}
_passes_lock = threading.Lock()
REREAD_FACTOR = 10.0  # a vocabulary that took T seconds is read again at most every REREAD_FACTOR * T seconds


def project_lists(project: EntityProject, min_count: int = 5, wait: bool = True) -> Lists:
    """The project's drifting words and names without a page (the default role's view), shared by every open
    document. The vocabulary is one pass over the index (about 40 s for the 3.4 million words of the whole
    fiction corpus on a loaded machine, 0.1 s for a novel): read again after a change, but on a large project at
    most every REREAD_FACTOR times as long as it took (the lists meanwhile come from the last pass). A change of
    entity names (an alias added, a profile created) always makes the lists again, from that vocabulary.

    wait=False (a request's worker, e.g. code actions): never waits for a pass in progress and never reads the
    vocabulary itself: the last lists, or none yet."""
    store = project.store
    version = (id(store), store.path, store.index_version(), min_count)
    names = tuple((e.path, e.names) for e in entity_index(project).entities)
    voc: Vocabulary | None = None
    if not _passes_lock.acquire(blocking=wait):  # (one pass at a time: a waiting caller gets its lists)
        last = _passes.get(id(project))
        return last.lists if last is not None else Lists({}, set())
    try:
        last = _passes.get(id(project))
        if last is not None:
            due = time.monotonic() - last.ended >= REREAD_FACTOR * last.cost
            if last.names == names and (last.version == version or not due):
                return last.lists
            if last.version == version or not due:  # the names changed: new lists from the same vocabulary
                voc, cost, ended, version = last.voc, last.cost, last.ended, last.version
        if last is None or voc is None:
            if not wait:
                return last.lists if last is not None else Lists({}, set())
            t0 = time.monotonic()
            voc = vocabulary(project)
            ended = time.monotonic()
            cost = ended - t0
        found = Lists(
            {d.word: (d.name_word, d.entity) for d in drift(project, voc)},
            {u.word for u in unknown(project, voc, min_count=min_count)},
        )
        _passes[id(project)] = _Pass(version, voc, cost, ended, names, found)
        return found
    finally:
        _passes_lock.release()


def reread_due_in(project: EntityProject) -> float | None:
    """Seconds until the lists of `project_lists` may be made again from a fresh vocabulary, when the ones it
    gives now come from a pass older than the index (a change within REREAD_FACTOR x its cost); None when they
    are current (or none were made). A caller that published stale lists publishes again then: a misspelling
    saved a second after a pass was otherwise never flagged."""
    last = _passes.get(id(project))
    if last is None:
        return None
    store = project.store
    if last.version == (id(store), store.path, store.index_version(), last.version[3]):
        return None
    return max(0.0, last.ended + REREAD_FACTOR * last.cost - time.monotonic())


def findings(lists: Lists, text: str) -> list[NameFinding]:
    """Every occurrence of a listed word in `text` (whole words, case as listed; frontmatter, code blocks and
    inline code skipped), in text order."""
    words = sorted(set(lists.drift) | lists.unknown, key=lambda w: (-len(w), w))
    if not words:
        return []
    pattern = re.compile(r"(?<![\w'’-])(?:" + "|".join(map(re.escape, words)) + r")(?![\w])")
    lines = text.split("\n")
    skip = code_lines(text)
    out = []
    for n in range(frontmatter_end(lines), len(lines)):
        line = lines[n]
        if n in skip or not line.strip():
            continue
        blanked = blank_code_spans(line)
        for m in pattern.finditer(blanked):
            w = m.group(0)
            if w in lists.drift:
                close_to, entity = lists.drift[w]
                out.append(NameFinding("drift", w, n, m.start(), m.end(), close_to, entity))
            else:
                out.append(NameFinding("unknown", w, n, m.start(), m.end()))
    return out


def file_findings(project: EntityProject, text: str, wait: bool = True) -> list[NameFinding]:
    project.refresh_dirty()  # (a saved edit is in the lists)
    return findings(project_lists(project, wait=wait), text)


# -- the edits -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TextChange:
    """Replace the text between (line, col) and (end_line, end_col) (0-based, code points) with `text`."""

    line: int
    col: int
    end_line: int
    end_col: int
    text: str


_ALIASES_RE = re.compile(r"aliases[ \t]*:[ \t]*(.*)")  # (its trailing blanks are stripped after: a lazy
# value before `[ \t]*$` backtracked through a long run of blanks, in time growing with its square)
_ITEM_RE = re.compile(r"^([ \t]+)-[ \t]")


def alias_change(profile_text: str, word: str) -> TextChange | None:
    """The change to a profile that adds `word` to its frontmatter `aliases` (a flow list `[a, b]` gains
    `, word`; a block list gains an item like its last; a single value becomes a list; no `aliases` key gets
    one before the closing `---`; no frontmatter gets one). TOML frontmatter (`+++`) gets the same in TOML;
    None when no edit found keeps it readable (_toml_alias_change)."""
    lines = profile_text.split("\n")
    end = frontmatter_end(lines)
    if end == 0:
        return TextChange(0, 0, 0, 0, f"---\naliases: [{word}]\n---\n")
    close = end - 1  # the closing `---` line
    if lines[0].rstrip() == TOML_FENCE:
        return _toml_alias_change(lines, close, word)
    for n in range(1, close):
        m = _ALIASES_RE.match(lines[n])
        if m is None:
            continue
        value, col = m.group(1).rstrip(" \t"), m.start(1)
        if value.startswith("["):
            bracket = lines[n].rfind("]")
            if bracket == -1:
                break
            inside = lines[n][lines[n].index("[") + 1 : bracket].strip()
            return TextChange(n, bracket, n, bracket, f", {word}" if inside else word)
        if value and not value.startswith("#"):
            return TextChange(n, col, n, col + len(value), f"[{value}, {word}]")
        last = n
        for j in range(n + 1, close):  # the block list right under the key
            if _ITEM_RE.match(lines[j]):
                last = j
            elif lines[j].strip() and not lines[j].startswith((" ", "\t")):
                break
        if last > n:
            indent = _ITEM_RE.match(lines[last]).group(1)  # type: ignore[union-attr]
            return TextChange(last, len(lines[last]), last, len(lines[last]), f"\n{indent}- {word}")
        return TextChange(n, len(lines[n]), n, len(lines[n]), f" [{word}]")
    return TextChange(close, 0, close, 0, f"aliases: [{word}]\n")


_TOML_ALIASES_RE = re.compile(r"[ \t]*aliases[ \t]*=[ \t]*(.*)")
_TOML_NAME_RE = re.compile(r"[ \t]*name[ \t]*=[ \t]*(.*)")
_TOML_TABLE_RE = re.compile(r"[ \t]*\[")  # a `[table]` header: the top-level keys are above the first


def _toml_alias_change(lines: list[str], close: int, word: str) -> TextChange | None:
    """alias_change of a profile whose frontmatter is TOML (`+++` lines, Hugo): a one-line array `["a"]` gains
    `, "word"`, a single string becomes an array, an array over several lines gains an item before its `]`;
    no top-level `aliases` key gets one right under the opening `+++` (above any `[table]`, where a key is
    top-level). Each edit is tried on the block first: None when none leaves TOML that reads with `word` added
    (a broken block would make the profile private)."""
    quoted = json.dumps(word, ensure_ascii=False)  # (a JSON string is a TOML basic string)
    top = next((n for n in range(1, close) if _TOML_TABLE_RE.match(lines[n])), close)
    key = next((n for n in range(1, top) if _TOML_ALIASES_RE.match(lines[n])), None)
    tries: list[TextChange] = []
    if key is None:
        tries.append(TextChange(1, 0, 1, 0, f"aliases = [{quoted}]\n"))
    elif (m := _TOML_ALIASES_RE.match(lines[key])) is not None:
        n, value, col = key, m.group(1).rstrip(" \t"), m.start(1)
        if value.startswith("["):
            bracket = lines[n].rfind("]")
            if bracket != -1:
                tries += [TextChange(n, bracket, n, bracket, f", {quoted}"), TextChange(n, bracket, n, bracket, quoted)]
            end = next((j for j in range(n + 1, close) if lines[j].strip().startswith("]")), None)
            if end is not None:  # (an array over several lines: an item before its closing line)
                tries += [TextChange(end, 0, end, 0, f"  {quoted},\n"), TextChange(end, 0, end, 0, f", {quoted}\n")]
        elif value.startswith(("'", '"')):
            tries.append(TextChange(n, col, n, col + len(value), f"[{value}, {quoted}]"))
    return next((t for t in tries if _adds_alias(lines[1:close], t, word)), None)


def _adds_alias(block: list[str], change: TextChange, word: str) -> bool:
    """Whether `change` (on a file whose line 1 is `block`'s first) leaves a TOML block whose `aliases` gained
    `word`."""
    import tomllib

    def aliases(lines: list[str]) -> list[Any] | None:
        try:
            value = tomllib.loads("\n".join(lines)).get("aliases", [])
        except tomllib.TOMLDecodeError:
            return None
        return [value] if isinstance(value, str) else value if isinstance(value, list) else None

    before = aliases(block)
    line, end_line = change.line - 1, change.end_line - 1
    if before is None or not 0 <= line <= end_line <= len(block):
        return False
    edited = "\n".join(block)
    offsets = [0]
    for ln in block:
        offsets.append(offsets[-1] + len(ln) + 1)
    a, b = offsets[line] + change.col, offsets[end_line] + change.end_col
    after = aliases((edited[:a] + change.text + edited[b:]).split("\n"))
    return after == [*before, word]


@dataclass(frozen=True)
class NewProfile:
    path: str  # root-relative, does not exist yet
    text: str
    template: str | None  # the template it came from


def new_profile(project: EntityProject, name: str, read: Any = None) -> NewProfile | None:
    """Where a profile for `name` goes (beside the project's other character profiles: `characters/<slug>/
    profile.md` or `characters/<slug>.md`) and its text (the template's, else a minimal frontmatter); None
    when that file exists already."""
    slug = slugify(name)
    ents = entity_index(project).entities
    path = f"characters/{slug}/profile.md"
    chars = [e.path for e in ents if e.entity_type.lower() == "character"]
    if chars and not any(p.endswith("/profile.md") for p in chars):
        parent = chars[0].rsplit("/", 1)[0] if "/" in chars[0] else "characters"
        path = f"{parent}/{slug}.md"
    if (project.root / path).exists():
        return None
    for rel in TEMPLATES:
        tpl = project.root / rel
        if tpl.is_file():
            try:
                raw = (read(rel) if read else None) or tpl.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            return NewProfile(path, _fill(raw, name, slug), rel)
    return NewProfile(path, f"---\nname: {name}\ntype: character\naliases: []\n---\n# {name}\n\n", None)


def _fill(template: str, name: str, slug: str) -> str:
    text = re.sub(r"\{\{\s*name\s*\}\}", name, template)
    text = re.sub(r"\{\{\s*slug\s*\}\}", slug, text)
    lines = text.split("\n")
    end = frontmatter_end(lines)
    if end == 0:
        return f"---\nname: {name}\n---\n" + text
    if lines[0].rstrip() == TOML_FENCE:
        return _toml_fill(lines, end, name)
    if not any(re.match(r"^name[ \t]*:[ \t]*\S", lines[n]) for n in range(1, end - 1)):
        lines = [lines[0], f"name: {name}"] + [ln for ln in lines[1:] if not re.match(r"^name[ \t]*:[ \t]*$", ln)]
    return "\n".join(lines)


def _toml_fill(lines: list[str], end: int, name: str) -> str:
    """_fill of a template whose frontmatter is TOML: a `name = "..."` right under the opening `+++` unless a
    top-level `name` says one already (an empty one is dropped: TOML refuses a key written twice)."""
    top = next((n for n in range(1, end - 1) if _TOML_TABLE_RE.match(lines[n])), end - 1)
    values = {n: m.group(1).strip() for n in range(1, top) if (m := _TOML_NAME_RE.match(lines[n]))}
    empty = {n for n, value in values.items() if value in ('""', "''", "")}
    if len(empty) < len(values):
        return "\n".join(lines)
    kept = [ln for n, ln in enumerate(lines) if n not in empty]
    return "\n".join([kept[0], f"name = {json.dumps(name, ensure_ascii=False)}", *kept[1:]])

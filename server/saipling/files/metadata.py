"""File types from paths and entity metadata from frontmatter: YAML between `---` lines, or TOML between `+++`
lines as Hugo writes it (SPEC 3)."""

from __future__ import annotations

import logging
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

from ..config.settings import MAX_CHAPTER

log = logging.getLogger(__name__)

# (regex over the relative path, file_type), first match wins: SAiPLING defaults.
FILE_TYPE_RULES: list[tuple[str, str]] = [
    (r"overview/overview\.md", "overview"),
    (r"overview/brainstorm\.md", "brainstorm"),
    (r"characters/(?:.+/)?profile\.md", "character"),
    (r"characters/(?:.+/)?brainstorm\.md", "brainstorm"),
    (r"world/.+\.md", "world"),
    (r"notes/[^/]+\.md", "notes"),
    (r"books/[^/]+/overview/[^/]+\.md", "book_overview"),
    (r"books/[^/]+/phase-1-seed/.+", "seed"),
    (r"books/[^/]+/phase-2-root/.+", "structure"),
    (r"books/[^/]+/phase-3-sprout/.+", "character_arc"),
    (r"books/[^/]+/phase-4-flourish/.+", "scene_outline"),
    (r"books/[^/]+/phase-5-bloom/.+", "scene_draft"),
    (r"books/[^/]+/front-matter/[^/]+\.md", "front_matter"),
    (r"books/[^/]+/back-matter/.+", "back_matter"),
    (r"books/[^/]+/notes/[^/]+\.md", "notes"),
    (r".*\.json", "config"),
]
_COMPILED = [(re.compile(p + r"\Z"), t) for p, t in FILE_TYPE_RULES]
_BOOK_RE = re.compile(r"(?:^|/)books/([^/]+)/")
_CHAPTER_RE = re.compile(r"(?:^|/)(ch(?:apter)?-?(\d+))(?:/|$|[-_.])", re.IGNORECASE)
_SCENE_RE = re.compile(r"(?:^|/)scene-?(\d+)[^/]*\.md\Z", re.IGNORECASE)
# Frontmatter keys left out of the frontmatter chunk (they say nothing a search should match; README "Chunking").
BOOKKEEPING_KEYS = {
    "id",
    "uid",
    "uuid",
    "created",
    "created_at",
    "date_created",
    "updated",
    "updated_at",
    "modified",
    "date_modified",
    "last_modified",
    "lastmod",
    "date",
    "cssclass",
    "cssclasses",
    "permalink",
    "publish",
}


@dataclass
class FileMeta:
    file_type: str = "document"
    entity_type: str = "document"
    entity_name: str | None = None
    display_name: str | None = None
    aliases: list[str] = field(default_factory=list)
    book_id: str | None = None
    chapter_id: str | None = None
    chapter_num: int | None = None
    visibility: str = "public"
    status: str | None = None
    frontmatter: dict[str, Any] = field(default_factory=dict)
    body_start_line: int = 1  # first on-disk line (1-based) of the body after frontmatter
    warning: str | None = None


def file_type_for(rel_path: str) -> str:
    for regex, ftype in _COMPILED:
        if regex.match(rel_path):
            return ftype
    return "document"


def slugify(value: str) -> str:
    norm = unicodedata.normalize("NFKD", value).encode("ascii", "ignore").decode("ascii")
    return re.sub(r"[^a-z0-9]+", "-", norm.lower()).strip("-")


# Bumped when the rules that read a file's metadata change (its visibility above all): the indexer re-reads every
# file of an index written under other rules (IndexContext.chunking_signature), so no file keeps a level read the old
# way. 4: a chapter number read from the file's own name (`chapter-21.md`) as well as its folders and frontmatter.
# 5: `visibility:` with no value (null, `~`) is private. 6: TOML frontmatter (`+++` lines, Hugo) is read.
# 7: a `visibility` under `params` (Hugo's custom front matter) counts, and one in JSON front matter (`{...}`).
METADATA_VERSION = 7
PARAMS_KEY = "params"  # Hugo keeps a page's own front matter keys under `params`: a `visibility` there counts too
PRIVATE = "private"  # the level a file gets when its frontmatter cannot be read (config/visibility.py: fail closed)
_LINE_BREAK_RE = re.compile(r"\r\n|\r|\n")
YAML_FENCE = "---"
TOML_FENCE = "+++"
FENCES = (YAML_FENCE, TOML_FENCE)


def closes(line: str, fence: str) -> bool:
    """Whether `line` closes a frontmatter block opened by `fence`: the same fence (trailing blanks allowed), or
    YAML's document end `...` for a `---` block."""
    rest = line.rstrip()
    return rest == fence or (fence == YAML_FENCE and rest == "...")


def frontmatter_close(lines: list[str]) -> int | None:
    """0-based index of the line that closes the frontmatter opened by `lines[0]` (`---` or `+++`, trailing
    blanks allowed); None when the first line opens none or nothing closes it."""
    fence = lines[0].rstrip() if lines else ""
    if fence not in FENCES:
        return None
    return next((j for j in range(1, len(lines)) if closes(lines[j], fence)), None)


@dataclass
class Frontmatter:
    """A file's frontmatter as read: its mapping, the first body line, a warning, and its visibility level as
    written (folded; None when it names none). `broken`: a frontmatter block is there but cannot be read (a
    YAML error, not a mapping, never closed), so what it says, visibility included, is unknown: `private`."""

    data: dict[str, Any]
    body_start: int
    warning: str | None = None
    visibility: str | None = None
    broken: bool = False


def split_frontmatter(text: str, rel_path: str = "") -> tuple[dict[str, Any], int, str | None]:
    """Return (metadata, first body line, warning). Malformed YAML -> ({}, 1, warning): body is the whole file."""
    fm = read_frontmatter(text, rel_path)
    return fm.data, fm.body_start, fm.warning


def read_frontmatter(text: str, rel_path: str = "") -> Frontmatter:
    """The frontmatter of `text`: `---` on the first line, up to a `---` or `...` line (YAML), or `+++` on the
    first line, up to a `+++` line (TOML, as Hugo writes it). Lines end at \\n, \\r\\n or a lone \\r, as the
    markdown parser breaks them (markdown/blocks.py). Its warning is logged only when `rel_path` names the file
    (_warn)."""
    if not text.startswith(FENCES):
        return _displaced(text, rel_path)
    lines = _LINE_BREAK_RE.split(text) if "\r" in text else text.split("\n")
    fence = lines[0].rstrip()
    if fence not in FENCES:
        return _odd_fence(lines, rel_path)
    kind = "TOML" if fence == TOML_FENCE else "YAML"
    end = frontmatter_close(lines)
    if end is None:
        if "visibility" in _fold_key(text):  # a block opened to say who may see the file, never closed
            return _broken(rel_path, f"{kind} frontmatter is never closed; indexed as plain text")
        return Frontmatter({}, 1)
    fm_text = "\n".join(lines[1:end])
    body_start = end + 2
    if fence == TOML_FENCE:
        return _read_toml(fm_text, body_start, rel_path)
    try:
        data, level = _load_yaml(fm_text)
    except Exception as exc:  # YAMLError, and ValueError etc. from values like `date: 2024-02-30`
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 2})" if mark is not None else f" ({exc})" if str(exc) else ""
        return _broken(rel_path, f"malformed YAML frontmatter{where}; indexed as plain text")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        return _broken(rel_path, "frontmatter is not a mapping; indexed as plain text")
    if _expands_too_far(data, 4 * len(fm_text) + 10_000):
        # (it parsed: its visibility, read from the nodes above, is known; no alias is followed to read it)
        warning = _warn(rel_path, "YAML frontmatter expands far beyond its text (aliases); indexed as plain text")
        return Frontmatter({}, 1, warning, level)
    return Frontmatter(data, body_start, None, level)


_TOML_LINE_RE = re.compile(r"\(at line (\d+), column (\d+)\)")


def _read_toml(fm_text: str, body_start: int, rel_path: str) -> Frontmatter:
    """A `+++` block read as TOML: its keys feed the metadata as YAML's do. A block that does not parse says
    nothing readable about who may see the file: private (fail closed), as malformed YAML."""
    import tomllib  # (only for a `+++` block: a file without one never loads it, `saipling get` stays cold)

    try:
        data = tomllib.loads(fm_text)
    except (tomllib.TOMLDecodeError, ValueError) as exc:
        # (the parser counts lines from the block's first; the warning names the file's line)
        shown = _TOML_LINE_RE.sub(lambda m: f"(line {int(m.group(1)) + 1}, column {m.group(2)})", str(exc))
        return _broken(rel_path, f"malformed TOML frontmatter ({shown}); indexed as plain text")
    levels = [_level_of_value(value) for key, value in data.items() if _fold_key(key) == "visibility"]
    for key, value in data.items():  # Hugo's custom front matter: `[params]` / `params.visibility = ...`
        if _fold_key(key) == PARAMS_KEY and isinstance(value, dict):
            levels += [_level_of_value(v) for k, v in value.items() if _fold_key(k) == "visibility"]
    return Frontmatter(data, body_start, None, _strictest(levels) if levels else None)


# blanks above a fence: any Unicode white space (a no-break space, a form feed, U+2028, an ideographic space) and
# the invisible format characters an editor or a paste leaves (BOM, zero-width space / joiners, word joiner)
_DISPLACED_RE = re.compile(r"[\s\ufeff\u200b\u200c\u200d\u2060]+(?=---|\+\+\+)")


def _displaced(text: str, rel_path: str) -> Frontmatter:
    """No frontmatter; but a `---` (or `+++`) block below blank lines (a line or a BOM put above the fence) still
    says who may see the file: a level it names other than public, or that cannot be read, applies (fail closed)."""
    if text.lstrip(_BLANKS).startswith("{"):
        return _json_block(text.lstrip(_BLANKS), rel_path)
    m = _DISPLACED_RE.match(text)
    if m is None:
        return Frontmatter({}, 1)
    block = read_frontmatter(text[m.end() :], rel_path)
    if block.visibility in (None, "public"):
        return Frontmatter({}, 1)
    warning = _warn(rel_path, "a frontmatter block below the first line is not read, but its visibility applies")
    return Frontmatter({}, 1, warning, block.visibility, broken=True)


_BLANKS = " \t\r\n\f\v\ufeff\u200b\u200c\u200d\u2060\u00a0"


def _json_block(text: str, rel_path: str) -> Frontmatter:
    """Hugo's JSON front matter (a `{` ... `}` object at the top of the file) is not read as front matter, but the
    level it names applies: `visibility` at the top or under `params` other than public, or a block that mentions
    visibility and cannot be read (private). Fail closed."""
    import json

    lines = _LINE_BREAK_RE.split(text) if "\r" in text else text.split("\n")
    end = next((i for i, line in enumerate(lines) if line.strip() == "}"), None)
    block = "\n".join(lines[: end + 1]) if end is not None else text
    if "visibility" not in _fold_key(block):
        return Frontmatter({}, 1)
    try:
        data = json.loads(block) if end is not None else None
    except ValueError:
        data = None
    if not isinstance(data, dict):
        return _broken(rel_path, "a JSON front matter block that names a visibility cannot be read")
    levels = [_level_of_value(v) for k, v in data.items() if _fold_key(k) == "visibility"]
    for k, v in data.items():
        if _fold_key(k) == PARAMS_KEY and isinstance(v, dict):
            levels += [_level_of_value(x) for key, x in v.items() if _fold_key(key) == "visibility"]
    level = _strictest(levels) if levels else None
    if level in (None, "public"):
        return Frontmatter({}, 1)
    warning = _warn(rel_path, "JSON front matter is not read, but the visibility it names applies")
    return Frontmatter({}, 1, warning, level, broken=True)


def _odd_fence(lines: list[str], rel_path: str) -> Frontmatter:
    """No frontmatter: the first line is `----`, `---yaml` or `+++toml`, not a fence. If what follows, read as a
    block, names a level other than public, that level applies (fail closed); a block that says nothing of
    visibility, or a rule line above prose, changes nothing."""
    # (`----`, `---yaml`, `--- # meta`, `---` and an invisible character; `++++`, `+++toml`)
    fence = next((f for f in FENCES if lines[0].startswith(f)), None)
    if fence is None:
        return Frontmatter({}, 1)
    block = read_frontmatter("\n".join([fence, *lines[1:]]), rel_path)
    end = next((j for j in range(1, len(lines)) if closes(lines[j], fence)), len(lines))
    if block.visibility in (None, "public") or "visibility" not in _fold_key("\n".join(lines[1:end])):
        return Frontmatter({}, 1)
    first = lines[0].rstrip()
    warning = _warn(rel_path, f"the first line {first!r} is no frontmatter fence, but the visibility below it applies")
    return Frontmatter({}, 1, warning, block.visibility, broken=True)


def _broken(rel_path: str, problem: str) -> Frontmatter:
    """Frontmatter that cannot be read: what it says about visibility is unknown, so the file is private (only a
    role that may see private files sees it): fail closed."""
    return Frontmatter({}, 1, _warn(rel_path, problem + ", visible as private"), PRIVATE, broken=True)


def _warn(rel_path: str, problem: str) -> str:
    """The warning about a file's frontmatter (`path: problem`), logged when the file is named: a reader that
    names none (the mention scan reading again a file the indexer read and warned about, an editor's hover) gets
    the warning without logging it (it was logged as `: problem`, nameless, a second time)."""
    if not rel_path:
        return problem
    warning = f"{rel_path}: {problem}"
    log.warning("%s", warning)
    return warning


def _fold_key(key: str) -> str:
    """A frontmatter key as compared: NFKC, case-folded, trimmed (`Visibility`, `VISIBILITY ` are `visibility`)."""
    return unicodedata.normalize("NFKC", key).casefold().strip()


_YAML_STR = "tag:yaml.org,2002:str"


def _load_yaml(fm_text: str) -> tuple[Any, str | None]:
    """The YAML value of `fm_text` (safe types only) and the visibility level its top-level mapping names.

    The level is read from the parsed nodes, not from the dict: a key written twice (`visibility: private` then
    `visibility: public`) keeps only its last value in the dict, and keys differ by case (`Visibility`)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(fm_text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()
    level = None
    # (merge keys `<<` are flattened into node.value by the construction)
    if isinstance(node, yaml.MappingNode):
        levels = [_level_of(value) for key, value in node.value if _is_visibility(key)]
        for key, value in node.value:  # Hugo's custom front matter: `params: {visibility: private}`
            if _is_key(key, PARAMS_KEY) and isinstance(value, yaml.MappingNode):
                levels += [_level_of(v) for k, v in value.value if _is_visibility(k)]
        if levels:
            level = _strictest(levels)
    return data, level


def _is_key(key: Any, name: str) -> bool:
    import yaml

    return isinstance(key, yaml.ScalarNode) and key.tag == _YAML_STR and _fold_key(key.value) == name


def _is_visibility(key: Any) -> bool:
    return _is_key(key, "visibility")


def _level_of(node: Any) -> str:
    """A `visibility` value as a level: a string folded (config.visibility.fold; `""` is public); any other value
    (null: `visibility:` left unfinished or `~`; a list, a number, a date, a boolean, binary) says nothing readable,
    so private."""
    import yaml

    if isinstance(node, yaml.ScalarNode) and node.tag == _YAML_STR:
        return _level_of_value(node.value)
    return PRIVATE


def _level_of_value(value: Any) -> str:
    """A `visibility` value as read (a YAML string, a TOML value) as a level: a string folded; any other value
    (a list, a number, a date, a boolean, a table) says nothing readable, so private."""
    from ..config.visibility import fold

    if not isinstance(value, str):
        return PRIVATE
    level = fold(value)
    # one word is a level; several (`private` folded by YAML with an indented line below it into
    # `private - item`, a sentence) name none for sure: private, as any value that cannot be read
    return level if level and len(level.split()) == 1 else PRIVATE


def _strictest(levels: list[str]) -> str:
    """One level for a key written several times: the one non-public level they name, else private."""
    from ..config.visibility import PUBLIC

    named = set(levels) - {PUBLIC}
    if not named:
        return PUBLIC
    return named.pop() if len(named) == 1 else PRIVATE


def _expands_too_far(data: Any, budget: int) -> bool:
    """True when walking `data` (aliases followed, as every reader of it does) costs more than `budget`.

    YAML aliases share one object between many places, so a few lines (`b: [*a, *a, ...]`, nested) or a
    self-referencing list (`a: &a [*a]`) load into a value whose walk is exponential or endless. Written out
    without aliases, frontmatter costs at most a few units per character of its text, so a linear budget
    refuses only alias bombs and cycles. Iterative: no recursion limit."""
    stack = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            budget -= 1 + len(value)
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list | tuple | set):
            budget -= 1 + len(value)
            stack.extend(value)
        else:
            budget -= 1 + (len(value) if isinstance(value, str | bytes) else 0)
        if budget < 0:
            return True
    return False


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, list | tuple):
        return [str(v) for v in value if v is not None and str(v).strip()]
    return [str(value)]


def extract_metadata(rel_path: str, text: str) -> FileMeta:
    ftype = file_type_for(rel_path)
    read = read_frontmatter(text, rel_path)
    fm = read.data
    meta = FileMeta(file_type=ftype, frontmatter=fm, body_start_line=read.body_start, warning=read.warning)
    meta.entity_type = str(fm.get("type") or ftype)
    name = fm.get("name") or fm.get("title")
    parts = rel_path.split("/")
    if fm.get("name"):
        meta.entity_name = slugify(str(fm["name"]))
        meta.display_name = str(fm["name"])
    elif ftype == "character" and len(parts) >= 3:
        meta.entity_name = slugify(parts[-2])
        meta.display_name = parts[-2].replace("-", " ").title()
    meta.aliases = _as_list(fm.get("aliases") or fm.get("alias"))
    scope = fm.get("scope")
    book = _BOOK_RE.search(rel_path)
    if isinstance(scope, str) and scope.startswith("book"):
        meta.book_id = scope
    elif book:
        meta.book_id = book.group(1)
    elif fm.get("book") is not None and not isinstance(fm.get("book"), dict | list):
        meta.book_id = slugify(str(fm["book"])) or None
    chap = _CHAPTER_RE.search("/".join(parts[:-1]) + "/") if len(parts) > 1 else None
    if chap and len(chap.group(2)) <= 9:  # (`ch-99999999999999999999/` is no chapter: SQLite cannot store it)
        meta.chapter_num = int(chap.group(2))
        meta.chapter_id = f"ch-{meta.chapter_num:02d}"
    elif isinstance(number := fm.get("chapter"), int) and not isinstance(number, bool) and 0 <= number <= MAX_CHAPTER:
        # (past it PostgreSQL's int column cannot store it, nor SQLite past 2**63: the file was not indexed at all)
        meta.chapter_num = int(fm["chapter"])
        meta.chapter_id = f"ch-{meta.chapter_num:02d}"
    elif (chap := _CHAPTER_RE.search(parts[-1])) and len(chap.group(2)) <= 9:
        # (`books/book-01/chapter-21.md`: a chapter passed every horizon; `chapter-99999999999999999999.md` is none)
        meta.chapter_num = int(chap.group(2))
        meta.chapter_id = f"ch-{meta.chapter_num:02d}"
    scene = _SCENE_RE.search(rel_path)
    if meta.entity_name is None and scene and meta.chapter_id:
        meta.entity_name = f"{meta.chapter_id}-scene-{int(scene.group(1)):02d}"
    if meta.display_name is None and name:
        meta.display_name = str(name)
    meta.visibility = read.visibility or "public"  # (key and value read case-insensitively; fail closed)
    meta.status = str(fm["status"]) if fm.get("status") is not None else None
    return meta

"""Project-relative paths and glob matching (`**` aware), shared by scanning and filters."""

from __future__ import annotations

import functools
import os
import re
import threading
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .errors import PathOutsideRoot

MAX_GLOB_CHARS = 1024  # a pattern's length (filter.glob, config include/exclude/corpora)
MAX_GLOBS = 1000  # patterns in one list (config include, exclude, a corpus)


def nfc(text: str) -> str:
    """`text` in Unicode NFC: a name typed `privé` (é one code point) and stored as `prive` + U+0301 (as macOS
    writes it) compare equal. ASCII (most paths) costs one check."""
    if text.isascii() or unicodedata.is_normalized("NFC", text):
        return text
    return unicodedata.normalize("NFC", text)


@functools.lru_cache(maxsize=1024)
def _class_regex(body: str) -> re.Pattern[str] | None:
    """One bracket expression (`a-z`, `^abc`) as a single-character regex, or None when it is not valid."""
    try:
        return re.compile(f"[{body}]")
    except re.error:
        return None


def _valid_class(body: str) -> bool:
    return _class_regex(body) is not None


def glob_problem(pattern: str) -> str | None:
    """Why a glob cannot be used (over MAX_GLOB_CHARS) or can never match (a reversed range like `[z-a]`, an
    empty class), or None."""
    if len(pattern) > MAX_GLOB_CHARS:
        return f"a glob has at most {MAX_GLOB_CHARS} characters, got {len(pattern)}"
    for m in re.finditer(r"\[([^\]]*)\]", pattern.replace("\\", "/")):
        body = m.group(1)
        if body.startswith("!"):
            body = "^" + body[1:]
        if not body or not _valid_class(body):
            return f"{m.group(0)} is not a valid character class"
    return None


def glob_list_problem(patterns: list[str]) -> str | None:
    """Why a list of globs (a setting) is refused: too many, or one over MAX_GLOB_CHARS; else None. (A glob that
    can never match is allowed in settings, as before: it matches nothing.)"""
    if len(patterns) > MAX_GLOBS:
        return f"at most {MAX_GLOBS} patterns, got {len(patterns)}"
    for p in patterns:
        if len(p) > MAX_GLOB_CHARS:
            return f"a pattern has at most {MAX_GLOB_CHARS} characters, got {len(p)} ({p[:40]!r}...)"
    return None


# The steps of a compiled glob. A position in a pattern of m steps is 0..m (m: matched), or ~i (negative) inside
# the `**/` at step i, which needs a slash before it moves on. `**` and the implicit `**/` before a pattern without
# a slash are steps like `*`: a run of stars adds positions to a set, never a factor to the work.
_LIT, _ONE, _CLASS, _STAR, _ANY, _DIRS, _NONE = range(7)
_LOOPS = (_STAR, _ANY, _DIRS)  # steps that may match nothing (an empty move to the next position)
# positions + transitions a glob's table holds before it starts over (a memory bound, not a correctness one)
_MAX_CELLS = 65536
_START, _DEAD = 0, 1  # every table's first two states


class _Table:
    """A glob's DFA so far: state ids for sets of positions, whether each accepts, and its transitions."""

    __slots__ = ("ids", "sets", "accept", "delta", "cells")

    def __init__(self) -> None:
        self.cells = 0  # positions in `sets` plus transitions in `delta`: what the table costs in memory
        self.ids: dict[frozenset[int], int] = {}
        self.sets: list[frozenset[int]] = []
        self.accept: list[bool] = []
        self.delta: list[dict[str, int]] = []

    def add(self, positions: frozenset[int], m: int) -> int:
        self.cells += len(positions) + 1
        sid = self.ids[positions] = len(self.sets)
        self.sets.append(positions)
        self.accept.append(m in positions)
        self.delta.append({})
        return sid


class Glob:
    """A gitignore-like glob compiled to steps, matched by a lazily built DFA (sets of NFA positions, each
    transition computed once and memoised per character). No backtracking: a match reads each character of the
    path once, and a character never seen before in that state costs O(steps); so matching is O(len(path) x
    len(pattern)) at worst, linear in the path once the table is warm.

    Semantics (unchanged from the regex it replaced, issue 13): `**/` is zero or more folders, `**` anything
    (slashes too), `*` and `?` anything but a slash, `[...]`/`[!...]` a character class (`[z-a]` matches
    nothing, like git), an unclosed `[` a literal; backslashes are slashes; a leading `/` is dropped; a trailing
    `/` means everything under a folder of that name; a pattern without a slash matches a basename (or folder
    name) anywhere. Case-sensitive. Pattern and path are compared in NFC."""

    def __init__(self, pattern: str, *, table_only: bool = False) -> None:
        """`table_only`: match with the table even when a regex would do (tests compare the two)."""
        self.pattern = pattern
        kinds: list[int] = []
        args: list[Any] = []

        def step(kind: int, arg: Any = None) -> None:
            kinds.append(kind)
            args.append(arg)

        pat = nfc(pattern).replace("\\", "/").lstrip("/")
        folder = pat.endswith("/")  # `drafts/`: everything under a folder of that name
        pat = pat.rstrip("/")
        if "/" not in pat:  # a basename anywhere (like .gitignore)
            step(_DIRS)
        i = 0
        while i < len(pat):
            c = pat[i]
            if pat.startswith("**/", i):
                step(_DIRS)
                i += 3
            elif pat.startswith("**", i):
                step(_ANY)
                i += 2
            elif c == "*":
                step(_STAR)
                i += 1
            elif c == "?":
                step(_ONE)
                i += 1
            elif c == "[":
                j = pat.find("]", i + 1)
                if j == -1:
                    step(_LIT, c)
                    i += 1
                else:
                    body = pat[i + 1 : j]
                    if body.startswith("!"):
                        body = "^" + body[1:]
                    rx = _class_regex(body) if body else None
                    step(_CLASS, rx) if rx is not None else step(_NONE)  # `[z-a]` matches nothing
                    i = j + 1
            else:
                step(_LIT, c)
                i += 1
        if folder:
            step(_LIT, "/")
            step(_ANY)
        self._kinds, self._args, self._m = kinds, args, len(kinds)
        self._rx = None if table_only else self._linear_regex()
        self._match_rx = self._rx[0].match if self._rx is not None else None
        self._lock = threading.Lock()  # (the table grows from every thread that matches)
        self._table = self._new_table()

    def _linear_regex(self) -> tuple[re.Pattern[str], re.Pattern[str]] | None:
        """(path-or-folder, whole-path) regexes when a backtracking engine runs them in O(len(path) x steps),
        else None (the table matches). Most globs qualify (`**/*.md`, `*.md`, `drafts/`, `books/*/ch-0[12]/*.md`)
        and C is ~5x faster than a Python loop over characters.

        The bound: a `*` ([^/]*) cannot leave its folder name, so with at most one per name (between literal
        slashes) and every name in a path matched by one part of the glob, a folder's characters are read by
        one `*` at a time, each end it tries checked in O(steps) (the rest of that name is fixed-length);
        one `**/` ((?:.*/)?, only ever ended after a slash, with no `*` before it in its name) tries each slash
        once, each try reading what follows; `**` as the last step (.*) matches at its first try. Two stars in a
        name (`*a*`), a second `**/`, or `**` anywhere else multiply the tries (O(n^k)): those use the table."""
        stars = dirs = 0
        parts: list[str] = []
        for at, (kind, arg) in enumerate(zip(self._kinds, self._args, strict=True)):
            if kind == _LIT:
                if arg == "/":
                    stars = 0
                parts.append(re.escape(arg))
            elif kind == _ONE:
                parts.append("[^/]")
            elif kind == _CLASS:
                parts.append(arg.pattern)
            elif kind == _NONE:
                parts.append("(?!)")
            elif kind == _STAR:
                stars += 1
                if stars > 1:
                    return None
                parts.append("[^/]*")
            elif kind == _ANY:
                if at != self._m - 1:
                    return None
                parts.append(".*")
            elif kind == _DIRS:
                dirs += 1
                if dirs > 1 or stars:
                    return None
                parts.append("(?:.*/)?")
        body = "".join(parts)
        return re.compile(body + r"(?=/|\Z)", re.DOTALL), re.compile(body + r"\Z", re.DOTALL)

    def _new_table(self) -> _Table:
        table = _Table()
        table.add(self._closure({0}), self._m)  # START
        table.add(frozenset(), self._m)  # DEAD: nothing after it can match
        return table

    def _closure(self, positions: set[int]) -> frozenset[int]:
        """`positions` plus every position reached from them by steps that match nothing."""
        todo = list(positions)
        while todo:
            i = todo.pop()
            if 0 <= i < self._m and self._kinds[i] in _LOOPS and i + 1 not in positions:
                positions.add(i + 1)
                todo.append(i + 1)
        return frozenset(positions)

    def _step(self, positions: frozenset[int], c: str) -> frozenset[int]:
        """The positions after reading `c` from `positions`: O(len(positions))."""
        kinds, args, m = self._kinds, self._args, self._m
        nxt: set[int] = set()
        for i in positions:
            if i < 0:  # inside a `**/`: anything, and after a slash its next position
                nxt.add(i)
                if c == "/":
                    nxt.add(~i + 1)
                continue
            if i == m:
                continue
            kind = kinds[i]
            if kind == _LIT:
                if c == args[i]:
                    nxt.add(i + 1)
            elif kind == _ONE:
                if c != "/":
                    nxt.add(i + 1)
            elif kind == _CLASS:
                if args[i].match(c) is not None:
                    nxt.add(i + 1)
            elif kind == _STAR:
                if c != "/":
                    nxt.add(i)
            elif kind == _ANY:
                nxt.add(i)
            elif kind == _DIRS:  # `**/` (zero or more folders): into it (~i) unless a slash ends the first
                nxt.add(~i)
                if c == "/":
                    nxt.add(i + 1)
        return self._closure(nxt)

    def _grow(self, table: _Table, sid: int, c: str) -> int | None:
        """The state after `c` in `sid`, added to the table; None when the table is full (or was replaced)."""
        target = self._step(table.sets[sid], c)
        with self._lock:
            if table is not self._table or table.cells >= _MAX_CELLS:
                return None
            nxt = table.ids.get(target)
            if nxt is None:
                nxt = table.add(target, self._m)
            table.delta[sid][c] = nxt
            table.cells += 1
            return nxt

    def match(self, rel_path: str) -> bool:
        """True if the path or one of its folders matches (gitignore-like: `drafts` excludes `drafts/a.md`)."""
        path = rel_path if rel_path.isascii() else nfc(rel_path)
        if self._match_rx is not None:  # (per row of a filter: kept to one call)
            return self._match_rx(path) is not None
        return self._run(path, folders=True)

    def fullmatch(self, rel_path: str) -> bool:
        """True if the whole path matches (not only one of its folders)."""
        if self._rx is not None:
            return self._rx[1].match(nfc(rel_path)) is not None
        return self._run(nfc(rel_path), folders=False)

    def _run(self, path: str, folders: bool) -> bool:
        table = self._table
        if table.cells >= _MAX_CELLS:  # full: start a new one (other threads finish on the old one)
            with self._lock:
                if self._table is table:
                    self._table = self._new_table()
                table = self._table
        delta, accept = table.delta, table.accept
        sid = _START
        for at, c in enumerate(path):
            if folders and c == "/" and accept[sid]:
                return True  # a folder of the path matches
            nxt = delta[sid].get(c)
            if nxt is None:
                nxt = self._grow(table, sid, c)
                if nxt is None:
                    return self._run_sets(path, at, table.sets[sid], folders)
            if nxt == _DEAD:
                return False
            sid = nxt
        return accept[sid]

    def _run_sets(self, path: str, at: int, positions: frozenset[int], folders: bool) -> bool:
        """The rest of a match from path[at] without the table (when it is full): O(len(pattern)) a character."""
        m = self._m
        for c in path[at:]:
            if folders and c == "/" and m in positions:
                return True
            positions = self._step(positions, c)
            if not positions:
                return False
        return m in positions


@functools.lru_cache(maxsize=256)
def compile_glob(pattern: str) -> Glob:
    """The compiled glob for a pattern (cached)."""
    return Glob(pattern)


def glob_match(rel_path: str, pattern: str) -> bool:
    """True if the path or one of its folders matches (gitignore-like: `drafts` excludes `drafts/a.md`)."""
    return glob_matches(compile_glob(pattern), rel_path)


def glob_matches(glob: Glob, rel_path: str) -> bool:
    """glob_match with the glob compiled already (a caller holding more patterns than compile_glob's cache)."""
    if glob._match_rx is not None and rel_path.isascii():  # the common case, without a method call
        return glob._match_rx(rel_path) is not None
    return glob.match(rel_path)


def any_match(rel_path: str, patterns: list[str]) -> bool:
    return any(glob_match(rel_path, p) for p in patterns)


def any_matcher(patterns: list[str]) -> Callable[[str], bool]:
    """`any_match(rel, patterns)` as one function of `rel`, for a loop over many paths (the scan's check of every
    file, ~3x faster): one glob with a regex (`**/*.md`, the default include) is its regex's match on ASCII paths."""
    globs = [compile_glob(p) for p in patterns]
    if not globs:
        return lambda rel: False
    if len(globs) == 1 and (rx := globs[0]._match_rx) is not None:
        only = globs[0]
        return lambda rel: rx(rel) is not None if rel.isascii() else only.match(rel)
    return lambda rel: any(glob_match(rel, p) for p in patterns)


def to_rel(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix()


def normalise_rel(path: str) -> str:
    """A user-given relative path as the index stores paths: `/` for `\\`, no leading `/`, no empty or `.`
    segment (`notes//a.md`, `notes/./a.md` and `./notes/a.md` are `notes/a.md`); a trailing `/` (a folder) kept;
    `..` left as written (what it may reach is checked where the path is used)."""
    p = path.replace("\\", "/")
    parts = [s for s in p.split("/") if s not in ("", ".")]
    out = "/".join(parts)
    return out + "/" if out and p.endswith("/") else out


def from_cwd(root: Path, path: str) -> str:
    """A relative path typed in a subfolder of the project (what shell completion gives): its absolute path when
    it names nothing from the root but a file from the current folder, inside the root; else as given (paths are
    read from the root first, as search results give them)."""
    if os.path.isabs(path) or path.startswith("file://") or os.path.lexists(os.path.join(root, normalise_rel(path))):
        return path
    here = Path.cwd() / path
    root_real = Path(os.path.realpath(root))
    if os.path.lexists(here) and root_real in Path(os.path.realpath(here)).parents:
        return str(here)
    return path


def root_relative_prefix(root: Path, prefix: str) -> str | None:
    """A path-prefix filter as a user types it: root-relative, absolute inside the root, `.` (the current folder),
    or a folder of the current one that the root does not have (`from_cwd`). None: the root itself. Raises
    InvalidRequest (`filter.pathPrefix`) for a folder outside the root."""
    prefix = str(Path.cwd()) if prefix.rstrip("/") == "." else from_cwd(root, prefix)
    if not os.path.isabs(prefix):
        if ".." not in prefix.replace("\\", "/").split("/"):
            return prefix
        # (`--path ../` was taken as a prefix no path has: "no indexed file is under that folder", exit 0, where
        # the same folder given absolute is refused; `notes/../chapters` filtered to nothing)
        prefix = os.path.join(root, prefix)
    try:
        rel = Path(prefix).resolve().relative_to(Path(root).resolve()).as_posix()
    except ValueError:
        from .errors import InvalidRequest

        raise InvalidRequest("filter.pathPrefix", f"{prefix} is outside the project root") from None
    return None if rel == "." else rel


def resolve_inside(root: Path, path: str) -> tuple[Path, str]:
    """Resolve a user path (relative or absolute, or file:// URI) to a real file inside root.

    Raises PathOutsideRoot when it escapes (.., absolute elsewhere, symlinks leaving the root). A name that
    does not exist as typed is looked for in the other Unicode normalisation (NFD/NFC)."""
    if path.startswith("file://"):
        from urllib.parse import unquote, urlparse

        path = unquote(urlparse(path).path)
    root_real = Path(os.path.realpath(root))
    candidate = Path(path) if os.path.isabs(path) else root / normalise_rel(path)
    # `privé.md` typed in NFC names the file stored in NFD (as macOS writes it), and back
    if not path.isascii() and not os.path.lexists(candidate):
        for form in ("NFD", "NFC"):
            other = Path(unicodedata.normalize(form, str(candidate)))
            if os.path.lexists(other):
                candidate = other
                break
    real = Path(os.path.realpath(candidate))
    try:
        rel = real.relative_to(root_real).as_posix()
    except ValueError:
        raise PathOutsideRoot("path", f"{path!r} is outside the project root") from None
    return real, rel


def too_broad(root: Path, explicit: bool = False) -> str | None:
    """Why `root` must not be indexed as a project, or None. Never the filesystem root (every markdown file of
    the machine, its index written at `/.saipling`); nor the home folder unless someone chose it: named on the
    command line (`explicit`), or indexed before (it holds `.saipling/`). An app that starts `saipling mcp` from
    `/` or `~`, or an editor opened on them, gets this reason instead of a run over the whole disk."""
    root = root.resolve()
    if root.parent == root:
        return f"{root} is the filesystem root: open or name your project's folder instead"
    try:
        home = Path.home().resolve()
    except (RuntimeError, KeyError, OSError):  # no home (no HOME, no passwd entry)
        return None
    if root == home and not explicit and not (root / ".saipling").is_dir():
        return (
            f"{root} is your home folder: open or name your project's folder instead "
            f"(`saipling index {root}` indexes all of it on purpose)"
        )
    return None

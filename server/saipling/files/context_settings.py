"""The project's `.context_settings.json`: path -> "auto" | "exclude" | "force" (SPEC 8, 9)."""

from __future__ import annotations

import json
import logging
import os
import posixpath
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from ..paths import Glob, glob_matches, nfc, normalise_rel

log = logging.getLogger(__name__)
FILE_NAME = ".context_settings.json"


MODES = ("auto", "exclude", "force")
_STRICTNESS = {"auto": 0, "force": 1, "exclude": 2}  # a path given twice keeps its strictest mode


@dataclass
class ContextSettings:
    """The modes of `.context_settings.json`. `exclude_all`: the file could not be read and this process never read
    it well: every file counts as excluded (fail closed: it could have excluded any of them). `warning` says what
    was wrong with the file, for the `warnings` of every response that applies the settings."""

    modes: dict[str, str] = field(default_factory=dict)
    warning: str | None = None
    exclude_all: bool = False
    # an exclusion (a file or folder, not a glob) also holds for a path spelt in other case (`SECRET/` for
    # `secret/`: one folder on a case-insensitive disk): casefolded key -> its length
    _folded: dict[str, int] | None = field(default=None, init=False, repr=False, compare=False)
    # the glob keys compiled, once: compile_glob's cache holds 256, and a file with more recompiled every glob for
    # every path checked (400 keys: a search 0.2 -> 2.3 s)
    _globs: dict[str, Glob] | None = field(default=None, init=False, repr=False, compare=False)

    def mode_for(self, rel: str) -> str:
        """The mode of a file: an exact entry, else the longest folder or glob entry that matches, else auto.
        Compared in NFC (keys are stored in NFC): `privé.md` typed either way names the file stored either way."""
        rel = nfc(rel)
        if self.exclude_all:
            return "exclude"
        if rel in self.modes:
            return self.modes[rel]
        if self._globs is None:
            self._globs = {key: Glob(key) for key in self.modes if any(c in key for c in "*?[")}
            self._folded = {
                k.casefold(): len(k) for k, m in self.modes.items() if m == "exclude" and k not in self._globs
            }
        globs = self._globs
        best, best_len = "auto", -1
        for key, mode in self.modes.items():
            if len(key) <= best_len:
                continue
            glob = globs.get(key)
            if rel.startswith(key.rstrip("/") + "/") or (glob is not None and glob_matches(glob, rel)):
                best, best_len = mode, len(key)
        if self._folded:
            folded = rel.casefold()
            for key, n in self._folded.items():
                if n > best_len and (folded == key or folded.startswith(key.rstrip("/") + "/")):
                    best, best_len = "exclude", n
        return best

    def excluded(self, paths: list[str]) -> list[str]:
        if self.exclude_all:
            return list(paths)
        return [p for p in paths if self.mode_for(p) == "exclude"] if self.has("exclude") else []

    def forced(self) -> list[str]:
        return [p for p, m in self.modes.items() if m == "force"]

    def has(self, mode: str) -> bool:
        return (self.exclude_all and mode == "exclude") or mode in self.modes.values()

    @property
    def warnings(self) -> list[str]:
        return [self.warning] if self.warning else []

    def excluding_nothing(self, paths: list[str], max_globs: int = 20) -> list[str]:
        """The exclusion keys that no path of `paths` (the indexed files) falls under: a misspelt key protects
        nothing, silently (`{secret}/`, `secrets/` for `secret/`). Files and folders are checked in one pass over the
        paths; globs one by one, the first `max_globs` of them."""
        if self.exclude_all:
            return []
        self.mode_for("")  # (compiles the globs)
        globs = self._globs or {}
        named: set[str] = set()
        for path in paths:
            folded = path.casefold()
            named.add(folded)
            for i, c in enumerate(folded):
                if c == "/":
                    named.add(folded[: i + 1])
        out = []
        checked = 0
        for key, mode in self.modes.items():
            if mode != "exclude":
                continue
            if key in globs:
                checked += 1
                if checked <= max_globs and not any(glob_matches(globs[key], p) for p in paths):
                    out.append(key)
            elif key.casefold() not in named and key.casefold().rstrip("/") + "/" not in named:
                out.append(key)
        return out


_cache: dict[str, tuple[tuple[int, int, int] | None, ContextSettings]] = {}
_last_good: dict[str, dict[str, str]] = {}  # per settings file: the modes of its last reading that parsed


def load_context_settings(root: Path) -> ContextSettings:
    """Read (and cache by mtime, size and inode) the settings file. Fail closed: a file that cannot be read or
    parsed keeps the modes this process last read from it (a long-lived server), plus any `"...": "exclude"` entry
    still legible in it; with none read before, every file is excluded. Either way `warning` says so."""
    path = Path(root) / FILE_NAME
    try:
        st = path.stat()
    except FileNotFoundError:
        if not os.path.lexists(path):
            return ContextSettings()  # no settings file: nothing excluded
        st = None  # a link to nothing: settings that exist but cannot be read
    except OSError:
        st = None  # (a link loop, a folder that cannot be searched)
    key = str(path)
    stamp = (st.st_mtime_ns, st.st_size, st.st_ino) if st is not None else None  # (None: cannot be opened)
    hit = _cache.get(key)
    if hit and hit[0] == stamp:
        return hit[1]
    text: str | None = None
    try:
        if st is None:
            raise OSError("it cannot be opened")
        if not stat.S_ISREG(st.st_mode):  # (a FIFO here blocked every search)
            raise ValueError("not a regular file")
        text = path.read_text(encoding="utf-8-sig")
        modes, notes = _parse(text, Path(root))
        _last_good[key] = modes
        cs = ContextSettings(dict(modes), "; ".join(f"{FILE_NAME}: {n}" for n in notes) or None)
    except (OSError, ValueError, RecursionError) as exc:
        cs = _unreadable(key, exc, text)
    if cs.warning:
        log.warning("%s", cs.warning)
    _cache[key] = (stamp, cs)
    return cs


class _Pairs(list):  # type: ignore[type-arg]
    """A JSON object as its (key, value) pairs, in order, duplicates kept."""


def _key(path: str) -> str | None:
    """A settings key as the paths it names are stored: `normalise_rel`, NFC, and `..` resolved (`notes/../a.md`
    names `a.md`: an exclusion must not miss its file for its spelling); None for a key outside the project."""
    rel = nfc(normalise_rel(path))
    if "../" in f"/{rel}":
        rel = posixpath.normpath(rel) + ("/" if rel.endswith("/") else "")
        if rel == ".." or rel.startswith("../"):
            return None
    return rel


def _forms(key: str, root: Path | None) -> tuple[list[str], str | None]:
    """The paths a settings key names (`_key` of each; an empty list: outside the project) and a note on how it was
    read. Spaces around a key are a slip (`"secret/ "`): it names the path without them. An absolute path inside
    the root names its relative path (any other leading `/` is the root's, as before). An exclusion keeps the key
    as written too (`_parse`; fail closed: a folder whose name ends in a space, a file whose name holds a
    backslash, stay excluded)."""
    note = None
    text = key
    if text.strip() != text:
        text = text.strip()
        note = f"{json.dumps(key)} has spaces around it (read as {json.dumps(text)})"
    if root is not None and os.path.isabs(text) and (inside := _inside(root, text)) is not None:
        note = f"{json.dumps(key)} is an absolute path (read as {json.dumps(inside or './')})"
        text = inside
    rel = _key(text)  # (another leading `/`: the root's, as gitignore reads it)
    return ([] if rel is None else [rel]), note


def _inside(root: Path, path: str) -> str | None:
    """An absolute path's path relative to the root ("" for the root itself), or None outside it."""
    for base in dict.fromkeys((str(root), os.path.realpath(root))):
        for p in dict.fromkeys((path, os.path.realpath(path))):
            rel = os.path.relpath(p, base) if os.path.isabs(p) else None
            if rel is not None and rel != ".." and not rel.startswith(".." + os.sep):
                rel = "" if rel == "." else rel
                return rel + ("/" if path.endswith("/") and rel else "")
    return None


def _parse(text: str, root: Path | None = None) -> tuple[dict[str, str], list[str]]:
    """The modes of a settings file's text, and notes on entries read in the strict way (an unknown mode is
    `exclude`; a path given twice keeps its strictest mode; see `_forms`). ValueError when it is not a JSON
    object."""
    raw = json.loads(text, object_pairs_hook=_Pairs)
    if not isinstance(raw, _Pairs):
        raise ValueError("expected a JSON object of path -> mode")
    modes: dict[str, str] = {}
    notes: list[str] = []
    for k, v in raw:
        mode = v.strip().lower() if isinstance(v, str) else None
        if mode not in MODES:
            shown = json.dumps(v) if not isinstance(v, _Pairs) else "an object"
            notes.append(f"{k} has an unknown mode {shown:.40} (treated as exclude)")
            mode = "exclude"
        rels, note = _forms(str(k), root)
        if not rels:
            notes.append(f"{k} names a path outside the project (ignored)")
            continue
        if note:
            notes.append(note)
        if mode == "exclude":  # (the key as written, too: fail closed)
            as_written = nfc(str(k)).lstrip("/")
            if as_written and as_written not in rels and "../" not in f"/{as_written}":
                rels.append(as_written)
        for i, rel in enumerate(rels):
            if rel in modes and modes[rel] != mode:
                if i == 0:
                    notes.append(f"{k} is given twice (the stricter mode applies)")
                modes[rel] = max(mode, modes[rel], key=_STRICTNESS.__getitem__)
            else:
                modes[rel] = mode
    return modes, notes


# `"path": "exclude"` as JSON writes it, found in a file that does not parse as a whole
_EXCLUDE_ENTRY = re.compile(r'"((?:[^"\\\n]|\\.)*)"\s*:\s*"\s*(?i:exclude)\s*"')


def _unreadable(key: str, exc: BaseException, text: str | None) -> ContextSettings:
    """Settings for a file that cannot be read or parsed (fail closed)."""
    why = f"{FILE_NAME} is invalid ({exc})"
    last = _last_good.get(key)
    if last is None:
        return ContextSettings(
            warning=f"{why}; every file is treated as excluded until it is fixed (the author's --all-files or "
            "respectContextSettings: false ignores it; an agent's tools never do)",
            exclude_all=True,
        )
    modes = dict(last)
    for m in _EXCLUDE_ENTRY.finditer(text or ""):  # exclusions added in the broken edit: kept too
        try:
            rel = _key(json.loads(f'"{m.group(1)}"'))
        except ValueError:
            continue
        if rel is not None:
            modes[rel] = "exclude"
    return ContextSettings(modes, f"{why}; the settings last read from it still apply until it is fixed")

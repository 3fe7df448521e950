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
        globs = self._globs
        best, best_len = "auto", -1
        for key, mode in self.modes.items():
            if len(key) <= best_len:
                continue
            glob = globs.get(key)
            if rel.startswith(key.rstrip("/") + "/") or (glob is not None and glob_matches(glob, rel)):
                best, best_len = mode, len(key)
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
        modes, notes = _parse(text)
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


def _parse(text: str) -> tuple[dict[str, str], list[str]]:
    """The modes of a settings file's text, and notes on entries read in the strict way (an unknown mode is
    `exclude`; a path given twice keeps its strictest mode). ValueError when it is not a JSON object."""
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
        rel = _key(str(k))
        if rel is None:
            notes.append(f"{k} names a path outside the project (ignored)")
            continue
        if rel in modes and modes[rel] != mode:
            notes.append(f"{k} is given twice (the stricter mode applies)")
            mode = max(mode, modes[rel], key=_STRICTNESS.__getitem__)
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

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
from typing import Any

from ..config.settings import INDEX_DIR
from ..paths import Glob, glob_matches, nfc, normalise_rel

log = logging.getLogger(__name__)
FILE_NAME = ".context_settings.json"


MODES = ("auto", "exclude", "force")
ANYWHERE = "\0anywhere:"  # + a name: the `modes` key of a name excluded at any depth (no path can start so)
_STRICTNESS = {"auto": 0, "force": 1, "exclude": 2}  # a path given twice keeps its strictest mode


@dataclass
class ContextSettings:
    """The modes of `.context_settings.json`. `exclude_all`: the file could not be read and this process never read
    it well: every file counts as excluded (fail closed: it could have excluded any of them). `warning` says what
    was wrong with the file, for the `warnings` of every response that applies the settings. `sources`: each key as
    written -> the keys of `modes` it became (`_parse`; an exclusion may name a path in more than one way)."""

    modes: dict[str, str] = field(default_factory=dict)
    warning: str | None = None
    exclude_all: bool = False
    sources: dict[str, list[str]] = field(default_factory=dict)
    # the exclusions of the projects this one lies inside: (this root's path from theirs + "/", their settings)
    outer: tuple[tuple[str, ContextSettings], ...] = ()
    # the glob keys compiled, once: compile_glob's cache holds 256, and a file with more recompiled every glob for
    # every path checked (400 keys: a search 0.2 -> 2.3 s)
    _globs: dict[str, Glob] = field(default_factory=dict, init=False, repr=False, compare=False)
    # an exclusion (a file or folder, not a glob) also holds for a path spelt in other case (`SECRET/` for
    # `secret/`: one folder on a case-insensitive disk): casefolded key -> its length
    _folded: dict[str, int] = field(default_factory=dict, init=False, repr=False, compare=False)

    # names excluded anywhere (`Bestiary`: a folder or file of that name at any depth; `ANYWHERE` keys), casefolded
    _anywhere: frozenset[str] = field(default_factory=frozenset, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:  # (built once, before the object is shared between threads)
        plain = {k: m for k, m in self.modes.items() if not k.startswith(ANYWHERE)}
        self._globs = {key: Glob(key) for key in plain if any(c in key for c in "*?[")}
        self._folded = {k.casefold(): len(k) for k, m in plain.items() if m == "exclude" and k not in self._globs}
        self._anywhere = frozenset(
            k[len(ANYWHERE) :].casefold() for k, m in self.modes.items() if k.startswith(ANYWHERE) and m == "exclude"
        )

    @staticmethod
    def _under(rel: str, key: str) -> bool:
        """`rel` is the file `key` names or under the folder it names (`""`: the root, every file)."""
        return not key or rel.startswith(key.rstrip("/") + "/")

    def mode_for(self, rel: str) -> str:
        """The mode of a file: an exact entry, else the longest folder or glob entry that matches, else auto.
        Compared in NFC (keys are stored in NFC): `privé.md` typed either way names the file stored either way."""
        rel = nfc(rel)
        if self.exclude_all:
            return "exclude"
        if any(o.excludes(prefix + rel) for prefix, o in self.outer):
            return "exclude"
        if rel in self.modes:
            return self.modes[rel]
        # the longest match wins (a name anywhere counts the path up to it: `Compendium/13A/Bestiary` beats the
        # folder key `Compendium/13A/`); at equal length the stricter mode, whatever the keys' order
        globs = self._globs
        best, rank = "auto", (-1, -1)
        for key, mode in self.modes.items():
            if len(key) < rank[0] or key.startswith(ANYWHERE):
                continue
            glob = globs.get(key)
            if self._under(rel, key) or (glob is not None and glob_matches(glob, rel)):
                if (len(key), _STRICTNESS[mode]) > rank:
                    best, rank = mode, (len(key), _STRICTNESS[mode])
        folded = rel.casefold()
        exclude = (_STRICTNESS["exclude"],)
        for key, n in self._folded.items():
            if (n, *exclude) > rank and (folded == key or self._under(folded, key)):
                best, rank = "exclude", (n, *exclude)
        if self._anywhere:
            at = 0
            for segment in folded.split("/"):
                at += len(segment)
                if segment in self._anywhere and (at, *exclude) > rank:
                    best, rank = "exclude", (at, *exclude)
                at += 1
        return best

    def excludes(self, rel: str) -> bool:
        """Whether the file at `rel` is excluded (every file, when the settings cannot be read)."""
        return self.exclude_all or (self.has("exclude") and self.mode_for(rel) == "exclude")

    def excluded(self, paths: list[str]) -> list[str]:
        if self.exclude_all:
            return list(paths)
        return [p for p in paths if self.mode_for(p) == "exclude"] if self.has("exclude") else []

    def forced(self) -> list[str]:
        return [p for p, m in self.modes.items() if m == "force"]

    def has(self, mode: str) -> bool:
        if mode == "exclude" and any(o.has("exclude") for _, o in self.outer):
            return True
        return (self.exclude_all and mode == "exclude") or mode in self.modes.values()

    @property
    def warnings(self) -> list[str]:
        return [self.warning] if self.warning else []

    def excluding_nothing(self, paths: list[str], max_globs: int = 20) -> list[str]:
        """The exclusion keys (as written) under none of whose forms any path of `paths` (the indexed files) falls:
        a misspelt key protects nothing, silently (`{secret}/`, `secrets/` for `secret/`). Files and folders are
        checked in one pass over the paths; globs one by one, the first `max_globs` of them."""
        if self.exclude_all or not paths:
            return []
        named: set[str] = {""}  # every path and folder (`a/`, `a/b/`), casefolded
        segments: set[str] = set()  # every name in them, for the names excluded anywhere
        for path in paths:
            parts = path.casefold().split("/")
            segments.update(parts)
            for i in range(1, len(parts)):
                named.add("/".join(parts[:i]) + "/")
            named.add("/".join(parts))
        checked = 0

        def matches(key: str) -> bool:
            nonlocal checked
            if key.startswith(ANYWHERE):
                return key[len(ANYWHERE) :].casefold() in segments
            glob = self._globs.get(key)
            if glob is None:
                k = key.casefold()
                return k in named or k.rstrip("/") + "/" in named
            checked += 1
            return checked > max_globs or any(glob_matches(glob, p) for p in paths)  # (past the limit: not said)

        sources = self.sources or {k: [k] for k in self.modes}
        return [
            written
            for written, keys in sources.items()
            if any(self.modes.get(k) == "exclude" for k in keys) and not any(matches(k) for k in keys)
        ]


_cache: dict[str, tuple[tuple[int, ...] | None, ContextSettings]] = {}
_MISSING = (-1,)  # the stamp of a settings file that does not exist
_last_good: dict[str, _Parsed] = {}  # per settings file: its last reading that parsed


# per root: (its settings and the outer ones it was made of, held: an id could be a freed object's; the settings)
_combined: dict[str, tuple[tuple[ContextSettings, ...], ContextSettings]] = {}


_spellings: dict[str, tuple[Path, ...]] = {}  # a resolved root -> the paths it was opened by (links on the way)


def remember_spelling(resolved: Path, given: Path) -> None:
    """`given` (absolute, not resolved) names the project at `resolved`: the folders above it count for
    `load_context_settings` too (a project opened as `PROJECT/notes`, where `notes` links to a folder elsewhere,
    lies inside PROJECT for its author)."""
    given = Path(os.path.abspath(given))
    if given != resolved:
        known = _spellings.get(str(resolved), ())
        if given not in known:
            _spellings[str(resolved)] = (*known, given)


def load_context_settings(root: Path) -> ContextSettings:
    """The project's settings (`_load`), with the exclusions of every indexed project it lies inside (a folder
    above it holding `.saipling/`): `saipling mcp PROJECT/notes` made an index of its own for `notes/` and read
    nothing of the project's `.context_settings.json`, so the diary it excludes was an agent's to read. Only their
    exclusions apply here (and their failing closed when they cannot be read): a folder above never shows more."""
    cs = _load(root)
    outer = []
    here = Path(root)
    # (the folders above the root as it was given too: `PROJECT/notes` may be a link to a folder elsewhere, and
    # the project opens it resolved, outside PROJECT)
    for spelt in (here, *_spellings.get(str(here), ())):
        for above in spelt.parents:
            # (lexists: a settings file that is a link to nothing fails closed in `_load`, it is not absent)
            if os.path.lexists(above / FILE_NAME) and os.path.isdir(above / INDEX_DIR):
                found = _load(above)
                if found.has("exclude"):
                    outer.append((spelt.relative_to(above).as_posix() + "/", found))
    if not outer:
        return cs
    key = (cs, *(o for _, o in outer))
    hit = _combined.get(str(here))
    if hit is None or len(hit[0]) != len(key) or any(a is not b for a, b in zip(hit[0], key, strict=True)):
        notes = [w for w in (cs.warning, *(o.warning for _, o in outer)) if w]
        combined = ContextSettings(
            dict(cs.modes),
            "; ".join(notes) or None,
            cs.exclude_all or any(o.exclude_all for _, o in outer),
            dict(cs.sources),
            tuple(outer),
        )
        hit = _combined[str(here)] = (key, combined)
    return hit[1]


def _load(root: Path) -> ContextSettings:
    """Read (and cache by mtime, size and inode) the settings file. Fail closed: a file that cannot be read or
    parsed keeps the modes this process last read from it (a long-lived server), plus any `"...": "exclude"` entry
    still legible in it; with none read before, every file is excluded. Either way `warning` says so."""
    path = Path(root) / FILE_NAME
    try:
        st = path.stat()
    except FileNotFoundError:
        if not os.path.lexists(path):
            # no settings file: nothing excluded; the same object each time (the caches keyed by the settings
            # object, the entity index, mentions, status's report, lasted a call when an outer project's applied)
            hit = _cache.get(str(path))
            if hit is not None and hit[0] == _MISSING:
                return hit[1]
            _cache[str(path)] = (_MISSING, ContextSettings())
            return _cache[str(path)][1]
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
        parsed = _parse(text, Path(root))
        _last_good[key] = parsed
        notes = "; ".join(f"{FILE_NAME}: {n}" for n in parsed.notes) or None
        cs = ContextSettings(dict(parsed.modes), notes, sources=dict(parsed.sources))
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


def _exclusion_forms(key: str, root: Path | None) -> tuple[list[str], str | None]:
    """The paths an `exclude` key names (an empty list: outside the project) and a note on how it was read,
    leniently, as an author a little off meant it (fail closed): spaces around it are a slip (`"secret/ "` names
    `secret/`); an absolute path inside the root names its path from the root (any other leading `/` is the root's,
    as gitignore reads it); and the key as written names a path too (a folder whose name ends in a space, a file
    whose name holds a backslash). Keys of other modes are read as written (`_key`): reading them leniently would
    take a file out of an exclusion."""
    note = None
    text = key
    if text.strip() != text:
        text = text.strip()
        note = f"{json.dumps(key)} has spaces around it (read as {json.dumps(text)})"
    if root is not None and os.path.isabs(text) and (inside := _inside(root, text)) is not None:
        note = f"{json.dumps(key)} is an absolute path (read as {json.dumps(inside or './')})"
        text = inside
    rel = _key(text)
    if rel is None:
        return [], None
    rels = [rel]
    as_written = nfc(key).lstrip("/")
    if as_written and as_written not in rels and "../" not in f"/{as_written}":
        rels.append(as_written)
    if rel and "/" not in rel.rstrip("/") and not key.strip().startswith("/"):
        # a name without `/` is a name anywhere, as in every glob (configuration.md): `Bestiary` excluded nothing
        # in `Compendium/13A/Bestiary/` (`/Bestiary` keeps to the root's, as gitignore reads it)
        rels.append(ANYWHERE + rel.rstrip("/"))
    return rels, note


def _inside(root: Path, path: str) -> str | None:
    """An absolute path's path relative to the root ("" for the root itself), or None outside it."""
    for base in dict.fromkeys((str(root), os.path.realpath(root))):
        for p in dict.fromkeys((path, os.path.realpath(path))):
            rel = os.path.relpath(p, base) if os.path.isabs(p) else None
            if rel is not None and rel != ".." and not rel.startswith(".." + os.sep):
                rel = "" if rel == "." else rel
                return rel + ("/" if path.endswith("/") and rel else "")
    return None


@dataclass
class _Parsed:
    modes: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    sources: dict[str, list[str]] = field(default_factory=dict)  # key as written -> its keys in `modes`

    def add(self, key: str, mode: str, root: Path | None) -> None:
        """One entry (`mode` known good); a key that names the whole project excludes every file, and is
        ignored in another mode."""
        if mode == "exclude":
            rels, note = _exclusion_forms(key, root)
        else:
            rel = _key(key)
            rels, note = ([] if rel is None else [rel]), None
            if rel == "":
                self.notes.append(f"{key} names the whole project: only an exclusion may (ignored)")
                return
        if not rels:
            self.notes.append(f"{key} names a path outside the project (ignored)")
            return
        if note:
            self.notes.append(note)
        for i, rel in enumerate(rels):
            if rel in self.modes and self.modes[rel] != mode:
                if i == 0:
                    self.notes.append(f"{key} is given twice (the stricter mode applies)")
                self.modes[rel] = max(mode, self.modes[rel], key=_STRICTNESS.__getitem__)
            else:
                self.modes[rel] = mode
        self.sources.setdefault(key, [])
        self.sources[key] += [r for r in rels if r not in self.sources[key]]


def _named(value: Any, depth: int = 0) -> list[str]:
    """Every string a JSON value holds, an object's keys included (`{"paths": ["secret/"]}` names `paths` and
    `secret/`: excluding both is the closed side); deep nesting is cut at 50 levels."""
    if isinstance(value, str):
        return [value]
    if depth > 50 or not isinstance(value, list):
        return []
    if isinstance(value, _Pairs):
        return [x for key, inner in value for x in (str(key), *_named(inner, depth + 1))]
    return [x for inner in value for x in _named(inner, depth + 1)]


def _parse(text: str, root: Path | None = None) -> _Parsed:
    """The modes of a settings file's text, and notes on entries read in the strict way (an unknown mode is
    `exclude`; a path given twice keeps its strictest mode; see `_exclusion_forms`). ValueError when it is not a
    JSON object."""
    raw = json.loads(text, object_pairs_hook=_Pairs)
    if not isinstance(raw, _Pairs):
        raise ValueError("expected a JSON object of path -> mode")
    parsed = _Parsed()
    for k, v in raw:
        mode = v.strip().lower() if isinstance(v, str) else None
        if mode not in MODES:
            shown = json.dumps(v) if not isinstance(v, _Pairs) else "an object"
            parsed.notes.append(f"{k} has an unknown mode {shown:.40} (treated as exclude)")
            mode = "exclude"
        parsed.add(str(k), mode, root)
        # other shapes name paths too (`{"exclude": ["secret/"]}`, `{"exclude": "secret/"}`, `{"exclude":
        # {"secret/": "exclude"}}`): each path they name is excluded, whatever the key or inner mode (fail closed)
        if isinstance(v, list):  # (objects and lists, at any depth: every key and string they hold)
            listed = [x for x in _named(v) if x.strip() and x.strip().lower() not in MODES]
        elif mode == "exclude" and isinstance(v, str) and str(k).strip().lower() in MODES:
            listed = [v] if v.strip().lower() not in MODES else []
        else:
            listed = []
        if listed:
            parsed.notes.append(f'{k} names paths: each is treated as excluded (write "path": "exclude")')
        for path in listed:
            parsed.add(path, "exclude", root)
    return parsed


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
    parsed = _Parsed(dict(last.modes), [], {k: list(v) for k, v in last.sources.items()})
    for m in _EXCLUDE_ENTRY.finditer(text or ""):  # exclusions added in the broken edit: kept too, read as any
        try:
            written = json.loads(f'"{m.group(1)}"')
        except ValueError:
            continue
        parsed.add(written, "exclude", Path(key).parent)
    return ContextSettings(
        parsed.modes,
        f"{why}; the settings last read from it still apply until it is fixed",
        sources=parsed.sources,
    )

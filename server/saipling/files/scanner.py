"""Finding the files to index (SPEC 2): include/exclude globs and every skip rule."""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from ..config.settings import INDEX_DIR, Settings
from ..paths import any_match, any_matcher

log = logging.getLogger(__name__)

SKIP_DIRS = {"node_modules"}
VENV_MARKER = "pyvenv.cfg"  # a Python virtual environment's folder holds it: its packages' READMEs are no notes


def foreign_folder(abs_dir: str | Path) -> str | None:
    """Why a folder inside the project is not part of it, else None: it is a Python virtual environment (a
    project's `.venv` is hidden anyway; `venv/` and `env/` are not). A folder with an index of its own is part of
    the project: the enclosing index takes a nested folder over (docs/lsp.md, multi-root)."""
    if os.path.isfile(os.path.join(abs_dir, VENV_MARKER)):
        return "a Python environment"
    return None


DEFAULT_CORPUS = "content"  # the corpus of a file no `corpora` pattern names


@dataclass
class ScanEntry:
    rel: str
    path: str | Path  # the file's absolute path; the scan keeps os.scandir's string (abs_path makes the Path)
    mtime_ns: int
    size: int
    corpus: str = DEFAULT_CORPUS

    @property
    def abs_path(self) -> Path:
        """The file's absolute path as a Path, made when first asked: a one-shot search's check of every file for
        changes asks for none (a Path per file was ~10 us, ~50 ms of 5,126 files' ~100 ms scan, row S29)."""
        if not isinstance(self.path, Path):
            self.path = Path(self.path)
        return self.path


@dataclass
class ScanResult:
    entries: list[ScanEntry] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (relative path, reason)


def include_patterns(settings: Settings) -> list[str]:
    pats = list(settings.include)
    if settings.include_json and "**/*.json" not in pats:
        pats.append("**/*.json")
    return pats


def corpus_for(rel: str, settings: Settings) -> str:
    for name, patterns in settings.corpora.items():
        if any_match(rel, list(patterns)):
            return name
    return DEFAULT_CORPUS


def utf8_name(rel: str) -> bool:
    """False for a name holding bytes that are not UTF-8 (surrogate-escaped by os.fsdecode): never stored."""
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown_name(rel: str) -> str:
    """A path safe to print and store in reports: undecodable bytes shown as \\xNN escapes."""
    return rel.encode("utf-8", "backslashreplace").decode("utf-8")


def symlink_reason(root_real: str, rel: str, real: str) -> str | None:
    """The skip reason of `rel` when it reaches `real` (inside the root) through a symlink, else None.

    Content reached through a link that stays inside the root is indexed once, under its real path: the
    link would index it twice (or only under the link's name, while edits arrive for the real one), and a
    link to an excluded file would bypass the exclusion.
    """
    expected = os.path.normpath(os.path.join(root_real, *rel.split("/")))
    if real == expected:
        return None
    target = Path(os.path.relpath(real, root_real)).as_posix()
    return f"symlink to {target} (indexed under its real path)"


def is_indexable(root: Path, rel: str, settings: Settings) -> str | None:
    """None if `rel` would be indexed, else the reason it is skipped (the file itself is not read: only the
    folders above it are looked at, for `foreign_folder`)."""
    parts = rel.split("/")
    if any(p.startswith(".") for p in parts):
        return "hidden"
    if any(p in SKIP_DIRS for p in parts[:-1]):
        return "node_modules"
    for n in range(1, len(parts)):  # (a few stats: the folders above the file)
        if reason := foreign_folder(os.path.join(root, *parts[:n])):
            return reason
    if not any_match(rel, include_patterns(settings)):
        return "not included"
    if settings.exclude and any_match(rel, settings.exclude):
        return "excluded by config"
    return None


def scan(root: Path, settings: Settings) -> ScanResult:
    """Walk the root. Symlinks are never followed: one leaving the root is skipped, and so is one whose
    target is inside it (that content is indexed under its real path)."""
    root = Path(root)
    root_real = os.path.realpath(root)
    result = ScanResult()
    includes = include_patterns(settings)
    included, excluded = any_matcher(includes), any_matcher(settings.exclude)
    corpora = bool(settings.corpora)
    stack = [("", str(root), root_real)]
    seen_dirs = {root_real}
    while stack:
        rel_dir, abs_dir, real_dir = stack.pop()
        try:
            it = list(os.scandir(abs_dir))
        except OSError as exc:
            result.skipped.append((rel_dir or ".", f"unreadable folder ({exc.strerror})"))
            continue
        for entry in sorted(it, key=lambda e: e.name):
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            # bytes that are not UTF-8 (surrogate-escaped): cannot be stored (an ASCII name is UTF-8: no encode)
            if not entry.name.isascii() and not utf8_name(entry.name):
                shown = shown_name(rel)
                result.skipped.append((shown, "file name is not valid UTF-8"))
                log.warning("skipping %s: file name is not valid UTF-8", shown)
                continue
            if entry.name.startswith("."):
                if entry.name != INDEX_DIR:
                    result.skipped.append((rel, "hidden"))
                continue
            try:
                if entry.is_symlink():
                    real = os.path.realpath(entry.path)
                    if real != root_real and not real.startswith(root_real + os.sep):
                        result.skipped.append((rel, "symlink leaves the project root"))
                        log.info("skipping %s: symlink leaves the project root", rel)
                        continue
                    if os.path.exists(real):  # (a dangling link is reported unreadable below)
                        reason = symlink_reason(root_real, rel, real) or "symlink"
                        result.skipped.append((rel, reason))
                        log.info("skipping %s: %s", rel, reason)
                        continue
                is_dir = entry.is_dir()
            except OSError as exc:
                result.skipped.append((rel, f"unreadable ({exc.strerror})"))
                continue
            if is_dir:
                if entry.name in SKIP_DIRS:
                    result.skipped.append((rel, "node_modules"))
                    continue
                if reason := foreign_folder(entry.path):
                    result.skipped.append((rel, reason))
                    log.info("skipping %s: %s", rel, reason)
                    continue
                # (not a symlink, checked above: its real path is its parent's plus its name, no syscall)
                real = os.path.join(real_dir, entry.name)
                if real in seen_dirs:
                    continue  # symlink loop
                seen_dirs.add(real)
                stack.append((rel, entry.path, real))
                continue
            if not included(rel):
                json_off = rel.endswith(".json") and not settings.include_json
                reason = "config file (includeJson is off)" if json_off else "not included"
                result.skipped.append((rel, reason))
                continue
            if excluded(rel):
                result.skipped.append((rel, "excluded by config"))
                continue
            try:
                st = entry.stat()
            except OSError as exc:
                result.skipped.append((rel, f"unreadable ({exc.strerror})"))
                continue
            if not stat.S_ISREG(st.st_mode):  # a FIFO, socket or device named *.md: reading it would block
                result.skipped.append((rel, "not a regular file"))
                log.warning("skipping %s: not a regular file", rel)
                continue
            if st.st_size > settings.max_file_bytes:
                result.skipped.append((rel, f"too large ({st.st_size} bytes > maxFileBytes {settings.max_file_bytes})"))
                log.warning("skipping %s: %d bytes is over maxFileBytes", rel, st.st_size)
                continue
            corpus = corpus_for(rel, settings) if corpora else DEFAULT_CORPUS
            result.entries.append(ScanEntry(rel, entry.path, st.st_mtime_ns, st.st_size, corpus))
    result.entries.sort(key=lambda e: e.rel)
    return result

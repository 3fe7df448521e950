"""The project's `.context_settings.json`: path -> "auto" | "exclude" | "force" (SPEC 8, 9)."""

from __future__ import annotations

import json
import logging
import stat
from dataclasses import dataclass, field
from pathlib import Path

from .paths import glob_match, nfc, normalise_rel

log = logging.getLogger(__name__)
FILE_NAME = ".context_settings.json"


@dataclass
class ContextSettings:
    modes: dict[str, str] = field(default_factory=dict)
    warning: str | None = None

    def mode_for(self, rel: str) -> str:
        """The mode of a file: an exact entry, else the longest folder or glob entry that matches, else auto.
        Compared in NFC (keys are stored in NFC): `privé.md` typed either way names the file stored either way."""
        rel = nfc(rel)
        if rel in self.modes:
            return self.modes[rel]
        best, best_len = "auto", -1
        for key, mode in self.modes.items():
            folder = key.rstrip("/") + "/"
            if (rel.startswith(folder) or (any(c in key for c in "*?[") and glob_match(rel, key))) and len(
                key
            ) > best_len:
                best, best_len = mode, len(key)
        return best

    def excluded(self, paths: list[str]) -> list[str]:
        return [p for p in paths if self.mode_for(p) == "exclude"] if self.has("exclude") else []

    def forced(self) -> list[str]:
        return [p for p, m in self.modes.items() if m == "force"]

    def has(self, mode: str) -> bool:
        return mode in self.modes.values()


_cache: dict[str, tuple[float, int, ContextSettings]] = {}


def load_context_settings(root: Path) -> ContextSettings:
    """Read (and cache by mtime) the settings file; a malformed file means no settings plus a warning."""
    path = Path(root) / FILE_NAME
    try:
        st = path.stat()
    except OSError:
        return ContextSettings()
    key = str(path)
    hit = _cache.get(key)
    if hit and hit[0] == st.st_mtime and hit[1] == st.st_size:
        return hit[2]
    try:
        if not stat.S_ISREG(st.st_mode):  # (a FIFO here blocked every search)
            raise ValueError("not a regular file")
        raw = json.loads(path.read_text(encoding="utf-8-sig"))
        if not isinstance(raw, dict):
            raise ValueError("expected a JSON object of path -> mode")
        modes = {}
        for k, v in raw.items():
            mode = str(v).lower()
            if mode not in {"auto", "exclude", "force"}:
                log.warning("%s: %s has unknown mode %r (treated as auto)", FILE_NAME, k, v)
                mode = "auto"
            modes[nfc(normalise_rel(str(k)))] = mode
        cs = ContextSettings(modes)
    except (OSError, ValueError, RecursionError) as exc:
        cs = ContextSettings(warning=f"{FILE_NAME} is invalid ({exc}); ignored")
        log.warning("%s", cs.warning)
    _cache[key] = (st.st_mtime, st.st_size, cs)
    return cs

"""Skill TOML configs: the `[context.vector_search]` block (SPEC 9)."""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InvalidRequest
from .settings import MAX_CHAPTER, did_you_mean

SEARCH_MODES = ("auto", "always", "never")
# Passages scoring below this are not given to an agent (retrieval/search.py's 0..1 score; see README "Search").
MIN_RELEVANCE_DEFAULT = 0.5


@dataclass
class VectorSearchConfig:
    enabled: bool = False
    mode: str = "auto"
    max_results: int = 5
    max_search_tokens: int = 15000
    filter_entity_types: list[str] = field(default_factory=list)
    min_relevance: float = MIN_RELEVANCE_DEFAULT
    known_by: str | None = None  # only what this entity knows (scenes it is the pov of or mentioned in)
    max_chapter: int | None = None  # nothing after this chapter


def parse_block(block: Mapping[str, Any], field_prefix: str) -> VectorSearchConfig:
    """Validate a `[context.vector_search]` table (snake_case keys; camelCase accepted). A key that is no setting
    is refused, naming it: ignored, a typo (`max_chapters = 8`) switched a skill's spoiler horizon off unseen."""
    cfg = VectorSearchConfig()
    aliases = {
        "maxResults": "max_results",
        "maxSearchTokens": "max_search_tokens",
        "filterEntityTypes": "filter_entity_types",
        "minRelevance": "min_relevance",
        "knownBy": "known_by",
        "maxChapter": "max_chapter",
    }
    for raw_key, value in block.items():
        key = aliases.get(raw_key, raw_key)
        name = f"{field_prefix}.{raw_key}"
        if key == "enabled":
            if not isinstance(value, bool):
                raise InvalidRequest(name, "must be a boolean")
            cfg.enabled = value
        elif key == "mode":
            if value not in SEARCH_MODES:
                raise InvalidRequest(name, f"must be one of {', '.join(SEARCH_MODES)}")
            cfg.mode = value
        elif key in ("max_results", "max_search_tokens"):
            if isinstance(value, bool) or not isinstance(value, int) or value < (1 if key == "max_results" else 0):
                raise InvalidRequest(name, "must be a positive integer")
            setattr(cfg, key, min(value, 100) if key == "max_results" else value)
        elif key == "min_relevance":
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
                raise InvalidRequest(name, "must be a number between 0 and 1")
            cfg.min_relevance = float(value)
        elif key == "known_by":
            if not isinstance(value, str) or not value.strip():
                raise InvalidRequest(name, "must be an entity's name")
            cfg.known_by = value
        elif key == "max_chapter":
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_CHAPTER:
                raise InvalidRequest(name, f"must be a chapter number (0 to {MAX_CHAPTER})")
            cfg.max_chapter = value
        elif key == "filter_entity_types":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise InvalidRequest(name, "must be a list of strings")
            if len(value) > MAX_FILTER_TYPES:  # (each one a SQL variable: 100,000 failed inside SQLite)
                raise InvalidRequest(name, f"lists {len(value)} types; at most {MAX_FILTER_TYPES}")
            cfg.filter_entity_types = list(value)
        else:  # (ignored before: `{"maxResult": 2}` or `{"bogus": 1}` ran with the defaults, saying nothing)
            hint = did_you_mean(str(raw_key), [*SKILL_KEYS, *aliases]) or f" (one of {', '.join(SKILL_KEYS)})"
            raise InvalidRequest(name, f"is not a setting of [context.vector_search]{hint}")
    return cfg


SKILL_KEYS = (
    "enabled",
    "mode",
    "max_results",
    "max_search_tokens",
    "min_relevance",
    "filter_entity_types",
    "known_by",
    "max_chapter",
)


MAX_SKILL_NAME = 120
MAX_FILTER_TYPES = 1000  # (as a search request's filter.entityTypes: retrieval/requests.py MAX_TYPES)


def load_skill(skills_dir: Path, name: str, root: Path | None = None) -> VectorSearchConfig:
    """Read `<skills_dir>/<name>.toml`; InvalidRequest('skill') if missing or malformed. With the project's `root`,
    the skill file must be inside it, links followed (a `skillsDir` set to a folder elsewhere, or a link out of
    it, reads nothing there: an agent names the skill, and what a file outside says, even in a parse error, is
    not the project's to show)."""
    if not re.fullmatch(r"[\w.-]+", name) or name.startswith(".") or len(name) > MAX_SKILL_NAME:
        raise InvalidRequest("skill", f"{name[:MAX_SKILL_NAME]!r} is not a skill name")
    path = skills_dir / (name if name.endswith(".toml") else f"{name}.toml")
    # (the folder as the project names it: an agent is not told where the project lives on this machine)
    inside = root is not None and skills_dir.is_relative_to(root)
    shown = skills_dir.relative_to(root).as_posix() if inside and root is not None else "the skills folder"
    try:
        if root is not None and not Path(os.path.realpath(path)).is_relative_to(os.path.realpath(root)):
            raise InvalidRequest("skill", "skills are read from a folder inside the project")
        found = path.is_file()
    except OSError as exc:  # (a name the file system refuses)
        raise InvalidRequest("skill", f"no skill config {path.name[:80]} in {shown} ({exc.strerror})") from None
    if not found:
        raise InvalidRequest("skill", f"no skill config {path.name} in {shown}")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError) as exc:  # (nested too deep)
        raise InvalidRequest("skill", f"{path.name} is not valid TOML: {exc or type(exc).__name__}") from None
    context = data.get("context", {})
    block = context.get("vector_search", {}) if isinstance(context, Mapping) else None
    if not isinstance(block, Mapping):
        raise InvalidRequest("skill", f"{path.name}: [context.vector_search] must be a table")
    return parse_block(block, f"skill {path.name}: context.vector_search")

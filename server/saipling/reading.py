"""`get`: a line range read from disk, confined to the project root and to indexable files."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .context_settings import FILE_NAME, load_context_settings
from .errors import InvalidRequest, PathOutsideRoot
from .paths import resolve_inside
from .request_fields import bounded_int, require_object, required_str, typed
from .scanner import is_indexable
from .textio import BinaryFile, decode

if TYPE_CHECKING:
    from .project import Project

MAX_LINES = 5000


def resolve_path(root: Path, path: str) -> tuple[Path, str]:
    """`resolve_inside`, rejecting paths the OS cannot represent (NUL bytes, lone surrogates, too long)."""
    try:
        return resolve_inside(root, path)
    except (ValueError, UnicodeError, OSError) as exc:  # PathOutsideRoot is none of these
        raise InvalidRequest("path", f"not a usable path ({type(exc).__name__})") from None


def get_lines(project: Project, params: Mapping[str, Any]) -> dict[str, Any]:
    params = require_object(params)
    path = required_str(params, "path", "uri")
    start = bounded_int(params, "startLine", 1, 1)
    lines = bounded_int(params, "lines", None, 1)
    real, rel = resolve_path(project.root, path)
    reason = is_indexable(project.root, rel, project.settings)
    if reason is not None:
        raise PathOutsideRoot("path", f"{rel} is not an indexable project file ({reason})")
    if (
        typed(params, "respectContextSettings", bool, True)
        and load_context_settings(project.root).mode_for(rel) == "exclude"
    ):
        raise PathOutsideRoot(
            "path", f"{rel} is excluded by {FILE_NAME} (respectContextSettings: false reads it)"
        )
    try:
        if not real.is_file():
            raise InvalidRequest("path", f"{rel} does not exist")
        text = decode(real.read_bytes(), rel).text
    except BinaryFile as exc:
        raise InvalidRequest("path", str(exc)) from None
    except OSError as exc:
        raise InvalidRequest("path", f"{rel} cannot be read ({exc.strerror or exc})") from None
    all_lines = text.split("\n")
    if all_lines and all_lines[-1] == "":
        all_lines.pop()
    count = min(lines or MAX_LINES, MAX_LINES)
    chosen = all_lines[start - 1 : start - 1 + count]
    return {"path": rel, "startLine": start, "endLine": start + len(chosen) - 1 if chosen else start - 1,
            "totalLines": len(all_lines), "text": "\n".join(chosen)}  # fmt: skip

"""`get`: a line range read from disk, confined to the project root and to indexable files."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .context_settings import FILE_NAME as CONTEXT_FILE
from .context_settings import load_context_settings
from .errors import InvalidRequest, PathOutsideRoot
from .paths import resolve_inside
from .visibility import role_levels, visible

if TYPE_CHECKING:
    from .project_view import ProjectView

MAX_LINES = 5000


def resolve_path(root: Path, path: str) -> tuple[Path, str]:
    """`resolve_inside`, rejecting paths the OS cannot represent (NUL bytes, lone surrogates, too long)."""
    try:
        return resolve_inside(root, path)
    except (ValueError, UnicodeError, OSError) as exc:  # PathOutsideRoot is none of these
        raise InvalidRequest("path", f"not a usable path ({type(exc).__name__})") from None


def get_lines(project: ProjectView, params: Mapping[str, Any]) -> dict[str, Any]:
    """A `saipling/get` request (checked by its schema) -> {path, startLine, endLine, totalLines, text}."""
    # imported here: search imports this module (resolve_path), and a CLI search needs neither pydantic nor YAML
    from .requests import GetParams, parse

    m = parse(GetParams, params)
    return read_lines(project, m.path or m.uri or "", m.start_line or 1, m.lines, m.role,
                      m.respect_context_settings is not False)  # fmt: skip


def read_lines(
    project: ProjectView, path: str, start: int = 1, lines: int | None = None, role: str | None = None,
    respect: bool = True,
) -> dict[str, Any]:  # fmt: skip
    """`get_lines` with arguments the caller already checked (the CLI: click and `cli._parse_location` make
    start and lines >= 1): a one-shot `saipling get` imports no pydantic (~45 ms)."""
    from .metadata import extract_metadata  # (its YAML parser loads only for a file with frontmatter)
    from .scanner import is_indexable
    from .textio import BinaryFile, decode, read_regular

    if not path:
        raise InvalidRequest("path", "is required and must be a non-empty string")
    real, rel = resolve_path(project.root, path)
    reason = is_indexable(project.root, rel, project.settings)
    if reason is not None:
        raise PathOutsideRoot("path", f"{rel} is not an indexable project file ({reason})")
    if respect and load_context_settings(project.root).mode_for(rel) == "exclude":
        raise PathOutsideRoot(
            "path",
            f"{rel} is excluded by {CONTEXT_FILE} (pass respectContextSettings: false, or --all-files, to read it)",
        )
    try:
        if not real.is_file():
            problem = "is not a regular file" if real.exists() else "does not exist"  # (a FIFO, a device)
            raise InvalidRequest("path", f"{rel} {problem}")
        size, limit = real.stat().st_size, project.settings.max_file_bytes
        if size > limit:  # (not indexed either; a 2 GB file was read whole into memory)
            raise InvalidRequest("path", f"{rel} is too large ({size} bytes > maxFileBytes {limit})")
        text = decode(read_regular(real), rel).text
    except BinaryFile as exc:
        raise InvalidRequest("path", str(exc)) from None
    except OSError as exc:
        raise InvalidRequest("path", f"{rel} cannot be read ({exc.strerror or exc})") from None
    levels = role_levels(project.settings.roles, role, project.settings.default_role)
    if not visible(extract_metadata(rel, text).visibility, levels):  # as search would hide it
        raise PathOutsideRoot(
            "path", f"{rel} is not visible to {'role ' + repr(role) if role else 'this request'}"
        )
    all_lines = text.split("\n")
    if all_lines and all_lines[-1] == "":
        all_lines.pop()
    if start > max(1, len(all_lines)):
        raise InvalidRequest("startLine", f"is past the end of {rel} ({len(all_lines)} lines)")
    count = min(lines or MAX_LINES, MAX_LINES)
    chosen = all_lines[start - 1 : start - 1 + count]
    return {"path": rel, "startLine": start, "endLine": start + max(len(chosen), 1) - 1,
            "totalLines": len(all_lines), "text": "\n".join(chosen)}  # fmt: skip

"""`get`: a line range read from disk, confined to the project root and to indexable files; and `authorize`, the
check of every request that names a file."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config.visibility import role_levels, visible
from ..errors import InvalidRequest, PathOutsideRoot
from ..files.context_settings import FILE_NAME as CONTEXT_FILE
from ..files.context_settings import load_context_settings
from ..paths import resolve_inside

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
    return read_lines(
        project, m.path or m.uri or "", m.start_line or 1, m.lines, m.role, m.respect_context_settings is not False
    )


@dataclass
class Authorized:
    """A project file a request may read: its real path, root-relative path, text (as read for the check) and
    the warnings the answer must carry (a `.context_settings.json` that cannot be read, unreadable frontmatter)."""

    real: Path
    rel: str
    text: str
    warnings: list[str] = field(default_factory=list)


def authorize(
    project: ProjectView, path: str, role: str | None = None, respect: bool = True, field_name: str = "path"
) -> Authorized:
    """The one authorization path of every request that names a file (`get`, `related`; the LSP, MCP and CLI
    alike): the path is inside the root, an indexable project file, not excluded by `.context_settings.json`
    (unless `respect` is false), a regular file no larger than maxFileBytes, and its visibility (read from the
    file on disk, as the index reads it: files/metadata.py, fail closed) is one `role` may see. Anything else is refused
    with the same error whichever request asked, before anything of the file is used: PathOutsideRoot for a path
    outside the root, not indexable or excluded, InvalidRequest for a file that cannot be read (a folder, too
    large) or is not there; one whose visibility the role may not see is refused in the same words as one that
    does not exist (its existence is no answer to a probe).

    Exclusion is checked before the disk is touched (an excluded path is refused whether or not it exists)."""
    from ..files.metadata import extract_metadata  # (its YAML parser loads only for a file with frontmatter)
    from ..files.scanner import is_indexable
    from ..files.textio import BinaryFile, decode, read_regular

    if not path:
        raise InvalidRequest(field_name, "is required and must be a non-empty string")
    real, rel = resolve_path(project.root, path)
    reason = is_indexable(project.root, rel, project.settings)
    if reason is not None and (lines := _LINES_SUFFIX_RE.fullmatch(rel)) is not None:  # (the CLI's PATH:START-END)
        raise InvalidRequest(
            field_name,
            f"{rel} names lines: give the path alone ({lines.group(1)}) and the lines as startLine and lines (or "
            "endLine)",
        )
    if reason is not None:
        raise PathOutsideRoot(field_name, f"{rel} is not an indexable project file ({reason})")
    warnings: list[str] = []
    if respect:
        cs = load_context_settings(project.root)
        warnings += cs.warnings
        if cs.mode_for(rel) == "exclude":
            why = f" ({cs.warning})" if cs.exclude_all else ""
            raise PathOutsideRoot(
                field_name,
                f"{rel} is excluded by {CONTEXT_FILE}{why} (the author's --all-files or respectContextSettings: "
                "false reads it; an agent's tools never do)",
            )
    levels = role_levels(project.settings.roles, role, project.settings.default_role)
    # (a file the request may not see is refused in the words of one that does not exist: else its name, probed,
    # told an agent that such a file is there, `Secrets/villain-plan.md`)
    unseen = f"{rel} does not exist or is not visible to {'role ' + repr(role) if role else 'this request'}"
    try:
        if not real.is_file():
            if real.exists():  # (a folder, a FIFO, a device)
                raise InvalidRequest(field_name, f"{rel} is not a regular file")
            raise InvalidRequest(field_name, unseen)
        size, limit = real.stat().st_size, project.settings.max_file_bytes
        if size > limit:  # (not indexed either; a 2 GB file was read whole into memory)
            raise InvalidRequest(field_name, f"{rel} is too large ({size} bytes > maxFileBytes {limit})")
        text = decode(read_regular(real), rel).text
    except BinaryFile as exc:
        raise InvalidRequest(field_name, str(exc)) from None
    except OSError as exc:
        raise InvalidRequest(field_name, f"{rel} cannot be read ({exc.strerror or exc})") from None
    meta = extract_metadata(rel, text)
    if not visible(meta.visibility, levels):  # as search hides it
        raise InvalidRequest(field_name, unseen)
    if meta.warning:
        warnings.append(meta.warning)
    return Authorized(real, rel, text, warnings)


_LINES_SUFFIX_RE = re.compile(r"(.+\.(?:md|markdown|mdx|txt|json)):\d+(?:-\d+)?", re.IGNORECASE)


def file_lines(text: str) -> list[str]:
    """A file's lines as `get` numbers them (a final newline ends the last line, it does not start another)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def check_start_line(rel: str, start: int, total: int) -> None:
    """The one check of a start line (`get`, `related`; the LSP, MCP and CLI alike): InvalidRequest when it is past
    the end of a file of `total` lines (line 1 of an empty file is its start)."""
    if start > max(1, total):
        raise InvalidRequest("startLine", f"is past the end of {rel} ({total} lines)")


def read_lines(
    project: ProjectView,
    path: str,
    start: int = 1,
    lines: int | None = None,
    role: str | None = None,
    respect: bool = True,
) -> dict[str, Any]:
    """`get_lines` with arguments the caller already checked (the CLI: click and `cli.main._parse_location` make
    start and lines >= 1): a one-shot `saipling get` imports no pydantic (~45 ms)."""
    got = authorize(project, path, role, respect)
    rel = got.rel
    all_lines = file_lines(got.text)
    check_start_line(rel, start, len(all_lines))
    count = min(lines or MAX_LINES, MAX_LINES)
    chosen = all_lines[start - 1 : start - 1 + count]
    out = {
        "path": rel,
        "startLine": start,
        "endLine": start + max(len(chosen), 1) - 1,
        "totalLines": len(all_lines),
        "text": "\n".join(chosen),
    }
    if got.warnings:  # (only when there is something to say: answers without trouble keep their shape)
        out["warnings"] = got.warnings
    return out

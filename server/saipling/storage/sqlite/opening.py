"""A project's SQLite index opened as the project needs it: created when asked, an empty in-memory one for a
folder never indexed, read-only (with a warning saying why) when the file cannot be written: a read-only folder or
mount, or a full disk (with how much room the index needs)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import apsw

from ...errors import DiskFull, SaiplingError
from . import index_files
from .store import SqliteStore

if TYPE_CHECKING:
    from ...config.settings import Settings


def open_project_index(
    path: Path,
    *,
    root: Path | None,
    create: bool,
    warnings: list[str],
    verify: bool = True,
    settings: Settings | None = None,
) -> SqliteStore:
    """The project's index at `path`: created when `create`; a folder never indexed gets an empty in-memory one.
    An index that cannot be written (a read-only folder or mount, a full disk) is opened read-only, with a warning
    saying which: search and status work, indexing is refused and searches are not logged. A `.saipling` that
    is a link, or holds links where saipling writes, is refused whatever the command (IndexPathUnsafe)."""
    index_files.check_folder(path.parent)
    if not (os.path.lexists(path) or create):
        return SqliteStore.open(":memory:")
    try:
        store = SqliteStore.open(path, verify=verify)
        if store.unverified:  # a big index opened without reading every page: checked on a thread
            store.check_later(warnings.append)
        return store
    except (SaiplingError, OSError) as exc:
        # (the store maps apsw's errors: the cause is what SQLite said)
        cause = exc.__cause__ if isinstance(exc.__cause__, apsw.Error) else exc
        full = index_files.out_of_space(cause, path.parent)
        cannot_write = (apsw.ReadOnlyError, apsw.CantOpenError, apsw.IOError, PermissionError)
        if not (full or isinstance(cause, cannot_write)):
            raise
        if full:  # not a read-only index: say so, and how much room it needs
            message = index_files.project_disk_full(root or path.parent.parent, path.parent, settings)
            # a new index (or one never written) has nothing to read: refused as what it is
            try:
                store = SqliteStore.open(path, readonly=True)
            except (SaiplingError, OSError):
                raise DiskFull(message) from exc
            store.disk_full = message
            warnings.append(
                f"{message}. Until then search and status work on the index as it is; indexing is off and "
                "searches are not logged"
            )
            return store
        if not path.is_file():
            raise
        store = SqliteStore.open(path, readonly=True)
        reason = cause.strerror if isinstance(cause, OSError) else type(cause).__name__
        warnings.append(
            f"the index {path} is read-only ({reason}): search and status work; indexing is off and "
            "searches are not logged"
        )
        return store


def disk_full_advice(root: Path, folder: Path, settings: Settings | None) -> str:
    """The full-disk message for a project's index folder, with the room its index needs."""
    return index_files.project_disk_full(root, folder, settings)

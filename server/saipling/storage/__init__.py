"""The index: what the engine may ask of it (`base.py`, the storage interface: typing Protocols and the data they
speak), the backends that hold it (`sqlite/`: the SQLite file under `.saipling/`, with sqlite-vec and FTS5; the
`pg` branch adds `postgres/`), and the in-memory vector matrix for exact KNN (`vector_matrix.py`, a shared piece).
`open_store` (here) picks the backend for a location; nothing outside storage/ imports a backend.

May import: config/, files/, embeddings/, markdown/; and errors.py, redact.py, lazy.py, jsonrpc_salvage.py, paths.py.
It never imports pygls, lsprotocol, click, rich or mcp (tests/test_architecture.py).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..config.settings import Settings
    from .base import IndexStore

SERVER_SCHEMES = ("postgresql://", "postgres://")


def is_server_location(location: str | Path) -> bool:
    """A database server's URL (not a file path)."""
    return isinstance(location, str) and location.startswith(SERVER_SCHEMES)


def open_store(
    location: str | Path,
    *,
    workspace: str | None = None,
    readonly: bool = False,
    verify: bool = True,
    root: Path | None = None,
    create: bool = True,
    warnings: list[str] | None = None,
    settings: Settings | None = None,
    **options: Any,
) -> IndexStore:
    """The index at `location`: a `postgresql://` URL opens `storage.postgres` (imported only then) for
    `workspace` (default: the project root's absolute path; `create=False`: a workspace the database does not have
    is an error naming the ones it has, not a new empty one: a misspelt name); a path, the SQLite index file there
    (`:memory:`: an empty one in memory). For a project's SQLite index (`root` given): `create=False` gives an
    in-memory index when none exists yet, and one that cannot be written opens read-only with a line in
    `warnings` (storage/sqlite/opening.py). `verify=False` skips the full integrity check (one-shot readers)."""
    if is_server_location(location):
        from . import postgres  # type: ignore[attr-defined]  # (the `pg` branch)

        key = workspace or (str(Path(root).resolve()) if root is not None else "default")
        store = postgres.open_store(str(location), workspace=key, readonly=readonly, create=create, **options)
        if root is not None:  # (this copy of the project, written with each file: storage.base.FileState.origin)
            store.copy_id = copy_identity(root)
        return store
    if root is None or readonly:
        from .sqlite.store import SqliteStore

        return SqliteStore.open(location, readonly=readonly, verify=verify)
    from .sqlite.opening import open_project_index

    return open_project_index(
        Path(location),
        root=root,
        create=create,
        warnings=warnings if warnings is not None else [],
        verify=verify,
        settings=settings,
    )


MACHINE_ID_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id")


def copy_identity(root: Path, sources: tuple[str, ...] = MACHINE_ID_FILES) -> str:
    """Which copy of a project this is, for a shared store: `SAIPLING_COPY_ID` when set (a container whose host name
    changes each run, a project folder that moves), else the machine's id (or host name) and the folder."""
    given = os.environ.get("SAIPLING_COPY_ID", "").strip()
    if given:
        return given
    machine = ""
    for source in sources:  # (stable across renames of the host)
        try:
            found = Path(source).read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            continue
        # (systemd's first-boot `uninitialized`, or an all-zero id, names no one machine)
        if re.fullmatch(r"[0-9a-f]{32}", found) and found.strip("0"):
            machine = found
            break
    if not machine:
        import socket

        machine = socket.gethostname()
    return f"{machine}:{Path(root).resolve()}"


def disk_full_advice(root: Path, location: str | Path, settings: Settings | None) -> str:
    """What to tell the user when the index ran out of room: where, what is free, about how much it needs."""
    if is_server_location(location):
        return "the database server has no room left: free space there (or ask its administrator)"
    from .sqlite.opening import disk_full_advice as advice

    return advice(root, Path(location).parent, settings)

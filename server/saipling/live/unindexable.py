"""Files read but refused for their content (binary, unchunkable), remembered in the index with their (mtime, size).

A one-shot command compares the files on disk with the index (`live.freshness.changed_on_disk`): such a file is in
no index row, so without this memory it would count as "not read yet" in `saipling status` forever and every
`saipling search` would read it again (loading the indexer). It is tried again once it changes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from ..storage.base import IndexStore

META_KEY = "unindexable_files"  # {path: [mtime_ns, size]} or [mtime_ns, size, 1] for a file it could not open
_CONTENT_SKIPS = ("binary or undecodable", "could not be chunked")
_UNREADABLE = "unreadable"  # (permission denied, ...: tried again once readable, though a chmod keeps its mtime)


def unindexable(store: IndexStore) -> dict[str, list[int]]:
    try:
        known = json.loads(store.get_meta(META_KEY, "{}") or "{}")
    except ValueError:
        return {}
    return known if isinstance(known, dict) else {}


def remember(store: IndexStore, root: Path, skipped: Iterable[tuple[str, str]]) -> None:
    """After a run (its summary's `skipped`): the files refused for their content are remembered with their
    (mtime, size) now; entries of files since indexed or gone are dropped."""
    if store.readonly:
        return
    old = unindexable(store)
    known = dict(old)
    for rel, reason in skipped:
        if not reason.startswith((*_CONTENT_SKIPS, _UNREADABLE)):
            continue
        try:
            st = os.stat(os.path.join(root, rel))
        except OSError:
            continue
        known[rel] = [st.st_mtime_ns, st.st_size] + ([1] if reason.startswith(_UNREADABLE) else [])
    if known:
        states = store.file_states()
        known = {p: v for p, v in known.items() if p not in states and os.path.exists(os.path.join(root, p))}
    if known != old:
        store.set_meta(META_KEY, json.dumps(known))


def still_refused(entry: list[int] | None, root: Path, rel: str, mtime_ns: int, size: int) -> bool:
    """True when a remembered file is as it was refused: same (mtime, size), and, if it could not be opened,
    still not readable (a chmod changes no mtime)."""
    if not isinstance(entry, list) or entry[:2] != [mtime_ns, size]:
        return False
    return len(entry) < 3 or not os.access(os.path.join(root, rel), os.R_OK)

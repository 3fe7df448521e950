"""A chunk's preview: its text on one line, cut at PREVIEW_CHARS. A function of the text alone, so the SQLite index
derives it on reading instead of storing it (storage/sqlite/file_writes.py). No imports: the cold search path reads
it."""

from __future__ import annotations

PREVIEW_CHARS = 200


def make_preview(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= PREVIEW_CHARS else flat[: PREVIEW_CHARS - 1].rstrip() + "…"

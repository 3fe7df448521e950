"""A search filter (`ChunkFilter`, plain data) compiled to a PostgreSQL condition over `chunks c`.

Visibility is part of the query (never a post-filter in Python): a reader role's levels become
`lower(btrim(coalesce(c.visibility, 'public'))) = ANY(levels)`, and an empty list of levels passes nothing (fail
closed), as a `known_by` never resolved does. A glob is matched in Python over the workspace's file paths
(paths.glob_match: the one definition of a glob) and sent as the list of paths it passes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any


def book_keys(book: str) -> list[str]:
    from ...files.metadata import slugify

    return [book.lower(), slugify(book)]


def compile_filter(flt: Any, glob_paths: Callable[[str], list[str]]) -> tuple[str, list[Any]]:
    """(SQL condition, its parameters) for `flt` (None or empty: ("TRUE", [])). `glob_paths(glob)`: the paths of
    the workspace that the glob passes."""
    if flt is None:
        return "TRUE", []
    conds: list[str] = []
    params: list[Any] = []
    if flt.entity_types:
        conds.append("lower(c.entity_type) = ANY(%s)")
        params.append([t.lower() for t in flt.entity_types])
    if flt.file_types:
        conds.append("c.file_type = ANY(%s)")
        params.append([t.lower() for t in flt.file_types])
    if flt.book_id:
        conds.append("lower(c.book_id) = ANY(%s)")
        params.append(book_keys(flt.book_id))
    if flt.book_scope:
        conds.append("(c.book_id IS NULL OR lower(c.book_id) = ANY(%s))")
        params.append(book_keys(flt.book_scope))
    if flt.chapter_id:
        conds.append("c.chapter_id = %s")
        params.append(flt.chapter_id)
    if flt.max_chapter is not None:
        conds.append("(c.chapter_num IS NULL OR c.chapter_num <= %s)")
        params.append(flt.max_chapter)
    if flt.path_prefix:
        if flt.path_prefix.isascii():
            conds.append("starts_with(c.path, %s)")
            params.append(flt.path_prefix)
        else:  # `notes/privé` typed in NFC names the folder stored in NFD (as macOS writes it), and back
            from ...paths import nfc

            conds.append("starts_with(normalize(c.path, NFC), %s)")
            params.append(nfc(flt.path_prefix))
    if flt.glob:
        conds.append("c.path = ANY(%s)")
        params.append(glob_paths(flt.glob))
    if flt.corpus:
        conds.append("c.corpus = %s")
        params.append(flt.corpus)
    if flt.visibility is not None:  # levels compare case-insensitively (config/visibility.py); NULL is public
        conds.append("lower(btrim(coalesce(c.visibility, 'public'))) = ANY(%s)")
        params.append([str(v).lower() for v in flt.visibility])
    if flt.exclude_paths:
        conds.append("NOT (c.path = ANY(%s))")
        params.append(list(flt.exclude_paths))
    if flt.only_paths is not None:
        conds.append("c.path = ANY(%s)")
        params.append(list(flt.only_paths))
    if flt.known_entities is not None:
        conds.append(
            "(c.path IN (SELECT m.path FROM mentions m WHERE m.ws = c.ws AND m.entity = ANY(%s))"
            " OR c.path IN (SELECT f.path FROM mention_files f WHERE f.ws = c.ws AND f.pov = ANY(%s)))"
        )
        params += [list(flt.known_entities), list(flt.known_povs)]
    elif flt.known_by is not None:
        conds.append("FALSE")  # (fail closed: never resolved, nothing is known)
    return (" AND ".join(conds) or "TRUE"), params


def vector_level_filter(flt: Any) -> tuple[str, list[Any]] | None:
    """The condition over `chunk_vectors v` alone when `flt`'s only condition is visibility (a reader's levels:
    compared with `v.level`, kept equal to the chunk's by triggers, schema migration 2); "TRUE" when `flt` has no
    condition; None when another condition needs the chunk's columns."""
    if flt is None or flt.is_empty():
        return "TRUE", []
    if not replace(flt, visibility=None).is_empty():
        return None
    return "v.level = ANY(%s)", [[str(v).lower() for v in flt.visibility]]

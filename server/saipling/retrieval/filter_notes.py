"""Why a filtered search found nothing (the CLI's note, the MCP `search` tool's `note`): a path under which no file
is indexed (with the folders of that name the project has: `Classes` -> `Compendium/13A/Classes`), a corpus the
project does not define, or how many results the query has without the filters. A user, or an agent told to say
"nothing relevant" on an empty answer, otherwise concludes the content is not there."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..files.metadata import slugify
from ..files.scanner import DEFAULT_CORPUS
from ..paths import normalise_rel
from ..storage.base import book_keys
from .mentions import Allowed
from .project_view import ProjectView
from .search import SearchRequest, build_filter, run_search


def empty_search_note(project: ProjectView, params: Mapping[str, Any]) -> str | None:
    """The note for a `saipling/search` request (MCP `search` tool's arguments with its rules applied, or the
    language server's parameters) that found nothing under its `filter`; None without a filter."""
    from .search import parse_request

    given = params.get("filter")
    shown = {f"filter.{k}": v for k, v in given.items() if v not in (None, "", [])} if isinstance(given, dict) else {}
    return why_no_results(project, parse_request(dict(params)), shown, "filter.pathPrefix") if shown else None


def why_no_results(project: ProjectView, req: SearchRequest, given: Mapping[str, Any], path_label: str) -> str:
    """The note for a search under the filters `given` (as the caller names them: `--path` on the CLI,
    `pathPrefix` over MCP) that found nothing; `path_label` names the path filter in a suggestion."""
    flt = req.filter
    # (the user's filters dropped, the rest kept: role, visibility, context settings; not logged as a search)
    unfiltered = replace(
        flt, entity_types=[], file_types=[], book_id=None, chapter_id=None, max_chapter=None, known_by=None, corpus=None
    )
    plain = replace(req, filter=replace(unfiltered, path_prefix=None, glob=None, exclude_paths=[]), log=False)
    if flt.path_prefix:
        prefix = normalise_rel(flt.path_prefix).strip("/")  # (as the search's filter reads it: `./notes`)
        # only the files this request may see: a hint naming a private or excluded folder, or "nothing matches"
        # against "no file is under that folder", told an agent which hidden files exist
        seen = build_filter(project, replace(plain, filter=replace(plain.filter)))
        paths = sorted({p for _, p in project.store.chunk_ids_for_paths(list(project.store.file_states()), seen)})
        if not any(p.startswith(prefix) for p in paths):  # (as the filter reads it: a prefix of the path)
            folders = {"/".join(p.split("/")[: i + 1]) for p in paths for i in range(p.count("/"))}
            last = prefix.rsplit("/", 1)[-1].casefold()
            alike = sorted(f for f in folders if f.rsplit("/", 1)[-1].casefold() == last)
            if not alike:
                names = {f.rsplit("/", 1)[-1].casefold(): f for f in sorted(folders)}
                alike = [names[n] for n in difflib.get_close_matches(last, list(names), n=3, cutoff=0.8)]
            hint = f" (did you mean {' or '.join(f'{path_label} {f}' for f in alike[:3])}?)" if alike else ""
            return f"{path_label} {flt.path_prefix}: no indexed file is under that folder{hint}"
    corpora = [*project.settings.corpora, DEFAULT_CORPUS]
    if flt.corpus and flt.corpus not in corpora:
        known = f"its corpora: {', '.join(sorted(corpora))}"
        return f"corpus {flt.corpus}: the project has no corpus of that name ({known})"
    if flt.book_id and (books := _visible_books(project, req)) and not set(book_keys(flt.book_id)) & books:
        close = difflib.get_close_matches(slugify(flt.book_id), sorted(books), n=1, cutoff=0.5)
        close += [b for b in sorted(books) if slugify(flt.book_id) in b and b not in close]
        hint = f"did you mean {close[0]}? " if close else ""
        return f"book {flt.book_id}: no chapter is in a book of that id ({hint}the books: {', '.join(sorted(books))})"
    found = len(run_search(project, plain)["results"])
    shown = ", ".join(f"{k} {v}" for k, v in given.items())
    if found:
        many = f"{'at least ' if found >= plain.max_results else ''}{found} result{'s' * (found > 1)}"
        return f"nothing matches the filters ({shown}); without them this query has {many}"
    return f"no results without the filters ({shown}) either"


def _visible_books(project: ProjectView, req: SearchRequest) -> set[str]:
    """The book ids (lowercased) of the chapters this request may see: a book named as the frontmatter writes it
    (`Dracula`) where the folder gives `book-01-dracula` finds nothing, and is told the ids there are."""
    allowed = Allowed(project, req.role)
    return {row.book_id.lower() for row in project.store.chapter_files() if row.book_id and allowed(row)}

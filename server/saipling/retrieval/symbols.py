"""`workspace/symbol`: entities (frontmatter names and aliases) first, then headings, fuzzy matched."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ..config.visibility import role_levels, visible
from ..files.context_settings import load_context_settings

if TYPE_CHECKING:
    from ..storage.base import EntityRow, HeadingRow
    from .project_view import ProjectView

MAX_SYMBOLS = 200
MAX_QUERY_CHARS = 200  # (a symbol name is short; a 10 MB query took 9 s and a gigabyte)
SUBSTRING = 2.0  # fuzzy_score of a name holding the query (words or not)


def fuzzy_score(query: str, name: str) -> float:
    """0 = no match; higher is better: exact > prefix > word prefix > substring > subsequence."""
    q, n = query.lower().strip(), name.lower()
    if not q:
        return 0.1
    if q == n:
        return 5.0
    if n.startswith(q):
        return 4.0
    if re.search(r"\b" + re.escape(q), n):
        return 3.0
    if q in n:
        return SUBSTRING
    it = iter(n)
    if all(ch in it for ch in q):
        return 1.0 / (1 + len(n) - len(q))
    return 0.0


def find_symbols(project: ProjectView, query: str, role: str | None = None) -> list[dict[str, Any]]:
    """Symbols of the files a request may see: visible to `role` (config/visibility.py) and not excluded by
    `.context_settings.json`."""
    levels = role_levels(project.settings.roles, role, project.settings.default_role)
    cs = load_context_settings(project.root)

    def shown(row: EntityRow | HeadingRow) -> bool:
        return visible(row.visibility, levels) and cs.mode_for(row.path) != "exclude"

    found: list[tuple[float, int, dict[str, Any]]] = []
    if len(query) > MAX_QUERY_CHARS:
        return []
    for row in filter(shown, project.store.entities()):
        names = [row.display_name] if row.display_name else []
        names += row.aliases
        best = max(((fuzzy_score(query, n), n) for n in names if n), default=(0.0, ""))
        if best[0] > 0:
            found.append(
                (
                    best[0],
                    0,
                    {
                        "name": row.display_name or best[1],
                        "matched": best[1],
                        "kind": "entity",
                        "entityType": row.entity_type,
                        "entityName": row.entity_name,
                        "path": row.path,
                        "startLine": 1,
                        "endLine": 1,
                    },
                )
            )
    # a section is one symbol, however many chunks it has: the rows come in file order, so a row continues the
    # symbol of the row before when both are of the same section (two `## Notes` of one file stay two)
    last_key: tuple[str, str, str] | None = None
    last: dict[str, Any] | None = None
    for hrow in filter(shown, project.store.headings()):
        title = (hrow.section_heading or "").lstrip("#").strip()
        key = (hrow.path, hrow.heading_path or "", title)
        if key == last_key:
            if last is not None:
                last["endLine"] = max(last["endLine"], hrow.end_line)
            continue
        last_key, last = key, None
        score = fuzzy_score(query, title) if title else 0.0
        if score <= 0:
            continue
        last = {
            "name": title,
            "kind": "heading",
            "headingPath": hrow.heading_path,
            "path": hrow.path,
            "startLine": hrow.start_line,
            "endLine": hrow.end_line,
        }
        found.append((score, 1, last))
    if any(score >= SUBSTRING for score, _, _ in found):
        # names holding the query as written: letters scattered in order (`Mina` in "sMellIng deAth") are noise
        found = [f for f in found if f[0] >= SUBSTRING]
    found.sort(key=lambda t: (t[1], -t[0], t[2]["path"], t[2]["startLine"]))
    return [f[2] for f in found[:MAX_SYMBOLS]]

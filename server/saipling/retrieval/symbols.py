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
        return 2.0
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
    for hrow in filter(shown, project.store.headings()):
        title = (hrow.section_heading or "").lstrip("#").strip()
        score = fuzzy_score(query, title) if title else 0.0
        if score > 0:
            found.append(
                (
                    score,
                    1,
                    {
                        "name": title,
                        "kind": "heading",
                        "headingPath": hrow.heading_path,
                        "path": hrow.path,
                        "startLine": hrow.start_line,
                        "endLine": hrow.end_line,
                    },
                )
            )
    found.sort(key=lambda t: (t[1], -t[0], t[2]["path"], t[2]["startLine"]))
    return [f[2] for f in found[:MAX_SYMBOLS]]

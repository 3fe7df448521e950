"""Who sees what: a file's `visibility` level (frontmatter, default `public`) against the levels of a role.

One rule for every request that returns content (search, enrichContext, related, get, workspace/symbol):
a request naming a `role` sees that role's levels (the `roles` setting); a request without one sees what the
`defaultRole` setting's role sees; no `defaultRole` (the default), or a role the settings do not define, sees
`public` only. Levels and role names compare case-insensitively (`MEMBERS` is the level `members`).

Fail closed: a file whose frontmatter cannot be read (a YAML error, not a mapping, never closed) has the level
`private` (files/metadata.py), so only a role that may see private files sees it; the key is read case-insensitively too
(`Visibility: Private`), and a value that is not text (a list, a number) is `private` as well.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Mapping

PUBLIC = "public"


def fold(level: str | None) -> str:
    """A visibility level as compared: NFKC, trimmed, case-folded; missing means public."""
    if level and not level.isascii():
        level = unicodedata.normalize("NFKC", level)
    return (level or PUBLIC).strip().casefold() or PUBLIC


def role_levels(roles: Mapping[str, Iterable[str]], role: str | None, default_role: str = "") -> list[str]:
    """The (folded) levels `role` may see; `default_role` when `role` is None; `public` only otherwise."""
    name = role if role is not None else (default_role or None)
    if name is None or not name.strip():  # ("": the MCP face's public-only role, never a role named blank)
        return [PUBLIC]
    levels = roles.get(name)
    if levels is None:
        wanted = name.strip().casefold()
        levels = next((v for k, v in roles.items() if k.strip().casefold() == wanted), None)
    if levels is None:
        return [PUBLIC]
    return sorted({fold(str(level)) for level in levels})


def visible(level: str | None, levels: Iterable[str]) -> bool:
    return fold(level) in set(levels)

"""The edits behind the name code actions (retrieval/name_fixes.py), applied and re-read: whatever shape a
profile's `aliases` has, the word joins them and the frontmatter still parses with every old alias kept."""

from __future__ import annotations

import pytest

from saipling.files.metadata import split_frontmatter
from saipling.retrieval.name_fixes import TextChange, alias_change


def apply(text: str, c: TextChange) -> str:
    lines = text.split("\n")

    def offset(line: int, col: int) -> int:
        return sum(len(x) + 1 for x in lines[:line]) + col

    return text[: offset(c.line, c.col)] + c.text + text[offset(c.end_line, c.end_col) :]


@pytest.mark.parametrize(
    ("profile", "aliases"),
    [
        ("---\nname: Dorman Vale\naliases: [Dorm, The Vale]\ntype: character\n---\n# Dorman\n", ["Dorm", "The Vale"]),
        ("---\nname: Dorman Vale\naliases: []\n---\nBody.\n", []),
        ("---\nname: Dorman Vale\naliases:\n  - Dorm\n  - The Vale\ntype: character\n---\n", ["Dorm", "The Vale"]),
        ("---\nname: Dorman Vale\naliases: Dorm\n---\n", ["Dorm"]),
        ("---\nname: Dorman Vale\naliases:\ntype: character\n---\n", []),
        ("---\nname: Dorman Vale\ntype: character\n---\n# Dorman\n", []),
        ("# Dorman Vale\n\nNo frontmatter at all.\n", []),
    ],
)
def test_alias_change_adds_the_word_and_keeps_the_rest(profile: str, aliases: list[str]) -> None:
    edited = apply(profile, alias_change(profile, "Dormaan"))
    fm, _, _ = split_frontmatter(edited)
    found = fm["aliases"] if isinstance(fm["aliases"], list) else [fm["aliases"]]
    assert found == [*aliases, "Dormaan"], edited
    assert edited.split("---\n")[-1] == profile.split("---\n")[-1]  # the body is untouched

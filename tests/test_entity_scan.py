"""The entity scan's regexes (retrieval/entities.py): the trie-shaped names pattern finds exactly what the flat
alternation of the names, longest first, found (the pattern every mention, hover and name hint rests on), and the
lookahead over the names' longest words finds every place the plain substring search found. On random names and
lines (prefixes of each other, several words, case variants, punctuation) and, when ../shared is present, on the
13th Age vault's entity names over every line of the vault."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from saipling.retrieval.entities import Entity, EntityIndex, names_pattern

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
SRD = SHARED / "corpora" / "13th-age-srd"


def flat_pattern(names: list[str]) -> re.Pattern[str]:
    """The pattern before the trie: every name in one alternation, longest first."""
    unique = sorted(set(names), key=lambda s: (-len(s), s))
    alts = "|".join(r"[^\S\n]+".join(re.escape(w) for w in s.split()) for s in unique)
    return re.compile(rf"(?<!\w)(?:{alts})(?!\w)", re.IGNORECASE)


def spans(pattern: re.Pattern[str], line: str) -> list[tuple[int, int]]:
    return [m.span() for m in pattern.finditer(line)]


def substring_offsets(text: str, words: set[str]) -> list[int]:
    out = []
    for w in words:
        i = text.find(w)
        while i != -1:
            out.append(i)
            i = text.find(w, i + 1)
    return sorted(set(out))


def random_cases(seed: int) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    syll = ["an", "na", "lee", "mar", "cus", "co", "le", "o'", "bri", "en", "st.", "ja", "ß", "é", "-x", "dr."]
    words = ["".join(rng.choice(syll) for _ in range(rng.randint(1, 3))) for _ in range(40)]
    names = []
    for _ in range(60):
        name = " ".join(rng.choice(words) for _ in range(rng.randint(1, 3)))
        names.append("".join(c.upper() if rng.random() < 0.3 else c for c in name))
    names += [n.split()[0] for n in names[:10]]  # prefixes of other names
    lines = []
    for _ in range(400):
        parts = [rng.choice(names + words + ["the", ",", ".", "  ", "\t", "x" + rng.choice(words)]) for _ in range(12)]
        lines.append("".join(p + rng.choice([" ", "  ", "", ", ", "'s "]) for p in parts))
    return names, lines


@pytest.mark.parametrize("seed", range(6))
def test_the_trie_pattern_matches_what_the_flat_alternation_matched(seed: int) -> None:
    names, lines = random_cases(seed)
    trie, flat = names_pattern(names), flat_pattern(names)
    assert trie is not None
    found = 0
    for line in lines:
        got = spans(trie, line)
        assert got == spans(flat, line), (line, got)
        found += len(got)
    assert found > 50  # the cases do hold mentions


@pytest.mark.parametrize("seed", range(3))
def test_the_words_lookahead_finds_every_substring_place(seed: int) -> None:
    names, lines = random_cases(seed)
    index = EntityIndex.build([Entity(path=f"e{i}.md", name=n, entity_type="character") for i, n in enumerate(names)])
    only = {s for pairs in index.by_name.values() for s, _ in pairs}
    words = {max(n.lower().split(), key=len) for n in only if n.split()}
    text = "\n".join(lines).lower()
    got = sorted({m.start() for m in index._words_pattern(only).finditer(text)})
    assert got and got == substring_offsets(text, words)


@pytest.mark.shared
@pytest.mark.skipif(not SRD.is_dir(), reason=f"shared corpus not present: {SRD}")
def test_the_vaults_names_match_as_before_on_every_line() -> None:
    from saipling.files.metadata import split_frontmatter

    names, lines = [], []
    for p in sorted(SRD.rglob("*.md")):
        text = p.read_text(encoding="utf-8", errors="replace")
        fm, _, _ = split_frontmatter(text)
        names.append(p.stem)
        for key in ("name", "title"):
            if isinstance(fm.get(key), str) and fm[key].strip():
                names.append(fm[key].strip())
        lines += text.split("\n")[::4]  # every 4th line: the flat pattern is the slow one
    names = [n for n in names if len(n.strip()) >= 3]
    trie, flat = names_pattern(names), flat_pattern(names)
    assert trie is not None
    found = 0
    for line in lines:
        got = spans(trie, line)
        assert got == spans(flat, line), line
        found += len(got)
    assert found > 1000

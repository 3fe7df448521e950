"""Names that drift and names without a page (issue 35), from the indexed text:

- **drift**: a capitalised word close to a word of an entity's name or alias but not equal (`Dormaan` for
  `Dorman`): within an edit distance (1 up to 6 letters, 2 beyond; transpositions count 1), or sounding the same
  (a Soundex-style key) within distance 2. Words the project also writes in lower case (`Will` beside `will`)
  are dictionary words and never flagged, nor are words of any entity's names.
- **unknown**: a capitalised word written mid-sentence (after a lower-case word or a comma) at least
  `min_count` times, never in lower case, that is no word of any entity's names: a name with no page.

The text comes from the index (each chunk's text and first line), files the role may see and not excluded.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..config.visibility import visible
from ..files.metadata import extract_metadata
from .entities import Entity, EntityProject, disk_reader, entity_index, frontmatter_lines
from .mentions import Allowed

_WORD_RE = re.compile(r"[^\W\d_][^\W\d_'’-]*")
_FENCE_RE = re.compile(r"^ {0,3}(```|~~~)")
MIN_NAME_WORD = 4  # shorter words of a name (`Mr`, `Van`, `de`) are never compared
COMMON = frozenset(
    "The A An And But Or If Then When While Where What Who Whom Whose Why How This That These Those There Here "
    "He She It We They You I My Your His Her Our Their Its Me Him Us Them Mr Mrs Miss Dr Sir Lady Lord Yes No "
    "Not Oh Ah So Now Well Chapter Book Part Scene Then Once After Before January February March April May June "
    "July August September October November December Monday Tuesday Wednesday Thursday Friday Saturday "
    "Sunday".split()
)
# titles and forms of address in names (`the Count`, `Lady Arabella`): never a drift target, a misspelling of
# a title is no name's (`Candy` was "close to Count", `Lloyd` to `Lady`, `Madame` to `Madam`)
TITLES = frozenset(
    "Mr Mrs Ms Miss Mister Madam Madame Dame Sir Lady Lord Count Countess Duke Duchess Baron Baroness King Queen "
    "Prince Princess Emperor Empress Doctor Dr Professor Captain Colonel General Admiral Major Lieutenant Sergeant "
    "Inspector Detective Reverend Father Mother Sister Brother Uncle Aunt Master Mistress Saint St".split()
)
# a sound-alike two letters off that the text uses this often is another name or word, not a slip (`Mimi` x23
# was "close to Mina")
SOUND_ALIKE_MAX_COUNT = 4
# a name's own forms: plural or family (`Harkers`), people or language (`Transylvanian`)
_FORMS = ("s", "es", "n", "an", "ian", "ns", "ians")


@dataclass
class Occurrence:
    count: int = 0
    first: tuple[str, int] | None = None  # (path, 1-based line)
    mid_sentence: int = 0


@dataclass
class Drift:
    word: str
    entity: Entity
    name_word: str
    distance: int
    count: int
    first: tuple[str, int]

    def to_dict(self) -> dict[str, Any]:
        return {
            "word": self.word,
            "closeTo": self.name_word,
            "entity": self.entity.name,
            "entityPath": self.entity.path,
            "distance": self.distance,
            "count": self.count,
            "first": {"path": self.first[0], "line": self.first[1]},
        }


@dataclass
class Unknown:
    word: str
    count: int
    first: tuple[str, int]

    def to_dict(self) -> dict[str, Any]:
        return {"word": self.word, "count": self.count, "first": {"path": self.first[0], "line": self.first[1]}}


@dataclass
class Vocabulary:
    capitalised: dict[str, Occurrence] = field(default_factory=dict)
    lower: Counter[str] = field(default_factory=Counter)
    words: int = 0


def vocabulary(project: EntityProject, role: str | None = None) -> Vocabulary:
    allowed = Allowed(project, role)
    voc = Vocabulary()
    # each file's text as saved, once: the chunks' texts overlap (a window repeats the end of the one before: a
    # word there was counted twice) and do not keep every blank line (a word's line came out one early)
    read = disk_reader(project.root)
    done: set[str] = set()
    for row in project.store.prose():
        if row.path in done:
            continue
        done.add(row.path)
        if not allowed.file(row.path, row.visibility):
            continue
        text = read(row.path)
        if not text or not visible(extract_metadata(row.path, text).visibility, allowed.levels):
            continue  # (the text read now decides: a file made private since it was indexed shows nothing)
        skip = frontmatter_lines(text)
        for n, line in _prose_lines(text.split("\n")[skip:], start=skip + 1):
            prev = ""
            for m in _WORD_RE.finditer(line):
                w = m.group(0).rstrip("'’-")
                voc.words += 1
                if w[:1].isupper() and not w.isupper():
                    occ = voc.capitalised.setdefault(w, Occurrence())
                    occ.count += 1
                    if occ.first is None:
                        occ.first = (row.path, n)
                    gap = line[m.start() - 2 : m.start()] if m.start() >= 2 else ""
                    if prev[:1].islower() or gap.endswith(", "):
                        occ.mid_sentence += 1
                elif w.islower():
                    voc.lower[w] += 1
                prev = w
    return voc


def _prose_lines(lines: list[str], start: int = 0) -> Iterator[tuple[int, str]]:
    """The `lines` outside code, numbered from `start`, inline code blanked."""
    fenced = False
    for n, line in enumerate(lines, start):
        if _FENCE_RE.match(line):
            fenced = not fenced
            continue
        if not fenced and not line.startswith(("    ", "\t")):
            yield n, re.sub(r"`[^`]*`", " ", line) if "`" in line else line


def distance(a: str, b: str, limit: int = 3) -> int:
    """Damerau-Levenshtein (optimal string alignment) distance, case-insensitive; `limit` + 1 when above."""
    a, b = a.casefold(), b.casefold()
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        if min(cur) > limit:
            return limit + 1
        prev2, prev = prev, cur
    return prev[-1]


_SOUND = {c: d for d, letters in enumerate(["aeiouyhw", "bfpv", "cgjkqsxz", "dt", "l", "mn", "r"]) for c in letters}


def sound_key(word: str) -> str:
    """Soundex-style: the first letter, then the consonant classes with repeats (and vowels) dropped."""
    w = word.casefold()
    if not w:
        return ""
    out, last = [w[0]], _SOUND.get(w[0], -1)
    for c in w[1:]:
        d = _SOUND.get(c, -1)
        if d not in (last, 0, -1):
            out.append(str(d))
        last = d if d != 0 else last if c in "hw" else 0
    return "".join(out)


def _name_words(ents: list[Entity]) -> dict[str, list[Entity]]:
    out: dict[str, list[Entity]] = {}
    for e in ents:
        for n in e.names:
            for w in _WORD_RE.findall(n):
                out.setdefault(w, []).append(e)
    return out


DELETION_INDEX_MAX = 48  # entity words up to this long are found by their deletions (drift); longer ones by length


def _deletions(word: str, n: int) -> set[str]:
    """`word` and every string made from it by dropping up to `n` of its characters."""
    out, layer = {word}, {word}
    for _ in range(n):
        layer = {w[:i] + w[i + 1 :] for w in layer for i in range(len(w))}
        out |= layer
    return out


def drift(project: EntityProject, voc: Vocabulary | None = None, role: str | None = None) -> list[Drift]:
    ents = entity_index(project, role).entities
    voc = voc or vocabulary(project, role)
    words = _name_words(ents)
    known = {w.casefold() for w in words}
    targets = [
        (w, es)
        for w, es in words.items()
        if len(w) >= MIN_NAME_WORD and w[:1].isupper() and w not in TITLES and w not in COMMON
    ]
    # Only targets that can pass are compared (a pass over every target for every capitalised word, each with a
    # distance in Python, took 23 s at 400 entities and 4,000 capitalised words): one within distance 2 shares a
    # string with the word once each drops at most 2 characters (symmetric deletion: a transposition too), and a
    # short target (limit 1: a capped distance of 2) may also pass by sounding the same. In the targets' order, so
    # the first of equal distance still wins.
    formed = {t.casefold() + f for t, _ in targets for f in _FORMS}
    by_deletion: dict[str, list[int]] = {}
    by_sound: dict[str, list[int]] = {}
    long_targets: list[int] = []  # (too long to list their deletions: ~L^2 strings of L characters; few or none)
    for i, (t, _) in enumerate(targets):
        if len(t) > DELETION_INDEX_MAX:
            long_targets.append(i)
        else:
            for variant in _deletions(t.casefold(), 2):
                by_deletion.setdefault(variant, []).append(i)
        if len(t) <= 6:
            by_sound.setdefault(sound_key(t), []).append(i)
    out = []
    for word, occ in voc.capitalised.items():
        low = word.casefold()
        if low in known or voc.lower[low] or word in COMMON or word in TITLES or len(word) < MIN_NAME_WORD:
            continue
        if occ.first is None:
            continue
        best: tuple[int, str, Entity] | None = None
        if low in formed:
            continue
        near = set(by_sound.get(sound_key(word), ()))
        if len(low) <= DELETION_INDEX_MAX + 2:  # (a longer word is more than 2 from every listed target)
            near.update(i for v in _deletions(low, 2) for i in by_deletion.get(v, ()))
        near.update(i for i in long_targets if abs(len(targets[i][0]) - len(word)) <= 2)
        for target, es in (targets[i] for i in sorted(near)):
            limit = 1 if len(target) <= 6 else 2
            d = distance(word, target, limit)
            sounds = d <= 2 and occ.count <= SOUND_ALIKE_MAX_COUNT and sound_key(word) == sound_key(target)
            if d > limit and not sounds:
                continue
            if best is None or d < best[0]:
                best = (d, target, es[0])
        if best is not None:
            out.append(Drift(word, best[2], best[1], best[0], occ.count, occ.first))
    return sorted(out, key=lambda x: (x.entity.name, x.word))


def unknown(
    project: EntityProject, voc: Vocabulary | None = None, role: str | None = None, min_count: int = 5
) -> list[Unknown]:
    words = {w.casefold() for w in _name_words(entity_index(project, role).entities)}
    voc = voc or vocabulary(project, role)
    out = [
        Unknown(w, occ.count, occ.first)
        for w, occ in voc.capitalised.items()
        if occ.first is not None
        and occ.mid_sentence >= min_count
        and w not in COMMON
        and len(w) >= 3
        and w.casefold() not in words
        and not voc.lower[w.casefold()]
    ]
    return sorted(out, key=lambda u: (-u.count, u.word))


def request(project: EntityProject, params: dict[str, Any]) -> dict[str, Any]:
    """`saipling/names` (retrieval.requests.NamesParams): `drift` and/or `unknown` lists (both when neither is
    asked)."""
    from .requests import NamesParams, parse

    req = parse(NamesParams, params)
    both = not req.drift and not req.unknown
    voc = vocabulary(project, req.role)
    out: dict[str, Any] = {"words": voc.words}
    if req.drift or both:
        out["drift"] = [d.to_dict() for d in drift(project, voc, req.role)]
    if req.unknown or both:
        out["unknown"] = [u.to_dict() for u in unknown(project, voc, req.role, min_count=req.min_count or 5)]
    return out

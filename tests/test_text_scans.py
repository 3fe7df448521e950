"""The chunker's fast scans (issue 34) against the regular expressions they stand for: `sentence_cuts` gives the
cuts of `_SENTENCE_END_RE.finditer`, `camel_boundaries` every start of `_CAMEL_BOUNDARY_RE`, and
`identifier_words` the words the finditer loop found; on random text over the characters that matter and on the
paragraphs of the shared corpora (skipped when absent)."""

from __future__ import annotations

import random
import re

import pytest

from fixtures import FICTION_CORPUS, SRD_CORPUS
from saipling.markdown import chunker, terms

# stops, closers, whitespace (odd ones too), CJK stops, capitals, lower case, digits, other letters
ALPHABET = ".!?。！？…\"'”’»)]」』）\\ \t\n\u00a0\u3000aAbBzZ09xX_éÉ漢-"


def random_texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 40))) for _ in range(n)]


def corpus_paragraphs() -> list[str]:
    out: list[str] = []
    for root in (FICTION_CORPUS, SRD_CORPUS):
        if root.is_dir():
            for path in sorted(root.rglob("*.md"))[::10]:
                out += path.read_text(encoding="utf-8", errors="replace").split("\n\n")
    return out


def cuts(text: str) -> list[tuple[int, int]]:
    """The sentence cuts as the chunker made them with the pattern's finditer: (sentence end, what follows)."""
    return [(m.end(1) if m.start(1) >= 0 else m.start(), m.end()) for m in chunker._SENTENCE_END_RE.finditer(text)]


def old_identifier_words(text: str) -> str:
    """identifier_words as it was: the finditer loop over _CAMEL_BOUNDARY_RE."""
    if not any(c.isupper() for c in text):
        return ""
    words: dict[str, None] = {}
    taken = 0
    for m in terms._CAMEL_BOUNDARY_RE.finditer(text):
        i = m.start()
        if i < taken:
            continue
        start, floor = i, max(taken, i - terms.MAX_IDENTIFIER_CHARS)
        while start > floor and text[start - 1] in terms._ALNUM_CHARS:
            start -= 1
        end = terms._ALNUM_RE.match(text, i).end()  # type: ignore[union-attr]
        words[text[start:end]] = None
        taken = end
    out = dict.fromkeys(terms._parts_line(w) for w in words)
    return "\n".join(w for w in out if w)


def test_sentence_cuts_are_the_patterns() -> None:
    texts = random_texts(20_000, 1) + ["Home.” Then", 'Done.") Next', "终于。然后！好", "a.. b", "Wait… what?!  Yes"]
    assert sum(1 for t in texts for _ in chunker._SENTENCE_END_RE.finditer(t)) > 5_000
    for t in texts:
        assert chunker.sentence_cuts(t) == cuts(t), repr(t)


def test_camel_boundaries_are_every_start_of_the_pattern() -> None:
    texts = random_texts(20_000, 2) + ["XMLHttpRequest", "HTTP2Stream", "setTimeout", "aBCd", "ABc", "A", ""]
    found = 0
    for t in texts:
        want = [i for i in range(len(t)) if terms._CAMEL_BOUNDARY_RE.match(t, i)]
        found += len(want)
        assert list(terms.camel_boundaries(t)) == want, repr(t)
    assert found > 1_000


def test_identifier_words_as_before() -> None:
    texts = random_texts(20_000, 3) + ["fs.createReadStream and XMLHttpRequest then HTTP2Stream, setTimeout."]
    got = [terms.identifier_words(t) for t in texts]
    assert sum(1 for g in got if g) > 500
    assert got == [old_identifier_words(t) for t in texts]


def test_on_the_corpora() -> None:
    paras = corpus_paragraphs()
    if not paras:
        pytest.skip("../shared corpora are not present")
    for p in paras:
        assert chunker.sentence_cuts(p) == cuts(p)
        assert terms.identifier_words(p) == old_identifier_words(p)
    # (a camelCase word in prose, so the loop was exercised)
    assert any(terms.identifier_words(p) for p in paras)
    assert re.search(r"[.!?]\s", "".join(paras[:100]))

"""A bound on the rows a keyword search ranks (issue 34).

FTS5 computes bm25() for every row its MATCH finds before `ORDER BY rank LIMIT k` can keep the best k: ~4 us a
row, so a common word in a million chunks (200k rows) cost the better part of a second. A search whose terms
find more than FTS_BUDGET rows in all (estimated from the index's document frequencies, cached per term) is
ranked on its rarest terms only: the OR'ed items are taken rarest first while their rows stay within the budget
(at least the rarest one). The common terms left out weigh least in bm25 (their idf is smallest). When even the
rarest term finds more rows than the budget, only the most recently written share of them is ranked (a rowid
range, which FTS5 reads without visiting the rest). An index below the budget, or of fewer than BOUND_MIN_CHUNKS
chunks, is searched as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ...markdown.terms import WORD_RE, match_key
from ..base import KeywordQuery, KeywordTerm

FTS_BUDGET = 16_000  # rows a keyword search ranks at most (~4 us each)
# An index of fewer chunks ranks every row a query finds (at most ~0.4 s, at its most common words): the bound
# drops terms, which changes results, and the dev sets (up to 56k chunks: benchmarks/devsets) are measured without it
BOUND_MIN_CHUNKS = 100_000


@dataclass(frozen=True)
class Bound:
    query: KeywordQuery  # the query to rank (the rarest of its terms)
    share: float  # the share of its rows to rank: the most recently written (1.0: all of them)


def plan(query: KeywordQuery, doc_freqs: Callable[[Sequence[str]], tuple[dict[str, int], int]]) -> Bound | None:
    """How to rank `query` within FTS_BUDGET rows; None to rank every row it finds (a query with a prefix term
    is not bounded: its rows cannot be counted from the terms' frequencies)."""
    if any(t.prefix for t in query.terms):
        return None
    words: dict[KeywordTerm, list[str]] = {
        t: [match_key(w.lower()) for w in WORD_RE.findall(" ".join(t.words))] for t in query.terms
    }
    if not all(words.values()):
        return None
    df, chunks = doc_freqs(list(dict.fromkeys(k for ws in words.values() for k in ws)))
    if chunks < BOUND_MIN_CHUNKS:
        return None
    rows = {t: min(df.get(k, 0) for k in ws) for t, ws in words.items()}  # a phrase: at most its rarest word's
    if sum(rows.values()) <= FTS_BUDGET:
        return None
    kept: list[KeywordTerm] = []
    total = 0
    for t in sorted(query.terms, key=lambda t: rows[t]):
        if kept and total + rows[t] > FTS_BUDGET:
            break
        kept.append(t)
        total += rows[t]
    return Bound(KeywordQuery(tuple(kept)), min(1.0, FTS_BUDGET / total) if total else 1.0)


def rowid_floor(share: float, low: int | None, high: int | None) -> int | None:
    """The smallest rowid of the most recent `share` of the rowid range [low, high]; None: no floor."""
    if share >= 1.0 or low is None or high is None:
        return None
    return int(high - (high - low) * share)

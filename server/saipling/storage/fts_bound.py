"""A bound on the rows a keyword search ranks (issue 34).

FTS5 computes bm25() for every row its MATCH finds before `ORDER BY rank LIMIT k` can keep the best k: ~4 us a
row, so a common word in a million chunks (200k rows) cost the better part of a second. A search whose terms
find more than FTS_BUDGET rows in all (estimated from the index's document frequencies, cached per term) is
ranked on its rarest terms only: the OR'ed items are taken rarest first while their rows stay within the budget
(at least the rarest one). The common terms left out weigh least in bm25 (their idf is smallest). When even the
rarest term finds more rows than the budget, only the most recently written share of them is ranked (a rowid
range, which FTS5 reads without visiting the rest). An index below the budget is searched as before.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..markdown.terms import WORD_RE, match_key

FTS_BUDGET = 16_000  # rows a keyword search ranks at most (~4 us each)
_ITEM = re.compile(r'^"(?:[^"]|"")*"$')


@dataclass(frozen=True)
class Bound:
    match: str  # the MATCH expression to rank (the rarest items of the query's)
    share: float  # the share of its rows to rank: the most recently written (1.0: all of them)


def items(match: str) -> list[str] | None:
    """The quoted items of an `"a" OR "b c"` expression (what retrieval's fts_query builds); None for any other
    form (a prefix, AND, NEAR, a column filter): such a query is not bounded."""
    parts = match.split(" OR ")
    return parts if all(_ITEM.match(p) for p in parts) else None


def plan(match: str, doc_freqs: Callable[[Sequence[str]], tuple[dict[str, int], int]]) -> Bound | None:
    """How to rank `match` within FTS_BUDGET rows; None to rank every row it finds."""
    its = items(match)
    if not its:
        return None
    words = {it: [match_key(w.lower()) for w in WORD_RE.findall(it[1:-1].replace('""', '"'))] for it in its}
    if not all(words.values()):
        return None
    df, _ = doc_freqs(list(dict.fromkeys(k for ws in words.values() for k in ws)))
    rows = {it: min(df.get(k, 0) for k in ws) for it, ws in words.items()}  # a phrase: at most its rarest word's
    if sum(rows.values()) <= FTS_BUDGET:
        return None
    kept: list[str] = []
    total = 0
    for it in sorted(its, key=lambda i: rows[i]):
        if kept and total + rows[it] > FTS_BUDGET:
            break
        kept.append(it)
        total += rows[it]
    return Bound(" OR ".join(kept), min(1.0, FTS_BUDGET / total) if total else 1.0)


def rowid_floor(share: float, low: int | None, high: int | None) -> int | None:
    """The smallest rowid of the most recent `share` of the rowid range [low, high]; None: no floor."""
    if share >= 1.0 or low is None or high is None:
        return None
    return int(high - (high - low) * share)

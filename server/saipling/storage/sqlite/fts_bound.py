"""A bound on the rows a keyword search scores (issue 34), keeping FTS5's own bm25 for every row it returns.

Why: FTS5 computes bm25() for every row its MATCH finds before `ORDER BY rank LIMIT k` keeps the best k (~2 us a
row: the row's size from the docsize table and its position lists), and bm25() first counts the rows holding each
of the query's phrases by reading their whole doclists once per statement (`xQueryPhrase`: ~45 ms for a word in
every chunk of a million). A common word in a million chunks (200k rows) cost 0.3-1.3 s.

How: a query whose terms find more than FTS_BUDGET rows in all (estimated from the index's document frequencies,
cached per term), in an index of at least BOUND_MIN_CHUNKS chunks, is scored on candidate rows only:

1. its **rare** terms (the rarest first, while their rows add up to at most FTS_BUDGET): every row holding one;
2. its **common** terms (the rest), by coordination: the rows holding all of them, then all but one, ... down to
   any one of them, each level in the order the rows were written (rowid order: the oldest first), until
   FTS_BUDGET more rows were scored;
3. terms in more than half the rows (FTS5 clamps their idf to 1e-6: they weigh nothing) choose no candidates
   unless the query has nothing else.

Each candidate is scored with the whole query (`(query) AND (candidates)` in one MATCH, the candidates an FTS5
expression too) by `saipling_bm25`, the formula of FTS5's bm25 (k1 1.2, b 0.75, its idf and average row size,
every column weight 1) with the idf of each term from the cached document frequencies instead of a doclist scan:
a returned row's score is the one FTS5's bm25() gives it over the whole index. What the bound changes is which
rows are scored: a row holding none of the rare terms and fewer of the common ones than the levels reached is
not. `Plan.outside` bounds the score such a row can have (each term adds at most (k1 + 1) x idf): when the k-th
best score found is at least that, the top k are exactly FTS5's (`exact`). An index below the budget, or of fewer
than BOUND_MIN_CHUNKS chunks, or a query with a prefix term, is ranked by FTS5's bm25() over every row as before.

A filtered search (a reader role's visibility, a folder, a glob...) checks the filter while it chooses the
candidates (keywords.py: the filter in the candidate statement's join), so only rows it keeps are scored and count
against the budget: a role's best rows are found even when a million rows it may not see come first. It looks at
no more than FILTER_SCAN x the budget matching rows; with fewer than k kept rows found by then, FTS5's bm25 ranks
every row the filter keeps.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..base import KeywordQuery, KeywordTerm

FTS_BUDGET = 2_000  # rows scored for the rare terms, and again for the common ones (~5 us each)
FILE_BUDGET = 1_000  # the same for whole files (~13 us each: a file holds its chunks' position lists)
# An index of fewer chunks ranks every row a query finds (at most ~0.1 s at its most common words): the dev sets
# (up to 56k chunks: benchmarks/devsets) are measured without the bound and keep their results
BOUND_MIN_CHUNKS = 100_000
# A filtered search (a reader role, a folder) takes as candidates only rows its filter keeps, looking at no more
# than this many x the budget matching rows (then, with fewer than k found, FTS5's bm25 over every kept row)
FILTER_SCAN = 8
MAX_LEVEL_TERMS = 6  # coordination levels over at most this many common terms (the rarest); the rest: level 1 only
MAX_LEVEL_CLAUSES = 20  # a level of more subsets than this is skipped (the next lower one covers its rows)
K1, B = 1.2, 0.75  # FTS5's bm25 constants


def fts5_idf(rows: int, holding: int) -> float:
    """FTS5's bm25 idf of a phrase held by `holding` of `rows` rows (clamped to 1e-6 when <= 0)."""
    idf = math.log((rows - holding + 0.5) / (holding + 0.5))
    return idf if idf > 0.0 else 1e-6


def term_expression(term: KeywordTerm) -> str:
    """One term as an FTS5 string (`"` doubled inside), `*` after a prefix term."""
    return '"' + " ".join(term.words).replace('"', '""') + '"' + ("*" if term.prefix else "")


def or_expression(terms: Sequence[KeywordTerm]) -> str:
    return " OR ".join(term_expression(t) for t in terms)


@dataclass(frozen=True)
class Plan:
    terms: tuple[KeywordTerm, ...]  # the query's terms, in its order (the scored expression's phrases)
    holding: tuple[int, ...]  # rows holding each term (a phrase: counted)
    rows: int  # rows in the table
    rare: tuple[KeywordTerm, ...]  # every row holding one is scored
    common: tuple[KeywordTerm, ...]  # candidates by coordination levels, the rarest first
    void: tuple[KeywordTerm, ...]  # held by more than half the rows (idf 1e-6)
    budget: int
    idfs: tuple[float, ...] = field(default=())

    def ub(self, term: KeywordTerm) -> float:
        """The most one term adds to a row's score: (k1 + 1) x idf."""
        return (K1 + 1.0) * self.idfs[self.terms.index(term)]

    def query_expression(self) -> str:
        return or_expression(self.terms)

    def levels(self, exclude: bool = True) -> list[tuple[int, str]]:
        """(level, FTS5 expression of the rows holding at least `level` of the common terms, none of the rare
        ones, fewer than `level + 1` common ones) from the most terms down to one. `exclude` False: the rows
        holding at least `level` of them (the rare terms' rows and the higher levels' not excluded: a caller that
        scored those rows already skips them itself, keywords.py; the NOT clauses cost ~2 us a row)."""
        common = list(self.common) or list(self.void)
        head = common[:MAX_LEVEL_TERMS]
        out: list[tuple[int, str]] = []
        above: str | None = None
        for level in range(len(head), 0, -1):
            terms = head if level > 1 else common
            if level > 1 and math.comb(len(head), level) > MAX_LEVEL_CLAUSES:
                continue
            subsets = [(t,) for t in terms] if level == 1 else list(itertools.combinations(terms, level))
            clauses = ["(" + " AND ".join(term_expression(t) for t in s) + ")" for s in subsets]
            expr = "(" + " OR ".join(clauses) + ")"
            excluded = [x for x in (or_expression(self.rare) if self.rare else None, above) if x] if exclude else []
            out.append((level, expr + "".join(f" NOT ({x})" for x in excluded)))
            above = expr[1:-1] if above is None else above + " OR " + expr[1:-1]
        return out

    def outside(self, full_levels: int | None) -> float:
        """The most a row that was not scored can score: it holds no rare term and fewer than `full_levels` of the
        levels' common terms (every row of the levels from the most terms down to `full_levels` was scored; None:
        no level was), any of the other common terms, and any void term."""
        common = list(self.common) or list(self.void)
        head = sorted((self.ub(t) for t in common[:MAX_LEVEL_TERMS]), reverse=True)
        held = len(head) if full_levels is None else full_levels - 1
        rest = [t for t in self.terms if t not in self.rare and t not in common[:MAX_LEVEL_TERMS]]
        return sum(head[:held]) + sum(self.ub(t) for t in rest)


def plan(
    query: KeywordQuery,
    tokens: Callable[[KeywordTerm], list[str]],
    doc_freqs: Callable[[Sequence[str]], tuple[dict[str, int], int]],
    phrase_rows: Callable[[KeywordTerm], int],
    budget: int,
) -> Plan | None:
    """How to score `query` within `budget` rows of a table (`tokens`: a term's words as the table's tokenizer
    makes them; `doc_freqs`: its rows holding each token, and its number of rows; `phrase_rows`: its rows holding
    a phrase); None: rank every row it finds with FTS5's bm25 (a query with a prefix term too: its rows cannot be
    counted from the terms' frequencies). The caller decides whether the index is big enough (BOUND_MIN_CHUNKS)."""
    if any(t.prefix for t in query.terms):
        return None
    keys = {t: tokens(t) for t in query.terms}
    if not all(keys.values()):
        return None
    df, table_rows = doc_freqs(list(dict.fromkeys(k for ks in keys.values() for k in ks)))
    estimate = {t: min(df.get(k, 0) for k in ks) for t, ks in keys.items()}  # a phrase: at most its rarest word's
    if table_rows <= 0 or sum(estimate.values()) <= budget:
        return None
    holding = {t: (estimate[t] if len(keys[t]) == 1 or not estimate[t] else phrase_rows(t)) for t in query.terms}
    void = tuple(t for t in query.terms if fts5_idf(table_rows, holding[t]) <= 1e-6)
    rare: list[KeywordTerm] = []
    total = 0
    ordered = sorted((t for t in query.terms if t not in void), key=lambda t: holding[t])
    for t in ordered:
        if total + holding[t] > budget:
            break
        rare.append(t)
        total += holding[t]
    common = tuple(t for t in ordered if t not in rare)
    if not common and not void:
        return None  # (every term is rare: the query finds at most the budget's rows)
    return Plan(
        terms=tuple(query.terms),
        holding=tuple(holding[t] for t in query.terms),
        rows=table_rows,
        rare=tuple(rare),
        common=common,
        void=void,
        budget=budget,
        idfs=tuple(fts5_idf(table_rows, holding[t]) for t in query.terms),
    )


def scorer(skipping: list[Container[int]]) -> Callable[..., float | None]:
    """`saipling_bm25(table, n1, n2, ...)`: FTS5's bm25 (every column weight 1) of the current row over the first
    len(holding) phrases of the MATCH expression, phrase i held by n_i rows of the table (FTS5 counts them by
    reading the phrase's doclist); higher is better (-bm25, as the keyword index scores). None (NULL), unscored,
    for a row whose rowid is in `skipping[0]` (the rows a bounded search scored already: keywords.py). Registered
    on a connection by its first bounded search (keywords.py). (One function, no call inside: a row costs ~5 us.)"""

    def score(api: Any, *holding: int) -> float | None:
        skip = skipping[0]
        if skip and api.rowid in skip:
            return None
        consts = api.aux_data
        if consts is None:  # once per statement: the table's row count and average row size, the phrases' idfs
            rows = api.row_count
            average = api.column_total_size(-1) / max(1, rows)
            consts = api.aux_data = (average, tuple(enumerate(fts5_idf(rows, n) for n in holding)))
        average, idfs = consts
        # (the sum in FTS5's order of operations: its bm25() gives the same float for the row)
        norm = K1 * (1.0 - B + B * api.column_size(-1) / average) if average else K1
        total = 0.0
        # (a phrase's columns first: a candidate holds a few of the query's phrases, and asking for every column's
        # offsets of an absent one cost ~0.7 us; a present one counted column by column: ~1.6 us a row less in all)
        columns = api.phrase_columns
        offsets = api.phrase_column_offsets
        for i, idf in idfs:
            held = columns(i)
            if held:
                n = 0
                for column in held:
                    n += len(offsets(i, column))
                total += idf * (n * (K1 + 1.0)) / (n + norm)
        return total

    return score

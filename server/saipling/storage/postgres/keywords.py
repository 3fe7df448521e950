"""Keyword search on PostgreSQL: the terms of a query as tsqueries, scored with FTS5's BM25 (k1 1.2, b 0.75, the
same IDF floor) computed in SQL from the chunk's tsvector, so scores and rankings match the SQLite backend's.

A term is a word, a phrase (its words adjacent: `<->`) or a prefix (a CJK word: FTS5's unicode61 keeps a run of CJK
as one token, and the query word matches a prefix of it). Terms are OR'ed, as `markdown.terms.fts_query` does.
A phrase's term frequency in a chunk is the least of its words' (an approximation: FTS5 counts the phrase's
occurrences)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

K1 = 1.2
B = 0.75

_TERM_RE = re.compile(r'"((?:[^"]|"")*)"(\*?)')


@dataclass(frozen=True)
class Term:
    text: str  # as typed (one word or a phrase), folded and stemmed by the database
    prefix: bool = False


def terms_of_match(match: str) -> list[Term]:
    """The terms of an FTS5 MATCH expression as markdown.terms.fts_query writes it: `"a b" OR "c" OR "東京"*`."""
    return [Term(m.group(1).replace('""', '"'), bool(m.group(2))) for m in _TERM_RE.finditer(match)]


def idf(n_docs: int, df: int) -> float:
    """FTS5's IDF: log((N - n + 0.5) / (n + 0.5)), at least 1e-6."""
    ratio = (n_docs - df + 0.5) / (df + 0.5)  # (df > N for an instant while another process writes)
    value = math.log(ratio) if n_docs and ratio > 0 else 0.0
    return value if value > 0 else 1e-6


# One term's tsquery: a phrase of its folded, stemmed words, or a prefix of its one word
TERM_TSQUERY = (
    "CASE WHEN %(prefix)s THEN to_tsquery('saipling', quote_literal(btrim(saipling_fold(%(text)s))) || ':*')"
    " ELSE phraseto_tsquery('saipling', saipling_fold(%(text)s)) END"
)


def bm25_expr(lexemes: list[list[str]], phrases: list[str | None], idfs: list[float], avgdl: float) -> tuple[str, list]:
    """The SQL expression of a chunk's BM25 (higher is better) over `c.tsv`/`c.doclen`, and its parameters."""
    parts: list[str] = []
    params: list = []
    norm = f"({K1} * ({1 - B} + {B} * c.doclen / %s::float8))"
    for lex, phrase, weight in zip(lexemes, phrases, idfs, strict=True):
        if not lex:
            continue
        if len(lex) == 1 and phrase is None:
            tf = "saipling_tf(c.tsv, %s)"
            tf_params: list = [lex[0]]
        else:
            tf = (
                "(CASE WHEN c.tsv @@ %s::tsquery THEN greatest(1, least("
                + ", ".join("saipling_tf(c.tsv, %s)" for _ in lex)
                + ")) ELSE 0 END)"
            )
            tf_params = [phrase, *lex]
        parts.append(f"(%s::float8 * {tf} * {K1 + 1} / nullif({tf} + {norm}, 0))")
        params += [weight, *tf_params, *tf_params, max(avgdl, 1e-9)]
    if not parts:
        return "0::float8", []
    return "coalesce(" + " + ".join(f"coalesce({p}, 0)" for p in parts) + ", 0)", params

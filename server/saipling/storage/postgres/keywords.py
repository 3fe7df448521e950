"""Keyword search on PostgreSQL: the terms of a query as tsqueries, scored with FTS5's BM25 (k1 1.2, b 0.75, the
same IDF floor) computed in SQL, so scores and rankings match the SQLite backend's.

A term of one word is scored from its postings (schema.py, migration 4: a row per lexeme of a chunk or file, with
its term frequency and the document's length, under a btree on (ws, lexeme)): a search reads the rows of its words
only (`postings_sql`). A phrase or a prefix is scored from the tsvector of each chunk holding it (`bm25_sql`), as
the positions it needs are there: fewer rows, those holding every word of the phrase.

A term is a word, a phrase (its words adjacent: `<->`) or a prefix (a CJK word: FTS5's unicode61 keeps a run of CJK
as one token, and the query word matches a prefix of it): a `KeywordTerm` of storage/base.py. Terms are OR'ed.
A phrase's term frequency in a chunk is the least of its words' (an approximation: FTS5 counts the phrase's
occurrences)."""

from __future__ import annotations

import math

K1 = 1.2
B = 0.75


def idf(n_docs: int, df: int) -> float:
    """FTS5's IDF: log((N - n + 0.5) / (n + 0.5)), at least 1e-6."""
    ratio = (n_docs - df + 0.5) / (df + 0.5)  # (df > N for an instant while another process writes)
    value = math.log(ratio) if n_docs and ratio > 0 else 0.0
    return value if value > 0 else 1e-6


# One term's tsquery over two SQL expressions (`TERM_TSQUERY_OF % {"prefix": ..., "text": ...}`): a phrase of its
# folded, stemmed words, or a prefix of its one word
TERM_TSQUERY_OF = (
    "CASE WHEN %(prefix)s THEN to_tsquery('saipling', quote_literal(btrim(saipling_fold(%(text)s))) || ':*')"
    " ELSE phraseto_tsquery('saipling', saipling_fold(%(text)s)) END"
)


def bm25_sql(
    lexemes: list[list[str]], phrases: list[str | None], idfs: list[float], avgdl: float
) -> tuple[str, list, str, list]:
    """A chunk's BM25 (higher is better) over `c.tsv`/`c.doclen`: (a LATERAL join computing each term's frequency
    once, its parameters, the score expression over it, its parameters). `OFFSET 0` keeps the planner from
    inlining the frequencies into the score, which names each twice. Decompressing the tsvector once per row
    instead of once per term made a 12-word SciFact query's scoring 2.2-2.6x faster (864 -> 335 ms, 5,067 rows)."""
    freqs: list[str] = []
    fparams: list = []
    parts: list[str] = []
    sparams: list = []
    norm = f"({K1} * ({1 - B} + {B}::float8 * c.doclen / %s::float8))"
    for lex, phrase, weight in zip(lexemes, phrases, idfs, strict=True):
        if not lex:
            continue
        t = f"tf.t{len(freqs)}"
        if len(lex) == 1 and phrase is None:
            freqs.append(f"saipling_tf(d.v, %s) AS t{len(freqs)}")
            fparams.append(lex[0])
        else:
            least = ", ".join("saipling_tf(c.tsv, %s)" for _ in lex)
            freqs.append(
                f"(CASE WHEN c.tsv @@ %s::tsquery THEN greatest(1, least({least})) ELSE 0 END) AS t{len(freqs)}"
            )
            fparams += [phrase, *lex]
        parts.append(f"coalesce(%s::float8 * {t} * {K1 + 1} / nullif({t} + {norm}, 0), 0)")
        sparams += [weight, max(avgdl, 1e-9)]
    if not parts:
        return "", [], "0::float8", []
    # the tsvector decompressed once per row (`|| ''` makes a new value), not once per term
    lateral = (
        " CROSS JOIN LATERAL (SELECT c.tsv || ''::tsvector AS v OFFSET 0) d"
        f" CROSS JOIN LATERAL (SELECT {', '.join(freqs)} OFFSET 0) tf"
    )
    return lateral, fparams, " + ".join(parts), sparams


def part_sql(tf: str, doclen: str, weight: str, avgdl: str) -> str:
    """One term's BM25 over SQL expressions, written as `bm25_sql` writes it (the same float operations: the same
    scores to the last bit)."""
    return f"{weight} * {tf} * {K1 + 1} / nullif({tf} + ({K1} * ({1 - B} + {B}::float8 * {doclen} / {avgdl})), 0)"


def postings_sql(table: str, by_level: bool) -> str:
    """The BM25 part of each posting of the query's one-word terms in `chunk_terms` or `file_terms`: rows (id,
    part) from four parameters (the collection's average length, the lexemes, their IDFs, the workspace), then
    the reader's levels when `by_level` (the chunk's visibility level, which chunk postings carry). A lexeme repeated in
    the arrays counts twice, as a term repeated in the query does in `bm25_sql`."""
    key = "chunk_id" if table == "chunk_terms" else "file_id"
    level = " AND p.level = ANY(%s)" if by_level else ""
    return (
        f"SELECT p.{key} AS id, {part_sql('p.tf', 'p.doclen', 'w.idf', '%s::float8')} AS part"
        " FROM unnest(%s::text[], %s::float8[]) w(lexeme, idf)"
        f" JOIN {table} p ON p.ws = %s AND p.lexeme = w.lexeme{level}"
    )


def is_single(tsquery: str, lexemes: list[str], phrase: bool) -> bool:
    """True for a term scored from its postings: one word, neither a prefix nor a phrase (its tsquery the one
    lexeme: `'holm'`)."""
    return not phrase and len(lexemes) == 1 and tsquery == "'" + lexemes[0].replace("'", "''") + "'"

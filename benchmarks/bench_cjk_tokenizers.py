"""CJK keyword search: three ways to index CJK text, side by side on the cjk dev set (issue 37), by file-level
recall@10 per query kind and the keyword index's size.

  unicode61  today's tokenizer alone: a run of CJK text is one token, a query word matches a run's start (prefix)
  bigrams    + a column of each run's overlapping character pairs (markdown.terms.cjk_bigrams, what saipling
             indexes); a query word is the phrase of its bigrams (markdown.terms.keyword_terms)
  trigram    + a second FTS5 table with the `trigram` tokenizer over the CJK runs; a query word of 3+ characters
             is a substring match, a shorter one cannot be searched (FTS5's trigram needs 3 characters), a
             sentence is the OR of its trigrams

Each file of the corpus is one document (the poems are short); the index size is the bytes of the FTS5 tables'
pages (dbstat), after the same rows are inserted into each. Needs the cjk corpus (`apt-get install fortunes-zh`).

    python benchmarks/bench_cjk_tokenizers.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchutil as bu  # noqa: E402
import _devsets as ds  # noqa: E402

K = 10


def main() -> None:
    p = bu.parser(__doc__.split("\n")[0])
    args = p.parse_args()
    bu.banner("CJK tokenizers: unicode61, bigrams, trigram", args.quick)
    src = ds.source("cjk")
    if src is None:
        return
    import apsw

    from saipling.markdown.terms import CJK_RUN_RE, MAX_CJK_PHRASE, cjk_bigrams
    from saipling.storage.base import KeywordQuery
    from saipling.storage.sqlite.keywords import match_expression
    from saipling.storage.sqlite.schema import FTS_TOKENIZE

    def fts_query(q: str) -> str | None:  # what the SQLite backend searches for a query
        query = KeywordQuery.parse(q)
        return match_expression(query) if query is not None else None

    rows = ds.load(ds.SETS["cjk"].path)
    files = sorted(str(f.relative_to(src)) for f in src.rglob("*.md"))
    texts = [(src / f).read_text(encoding="utf-8") for f in files]
    conn = apsw.Connection(":memory:")
    conn.execute(f"CREATE VIRTUAL TABLE plain USING fts5(text, tokenize='{FTS_TOKENIZE}')")
    conn.execute(f"CREATE VIRTUAL TABLE bigram USING fts5(text, cjk_words, tokenize='{FTS_TOKENIZE}')")
    conn.execute("CREATE VIRTUAL TABLE tri USING fts5(runs, tokenize='trigram')")
    for i, t in enumerate(texts, 1):
        runs = "\n".join(m.group(0) for m in CJK_RUN_RE.finditer(t))
        conn.execute("INSERT INTO plain(rowid, text) VALUES (?, ?)", (i, t))
        conn.execute("INSERT INTO bigram(rowid, text, cjk_words) VALUES (?, ?, ?)", (i, t, cjk_bigrams(t)))
        conn.execute("INSERT INTO tri(rowid, runs) VALUES (?, ?)", (i, runs))

    def plain_match(q: str) -> str | None:  # today's query: each word a prefix of a run
        words = [m.group(0) for m in CJK_RUN_RE.finditer(q)]
        return " OR ".join(f'"{w}"*' for w in words) or None

    def tri_match(q: str) -> str | None:
        terms = []
        for run in (m.group(0) for m in CJK_RUN_RE.finditer(q)):
            if len(run) < 3:
                continue  # the trigram tokenizer cannot match fewer than 3 characters
            terms.append(f'"{run}"')
            if len(run) > MAX_CJK_PHRASE:
                terms += [f'"{run[i : i + 3]}"' for i in range(len(run) - 2)]
        return " OR ".join(dict.fromkeys(terms)) or None

    ways = {
        "unicode61": ("plain", plain_match),
        "bigrams": ("bigram", fts_query),
        "trigram": ("tri", tri_match),
    }
    table_rows = []
    sizes = {}
    for name, (table, build) in ways.items():
        sizes[name] = sum(
            int(r[0])
            for r in conn.execute(
                "SELECT sum(pgsize) FROM dbstat WHERE name LIKE ? || '%'",
                (table,),
            )
            if r[0] is not None
        )
        if name == "trigram":  # (a table beside today's, which keeps the text)
            sizes[name] += sizes["unicode61"]
        hits: dict[str, list[bool]] = {"exact": [], "paraphrase": []}
        for q in rows:
            match = build(q.query)
            found: list[str] = []
            if match:
                found = [
                    files[int(r[0]) - 1]
                    for r in conn.execute(
                        f"SELECT rowid FROM {table} WHERE {table} MATCH ? ORDER BY bm25({table}) LIMIT ?",
                        (match, K),
                    )
                ]
            hits[q.kind].append(q.file in found)
        rec = {k: sum(v) / len(v) for k, v in hits.items() if v}
        table_rows.append((name, f"{rec['exact']:.2f}", f"{rec['paraphrase']:.2f}", f"{sizes[name] / 1024:.0f} KB"))
    print(f"\n{len(files)} files, {len(rows)} queries; recall@10 by file, keyword-only")
    print(bu.table(["index", "exact R@10", "paraphrase R@10", "FTS5 tables in all"], table_rows))


if __name__ == "__main__":
    main()

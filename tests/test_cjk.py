"""CJK keyword search (issue 37): a Chinese or Japanese word is found anywhere inside a run of CJK text (FTS5's
unicode61 tokenizer makes a whole run one token), never across two runs; snippets mark it; an index made before
the CJK column (schema 5) gets it when opened; Latin text keeps its tokens and its BM25 scores exactly."""

from __future__ import annotations

from pathlib import Path

import apsw

from fixtures import chunk_row, file_record, make_project, open_project
from saipling.storage.base import KeywordQuery
from saipling.storage.sqlite import schema
from saipling.storage.sqlite.store import SqliteStore as Store

POEMS = {
    "meng.md": "# 梦李白\n\n作者：杜甫\n\n浮云终日行，游子久不至。\n\n冠盖满京华，斯人独憔悴。\n",
    "spring.md": "# 春江晚景\n\n竹外桃花三两枝，春江水暖鸭先知。\n",
    "tokyo.md": "# 旅\n\n東京タワーは高い。夜の港は静かだ。\n",
    "harbour.md": "# Harbour\n\nThe storm drowned the harbour lights; nothing else to see in this note.\n",
}


def lexical(project, query: str) -> list[str]:
    return [r["filePath"] for r in project.search({"query": query, "mode": "lexical"})["results"]]


def test_a_cjk_word_inside_a_run_is_found(tmp_path: Path) -> None:
    with open_project(make_project(tmp_path, POEMS)) as p:
        p.index()
        assert lexical(p, "京华") == ["meng.md"]  # the end of "冠盖满京华"
        assert lexical(p, "鸭先知") == ["spring.md"]  # three characters, the end of a run
        assert lexical(p, "タワー") == ["tokyo.md"]  # katakana inside "東京タワーは高い"
        assert lexical(p, "憔") == ["meng.md"]  # one character, inside a run
        assert lexical(p, "悴") == ["meng.md"]  # one character, the run's last
        assert lexical(p, "东京") == []  # simplified 东 is another character than 東


def test_a_cjk_word_is_not_found_across_two_runs(tmp_path: Path) -> None:
    with open_project(make_project(tmp_path, POEMS)) as p:
        p.index()
        assert lexical(p, "至冠") == []  # "…不至。" then "冠盖…": two runs
        assert lexical(p, "高い夜") == []


def test_the_snippet_marks_the_cjk_word_inside_its_run(tmp_path: Path) -> None:
    with open_project(make_project(tmp_path, POEMS)) as p:
        p.index()
        (r,) = p.search({"query": "京华", "mode": "lexical"})["results"]
        assert "冠盖满**京华**，斯人独憔悴" in r["snippet"]
        (r,) = p.search({"query": "タワー", "mode": "lexical"})["results"]
        assert "東京**タワー**は高い" in r["snippet"]


def test_an_edit_reindexes_the_cjk_words(tmp_path: Path) -> None:
    root = make_project(tmp_path, POEMS)
    with open_project(root) as p:
        p.index()
        (root / "spring.md").write_text("# 春江晚景\n\n蒌蒿满地芦芽短，正是河豚欲上时。\n", encoding="utf-8")
        p.index()
        assert lexical(p, "鸭先知") == []
        assert lexical(p, "河豚") == ["spring.md"]


def test_latin_text_gets_no_cjk_words_and_the_same_bm25(tmp_path: Path) -> None:
    """English results are unchanged: the keyword scores of Latin text equal those of a keyword table made as
    before the CJK column (three columns), over the same rows."""
    files = {f"n{i}.md": f"# Note {i}\n\nThe storm {'drowned ' * (i % 3)}the harbour {i} lights.\n" for i in range(8)}
    with open_project(make_project(tmp_path, files)) as p:
        p.index()
        conn = p.store.conn
        assert conn.execute("SELECT count(*) FROM chunks WHERE cjk_words != ''").fetchall() == [(0,)]
        conn.execute(
            "CREATE VIRTUAL TABLE temp.before USING fts5(text, heading_path, ident_words, "
            f"tokenize='{schema.FTS_TOKENIZE}')"
        )
        conn.execute(
            "INSERT INTO temp.before(rowid, text, heading_path, ident_words) SELECT id, text, heading_path,"
            " ident_words FROM chunks"
        )
        for words in (["storm"], ["drowned", "harbour"], ["harbour", "lights", "note"]):
            query = KeywordQuery.of(((w,), False) for w in words)
            assert query is not None
            match = " OR ".join(f'"{w}"' for w in words)
            got = [(c, -s) for c, s in p.store.keyword_search(query, 20)]  # (-bm25 out: higher is better)
            want = conn.execute(
                "SELECT rowid, bm25(before, 1.0, 1.0, 1.0) AS r FROM temp.before WHERE before MATCH ? ORDER BY r,"
                " rowid",
                (match,),
            ).fetchall()
            assert got and [c for c, _ in got] == [c for c, _ in want]
            assert [round(b, 9) for _, b in got] == [round(b, 9) for _, b in want]


def test_an_index_of_schema_5_gets_the_cjk_words_when_opened(tmp_path: Path) -> None:
    """An index written before the CJK column: its chunks and whole-file keywords get their bigrams on open."""
    db = tmp_path / "index.db"
    conn = schema.connect(db)
    for number, sql in enumerate(schema._MIGRATIONS[:5], 1):
        with conn:
            conn.execute(sql)
            conn.execute(f"PRAGMA user_version={number}")
    rows = [("meng.md", "冠盖满京华，斯人独憔悴。"), ("other.md", "The storm drowned the harbour.")]
    for n, (path, text) in enumerate(rows, 1):
        rec, ch = file_record(path), chunk_row(0, text)
        conn.execute(  # (ident_words NULL, as in a row indexed before migration 4)
            "INSERT INTO chunks(path, chunk_index, kind, heading_path, content_hash, text, ident_words)"
            " VALUES (?, ?, ?, ?, ?, ?, NULL)",
            (path, ch.chunk_index, ch.kind, ch.heading_path, ch.content_hash, text),
        )
        conn.execute(
            "INSERT INTO files(path, content_hash, mtime_ns, size) VALUES (?, ?, ?, ?)",
            (path, rec.content_hash, 1, 1),
        )
        conn.execute("INSERT INTO files_fts(rowid, text) VALUES (?, ?)", (n, text))
    conn.close()
    store = Store.open(db)
    try:
        assert store.conn.execute("PRAGMA user_version").fetchall() == [(len(schema._MIGRATIONS),)]
        hits = store.keyword_search(_q("京华"), 10)
        assert [store.chunk_paths([c for c, _ in hits])[c] for c, _ in hits] == ["meng.md"]
        assert [p for p, _, _ in store.file_keyword_search(_q("京华"), 10)] == ["meng.md"]
        assert [p for p, _, _ in store.file_keyword_search(_q("斯人独憔悴"), 10)] == ["meng.md"]  # its text kept too
        assert [p for p, _, _ in store.file_keyword_search(_q("storm"), 10)] == ["other.md"]
        words = store.conn.execute("SELECT path, cjk_words FROM chunks ORDER BY path").fetchall()
        assert words == [("meng.md", "冠盖 盖满 满京 京华 华\n斯人 人独 独憔 憔悴 悴"), ("other.md", "")]
    finally:
        store.close()


def test_a_plain_sqlite_connection_searches_the_cjk_column(tmp_path: Path) -> None:
    """The CJK column is a plain stored column: a plain SQLite connection (no saipling functions) reads and
    searches the index (no generated column or trigger calls a saipling function)."""
    with open_project(make_project(tmp_path, POEMS)) as p:
        p.index()
        db = p.store.path
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    got = conn.execute(
        "SELECT c.path FROM chunks_fts JOIN chunks c ON c.id = chunks_fts.rowid WHERE chunks_fts MATCH '\"京华\"'"
    ).fetchall()
    assert got == [("meng.md",)]
    assert conn.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH 'storm'").fetchall() == [(1,)]


def _q(word: str) -> KeywordQuery:
    """The keyword query of one word as written (one token: a CJK run as the text column holds it)."""
    query = KeywordQuery.of([((word,), False)])
    assert query is not None
    return query


def test_the_cjk_dev_set_has_exact_and_paraphrase_queries() -> None:
    import json

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "devsets" / "cjk.jsonl"
    rows = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    assert sum(r["kind"] == "exact" for r in rows) >= 20 and sum(r["kind"] == "paraphrase" for r in rows) >= 20
    assert len({r["id"] for r in rows}) == len(rows)
    # an exact query is a CJK word the keyword index sees inside a run: never the start of its line
    for r in rows:
        if r["kind"] == "exact" and r["line"] > 1:
            assert not r["evidence"].startswith(r["query"]), r["id"]

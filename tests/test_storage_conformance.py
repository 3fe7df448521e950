"""The storage conformance suite (issue 32): what storage/base.py promises, checked through the interface alone, on
every backend. A backend is one entry of BACKENDS (a function of the test's tmp_path and pytest request returning an
open `IndexStore` on a fresh, empty index); the `pg` branch adds "postgres" (a workspace on its session's server).

Only `IndexStore` methods and the records of storage/base.py are used here: no SQL, no backend module, no driver.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from saipling.errors import IndexBusy
from saipling.storage import open_store
from saipling.storage.base import (
    ChapterFile,
    ChunkFilter,
    ChunkRow,
    EntityRow,
    FileMentionRows,
    FileRecord,
    FileWrite,
    HeadingRow,
    IndexStore,
    KeywordQuery,
    KeywordTerm,
    PendingChunk,
    ProseRow,
    SearchLogEntry,
    StoredChunk,
    StoredFile,
    StoredMention,
    StoreStats,
    cache_key,
    iter_protocols,
)


def _sqlite(tmp_path: Path, request: pytest.FixtureRequest) -> IndexStore:
    return open_store(tmp_path / "project" / ".saipling" / "index.db")


def _postgres(tmp_path: Path, request: pytest.FixtureRequest) -> IndexStore:
    """A fresh workspace on the session's PostgreSQL (tests/pg_fixture.py; skipped, with the reason, without it)."""
    return open_store(request.getfixturevalue("pg_url"))


# backend name -> how to open a fresh, empty index of it
BACKENDS: dict[str, Callable[[Path, pytest.FixtureRequest], IndexStore]] = {"sqlite": _sqlite, "postgres": _postgres}

DIMS = 8
BASE = "fake-model"  # what the indexer configures: the provider's vector key
MODEL = cache_key(BASE, DIMS)  # what it writes vectors under: that key and their size
# a stored vector comes back within float16 rounding (SQLite stores float16 since schema 9; PostgreSQL float32)
F16 = 1e-3


@pytest.fixture(params=sorted(BACKENDS))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[IndexStore]:
    s = BACKENDS[request.param](tmp_path, request)
    yield s
    s.close()


# -- building blocks -------------------------------------------------------------------------------------------
def h(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def unit(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=DIMS).astype(np.float32)
    return v / np.linalg.norm(v)


def record(path: str, content: str = "x", **meta: Any) -> FileRecord:
    return FileRecord(
        path=path,
        content_hash=h(path + content),
        mtime_ns=meta.pop("mtime_ns", 1),
        size=meta.pop("size", len(content)),
        file_type=meta.pop("file_type", "document"),
        encoding="utf-8",
        **meta,
    )


def row(i: int, text: str, heading: str = "", **meta: Any) -> ChunkRow:
    values: dict[str, Any] = {
        "kind": "section",
        "file_type": "document",
        "entity_type": None,
        "entity_name": None,
        "book_id": None,
        "chapter_id": None,
        "chapter_num": None,
        "visibility": "public",
        "corpus": "content",
    }
    values.update(meta)
    return ChunkRow(
        chunk_index=i,
        section_heading=f"## {heading}" if heading else None,
        heading_path=heading,
        start_line=i * 10 + 1,
        end_line=i * 10 + 5,
        content_hash=h(text),
        preview=text[:200],
        token_count=len(text.split()),
        text=text,
        **values,
    )


def put(store: IndexStore, path: str, *texts: str, vectors: bool = False, **meta: Any) -> list[int]:
    """Write a file of one chunk per text (the same metadata on the file and its chunks); its chunk ids."""
    file_meta = {k: v for k, v in meta.items() if k in ("visibility", "book_id", "chapter_id", "file_type")}
    chunk_meta = {k: v for k, v in meta.items() if k != "aliases" and k != "display_name"}
    rows = [row(i, t, **chunk_meta) for i, t in enumerate(texts)]
    vecs = {r.content_hash: unit(len(r.text)) for r in rows} if vectors else None
    extra = {k: meta[k] for k in ("aliases", "display_name") if k in meta}
    store.replace_file(record(path, "".join(texts), **file_meta, **extra), rows, vecs, MODEL if vectors else None)
    return [c.id for c in store.chunks_for_path(path)]


def q(*terms: str, prefix: bool = False) -> KeywordQuery:
    """Each term a phrase of its words (`prefix`: every term matches as a prefix too)."""
    query = KeywordQuery.of((tuple(t.split()), prefix) for t in terms)
    assert query is not None
    return query


def paths_of(store: IndexStore, ids: list[int]) -> list[str]:
    found = store.chunk_paths(ids)
    return [found[i] for i in ids]


def hit_paths(store: IndexStore, query: KeywordQuery, flt: ChunkFilter | None = None) -> list[str]:
    return paths_of(store, [i for i, _ in store.keyword_search(query, 50, flt)])


# -- the shape -------------------------------------------------------------------------------------------------
def test_the_backend_implements_every_protocol(store: IndexStore) -> None:
    assert isinstance(store, IndexStore)
    for proto in iter_protocols():
        assert isinstance(store, proto), proto.__name__
    assert isinstance(store.path, str) and store.readonly is False and store.rebuilt is None


# -- files and chunks ------------------------------------------------------------------------------------------
def test_replace_file_stores_the_file_and_its_chunks_in_order(store: IndexStore) -> None:
    rec = record("notes/a.md", "abc", aliases=["Al", "Ally"], display_name="Alpha", visibility="private")
    rows = [row(0, "the first chunk", "One"), row(1, "the second chunk", "Two", chapter_num=3)]
    assert store.get_file("notes/a.md") is None and store.chunks_for_path("notes/a.md") == []
    unembedded = store.replace_file(rec, rows)
    got = store.get_file("notes/a.md")
    assert isinstance(got, StoredFile)
    assert (got.path, got.content_hash, got.size, got.chunk_count) == ("notes/a.md", rec.content_hash, 3, 2)
    assert got.aliases == ["Al", "Ally"] and got.display_name == "Alpha" and got.visibility == "private"
    chunks = store.chunks_for_path("notes/a.md")
    assert all(isinstance(c, StoredChunk) for c in chunks)
    assert [(c.chunk_index, c.text, c.heading_path, c.section_heading) for c in chunks] == [
        (0, "the first chunk", "One", "## One"),
        (1, "the second chunk", "Two", "## Two"),
    ]
    assert chunks[1].chapter_num == 3 and chunks[0].chapter_num is None
    assert store.chunks_by_id([c.id for c in chunks] + [10**9]) == {c.id: c for c in chunks}
    assert store.chunks_by_id([]) == {}
    assert sorted(unembedded) == sorted(c.id for c in chunks)  # nothing embedded
    assert store.file_states()["notes/a.md"].content_hash == rec.content_hash
    assert set(store.file_states_for(["notes/a.md", "nope.md"])) == {"notes/a.md"}
    assert store.chunk_hashes() == [("notes/a.md", h("the first chunk"), 3), ("notes/a.md", h("the second chunk"), 3)]
    assert store.chunk_texts([chunks[0].id]) == {chunks[0].id: (h("the first chunk"), "One", "the first chunk")}
    assert store.total_tokens_indexed() == 6


def test_an_unchanged_chunk_keeps_its_id_and_a_changed_one_gets_a_new_one(store: IndexStore) -> None:
    first = put(store, "a.md", "alpha text", "beta text", "gamma text")
    store.replace_file(record("a.md", "v2"), [row(0, "new opening"), row(1, "alpha text"), row(2, "gamma text")])
    after = store.chunks_for_path("a.md")
    assert [c.text for c in after] == ["new opening", "alpha text", "gamma text"]
    assert after[1].id == first[0] and after[2].id == first[2]  # kept (moved) rows keep their ids
    assert after[0].id not in first
    assert [c.chunk_index for c in after] == [0, 1, 2] and after[1].start_line == 11  # moved: its new lines
    assert hit_paths(store, q("beta")) == []  # the gone chunk's keywords went with it


def test_replace_files_writes_a_batch_as_replace_file_would(store: IndexStore) -> None:
    kept = put(store, "a.md", "alpha text", "beta text")
    store.replace_files(
        [
            FileWrite(record("b.md", "1"), [row(0, "bravo lantern"), row(1, "bravo harbour")]),
            FileWrite(record("a.md", "v2"), [row(0, "new opening"), row(1, "alpha text")]),
            FileWrite(
                record("c.md", "1"),
                [row(0, "charlie lantern")],
                FileMentionRows("k1", [("people/mina.md", 0, 8, 15, "lantern")]),
            ),
        ]
    )
    assert sorted(store.file_states()) == ["a.md", "b.md", "c.md"]
    a = store.chunks_for_path("a.md")
    assert [c.text for c in a] == ["new opening", "alpha text"] and a[1].id == kept[0]  # (a stored file: ids kept)
    assert [(c.chunk_index, c.text) for c in store.chunks_for_path("b.md")] == [
        (0, "bravo lantern"),
        (1, "bravo harbour"),
    ]
    assert hit_paths(store, q("lantern")) == ["b.md", "c.md"] and hit_paths(store, q("beta")) == []
    assert [r[0] for r in store.file_keyword_search(q("harbour"), 5)] == ["b.md"]  # (the whole-file keywords too)
    assert store.mention_paths(["people/mina.md"]) == ["c.md"]
    ids = {c.id for p in ("a.md", "b.md", "c.md") for c in store.chunks_for_path(p)}
    assert len(ids) == 5 and store.stats().total_chunks == 5
    store.replace_files([])


def test_replace_files_stores_nothing_of_a_batch_that_fails(store: IndexStore) -> None:
    put(store, "a.md", "old words here")
    bad = FileWrite(record("c.md", "1"), [row(0, "first"), row(0, "the same chunk index twice")])
    with pytest.raises(Exception):  # noqa: B017 - the backend's constraint error, whatever its type
        store.replace_files([FileWrite(record("b.md", "1"), [row(0, "bravo lantern")]), bad])
    assert sorted(store.file_states()) == ["a.md"] and hit_paths(store, q("lantern")) == []
    assert [c.text for c in store.chunks_for_path("a.md")] == ["old words here"]


def test_deferred_indexes_leave_every_read_the_same(store: IndexStore) -> None:
    """A first index may drop the chunks' secondary indexes (`defer_indexes`) and build them at the end
    (`restore_indexes`): the reads they serve (by heading, content hash, chapter) answer alike meanwhile and after."""
    deferred = store.defer_indexes()
    store.replace_files(
        [
            FileWrite(record("a.md", "1"), [row(0, "the lantern room", "Fireball"), row(1, "a harbour wall")]),
            FileWrite(record("b.md", "1", chapter_id="b1"), [row(0, "lantern oil", chapter_id="b1", chapter_num=3)]),
        ]
    )
    assert store.defer_indexes() is False  # (chunks are stored: nothing is dropped now)

    def reads() -> tuple:
        return (
            [paths_of(store, [i]) for i in store.chunks_with_heading("fireball")],
            [(p, hh) for p, hh, _ in store.chunk_hashes()],
            sorted(hit_paths(store, q("lantern"))),
            (store.chapter_num_of("b.md"), store.chapter_num_of("a.md")),
        )

    during = reads()
    assert during[0] == [["a.md"]] and during[2] == ["a.md", "b.md"] and during[3] == (3, None)
    assert during[1] == [("a.md", h("the lantern room")), ("a.md", h("a harbour wall")), ("b.md", h("lantern oil"))]
    store.restore_indexes()
    store.restore_indexes()  # (nothing left to build: no change)
    assert reads() == during
    # SQLite drops them on an empty table (one database, one project); PostgreSQL's serve every workspace: kept
    assert deferred is (type(store).__name__ == "SqliteStore")


def test_delete_and_touch_and_clear(store: IndexStore) -> None:
    put(store, "a.md", "lighthouse keeper")
    put(store, "b.md", "harbor master")
    store.touch_file("a.md", 77, 5)
    assert (store.file_states()["a.md"].mtime_ns, store.file_states()["a.md"].size) == (77, 5)
    assert store.delete_file("a.md") is True and store.delete_file("a.md") is False
    assert store.get_file("a.md") is None and store.chunks_for_path("a.md") == []
    assert hit_paths(store, q("lighthouse")) == [] and hit_paths(store, q("harbor")) == ["b.md"]
    assert store.file_keyword_search(q("lighthouse"), 5) == []
    store.set_meta("kept", "yes")
    store.clear()
    assert store.file_states() == {} and hit_paths(store, q("harbor")) == [] and store.stats().total_chunks == 0
    assert store.get_meta("kept") == "yes"


def test_atomic_rolls_back_every_write_inside_it(store: IndexStore) -> None:
    put(store, "a.md", "old words here")
    with pytest.raises(RuntimeError), store.atomic():
        store.replace_file(record("a.md", "new"), [row(0, "brand new words")])
        store.set_meta("k", "v")
        store.delete_file("a.md")
        raise RuntimeError("stop")
    assert [c.text for c in store.chunks_for_path("a.md")] == ["old words here"]
    assert store.get_meta("k") is None and hit_paths(store, q("brand")) == []


# -- keyword search --------------------------------------------------------------------------------------------
def test_keyword_scores_are_higher_is_better_and_best_first(store: IndexStore) -> None:
    put(store, "once.md", "the amber lamp by the door of the old house stood there")
    put(store, "thrice.md", "amber amber amber lamp by the door of the old house")
    put(store, "none.md", "a violet lamp by the door of the old house stood there")
    hits = store.keyword_search(q("amber"), 10)
    assert paths_of(store, [i for i, _ in hits]) == ["thrice.md", "once.md"]
    assert hits[0][1] > hits[1][1]
    files = store.file_keyword_search(q("amber"), 10)
    assert [p for p, _, _ in files] == ["thrice.md", "once.md"] and files[0][1] > files[1][1]
    assert store.keyword_search(q("amber"), 1) == hits[:1]


def test_keyword_terms_phrases_prefixes_folding_and_stems(store: IndexStore) -> None:
    put(store, "a.md", "The old man walked to the Café by the sea")
    put(store, "b.md", "a man who was old drowned in the lighthouse")
    assert sorted(hit_paths(store, q("old man"))) == ["a.md"]  # a phrase: adjacent, in order
    assert sorted(hit_paths(store, q("old", "sea"))) == ["a.md", "b.md"]  # an OR of terms
    assert hit_paths(store, q("cafe")) == ["a.md"]  # case and accents folded
    assert hit_paths(store, q("drowning")) == ["b.md"]  # stemmed
    assert hit_paths(store, q("light")) == []
    assert hit_paths(store, q("light", prefix=True)) == ["b.md"]
    assert hit_paths(store, KeywordQuery((KeywordTerm(("light",), True),))) == ["b.md"]
    assert hit_paths(store, q("zebra")) == []


def test_keyword_search_reads_headings_and_identifier_words(store: IndexStore) -> None:
    rows = [row(0, "body text only", "Keeper Notes"), row(1, "call setTimeout here", ident_words="set\ntimeout")]
    store.replace_file(record("a.md", "x"), rows)
    assert hit_paths(store, q("keeper")) == ["a.md"]
    assert hit_paths(store, q("timeout")) == ["a.md"]
    assert [p for p, _, _ in store.file_keyword_search(q("timeout"), 5)] == ["a.md"]


def test_keyword_paths_give_each_matching_file_once_with_its_first_chapter(store: IndexStore) -> None:
    put(store, "ch2.md", "Mina wrote", "Mina slept", chapter_num=2, chapter_id="c2")
    put(store, "notes.md", "about Mina")
    put(store, "other.md", "nobody here")
    assert sorted(store.keyword_paths(q("mina"))) == [("ch2.md", 2), ("notes.md", None)]
    assert store.keyword_paths(q("mina"), ChunkFilter(max_chapter=1)) == [("notes.md", None)]


def test_file_keyword_search_ranks_whole_files_with_their_sizes(store: IndexStore) -> None:
    put(store, "a.md", "amber here", "violet there")
    put(store, "b.md", "violet only")
    hits = store.file_keyword_search(q("amber", "violet"), 10)
    assert [p for p, _, _ in hits][0] == "a.md" and {p for p, _, _ in hits} == {"a.md", "b.md"}
    assert {p: size for p, _, size in hits} == {"a.md": len("amber here" + "violet there"), "b.md": len("violet only")}
    only_b = store.file_keyword_search(q("amber", "violet"), 10, ChunkFilter(only_paths=["b.md"]))
    assert [p for p, _, _ in only_b] == ["b.md"]


def test_term_doc_freqs_count_chunks_by_stemmed_term(store: IndexStore) -> None:
    from saipling.markdown.terms import match_key

    put(store, "a.md", "drowning sailors", "a drowned man", "dry land")
    put(store, "b.md", "sailors sing")
    df, n = store.term_doc_freqs([match_key("drowning"), match_key("sailors"), match_key("zebra")])
    assert n == 4
    assert df == {match_key("drowning"): 2, match_key("sailors"): 2, match_key("zebra"): 0}
    store.delete_file("b.md")
    df, n = store.term_doc_freqs([match_key("sailors")])
    assert (df, n) == ({match_key("sailors"): 1}, 3)


def test_a_cjk_word_is_found_inside_a_run_not_across_punctuation(store: IndexStore) -> None:
    """Chinese puts no spaces between words: a two-character word inside a longer run is found (by chunk and by
    file), a longer word too, one character as the start of its pairs; a pair across punctuation is not."""
    put(store, "poem.md", "冠盖满京华，斯人独憔悴。")
    put(store, "latin.md", "no such words here")

    def found(text: str) -> tuple[list[str], list[str]]:
        query = KeywordQuery.parse(text)
        assert query is not None
        files = [p for p, _s, _n in store.file_keyword_search(query, 10)]
        return hit_paths(store, query), files

    assert found("京华") == (["poem.md"], ["poem.md"])  # (inside the run 冠盖满京华, not its start)
    assert found("满京华") == (["poem.md"], ["poem.md"])
    assert found("独憔悴") == (["poem.md"], ["poem.md"])
    assert found("华斯") == ([], [])  # (华，斯: across the comma)
    assert found("京") == (["poem.md"], ["poem.md"])  # (one character: the pairs it starts)


# -- filters ---------------------------------------------------------------------------------------------------
@pytest.fixture
def shelf(store: IndexStore) -> IndexStore:
    """Five files, one chunk each, all holding the word `lantern`."""
    put(store, "pub/a.md", "lantern a", visibility="public", book_id="the-book", chapter_num=1, entity_type="Scene")
    put(store, "pub/b.md", "lantern b", visibility="Public", chapter_num=5, file_type="world")
    put(store, "priv/c.md", "lantern c", visibility="private", book_id="other")
    put(store, "priv/d.md", "lantern d", visibility=None)
    put(store, "notes/é.md", "lantern e", visibility="secret", corpus="reference")
    return store


FILTERS: list[tuple[ChunkFilter, set[str]]] = [
    (ChunkFilter(), {"pub/a.md", "pub/b.md", "priv/c.md", "priv/d.md", "notes/é.md"}),
    (ChunkFilter(visibility=["public"]), {"pub/a.md", "pub/b.md", "priv/d.md"}),  # case folded; NULL is public
    (ChunkFilter(visibility=["public", "secret"]), {"pub/a.md", "pub/b.md", "priv/d.md", "notes/é.md"}),
    (ChunkFilter(visibility=[]), set()),  # fail closed
    (ChunkFilter(known_by="Mina"), set()),  # a name never resolved: nothing known (fail closed)
    (ChunkFilter(only_paths=[]), set()),
    (ChunkFilter(only_paths=["pub/a.md", "x.md"]), {"pub/a.md"}),
    (ChunkFilter(exclude_paths=["pub/a.md", "priv/c.md"]), {"pub/b.md", "priv/d.md", "notes/é.md"}),
    (ChunkFilter(path_prefix="pub/"), {"pub/a.md", "pub/b.md"}),
    (ChunkFilter(path_prefix="pri"), {"priv/c.md", "priv/d.md"}),
    (ChunkFilter(glob="priv/*.md"), {"priv/c.md", "priv/d.md"}),
    (ChunkFilter(file_types=["World"]), {"pub/b.md"}),
    (ChunkFilter(entity_types=["scene"]), {"pub/a.md"}),
    (ChunkFilter(book_id="The Book"), {"pub/a.md"}),  # a title names the book's slug
    (ChunkFilter(book_scope="other"), {"priv/c.md", "pub/b.md", "priv/d.md", "notes/é.md"}),
    (ChunkFilter(max_chapter=2), {"pub/a.md", "priv/c.md", "priv/d.md", "notes/é.md"}),
    (ChunkFilter(corpus="reference"), {"notes/é.md"}),
    (ChunkFilter(visibility=["public"], path_prefix="pub/", max_chapter=3), {"pub/a.md"}),
]


@pytest.mark.parametrize(("flt", "expected"), FILTERS, ids=[str(i) for i in range(len(FILTERS))])
def test_filters_hold_in_every_search(shelf: IndexStore, flt: ChunkFilter, expected: set[str]) -> None:
    assert flt.is_empty() == (flt == ChunkFilter())
    assert set(hit_paths(shelf, q("lantern"), flt)) == expected
    assert {p for p, _, _ in shelf.file_keyword_search(q("lantern"), 10, flt)} == expected
    assert {p for p, _ in shelf.keyword_paths(q("lantern"), flt)} == expected
    ids = [c.id for p in shelf.file_states() for c in shelf.chunks_for_path(p)]
    assert {p for _, p in shelf.chunk_ids_for_paths(list(shelf.file_states()), flt)} == expected
    assert len(ids) == 5


def test_a_non_ascii_path_prefix_matches_either_normal_form(shelf: IndexStore) -> None:
    import unicodedata

    nfd = unicodedata.normalize("NFD", "notes/é")
    assert hit_paths(shelf, q("lantern"), ChunkFilter(path_prefix=nfd)) == ["notes/é.md"]


def test_known_by_passes_files_that_mention_the_entity_or_are_its_pov(store: IndexStore) -> None:
    put(store, "ch1.md", "the lantern burned")
    put(store, "ch2.md", "the lantern went out")
    put(store, "ch3.md", "the lantern again")
    store.write_mentions("ch1.md", FileMentionRows("k1", [("people/mina.md", 0, 4, 8, "Mina")]))
    store.write_mentions("ch2.md", FileMentionRows("k1", [], pov="mina harker"))
    flt = ChunkFilter(known_by="Mina", known_entities=["people/mina.md"], known_povs=["mina harker"])
    assert sorted(hit_paths(store, q("lantern"), flt)) == ["ch1.md", "ch2.md"]
    nobody = ChunkFilter(known_by="Mina", known_entities=[], known_povs=[])
    assert hit_paths(store, q("lantern"), nobody) == []


def test_heading_and_entity_lookups(store: IndexStore) -> None:
    rows = [
        row(0, "---\nname: Mina\n---", kind="frontmatter"),
        row(1, "Mina's story", "Fireball"),
        row(2, "a member", "fs.createReadStream(path)"),
    ]
    store.replace_file(record("people/mina.md", "m", display_name="Mina", aliases=["Wilhelmina"]), rows)
    put(store, "spells.md", "the spell", heading="fireball")
    ids = {c.chunk_index: c.id for c in store.chunks_for_path("people/mina.md")}
    spell = store.chunks_for_path("spells.md")[0].id
    assert store.chunks_with_heading("FIREBALL") == [ids[1], spell]  # ASCII case ignored, path order
    assert store.chunks_with_heading("fireball", ChunkFilter(only_paths=["spells.md"])) == [spell]
    assert store.chunks_with_name_heading("createReadStream") == [ids[2]]
    assert store.entity_chunks("mina") == [ids[1]]  # its first chunk that is not the frontmatter
    assert store.entity_chunks("wilhelmina") == [ids[1]]  # an alias
    assert store.entity_chunks("Mina", ChunkFilter(only_paths=[])) == []
    (entity,) = store.entities()
    assert entity == EntityRow("people/mina.md", None, None, "Mina", ("Wilhelmina",), "document", "public")
    headings = store.headings()
    assert all(type(r) is HeadingRow for r in headings)
    assert [(r.path, r.section_heading) for r in headings] == [
        ("people/mina.md", "## Fireball"),
        ("people/mina.md", "## fs.createReadStream(path)"),
        ("spells.md", "## fireball"),
    ]
    prose = store.prose()
    assert all(type(r) is ProseRow for r in prose) and len(prose) == 4
    assert prose[0].path == "people/mina.md" and prose[0].text.startswith("---") and prose[-1].text == "the spell"


# -- vectors and the embedding cache ---------------------------------------------------------------------------
def test_vectors_are_stored_searched_and_filtered(store: IndexStore) -> None:
    assert store.has_vectors() is False and store.knn(unit(1), 5) == []
    assert store.configure_vectors("fake", BASE, DIMS) is False
    assert store.has_vectors() and store.vector_model() == (BASE, DIMS)
    a = put(store, "a.md", "one chunk here", "two chunk here", vectors=True)
    b = put(store, "b.md", "three chunks", vectors=True, visibility="private")
    assert store.embedded_count() == 3 and store.count_unembedded() == 0
    target = store.chunk_vectors([b[0]])[b[0]]
    hits = store.knn(target, 3)
    assert hits[0][0] == b[0] and hits[0][1] == pytest.approx(1.0, abs=1e-5)
    assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True) and len(hits) == 3
    expected = {cid: float(np.dot(store.chunk_vectors([cid])[cid], target)) for cid in a + b}
    assert all(s == pytest.approx(expected[c], abs=1e-5) for c, s in hits)
    public = store.knn(target, 3, ChunkFilter(visibility=["public"]))
    assert sorted(c for c, _ in public) == sorted(a)  # filtered before ranking: k passing chunks
    assert store.knn(target, 3, ChunkFilter(visibility=[])) == [] and store.knn(target, 0) == []


def test_a_knn_sees_a_chunk_made_private_at_once(store: IndexStore) -> None:
    """A file's visibility changes while its text stays (the chunk keeps its row and vector): a reader's KNN stops
    finding it at once, and finds it again once public (PostgreSQL keeps the level beside the vector)."""
    store.configure_vectors("fake", MODEL, DIMS)
    put(store, "a.md", "one chunk here", vectors=True)
    (b,) = put(store, "b.md", "three chunks", vectors=True)
    target = store.chunk_vectors([b])[b]
    reader = ChunkFilter(visibility=["public"])
    assert b in {c for c, _ in store.knn(target, 5, reader)}
    assert put(store, "b.md", "three chunks", vectors=True, visibility=" Private") == [b]  # (same row)
    assert b not in {c for c, _ in store.knn(target, 5, reader)}
    assert b in {c for c, _ in store.knn(target, 5, ChunkFilter(visibility=["private"]))}
    assert b in {c for c, _ in store.knn(target, 5)}
    put(store, "b.md", "three chunks", vectors=True, visibility=None)
    assert b in {c for c, _ in store.knn(target, 5, reader)}


@pytest.mark.parametrize(("flt", "expected"), FILTERS, ids=[str(i) for i in range(len(FILTERS))])
def test_filters_hold_in_a_knn(store: IndexStore, flt: ChunkFilter, expected: set[str]) -> None:
    store.configure_vectors("fake", MODEL, DIMS)
    put(
        store,
        "pub/a.md",
        "lantern a",
        visibility="public",
        book_id="the-book",
        chapter_num=1,
        entity_type="Scene",
        vectors=True,
    )
    put(store, "pub/b.md", "lantern b", visibility="Public", chapter_num=5, file_type="world", vectors=True)
    put(store, "priv/c.md", "lantern c", visibility="private", book_id="other", vectors=True)
    put(store, "priv/d.md", "lantern d", visibility=None, vectors=True)
    put(store, "notes/é.md", "lantern e", visibility="secret", corpus="reference", vectors=True)
    hits = store.knn(unit(9), 10, flt)
    assert set(paths_of(store, [c for c, _ in hits])) == expected


def test_search_candidates_are_the_separate_reads(store: IndexStore) -> None:
    """One call (one statement on PostgreSQL) answers what keyword_search, file_keyword_search, knn, chunk_paths
    and chunk_vectors answer, in the same order, with and without a filter, a query vector or keywords."""
    store.configure_vectors("fake", MODEL, DIMS)
    put(store, "a.md", "the lantern burned low", "a lantern and a lamp", vectors=True)
    put(store, "b.md", "no light here at all", vectors=True, visibility="private")
    put(store, "c.md", "lantern lantern lantern", "the lamp went out")  # (no vectors)
    put(store, "d.md", "a lamp in the window", vectors=True)
    put(store, "e.md", "cold wind", "dark night", "wet stone", "old rope", "far shore", vectors=True)
    query = q("lantern", "lamp")
    seen_vectors = 0
    target = unit(21)
    reader = ChunkFilter(visibility=["public"])
    for flt in (None, reader, ChunkFilter(visibility=[])):
        for match, vector, files in ((query, target, 3), (query, None, 2), (None, target, 0), (query, target, 0)):
            got = store.search_candidates(match, 4, files, vector, flt)
            kw = store.keyword_search(match, 4, flt) if match else []
            assert got.keywords == kw
            assert got.files == (store.file_keyword_search(match, files, flt) if match and files else [])
            vec = store.knn(vector, 4, flt) if vector is not None else []
            assert [c for c, _ in got.vectors] == [c for c, _ in vec]
            assert [s for _, s in got.vectors] == pytest.approx([s for _, s in vec], abs=1e-6)
            ids = {c for c, _ in kw} | {c for c, _ in vec}
            assert got.paths == store.chunk_paths(list(ids))
            missed = [c for c, _ in kw if c not in {c for c, _ in vec}] if vector is not None else []
            expected = store.chunk_vectors(missed) if missed else {}
            assert got.keyword_vectors.keys() == expected.keys()
            assert all(np.allclose(got.keyword_vectors[c], expected[c]) for c in expected)
            seen_vectors += len(expected)
            if flt is None and match is not None:
                assert got.keywords and (files == 0 or got.files)  # (a check that can fail on empty lists)
            if flt is None and vector is not None:
                assert len(got.vectors) == 4
    assert seen_vectors  # (keyword candidates the KNN missed, with vectors, were read)
    assert store.search_candidates(None, 4, 3, None, None).keywords == []


def test_an_import_never_replaces_a_cached_vector(store: IndexStore, tmp_path: Path) -> None:
    """The embedding cache holds one vector per (model, text), ever (shared by every workspace of a PostgreSQL
    database): `saipling import` adds the vectors the cache lacks and leaves those it holds as they are."""
    import base64
    import gzip
    import json

    from saipling.indexing import transfer

    store.configure_vectors("fake", MODEL, DIMS)
    put(store, "a.md", "a passage already embedded", vectors=True)
    (held,) = [h for _p, h, _t in store.chunk_hashes()]
    mine = store.cached_vectors(MODEL, [held])[held]
    other, new = unit(77), unit(78)
    export = tmp_path / "vectors.jsonl.gz"
    with gzip.open(export, "wt", encoding="utf-8") as f:
        f.write(
            json.dumps(
                {"format": transfer.FORMAT, "version": transfer.VERSION, "model": "fake-model", "dimensions": DIMS}
            )
            + "\n"
        )
        for h, v in ((held, other), ("f" * 64, new)):
            f.write(json.dumps({"h": h, "v": base64.b64encode(v.astype("<f4").tobytes()).decode()}) + "\n")
    assert transfer._cache_key("fake-model", DIMS) == MODEL
    assert transfer.import_vectors(store, export)["vectors"] == 2
    got = store.cached_vectors(MODEL, [held, "f" * 64])
    assert np.allclose(got[held], mine) and not np.allclose(got[held], other, atol=F16)
    assert np.allclose(got["f" * 64], new, atol=F16)
    store.set_vectors([(0, held, other)], MODEL)  # (an index run's vectors go to the cache the same way)
    assert np.allclose(store.cached_vectors(MODEL, [held])[held], mine)


def test_the_cache_keeps_vectors_across_deletes_renames_clear_and_model_changes(store: IndexStore) -> None:
    store.configure_vectors("fake", BASE, DIMS)
    put(store, "old-name.md", "a passage worth keeping", vectors=True)
    vec = unit(len("a passage worth keeping"))
    store.delete_file("old-name.md")  # renamed: deleted, then written under the new name
    cached = store.cached_vectors("fake-model", [h("a passage worth keeping"), h("never")], dims=DIMS)
    assert list(cached) == [h("a passage worth keeping")]
    assert np.allclose(cached[h("a passage worth keeping")], vec, atol=F16)
    assert store.cached_vectors("fake-model", [h("a passage worth keeping")], dims=DIMS + 1) == {}
    store.clear()
    assert list(store.cached_vectors(MODEL, [h("a passage worth keeping")])) == [h("a passage worth keeping")]
    put(store, "x.md", "another", vectors=True)
    assert store.configure_vectors("fake", "other-model", DIMS) is True  # a new model drops the vectors
    assert store.embedded_count() == 0 and store.count_unembedded() == 1
    assert list(store.cached_vectors(MODEL, [h("another")])) == [h("another")]  # ... not the cache


def test_a_chunk_moved_or_repeated_in_its_file_keeps_its_vector(store: IndexStore) -> None:
    store.configure_vectors("fake", BASE, DIMS)
    put(store, "a.md", "first part", "second part", vectors=True)
    before = store.chunk_vectors([c.id for c in store.chunks_for_path("a.md")])
    # rewritten without vectors: the same texts (one moved, one repeated) take the vectors they had
    unembedded = store.replace_file(
        record("a.md", "v2"), [row(0, "second part"), row(1, "first part"), row(2, "first part"), row(3, "fresh")]
    )
    after = store.chunks_for_path("a.md")
    assert unembedded == [after[3].id]
    vectors = store.chunk_vectors([c.id for c in after])
    assert set(vectors) == {after[0].id, after[1].id, after[2].id}
    assert np.allclose(vectors[after[2].id], vectors[after[1].id])
    assert any(np.allclose(vectors[after[1].id], v) for v in before.values())


def test_set_vectors_skips_replaced_chunks_but_caches_every_vector(store: IndexStore) -> None:
    store.configure_vectors("fake", BASE, DIMS)
    (old,) = put(store, "a.md", "draft text")
    put(store, "a.md", "final text")  # replaced while "draft text" was being embedded
    (new,) = [c.id for c in store.chunks_for_path("a.md")]
    store.set_vectors([(old, h("draft text"), unit(1)), (new, h("final text"), unit(2))], MODEL)
    assert set(store.chunk_vectors([old, new])) == {new}
    assert set(store.cached_vectors(MODEL, [h("draft text"), h("final text")])) == {h("draft text"), h("final text")}
    assert store.without_vectors([new]) == set()


def test_what_is_left_to_embed_and_in_which_order(store: IndexStore) -> None:
    store.configure_vectors("fake", BASE, DIMS)
    store.replace_file(record("old.md", "o", mtime_ns=100), [row(0, "old one"), row(1, "old two")])
    store.replace_file(record("new.md", "n", mtime_ns=900), [row(0, "new one")])
    store.replace_file(record("open.md", "p", mtime_ns=5), [row(0, "open one")])
    store.replace_file(record("held.md", "h", mtime_ns=999), [row(0, "held one")])
    order = [p for _, p, _, _ in store.unembedded(hold=["held.md"], first=["open.md"])]
    assert order == ["open.md", "new.md", "old.md", "old.md"]
    assert store.count_unembedded() == 5 and store.unembedded_share(BASE, DIMS) == (5, 5)
    assert store.paths_without_vectors(["old.md", "gone.md"]) == {"old.md"}
    missing = store.chunks_missing_vectors()
    assert missing[:2] == [
        PendingChunk(store.chunks_for_path("held.md")[0].id, "held.md", "", "held one", h("held one")),
        PendingChunk(store.chunks_for_path("new.md")[0].id, "new.md", "", "new one", h("new one")),
    ]
    assert store.chunks_missing_vectors(limit=1) == missing[:1]
    cid, _, content_hash, tokens = store.unembedded(first=["open.md"])[0]
    assert (content_hash, tokens) == (h("open one"), 2)
    store.set_vectors([(cid, content_hash, unit(3))], MODEL)
    assert store.count_unembedded() == 4 and store.paths_without_vectors(["open.md"]) == set()


def test_unusable_vectors_are_never_served(store: IndexStore) -> None:
    store.configure_vectors("fake", BASE, DIMS)
    (cid,) = put(store, "a.md", "zero vector text")
    store.set_vectors([(cid, h("zero vector text"), np.zeros(DIMS, dtype=np.float32))], MODEL)
    assert store.cached_vectors(MODEL, [h("zero vector text")]) == {}
    assert store.knn(unit(1), 5) == []
    store.drop_unusable_vectors()
    assert store.count_unembedded() == 1


def test_nearest_other_file_cosines(store: IndexStore) -> None:
    store.configure_vectors("fake", BASE, DIMS)
    put(store, "a.md", "first", "second", vectors=True)
    put(store, "b.md", "third", vectors=True)
    n, cosines = store.nearest_other_file_cosines(10)
    assert n == 3 and len(cosines) == 3 and all(-1.0 <= c <= 1.0 + 1e-6 for c in cosines)


# -- mentions --------------------------------------------------------------------------------------------------
def test_mentions_are_written_with_the_file_and_go_with_it(store: IndexStore) -> None:
    found = FileMentionRows("key1", [("people/mina.md", 3, 0, 4, "Mina"), ("people/mina.md", 1, 2, 6, "Mina")])
    rows = [row(0, "Mina went out", chapter_num=4, chapter_id="c4")]
    store.replace_file(record("ch4.md", "x", chapter_id="c4", book_id="b"), rows, mentions=found)
    put(store, "ch5.md", "nothing", chapter_id="c5", chapter_num=5)
    assert store.mentions_unscanned() is True  # ch5.md was written without mentions
    store.write_mentions("ch5.md", FileMentionRows("key2", [], pov="jonathan"))
    assert store.mentions_unscanned() is False
    assert store.mentions_of(["people/mina.md"]) == [
        StoredMention("ch4.md", "people/mina.md", 1, 2, 6, "Mina", "b", "c4", 4, "public"),
        StoredMention("ch4.md", "people/mina.md", 3, 0, 4, "Mina", "b", "c4", 4, "public"),
    ]
    assert store.mention_paths(["people/mina.md"]) == ["ch4.md"]
    assert sorted(store.known_paths(["people/mina.md"], ["Jonathan"])) == ["ch4.md", "ch5.md"]
    assert store.mention_stale_keys("key1") == [("ch5.md", "key2")]
    store.relabel_mentions(["ch5.md"], "key1")
    assert store.mention_stale_paths("key1") == []
    assert sorted(store.chapter_files(), key=lambda f: f.path) == [
        ChapterFile("ch4.md", "b", "c4", "public", None, 4),
        ChapterFile("ch5.md", None, "c5", "public", "jonathan", 5),
    ]
    assert store.chapter_num_of("ch5.md") == 5 and store.chapter_num_of("nope.md") is None
    store.delete_file("ch4.md")
    assert store.mentions_of(["people/mina.md"]) == [] and store.mention_paths(["people/mina.md"]) == []


def test_mention_counts_are_one_row_per_file_and_follow_every_change(store: IndexStore) -> None:
    mina, jon = "people/mina.md", "people/jon.md"
    found = FileMentionRows(
        "k", [(mina, 7, 3, 7, "Mina"), (jon, 2, 0, 3, "Jon"), (mina, 1, 9, 13, "Mina"), (mina, 7, 1, 5, "Mina")]
    )
    store.replace_file(
        record("ch4.md", "x", chapter_id="c4", book_id="b", visibility="private"),
        [row(0, "text", chapter_num=4, chapter_id="c4", book_id="b")],
        mentions=found,
    )
    put(store, "notes.md", "n")
    store.write_mentions("notes.md", FileMentionRows("k", [(mina, 0, 0, 4, "Mina")]))
    got = store.mention_counts([mina])
    assert [(c.path, c.entity, c.count, c.first_line, c.first_col, c.last_line, c.last_col) for c in got] == [
        ("ch4.md", mina, 3, 1, 9, 7, 3),
        ("notes.md", mina, 1, 0, 0, 0, 0),
    ]
    assert (got[0].book_id, got[0].chapter_id, got[0].chapter_num, got[0].visibility) == ("b", "c4", 4, "private")
    assert (got[1].chapter_id, got[1].chapter_num) == (None, None)
    assert [(c.path, c.entity) for c in store.mention_counts([mina, jon])] == [
        ("ch4.md", jon),
        ("ch4.md", mina),
        ("notes.md", mina),
    ]
    page = store.mentions_in([mina], ["ch4.md"])
    assert [(m.path, m.entity, m.line, m.col, m.end_col, m.surface) for m in page] == [
        ("ch4.md", mina, 1, 9, 13, "Mina"),
        ("ch4.md", mina, 7, 1, 5, "Mina"),
        ("ch4.md", mina, 7, 3, 7, "Mina"),
    ]
    assert store.mentions_in([mina], ["elsewhere.md"]) == [] and store.mentions_in([], ["ch4.md"]) == []
    store.write_mentions("ch4.md", FileMentionRows("k", [(jon, 5, 5, 8, "Jon")]))  # rewritten: hers are gone
    assert [c.path for c in store.mention_counts([mina])] == ["notes.md"]
    assert [(c.count, c.first_line) for c in store.mention_counts([jon])] == [(1, 5)]
    store.delete_file("notes.md")
    assert store.mention_counts([mina]) == []
    store.clear()
    assert store.mention_counts([jon]) == []


def test_the_chapter_files_digest_changes_with_the_chapters_not_with_their_text(store: IndexStore) -> None:
    def chapter(path: str, text: str, num: int, **meta: Any) -> None:
        put(store, path, text, chapter_id=f"ch-{num:02d}", chapter_num=num, book_id="b1", **meta)

    empty = store.chapter_files_digest()
    chapter("b1/ch-01.md", "one", 1)
    chapter("b1/ch-02.md", "two", 2)
    put(store, "notes.md", "not a chapter")
    first = store.chapter_files_digest()
    assert first != empty
    chapter("b1/ch-02.md", "two, rewritten", 2)  # only its text
    put(store, "notes.md", "still not a chapter")
    assert store.chapter_files_digest() == first
    seen = {first}
    for change in (
        lambda: chapter("b1/ch-02.md", "two", 3),  # renumbered
        lambda: chapter("b1/ch-02.md", "two", 3, visibility="private"),
        lambda: store.write_mentions("b1/ch-02.md", FileMentionRows("k", [], pov="mina")),
        lambda: chapter("b1/ch-03.md", "three", 3),  # a new chapter
        lambda: store.delete_file("b1/ch-01.md"),
    ):
        change()
        digest = store.chapter_files_digest()
        assert digest not in seen
        seen.add(digest)


# -- meta, logs, versions --------------------------------------------------------------------------------------
def test_meta_logs_and_stats(store: IndexStore) -> None:
    assert store.get_meta("missing") is None and store.get_meta("missing", "d") == "d"
    store.set_meta("k", "1")
    store.set_meta("k", "2")
    assert store.get_meta("k") == "2"
    store.log_search("first", "cli", "hybrid", 3, 0.5, 12.0)
    store.log_search("benchmark", "eval", "lexical", 1, 0.1, 3.0)
    store.log_search("second", "lsp", "semantic", 0, 0.0, 4.0)
    assert [r.query for r in store.search_log()] == ["second", "first"]  # eval left out, newest first
    assert [r.query for r in store.search_log(include_eval=True)] == ["second", "benchmark", "first"]
    assert [r.query for r in store.search_log(limit=1)] == ["second"]
    second, first = store.search_log()
    assert type(first) is SearchLogEntry and first.id < second.id and first.timestamp <= second.timestamp
    assert (first.source, first.mode, first.results, first.top_score, first.elapsed_ms) == (
        "cli",
        "hybrid",
        3,
        0.5,
        12.0,
    )
    store.log_embedding("fake", MODEL, 100, 2, 0.25)
    store.log_embedding("fake", MODEL, 50, 1, 0.5)
    put(store, "a.md", "one", "two")
    stats = store.stats()
    assert type(stats) is StoreStats and stats.last_indexed is not None
    assert (stats.total_files, stats.total_chunks, stats.embedded_chunks, stats.total_tokens) == (1, 2, 0, 150)
    assert stats.total_cost_usd == pytest.approx(0.75)  # (cached_embeddings: PostgreSQL shares its cache)


def test_read_rows_are_dataclasses_not_mappings(store: IndexStore) -> None:
    """Every row a read method returns is a dataclass read by attribute (no dict, no mapping shim); the rows of
    the listing reads are frozen."""
    store.configure_vectors("fake", MODEL, DIMS)
    found = FileMentionRows("k", [("people/mina.md", 0, 0, 4, "Mina")], pov="mina")
    chapter = [row(0, "Mina sails", "Sea", chapter_id="c1", chapter_num=1)]
    store.replace_file(record("ch1.md", "c", chapter_id="c1"), chapter, mentions=found)
    put(store, "people/mina.md", "Mina's profile", heading="Mina", display_name="Mina", aliases=["Mo"])
    store.log_search("sea", "cli", "hybrid", 1, 0.5, 2.0)
    (cid, _), *_ = store.chunk_ids_for_paths(["ch1.md"])
    listings: dict[str, list[Any]] = {
        "entities": store.entities(),
        "headings": store.headings(),
        "prose": store.prose(),
        "mentions_of": store.mentions_of(["people/mina.md"]),
        "chapter_files": store.chapter_files(),
        "search_log": store.search_log(),
        "chunks_missing_vectors": store.chunks_missing_vectors(),
        "stats": [store.stats()],
    }
    for name, rows in listings.items():
        assert rows, name
        for r in rows:
            assert dataclasses.is_dataclass(r) and not isinstance(r, (dict, Mapping)), name
            with pytest.raises(dataclasses.FrozenInstanceError):
                r.path = "elsewhere"  # type: ignore[misc]
    stored: list[Any] = [
        store.get_file("ch1.md"),
        *store.chunks_for_path("ch1.md"),
        *store.chunks_by_id([cid]).values(),
    ]
    assert len(stored) == 3
    for r in stored:
        assert dataclasses.is_dataclass(r) and not isinstance(r, Mapping)
        with pytest.raises(TypeError):
            r["path"]


def test_the_index_version_changes_with_every_write(store: IndexStore) -> None:
    v0 = store.index_version()
    assert store.index_version() == v0
    put(store, "a.md", "words")
    v1 = store.index_version()
    assert v1 != v0
    store.write_mentions("a.md", FileMentionRows("k", []))
    assert store.index_version() != v1


# -- the writer lock -------------------------------------------------------------------------------------------
def test_one_writer_at_a_time(store: IndexStore) -> None:
    with store.writer_lock(what="index") as held:
        assert held is not None
        with pytest.raises(IndexBusy), store.writer_lock(wait=False):
            pass
        done = threading.Event()

        def second() -> None:
            with pytest.raises(IndexBusy), store.writer_lock(timeout=0.3):
                pass
            done.set()

        t = threading.Thread(target=second)
        t.start()
        t.join(10)
        assert done.is_set()
    with store.writer_lock(wait=False) as again:  # released
        assert again is not None
    assert store.other_run() is None  # (our own run is not another's)


def test_entity_type_counts_count_files_of_each_type_the_filter_passes(store: IndexStore) -> None:
    """What an agent may filter `entityTypes` by (the MCP status tool): files, not chunks, per type, lowercased;
    only those the filter passes (a private file's type is not counted for a public role)."""
    put(store, "m/giant.md", "a hill giant", "its club", entity_type="Giant", visibility="public")
    put(store, "m/ogre.md", "an ogre", entity_type="giant", visibility="public")
    put(store, "rules/flee.md", "fleeing", entity_type="document", visibility="public")
    put(store, "secret/plot.md", "the twist", entity_type="twist", visibility="private")
    assert store.entity_type_counts() == {"giant": 2, "document": 1, "twist": 1}
    assert store.entity_type_counts(ChunkFilter(visibility=["public"])) == {"giant": 2, "document": 1}
    assert store.entity_type_counts(ChunkFilter(visibility=["public"], exclude_paths=["m/ogre.md"])) == {
        "giant": 1,
        "document": 1,
    }

"""Ranking and scores (retrieval/search.py): the file-level keyword index, exact heading and name matches, confidence
and the 0..1 score, minScore in every mode, noConfidentMatch, the enrichContext relevance floor, the calibration of
models without one, and the CLI's low-confidence divider.

Semantic checks use the real local model and skip when it is not installed; plumbing uses keyword-only projects
and real SQLite files.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from fixtures import chunk_row, file_record, kw, make_project, need_local_model, open_project, retrieval_project
from saipling.config.skills import MIN_RELEVANCE_DEFAULT, parse_block
from saipling.errors import InvalidRequest
from saipling.retrieval.confidence import fallback_calibration
from saipling.retrieval.search import CONFIDENT
from saipling.storage.base import ChunkFilter
from saipling.storage.sqlite.store import SqliteStore as Store

OFF_TOPIC = "how do I configure nginx as a reverse proxy for websockets"


def _h(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# -- the file-level keyword index ------------------------------------------------------------------------------
def test_file_index_follows_every_write(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "index.db")
    try:
        store.replace_file(
            file_record("a.md", 120), [chunk_row(0, "the amber lantern"), chunk_row(1, "a quiet violet shore")]
        )
        store.replace_file(file_record("b.md", 12), [chunk_row(0, "violet only")])
        hits = store.file_keyword_search(kw("amber", "violet"), 10)
        assert [p for p, _, _ in hits] == ["a.md", "b.md"]  # both words, in two chunks of one file
        assert {p: size for p, _, size in hits} == {"a.md": 120, "b.md": 12}  # the file's size: short or long
        filtered = store.file_keyword_search(kw("amber", "violet"), 10, ChunkFilter(only_paths=["a.md"]))
        assert [(p, size) for p, _, size in filtered] == [("a.md", 120)]
        store.replace_file(file_record("a.md"), [chunk_row(0, "now about copper")])  # rewritten: old words gone
        assert [p for p, _, _ in store.file_keyword_search(kw("amber"), 10)] == []
        assert [p for p, _, _ in store.file_keyword_search(kw("copper"), 10)] == ["a.md"]
        store.delete_file("b.md")
        assert store.file_keyword_search(kw("violet"), 10) == []
        store.clear()
        assert store.file_keyword_search(kw("copper"), 10) == []
    finally:
        store.close()


def test_migration_fills_the_file_index_from_an_older_index(tmp_path: Path) -> None:
    path = tmp_path / "index.db"
    store = Store.open(path)
    store.replace_file(file_record("a.md"), [chunk_row(0, "the amber lantern"), chunk_row(1, "a violet shore")])
    store.conn.execute("DROP TABLE files_fts")  # what a schema-1 index lacks
    store.conn.execute("DROP INDEX chunks_heading")
    store.conn.execute("PRAGMA user_version=1")
    store.close()
    store = Store.open(path)
    try:
        # both chunks' words are in the file's row
        assert [p for p, _, _ in store.file_keyword_search(kw("amber"), 10)] == ["a.md"]
        assert [p for p, _, _ in store.file_keyword_search(kw("violet"), 10)] == ["a.md"]
    finally:
        store.close()


# -- exact headings and names ----------------------------------------------------------------------------------
SPELLS = {
    "classes/wizard.md": "# Wizard\n\n## Spells\n\n#### Fireball\n\nRanged spell. Deals fire damage to a group.\n\n"
    "##### Epic Feat\n\nThe fireball hits one more target.\n",
    **{
        f"monsters/imp-{i}.md": f"# Imp {i}\n\nFireball! The imp hurls a fireball, fireball after fireball.\n"
        for i in range(6)
    },
    "people/marcus.md": "---\nname: Marcus Cole\naliases:\n  - The Ferryman\n---\n# Marcus Cole\n\n"
    "He keeps the ledger of crossings.\n",
    "notes/ferry.md": "# Crossings\n\nThe ferryman, the ferryman: the ferryman again rows the ferryman boat.\n",
}


@pytest.mark.parametrize("mode", ["lexical", "hybrid"])
@pytest.mark.parametrize("query", ["fireball", "Fireball", '"fireball"', "  FIREBALL "])
def test_a_query_that_is_a_heading_ranks_that_section_first(tmp_path: Path, query: str, mode: str) -> None:
    with open_project(make_project(tmp_path, SPELLS)) as p:
        p.index()
        response = p.search({"query": query, "mode": mode, "maxResults": 5, "explain": True})
        top = response["results"][0]
        assert (top["filePath"], top["sectionHeading"].lstrip("# ")) == ("classes/wizard.md", "Fireball")
        assert top["explain"]["exactMatch"] == "heading" and top["confidence"] == 1.0
        assert not response["noConfidentMatch"]


@pytest.mark.parametrize("mode", ["lexical", "hybrid"])
def test_a_heading_written_with_emphasis_is_matched_by_its_text(tmp_path: Path, mode: str) -> None:
    files = {
        "classes/druid.md": "# Druid\n\n## Earth Mastery\n\n###### ***Ripping Vines***\n\n"
        "Once per battle, the ground seizes an enemy.\n",
        **{
            f"bestiary/vines-{i}.md": f"# Barbed Vines {i}\n\nRipping vines, ripping vines: the vines rip and rip.\n"
            for i in range(4)
        },
    }
    with open_project(make_project(tmp_path, files)) as p:
        p.index()
        top = p.search({"query": "ripping vines", "mode": mode, "explain": True})["results"][0]
        assert (top["filePath"], top["headingPath"]) == (
            "classes/druid.md",
            "Druid > Earth Mastery > Ripping Vines",
        )
        assert top["sectionHeading"] == "###### Ripping Vines" and top["explain"]["exactMatch"] == "heading"


def test_a_query_that_is_an_entity_name_or_alias_ranks_its_file_first(tmp_path: Path) -> None:
    with open_project(make_project(tmp_path, SPELLS)) as p:
        p.index()
        for query in ("the ferryman", "Marcus Cole"):
            top = p.search({"query": query, "mode": "lexical", "explain": True})["results"][0]
            assert top["filePath"] == "people/marcus.md" and top["explain"]["exactMatch"] in (
                "entity",
                "heading",
            )
        # an exact match still obeys the filters
        found = p.search({"query": "the ferryman", "filter": {"pathPrefix": "notes/"}})["results"]
        assert found and {r["filePath"] for r in found} == {"notes/ferry.md"}


@pytest.mark.parametrize("mode", ["lexical", "hybrid"])
def test_a_quoted_name_in_a_question_ranks_its_page_first(tmp_path: Path, mode: str) -> None:
    files = {
        **SPELLS,
        # the question's other words and the name, many times over: these outrank the page by their words alone
        **{
            f"notes/crossing-{i}.md": f"# Crossing {i}\n\nHow does the ferryman work? The ferryman rows; the ferryman "
            "does work the ferry, and the ferryman does not work on feast days.\n"
            for i in range(3)
        },
    }
    with open_project(make_project(tmp_path, files)) as p:
        p.index()
        ask = {"mode": mode, "maxResults": 5, "explain": True}
        plain = p.search({**ask, "query": "how does the ferryman work"})["results"]
        assert plain and plain[0]["filePath"] != "people/marcus.md"  # unquoted: ranked by its words
        assert all(r["explain"]["exactMatch"] is None for r in plain)
        top = p.search({**ask, "query": 'how does "the ferryman" work'})["results"][0]
        assert (top["filePath"], top["explain"]["exactMatch"], top["confidence"]) == ("people/marcus.md", "entity", 1.0)
        # a quoted phrase that is only a heading (no page's name) is not taken as a name
        quoted = p.search({**ask, "query": 'what does the "epic feat" add'})["results"]
        assert quoted and all(r["explain"]["exactMatch"] is None for r in quoted)
        # the filters still apply
        kept = p.search({**ask, "query": 'how does "the ferryman" work', "filter": {"pathPrefix": "notes/"}})
        assert kept["results"] and {r["filePath"] for r in kept["results"]} <= {
            "notes/ferry.md",
            *(f"notes/crossing-{i}.md" for i in range(3)),
        }


# -- scores and confidence (keyword only) ----------------------------------------------------------------------
def test_keyword_only_confidence_comes_from_the_rare_words_a_passage_holds(tmp_path: Path) -> None:
    root = retrieval_project(tmp_path)
    with open_project(root) as p:
        p.index()
        exact = p.search({"query": "quillfeather journal"})
        assert exact["confidence"] == 1.0 and exact["results"][0]["score"] == 1.0
        assert not exact["noConfidentMatch"]
        # words the project never uses: whatever matches "how" or "proxy" elsewhere is not a confident match
        off = p.search({"query": OFF_TOPIC})
        assert off["noConfidentMatch"] and all(r["score"] < CONFIDENT for r in off["results"])
        assert p.search({"query": OFF_TOPIC, "minScore": CONFIDENT})["results"] == []


def test_scores_fall_down_the_list_and_min_score_cuts_it_in_every_mode(tmp_path: Path) -> None:
    root = retrieval_project(tmp_path)
    with open_project(root) as p:
        p.index()
        for mode in ("hybrid", "lexical"):
            full = p.search({"query": "ferry ledger harbor", "mode": mode, "maxResults": 20})["results"]
            scores = [r["score"] for r in full]
            assert scores == sorted(scores, reverse=True) and all(0 <= s <= 1 for s in scores)
            assert all(0 <= r["confidence"] <= 1 for r in full)
            cut = scores[len(scores) // 2]
            kept = p.search({"query": "ferry ledger harbor", "mode": mode, "maxResults": 20, "minScore": cut})
            assert [r["score"] for r in kept["results"]] == [s for s in scores if s >= cut]


# -- the local model: calibrated confidence --------------------------------------------------------------------
@pytest.fixture(scope="module")
def local_novel(tmp_path_factory: pytest.TempPathFactory) -> Any:
    need_local_model()
    root = retrieval_project(tmp_path_factory.mktemp("ranking"))
    with open_project(root, provider="local") as p:
        p.index()
        yield p


@pytest.mark.parametrize("mode", ["hybrid", "semantic"])
def test_an_off_topic_question_has_no_confident_match(local_novel: Any, mode: str) -> None:
    off = local_novel.search({"query": OFF_TOPIC, "mode": mode, "maxResults": 10})
    assert off["noConfidentMatch"] and off["confidence"] < CONFIDENT
    assert off["results"] and all(r["score"] < CONFIDENT for r in off["results"])  # still listed, but weak
    assert local_novel.search({"query": OFF_TOPIC, "mode": mode, "minScore": CONFIDENT})["results"] == []
    real = local_novel.search({"query": "where did I mention Marcus's sister?", "mode": mode})
    assert not real["noConfidentMatch"] and real["results"][0]["score"] >= CONFIDENT
    assert real["results"][0]["filePath"] == "characters/marcus-cole/profile.md"


def test_enrich_context_gives_an_agent_nothing_for_an_off_topic_question(local_novel: Any) -> None:
    response = local_novel.enrich({"query": OFF_TOPIC, "wantSearch": True})
    assert response["ran"] and response["contextBlock"] == "" and response["searchResults"] == []
    assert response["noConfidentMatch"] and "nothing relevant" in response["reason"]
    # harbor.md is forced into every context by the settings file: already loaded, not low relevance
    assert {s["reason"] for s in response["skipped"]} == {"low_relevance", "already_loaded"}
    # with the floor at 0 the same question fills the context with whatever came closest
    anything = local_novel.enrich(
        {"query": OFF_TOPIC, "skillConfig": {"enabled": True, "mode": "always", "min_relevance": 0}}
    )
    assert anything["contextBlock"]


def test_enrich_context_keeps_passages_that_answer(local_novel: Any) -> None:
    response = local_novel.enrich({"query": "where did I mention Marcus's sister?", "wantSearch": True})
    assert response["contextBlock"] and not response["noConfidentMatch"]
    assert response["searchResults"][0]["filePath"] == "characters/marcus-cole/profile.md"
    assert all(r["similarityScore"] >= MIN_RELEVANCE_DEFAULT for r in response["searchResults"])
    assert "nothing relevant" not in response["reason"]


# -- calibration -----------------------------------------------------------------------------------------------
def test_a_model_without_a_calibration_gets_one_from_its_own_neighbours(tmp_path: Path) -> None:
    """Pairs of files whose chunks have cosine 0.8: the bar is 0.6 x 0.8 = 0.48."""
    store = Store.open(tmp_path / "index.db")
    try:
        store.configure_vectors("test", "unknown-model", 64)
        rng = np.random.default_rng(1)
        for pair in range(20):
            base = rng.normal(size=64)
            base /= np.linalg.norm(base)
            noise = rng.normal(size=64)
            noise -= noise.dot(base) * base
            noise /= np.linalg.norm(noise)
            twin = 0.8 * base + 0.6 * noise  # cosine 0.8 with base, unit length
            for side, vec in (("a", base), ("b", twin)):
                text = f"pair {pair} side {side}"
                store.replace_file(
                    file_record(f"{pair}{side}.md"), [chunk_row(0, text)], {_h(text): vec.astype(np.float32)}
                )
        project = SimpleNamespace(store=store)
        cal = fallback_calibration(project, "unknown-model")  # type: ignore[arg-type]
        assert cal is not None and (cal.low + cal.high) / 2 == pytest.approx(0.48, abs=0.01)
        assert fallback_calibration(project, "unknown-model") == cal  # cached
    finally:
        store.close()


@pytest.mark.parametrize(
    ("model", "calibrated"),
    [
        ("all-MiniLM-L6-v2", "all-MiniLM-L6-v2"),
        ("sentence-transformers/all-minilm-l6-v2", "all-MiniLM-L6-v2"),
        ("bge-small-en-v1.5", "bge-small-en-v1.5"),
        ("bge-small-en-v1.5-onnx-int8", "bge-small-en-v1.5"),  # an export keeps its model's calibration
        ("Xenova/bge-small-en-v1.5-quantized", "bge-small-en-v1.5"),
        ("bge-small-en-v1.5-finetuned-legal", None),  # another model: its own cosines, the fallback
        ("bge-small-en", None),
        ("unknown-model", None),
    ],
)
def test_a_calibration_follows_its_model_and_its_exports(model: str, calibrated: str | None) -> None:
    from saipling.retrieval.confidence import CALIBRATIONS, calibration_for

    assert calibration_for(model) == (CALIBRATIONS[calibrated] if calibrated else None)
    assert CALIBRATIONS["bge-small-en-v1.5"] != CALIBRATIONS["all-MiniLM-L6-v2"]


# -- skill key -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [-0.1, 1.5, "0.5", True, None])
def test_min_relevance_must_be_a_number_between_0_and_1(value: Any) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_block({"min_relevance": value}, "skill x")
    assert info.value.field == "skill x.min_relevance"


def test_min_relevance_default_and_spellings() -> None:
    assert parse_block({}, "s").min_relevance == MIN_RELEVANCE_DEFAULT
    assert parse_block({"min_relevance": 0}, "s").min_relevance == 0.0
    assert parse_block({"minRelevance": 0.7}, "s").min_relevance == 0.7


# -- CLI -------------------------------------------------------------------------------------------------------
def test_cli_puts_weak_results_under_a_low_confidence_divider(tmp_path: Path) -> None:
    from saipling.cli.main import main

    root = make_project(tmp_path, SPELLS)
    env = {
        "SAIPLING_PROVIDER": "none",
        "COLUMNS": "220",
        "NO_COLOR": "1",
        "VOYAGE_API_KEY": None,
        "OPENAI_API_KEY": None,
    }
    runner = CliRunner(env=env)
    assert runner.invoke(main, ["index", str(root)]).exit_code == 0
    strong = runner.invoke(main, ["search", "fireball", "--root", str(root)])
    assert strong.exit_code == 0 and "low confidence" not in strong.stdout
    weak = runner.invoke(main, ["search", "imp ledger copper websocket nginx", "--root", str(root)])
    assert weak.exit_code == 0 and "low confidence" in weak.stdout and "no confident match" in weak.stderr
    data = json.loads(
        runner.invoke(main, ["search", "imp ledger copper websocket nginx", "--root", str(root), "--json"]).stdout
    )
    assert data["noConfidentMatch"] is True and all(r["score"] < CONFIDENT for r in data["results"])


# -- short notes are scored as a whole ---------------------------------------------------------------------------
def _sections(words: list[str]) -> str:
    return "".join(
        f"## Part {i}\n\nA plain line about the {w} and nothing else of note.\n\n" for i, w in enumerate(words)
    )


SHORT_NOTES = {
    # six small sections (six chunks, well under SHORT_FILE_BYTES): together they hold every query word
    "notes/inventory.md": "# Inventory\n\n" + _sections(["amber", "violet", "copper", "reed", "slate", "moss"]),
    # one section holding two of the three words
    "notes/lamp.md": "# Lamp\n\nThe amber lamp stands by the violet door of the house.\n",
    # notes of a usual length without the words, so that the words are rare
    **{
        f"notes/other-{i}.md": f"# Other {i}\n\n"
        + f"A long note about the {w} by the door, and what was kept there. " * 8
        for i, w in enumerate(["harbour", "garden", "stable", "kitchen", "tower", "cellar", "bridge", "orchard"])
    },
}


def test_a_short_note_is_scored_as_a_whole_however_many_chunks_it_has(tmp_path: Path) -> None:
    from saipling.retrieval import search

    assert len(SHORT_NOTES["notes/inventory.md"].encode()) < search.SHORT_FILE_BYTES
    with open_project(make_project(tmp_path, SHORT_NOTES)) as p:
        p.index()
        assert len(p.store.chunks_for_path("notes/inventory.md")) > 3  # short by its size, not by chunks
        response = p.search({"query": "amber violet copper", "mode": "lexical", "maxResults": 5, "explain": True})
        results = response["results"]
        assert [r["filePath"] for r in results[:3]] == ["notes/inventory.md"] * 3
        # its passages share the whole note's keyword score (their own only breaks ties): a note cut into
        # sections is not ranked as loose pieces holding one word each
        fused = [r["explain"]["fused"] for r in results[:3]]
        assert max(fused) - min(fused) < 0.05
        assert results[3]["filePath"] == "notes/lamp.md"

"""Retrieval evaluation: metrics on hand-computed cases, the BEIR loader, and `saipling eval` on a tiny dataset."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from fixtures import write_file
from saipling.cli.main import main
from saipling.errors import InvalidRequest
from saipling.retrieval.evaluation import (
    BeirDataset,
    doc_ranking,
    doc_stem,
    load_beir,
    materialise_corpus,
    mrr,
    ndcg_at,
    recall_at,
    render_document,
    run_eval,
    score_run,
)

LOG2_3 = math.log2(3)


# -- metrics ---------------------------------------------------------------------------------------------------
def test_ndcg_at_10() -> None:
    assert ndcg_at(["a", "b"], {"a": 1}) == 1.0
    assert ndcg_at(["x", "a"], {"a": 1}) == pytest.approx(1 / LOG2_3)  # 0.6309
    # two relevant, found at ranks 1 and 3: (1 + 1/2) / (1 + 1/log2 3)
    assert ndcg_at(["a", "x", "b"], {"a": 1, "b": 1}) == pytest.approx(1.5 / (1 + 1 / LOG2_3))  # 0.9197
    # graded relevance uses the level as the gain (trec_eval / pytrec_eval, hence BEIR)
    assert ndcg_at(["b", "a"], {"a": 2, "b": 1}) == pytest.approx((1 + 2 / LOG2_3) / (2 + 1 / LOG2_3))  # 0.8597
    # the cutoff: a relevant document at rank 11 scores nothing
    assert ndcg_at([f"x{i}" for i in range(10)] + ["a"], {"a": 1}) == 0.0
    assert ndcg_at([f"x{i}" for i in range(9)] + ["a"], {"a": 1}) == pytest.approx(1 / math.log2(11))
    assert ndcg_at(["a"], {"a": 1}, k=0) == 0.0
    assert ndcg_at([], {"a": 1}) == 0.0 and ndcg_at(["a"], {}) == 0.0
    # more relevant documents than k: the ideal ranking is cut at k too
    many = {f"d{i}": 1 for i in range(20)}
    assert ndcg_at([f"d{i}" for i in range(10)], many) == pytest.approx(1.0)


def test_recall_at_k() -> None:
    rels = {"a": 1, "b": 1, "c": 1, "d": 1}
    assert recall_at(["a", "x", "b"], rels, 2) == 0.25
    assert recall_at(["a", "x", "b"], rels, 10) == 0.5
    assert recall_at(["a", "b", "c", "d"], rels, 100) == 1.0
    assert recall_at(["a"], {}, 10) == 0.0


def test_mrr() -> None:
    assert mrr(["a"], {"a": 1}) == 1.0
    assert mrr(["x", "y", "a", "b"], {"a": 1, "b": 1}) == pytest.approx(1 / 3)
    assert mrr(["x"], {"a": 1}) == 0.0 and mrr([], {"a": 1}) == 0.0


def test_score_run_averages_over_judged_queries() -> None:
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"c": 1}}
    run = {"q1": ["a"], "q2": ["x", "b"], "q9": ["a"]}  # q3 not run, q9 not judged
    scores = score_run(run, qrels)
    assert scores["queries"] == 2
    assert scores["ndcg@10"] == pytest.approx((1 + 1 / LOG2_3) / 2)
    assert scores["mrr"] == pytest.approx(0.75)
    assert scores["recall@10"] == scores["recall@100"] == 1.0
    assert score_run({}, qrels)["ndcg@10"] == 0.0


# -- BEIR loader -----------------------------------------------------------------------------------------------
def write_beir(folder: Path, qrels: str = "query-id\tcorpus-id\tscore\r\nq1\td1\t1\r\nq2\td2\t1\r\n") -> Path:
    corpus = [
        {
            "_id": "d1",
            "title": "Lantern oil",
            "text": "Whale oil lamps burned in every lighthouse along the coast.",
        },
        {"_id": "d2", "title": "", "text": "Copper corrodes to a green patina when exposed to salt air."},
        {
            "_id": "d3",
            "title": "Rope",
            "text": "Hemp rope was tarred to keep seawater from rotting the fibres.",
        },
        {"_id": 4, "text": "Gulls nest on cliffs and steal bread from the harbour market stalls."},
        {
            "_id": "d/5.x",
            "title": "Tides",
            "text": "Spring tides follow the full and new moon twice a month.",
        },
        {
            "_id": "d6",
            "title": "Ledgers",
            "text": "Ship captains kept ledgers of cargo, crew wages and port fees.",
        },
    ]
    write_file(folder, "corpus.jsonl", "\ufeff" + "\n".join(json.dumps(d) for d in corpus) + "\n\n")
    queries = [
        {"_id": "q1", "text": "lighthouse whale oil lamps"},
        {"_id": "q2", "text": "green patina on copper from salt air"},
        {"_id": "q3", "text": "full moon spring tides"},
        {"_id": "q4", "text": "a query nobody judged"},
    ]
    write_file(folder, "queries.jsonl", "\r\n".join(json.dumps(q) for q in queries) + "\r\n")
    write_file(folder, "qrels/test.tsv", qrels)
    write_file(folder, "qrels/train.tsv", "q3\td/5.x\t1\nq4\td1\t0\n")  # no header; a zero score is not relevant
    return folder


def test_load_beir_with_crlf_qrels_and_header(tmp_path: Path) -> None:
    ds = load_beir(write_beir(tmp_path / "tiny"), "test")
    assert len(ds.corpus) == 6 and ds.corpus["d1"] == ("Lantern oil", ds.corpus["d1"][1])
    assert ds.corpus["4"][0] == "" and ds.corpus["d2"][0] == ""  # numeric ids become strings; no title -> ""
    assert ds.qrels == {"q1": {"d1": 1}, "q2": {"d2": 1}}
    assert ds.queries == {"q1": "lighthouse whale oil lamps", "q2": "green patina on copper from salt air"}
    train = load_beir(tmp_path / "tiny", "train")
    assert train.qrels == {"q3": {"d/5.x": 1}} and list(train.queries) == ["q3"]


def test_load_beir_errors(tmp_path: Path) -> None:
    folder = write_beir(tmp_path / "tiny")
    with pytest.raises(InvalidRequest) as info:
        load_beir(folder, "dev")
    assert info.value.field == "split"
    write_file(folder, "qrels/bad.tsv", "q1\td1\tyes\nq2\td2\tno\n")  # (the first line is a header)
    with pytest.raises(InvalidRequest, match="line 2"):
        load_beir(folder, "bad")
    write_file(folder, "queries.jsonl", '{"_id": "q1", "text": "ok"}\n{not json\n')
    with pytest.raises(InvalidRequest, match="queries.jsonl line 2") as info:
        load_beir(folder, "test")
    assert info.value.field == "dataset"
    (folder / "corpus.jsonl").unlink()
    with pytest.raises(InvalidRequest, match="corpus.jsonl is missing"):
        load_beir(folder, "test")


def test_document_ids_survive_the_round_trip_through_files(tmp_path: Path) -> None:
    ids = ["d1", "MED-10", "d/5.x", "d_5_x", "Émile Zola (writer)", ".hidden", "x" * 300, "7"]
    stems = [doc_stem(i) for i in ids]
    assert len(set(stems)) == len(ids)  # no collisions ("d/5.x" vs "d_5_x")
    assert all(s and not s.startswith(".") and len(s) < 120 and s.isascii() for s in stems)
    assert doc_stem("MED-10") == "MED-10" and doc_stem("7") == "7"  # plain ids keep their names
    ds = BeirDataset({i: ("", f"text of document {n}") for n, i in enumerate(ids)}, {"q": "text"}, {"q": {"d/5.x": 1}})
    docs = materialise_corpus(ds, tmp_path / "work") / "docs"
    assert sorted(p.stem for p in docs.glob("*.md")) == sorted(stems)
    results = [{"filePath": f"docs/{doc_stem(i)}.md"} for i in ("d/5.x", "d/5.x", "Émile Zola (writer)")]
    results.append({"filePath": "docs/stale-from-another-corpus.md"})
    mapping = {doc_stem(i): i for i in ids}
    assert doc_ranking(results, mapping) == ["d/5.x", "Émile Zola (writer)"]
    assert run_eval(lambda text: results, ds)["ndcg@10"] == 1.0


def test_documents_keep_their_title_as_a_first_paragraph_and_stale_files_are_rewritten(tmp_path: Path) -> None:
    from saipling.files.metadata import extract_metadata
    from saipling.markdown.chunker import ChunkLimits, chunk_document

    text = "Deficiency is common in northern latitudes. " * 40
    ds = BeirDataset({"t1": ("Vitamin D: a review", text), "t2": ("", "Just text.")}, {"q": "x"}, {"q": {"t1": 1}})
    work = tmp_path / "work"
    (work / "docs").mkdir(parents=True)
    (work / ".saipling-eval").write_text("", encoding="utf-8")
    stale = work / "docs" / "t1.md"  # another corpus's document of the same size: rewritten, not kept
    stale.write_text("X" * len(render_document("Vitamin D: a review", text).encode("utf-8")), encoding="utf-8")
    docs = materialise_corpus(ds, work) / "docs"
    page = (docs / "t1.md").read_text(encoding="utf-8")
    assert page == f"Vitamin D: a review\n\n{text}\n" == render_document("Vitamin D: a review", text)
    assert (docs / "t2.md").read_text(encoding="utf-8") == "Just text.\n"
    # the title is in the first chunk's text only (a frontmatter title in every chunk lowered SciFact: row F10)
    chunks = chunk_document(page, extract_metadata("docs/t1.md", page), ChunkLimits(128, 100, 25))
    assert len(chunks) > 2 and chunks[0].text.startswith("Vitamin D: a review")
    assert all(c.heading_path == "" and "Vitamin" not in c.text for c in chunks[1:])


# -- `saipling eval` -------------------------------------------------------------------------------------------
def test_eval_cli_prints_all_three_modes(tmp_path: Path) -> None:
    dataset = write_beir(tmp_path / "tiny")
    runner = CliRunner()
    result = runner.invoke(main, ["eval", str(dataset), "--workdir", str(tmp_path / "work"), "--provider", "none"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert [line.split()[0] for line in lines] == ["lexical", "semantic", "hybrid"]
    for line in lines:
        assert "nDCG@10 1.0000" in line and "recall@10 1.0000" in line and "recall@100 1.0000" in line
        assert "MRR 1.0000" in line and "(2 queries)" in line
    assert "indexed 6 documents" in result.stderr
    # provider none: semantic and hybrid ran keyword-only, and the output says so
    assert [line.endswith("[keyword only]") for line in lines] == [False, True, True]
    assert "note: semantic ran as keyword search only" in result.stderr

    result = runner.invoke(
        main,
        [
            "eval",
            str(dataset),
            "--split",
            "train",
            "--mode",
            "lexical",
            "--json",
            "--workdir",
            str(tmp_path / "work"),
            "--provider",
            "none",
        ],
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert (out["dataset"], out["split"], out["provider"], list(out["modes"])) == (
        "tiny",
        "train",
        "none",
        ["lexical"],
    )
    assert out["modes"]["lexical"] == {
        "queries": 1,
        "ndcg@10": 1.0,
        "recall@10": 1.0,
        "recall@100": 1.0,
        "mrr": 1.0,
    }


def test_eval_cli_usage_errors(tmp_path: Path) -> None:
    dataset = write_beir(tmp_path / "tiny")
    runner = CliRunner()
    missing_split = runner.invoke(main, ["eval", str(dataset), "--split", "dev", "--workdir", str(tmp_path / "w")])
    assert missing_split.exit_code == 2 and "split" in missing_split.stderr
    assert runner.invoke(main, ["eval", str(tmp_path / "nope")]).exit_code == 2
    assert runner.invoke(main, ["eval", str(dataset), "--mode", "fuzzy"]).exit_code == 2


def test_eval_never_writes_into_a_folder_of_the_users_files(tmp_path: Path) -> None:
    dataset = write_beir(tmp_path / "tiny")
    mine = tmp_path / "mine" / "docs"
    mine.mkdir(parents=True)
    precious = mine / "d1.md"  # the same name a corpus document would get
    precious.write_text("# My precious notes\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["eval", str(dataset), "--workdir", str(tmp_path / "mine"), "--provider", "none"])
    assert result.exit_code == 2 and "workdir" in result.stderr
    assert precious.read_text(encoding="utf-8") == "# My precious notes\n"
    assert sorted(p.name for p in (tmp_path / "mine").rglob("*")) == ["d1.md", "docs"]  # nothing added

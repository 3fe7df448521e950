"""OpenAI and OpenAI-compatible embeddings: POST {baseUrl}/embeddings (SPEC 6).

`baseUrl` makes this work with any compatible server (Ollama, LM Studio, llama.cpp, vLLM, TEI); the key
is optional there. On a custom server the model table is not trusted: dimensions are learned from the
first response (or `ensure_dimensions()`) unless `dimensions` is configured, and the cost is 0.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..config import Settings
from .http import HTTPClient, HTTPEmbeddingProvider

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_MODEL = "text-embedding-3-small"
MAX_BATCH_SIZE = 2048  # API limit on inputs per request
MAX_BATCH_TOKENS = 150_000  # API cap is 300k tokens per request; our count is an estimate, so halve it
DEFAULT_MAX_INPUT_TOKENS = 8191


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
        self._send_dimensions = bool(settings.dimensions)
        self.dimensions = settings.dimensions or (known.dimensions if known else 0)
        self.max_input_tokens = known.max_input_tokens if known else DEFAULT_MAX_INPUT_TOKENS
        self.cost_per_million_tokens = known.cost_per_million_tokens if known else 0.0
        self.max_batch_tokens = MAX_BATCH_TOKENS
        self.batch_size = max(1, min(settings.batch_size or 128, MAX_BATCH_SIZE))
        self.http = HTTPClient(
            label="OpenAI" if official else f"Embedding server {base}",
            base_url=base,
            api_key=settings.openai_api_key,
            key_env="OPENAI_API_KEY",
            timeout=settings.request_timeout_seconds,
            max_retries=settings.max_retries,
            sleep=sleep,
        )
        if not self.dimensions:
            log.info(
                "openai: dimensions of %s at %s will be learned from the first response", self.model, base
            )

    def _request_body(self, texts: list[str], input_type: str) -> dict[str, Any]:
        body: dict[str, Any] = {"input": texts, "model": self.model}
        if self._send_dimensions:
            body["dimensions"] = self.dimensions
        return body

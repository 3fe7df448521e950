"""Voyage AI embeddings: POST {base}/v1/embeddings with input_type document|query (SPEC 6)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..config.settings import VOYAGE_URL, Settings, key_may_go, official_host, withheld_hint
from ..redact import shown_url
from .http import HTTPClient, HTTPEmbeddingProvider

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = VOYAGE_URL
DEFAULT_MODEL = "voyage-4"
MAX_BATCH_SIZE = 128  # SPEC 6 (the API itself accepts up to 1,000 inputs)
# Our token count is an estimate (about 4 characters a token); stay well under the API's batch cap.
BATCH_TOKEN_SAFETY = 0.5


@dataclass(frozen=True)
class VoyageModel:
    dimensions: int  # default output dimension
    cost_per_million_tokens: float  # USD
    batch_token_cap: int  # API limit on the total tokens of one request
    max_input_tokens: int = 32_000
    flexible: bool = True  # accepts output_dimension 256/512/1024/2048


# Known models (prices in USD per million tokens, as published by Voyage AI in early 2026).
# An unknown model gets its dimensions from the first response and a cost of 0.
MODELS: dict[str, VoyageModel] = {
    "voyage-4-large": VoyageModel(1024, 0.12, 120_000),
    "voyage-4": VoyageModel(1024, 0.06, 320_000),
    "voyage-4-lite": VoyageModel(1024, 0.02, 1_000_000),
    "voyage-3-large": VoyageModel(1024, 0.18, 120_000),
    "voyage-3.5": VoyageModel(1024, 0.06, 320_000),
    "voyage-3.5-lite": VoyageModel(1024, 0.02, 1_000_000),
    "voyage-code-3": VoyageModel(1024, 0.18, 120_000),
}
UNKNOWN_MODEL_BATCH_TOKEN_CAP = 120_000


class VoyageProvider(HTTPEmbeddingProvider):
    """Voyage AI. The key comes from VOYAGE_API_KEY (settings.voyage_api_key).

    `settings.base_url` is used only when the provider is chosen explicitly (`provider = "voyage"`),
    because in `auto` mode base_url usually belongs to an OpenAI-compatible server.
    """

    name = "voyage"
    path = "/v1/embeddings"

    def __init__(self, settings: Settings, *, sleep: Callable[[float], None] | None = None) -> None:
        super().__init__()
        self.model = settings.model or DEFAULT_MODEL
        known = MODELS.get(self.model)
        self._send_dimension = bool(settings.dimensions) or (known is not None and known.flexible)
        self.dimensions = settings.dimensions or (known.dimensions if known else 0)
        self.max_input_tokens = known.max_input_tokens if known else 32_000
        if settings.max_input_tokens > 0:
            self.max_input_tokens = settings.max_input_tokens
        # Voyage takes input_type itself; prefixes only if the user sets them
        self.query_prefix = settings.query_prefix or ""
        self.document_prefix = settings.document_prefix or ""
        self.max_retries = max(0, int(settings.max_retries))
        self.cost_per_million_tokens = known.cost_per_million_tokens if known else 0.0
        cap = known.batch_token_cap if known else UNKNOWN_MODEL_BATCH_TOKEN_CAP
        self.max_batch_tokens = int(cap * BATCH_TOKEN_SAFETY)
        self.batch_size = max(1, min(settings.batch_size or MAX_BATCH_SIZE, MAX_BATCH_SIZE))
        named = settings.provider == "voyage" and bool(settings.base_url)
        base = settings.base_url if named else DEFAULT_BASE_URL
        base = base.rstrip("/")
        if base.endswith("/v1"):
            base = base[: -len("/v1")]
        self.dimensions_fixed = bool(self.dimensions)  # else learned from the server (and followed)
        # the user's key goes to Voyage, or to a server the user named; never to one only the project's config named
        keyed = key_may_go(base, named and settings.base_url_from_project, DEFAULT_BASE_URL)
        self.http = HTTPClient(
            # (another host is named: "Voyage rejected the API key" was said of a server that was not Voyage's)
            label="Voyage" if official_host(base, DEFAULT_BASE_URL) else f"Voyage-compatible server {shown_url(base)}",
            base_url=base,
            api_key=settings.voyage_api_key if keyed else "",
            key_env="VOYAGE_API_KEY",
            timeout=settings.request_timeout_seconds,
            max_retries=settings.max_retries,
            sleep=sleep,
            withheld="" if keyed else withheld_hint("VOYAGE_API_KEY", "SAIPLING_BASE_URL"),
        )
        if not known:
            log.info("voyage: model %s is not in the known-model table; dimensions come from the API", self.model)

    def _request_body(self, texts: list[str], input_type: str) -> dict[str, Any]:
        body: dict[str, Any] = {"input": texts, "model": self.model, "input_type": input_type}
        if self._send_dimension and self.dimensions:
            # Pin the output size so the index never sees a surprise dimension.
            body["output_dimension"] = self.dimensions
        return body

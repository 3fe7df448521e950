"""Provider fallback (reference 002): while the configured API provider cannot be used, the local model stands in.

A run whose API provider proved unusable (key rejected, unreachable, down) on a project that holds no vectors of its
model is indexed again with the local model (setting `fallback = "local"`); each later run first asks the API
provider again and, once it answers, switches back (its vectors are rebuilt). An index whose vectors the local model
made while standing in is searched with the local model again in a new process (`resume`). Where vectors of the API
model exist, an outage stays keyword-only (degraded) instead.

`ProviderFallback` holds the state (the API provider standing by, why, what the user must be told) and decides;
the project applies the provider it returns. It reads the index through `VectorIndex` (the storage backend fits it).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import ProviderError
from .base import EmbeddingProvider

if TYPE_CHECKING:
    from ..config.settings import Settings

log = logging.getLogger(__name__)

API_PROVIDERS = ("voyage", "openai")


class VectorIndex(Protocol):
    """What the fallback reads of the index."""

    def vector_model(self) -> tuple[str | None, int]: ...
    def stats(self) -> dict[str, Any]: ...
    def has_vectors(self) -> bool: ...
    def get_meta(self, key: str, default: str | None = None) -> str | None: ...


def probe(provider: EmbeddingProvider) -> str | None:
    """None when the provider embeds a short text now, else why not (its dimensions are learned on the way)."""
    try:
        vec = provider.embed_query("saipling connection check")
    except ProviderError as exc:
        return str(exc)
    if not provider.dimensions:
        provider.dimensions = int(len(vec))
    return None


def local_settings(settings: Settings) -> Settings:
    return dataclasses.replace(settings, provider="local", model="", dimensions=0, base_url="")


class ProviderFallback:
    """The fallback's state: `api` is the configured provider while the local model stands in (None otherwise)."""

    def __init__(self) -> None:
        self.api: EmbeddingProvider | None = None
        self.reason: str | None = None
        self.notices: list[str] = []  # what the user must be told once (the server shows them)

    def forget(self) -> None:
        """New provider settings: nothing stands in any more."""
        self.api = self.reason = None

    def _notice(self, message: str) -> None:
        self.notices.append(message)
        log.warning("%s", message)

    def should_fall_back(self, provider: Any, settings: Settings, unusable: bool, index: VectorIndex) -> bool:
        """True when a run's API provider proved `unusable` on a project that holds no vectors of its model (and
        the local model can stand in)."""
        if not unusable or self.api is not None or settings.fallback != "local":
            return False
        if not isinstance(provider, EmbeddingProvider) or provider.name not in API_PROVIDERS:
            return False
        model, _ = index.vector_model()
        if model == provider.vector_key and index.stats().embedded_chunks > 0:
            return False
        from . import local_available

        return local_available(settings)

    def resume(self, provider: Any, settings: Settings, index: VectorIndex) -> EmbeddingProvider | None:
        """At open: the local model to search with when the index holds its vectors, made while standing in for
        the configured API provider (and none of that provider's model); the next run asks the API again."""
        p = provider
        if not isinstance(p, EmbeddingProvider) or p.name not in API_PROVIDERS or settings.fallback != "local":
            return None
        model, _ = index.vector_model()
        if index.get_meta("provider") != "local" or model == p.vector_key or not index.has_vectors():
            return None
        from . import local_available

        if not local_available(settings):
            return None
        from .local import LocalProvider

        local = LocalProvider(local_settings(settings))
        if local.failed or local.vector_key != model:
            return None
        reason = f"the index holds vectors of the local model {model}, made while {p.name} could not be used"
        local.reason = f"fallback: {reason}"
        self.api, self.reason = p, reason
        return local

    def fall_back(self, api: EmbeddingProvider, settings: Settings, reason: str) -> EmbeddingProvider | None:
        """The local model to index with until `api` works again (None when it cannot be made)."""
        from .local import LocalProvider

        try:
            local = LocalProvider(local_settings(settings))
        except Exception as exc:  # noqa: BLE001 - no fallback then: keyword-only, as without one
            log.warning("the local model cannot stand in for %s: %s", api.name, exc)
            return None
        local.reason = f"fallback: {api.name} cannot be used ({reason})"
        self.api, self.reason = api, reason
        self._notice(
            f"{api.name} cannot be used ({reason}): indexed with the local model {local.model} until it "
            f"works again; the vectors are then rebuilt with {api.model}"
        )
        return local

    def switch_back(self) -> EmbeddingProvider | None:
        """At the start of a run while the local model stands in: the API provider when it answers again (the
        caller closes the local one and uses it), else None (the reason is updated)."""
        api = self.api
        assert api is not None
        api.failed = None  # asked again: a new key (or the network) may be back
        api.begin_pass()  # (a run starts: its circuit breaker lets the probe through)
        reason = probe(api)
        if reason is not None:
            self.reason = reason
            return None
        self._notice(f"{api.name} works again: the vectors are rebuilt with {api.model} (the local ones are dropped)")
        self.forget()
        return api

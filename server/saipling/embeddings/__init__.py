"""Provider selection (SPEC 6): explicit choice, or `auto` with the reason recorded."""

from __future__ import annotations

import logging

from ..config.settings import Settings
from .base import EmbeddingProvider, EmbeddingResult, NoneProvider, ProviderInfo

log = logging.getLogger(__name__)

Provider = EmbeddingProvider | NoneProvider

__all__ = [
    "EmbeddingProvider",
    "EmbeddingResult",
    "NoneProvider",
    "Provider",
    "ProviderInfo",
    "create_provider",
]


def local_available(settings: Settings | None = None) -> bool:
    """True when the optional local extra is importable and a model (packaged or `modelPath`) is there."""
    try:
        from .local import local_available as _available
    except ImportError:
        return False
    return _available(settings)


def create_provider(settings: Settings) -> Provider:
    """Build the provider the settings ask for; `auto` picks voyage > openai > local > none."""
    choice = settings.provider
    if choice == "auto":
        if settings.voyage_api_key:
            choice, reason = "voyage", "auto: VOYAGE_API_KEY is set"
        elif settings.openai_api_key or settings.base_url:
            choice, reason = "openai", "auto: OpenAI key or baseUrl is set"
        elif local_available(settings):
            choice, reason = "local", "auto: no API key set; local model installed"
        else:
            choice, reason = (
                "none",
                "auto: no API key set and the local model is not installed (keyword search only)",
            )
    else:
        reason = f"configured: provider = {choice}"
    provider: Provider
    if choice == "voyage":
        from .voyage import VoyageProvider

        provider = VoyageProvider(settings)
    elif choice == "openai":
        from .openai import OpenAIProvider

        provider = OpenAIProvider(settings)
    elif choice == "local":
        from .local import LocalProvider

        provider = LocalProvider(settings)
    else:
        provider = NoneProvider()
    provider.reason = reason
    log.info("embedding provider %s (%s)", provider.name, reason)
    return provider

"""A project: its root, settings, index and provider: the engine facade the CLI and the server share."""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config import INDEX_DIR, Settings, index_path, load_settings
from .embeddings import Provider, create_provider
from .embeddings.base import EmbeddingProvider
from .errors import ProviderError
from .indexer import Indexer, IndexProgress, IndexSummary, ProgressCallback
from .store import Store

log = logging.getLogger(__name__)

_PROVIDER_KEYS = (
    "provider", "model", "base_url", "dimensions", "model_path", "local_threads", "batch_size",
    "request_timeout_seconds", "max_retries", "voyage_api_key", "openai_api_key", "query_prefix",
    "document_prefix", "input_type_field", "max_input_tokens",
)  # fmt: skip


def find_root(start: Path) -> Path:
    """The nearest ancestor holding `.saipling/`, else `start` itself."""
    start = start.resolve()
    for candidate in (start, *start.parents):
        if (candidate / INDEX_DIR).is_dir():
            return candidate
    return start


@dataclass
class RunState:
    """What status reports about a run in progress."""

    is_indexing: bool = False
    progress: IndexProgress | None = None
    last_summary: IndexSummary | None = None
    pending_files: int = 0
    messages: list[str] = field(default_factory=list)


class Project:
    """Everything about one project root."""

    def __init__(self, root: Path, settings: Settings, store: Store, provider: Provider, warnings: list[str]):
        self.root = root
        self.settings = settings
        self.store = store
        self.provider = provider
        self.warnings = warnings
        self.indexer = Indexer(root, settings, store, provider)
        self.state = RunState()
        self._state_lock = threading.Lock()
        self._searcher = None

    @classmethod
    def open(
        cls,
        root: Path | str,
        settings: Settings | None = None,
        *,
        env: Mapping[str, str] | None = None,
        init_options: Mapping[str, Any] | None = None,
        workspace_config: Mapping[str, Any] | None = None,
        overrides: Mapping[str, Any] | None = None,
        provider: Provider | None = None,
        create: bool = True,
    ) -> Project:
        """Open a project; with create=False a folder never indexed gets an empty in-memory index (no files written)."""
        root = Path(root).resolve()
        warnings: list[str] = []
        if settings is None:
            settings, warnings = load_settings(root, env, init_options, workspace_config, overrides)
        exists = index_path(root).is_file()
        store = Store.open(index_path(root) if exists or create else ":memory:")
        if store.rebuilt:
            warnings.append(store.rebuilt)
        if provider is None:
            try:
                provider = create_provider(settings)
            except ProviderError as exc:
                from .embeddings.base import NoneProvider

                warnings.append(f"embedding provider unavailable, keyword search only: {exc}")
                provider = NoneProvider(reason=f"failed: {exc}")
        return cls(root, settings, store, provider, warnings)

    def close(self) -> None:
        self.provider.close()
        self.store.close()

    def apply_settings(self, settings: Settings) -> str | None:
        """Switch to new settings between runs (LSP didChangeConfiguration); returns the reindex they need:
        "full" (files must be re-chunked), "incremental" (new provider or scope; SPEC 5 rebuild), or None."""
        old, self.settings = self.settings, settings
        self.indexer.settings = settings
        if any(getattr(old, k) != getattr(settings, k) for k in _PROVIDER_KEYS):
            self.provider.close()
            try:
                self.provider = create_provider(settings)
            except ProviderError as exc:
                from .embeddings.base import NoneProvider

                self.warnings.append(f"embedding provider unavailable, keyword search only: {exc}")
                self.provider = NoneProvider(reason=f"failed: {exc}")
            self.indexer.provider = self.provider
            self.query_cache = None  # query vectors of the old provider
            # another input window (or tokenizer) means other chunk limits: every file must be re-chunked
            return "full" if self.indexer.needs_rechunk() else "incremental"
        if old.chunking != settings.chunking or old.corpora != settings.corpora:
            return "full"
        if (old.include, old.exclude, old.include_json, old.max_file_bytes) != (
            settings.include, settings.exclude, settings.include_json, settings.max_file_bytes,
        ):  # fmt: skip
            return "incremental"
        return None

    # -- indexing ------------------------------------------------------------------------------------------
    def index(
        self,
        full: bool = False,
        paths: list[str] | None = None,
        progress: ProgressCallback | None = None,
        cancel: threading.Event | None = None,
    ) -> IndexSummary:
        def on_progress(p: IndexProgress) -> None:
            self.state.progress = p
            if progress:
                progress(p)

        with self._state_lock:
            self.state.is_indexing = True
        try:
            summary = self.indexer.run(full=full, paths=paths, progress=on_progress, cancel=cancel)
        finally:
            with self._state_lock:
                self.state.is_indexing = False
        self.state.last_summary = summary
        return summary

    def estimate(self) -> dict[str, Any]:
        return self.indexer.estimate()

    def clear(self) -> None:
        self.store.clear()

    # -- status --------------------------------------------------------------------------------------------
    def degraded(self) -> str | None:
        if self.provider.name == "none":
            return "keyword search only: " + (self.provider.reason or "no embedding provider")
        if self.provider.failed:
            return f"keyword search only: {self.provider.failed}"
        from .search import vector_unavailable

        unavailable = vector_unavailable(self)  # e.g. no vectors of the active model in the index yet
        if unavailable:
            return unavailable
        summary = self.state.last_summary
        if summary is not None and summary.degraded:
            return f"some chunks have no embeddings yet: {summary.degraded}"
        return None

    def status(self) -> dict[str, Any]:
        stats = self.store.stats()
        last = stats["lastIndexed"]
        p = self.state.progress if self.state.is_indexing else None
        provider = self.provider
        price = provider.cost_per_million_tokens if isinstance(provider, EmbeddingProvider) else 0.0
        # the size of this model's vectors in the index (a custom server's model learns it from a response)
        stored_key, stored_dims = self.store.vector_model()
        if not stats["embeddedChunks"] or not isinstance(provider, EmbeddingProvider):
            stored_dims = 0
        elif stored_key != provider.vector_key:
            stored_dims = 0  # vectors of another model: not this one's size
        return {
            "root": str(self.root),
            "indexPath": str(index_path(self.root)),
            "totalFiles": stats["totalFiles"],
            "totalChunks": stats["totalChunks"],
            "embeddedChunks": stats["embeddedChunks"],
            "lastIndexed": dt.datetime.fromtimestamp(last, dt.UTC).isoformat() if last else None,
            "provider": self.provider.name,
            "model": self.provider.model or None,
            "dimensions": stored_dims or provider.dimensions or None,
            "providerReason": self.provider.reason,
            "indexedWith": self.store.get_meta("model") or self.store.get_meta("provider"),
            "totalCostUsd": round(stats["totalCostUsd"], 6),
            "totalTokens": stats["totalTokens"],
            "estimatedReindexCostUsd": round(self.store.total_tokens_indexed() * price / 1e6, 6),
            "pendingFiles": self.state.pending_files,
            "isIndexing": self.state.is_indexing,
            "progress": {
                "filesProcessed": p.files_done if p else 0,
                "filesTotal": p.files_total if p else 0,
                "currentFile": p.current_file if p else None,
            },
            "embedding": provider.applied() if isinstance(provider, EmbeddingProvider) else None,
            "degraded": self.degraded(),
            "warnings": list(self.warnings),
        }

    # -- retrieval (implemented in search.py / context.py / reading.py) ------------------------------------
    def search(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """SPEC 8 request dict (camelCase) -> SPEC 8 response dict. Raises InvalidRequest naming the field."""
        from .search import search

        return search(self, params)

    def enrich(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """SPEC 9 request -> SPEC 9 response."""
        from .context import enrich_context

        return enrich_context(self, params)

    def related(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """{uri | path, maxResults} -> {results: [...]} (passages from other files most like this file)."""
        from .search import related

        return related(self, params)

    def get(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """{path, startLine?, lines?} -> {path, startLine, endLine, text}; PathOutsideRoot/InvalidRequest on bad input."""
        from .reading import get_lines

        return get_lines(self, params)

    def symbols(self, query: str) -> list[dict[str, Any]]:
        """Entities then headings fuzzy-matching query: [{name, kind: entity|heading, path, startLine, endLine, ...}]."""
        from .symbols import find_symbols

        return find_symbols(self, query)

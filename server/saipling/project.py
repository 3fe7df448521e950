"""A project: its root, settings, index and provider: the engine facade the CLI and the server share."""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw

from .config import INDEX_DIR, Settings, index_path, load_settings
from .embeddings import Provider, create_provider
from .embeddings.base import EmbeddingProvider
from .errors import ProviderError, SaiplingError
from .indexer import Indexer, IndexProgress, IndexSummary, ProgressCallback
from .store import Store

log = logging.getLogger(__name__)

_PROVIDER_KEYS = (
    "provider", "model", "base_url", "dimensions", "model_path", "local_threads", "batch_size",
    "request_timeout_seconds", "max_retries", "voyage_api_key", "openai_api_key",
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


def open_store(root: Path, create: bool, warnings: list[str]) -> Store:
    """The project's index: created when `create`; a folder never indexed gets an empty in-memory one. An
    index that cannot be written (a read-only folder or mount) is opened read-only, with a warning: search
    and status work, indexing is refused and searches are not logged."""
    path = index_path(root)
    if not (os.path.lexists(path) or create):
        return Store.open(":memory:")
    try:
        return Store.open(path)
    except (apsw.ReadOnlyError, apsw.CantOpenError, apsw.IOError, PermissionError) as exc:
        if not path.is_file():
            raise
        store = Store.open(path, readonly=True)
        reason = exc.strerror if isinstance(exc, OSError) else type(exc).__name__
        warnings.append(
            f"the index {path} is read-only ({reason}): search and status work; indexing is off and "
            "searches are not logged"
        )
        return store


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
        store = open_store(root, create, warnings)
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
        wait: bool = True,
    ) -> IndexSummary:
        """One index run; another process writing this index is waited for (IndexBusy with wait=False)."""

        def on_progress(p: IndexProgress) -> None:
            self.state.progress = p
            if progress:
                progress(p)

        self.check_writable()
        with self._state_lock:
            self.state.is_indexing = True
        try:
            summary = self.indexer.run(full=full, paths=paths, progress=on_progress, cancel=cancel, wait=wait)
        finally:
            with self._state_lock:
                self.state.is_indexing = False
        self.state.last_summary = summary
        return summary

    def estimate(self) -> dict[str, Any]:
        return self.indexer.estimate()

    def check_writable(self) -> None:
        if self.store.readonly:
            raise SaiplingError(f"the index {self.store.path} is read-only: it cannot be changed")

    def clear(self) -> None:
        self.check_writable()
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
        reason = summary.degraded if summary is not None else None
        if self.state.is_indexing:  # (a pass in progress is still embedding: its own failures only)
            return f"some chunks have no embeddings yet: {reason}" if reason else None
        missing = self.unembedded()
        if missing:
            total = self.store.stats()["totalChunks"]
            return f"{missing} of {total} chunks have no embeddings (semantic search cannot find them)" + (
                f": {reason}" if reason else "; run `saipling index` to embed them"
            )
        return None

    def unembedded(self) -> int:
        """Chunks with no vector of the active provider's model: work still to do (0 in keyword-only mode,
        where no chunk is meant to have one; `degraded` says that mode is on)."""
        p = self.provider
        if not isinstance(p, EmbeddingProvider):
            return 0
        return self.store.count_unembedded(p.model, p.dimensions)

    def status(self) -> dict[str, Any]:
        stats = self.store.stats()
        last = stats["lastIndexed"]
        p = self.state.progress if self.state.is_indexing else None
        price = self.provider.cost_per_million_tokens if isinstance(self.provider, EmbeddingProvider) else 0.0
        return {
            "root": str(self.root),
            "indexPath": str(index_path(self.root)),
            "totalFiles": stats["totalFiles"],
            "totalChunks": stats["totalChunks"],
            "embeddedChunks": stats["embeddedChunks"],
            "unembeddedChunks": self.unembedded(),
            "lastIndexed": dt.datetime.fromtimestamp(last, dt.UTC).isoformat() if last else None,
            "provider": self.provider.name,
            "model": self.provider.model or None,
            "dimensions": self.provider.dimensions or None,
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
            "degraded": self.degraded(),
            "readOnly": self.store.readonly,
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

    def symbols(self, query: str, role: str | None = None) -> list[dict[str, Any]]:
        """Entities then headings fuzzy-matching query: [{name, kind: entity|heading, path, startLine, endLine, ...}]
        of the files `role` (default: the defaultRole setting) may see."""
        from .symbols import find_symbols

        return find_symbols(self, query, role)

"""What the retrieval helpers (`search`, `context`, `reading`, `symbols`) use of a project.

They take any object with these parts (in practice a `Project`) instead of importing `project.py`, so the
engine's imports point one way: the `Project` facade calls the helpers, the helpers call the store and the
provider, and nothing below the facade imports it back.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..config.settings import Settings
    from ..embeddings import Provider
    from ..storage.base import IndexStore


class IndexingState(Protocol):
    @property
    def is_indexing(self) -> bool: ...


class ProjectView(Protocol):
    """A project root with its settings, index and provider (read-only for the helpers, but for the query
    vector cache that search keeps on it)."""

    query_cache: Any  # retrieval.search.QueryCache, created by search on first use, dropped when the provider changes

    @property
    def root(self) -> Path: ...

    @property
    def settings(self) -> Settings: ...

    @property
    def store(self) -> IndexStore: ...

    @property
    def provider(self) -> Provider: ...

    @property
    def state(self) -> IndexingState: ...

    @property
    def on_missing_file(self) -> Callable[[str], None] | None:
        """Called with a path that search found in the index but no longer on disk (the server queues its
        removal); None when nobody listens."""
        ...

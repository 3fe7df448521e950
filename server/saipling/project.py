"""A project: its root, settings, index and provider: the engine facade the CLI and the server share."""

from __future__ import annotations

import logging
import os
import stat
import threading
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import status
from .config.settings import INDEX_DIR, Settings, index_path, load_settings
from .embeddings import Provider, create_provider
from .embeddings.base import EmbeddingProvider
from .embeddings.fallback import ProviderFallback
from .errors import DiskFull, ProviderError, SaiplingError, StorageUnavailable
from .files.context_settings import remember_spelling
from .live import unindexable
from .redact import shown_url
from .status import RunState
from .storage import is_server_location
from .storage import open_store as open_index
from .storage.base import IndexStore

if TYPE_CHECKING:  # the indexer (numpy, the chunker, frontmatter) loads only when a run needs it
    from .indexing.indexer import Indexer, IndexProgress, IndexSummary, ProgressCallback
    from .retrieval.rerank import Reranker

log = logging.getLogger(__name__)

_PROVIDER_KEYS = (
    "provider",
    "model",
    "base_url",
    "dimensions",
    "model_path",
    "local_threads",
    "batch_size",
    "request_timeout_seconds",
    "max_retries",
    "voyage_api_key",
    "openai_api_key",
    "base_url_from_project",  # (whether the key may go to base_url: config.settings.key_may_go)
    "query_prefix",
    "document_prefix",
    "input_type_field",
    "max_input_tokens",
)


def find_root(start: Path) -> Path:
    """The nearest ancestor holding `.saipling/`, else `start` itself."""
    start = start.resolve()
    for candidate in (start, *start.parents):
        if (candidate / INDEX_DIR).is_dir():
            return candidate
    return start


def open_store(
    root: Path, create: bool, warnings: list[str], verify: bool = True, settings: Settings | None = None
) -> IndexStore:
    """The project's index: created when `create`; a folder never indexed gets an empty in-memory one. An
    index that cannot be written (a read-only folder or mount, a full disk) is opened read-only, with a warning
    saying which: search and status work, indexing is refused and searches are not logged. A `.saipling` that
    is a link, or holds links where saipling writes, is refused whatever the command (IndexPathUnsafe). The
    `store` setting (a `postgresql://` URL) puts it in a workspace of that database instead (docs/postgres.md)."""
    location = settings.store if settings is not None and settings.store else index_path(root)
    if isinstance(location, str) and not is_server_location(location):
        raise SaiplingError(f"store: {shown_url(location)!r} is not a postgresql:// URL (leave it empty for SQLite)")
    return open_index(location, root=root, create=create, warnings=warnings, verify=verify, settings=settings)


class Project:
    """Everything about one project root."""

    def __init__(self, root: Path, settings: Settings, store: IndexStore, provider: Provider, warnings: list[str]):
        self.root = root
        self.settings = settings
        self.store = store
        self.provider = provider
        self.warnings = warnings
        self._indexer: Indexer | None = None
        self.state = RunState()
        self.query_cache: Any = None  # search's cache of query vectors (retrieval.search.QueryCache)
        self.on_missing_file: Callable[[str], None] | None = None  # told of indexed files gone from disk
        # a live service's files in their quiet period (embedded when it ends): what a search says of their chunks
        self.held_for_quiet: Callable[[], list[str]] | None = None
        self._state_lock = threading.Lock()
        self._dirty: dict[str, None] = {}  # files saved since their text was last read (ordered set)
        self._dirty_lock = threading.Lock()
        self._refresh_lock = threading.Lock()
        # called with the paths a lazy sync found changed on disk (the server queues them for embedding)
        self.on_refreshed: Callable[[list[str]], None] | None = None
        self.fallback = ProviderFallback()  # reference 002: the local model standing in for an API provider
        self._reranker: Reranker | None = None  # the rerank stage's model (retrieval/rerank.py), made on first use
        self._reranker_error: ProviderError | None = None
        self._reranker_lock = threading.Lock()

    @property
    def fallback_from(self) -> EmbeddingProvider | None:
        """The configured API provider while the local model stands in for it (embeddings/fallback.py)."""
        return self.fallback.api

    @property
    def fallback_reason(self) -> str | None:
        return self.fallback.reason

    @property
    def fallback_notices(self) -> list[str]:
        return self.fallback.notices

    @fallback_notices.setter
    def fallback_notices(self, notices: list[str]) -> None:
        self.fallback.notices = notices

    @property
    def rerank_provider(self) -> Reranker | None:
        """The reranker the settings ask for (None: off), made on first use; ProviderError when it cannot be."""
        if self.settings.rerank.provider == "none":
            return None
        with self._reranker_lock:
            if self._reranker is None and self._reranker_error is None:
                from .retrieval.rerank import create_reranker

                try:
                    self._reranker = create_reranker(self.settings)
                except Exception as exc:  # noqa: BLE001 - a reranker that cannot be made never fails a search
                    error = exc if isinstance(exc, ProviderError) else ProviderError(f"cannot make it ({exc})")
                    self._reranker_error = error
                    log.warning("reranker unavailable: %s", error)
            if self._reranker_error is not None:
                raise self._reranker_error
            return self._reranker

    def _drop_reranker(self) -> None:
        with self._reranker_lock:
            reranker, self._reranker, self._reranker_error = self._reranker, None, None
        if reranker is not None:
            reranker.close()

    @property
    def indexer(self) -> Indexer:
        """Built on first use: a one-shot search or status never imports the indexing machinery."""
        if self._indexer is None:
            from .indexing.indexer import Indexer

            if getattr(self.provider, "placeholder", False):
                # a command that embeds nothing (a CLI lexical search) met a file changed since it was indexed:
                # it is re-chunked as `index` would chunk it, with the configured model's window, passage
                # length and tokenizer, not the stand-in's 4-characters estimate (chunks that never fit)
                try:
                    self.provider = create_provider(self.settings)
                except ProviderError as exc:
                    from .embeddings.base import NoneProvider

                    self.provider = NoneProvider(reason=f"failed: {exc}")

            self._indexer = Indexer(self.root, self.settings, self.store, self.provider)
        return self._indexer

    def _embeds(self) -> bool:
        """Indexer.embeds without building the indexer (status stays numpy-free)."""
        return isinstance(self.provider, EmbeddingProvider) and not self.provider.failed

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
        verify: bool = True,
    ) -> Project:
        """Open a project; with create=False a folder never indexed gets an empty in-memory index (no files written).
        verify=False skips the full integrity check of the index file (storage.open_store): for one-shot readers."""
        given, root = Path(root), Path(root).resolve()
        remember_spelling(root, given)  # (the folders above a root opened through a link: their exclusions apply)
        warnings: list[str] = []
        if settings is None:
            settings, warnings = load_settings(root, env, init_options, workspace_config, overrides)
        try:
            store = open_store(root, create, warnings, verify, settings)
        except StorageUnavailable as exc:
            # the settings' warnings are shown once the project is open: one about the store (its password left out
            # of config.toml) is the reason this connection failed ("fe_sendauth: no password supplied"), so it
            # goes with the error, which is all a failed open shows
            told = [w for w in warnings if "store" in w]
            if not told:
                raise
            raise StorageUnavailable(f"{exc} ({'; '.join(told)})", exc.system_errno) from exc
        if store.rebuilt:
            warnings.append(store.rebuilt)
        if provider is None:
            try:
                provider = create_provider(settings)
            except ProviderError as exc:
                from .embeddings.base import NoneProvider

                warnings.append(f"embedding provider unavailable, keyword search only: {exc}")
                provider = NoneProvider(reason=f"failed: {exc}")
        project = cls(root, settings, store, provider, warnings)
        project._resume_fallback()
        return project

    def abort_calls(self) -> None:
        """The process is ending: provider calls in flight return at once (a search answers keyword-only, an
        index run stops embedding) and no new ones are made. From any thread."""
        for provider in (self.provider, self.fallback_from):
            if provider is not None:
                provider.abort()
        if self._reranker is not None:
            self._reranker.abort()

    def close(self, checkpoint: bool = True) -> None:
        for provider in (self.provider, self.fallback_from):  # (the API provider the local model stands in for too)
            if provider is not None:
                provider.close()
        self._drop_reranker()
        self.store.close(checkpoint)

    def apply_settings(self, settings: Settings) -> str | None:
        """Switch to new settings between runs (LSP didChangeConfiguration); returns the reindex they need:
        "full" (files must be re-chunked), "incremental" (new provider or scope; SPEC 5 rebuild), or None."""
        old, self.settings = self.settings, settings
        self.indexer.ctx.settings = settings
        if old.rerank != settings.rerank or old.voyage_api_key != settings.voyage_api_key:
            self._drop_reranker()  # made again from the new settings on the next search
        if any(getattr(old, k) != getattr(settings, k) for k in _PROVIDER_KEYS):
            self.provider.close()
            try:
                self.provider = create_provider(settings)
            except ProviderError as exc:
                from .embeddings.base import NoneProvider

                self.warnings.append(f"embedding provider unavailable, keyword search only: {exc}")
                self.provider = NoneProvider(reason=f"failed: {exc}")
            self.indexer.provider = self.provider
            self.fallback.forget()
            self.query_cache = None  # query vectors of the old provider
            # another input window (or tokenizer) means other chunk limits: every file must be re-chunked
            return "full" if self.indexer.needs_rechunk() else "incremental"
        if old.chunking != settings.chunking or old.corpora != settings.corpora:
            return "full"
        if (old.include, old.exclude, old.include_json, old.max_file_bytes) != (
            settings.include,
            settings.exclude,
            settings.include_json,
            settings.max_file_bytes,
        ):
            return "incremental"
        return None

    # -- indexing ------------------------------------------------------------------------------------------
    def index(
        self,
        full: bool = False,
        paths: list[str] | None = None,
        progress: ProgressCallback | None = None,
        cancel: threading.Event | None = None,
        *,
        embed: bool = True,
        hold: Iterable[str] = (),
        first: Iterable[str] = (),
        confirm: Callable[[dict], bool] | None = None,
        wait: bool = True,
        claim: bool = False,
    ) -> IndexSummary:
        """One run: text first (keyword-searchable at once), then embeddings (see Indexer.run; `claim`: `saipling
        index --full` on a shared store). Another process writing this index is waited for (IndexBusy with
        wait=False)."""

        def on_progress(p: IndexProgress) -> None:
            self.state.progress = p
            self.state.phase = "idle" if p.phase == "done" else p.phase
            if progress:
                progress(p)

        self.state.scheduled = False  # (a run refused below is no run to wait for)
        self.check_writable()
        with self._state_lock:
            self.state.is_indexing = True
            self.state.scheduled = False
            self.state.phase = "scanning" if paths is None else "keywords"
        try:
            if self.fallback.api is not None and self._switch_back():
                paths = None  # the provider changed: every file is checked, every vector rebuilt
            run = partial(
                self.indexer.run,
                full=full,
                progress=on_progress,
                cancel=cancel,
                embed=embed,
                hold=hold,
                first=first,
                confirm=confirm,
                wait=wait,
                claim=claim,
            )
            summary = run(paths=paths)
            if self.fallback.should_fall_back(
                self.provider, self.settings, summary.unusable, self.store
            ) and self._fall_back(summary.degraded or "unusable"):
                first_pass = summary
                summary = run(paths=None)
                summary.changed += first_pass.changed
                summary.files_read += first_pass.files_read
                summary.deleted += first_pass.deleted
                summary.warnings = first_pass.warnings + summary.warnings
        finally:
            with self._state_lock:
                self.state.is_indexing = False
                self.state.phase = "idle"
        self.state.last_summary = summary
        unindexable.remember(self.store, self.root, summary.skipped)  # (not "changed" until they change)
        return summary

    # -- provider fallback (reference 002: the decisions in embeddings/fallback.py) ------------------------------
    def _resume_fallback(self) -> None:
        if (local := self.fallback.resume(self.provider, self.settings, self.store)) is not None:
            self._use_provider(local)

    def _fall_back(self, reason: str) -> bool:
        """Index with the local model until the API provider works again (see `_switch_back`)."""
        api = self.provider
        assert isinstance(api, EmbeddingProvider)
        if (local := self.fallback.fall_back(api, self.settings, reason)) is None:
            return False
        self._use_provider(local)
        return True

    def _switch_back(self) -> bool:
        if (api := self.fallback.switch_back()) is None:
            return False
        self.provider.close()
        self._use_provider(api)
        return True

    def _use_provider(self, provider: Provider) -> None:
        self.provider = provider
        self.indexer.provider = provider
        self.query_cache = None

    # -- live text (SPEC 7: text and line ranges current at once, vectors when quiet) ----------------------
    def mark_dirty(self, path: str) -> None:
        """A file was saved or changed: its text is refreshed before the next search (or by `refresh_dirty`)."""
        with self._dirty_lock:
            self._dirty[path] = None

    def refresh_dirty(self) -> IndexSummary | None:
        """Refresh the text of every file marked dirty (the cheap pass; nothing embedded)."""
        with self._refresh_lock:  # a search arriving while a save is being refreshed waits for it
            with self._dirty_lock:
                paths, self._dirty = list(self._dirty), {}
            if not paths:
                return None
            try:
                return self.refresh(paths)
            except Exception:
                with self._dirty_lock:  # tried again by the next search or save
                    for p in paths:
                        self._dirty.setdefault(p, None)
                raise

    def refresh(self, paths: Iterable[str]) -> IndexSummary:
        if self.store.readonly:  # nothing can be written: searches leave out files changed since (stale)
            from .indexing.indexer import IndexSummary

            return IndexSummary()
        summary = self.indexer.refresh(paths)
        unindexable.remember(self.store, self.root, summary.skipped)  # (not "changed" until they change)
        for warning in summary.warnings:
            log.warning("%s", warning)
        return summary

    def stale_paths(self, paths: Iterable[str]) -> list[str]:
        """The paths whose file on disk is not what was indexed: another (mtime, size) (on a shared index: newer
        here, FileState.changed_here), or, for a file stored as racy (mtime 0: written within its timestamp tick
        when read), other content. Gone files are not listed (the caller drops them)."""
        paths = list(dict.fromkeys(paths))
        states = self.store.file_states_for(paths)
        stale = []
        root = os.fspath(self.root)  # (joined as strings: pathlib's `/` was ~2 ms of a search's 60 stats)
        for p in paths:
            st = states.get(p)
            try:
                full = os.path.join(root, p)
                now = os.stat(full)
                if st is not None and st.mtime_ns == 0 and st.size == now.st_size and stat.S_ISREG(now.st_mode):
                    import hashlib  # (~2 ms with OpenSSL: a one-shot search seldom meets a racy file)

                    # (a regular file: a FIFO swapped in would block the read)
                    if hashlib.sha256(Path(full).read_bytes()).hexdigest() == st.content_hash:
                        continue
            except OSError:
                continue
            if st is None or st.changed_here(now.st_mtime_ns, now.st_size, self.store.copy_id):
                stale.append(p)
        return stale

    def lazy_sync(self, paths: Iterable[str] = ()) -> list[str]:
        """Before results are built from `paths` (reference 002, lazy sync): the dirty files and those of
        `paths` changed on disk since they were read get their text refreshed. Returns the stale paths."""
        self.refresh_dirty()
        stale = self.stale_paths(paths)
        if stale:
            summary = self.refresh(stale)
            if summary.changed and self.on_refreshed is not None:
                self.on_refreshed(stale)  # changed outside any editor event: embed them once quiet
        return stale

    def with_work_left(self, paths: Iterable[str]) -> list[str]:
        """Those of `paths` (changed files in their quiet period) with work left: text not read since the change,
        or chunks without a vector. A save whose text is already indexed and embedded (or keyword-only: no
        provider) has nothing left, and status must not say otherwise."""
        paths = list(dict.fromkeys(paths))
        with self._dirty_lock:
            dirty = set(self._dirty)
        left = {p for p in paths if p in dirty} | set(self.stale_paths([p for p in paths if p not in dirty]))
        if self.indexer.embeds:
            left |= self.store.paths_without_vectors([p for p in paths if p not in left])
        return [p for p in paths if p in left]

    def pause(self) -> None:
        """Stop embedding at the next round (the text index stays live); `resume` lets the next run embed."""
        self.indexer.paused.set()

    def resume(self) -> None:
        self.indexer.paused.clear()

    @property
    def paused(self) -> bool:
        return self._indexer is not None and self._indexer.paused.is_set()  # none built: never paused

    def embed_estimate(self, hold: Iterable[str] = ()) -> dict[str, Any]:
        return self.indexer.embed_estimate(hold)

    def estimate(self) -> dict[str, Any]:
        return self.indexer.estimate()

    def check_writable(self) -> None:
        if self.store.disk_full:
            raise DiskFull(self.store.disk_full)
        if self.store.readonly:
            why = getattr(self.store, "readonly_reason", None)
            raise SaiplingError(
                f"the index {self.store.path} is read-only: it cannot be changed{f' ({why})' if why else ''}"
            )

    def clear(self, timeout: float | None = 10.0, on_wait: Callable[[int | None], None] | None = None) -> None:
        """Empty the index, holding the writer lock: a run in another process is waited for (up to `timeout`
        seconds, None: for ever; then IndexBusy saying what it is doing), never cleared under. (The server's
        clearIndex stops its own run first, then waits the default 10 s for another process's.)"""
        self.check_writable()
        if self.store.path == ":memory:":
            self.store.clear()
            return
        with self.store.writer_lock(timeout=timeout, on_wait=on_wait, what="clear"):
            self.store.clear()

    def other_run(self) -> dict[str, Any] | None:
        """A run of another process on this index ({"pid", "what", "phase", "filesDone", ...}), else None (also
        while a run of ours waits for it: status then shows the run that holds the index)."""
        if self.store.path == ":memory:":
            return None
        return self.store.other_run()

    # -- status (the report in status.py) -----------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        return status.report(self)

    def degraded(self) -> str | None:
        return status.degraded(self)

    def unread_files(self) -> int:
        """Files the last scan run did not get to read (it was cancelled or killed); 0 after a complete run."""
        return status.unread_files(self.store)

    def unembedded(self) -> int:
        """Chunks with no vector of the active provider's model: work still to do (0 in keyword-only mode,
        where no chunk is meant to have one; `degraded` says that mode is on)."""
        p = self.provider
        if not isinstance(p, EmbeddingProvider):
            return 0
        return self.store.count_unembedded(p.vector_key, p.dimensions)

    def expect_run(self) -> None:
        """A run will start soon (a server opening the folder): until it does, status says `scanning` (and
        `isIndexing`), not idle with the files of an index not read yet (or none at all)."""
        with self._state_lock:
            if not self.state.is_indexing:
                self.state.scheduled = True

    # -- retrieval (implemented in retrieval/search.py / retrieval/enrich.py / retrieval/reading.py)
    # ------------------------------------
    def search(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """SPEC 8 request dict (camelCase) -> SPEC 8 response dict. Raises InvalidRequest naming the field."""
        from .retrieval.search import search

        return search(self, params)

    def enrich(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """SPEC 9 request -> SPEC 9 response."""
        from .retrieval.enrich import enrich_context

        return enrich_context(self, params)

    def related(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """{uri | path, maxResults} -> {results: [...]} (passages from other files most like this file)."""
        from .retrieval.related import related

        return related(self, params)

    def get(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """{path, startLine?, lines?} -> {path, startLine, endLine, text}; PathOutsideRoot/InvalidRequest on bad
        input."""
        from .retrieval.reading import get_lines

        return get_lines(self, params)

    def symbols(self, query: str, role: str | None = None) -> list[dict[str, Any]]:
        """Entities then headings fuzzy-matching query: [{name, kind: entity|heading, path, startLine, endLine, ...}]
        of the files `role` (default: the defaultRole setting) may see."""
        from .retrieval.symbols import find_symbols

        return find_symbols(self, query, role)

"""A project: its root, settings, index and provider: the engine facade the CLI and the server share."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import logging
import os
import stat
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import apsw

from . import __version__
from .config.settings import INDEX_DIR, Settings, index_path, load_settings
from .embeddings import Provider, create_provider
from .embeddings.base import EmbeddingProvider
from .errors import DiskFull, ProviderError, SaiplingError
from .files.context_settings import load_context_settings
from .live import unindexable
from .storage import index_files
from .storage.lock import index_lock, other_run, progress_of
from .storage.store import Store

if TYPE_CHECKING:  # the indexer (numpy, the chunker, frontmatter) loads only when a run needs it
    from .indexing.indexer import Indexer, IndexProgress, IndexSummary, ProgressCallback
    from .retrieval.rerank import Reranker

log = logging.getLogger(__name__)

# indexing.indexer.PENDING_META, named here so that `status` does not import the indexer (numpy, the chunker); a test
# keeps the two equal
_PENDING_META = "pending_files"

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
    "query_prefix",
    "document_prefix",
    "input_type_field",
    "max_input_tokens",
)


API_PROVIDERS = ("voyage", "openai")


def _probe(provider: EmbeddingProvider) -> str | None:
    """None when the provider embeds a short text now, else why not (its dimensions are learned on the way)."""
    try:
        vec = provider.embed_query("saipling connection check")
    except ProviderError as exc:
        return str(exc)
    if not provider.dimensions:
        provider.dimensions = int(len(vec))
    return None


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
    phase: str = "idle"  # idle | scanning | keywords | embedding (of the run in progress)
    scheduled: bool = False  # a run is about to start (a server's first): status says `scanning`, not idle
    progress: IndexProgress | None = None
    last_summary: IndexSummary | None = None
    pending_files: int = 0
    messages: list[str] = field(default_factory=list)


def open_store(
    root: Path, create: bool, warnings: list[str], verify: bool = True, settings: Settings | None = None
) -> Store:
    """The project's index: created when `create`; a folder never indexed gets an empty in-memory one. An
    index that cannot be written (a read-only folder or mount, a full disk) is opened read-only, with a warning
    saying which: search and status work, indexing is refused and searches are not logged. A `.saipling` that
    is a link, or holds links where saipling writes, is refused whatever the command (IndexPathUnsafe)."""
    path = index_path(root)
    index_files.check_folder(path.parent)
    if not (os.path.lexists(path) or create):
        return Store.open(":memory:")
    try:
        return Store.open(path, verify=verify)
    except (apsw.Error, OSError) as exc:
        full = index_files.out_of_space(exc, path.parent)
        cannot_write = (apsw.ReadOnlyError, apsw.CantOpenError, apsw.IOError, PermissionError)
        if not (full or isinstance(exc, cannot_write)):
            raise
        if full:  # not a read-only index: say so, and how much room it needs
            message = index_files.project_disk_full(root, path.parent, settings)
            # a new index (or one never written) has nothing to read: refused as what it is
            try:
                store = Store.open(path, readonly=True)
            except (SaiplingError, apsw.Error, OSError):
                raise DiskFull(message) from exc
            store.disk_full = message
            warnings.append(
                f"{message}. Until then search and status work on the index as it is; indexing is off and "
                "searches are not logged"
            )
            return store
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
        self._indexer: Indexer | None = None
        self.state = RunState()
        self.query_cache: Any = None  # search's cache of query vectors (retrieval.search.QueryCache)
        self.on_missing_file: Callable[[str], None] | None = None  # told of indexed files gone from disk
        self._state_lock = threading.Lock()
        self._dirty: dict[str, None] = {}  # files saved since their text was last read (ordered set)
        self._dirty_lock = threading.Lock()
        self._refresh_lock = threading.Lock()
        # called with the paths a lazy sync found changed on disk (the server queues them for embedding)
        self.on_refreshed: Callable[[list[str]], None] | None = None
        # provider fallback (reference 002): the configured API provider while the local model stands in
        self.fallback_from: EmbeddingProvider | None = None
        self.fallback_reason: str | None = None
        self.fallback_notices: list[str] = []  # what the user must be told once (the server shows them)
        self._reranker: Reranker | None = None  # the rerank stage's model (retrieval/rerank.py), made on first use
        self._reranker_error: ProviderError | None = None
        self._reranker_lock = threading.Lock()

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
        verify=False skips the full integrity check of the index file (Store.open): for one-shot readers."""
        root = Path(root).resolve()
        warnings: list[str] = []
        if settings is None:
            settings, warnings = load_settings(root, env, init_options, workspace_config, overrides)
        store = open_store(root, create, warnings, verify, settings)
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
        if store.unverified:  # a big index opened without reading every page: checked on a thread
            store.check_later(project.warnings.append)
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
        self.provider.close()
        self._drop_reranker()
        self.store.close(checkpoint)

    def apply_settings(self, settings: Settings) -> str | None:
        """Switch to new settings between runs (LSP didChangeConfiguration); returns the reindex they need:
        "full" (files must be re-chunked), "incremental" (new provider or scope; SPEC 5 rebuild), or None."""
        old, self.settings = self.settings, settings
        self.indexer.settings = settings
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
            self.fallback_from = self.fallback_reason = None
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
    ) -> IndexSummary:
        """One run: text first (keyword-searchable at once), then embeddings (see Indexer.run). Another
        process writing this index is waited for (IndexBusy with wait=False)."""

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
            if self.fallback_from is not None and self._switch_back():
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
            )
            summary = run(paths=paths)
            if self._should_fall_back(summary) and self._fall_back(summary.degraded or "unusable"):
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

    # -- provider fallback (reference 002) -------------------------------------------------------------------
    def _should_fall_back(self, summary: IndexSummary) -> bool:
        """True when this run's API provider proved unusable (key rejected, unreachable, down) on a project that
        holds no vectors of its model: the local model stands in (setting `fallback`). Where vectors of the
        API model exist, an outage stays keyword-only (degraded) instead."""
        p = self.provider
        if not summary.unusable or self.fallback_from is not None or self.settings.fallback != "local":
            return False
        if not isinstance(p, EmbeddingProvider) or p.name not in API_PROVIDERS:
            return False
        model, _ = self.store.vector_model()
        if model == p.vector_key and self.store.stats()["embeddedChunks"] > 0:
            return False
        from .embeddings import local_available

        return local_available(self.settings)

    def _resume_fallback(self) -> None:
        """At open: an index whose vectors the local model made while standing in for the configured API
        provider (and none of that provider's model) is used with the local model again, so that searches in a
        new process (the CLI, a restarted server) still find by meaning; the next run asks the API again."""
        p = self.provider
        if not isinstance(p, EmbeddingProvider) or p.name not in API_PROVIDERS or self.settings.fallback != "local":
            return
        model, _ = self.store.vector_model()
        if self.store.get_meta("provider") != "local" or model == p.vector_key or not self.store.has_vectors():
            return
        from .embeddings import local_available

        if not local_available(self.settings):
            return
        from .embeddings.local import LocalProvider

        local = LocalProvider(self._local_settings())
        if local.failed or local.vector_key != model:
            return
        reason = f"the index holds vectors of the local model {model}, made while {p.name} could not be used"
        local.reason = f"fallback: {reason}"
        self.fallback_from, self.fallback_reason = p, reason
        self._use_provider(local)

    def _local_settings(self) -> Settings:
        return dataclasses.replace(self.settings, provider="local", model="", dimensions=0, base_url="")

    def _fall_back(self, reason: str) -> bool:
        """Index with the local model until the API provider works again (see `_switch_back`)."""
        from .embeddings.local import LocalProvider

        api = self.provider
        assert isinstance(api, EmbeddingProvider)
        try:
            local = LocalProvider(self._local_settings())
        except Exception as exc:  # noqa: BLE001 - no fallback then: keyword-only, as without one
            log.warning("the local model cannot stand in for %s: %s", api.name, exc)
            return False
        local.reason = f"fallback: {api.name} cannot be used ({reason})"
        self.fallback_from, self.fallback_reason = api, reason
        self._use_provider(local)
        message = (
            f"{api.name} cannot be used ({reason}): indexed with the local model {local.model} until it "
            f"works again; the vectors are then rebuilt with {api.model}"
        )
        self.fallback_notices.append(message)
        log.warning("%s", message)
        return True

    def _switch_back(self) -> bool:
        api = self.fallback_from
        assert api is not None
        api.failed = None  # asked again: a new key (or the network) may be back
        api.begin_pass()  # (a run starts: its circuit breaker lets the probe through)
        reason = _probe(api)
        if reason is not None:
            self.fallback_reason = reason
            return False
        message = f"{api.name} works again: the vectors are rebuilt with {api.model} (the local ones are dropped)"
        self.fallback_notices.append(message)
        log.warning("%s", message)
        self.provider.close()
        self.fallback_from = self.fallback_reason = None
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
        """The paths whose file on disk is not what was indexed: another (mtime, size), or, for a file stored
        as racy (mtime 0: written within its timestamp tick when read), other content. Gone files are not
        listed (the caller drops them)."""
        paths = list(dict.fromkeys(paths))
        states = self.store.file_states_for(paths)
        stale = []
        for p in paths:
            st = states.get(p)
            try:
                now = os.stat(self.root / p)
                if st is not None and st.mtime_ns == 0 and st.size == now.st_size and stat.S_ISREG(now.st_mode):
                    import hashlib  # (~2 ms with OpenSSL: a one-shot search seldom meets a racy file)

                    # (a regular file: a FIFO swapped in would block the read)
                    if hashlib.sha256((self.root / p).read_bytes()).hexdigest() == st.content_hash:
                        continue
            except OSError:
                continue
            if st is None or st.mtime_ns != now.st_mtime_ns or st.size != now.st_size:
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
            raise SaiplingError(f"the index {self.store.path} is read-only: it cannot be changed")

    def clear(self, timeout: float | None = 10.0, on_wait: Callable[[int | None], None] | None = None) -> None:
        """Empty the index, holding the writer lock: a run in another process is waited for (up to `timeout`
        seconds, None: for ever; then IndexBusy saying what it is doing), never cleared under. (The server's
        clearIndex stops its own run first, then waits the default 10 s for another process's.)"""
        self.check_writable()
        if self.store.path == ":memory:":
            self.store.clear()
            return
        with index_lock(Path(self.store.path).parent, timeout=timeout, on_wait=on_wait, what="clear"):
            self.store.clear()

    def other_run(self) -> dict[str, Any] | None:
        """A run of another process on this index ({"pid", "what", "phase", "filesDone", ...}), else None (also
        while a run of ours waits for it: status then shows the run that holds the index)."""
        if self.store.path == ":memory:":
            return None
        return other_run(Path(self.store.path).parent)

    # -- status --------------------------------------------------------------------------------------------
    def degraded(self) -> str | None:
        if self.provider.name == "none":
            return "keyword search only: " + (self.provider.reason or "no embedding provider")
        if self.provider.failed:
            return f"keyword search only: {self.provider.failed}"
        from .retrieval.search import vector_unavailable

        unavailable = vector_unavailable(self)  # e.g. no vectors of the active model in the index yet
        if unavailable:
            return unavailable
        if (resized := getattr(self.provider, "resized", None)) and not self.state.is_indexing:
            return (
                f"keyword search only: {self.provider.name} {self.provider.model} now makes {resized}-dimensional "
                f"vectors, the index holds {self.store.vector_model()[1]}-dimensional ones (the model behind it "
                "changed); the next index run embeds the project again"
            )
        summary = self.state.last_summary
        reason = summary.degraded if summary is not None else None
        if self.state.is_indexing:  # (a pass in progress is still embedding: its own failures only)
            return f"some chunks have no embeddings yet: {reason}" if reason else None
        missing = self.unembedded()
        if missing:
            total = self.store.stats()["totalChunks"]
            other = self.other_run()
            if other is not None:  # not "run saipling index": one is running
                reason = reason or f"PID {other['pid']} is indexing this project now"
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
        return self.store.count_unembedded(p.vector_key, p.dimensions)

    def expect_run(self) -> None:
        """A run will start soon (a server opening the folder): until it does, status says `scanning` (and
        `isIndexing`), not idle with the files of an index not read yet (or none at all)."""
        with self._state_lock:
            if not self.state.is_indexing:
                self.state.scheduled = True

    def status(self) -> dict[str, Any]:
        stats = self.store.stats()
        last, st = stats["lastIndexed"], self.state
        idle = "paused" if self.paused else "idle"
        phase = st.phase if st.is_indexing else "scanning" if st.scheduled else idle
        p = self.state.progress if self.state.is_indexing else None
        other = self.other_run()
        if other is not None:  # (its progress as it last published it)
            p = progress_of(other)
            phase = p.phase
        provider = self.provider
        price = provider.cost_per_million_tokens if isinstance(provider, EmbeddingProvider) else 0.0
        # the size of this model's vectors in the index (a custom server's model learns it from a response)
        stored_key, stored_dims = self.store.vector_model()
        if not stats["embeddedChunks"] or not isinstance(provider, EmbeddingProvider):
            stored_dims = 0
        elif stored_key != provider.vector_key:
            stored_dims = 0  # vectors of another model: not this one's size
        return {
            "version": __version__,
            "root": str(self.root),
            "indexPath": str(index_path(self.root)),
            "totalFiles": stats["totalFiles"],
            "totalChunks": stats["totalChunks"],
            "embeddedChunks": stats["embeddedChunks"],
            "unembeddedChunks": self.unembedded(),
            "lastIndexed": dt.datetime.fromtimestamp(last, dt.UTC).isoformat() if last else None,
            "provider": self.provider.name,
            "model": self.provider.model or None,
            "dimensions": stored_dims or provider.dimensions or None,
            "providerReason": self.provider.reason,
            "fallbackFrom": {
                "provider": self.fallback_from.name,
                "model": self.fallback_from.model,
                "reason": self.fallback_reason,
            }
            if self.fallback_from is not None
            else None,
            "indexedWith": self.store.get_meta("model") or self.store.get_meta("provider"),
            "totalCostUsd": round(stats["totalCostUsd"], 6),
            "totalTokens": stats["totalTokens"],
            "estimatedReindexCostUsd": round(self.store.total_tokens_indexed() * price / 1e6, 6),
            "pendingFiles": self.state.pending_files + (0 if self.state.is_indexing else self.unread_files()),
            "isIndexing": self.state.is_indexing or self.state.scheduled or other is not None,
            "indexPhase": phase,
            # another process's run on this index (`saipling index`, a server, `clear`): who and what
            "indexingProcess": {"pid": other["pid"], "doing": other.get("what")} if other else None,
            "paused": self.paused,
            "progress": {
                "filesProcessed": p.files_done if p else 0,
                "filesTotal": p.files_total if p else 0,
                "currentFile": p.current_file if p else None,
                "phase": p.phase if p else None,
                "chunksEmbedded": p.chunks_done if p else 0,
                "chunksTotal": p.chunks_total if p else 0,
                "etaSeconds": round(p.eta_seconds, 1) if p and p.eta_seconds is not None else None,
            },
            "embedding": provider.applied() if isinstance(provider, EmbeddingProvider) else None,
            "rerank": self._rerank_status(),
            "degraded": self.degraded(),
            "readOnly": self.store.readonly,
            # (with a `.context_settings.json` that cannot be read: what applies instead, as search says)
            "warnings": list(self.warnings) + load_context_settings(self.root).warnings,
            "lastRun": self._last_run(),
            "indexBytes": self._index_bytes(),
        }

    def _rerank_status(self) -> dict[str, Any] | None:
        """The rerank stage as configured (None: off); no call is made to learn it."""
        rs = self.settings.rerank
        if rs.provider == "none":
            return None
        from .redact import shown_url

        return {
            "provider": rs.provider,
            "model": rs.model or None,
            "baseUrl": shown_url(rs.base_url) or None,
            "modelPath": rs.model_path or None,
            "topN": rs.top_n,
            "budgetSeconds": rs.budget_seconds,
        }

    def _last_run(self) -> dict[str, Any] | None:
        """When the last index run (CLI or server) finished and how long it took; None before the first."""
        try:
            finished = float(self.store.get_meta("last_run") or 0)
            seconds = self.store.get_meta("last_run_seconds")
            took = float(seconds) if seconds else None
        except ValueError:
            return None
        if not finished:
            return None
        return {"finished": dt.datetime.fromtimestamp(finished, dt.UTC).isoformat(), "seconds": took}

    def _index_bytes(self) -> int | None:
        """The index's size on disk: the database and its write-ahead log (None when it cannot be read)."""
        path = index_path(self.root)
        try:
            size = path.stat().st_size
        except OSError:
            return None
        with contextlib.suppress(OSError):
            size += path.with_name(path.name + "-wal").stat().st_size
        return size

    def unread_files(self) -> int:
        """Files the last scan run did not get to read (it was cancelled or killed); 0 after a complete run."""
        try:
            return int(self.store.get_meta(_PENDING_META, "0") or 0)
        except ValueError:
            return 0

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

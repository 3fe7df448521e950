"""Indexing runs (SPEC 7): scan, read only what changed, chunk, embed what is new, one transaction per file."""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from ..config.settings import Settings
from ..embeddings import Provider
from ..embeddings.base import EmbeddingProvider
from ..errors import IndexCancelled, ProviderError
from ..files.scanner import ScanEntry, corpus_for, is_indexable, scan, shown_name, symlink_reason, utf8_name
from ..markdown.chunker import ChunkLimits
from ..storage.base import IndexStore, LockHandle, gone_here
from . import mention_scan
from .context import IndexContext, file_failed
from .embed_phase import EmbeddingPhase
from .records import IndexProgress, IndexSummary, ProgressCallback  # (callers import them here too)
from .text_phase import TextPhase

log = logging.getLogger(__name__)

# files given their whole-file keywords per transaction after a first index's text phase (~0.1 s of SQL here)
FILL_FILE_TEXT = 256
MERGE_PAGES = 2000  # keyword index pages a merge step writes (~0.2 s at 1M chunks: a save waits at most that)
PENDING_META = "pending_files"  # meta key: files a cancelled (or killed) run did not get to read


class Indexer:
    """Brings the store in line with the files on disk: a run is its text phase, then its embedding phase."""

    def __init__(self, root: Path, settings: Settings, store: IndexStore, provider: Provider) -> None:
        self.ctx = IndexContext(Path(root), settings, store, provider)
        self.root, self.store = self.ctx.root, store
        self._lock = threading.Lock()  # one run at a time
        self.paused = threading.Event()  # set: runs stop embedding (the text index stays live)
        self.text = TextPhase(self.ctx)
        self.embedding = EmbeddingPhase(self.ctx, self.text, self.paused)
        self.on_lock_wait: Callable[[int | None], None] | None = None  # told when another process holds the index

    # settings and provider change between runs (new settings, a provider fallback): set in `ctx`, where both phases
    # see the change
    @property
    def settings(self) -> Settings:
        return self.ctx.settings

    @property
    def provider(self) -> Provider:
        return self.ctx.provider

    @provider.setter
    def provider(self, provider: Provider) -> None:
        self.ctx.provider = provider

    # -- configuration -------------------------------------------------------------------------------------
    @property
    def embeds(self) -> bool:
        return self.ctx.embeds

    def limits(self) -> ChunkLimits:
        return self.ctx.limits()

    def needs_rechunk(self) -> bool:
        return self.ctx.needs_rechunk()

    def embed_estimate(self, hold: Iterable[str] = ()) -> dict:
        return self.embedding.embed_estimate(hold)

    def estimate(self) -> dict:
        return self.embedding.estimate()

    def ensure_vector_table(self) -> bool:
        """Match the store's vector table to the provider. True when vectors were reset (model changed).

        A provider whose size is learned from its server (a custom server's unknown model) is asked for it
        once per process: the model behind the same name may have changed (llama.cpp ignores `model`), and
        a new size rebuilds the vectors like a new model (never a mix of sizes). A server that does not answer
        then is taken at the index's size (a wrong guess is caught by the first answer's size)."""
        p = self.provider
        if isinstance(p, EmbeddingProvider):
            if p.resized and not p.dimensions_fixed:  # a search or a batch met the new size
                p.dimensions, p.resized = p.resized, None
            if not p.dimensions:
                stored_key, stored_dims = self.store.vector_model()
                if stored_key == p.vector_key and stored_dims and self.store.has_vectors():
                    try:
                        p.dimensions = int(len(p.embed_query("dimension probe")))
                    except ProviderError as exc:
                        log.info("%s: size not checked (%s); taking the index's %d", p.name, exc, stored_dims)
                        p.dimensions = stored_dims
                else:
                    p.dimensions = int(len(p.embed_query("dimension probe")))
            return self.store.configure_vectors(p.name, p.vector_key, p.dimensions)
        return False

    def _model_changed(self, old_model: str | None, old_dims: int) -> str:
        p = self.provider
        if old_dims and old_dims != p.dimensions and old_model == p.vector_key:
            return (
                f"{p.name} {p.model} now makes {p.dimensions}-dimensional vectors (the index held {old_dims}-"
                "dimensional ones): the model behind it changed; every chunk is embedded again"
            )
        return "embedding model changed: vectors rebuilt from cache or re-embedded"

    def _adopt_new_size(self, summary: IndexSummary) -> bool:
        """After an embedding phase that met a learned-size server answering at another size: the vectors are
        rebuilt at the new size (True: embed again), with a warning saying why."""
        p = self.provider
        if not isinstance(p, EmbeddingProvider) or not p.resized or p.dimensions_fixed or summary.cancelled:
            return False
        old_model, old = self.store.vector_model()
        p.dimensions, p.resized = p.resized, None
        self.store.configure_vectors(p.name, p.vector_key, p.dimensions)
        summary.degraded = None
        summary.unusable = summary.embedding_stopped = False
        summary.warnings = [w for w in summary.warnings if "the model behind it changed" not in w]
        summary.warnings.append(self._model_changed(old_model, old))
        log.warning("%s", summary.warnings[-1])
        return True

    # -- runs ----------------------------------------------------------------------------------------------
    def run(
        self,
        full: bool = False,
        paths: Iterable[str] | None = None,
        progress: ProgressCallback | None = None,
        cancel: threading.Event | None = None,
        *,
        embed: bool = True,
        hold: Iterable[str] | Callable[[], Iterable[str]] = (),
        first: Iterable[str] = (),
        confirm: Callable[[dict], bool] | None = None,
        wait: bool = True,
        claim: bool = False,
    ) -> IndexSummary:
        """Index the project (or just `paths`, relative); only one run at a time per project. `claim` (with `full`:
        `saipling index --full`): on a shared store, make the workspace this copy's (files it lacks dropped, every
        file re-read from it); a full run without it (a settings change, an editor's rebuild) re-reads this copy's
        own files and those newer here, never over another copy's (storage.base.FileState.changed_here).

        Two phases: every changed file is read, chunked and stored (keyword-searchable, with the vectors of
        chunks whose text did not change); then chunks without a vector are embedded, `first` files first,
        then the most recently modified, leaving out `hold` (files still in their quiet period; a callable
        is asked again whenever the phase looks for more work). With
        embed=False, or while paused, only the first phase runs. With a paid provider and `confirm`, an
        embedding phase estimated above `confirmCostAboveUsd` runs only if confirm(estimate) says yes.

        One run at a time per index across processes too (storage/lock.py): a run finding another process's
        run in progress waits for it (IndexBusy instead with wait=False)."""
        with self._lock, contextlib.ExitStack() as locked:
            try:
                lock = locked.enter_context(self._index_lock(wait, cancel))
            except IndexCancelled:  # cancelled while another process held the index: nothing was done
                return IndexSummary(cancelled=True)
            if lock is not None:  # what the run is doing, for `status` in other processes
                progress = lock.reporting(progress)
            held = hold if callable(hold) else (lambda fixed=set(hold): fixed)
            return self._run(
                full, None if paths is None else list(paths), progress, cancel, embed, held, list(first), confirm, claim
            )

    def _index_lock(
        self, wait: bool, cancel: threading.Event | None
    ) -> contextlib.AbstractContextManager[LockHandle | None]:
        if self.store.path == ":memory:":
            return contextlib.nullcontext()
        return self.store.writer_lock(wait=wait, cancel=cancel, on_wait=self.on_lock_wait)

    def refresh(self, paths: Iterable[str]) -> IndexSummary:
        """The cheap text pass for files known (or suspected) to have changed: re-read, re-chunk and replace
        their chunks, keywords, line ranges and metadata now; nothing is embedded (new or changed chunks wait
        for the quiet period). Does not wait for a run in progress, only for the batch it is storing."""
        summary = IndexSummary()
        start = time.perf_counter()
        with self.text.write_lock:
            self.text.refreshes += 1  # files a run read ahead before now are read again (indexing.chunk_pool.ReadAhead)
            entries, stale = self._entries_for(list(paths), summary)
            for rel in stale:
                if self.store.delete_file(rel):
                    summary.deleted += 1
            states = self.store.file_states_for(e.rel for e in entries)
            racy: list[tuple[ScanEntry, str]] = []
            batch = []
            for e in entries:
                try:
                    prep = self.text.prepare_one(e, states, True, summary, racy)
                except Exception as exc:  # noqa: BLE001 - one odd path must never stop the others
                    file_failed(e.rel, exc, summary)
                    continue
                if prep is not None:
                    summary.changed += 1
                    batch.append(prep)
            if batch:
                self.text.flush(batch, summary)
            self._settle_mentions(summary)
        self.text.settle_racy(racy)
        summary.scanned = len(entries)
        summary.seconds = time.perf_counter() - start
        return summary

    def _run(self, full, paths, progress, cancel, embed, hold, first, confirm, claim=False) -> IndexSummary:
        summary = IndexSummary()
        claim = claim and full
        start = time.perf_counter()
        if isinstance(self.provider, EmbeddingProvider):
            self.provider.begin_pass()  # a provider that stopped calling its server tries again
        if self.embeds and (embed or self.provider.dimensions):
            self.store.drop_unusable_vectors()  # once per index: rows stored before vectors were checked
            try:
                stored = self.store.vector_model() if self.store.has_vectors() else (None, 0)
                if self.ensure_vector_table():
                    summary.warnings.append(self._model_changed(*stored))
            except ProviderError as exc:
                self.embedding.provider_failed(exc, summary)
        signature = self.ctx.chunking_signature()
        rechunk = self.ctx.needs_rechunk()
        if not rechunk:
            self.store.set_meta(self.ctx.chunking_key(), signature)  # (an empty index: every chunk will use these)
        elif paths is None:
            # other chunk limits than the indexed chunks were made with: re-chunk every file (vectors of
            # unchanged chunk texts come back from the embedding cache); recorded once the run completes
            log.info("chunk limits changed: every file is re-chunked")
            full = True
        t0 = time.perf_counter()
        if paths is None:
            result = scan(self.root, self.settings)
            entries, summary.skipped = result.entries, list(result.skipped)
            seen = {e.rel for e in entries}
            # (on a shared store a file this copy lacks may be another copy's new note: only `--full` (claim),
            # which makes the workspace this copy's, drops every one: storage.base.gone_here)
            states = self.store.file_states()
            here = None if claim else self.store.copy_id
            stale = gone_here(self.root, states, seen, here)
        else:
            entries, stale = self._entries_for(paths, summary)
            full = True  # explicit paths: always check content (hash decides)
        summary.timings["scan"] = time.perf_counter() - t0
        summary.scanned = len(entries)
        states = self.store.file_states()
        todo = []
        here = self.store.copy_id
        for e in entries:
            st = states.get(e.rel)
            if full and not claim and st is not None and not st.mine(here):
                # a re-chunk (other limits or rules) on a shared store: another copy's version is re-read from this
                # copy only when newer here, else left as it is for that copy to re-chunk
                if not st.changed_here(e.mtime_ns, e.size, here):
                    summary.unchanged += 1
                    continue
            if (
                not full
                and st is not None
                and not st.changed_here(e.mtime_ns, e.size, here)
                and os.access(e.abs_path, os.R_OK)  # chmod changes no mtime: an unreadable file is read (and dropped)
            ):
                summary.unchanged += 1
            else:
                todo.append(e)
        for rel in stale:
            try:
                if self.store.delete_file(rel):
                    summary.deleted += 1
            except Exception as exc:  # one odd path must never stop the run
                file_failed(rel, exc, summary)
        total = len(todo)
        stored = [0]  # files of `todo` stored so far (a cancelled run leaves the rest to the next one)
        text_done = False
        try:
            self.text.run(todo, states, full, summary, progress, cancel, stored)
            text_done = True
            with self.text.write_lock:
                self._settle_mentions(summary)
            if paths is None:  # (a first index's, or one a killed run left: a save's run never waits for it)
                self._fill_file_text(progress, cancel)
                self._merge_keywords(cancel)
            if embed and self.embeds and not self.paused.is_set() and not summary.degraded:
                if self.embedding.confirmed(confirm, hold, summary):
                    self.embedding.run(summary, total, progress, cancel, hold, first)
                    if self._adopt_new_size(summary):
                        self.embedding.run(summary, total, progress, cancel, hold, first)
            elif embed and self.embeds and self.paused.is_set():
                summary.paused = True
        except (IndexCancelled, KeyboardInterrupt) as exc:
            summary.cancelled = True
            log.info("indexing cancelled; every file is either old or new (%s)", type(exc).__name__)
            if isinstance(exc, KeyboardInterrupt):
                raise
        finally:
            summary.pending_files = 0 if text_done else total - stored[0]
            if paths is None:  # what status reports as pending after a cancel, until a run completes
                with contextlib.suppress(Exception):
                    self.store.set_meta(PENDING_META, str(summary.pending_files))
            self._finish(summary, start)
        if rechunk and paths is None and not summary.cancelled:
            self.store.set_meta(self.ctx.chunking_key(), signature)  # every file was re-chunked with these limits
        if progress:
            progress(IndexProgress(total, total, None, summary.embedded, "done"))
        return summary

    def _fill_file_text(self, progress: ProgressCallback | None, cancel: threading.Event | None) -> None:
        """The whole-file keywords a first index's text phase left out (IndexStore.defer_indexes), a batch of files
        per transaction under the write lock (a save waits for one batch), after the project is keyword-searchable
        by its passages; a cancelled or killed run leaves the rest to the next full run."""
        if not self.store.file_text_pending():
            return
        total = self.store.stats().total_files

        def report(done: int) -> None:
            if progress:
                progress(IndexProgress(min(done, total), total, None, 0, "file_keywords"))

        # ((a full disk) the passages are stored: the next full run fills it)
        self._in_steps(
            lambda: self.store.fill_file_text(FILL_FILE_TEXT),
            "the whole-file keywords were not all filled",
            cancel,
            report,
        )

    def _merge_keywords(self, cancel: threading.Event | None) -> None:
        """The keyword lists merged into one b-tree each after a first index (or once on an older index): a step
        of MERGE_PAGES pages per transaction under the write lock (a save waits for one step); a cancelled or
        killed run leaves the rest to the next full run. ~19 s at 1.00M chunks (10 s of CPU), once."""
        # ((a full disk) the lists answer the same unmerged)
        self._in_steps(lambda: int(self.store.merge_keywords(MERGE_PAGES)), "the keyword index was not merged", cancel)

    def _in_steps(
        self,
        step: Callable[[], int],
        failed: str,
        cancel: threading.Event | None,
        report: Callable[[int], None] | None = None,
    ) -> None:
        """`step` (how much it did; 0: nothing left) again and again, each under the write lock (a save waits for
        one step), until it has nothing left; `report` gets the total done before each step. A failure is logged
        and leaves the rest to the next full run; a cancel stops between steps."""
        done = 0
        while True:
            if cancel is not None and cancel.is_set():
                raise IndexCancelled("indexing cancelled")
            if report is not None:
                report(done)
            try:
                with self.text.write_lock:
                    did = step()
            except Exception as exc:  # noqa: BLE001 - what the steps make is optional: the run that stored the text stands
                log.warning("%s (%s: %s)", failed, type(exc).__name__, exc)
                return
            if not did:
                return
            done += did

    def _settle_mentions(self, summary: IndexSummary) -> None:
        """Files whose mentions were found with other entity names (an entity file added, renamed, removed)
        are scanned again (retrieval/mentions.py); a failure leaves them for the next run."""
        try:
            mention_scan.settle(self.store, self.root)
        except Exception as exc:  # noqa: BLE001 - mentions must never fail the run that stored the text
            log.warning("entity mentions not brought up to date: %s", exc)

    def _entries_for(self, paths: list[str], summary: IndexSummary) -> tuple[list[ScanEntry], list[str]]:
        """Scan entries for explicit relative paths (a save, a watcher event); the rest is stale or skipped."""
        entries: list[ScanEntry] = []
        stale: list[str] = []
        root_real = os.path.realpath(self.root)
        for rel in dict.fromkeys(paths):
            if not utf8_name(rel):  # as scan() decides: such a name cannot be stored
                shown = shown_name(rel)
                summary.skipped.append((shown, "file name is not valid UTF-8"))
                log.warning("skipping %s: file name is not valid UTF-8", shown)
                continue
            abs_path = self.root / rel
            reason = is_indexable(self.root, rel, self.settings)
            if reason is not None:
                stale.append(rel)
                continue
            real = os.path.realpath(abs_path)
            if real != root_real and not real.startswith(root_real + os.sep):
                summary.skipped.append((rel, "symlink leaves the project root"))  # as scan() decides
                stale.append(rel)
                continue
            link = symlink_reason(root_real, rel, real)
            if link is not None:  # reached through a link inside the root: indexed under the real path
                summary.skipped.append((rel, link))
                stale.append(rel)
                continue
            try:
                st = abs_path.stat()
            except (FileNotFoundError, NotADirectoryError):
                stale.append(rel)  # deleted
                continue
            except OSError as exc:  # e.g. a parent folder lost its x bit: as scan() does, not indexed
                summary.skipped.append((rel, f"unreadable ({exc.strerror or exc})"))
                stale.append(rel)
                continue
            if not stat.S_ISREG(st.st_mode):
                stale.append(rel)
                continue
            if st.st_size > self.settings.max_file_bytes:
                summary.skipped.append((rel, "too large"))
                stale.append(rel)
                continue
            entries.append(ScanEntry(rel, abs_path, st.st_mtime_ns, st.st_size, corpus_for(rel, self.settings)))
        return entries, stale

    def _finish(self, summary: IndexSummary, start: float) -> None:
        if summary.tokens or summary.embedded:
            self.store.log_embedding(
                self.provider.name, self.provider.model, summary.tokens, summary.embedded, summary.cost_usd
            )
        stats = self.store.stats()
        summary.files, summary.chunks = stats.total_files, stats.total_chunks
        summary.unembedded = self.store.count_unembedded() if self.embeds else 0
        summary.seconds = time.perf_counter() - start
        self.store.set_meta("last_run", str(time.time()))  # when the run finished (status: lastRun)
        self.store.set_meta("last_run_seconds", f"{summary.seconds:.3f}")

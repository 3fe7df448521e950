"""Indexing runs (SPEC 7): scan, read only what changed, chunk, embed what is new, one transaction per file."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .chunker import CHUNKER_VERSION, Chunk, ChunkLimits, chunk_document, embed_text_for, limits_for
from .config import Settings
from .embeddings import Provider
from .embeddings.base import EmbeddingProvider, estimate_tokens
from .errors import IndexCancelled, ProviderAuthError, ProviderError, ProviderRateLimited, ProviderUnavailable
from .index_lock import index_lock
from .metadata import FileMeta, extract_metadata
from .scanner import ScanEntry, corpus_for, is_indexable, scan, shown_name, symlink_reason, utf8_name
from .store import ChunkRow, FileRecord, Store, cache_key
from .textio import BinaryFile, decode

log = logging.getLogger(__name__)

# Racy (mtime, size) (git's "racy clean"): a file read within one timestamp tick of its mtime can be written
# again in that same tick with the same size, and the fast path would skip the edit forever. Such a file is
# stored with mtime_ns 0 so the next run hashes it again. Whole-second mtimes come from coarse file systems
# (FAT/exFAT 2 s, HFS+/SMB/many NFS 1 s): a 2 s window; finer ones (ns, µs, Linux jiffies of <= 10 ms) 50 ms,
# and those are settled at the end of the run: once the window has passed, a file hashed again to the same
# digest keeps its real mtime (a later write can no longer share it).
RACY_WINDOW_COARSE_NS = 2_000_000_000
RACY_WINDOW_FINE_NS = 50_000_000
CHUNKING_META = "chunking"  # meta key: the chunk limits (and tokenizer) the indexed chunks were made with
PENDING_META = "pending_files"  # meta key: files a cancelled (or killed) run did not get to read


def racy_window(mtime_ns: int) -> int:
    return RACY_WINDOW_COARSE_NS if mtime_ns % 1_000_000_000 == 0 else RACY_WINDOW_FINE_NS


def is_racy(mtime_ns: int, read_ns: int) -> bool:
    """True when a same-size write in the same timestamp tick as `mtime_ns` could follow a read at `read_ns`."""
    return abs(read_ns - mtime_ns) < racy_window(mtime_ns)


@dataclass
class IndexProgress:
    """Where a run is. Phases: "keywords" (files read, chunked and made keyword-searchable: files_done of
    files_total), "embedding" (chunks_done of chunks_total vectors), "done". `eta_seconds` is the phase's
    remaining time at the throughput measured so far in it (None until there is a measurement)."""

    files_done: int
    files_total: int
    current_file: str | None
    chunks_embedded: int = 0
    phase: str = "keywords"
    chunks_done: int = 0
    chunks_total: int = 0
    eta_seconds: float | None = None

    @property
    def fraction(self) -> float:
        if self.phase == "embedding":
            return self.chunks_done / self.chunks_total if self.chunks_total else 1.0
        return self.files_done / self.files_total if self.files_total else 1.0


class Throughput:
    """The measured rate of a phase (units a second), weighted toward recent rounds (EWMA) so that the ETA
    follows a machine that speeds up or slows down (this one is shared by several engineers' builds)."""

    def __init__(self, smoothing: float = 0.3) -> None:
        self.smoothing = smoothing
        self.rate: float | None = None

    def add(self, units: float, seconds: float) -> None:
        if units <= 0 or seconds <= 0:
            return
        r = units / seconds
        self.rate = r if self.rate is None else self.smoothing * r + (1 - self.smoothing) * self.rate

    def eta(self, remaining: float) -> float | None:
        return max(0.0, remaining) / self.rate if self.rate else None


ProgressCallback = Callable[[IndexProgress], None]


@dataclass
class IndexSummary:
    files: int = 0  # files in the index after the run
    chunks: int = 0  # chunks in the index after the run
    scanned: int = 0
    changed: int = 0
    unchanged: int = 0
    deleted: int = 0
    files_read: int = 0
    new_chunks: int = 0
    embedded: int = 0
    reused: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    seconds: float = 0.0
    cancelled: bool = False
    paused: bool = False  # embedding stopped by pause(); the text index is complete
    declined: bool = False  # the cost of embedding was not confirmed: keyword search only
    unusable: bool = False  # the provider failed for a reason that makes it unusable now (key, network, down)
    pending_files: int = 0  # files not read yet when the run was cancelled (the next run reads them)
    unembedded: int = 0  # chunks still without a vector after the run
    degraded: str | None = None
    skipped: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(
        default_factory=lambda: {"scan": 0.0, "read": 0.0, "chunk": 0.0, "embed": 0.0, "store": 0.0}
    )
    embedded_paths: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)  # (path, cause): errors, not skip rules

    def failure_causes(self) -> dict[str, int]:
        """Each distinct cause of a failed file and how many files it failed (one line each in reports)."""
        causes: dict[str, int] = {}
        for _, cause in self.failed:
            causes[cause] = causes.get(cause, 0) + 1
        return causes

    # the provider is down or rate limiting: no more embedding calls in this pass (retried on the next one)
    embedding_stopped: bool = False

    def to_json(self) -> dict:
        return {
            "files": self.files, "chunks": self.chunks, "scanned": self.scanned, "changed": self.changed,
            "unchanged": self.unchanged, "deleted": self.deleted, "filesRead": self.files_read,
            "newChunks": self.new_chunks, "embedded": self.embedded, "reused": self.reused, "tokens": self.tokens,
            "costUsd": round(self.cost_usd, 6), "seconds": round(self.seconds, 3), "cancelled": self.cancelled,
            "paused": self.paused, "declined": self.declined, "pendingFiles": self.pending_files, "unembeddedChunks": self.unembedded,
            "degraded": self.degraded, "skipped": [{"path": p, "reason": r} for p, r in self.skipped],
            "warnings": self.warnings, "timings": {k: round(v, 3) for k, v in self.timings.items()},
            "failed": [{"path": p, "cause": c} for p, c in self.failed],
        }  # fmt: skip


@dataclass
class _Prepared:
    entry: ScanEntry
    record: FileRecord
    chunks: list[Chunk]
    meta: FileMeta


class Indexer:
    """Brings the store in line with the files on disk."""

    def __init__(self, root: Path, settings: Settings, store: Store, provider: Provider) -> None:
        self.root = Path(root)
        self.settings = settings
        self.store = store
        self.provider = provider
        self._lock = threading.Lock()  # one run at a time
        # held while files are read and stored: a run's text phase takes it a batch at a time, so that a
        # refresh of a saved file (or a search's lazy sync) waits for one batch, never for a whole run
        self._write_lock = threading.Lock()
        self.paused = threading.Event()  # set: runs stop embedding (the text index stays live)
        self.on_lock_wait: Callable[[int | None], None] | None = (
            None  # told when another process holds the index
        )

    # -- configuration -------------------------------------------------------------------------------------
    @property
    def embeds(self) -> bool:
        return isinstance(self.provider, EmbeddingProvider) and not self.provider.failed

    def limits(self) -> ChunkLimits:
        c = self.settings.chunking
        window = self.provider.max_input_tokens if isinstance(self.provider, EmbeddingProvider) else 0
        return limits_for(c.max_tokens, c.target_tokens, c.overlap_tokens, window)

    def chunking_signature(self) -> str:
        """What the chunks depend on besides the text: the effective limits and whose tokens they count.

        Stored in the meta table after a full run; a run that finds another signature re-chunks every file
        (switching to a model with a smaller input window must not leave chunks it silently truncates).
        """
        lim = self.limits()
        p = self.provider
        counts = isinstance(p, EmbeddingProvider) and callable(getattr(p, "count_tokens", None))
        tokenizer = f"{p.name}:{p.model}" if counts else "estimate"
        return json.dumps(
            {
                "max": lim.max_tokens,
                "target": lim.target_tokens,
                "overlap": lim.overlap_tokens,
                "tokenizer": tokenizer,
                "chunker": CHUNKER_VERSION,  # the same text can chunk differently after a chunker change
            },
            sort_keys=True,
        )

    def needs_rechunk(self) -> bool:
        """True when the indexed chunks were made with other limits (or a tokenizer) than the current ones."""
        stored = self.store.get_meta(CHUNKING_META)
        if stored is None:  # an index written before the limits were recorded: unknown unless it is empty
            return bool(self.store.file_states())
        return stored != self.chunking_signature()

    def token_counter(self) -> Callable[[str], int]:
        """The provider's own tokenizer when it has one (local models count word pieces), else the estimate.

        Chunk limits are in the model's tokens: with the ~4-characters estimate, Japanese text or a table
        of numbers makes chunks of twice MiniLM's 256 word pieces, and the model silently drops the rest.
        """
        count = getattr(self.provider, "count_tokens", None)
        if not self.embeds or not callable(count):
            return estimate_tokens
        try:
            count("probe")
        except Exception as exc:  # the model cannot load: chunk by the estimate, embedding will report it
            log.warning("%s cannot count tokens (%s); chunking by estimate", self.provider.name, exc)
            return estimate_tokens
        return count

    def ensure_vector_table(self) -> bool:
        """Match the store's vector table to the provider. True when vectors were reset (model changed)."""
        p = self.provider
        if isinstance(p, EmbeddingProvider):
            if not p.dimensions:
                stored_key, stored_dims = self.store.vector_model()
                if stored_key == p.vector_key and stored_dims and self.store.has_vectors():
                    p.dimensions = stored_dims  # (a wrong guess is caught by the first response's size)
                else:
                    p.dimensions = int(len(p.embed_query("dimension probe")))
            return self.store.configure_vectors(p.name, p.vector_key, p.dimensions)
        return False

    # -- one file ------------------------------------------------------------------------------------------
    def read_bytes(self, path: Path) -> bytes:
        """Every file read goes through here (counted: a no-op reindex must read nothing).

        Opened non-blocking and checked to be a regular file before reading: a FIFO or device named `*.md`
        (or a file swapped for one after the scan) must never block the run."""
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, "not a regular file")
            os.set_blocking(fd, True)
            with os.fdopen(fd, "rb", closefd=False) as f:
                return f.read()
        finally:
            os.close(fd)

    def prepare(self, entry: ScanEntry, data: bytes, summary: IndexSummary) -> _Prepared | None:
        t0 = time.perf_counter()
        try:
            decoded = decode(data, entry.rel)
        except BinaryFile as exc:
            summary.skipped.append((entry.rel, "binary or undecodable"))
            log.warning("skipping %s", exc)
            return None
        if decoded.warning:
            summary.warnings.append(decoded.warning)
        try:
            meta = extract_metadata(entry.rel, decoded.text)
            chunks = chunk_document(decoded.text, meta, self.limits(), self.token_counter())
        except Exception as exc:  # one odd file must never stop a run over thousands
            log.exception("skipping %s: it could not be chunked", entry.rel)
            summary.skipped.append((entry.rel, f"could not be chunked ({type(exc).__name__}: {exc})"))
            return None
        if meta.warning:
            summary.warnings.append(meta.warning)
        summary.timings["chunk"] += time.perf_counter() - t0
        record = FileRecord(
            path=entry.rel, content_hash=hashlib.sha256(data).hexdigest(), mtime_ns=entry.mtime_ns, size=entry.size,
            file_type=meta.file_type, encoding=decoded.encoding, entity_type=meta.entity_type,
            entity_name=meta.entity_name, display_name=meta.display_name, aliases=meta.aliases,
            book_id=meta.book_id, chapter_id=meta.chapter_id, visibility=meta.visibility, corpus=entry.corpus,
            warning=meta.warning or decoded.warning,
        )  # fmt: skip
        return _Prepared(entry, record, chunks, meta)

    def _rows(self, prep: _Prepared) -> list[ChunkRow]:
        m = prep.meta
        return [
            ChunkRow(
                c.chunk_index,
                c.kind,
                c.section_heading,
                c.heading_path,
                c.start_line,
                c.end_line,
                c.content_hash,
                c.preview,
                c.token_count,
                c.text,
                m.file_type,
                m.entity_type,
                m.entity_name,
                m.book_id,
                m.chapter_id,
                m.chapter_num,
                m.visibility,
                prep.entry.corpus,
            )  # fmt: skip
            for c in prep.chunks
        ]

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
    ) -> IndexSummary:
        """Index the project (or just `paths`, relative); only one run at a time per project.

        Two phases: every changed file is read, chunked and stored (keyword-searchable, with the vectors of
        chunks whose text did not change); then chunks without a vector are embedded, `first` files first,
        then the most recently modified, leaving out `hold` (files still in their quiet period; a callable
        is asked again whenever the phase looks for more work). With
        embed=False, or while paused, only the first phase runs. With a paid provider and `confirm`, an
        embedding phase estimated above `confirmCostAboveUsd` runs only if confirm(estimate) says yes.

        One run at a time per index across processes too (index_lock.py): a run finding another process's
        run in progress waits for it (IndexBusy instead with wait=False)."""
        with self._lock, contextlib.ExitStack() as locked:
            try:
                locked.enter_context(self._index_lock(wait, cancel))
            except IndexCancelled:  # cancelled while another process held the index: nothing was done
                return IndexSummary(cancelled=True)
            held = hold if callable(hold) else (lambda fixed=set(hold): fixed)
            return self._run(full, None if paths is None else list(paths), progress, cancel, embed, held,
                             list(first), confirm)  # fmt: skip

    def _index_lock(
        self, wait: bool, cancel: threading.Event | None
    ) -> contextlib.AbstractContextManager[None]:
        if self.store.path == ":memory:":
            return contextlib.nullcontext()
        return index_lock(Path(self.store.path).parent, wait=wait, cancel=cancel, on_wait=self.on_lock_wait)

    def refresh(self, paths: Iterable[str]) -> IndexSummary:
        """The cheap text pass for files known (or suspected) to have changed: re-read, re-chunk and replace
        their chunks, keywords, line ranges and metadata now; nothing is embedded (new or changed chunks wait
        for the quiet period). Does not wait for a run in progress, only for the batch it is storing."""
        summary = IndexSummary()
        start = time.perf_counter()
        with self._write_lock:
            entries, stale = self._entries_for(list(paths), summary)
            for rel in stale:
                if self.store.delete_file(rel):
                    summary.deleted += 1
            states = self.store.file_states_for(e.rel for e in entries)
            racy: list[tuple[ScanEntry, str]] = []
            batch = []
            for e in entries:
                try:
                    prep = self._prepare_one(e, states, True, summary, racy)
                except Exception as exc:  # noqa: BLE001 - one odd path must never stop the others
                    self._file_failed(e.rel, exc, summary)
                    continue
                if prep is not None:
                    summary.changed += 1
                    batch.append(prep)
            if batch:
                self._flush(batch, summary)
        self._settle_racy(racy)
        summary.scanned = len(entries)
        summary.seconds = time.perf_counter() - start
        return summary

    def _run(self, full, paths, progress, cancel, embed, hold, first, confirm) -> IndexSummary:
        summary = IndexSummary()
        start = time.perf_counter()
        if isinstance(self.provider, EmbeddingProvider):
            self.provider.begin_pass()  # a provider that stopped calling its server tries again
        if self.embeds and (embed or self.provider.dimensions):
            self.store.drop_unusable_vectors()  # once per index: rows stored before vectors were checked
            try:
                if self.ensure_vector_table():
                    summary.warnings.append(
                        "embedding model changed: vectors rebuilt from cache or re-embedded"
                    )
            except ProviderError as exc:
                self._provider_failed(exc, summary)
        signature = self.chunking_signature()
        rechunk = self.needs_rechunk()
        if not rechunk:
            self.store.set_meta(CHUNKING_META, signature)  # (an empty index: every chunk will use these)
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
            stale = [p for p in self.store.file_states() if p not in seen]
        else:
            entries, stale = self._entries_for(paths, summary)
            full = True  # explicit paths: always check content (hash decides)
        summary.timings["scan"] = time.perf_counter() - t0
        summary.scanned = len(entries)
        states = self.store.file_states()
        todo = []
        for e in entries:
            st = states.get(e.rel)
            if (
                not full
                and st is not None
                and st.mtime_ns == e.mtime_ns
                and st.size == e.size
                and os.access(
                    e.abs_path, os.R_OK
                )  # chmod changes no mtime: an unreadable file is read (and dropped)
            ):
                summary.unchanged += 1
            else:
                todo.append(e)
        for rel in stale:
            try:
                if self.store.delete_file(rel):
                    summary.deleted += 1
            except Exception as exc:  # one odd path must never stop the run
                self._file_failed(rel, exc, summary)
        total = len(todo)
        stored = [0]  # files of `todo` stored so far (a cancelled run leaves the rest to the next one)
        text_done = False
        try:
            self._text_phase(todo, states, full, summary, progress, cancel, stored)
            text_done = True
            if embed and self.embeds and not self.paused.is_set() and not summary.degraded:
                if self._confirmed(confirm, hold, summary):
                    self._embed_phase(summary, total, progress, cancel, hold, first)
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
            self.store.set_meta(CHUNKING_META, signature)  # every file was re-chunked with these limits
        if progress:
            progress(IndexProgress(total, total, None, summary.embedded, "done"))
        return summary

    def _text_phase(
        self,
        todo: list[ScanEntry],
        states: dict,
        full: bool,
        summary: IndexSummary,
        progress: ProgressCallback | None,
        cancel: threading.Event | None,
        stored: list[int],
    ) -> None:
        """Read, chunk and store `todo` a batch at a time (the write lock is held per batch)."""
        total = len(todo)
        rate = Throughput()
        racy: list[
            tuple[ScanEntry, str]
        ] = []  # files stored with mtime 0, and the digest they were read with
        n = 0
        while n < total:
            t0 = time.perf_counter()
            begin = n
            with self._write_lock:
                batch: list[_Prepared] = []
                batch_chunks = 0
                while n < total:
                    if cancel is not None and cancel.is_set():
                        raise IndexCancelled("indexing cancelled")
                    e = todo[n]
                    if progress:
                        progress(IndexProgress(n, total, e.rel, summary.embedded, "keywords",
                                               eta_seconds=rate.eta(total - n)))  # fmt: skip
                    n += 1
                    try:
                        prep = self._prepare_one(e, states, full, summary, racy)
                    except (IndexCancelled, KeyboardInterrupt):
                        raise
                    except Exception as exc:  # one odd path must never stop a run over thousands
                        self._file_failed(e.rel, exc, summary)
                        continue
                    if prep is None:
                        continue
                    summary.changed += 1
                    batch.append(prep)
                    batch_chunks += len(prep.chunks)
                    if batch_chunks >= max(self.settings.batch_size, 32) or len(batch) >= 64:
                        break
                if batch:
                    self._flush(batch, summary)
                stored[0] = n
            self._settle_racy(racy)  # (every racy file so far is stored: a killed run keeps them)
            rate.add(n - begin, time.perf_counter() - t0)

    def _prepare_one(
        self, e: ScanEntry, states: dict, full: bool, summary: IndexSummary, racy: list[tuple[ScanEntry, str]]
    ) -> _Prepared | None:
        """Read one file; None when it needs no new chunks (unchanged content, unreadable, skipped)."""
        t0 = time.perf_counter()
        try:
            data = self.read_bytes(e.abs_path)
        except OSError as exc:
            summary.skipped.append((e.rel, f"unreadable ({exc.strerror or exc})"))
            if e.rel in states:  # gone or unreadable now: its old text must not stay searchable
                self.store.delete_file(e.rel)
            return None
        read_ns = time.time_ns()
        summary.files_read += 1
        summary.timings["read"] += time.perf_counter() - t0
        # a racy mtime is stored as 0: the next run hashes the file again instead of trusting (mtime, size)
        mtime_ns = 0 if is_racy(e.mtime_ns, read_ns) else e.mtime_ns
        st = states.get(e.rel)
        digest = hashlib.sha256(data).hexdigest()
        if mtime_ns == 0:
            racy.append((e, digest))
        if st is not None and st.content_hash == digest and not full:
            self.store.touch_file(e.rel, mtime_ns, e.size)
            summary.unchanged += 1
            return None
        prep = self.prepare(e, data, summary)
        if prep is None:
            if st is not None:
                self.store.delete_file(e.rel)
            return None
        prep.record.mtime_ns = mtime_ns
        return prep

    def _settle_racy(self, racy: list[tuple[ScanEntry, str]]) -> None:
        """Give files read within a fine-grained timestamp tick their real mtime back, when still unchanged.

        Once the racy window has passed, any later write gets a later mtime; so a file whose (mtime, size)
        and content still match what was indexed can be trusted by the fast path again. Coarse (whole
        second) timestamps are left at 0: the next run hashes those files again.
        """
        fine = [(e, d) for e, d in racy if racy_window(e.mtime_ns) == RACY_WINDOW_FINE_NS]
        racy.clear()
        if not fine:
            return
        wait_ns = max(e.mtime_ns for e, _ in fine) + RACY_WINDOW_FINE_NS - time.time_ns()
        if wait_ns > 0:
            time.sleep(min(wait_ns, RACY_WINDOW_FINE_NS) / 1e9)
        for e, digest in fine:
            try:
                st = e.abs_path.stat()
                if (st.st_mtime_ns, st.st_size) != (e.mtime_ns, e.size) or is_racy(
                    e.mtime_ns, time.time_ns()
                ):
                    continue
                row = self.store.get_file(e.rel)
                if row is None or row["content_hash"] != digest or row["mtime_ns"] != 0:
                    continue
                if hashlib.sha256(self.read_bytes(e.abs_path)).hexdigest() == digest:
                    self.store.touch_file(e.rel, e.mtime_ns, e.size)
            except Exception:  # left at mtime 0: the next run hashes it again
                log.debug("could not settle the racy mtime of %s", e.rel, exc_info=True)

    def _file_failed(self, rel: str, exc: BaseException, summary: IndexSummary) -> None:
        """A file an error kept out of the index: one log line per distinct cause (a full disk fails every
        file the same way: one line, not a traceback per file); the traceback only at debug level."""
        shown = shown_name(rel)
        cause = f"{type(exc).__name__}: {exc}"
        if all(c != cause for _, c in summary.failed):
            log.error("%s could not be indexed: %s", shown, cause)
        log.debug("%s could not be indexed", shown, exc_info=exc)
        summary.failed.append((shown, cause))
        summary.skipped.append((shown, f"could not be indexed ({cause})"))

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
            entries.append(
                ScanEntry(rel, abs_path, st.st_mtime_ns, st.st_size, corpus_for(rel, self.settings))
            )
        return entries, stale

    def _vectors_current(self) -> bool:
        """True when the index holds vectors of the active model (so cached vectors of it may go in)."""
        if not self.embeds or not self.store.has_vectors():
            return False
        model, dims = self.store.vector_model()
        return model == self.provider.vector_key and dims == self.provider.dimensions

    def _flush(self, batch: list[_Prepared], summary: IndexSummary) -> None:
        """Store prepared files: chunks, keywords, line ranges, metadata. Nothing is sent to the provider here:
        chunks whose text did not change keep their vectors, texts embedded before (the cache) get theirs, the
        rest wait for the embedding phase."""
        vectors: dict[str, np.ndarray] = {}
        if self._vectors_current():
            wanted = {c.content_hash for p in batch for c in p.chunks}
            vectors = self.store.cached_vectors(self.provider.vector_key, wanted, self.provider.dimensions)
            summary.reused += sum(1 for p in batch for c in p.chunks if c.content_hash in vectors)
        t0 = time.perf_counter()
        for prep in batch:
            try:
                self.store.replace_file(prep.record, self._rows(prep), vectors)
            except Exception as exc:  # one odd path must never lose the rest of the batch
                summary.changed -= 1
                self._file_failed(prep.record.path, exc, summary)
                continue
            summary.new_chunks += len(prep.chunks)
        summary.timings["store"] += time.perf_counter() - t0

    def _cache_key(self) -> str:
        """The embedding-cache key vectors are written under: the model (with its prefixes) and their size."""
        p = self.provider
        return cache_key(p.vector_key if isinstance(p, EmbeddingProvider) else p.model, p.dimensions)

    def _embed(self, hashes: list[str], texts: list[str], summary: IndexSummary) -> dict[str, np.ndarray]:
        if not self.embeds or summary.embedding_stopped:
            return {}
        p = self.provider
        assert isinstance(p, EmbeddingProvider)
        out: dict[str, np.ndarray] = {}
        done = 0
        t0 = time.perf_counter()
        try:
            # a provider batch at a time: what was embedded before a failure is kept (and stored)
            while done < len(texts):
                part = slice(done, done + max(1, p.batch_size))
                try:
                    result = p.embed_documents(texts[part])
                except ProviderError as exc:
                    self._provider_failed(exc, summary)
                    break
                out.update(zip(hashes[part], result.vectors, strict=True))
                done += len(result.vectors)
                summary.tokens += result.tokens
                summary.cost_usd += result.tokens * p.cost_per_million_tokens / 1e6
        finally:
            summary.timings["embed"] += time.perf_counter() - t0
        summary.embedded += done
        return out

    def _provider_failed(self, exc: ProviderError, summary: IndexSummary) -> None:
        reason = str(exc)
        summary.unusable = isinstance(exc, ProviderAuthError | ProviderUnavailable)
        if isinstance(self.provider, EmbeddingProvider) and isinstance(exc, ProviderAuthError):
            self.provider.failed = reason
        if isinstance(exc, ProviderUnavailable | ProviderRateLimited):
            summary.embedding_stopped = True  # the rest of the pass is keyword-indexed without calling it
        summary.degraded = reason
        summary.warnings.append(f"embedding failed, indexed for keyword search only: {reason}")
        log.warning("embedding failed, indexed for keyword search only: %s", reason)

    def _embed_phase(
        self,
        summary: IndexSummary,
        files_total: int,
        progress: ProgressCallback | None,
        cancel: threading.Event | None,
        hold: Callable[[], Iterable[str]],
        first: list[str],
    ) -> None:
        """Embed every chunk without a vector (new or changed text, an earlier failure, a model change), a
        round of `batch_size` chunks at a time: `first` files, then the most recently modified; `hold` files
        wait. Stops between rounds when cancelled (IndexCancelled) or paused (summary.paused)."""
        if not self.embeds or summary.degraded:
            return
        todo = self.store.unembedded(hold(), first)
        size = max(1, self.settings.batch_size)
        done = done_tokens = 0
        total_tokens = sum(t for *_, t in todo)
        rate = Throughput()  # tokens a second: chunks differ in length, tokens are what the model works on
        seen: set[int] = set()
        pos = 0
        while True:
            if pos >= len(todo):  # chunks stored meanwhile (a save, a lazy sync) are embedded too
                todo = [r for r in self.store.unembedded(hold(), first) if r[0] not in seen]
                if not todo:
                    return
                pos, total_tokens = 0, done_tokens + sum(t for *_, t in todo)
            if cancel is not None and cancel.is_set():
                raise IndexCancelled("indexing cancelled")
            if self.paused.is_set():
                summary.paused = True
                log.info("embedding paused; %d chunks wait", len(todo) - pos)
                return
            part = todo[pos : pos + size]
            pos += len(part)
            seen.update(r[0] for r in part)
            t0 = time.perf_counter()
            rows = self.store.chunk_texts([r[0] for r in part])  # (a chunk replaced meanwhile is gone)
            texts = {h: embed_text_for(hp, text) for h, hp, text in rows.values()}
            vectors = self.store.cached_vectors(self.provider.vector_key, texts, self.provider.dimensions)
            summary.reused += len(vectors)
            missing = [h for h in texts if h not in vectors]
            if missing:
                got = self._embed(missing, [texts[h] for h in missing], summary)
                if not got:
                    return  # the provider failed: summary.degraded says why
                vectors.update(got)
                summary.embedded_paths += list(dict.fromkeys(r[1] for r in part if r[2] in got))
            items = [(cid, h, vectors[h]) for cid, (h, _, _) in rows.items() if h in vectors]
            t1 = time.perf_counter()
            self.store.set_vectors(items, self._cache_key())
            summary.timings["store"] += time.perf_counter() - t1
            done += len(part)
            done_tokens += sum(t for *_, t in part)
            if missing:
                rate.add(sum(t for *_, t in part), time.perf_counter() - t0)
            if progress:
                progress(IndexProgress(files_total, files_total, part[-1][1], summary.embedded, "embedding",
                                       chunks_done=done, chunks_total=done + len(todo) - pos,
                                       eta_seconds=rate.eta(total_tokens - done_tokens)))  # fmt: skip

    def _confirmed(
        self, confirm: Callable[[dict], bool] | None, hold: Callable[[], Iterable[str]], summary: IndexSummary
    ) -> bool:
        """False when a paid provider's estimate is over the setting and `confirm` declined it."""
        limit = self.settings.confirm_cost_above_usd
        if confirm is None or limit < 0 or not self.provider.cost_per_million_tokens:
            return True
        estimate = self.embed_estimate(hold())
        if estimate["costUsd"] <= limit or estimate["chunks"] == 0:
            return True
        if confirm(estimate):
            return True
        summary.declined = True
        log.info("embedding not confirmed (about $%.4f): keyword search only for now", estimate["costUsd"])
        return False

    def embed_estimate(self, hold: Iterable[str] = ()) -> dict:
        """What embedding the chunks that have no vector yet would cost (none of them sent anywhere)."""
        held = set(hold)
        if self._vectors_current():
            rows = self.store.unembedded(held)
        else:  # no vectors of this model yet: every chunk (the embedding cache may still hold some)
            rows = [(0, p, h, t) for p, h, t in self.store.chunk_hashes() if p not in held]
        model = self.provider.model if self.embeds else ""
        key = self.provider.vector_key if isinstance(self.provider, EmbeddingProvider) else ""
        cached = (
            self.store.cached_vectors(key, [r[2] for r in rows], self.provider.dimensions) if model else {}
        )
        tokens: dict[str, int] = {}
        files: set[str] = set()
        for _, path, h, t in rows:
            if h not in cached:
                tokens[h] = t
                files.add(path)
        price = self.provider.cost_per_million_tokens if self.embeds else 0.0
        return {"provider": self.provider.name, "model": model or None, "files": len(files),
                "chunks": len(tokens), "tokens": sum(tokens.values()),
                "costUsd": round(sum(tokens.values()) * price / 1e6, 6)}  # fmt: skip

    def _finish(self, summary: IndexSummary, start: float) -> None:
        if summary.tokens or summary.embedded:
            self.store.log_embedding(
                self.provider.name, self.provider.model, summary.tokens, summary.embedded, summary.cost_usd
            )
        stats = self.store.stats()
        summary.files, summary.chunks = stats["totalFiles"], stats["totalChunks"]
        summary.unembedded = self.store.count_unembedded() if self.embeds else 0
        summary.seconds = time.perf_counter() - start
        self.store.set_meta("last_run", str(time.time()))

    # -- estimate ------------------------------------------------------------------------------------------
    def estimate(self) -> dict:
        """What `index` would embed now, and its cost, without calling the provider."""
        summary = IndexSummary()
        result = scan(self.root, self.settings)
        states = self.store.file_states()
        p = self.provider
        model = p.vector_key if isinstance(p, EmbeddingProvider) else p.model
        # Unchanged files cost nothing only if their vectors come from this very model; after a model or
        # dimension change the run re-embeds everything the cache does not hold.
        stored_model, stored_dims = self.store.vector_model()
        dims = self.provider.dimensions
        same_model = stored_model == model and (not dims or stored_dims == dims)
        # other chunk limits than the index was made with: the next run re-chunks every file
        vectors_current = self.store.has_vectors() and same_model and not self.needs_rechunk()
        chunks_total = 0
        to_embed: dict[str, int] = {}  # content hash -> tokens (a text in several chunks is embedded once)
        unchanged: set[str] = set()
        for e in result.entries:
            st = states.get(e.rel)
            if st is not None and st.mtime_ns == e.mtime_ns and st.size == e.size and vectors_current:
                unchanged.add(e.rel)
                continue
            try:
                prep = self.prepare(e, self.read_bytes(e.abs_path), summary)
            except OSError:
                continue
            if prep is None:
                continue
            chunks_total += len(prep.chunks)
            cached = (
                self.store.cached_vectors(model, [c.content_hash for c in prep.chunks], dims) if model else {}
            )
            for c in prep.chunks:
                if c.content_hash not in cached:
                    to_embed[c.content_hash] = c.token_count
        if vectors_current and unchanged:
            # chunks of unchanged files still without a vector (an earlier provider failure) are backfilled
            rows = [r for r in self.store.chunks_missing_vectors() if r["path"] in unchanged]
            cached = self.store.cached_vectors(model, [r["content_hash"] for r in rows], dims)
            for r in rows:
                if r["content_hash"] not in cached:
                    text = embed_text_for(r["heading_path"] or "", r["text"] or "")
                    to_embed[r["content_hash"]] = estimate_tokens(text)
        chunks_new, tokens_new = len(to_embed), sum(to_embed.values())
        price = self.provider.cost_per_million_tokens
        return {
            "provider": self.provider.name, "model": self.provider.model, "files": len(result.entries),
            "chunksToCheck": chunks_total, "chunksToEmbed": chunks_new if self.embeds else 0,
            "tokensToEmbed": tokens_new if self.embeds else 0,
            "estimatedCostUsd": round(tokens_new * price / 1e6, 6) if self.embeds else 0.0,
            "fullReindexCostUsd": round(self.store.total_tokens_indexed() * price / 1e6, 6),
        }  # fmt: skip

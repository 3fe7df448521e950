"""Indexing runs (SPEC 7): scan, read only what changed, chunk, embed what is new, one transaction per file."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .chunker import CHUNKER_VERSION, Chunk, ChunkLimits, chunk_document, limits_for
from .config import Settings
from .embeddings import Provider
from .embeddings.base import EmbeddingProvider, estimate_tokens
from .errors import IndexCancelled, ProviderError
from .index_embed import EmbeddingPhase, Overlap
from .index_lock import index_lock
from .index_records import (  # noqa: F401 - records re-exported: callers import them from the indexer
    RACY_WINDOW_FINE_NS,
    IndexProgress,
    IndexSummary,
    ProgressCallback,
    Throughput,
    is_racy,
    racy_window,
)
from .metadata import FileMeta, extract_metadata
from .parse_memo import ParseMemo, memo_of, parse_with_memo
from .scanner import ScanEntry, corpus_for, is_indexable, scan, shown_name, symlink_reason, utf8_name
from .store import ChunkRow, FileRecord, Store
from .textio import BinaryFile, decode, read_regular

log = logging.getLogger(__name__)

CHUNKING_META = "chunking"  # meta key: the chunk limits (and tokenizer) the indexed chunks were made with
MAX_PARSE_MEMOS = 20_000  # files whose last parse is remembered (a few kB each)
PENDING_META = "pending_files"  # meta key: files a cancelled (or killed) run did not get to read
# The text phase stores files a batch at a time, one transaction each, holding the write lock (a save in the
# editor waits for the batch in progress): up to 512 chunks (~0.1 s of chunking here), 256 files or half a
# second, whichever comes first. Each commit starts a new keyword segment for FTS5 to merge: 58 commits of 128
# chunks wrote 60 MB for a 1,001-note vault, 17 of 512 wrote 35 MB (0.06 s less).
TEXT_BATCH_CHUNKS = 512
TEXT_BATCH_FILES = 256
TEXT_BATCH_SECONDS = 0.5


@dataclass
class _Prepared:
    entry: ScanEntry
    record: FileRecord
    chunks: list[Chunk]
    meta: FileMeta


class Indexer(EmbeddingPhase):
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
        self._parse_memos: dict[str, ParseMemo] = {}  # path -> what its next parse can reuse (parse_memo.py)
        self.on_lock_wait: Callable[[int | None], None] | None = (
            None  # told when another process holds the index
        )

    # -- configuration -------------------------------------------------------------------------------------
    @property
    def embeds(self) -> bool:
        return isinstance(self.provider, EmbeddingProvider) and not self.provider.failed

    def limits(self) -> ChunkLimits:
        c = self.settings.chunking
        p = self.provider if isinstance(self.provider, EmbeddingProvider) else None
        window, passage = (p.max_input_tokens, p.passage_tokens) if p else (0, 0)
        return limits_for(c.max_tokens, c.target_tokens, c.overlap_tokens, window, passage)

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
        counter = getattr(self.provider, "token_counter", None)
        return counter() if callable(counter) else count

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

        A FIFO or device named `*.md` (or a file swapped for one after the scan) must never block the run:
        textio.read_regular refuses it."""
        return read_regular(path)

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
            # an edited file re-parses from its last unchanged top-level heading (parse_memo.py)
            blocks = parse_with_memo(decoded.text, self._parse_memos.pop(entry.rel, None))
            chunks = chunk_document(decoded.text, meta, self.limits(), self.token_counter(), blocks)
            self._remember_parse(entry.rel, memo_of(decoded.text, blocks))
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

    def _remember_parse(self, rel: str, memo: ParseMemo | None) -> None:
        if memo is None:
            return
        self._parse_memos[rel] = memo
        while len(self._parse_memos) > MAX_PARSE_MEMOS:  # the least recently read go first
            self._parse_memos.pop(next(iter(self._parse_memos)))

    def _rows(self, prep: _Prepared) -> list[ChunkRow]:
        m = prep.meta
        return [ChunkRow(c.chunk_index, c.kind, c.section_heading, c.heading_path, c.start_line, c.end_line,
                         c.content_hash, c.preview, c.token_count, c.text, m.file_type, m.entity_type,
                         m.entity_name, m.book_id, m.chapter_id, m.chapter_num, m.visibility, prep.entry.corpus)
                for c in prep.chunks]  # fmt: skip

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
            overlap = self._overlap(embed, confirm, summary, len(todo), cancel, hold)
            if overlap is not None and first:  # open files first: keyword-searchable and embedded first
                rank = {p: i for i, p in enumerate(first)}
                todo.sort(key=lambda e: rank.get(e.rel, len(rank)))
            try:
                self._text_phase(todo, states, full, summary, progress, cancel, stored, overlap)
            finally:
                if overlap is not None:
                    overlap.close()
                    overlap.merge_into(summary)
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
        overlap: Overlap | None = None,
    ) -> None:
        """Read, chunk and store `todo` a batch at a time (the write lock is held per batch); the chunks left
        without a vector go to `overlap` to be embedded meanwhile."""
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
                locked = time.perf_counter()
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
                    if (
                        batch_chunks >= TEXT_BATCH_CHUNKS
                        or len(batch) >= TEXT_BATCH_FILES
                        or time.perf_counter() - locked >= TEXT_BATCH_SECONDS
                    ):
                        break
                if batch:
                    unembedded = self._flush(batch, summary)
                    if overlap is not None:
                        overlap.feed(unembedded)
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

    def _flush(self, batch: list[_Prepared], summary: IndexSummary) -> list[tuple[int, str, str | None, int]]:
        """Store prepared files: chunks, keywords, line ranges, metadata. Nothing is sent to the provider here:
        chunks whose text did not change keep their vectors, texts embedded before (the cache) get theirs, the
        rest wait for the embedding phase: returned as (chunk id, path, None, 0), as `unembedded` rows."""
        unembedded: list[tuple[int, str, str | None, int]] = []
        vectors: dict[str, np.ndarray] = {}
        if self._vectors_current():
            wanted = {c.content_hash for p in batch for c in p.chunks}
            vectors = self.store.cached_vectors(self.provider.vector_key, wanted, self.provider.dimensions)
            summary.reused += sum(1 for p in batch for c in p.chunks if c.content_hash in vectors)
        t0 = time.perf_counter()
        stored: list[_Prepared] = []
        try:
            # one commit per batch (a commit per file was half the store time); each file is a savepoint in it
            with self.store.atomic():
                for prep in batch:
                    try:
                        ids = self.store.replace_file(prep.record, self._rows(prep), vectors)
                    except Exception as exc:  # one odd path must never lose the rest of the batch
                        summary.changed -= 1
                        self._file_failed(prep.record.path, exc, summary)
                        continue
                    stored.append(prep)
                    unembedded += [(cid, prep.record.path, None, 0) for cid in ids]
        except Exception as exc:  # the commit failed (a full disk): none of the batch was stored
            for prep in stored:
                summary.changed -= 1
                self._file_failed(prep.record.path, exc, summary)
            stored, unembedded = [], []
        summary.new_chunks += sum(len(p.chunks) for p in stored)
        summary.timings["store"] += time.perf_counter() - t0
        return unembedded

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

"""The text side of an index run: every changed file read, chunked and stored a batch at a time (keyword-
searchable at once, with the vectors of chunks whose text did not change), worker processes chunking ahead of
the store when the run is big (indexing/chunk_pool.py). `TextPhase` is held by `Indexer` and works on its
`IndexContext`."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import pickle
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import IndexCancelled
from ..files.metadata import FileMeta
from ..files.scanner import ScanEntry
from ..files.textio import BinaryFile, decode, read_regular
from ..markdown.chunker import Chunk
from ..markdown.parse_memo import ParseMemo
from ..markdown.preview import make_preview
from ..storage.base import ChunkRow, FileRecord, FileWrite
from . import mention_scan
from .chunk_pool import Chunked, ChunkPool, Early, ReadAhead, chunk_bytes, read_early, worker_count
from .context import IndexContext, file_failed
from .records import (
    RACY_WINDOW_FINE_NS,
    IndexProgress,
    IndexSummary,
    ProgressCallback,
    Throughput,
    is_racy,
    racy_window,
)

log = logging.getLogger(__name__)

MAX_PARSE_MEMOS = 20_000  # files whose last parse is remembered (a few kB each)
# The text phase stores files a batch at a time, one transaction each, holding the write lock (a save in the
# editor waits for the batch in progress): up to 512 chunks (~0.1 s of chunking here), 256 files or half a
# second, whichever comes first. Each commit starts a new keyword segment for FTS5 to merge: 58 commits of 128
# chunks wrote 60 MB for a 1,001-note vault, 17 of 512 wrote 35 MB (0.06 s less).
TEXT_BATCH_CHUNKS = 512
# A first index of many files (an empty index: DEFER_INDEXES_MIN_FILES) stores batches this many times bigger (in
# chunks): a quarter of the keyword segments for FTS5 to write and merge, a quarter of the commits (269k chunks: ~9%
# less store CPU, benchmarks row S22); a batch then holds the write lock ~0.1-0.3 s longer (a million chunks).
FIRST_INDEX_BATCH_FACTOR = 4
TEXT_BATCH_FILES = 256
TEXT_BATCH_SECONDS = 0.5
READ_AHEAD_FILES = 128  # with chunking workers: files read (and handed to them) ahead of the one being stored
# A first index of at least this many files writes into a chunk table without its secondary indexes and builds them
# at the end of the text phase (IndexStore.defer_indexes: 55k chunks, 1.4 s less CPU); below it, not worth a build.
DEFER_INDEXES_MIN_FILES = 200


@dataclass
class _Prepared:
    entry: ScanEntry
    record: FileRecord
    chunks: list[Chunk]
    meta: FileMeta
    data: bytes = b""  # what was read (its text is scanned for entity mentions when stored)
    cjk: bool = True  # its text may hold a CJK character (chunk_pool.Chunked.cjk)


class TextPhase:
    """Reading, chunking and storing: the first phase of a run (`run`) and the cheap refresh of a saved file."""

    def __init__(self, ctx: IndexContext) -> None:
        self.ctx = ctx
        # held while files are read and stored: a run's text phase takes it a batch at a time, so that a
        # refresh of a saved file (or a search's lazy sync) waits for one batch, never for a whole run
        self.write_lock = threading.Lock()
        self.refreshes = 0  # refresh() calls: a run's read-ahead re-reads files read before the last one
        self.parse_memos: dict[str, ParseMemo] = {}  # path -> what its next parse can reuse (markdown/parse_memo.py)
        self.finders: mention_scan.RunFinders | None = None  # during a run: its batches' entity finders

    def read_bytes(self, path: Path) -> bytes:
        """Every file read goes through here (counted: a no-op reindex must read nothing).

        A FIFO or device named `*.md` (or a file swapped for one after the scan) must never block the run:
        files.textio.read_regular refuses it."""
        return read_regular(path)

    def prepare(
        self,
        entry: ScanEntry,
        data: bytes,
        summary: IndexSummary,
        chunked: Chunked | None = None,
        digest: str | None = None,
    ) -> _Prepared | None:
        """A file's record and chunks, from its bytes (`chunked`: already chunked by a worker; `digest`: their
        sha256, when already known)."""
        t0 = time.perf_counter()
        memo = self.parse_memos.pop(entry.rel, None)
        if chunked is None:
            chunked = chunk_bytes(entry.rel, data, self.ctx.limits(), self.ctx.token_counter(), memo)
        if chunked.decode_warning:
            summary.warnings.append(chunked.decode_warning)
            if chunked.in_worker:  # (what decode() logs in process)
                log.info("%s", chunked.decode_warning)
        if chunked.meta is None or chunked.chunks is None:
            summary.skipped.append((entry.rel, chunked.skipped or "could not be chunked"))
            if chunked.crashed:
                log.error("skipping %s: it could not be chunked\n%s", entry.rel, chunked.detail)
            else:
                log.warning("skipping %s", chunked.detail or entry.rel)
            return None
        meta, chunks = chunked.meta, chunked.chunks
        self._remember_parse(entry.rel, chunked.memo)
        if meta.warning:
            summary.warnings.append(meta.warning)
            if chunked.in_worker:  # (what extract_metadata() logs in process)
                log.warning("%s", meta.warning)
        summary.timings["chunk"] += time.perf_counter() - t0
        record = FileRecord(
            path=entry.rel,
            content_hash=digest or hashlib.sha256(data).hexdigest(),
            mtime_ns=entry.mtime_ns,
            size=entry.size,
            file_type=meta.file_type,
            encoding=chunked.encoding,
            entity_type=meta.entity_type,
            entity_name=meta.entity_name,
            display_name=meta.display_name,
            aliases=meta.aliases,
            book_id=meta.book_id,
            chapter_id=meta.chapter_id,
            visibility=meta.visibility,
            corpus=entry.corpus,
            warning=meta.warning or chunked.decode_warning,
        )
        return _Prepared(entry, record, chunks, meta, data, chunked.cjk)

    def _remember_parse(self, rel: str, memo: ParseMemo | None) -> None:
        if memo is None:
            return
        self.parse_memos[rel] = memo
        while len(self.parse_memos) > MAX_PARSE_MEMOS:  # the least recently read go first
            self.parse_memos.pop(next(iter(self.parse_memos)))

    def _rows(self, prep: _Prepared) -> list[ChunkRow]:
        m = prep.meta
        if prep.chunks and not prep.chunks[0].preview and self.ctx.store.keeps_previews:
            for c in prep.chunks:  # (a worker's chunks come without: chunk_pool._chunk_in_worker)
                c.preview = make_preview(c.text)
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
                c.ident_words,
            )
            for c in prep.chunks
        ]

    def run(
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
        deferred = False
        if not states and len(todo) >= DEFER_INDEXES_MIN_FILES:  # a first index: indexes built once, at the end
            with self.write_lock:
                deferred = self.ctx.store.defer_indexes()
        try:
            self.finders = mention_scan.RunFinders(self.ctx.store)
            batch_chunks = TEXT_BATCH_CHUNKS * (FIRST_INDEX_BATCH_FACTOR if deferred else 1)
            self._run(todo, states, full, summary, progress, cancel, stored, batch_chunks)
        finally:
            self.finders = None
            if deferred:
                with self.write_lock:
                    try:
                        self.ctx.store.restore_indexes()
                    except Exception as exc:  # noqa: BLE001 - the next writable open builds them (meta records them)
                        log.warning("could not build the chunk indexes yet (%s: %s)", type(exc).__name__, exc)

    def _run(
        self,
        todo: list[ScanEntry],
        states: dict,
        full: bool,
        summary: IndexSummary,
        progress: ProgressCallback | None,
        cancel: threading.Event | None,
        stored: list[int],
        max_chunks: int,
    ) -> None:
        with self._read_ahead(todo, states, full, summary) as ahead:
            total = len(todo)
            rate = Throughput()
            # files stored with mtime 0, and the digest they were read with
            racy: list[tuple[ScanEntry, str]] = []
            n = 0
            while n < total:
                t0 = time.perf_counter()
                begin = n
                with self.write_lock:
                    locked = time.perf_counter()
                    batch: list[_Prepared] = []
                    batch_chunks = 0
                    while n < total:
                        if cancel is not None and cancel.is_set():
                            raise IndexCancelled("indexing cancelled")
                        e = todo[n]
                        if progress:
                            progress(
                                IndexProgress(
                                    n, total, e.rel, summary.embedded, "keywords", eta_seconds=rate.eta(total - n)
                                )
                            )
                        n += 1
                        try:
                            early = ahead.take(n - 1) if ahead else None
                            prep = self.prepare_one(
                                e, states, full, summary, racy, early, ahead if early is not None else None
                            )
                        except (IndexCancelled, KeyboardInterrupt):
                            raise
                        except Exception as exc:  # one odd path must never stop a run over thousands
                            file_failed(e.rel, exc, summary)
                            continue
                        if prep is None:
                            continue
                        summary.changed += 1
                        batch.append(prep)
                        batch_chunks += len(prep.chunks)
                        if (
                            batch_chunks >= max_chunks
                            or len(batch) >= TEXT_BATCH_FILES
                            or time.perf_counter() - locked >= TEXT_BATCH_SECONDS
                        ):
                            break
                    if batch:
                        self.flush(batch, summary)
                    stored[0] = n
                self.settle_racy(racy)  # (every racy file so far is stored: a killed run keeps them)
                rate.add(n - begin, time.perf_counter() - t0)

    @contextlib.contextmanager
    def _read_ahead(
        self, todo: list[ScanEntry], states: dict, full: bool, summary: IndexSummary
    ) -> Iterator[ReadAhead | None]:
        """Worker processes chunking `todo` ahead of the text phase, when it is big enough to pay for them
        (None: the indexer chunks every file itself); the workers it used go to `summary`."""
        workers = worker_count(len(todo), sum(e.size for e in todo))
        if workers:  # (the counter loads a local model: only for a run that chunks)
            count, limits = self.ctx.token_counter(), self.ctx.limits()
            try:
                pickle.dumps(count)  # a worker gets its own copy (a local model's tokenizer, or the estimate)
            except Exception as exc:  # noqa: BLE001 - a counter that cannot travel (a custom tokenizer's) stays
                log.debug("chunking in process: the token counter cannot go to a worker (%s)", exc)
                workers = 0
        if not workers:
            yield None
            return

        def changed(e: ScanEntry, digest: str) -> ParseMemo | None | bool:
            st = states.get(e.rel)
            if st is not None and st.content_hash == digest and not full:
                return False
            return self.parse_memos.get(e.rel)

        def chunk_here(rel: str, data: bytes, memo: ParseMemo | None) -> Chunked:
            # (a group the worker had not started, chunked here as the worker does: without previews, ~8% of its
            # CPU; `_rows` makes them for a store that keeps them)
            return chunk_bytes(rel, data, limits, count, memo, previews=False)

        with ChunkPool(workers, limits, count) as pool:
            ahead = ReadAhead(
                todo, pool, self.read_bytes, changed, lambda: self.refreshes, READ_AHEAD_FILES, chunk_here
            )
            try:
                yield ahead
            finally:
                ahead.close()
                summary.chunk_workers = ahead.workers_used

    def prepare_one(
        self,
        e: ScanEntry,
        states: dict,
        full: bool,
        summary: IndexSummary,
        racy: list[tuple[ScanEntry, str]],
        early: Early | None = None,
        ahead: ReadAhead | None = None,
    ) -> _Prepared | None:
        """Read one file (or take it as read ahead: `early`); None when it needs no new chunks (unchanged
        content, unreadable, skipped)."""
        t0 = time.perf_counter()
        if early is None:
            early = read_early(e.abs_path, self.read_bytes)
        summary.timings["read"] += early.seconds if ahead else time.perf_counter() - t0
        if early.data is None:
            err = early.error
            if not isinstance(err, OSError):
                raise err  # type: ignore[misc]  (this file failed, as if read now: _file_failed)
            summary.skipped.append((e.rel, f"unreadable ({err.strerror or err})"))
            if e.rel in states:  # gone or unreadable now: its old text must not stay searchable
                self.ctx.store.delete_file(e.rel)
                self._forget_entities()
            return None
        data, read_ns, digest = early.data, early.read_ns, early.digest
        summary.files_read += 1
        # a racy mtime is stored as 0: the next run hashes the file again instead of trusting (mtime, size)
        mtime_ns = 0 if is_racy(e.mtime_ns, read_ns) else e.mtime_ns
        st = states.get(e.rel)
        if mtime_ns == 0:
            racy.append((e, digest))
        if st is not None and st.content_hash == digest and not full:
            self.ctx.store.touch_file(e.rel, mtime_ns, e.size)
            summary.unchanged += 1
            return None
        t0 = time.perf_counter()
        chunked = ahead.result(early) if ahead else None  # a worker's, or chunked here while one was busy
        summary.timings["chunk"] += time.perf_counter() - t0
        prep = self.prepare(e, data, summary, chunked, digest)
        if prep is None:
            if st is not None:
                self.ctx.store.delete_file(e.rel)
                self._forget_entities()
            return None
        prep.record.mtime_ns = mtime_ns
        return prep

    def _forget_entities(self) -> None:
        if self.finders is not None:
            self.finders.forget()

    def settle_racy(self, racy: list[tuple[ScanEntry, str]]) -> None:
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
                if (st.st_mtime_ns, st.st_size) != (e.mtime_ns, e.size) or is_racy(e.mtime_ns, time.time_ns()):
                    continue
                row = self.ctx.store.get_file(e.rel)
                if row is None or row.content_hash != digest or row.mtime_ns != 0:
                    continue
                if hashlib.sha256(self.read_bytes(e.abs_path)).hexdigest() == digest:
                    self.ctx.store.touch_file(e.rel, e.mtime_ns, e.size)
            except Exception:  # left at mtime 0: the next run hashes it again
                log.debug("could not settle the racy mtime of %s", e.rel, exc_info=True)

    def flush(self, batch: list[_Prepared], summary: IndexSummary) -> None:
        """Store prepared files: chunks, keywords, line ranges, metadata. Nothing is sent to the provider here:
        chunks whose text did not change keep their vectors, texts embedded before (the cache) get theirs, the
        rest wait for the embedding phase."""
        vectors: dict[str, np.ndarray] = {}
        if self.ctx.vectors_current():
            wanted = {c.content_hash for p in batch for c in p.chunks}
            vectors = self.ctx.store.cached_vectors(self.ctx.provider.vector_key, wanted, self.ctx.provider.dimensions)
            summary.reused += sum(1 for p in batch for c in p.chunks if c.content_hash in vectors)
        t0 = time.perf_counter()
        records = [p.record for p in batch]
        finders = self.finders
        finder = (
            finders.finder(records, self.refreshes)
            if finders is not None
            else mention_scan.Finder.for_store(self.ctx.store, records)
        )
        stored: list[_Prepared] = []
        if not vectors:  # (a first index): the whole batch in one write, the file-by-file path only on an error
            together = self._flush_together(batch, finder, summary)
            if together is not None:
                if finders is not None:
                    finders.stored([p.record for p in together])
                summary.new_chunks += sum(len(p.chunks) for p in together)
                summary.timings["store"] += time.perf_counter() - t0
                return
        try:
            # one commit per batch (a commit per file was half the store time); each file is a savepoint in it
            with self.ctx.store.atomic():
                for prep in batch:
                    try:
                        found = finder.scan_file(lambda p=prep: _text_of(p), prep.meta.frontmatter)
                        # the file's own vectors, not the batch's: each file's write checked and stored the whole
                        # batch's again (a re-index after `clear`: 30 s of CPU for 8,409 chunks, nothing embedded)
                        own = {h: vectors[h] for c in prep.chunks if (h := c.content_hash) in vectors}
                        self.ctx.store.replace_file(prep.record, self._rows(prep), own, mentions=found)
                    except Exception as exc:  # one odd path must never lose the rest of the batch
                        summary.changed -= 1
                        file_failed(prep.record.path, exc, summary)
                        continue
                    stored.append(prep)
        except Exception as exc:  # the commit failed (a full disk): none of the batch was stored
            for prep in stored:
                summary.changed -= 1
                file_failed(prep.record.path, exc, summary)
            stored = []
        summary.new_chunks += sum(len(p.chunks) for p in stored)
        summary.timings["store"] += time.perf_counter() - t0
        if finders is not None:
            finders.stored([p.record for p in stored])

    def _flush_together(
        self, batch: list[_Prepared], finder: mention_scan.Finder, summary: IndexSummary
    ) -> list[_Prepared] | None:
        """Store the batch with one `replace_files` (its files' new chunks written together: one keyword segment
        for the batch). Returns the files stored: all of them, or none when the commit failed (a full disk: each
        is failed, as on the file-by-file path); None when a file could not be written (nothing was: the caller
        stores the batch file by file, each failure its own)."""
        written = False
        try:
            writes = [
                FileWrite(
                    p.record, self._rows(p), finder.scan_file(lambda p=p: _text_of(p), p.meta.frontmatter), cjk=p.cjk
                )
                for p in batch
            ]
            with self.ctx.store.atomic():
                self.ctx.store.replace_files(writes)
                written = True
        except (IndexCancelled, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - a file or the commit failed
            if not written:
                log.debug("storing the batch together failed (%s: %s); file by file", type(exc).__name__, exc)
                return None
            for prep in batch:  # the commit failed: none of the batch was stored
                summary.changed -= 1
                file_failed(prep.record.path, exc, summary)
            return []
        return list(batch)


def _text_of(prep: _Prepared) -> str:
    """The text the chunker saw (its lines are the mentions' lines)."""
    try:
        return decode(prep.data, prep.record.path).text
    except BinaryFile:
        return ""

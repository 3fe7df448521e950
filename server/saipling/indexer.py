"""Indexing runs (SPEC 7): scan, read only what changed, chunk, embed what is new, one transaction per file."""

from __future__ import annotations

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

from .chunker import Chunk, ChunkLimits, chunk_document, embed_text_for, limits_for
from .config import Settings
from .embeddings import Provider
from .embeddings.base import EmbeddingProvider, estimate_tokens
from .errors import IndexCancelled, ProviderAuthError, ProviderError, ProviderRateLimited, ProviderUnavailable
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


def racy_window(mtime_ns: int) -> int:
    return RACY_WINDOW_COARSE_NS if mtime_ns % 1_000_000_000 == 0 else RACY_WINDOW_FINE_NS


def is_racy(mtime_ns: int, read_ns: int) -> bool:
    """True when a same-size write in the same timestamp tick as `mtime_ns` could follow a read at `read_ns`."""
    return abs(read_ns - mtime_ns) < racy_window(mtime_ns)


@dataclass
class IndexProgress:
    files_done: int
    files_total: int
    current_file: str | None
    chunks_embedded: int = 0
    phase: str = "indexing"


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
    degraded: str | None = None
    skipped: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(
        default_factory=lambda: {"scan": 0.0, "read": 0.0, "chunk": 0.0, "embed": 0.0, "store": 0.0}
    )
    embedded_paths: list[str] = field(default_factory=list)
    # the provider is down or rate limiting: no more embedding calls in this pass (retried on the next one)
    embedding_stopped: bool = False

    def to_json(self) -> dict:
        return {
            "files": self.files, "chunks": self.chunks, "scanned": self.scanned, "changed": self.changed,
            "unchanged": self.unchanged, "deleted": self.deleted, "filesRead": self.files_read,
            "newChunks": self.new_chunks, "embedded": self.embedded, "reused": self.reused, "tokens": self.tokens,
            "costUsd": round(self.cost_usd, 6), "seconds": round(self.seconds, 3), "cancelled": self.cancelled,
            "degraded": self.degraded, "skipped": [{"path": p, "reason": r} for p, r in self.skipped],
            "warnings": self.warnings, "timings": {k: round(v, 3) for k, v in self.timings.items()},
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
        self._lock = threading.Lock()

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
        """Every file read goes through here (counted: a no-op reindex must read nothing)."""
        return path.read_bytes()

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
    ) -> IndexSummary:
        """Index the project (or just `paths`, relative); only one run at a time per project."""
        with self._lock:
            return self._run(full, None if paths is None else list(paths), progress, cancel)

    def _run(self, full, paths, progress, cancel) -> IndexSummary:
        summary = IndexSummary()
        start = time.perf_counter()
        if isinstance(self.provider, EmbeddingProvider):
            self.provider.begin_pass()  # a provider that stopped calling its server tries again
        if self.embeds:
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
            if not full and st is not None and st.mtime_ns == e.mtime_ns and st.size == e.size:
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
        batch: list[_Prepared] = []
        batch_chunks = 0
        # files stored with mtime 0, and the digest they were read with
        racy: list[tuple[ScanEntry, str]] = []
        try:
            for n, e in enumerate(todo):
                if cancel is not None and cancel.is_set():
                    raise IndexCancelled("indexing cancelled")
                if progress:
                    progress(IndexProgress(n, total, e.rel, summary.embedded))
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
                    self._flush(batch, summary)
                    batch, batch_chunks = [], 0
                    self._settle_racy(racy)  # (every racy file so far is stored: a killed run keeps them)
            if batch:
                self._flush(batch, summary)
                batch = []
            if progress:
                progress(IndexProgress(total, total, None, summary.embedded, "embedding"))
            self._settle_racy(racy)
            self._backfill(summary, cancel)
        except (IndexCancelled, KeyboardInterrupt) as exc:
            summary.cancelled = True
            log.info("indexing cancelled; every file is either old or new (%s)", type(exc).__name__)
            if isinstance(exc, KeyboardInterrupt):
                raise
        finally:
            self._finish(summary, start)
        if rechunk and paths is None and not summary.cancelled:
            self.store.set_meta(CHUNKING_META, signature)  # every file was re-chunked with these limits
        if progress:
            progress(IndexProgress(total, total, None, summary.embedded, "done"))
        return summary

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
        shown = shown_name(rel)
        log.error("skipping %s: it could not be indexed", shown, exc_info=exc)
        summary.skipped.append((shown, f"could not be indexed ({type(exc).__name__}: {exc})"))

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

    def _flush(self, batch: list[_Prepared], summary: IndexSummary) -> None:
        vectors: dict[str, np.ndarray] = {}
        model = self.provider.model if self.embeds else None
        if self.embeds:
            model = self._cache_key()
            wanted = {c.content_hash: c.embed_text for p in batch for c in p.chunks}
            vectors = self.store.cached_vectors(self.provider.vector_key, wanted, self.provider.dimensions)
            summary.reused += sum(1 for p in batch for c in p.chunks if c.content_hash in vectors)
            missing = [h for h in wanted if h not in vectors]
            if missing:
                vectors.update(self._embed(missing, [wanted[h] for h in missing], summary))
                summary.embedded_paths += [
                    p.record.path for p in batch if any(c.content_hash in missing for c in p.chunks)
                ]
        t0 = time.perf_counter()
        for prep in batch:
            try:
                self.store.replace_file(prep.record, self._rows(prep), vectors, model)
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
        if isinstance(self.provider, EmbeddingProvider) and isinstance(exc, ProviderAuthError):
            self.provider.failed = reason
        if isinstance(exc, ProviderUnavailable | ProviderRateLimited):
            summary.embedding_stopped = True  # the rest of the pass is keyword-indexed without calling it
        summary.degraded = reason
        summary.warnings.append(f"embedding failed, indexed for keyword search only: {reason}")
        log.warning("embedding failed, indexed for keyword search only: %s", reason)

    def _backfill(self, summary: IndexSummary, cancel: threading.Event | None) -> None:
        """Embed chunks that have no vector yet (after a model change or an earlier provider failure)."""
        if not self.embeds or summary.degraded:
            return
        while True:
            rows = self.store.chunks_missing_vectors(limit=512)
            if not rows:
                return
            if cancel is not None and cancel.is_set():
                raise IndexCancelled("indexing cancelled")
            texts = {
                r["content_hash"]: embed_text_for(r["heading_path"] or "", r["text"] or "") for r in rows
            }
            vectors = self.store.cached_vectors(self.provider.vector_key, texts, self.provider.dimensions)
            summary.reused += len(vectors)
            missing = [h for h in texts if h not in vectors]
            if missing:  # (what fails stays missing: the loop ends below)
                vectors.update(self._embed(missing, [texts[h] for h in missing], summary))
            items = [
                (r["id"], r["content_hash"], vectors[r["content_hash"]])
                for r in rows
                if r["content_hash"] in vectors
            ]
            t0 = time.perf_counter()
            self.store.set_vectors(items, self._cache_key())
            summary.timings["store"] += time.perf_counter() - t0
            if len(items) < len(rows):
                return

    def _finish(self, summary: IndexSummary, start: float) -> None:
        if summary.tokens or summary.embedded:
            self.store.log_embedding(
                self.provider.name, self.provider.model, summary.tokens, summary.embedded, summary.cost_usd
            )
        stats = self.store.stats()
        summary.files, summary.chunks = stats["totalFiles"], stats["totalChunks"]
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

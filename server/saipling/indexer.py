"""Indexing runs (SPEC 7): scan, read only what changed, chunk, embed what is new, one transaction per file."""

from __future__ import annotations

import hashlib
import logging
import os
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
from .errors import IndexCancelled, ProviderAuthError, ProviderError
from .metadata import FileMeta, extract_metadata
from .scanner import ScanEntry, corpus_for, is_indexable, scan
from .store import ChunkRow, FileRecord, Store
from .textio import BinaryFile, decode

log = logging.getLogger(__name__)


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
                p.dimensions = int(len(p.embed_query("dimension probe")))
            return self.store.configure_vectors(p.name, p.model, p.dimensions)
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
        if self.embeds:
            try:
                if self.ensure_vector_table():
                    summary.warnings.append(
                        "embedding model changed: vectors rebuilt from cache or re-embedded"
                    )
            except ProviderError as exc:
                self._provider_failed(exc, summary)
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
            if self.store.delete_file(rel):
                summary.deleted += 1
        total = len(todo)
        batch: list[_Prepared] = []
        batch_chunks = 0
        try:
            for n, e in enumerate(todo):
                if cancel is not None and cancel.is_set():
                    raise IndexCancelled("indexing cancelled")
                if progress:
                    progress(IndexProgress(n, total, e.rel, summary.embedded))
                t0 = time.perf_counter()
                try:
                    data = self.read_bytes(e.abs_path)
                except OSError as exc:
                    summary.skipped.append((e.rel, f"unreadable ({exc.strerror or exc})"))
                    continue
                summary.files_read += 1
                summary.timings["read"] += time.perf_counter() - t0
                st = states.get(e.rel)
                digest = hashlib.sha256(data).hexdigest()
                if st is not None and st.content_hash == digest and not full:
                    self.store.touch_file(e.rel, e.mtime_ns, e.size)
                    summary.unchanged += 1
                    continue
                prep = self.prepare(e, data, summary)
                if prep is None:
                    if st is not None:
                        self.store.delete_file(e.rel)
                    continue
                summary.changed += 1
                batch.append(prep)
                batch_chunks += len(prep.chunks)
                if batch_chunks >= max(self.settings.batch_size, 32) or len(batch) >= 64:
                    self._flush(batch, summary)
                    batch, batch_chunks = [], 0
            if batch:
                self._flush(batch, summary)
                batch = []
            if progress:
                progress(IndexProgress(total, total, None, summary.embedded, "embedding"))
            self._backfill(summary, cancel)
        except (IndexCancelled, KeyboardInterrupt) as exc:
            summary.cancelled = True
            log.info("indexing cancelled; every file is either old or new (%s)", type(exc).__name__)
            if isinstance(exc, KeyboardInterrupt):
                raise
        finally:
            self._finish(summary, start)
        if progress:
            progress(IndexProgress(total, total, None, summary.embedded, "done"))
        return summary

    def _entries_for(self, paths: list[str], summary: IndexSummary) -> tuple[list[ScanEntry], list[str]]:
        entries: list[ScanEntry] = []
        stale: list[str] = []
        root_real = os.path.realpath(self.root)
        for rel in dict.fromkeys(paths):
            abs_path = self.root / rel
            reason = is_indexable(self.root, rel, self.settings)
            real = os.path.realpath(abs_path)
            if reason is None and real != root_real and not real.startswith(root_real + os.sep):
                summary.skipped.append((rel, "symlink leaves the project root"))  # as scan() decides
                stale.append(rel)
                continue
            if reason is None and abs_path.is_file():
                st = abs_path.stat()
                if st.st_size > self.settings.max_file_bytes:
                    summary.skipped.append((rel, "too large"))
                    stale.append(rel)
                    continue
                entries.append(
                    ScanEntry(rel, abs_path, st.st_mtime_ns, st.st_size, corpus_for(rel, self.settings))
                )
            else:
                stale.append(rel)
        return entries, stale

    def _flush(self, batch: list[_Prepared], summary: IndexSummary) -> None:
        vectors: dict[str, np.ndarray] = {}
        model = self.provider.model if self.embeds else None
        if self.embeds:
            wanted = {c.content_hash: c.embed_text for p in batch for c in p.chunks}
            vectors = self.store.cached_vectors(self.provider.model, wanted)
            summary.reused += sum(1 for p in batch for c in p.chunks if c.content_hash in vectors)
            missing = [h for h in wanted if h not in vectors]
            if missing:
                vectors.update(self._embed(missing, [wanted[h] for h in missing], summary))
                summary.embedded_paths += [
                    p.record.path for p in batch if any(c.content_hash in missing for c in p.chunks)
                ]
        t0 = time.perf_counter()
        for prep in batch:
            self.store.replace_file(prep.record, self._rows(prep), vectors, model)
            summary.new_chunks += len(prep.chunks)
        summary.timings["store"] += time.perf_counter() - t0

    def _embed(self, hashes: list[str], texts: list[str], summary: IndexSummary) -> dict[str, np.ndarray]:
        if not self.embeds:
            return {}
        assert isinstance(self.provider, EmbeddingProvider)
        t0 = time.perf_counter()
        try:
            result = self.provider.embed_documents(texts)
        except ProviderError as exc:
            self._provider_failed(exc, summary)
            return {}
        finally:
            summary.timings["embed"] += time.perf_counter() - t0
        summary.embedded += len(texts)
        summary.tokens += result.tokens
        summary.cost_usd += result.tokens * self.provider.cost_per_million_tokens / 1e6
        return dict(zip(hashes, result.vectors, strict=True))

    def _provider_failed(self, exc: ProviderError, summary: IndexSummary) -> None:
        reason = str(exc)
        if isinstance(self.provider, EmbeddingProvider) and isinstance(exc, ProviderAuthError):
            self.provider.failed = reason
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
            vectors = self.store.cached_vectors(self.provider.model, texts)
            summary.reused += len(vectors)
            missing = [h for h in texts if h not in vectors]
            if missing:
                got = self._embed(missing, [texts[h] for h in missing], summary)
                if not got:
                    return
                vectors.update(got)
            items = [
                (r["id"], r["content_hash"], vectors[r["content_hash"]])
                for r in rows
                if r["content_hash"] in vectors
            ]
            t0 = time.perf_counter()
            self.store.set_vectors(items, self.provider.model)
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
        model = self.provider.model
        # Unchanged files cost nothing only if their vectors come from this very model; after a model or
        # dimension change the run re-embeds everything the cache does not hold.
        stored_model, stored_dims = self.store.vector_model()
        dims = self.provider.dimensions
        same_model = stored_model == model and (not dims or stored_dims == dims)
        vectors_current = self.store.has_vectors() and same_model
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
            cached = self.store.cached_vectors(model, [c.content_hash for c in prep.chunks]) if model else {}
            for c in prep.chunks:
                if c.content_hash not in cached:
                    to_embed[c.content_hash] = c.token_count
        if vectors_current and unchanged:
            # chunks of unchanged files still without a vector (an earlier provider failure) are backfilled
            rows = [r for r in self.store.chunks_missing_vectors() if r["path"] in unchanged]
            cached = self.store.cached_vectors(model, [r["content_hash"] for r in rows])
            for r in rows:
                if r["content_hash"] not in cached:
                    text = embed_text_for(r["heading_path"] or "", r["text"] or "")
                    to_embed[r["content_hash"]] = estimate_tokens(text)
        chunks_new, tokens_new = len(to_embed), sum(to_embed.values())
        price = self.provider.cost_per_million_tokens
        return {
            "provider": self.provider.name, "model": model, "files": len(result.entries),
            "chunksToCheck": chunks_total, "chunksToEmbed": chunks_new if self.embeds else 0,
            "tokensToEmbed": tokens_new if self.embeds else 0,
            "estimatedCostUsd": round(tokens_new * price / 1e6, 6) if self.embeds else 0.0,
            "fullReindexCostUsd": round(self.store.total_tokens_indexed() * price / 1e6, 6),
        }  # fmt: skip

"""The embedding side of an index run: chunks stored without a vector get one, a batch at a time (the cache
first, then the provider), with the cost question before a paid run and the estimates of `saipling
estimate`. `EmbeddingPhase` is held by `Indexer` and works on its `IndexContext`."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from ..embeddings.base import EmbeddingProvider, estimate_tokens
from ..errors import (
    IndexCancelled,
    ProviderAbandoned,
    ProviderAuthError,
    ProviderError,
    ProviderRateLimited,
    ProviderUnavailable,
)
from ..files.scanner import scan
from ..markdown.chunker import embed_text_for
from ..storage.base import IndexStore
from .context import IndexContext
from .records import IndexProgress, IndexSummary, ProgressCallback, Throughput
from .text_phase import TextPhase

log = logging.getLogger(__name__)


class EmbeddingPhase:
    """Embedding: the second phase of a run (`run`), the cost question before it, and the estimates. Files are read
    (for `estimate`) through the text phase."""

    def __init__(self, ctx: IndexContext, text: TextPhase, paused: threading.Event) -> None:
        self.ctx = ctx
        self.text = text
        self.paused = paused  # set: runs stop embedding (the text index stays live)

    def _embed(self, hashes: list[str], texts: list[str], summary: IndexSummary) -> dict[str, np.ndarray]:
        if not self.ctx.embeds or summary.embedding_stopped:
            return {}
        p = self.ctx.provider
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
                    self.provider_failed(exc, summary)
                    break
                out.update(zip(hashes[part], result.vectors, strict=True))
                done += len(result.vectors)
                summary.tokens += result.tokens
                summary.cost_usd += result.tokens * p.cost_per_million_tokens / 1e6
        finally:
            summary.timings["embed"] += time.perf_counter() - t0
        summary.embedded += done
        return out

    def provider_failed(self, exc: ProviderError, summary: IndexSummary) -> None:
        reason = str(exc)
        # (a call abandoned because the process is ending says nothing about the provider: no fallback)
        summary.unusable = isinstance(exc, ProviderAuthError | ProviderUnavailable) and not isinstance(
            exc, ProviderAbandoned
        )
        if isinstance(self.ctx.provider, EmbeddingProvider) and isinstance(exc, ProviderAuthError):
            self.ctx.provider.failed = reason
        if isinstance(exc, ProviderUnavailable | ProviderRateLimited):
            summary.embedding_stopped = True  # the rest of the pass is keyword-indexed without calling it
        summary.degraded = reason
        summary.warnings.append(f"embedding failed, indexed for keyword search only: {reason}")
        log.warning("embedding failed, indexed for keyword search only: %s", reason)

    def run(
        self,
        summary: IndexSummary,
        files_total: int,
        progress: ProgressCallback | None,
        cancel: threading.Event | None,
        hold: Callable[[], Iterable[str]],
        first: list[str],
    ) -> None:
        """Embed every chunk without a vector (new or changed text, an earlier failure, a model change), a
        round at a time (whole provider batches, about ROUND_SECONDS of the provider's work: round_size):
        `first` files, then the most recently modified; `hold` files wait. Stops between rounds when cancelled
        (IndexCancelled) or paused (summary.paused)."""
        if not self.ctx.embeds or summary.degraded:
            return
        with StoreBehind(self.ctx.store, self.ctx.cache_key(), summary) as behind:
            todo = self.ctx.store.unembedded(hold(), first)
            base = size = max(1, self.ctx.settings.batch_size)
            done = done_tokens = 0
            total_tokens = sum(t for *_, t in todo)
            # tokens a second: chunks differ in length; tokens are what the model works on
            rate = Throughput()
            seen: set[int] = set()
            pos = 0
            while True:
                if pos >= len(todo):  # chunks stored meanwhile (a save, a lazy sync) are embedded too
                    behind.flush()  # (the round held back is not "without a vector")
                    todo = [r for r in self.ctx.store.unembedded(hold(), first) if r[0] not in seen]
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
                embed_s, embedded = summary.timings["embed"], summary.embedded
                called = self._embed_round(part, summary, behind)
                if called is None:
                    return  # the provider failed: summary.degraded says why
                done += len(part)
                done_tokens += sum(t for *_, t in part)
                if called:
                    rate.add(sum(t for *_, t in part), time.perf_counter() - t0)
                    # the provider's own speed: texts it embedded over its time (cached texts and storing left out)
                    size = round_size(
                        base, (summary.embedded - embedded) / max(summary.timings["embed"] - embed_s, 1e-6)
                    )
                if progress:
                    progress(
                        IndexProgress(
                            files_total,
                            files_total,
                            part[-1][1],
                            summary.embedded,
                            "embedding",
                            chunks_done=done,
                            chunks_total=done + len(todo) - pos,
                            eta_seconds=rate.eta(total_tokens - done_tokens),
                        )
                    )

    def _embed_round(
        self,
        part: list[tuple[int, str, str | None, int]],
        summary: IndexSummary,
        behind: StoreBehind | None = None,
    ) -> bool | None:
        """Vectors for these chunks (chunk id, path, content hash, tokens): the cache first, then the provider.
        Returns whether the provider was called, None when it failed (summary.degraded says why). With
        `behind`, the round's vectors are stored while the next round is embedded."""
        rows = self.ctx.store.chunk_texts([r[0] for r in part])  # (a chunk replaced meanwhile is gone)
        texts = {h: embed_text_for(hp, text) for h, hp, text in rows.values()}
        vectors = self.ctx.store.cached_vectors(self.ctx.provider.vector_key, texts, self.ctx.provider.dimensions)
        if behind is not None:
            vectors.update(behind.vectors(texts.keys() - vectors.keys()))  # (not in the cache yet)
            behind.start()  # the round before is stored while the model embeds this one
        summary.reused += len(vectors)
        missing = [h for h in texts if h not in vectors]
        got: dict[str, np.ndarray] = {}
        if missing:
            got = self._embed(missing, [texts[h] for h in missing], summary)
            if not got:
                return None
            vectors.update(got)
            hashes = ((r[1], r[2] or rows.get(r[0], ("",))[0]) for r in part)
            summary.embedded_paths += list(dict.fromkeys(p for p, h in hashes if h in got))
        items = [(cid, h, vectors[h]) for cid, (h, _, _) in rows.items() if h in vectors]
        if behind is not None:
            behind.hold(items)
        else:
            t1 = time.perf_counter()
            self.ctx.store.set_vectors(items, self.ctx.cache_key())
            summary.timings["store"] += time.perf_counter() - t1
        if len(got) < len(missing):
            return None  # the provider failed within the round: what it got is stored, the run stops
        return bool(missing)

    def confirmed(
        self, confirm: Callable[[dict], bool] | None, hold: Callable[[], Iterable[str]], summary: IndexSummary
    ) -> bool:
        """False when a paid provider's estimate is over the setting and `confirm` declined it."""
        limit = self.ctx.settings.confirm_cost_above_usd
        if confirm is None or limit < 0 or not self.ctx.provider.cost_per_million_tokens:
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
        if self.ctx.vectors_current():
            rows = self.ctx.store.unembedded(held)
        else:  # no vectors of this model yet: every chunk (the embedding cache may still hold some)
            rows = [(0, p, h, t) for p, h, t in self.ctx.store.chunk_hashes() if p not in held]
        model = self.ctx.provider.model if self.ctx.embeds else ""
        key = self.ctx.provider.vector_key if isinstance(self.ctx.provider, EmbeddingProvider) else ""
        cached = self.ctx.store.cached_vectors(key, [r[2] for r in rows], self.ctx.provider.dimensions) if model else {}
        tokens: dict[str, int] = {}
        files: set[str] = set()
        for _, path, h, t in rows:
            if h not in cached:
                tokens[h] = t
                files.add(path)
        price = self.ctx.provider.cost_per_million_tokens if self.ctx.embeds else 0.0
        return {
            "provider": self.ctx.provider.name,
            "model": model or None,
            "files": len(files),
            "chunks": len(tokens),
            "tokens": sum(tokens.values()),
            "costUsd": round(sum(tokens.values()) * price / 1e6, 6),
        }

    # -- estimate ------------------------------------------------------------------------------------------
    def estimate(self) -> dict:
        """What `index` would embed now, and its cost, without calling the provider."""
        summary = IndexSummary()
        result = scan(self.ctx.root, self.ctx.settings)
        states = self.ctx.store.file_states()
        p = self.ctx.provider
        model = p.vector_key if isinstance(p, EmbeddingProvider) else p.model
        # Unchanged files cost nothing only if their vectors come from this very model; after a model or
        # dimension change the run re-embeds everything the cache does not hold.
        stored_model, stored_dims = self.ctx.store.vector_model()
        dims = self.ctx.provider.dimensions
        same_model = stored_model == model and (not dims or stored_dims == dims)
        # other chunk limits than the index was made with: the next run re-chunks every file
        vectors_current = self.ctx.store.has_vectors() and same_model and not self.ctx.needs_rechunk()
        chunks_total = 0
        to_embed: dict[str, int] = {}  # content hash -> tokens (a text in several chunks is embedded once)
        unchanged: set[str] = set()
        for e in result.entries:
            st = states.get(e.rel)
            if st is not None and st.mtime_ns == e.mtime_ns and st.size == e.size and vectors_current:
                unchanged.add(e.rel)
                continue
            try:
                prep = self.text.prepare(e, self.text.read_bytes(e.abs_path), summary)
            except OSError:
                continue
            if prep is None:
                continue
            chunks_total += len(prep.chunks)
            cached = self.ctx.store.cached_vectors(model, [c.content_hash for c in prep.chunks], dims) if model else {}
            for c in prep.chunks:
                if c.content_hash not in cached:
                    to_embed[c.content_hash] = c.token_count
        if vectors_current and unchanged:
            # chunks of unchanged files still without a vector (an earlier provider failure) are backfilled
            rows = [r for r in self.ctx.store.chunks_missing_vectors() if r.path in unchanged]
            cached = self.ctx.store.cached_vectors(model, [r.content_hash for r in rows], dims)
            for r in rows:
                if r.content_hash not in cached:
                    text = embed_text_for(r.heading_path or "", r.text or "")
                    to_embed[r.content_hash] = estimate_tokens(text)
        chunks_new, tokens_new = len(to_embed), sum(to_embed.values())
        price = self.ctx.provider.cost_per_million_tokens
        return {
            "provider": self.ctx.provider.name,
            "model": self.ctx.provider.model,
            "files": len(result.entries),
            "chunksToCheck": chunks_total,
            "chunksToEmbed": chunks_new if self.ctx.embeds else 0,
            "tokensToEmbed": tokens_new if self.ctx.embeds else 0,
            "estimatedCostUsd": round(tokens_new * price / 1e6, 6) if self.ctx.embeds else 0.0,
            "fullReindexCostUsd": round(self.ctx.store.total_tokens_indexed() * price / 1e6, 6),
        }


ROUND_SECONDS = 1.0  # a round of the embedding phase: about this long, whatever the provider's speed
MAX_ROUND_BATCHES = 16


def round_size(batch: int, per_second: float) -> int:
    """Chunks in the next round of the embedding phase: whole provider batches, about ROUND_SECONDS' worth.

    Each round is stored in one transaction (vectors and cache): with a fast local model, a transaction every
    128 chunks was a third of the time a first index spends outside the model (the cache's key index pages
    rewritten every 0.4 s). Rounds stay short enough for pause, cancel and progress to answer within ~1 s."""
    batches = int(per_second * ROUND_SECONDS) // batch
    return batch * max(1, min(MAX_ROUND_BATCHES, batches))


class StoreBehind:
    """The embedding phase's rounds stored on a thread while the model embeds the next one.

    Storing a round (vec0 and cache inserts, the commit, SQLite's WAL checkpoints) took ~0.33 s of a first
    index of the 13th Age vault with the model idle; the model's runs and SQLite's both release the GIL. A round
    is `hold`: kept here; the next round reads its texts and cached vectors (the store's lock: never beside a
    write) and then `start`s the held round's store and calls the model; `hold` waits for that store first. Its
    error, if any, is raised there, in the indexer's thread. `flush` stores what is held and waits; leaving the
    `with` does too (a cancel or a pause keeps the rounds it embedded), after an error without raising a second.
    """

    def __init__(self, store: IndexStore, key: str, summary: IndexSummary) -> None:
        self._store, self._key, self._summary = store, key, summary
        self._ex = ThreadPoolExecutor(1, thread_name_prefix="saipling-store")
        self._held: list[tuple[int, str, np.ndarray]] = []
        self._running: Future[float] | None = None
        self._vectors: dict[str, np.ndarray] = {}  # the last round held (then running), by content hash

    def vectors(self, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        """The vectors of these texts held or being stored (the cache will have them)."""
        return {h: self._vectors[h] for h in hashes if h in self._vectors}

    def start(self) -> None:
        if self._held:
            self._wait()
            self._running = self._ex.submit(self._set, self._held)
            self._held = []

    def hold(self, items: list[tuple[int, str, np.ndarray]]) -> None:
        """Keep a round to store and wait for the one being stored (raising its error). The round is kept even
        then: the flush on the way out tries it once more (with a paid provider it was paid for)."""
        self._held, self._vectors = items, {h: v for _, h, v in items}
        self._wait()

    def flush(self) -> None:
        self.start()
        self._wait()
        self._vectors = {}

    def _set(self, items: list[tuple[int, str, np.ndarray]]) -> float:
        t = time.perf_counter()
        self._store.set_vectors(items, self._key)
        return time.perf_counter() - t

    def _wait(self) -> None:
        running, self._running = self._running, None
        if running is not None:
            self._summary.timings["store"] += running.result()

    def __enter__(self) -> StoreBehind:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        try:
            self.flush()
        except Exception:
            if exc_type is None:
                raise
            log.warning("storing the last embedded round failed", exc_info=True)  # the first error is raised
        finally:
            self._ex.shutdown(wait=True)

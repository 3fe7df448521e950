"""What both phases of an index run work on (`IndexContext`): the project root, its settings and index, the embedding
provider, and what chunks and vectors depend on (chunk limits, the token counter, the vectors' model).

The indexer owns one and hands it to its phases (`TextPhase`, `EmbeddingPhase`); settings and provider change between
runs (new settings, a provider fallback): the indexer replaces them here and every phase sees the change.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..config.settings import Settings
from ..embeddings import Provider
from ..embeddings.base import EmbeddingProvider, estimate_tokens
from ..files.metadata import METADATA_VERSION
from ..files.scanner import shown_name
from ..markdown.chunker import CHUNKER_VERSION, ChunkLimits, limits_for
from ..storage.base import IndexStore, cache_key
from .records import IndexSummary

log = logging.getLogger(__name__)

CHUNKING_META = "chunking"  # meta key: the chunk limits (and tokenizer) the indexed chunks were made with


@dataclass
class IndexContext:
    """One project's index run target (see the module docstring)."""

    root: Path
    settings: Settings
    store: IndexStore
    provider: Provider

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
                "block": lim.block_max,  # a code block may fill the window (markdown.chunker.ChunkLimits.block_tokens)
                "tokenizer": tokenizer,
                "chunker": CHUNKER_VERSION,  # the same text can chunk differently after a chunker change
                "metadata": METADATA_VERSION,  # a file's visibility read another way (files/metadata.py) is re-read
            },
            sort_keys=True,
        )

    def chunking_key(self) -> str:
        """The meta key of the chunking signature: one per copy on a shared store (a copy re-chunks only its own
        files: the signature one copy records after its re-chunk must not tell another its files are done)."""
        copy = getattr(self.store, "copy_id", None)
        return CHUNKING_META if copy is None else f"{CHUNKING_META}:{copy}"

    def needs_rechunk(self) -> bool:
        """True when the indexed chunks were made with other limits (or a tokenizer) than the current ones."""
        stored = self.store.get_meta(self.chunking_key())
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

    def vectors_current(self) -> bool:
        """True when the index holds vectors of the active model (so cached vectors of it may go in)."""
        if not self.embeds or not self.store.has_vectors():
            return False
        model, dims = self.store.vector_model()
        return model == self.provider.vector_key and dims == self.provider.dimensions

    def cache_key(self) -> str:
        """The embedding-cache key vectors are written under: the model (with its prefixes) and their size."""
        p = self.provider
        return cache_key(p.vector_key if isinstance(p, EmbeddingProvider) else p.model, p.dimensions)


def file_failed(rel: str, exc: BaseException, summary: IndexSummary) -> None:
    """A file an error kept out of the index: one log line per distinct cause (a full disk fails every
    file the same way: one line, not a traceback per file); the traceback only at debug level."""
    shown = shown_name(rel)
    cause = f"{type(exc).__name__}: {exc}"
    if all(c != cause for _, c in summary.failed):
        log.error("%s could not be indexed: %s", shown, cause)
    log.debug("%s could not be indexed", shown, exc_info=exc)
    summary.failed.append((shown, cause))
    summary.skipped.append((shown, f"could not be indexed ({cause})"))

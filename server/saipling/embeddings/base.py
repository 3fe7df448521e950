"""The embedding provider interface shared by every backend."""

from __future__ import annotations

import abc
import contextlib
import json
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ProviderError, ProviderTimeout, ProviderUnavailable
from ..lazy import LazyPattern, np  # numpy loads on first use (cold CLI path)

log = logging.getLogger(__name__)

BAD_VECTOR_RETRIES = 1  # a batch with NaN/Inf/zero vectors is asked for again this many times


@dataclass
class EmbeddingResult:
    """Vectors (float32, shape (n, dims), L2-normalised) and the tokens the provider billed."""

    vectors: np.ndarray
    tokens: int = 0


@dataclass
class ProviderInfo:
    """What status reports about the active provider."""

    name: str
    model: str
    dimensions: int
    reason: str = ""
    cost_per_million_tokens: float = 0.0
    failed: str | None = None  # set after an auth failure: reason shown to the user


# Someone is waiting for this thread's query vector (a search): a network provider tries once within
# SEARCH_QUERY_WAIT seconds (read timeout, Retry-After waits) instead of retrying and waiting on a busy
# server for minutes; the search answers keyword-only with `degraded` saying why.
SEARCH_QUERY_WAIT = 10.0
_waiting = threading.local()


@contextlib.contextmanager
def user_waiting(seconds: float = SEARCH_QUERY_WAIT) -> Iterator[None]:
    """Embedding calls made on this thread inside the block must give up after `seconds`."""
    previous = getattr(_waiting, "deadline", None)
    _waiting.deadline = time.monotonic() + seconds
    try:
        yield
    finally:
        _waiting.deadline = previous


def wait_deadline() -> float | None:
    """The time.monotonic() by which this thread's embedding call must be over (`user_waiting`), or None."""
    return getattr(_waiting, "deadline", None)


class EmbeddingProvider(abc.ABC):
    """Turns texts into unit vectors.

    Subclasses implement `_embed_batch`; batching by `batch_size` and the token cap lives here, and so does
    adaptive batching: a batch that times out (ProviderTimeout) is split in half and sent again, and the
    smaller size is kept for later batches (a slow single-worker server gets requests it can answer in time).
    """

    name: str = "base"
    model: str = ""
    dimensions: int = 0
    # False when `dimensions` is learned from the server's answers (a custom server's unknown model): another
    # size later means its model changed (ProviderDimensionsChanged, `resized`), not a broken answer
    dimensions_fixed: bool = True
    # the size a learned-size server answered with instead (the next index run adopts it)
    resized: int | None = None
    max_input_tokens: int = 512
    passage_tokens: int = 0  # chunks are cut to this many tokens when the model prefers shorter passages (0: window)
    cost_per_million_tokens: float = 0.0
    batch_size: int = 128
    max_batch_tokens: int = 120_000
    max_retries: int = 3  # a single text that keeps timing out is sent at most this many more times
    query_prefix: str = ""
    document_prefix: str = ""
    input_type_field: str = ""  # request field carrying "query" / "document" (HTTP providers)
    family: str | None = None  # the known model family the prefixes and window came from

    def __init__(self) -> None:
        self.failed: str | None = None
        self.reason: str = ""

    @abc.abstractmethod
    def _embed_batch(self, texts: list[str], input_type: str) -> EmbeddingResult:
        """Embed one batch (already within the batch limits). input_type is 'document' or 'query'."""

    @property
    def vector_key(self) -> str:
        """The identity of the document vectors: the model, plus what else shapes them.

        A document prefix or an input-type field changes every document vector, so it is part of the key the
        embedding cache and the vector table are keyed by: changing it re-embeds instead of mixing vectors.
        (The query prefix shapes only query vectors, which the query cache keys by `query_key`.)
        """
        if not self.document_prefix and not self.input_type_field:
            return self.model
        import hashlib  # (~2 ms with OpenSSL, paid only by a document prefix or an input-type field)

        recipe = json.dumps([self.document_prefix, self.input_type_field])
        return f"{self.model}#{hashlib.sha256(recipe.encode()).hexdigest()[:8]}"

    @property
    def query_key(self) -> str:
        """The identity of query vectors (model, document recipe and query prefix)."""
        return f"{self.vector_key}|{self.query_prefix}"

    @property
    def unavailable(self) -> str | None:
        """Why calling the provider now would fail without trying (an open circuit breaker), or None."""
        return None

    def begin_pass(self) -> None:  # noqa: B027 - optional hook
        """An index pass starts: a provider that stopped calling its server (circuit breaker) tries again."""

    def applied(self) -> dict[str, Any]:
        """What status shows about how texts are sent: prefixes, input-type field, window, batch size."""
        return {
            "family": self.family,
            "queryPrefix": self.query_prefix,
            "documentPrefix": self.document_prefix,
            "inputTypeField": self.input_type_field or None,
            "maxInputTokens": self.max_input_tokens,
            "passageTokens": self.passage_tokens or None,
            "batchSize": self.batch_size,
            "languages": self.languages,
        }

    @property
    def languages(self) -> str | None:
        """Which languages the model reads: "multilingual", "en" (English only) or None (a model saipling does not
        know). An English-only model's vectors of text in another script are noise: a hybrid search of such a query
        leaves them out (retrieval/search.py)."""
        from .families import model_languages

        return model_languages(self.model) if self.model else None

    def embed_documents(self, texts: Sequence[str]) -> EmbeddingResult:
        """Embed documents in batches; returns all vectors in input order."""
        return self._embed_all([self.document_prefix + t for t in texts], "document")

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one search query; returns a 1-D float32 unit vector."""
        return self._embed_all([self.query_prefix + text], "query").vectors[0]

    def _embed_all(self, texts: list[str], input_type: str) -> EmbeddingResult:
        for t in texts:
            if not t or not t.strip():
                raise ValueError("cannot embed empty text")
        if not texts:
            return EmbeddingResult(np.zeros((0, self.dimensions), dtype=np.float32), 0)
        out: list[np.ndarray] = []
        tokens = 0
        done = 0
        timeouts = 0  # consecutive timeouts of a one-text batch
        while done < len(texts):
            batch = self._next_batch(texts, done)
            try:
                vectors, used = self._checked_batch(batch, input_type)
            except ProviderTimeout as exc:
                if wait_deadline() is not None:
                    raise  # a search waits: no second try
                if len(batch) > 1:
                    self._shrink_batches(len(batch))
                    continue
                timeouts += 1
                if timeouts > self.max_retries:
                    raise ProviderUnavailable(f"{exc} (a single text, {timeouts} times)") from None
                continue
            timeouts = 0
            out.append(vectors)
            tokens += used
            done += len(batch)
        return EmbeddingResult(normalise(np.vstack(out)), tokens)

    def _shrink_batches(self, timed_out: int) -> None:
        """A batch of `timed_out` texts got no answer in time: use batches of half that from now on."""
        size = max(1, timed_out // 2)
        if size < self.batch_size:
            log.warning(
                "%s %s: a batch of %d texts timed out; sending batches of %d from now on",
                self.name,
                self.model,
                timed_out,
                size,
            )
            self.batch_size = size

    def _next_batch(self, texts: list[str], start: int) -> list[str]:
        """The next batch from `start`: at most `batch_size` texts and `max_batch_tokens` estimated tokens."""
        end, batch_tokens = start, 0
        while end < len(texts) and end - start < self.batch_size:
            est = estimate_tokens(texts[end])
            if end > start and batch_tokens + est > self.max_batch_tokens:
                break
            batch_tokens += est
            end += 1
        return texts[start:end]

    def _checked_batch(self, batch: list[str], input_type: str) -> tuple[np.ndarray, int]:
        """One batch whose vectors are all usable: finite, not all zero, of the expected size (the provider
        boundary: nothing else reaches the index or the embedding cache). A batch with unusable vectors is
        asked for again once; a wrong size or a second bad answer raises ProviderBadVectors."""
        tokens = 0
        for attempt in range(BAD_VECTOR_RETRIES + 1):
            res = self._embed_batch(batch, input_type)
            tokens += res.tokens
            try:
                vectors = np.asarray(res.vectors, dtype=np.float32)
            except (TypeError, ValueError) as exc:  # ragged or non-numeric
                raise ProviderBadVectors(f"{self.name} returned vectors that are not numbers ({exc})") from None
            problem = vector_problem(vectors, len(batch), self.dimensions)
            if problem is None:
                return vectors, tokens
            if problem.retry and attempt < BAD_VECTOR_RETRIES:
                log.warning("%s returned %s; asking again", self.name, problem.message)
                continue
            raise ProviderBadVectors(f"{self.name} returned {problem.message}")
        raise AssertionError("unreachable")

    def info(self) -> ProviderInfo:
        return ProviderInfo(
            name=self.name,
            model=self.model,
            dimensions=self.dimensions,
            reason=self.reason,
            cost_per_million_tokens=self.cost_per_million_tokens,
            failed=self.failed,
        )

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release network clients or sessions."""

    def abort(self) -> None:  # noqa: B027 - optional hook
        """Abandon the calls in flight at once and refuse new ones (the process is ending; any thread)."""


class ProviderBadVectors(ProviderError):
    """The provider answered with vectors that cannot be used (NaN/Inf, all zero, wrong size or count)."""


@dataclass
class VectorProblem:
    message: str
    retry: bool  # worth asking again (NaN/zero rows); a wrong size never fixes itself


def vector_problem(vectors: np.ndarray, count: int, dims: int) -> VectorProblem | None:
    """Why `vectors` (one row per text) are unusable, or None: the shape must be (count, dims) (any dims when
    `dims` is 0), every value finite, no row all zero."""
    if vectors.ndim != 2 or vectors.shape[0] != count:
        return VectorProblem(f"{vectors.shape[0] if vectors.ndim else 0} vectors for {count} texts", False)
    if dims and vectors.shape[1] != dims:
        return VectorProblem(f"vectors of {vectors.shape[1]} dimensions, expected {dims}", False)
    if vectors.shape[1] == 0:
        return VectorProblem("empty vectors", False)
    bad = ~np.isfinite(vectors).all(axis=1)
    if bad.any():
        return VectorProblem(f"{int(bad.sum())} of {count} vectors holding NaN or Inf", True)
    zero = ~(np.abs(vectors) > 0).any(axis=1)
    if zero.any():
        return VectorProblem(f"{int(zero.sum())} of {count} vectors that are all zero", True)
    return None


def usable_vector(vec: np.ndarray, dims: int = 0) -> bool:
    """One stored vector (a cache or vector-table row) that may be served: finite, not all zero, right size."""
    return (not dims or vec.shape[-1] == dims) and bool(np.isfinite(vec).all()) and bool((vec != 0).any())


def normalise(vectors: np.ndarray) -> np.ndarray:
    """L2-normalise rows (zero rows stay zero)."""
    v = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return v / norms


# CJK ideographs, kana, hangul and their punctuation: BPE tokenizers spend about a token on each character
_WIDE = LazyPattern(  # compiled on the first non-ASCII text
    r"[\u2e80-\u9fff\ua960-\ua97f\uac00-\ud7ff\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef\U00020000-\U0003ffff]"
)


def estimate_tokens(text: str) -> int:
    """Cheap token estimate, used for budgets and batching: about 4 characters a token, and a token for each
    CJK character (counting those at 4 a token undercounted Chinese or Japanese text several times over)."""
    if text.isascii():
        return max(1, (len(text) + 3) // 4)
    rest, wide = _WIDE.subn("", text)
    return max(1, wide + (len(rest) + 3) // 4)


@dataclass
class NoneProvider:
    """Keyword-only mode: no vectors at all."""

    name: str = "none"
    model: str = ""
    dimensions: int = 0
    max_input_tokens: int = 1_000_000
    cost_per_million_tokens: float = 0.0
    reason: str = ""
    failed: str | None = None
    extra: dict = field(default_factory=dict)
    placeholder: bool = False  # stands in for the configured provider in a command that embeds nothing

    def info(self) -> ProviderInfo:
        return ProviderInfo("none", "", 0, self.reason, 0.0, None)

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass

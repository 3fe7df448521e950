"""The embedding provider interface shared by every backend."""

from __future__ import annotations

import abc
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import ProviderError

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


class EmbeddingProvider(abc.ABC):
    """Turns texts into unit vectors.

    Subclasses implement `_embed_batch`; batching by `batch_size` and the token cap lives here.
    """

    name: str = "base"
    model: str = ""
    dimensions: int = 0
    max_input_tokens: int = 512
    cost_per_million_tokens: float = 0.0
    batch_size: int = 128
    max_batch_tokens: int = 120_000
    query_prefix: str = ""
    document_prefix: str = ""

    def __init__(self) -> None:
        self.failed: str | None = None
        self.reason: str = ""

    @abc.abstractmethod
    def _embed_batch(self, texts: list[str], input_type: str) -> EmbeddingResult:
        """Embed one batch (already within the batch limits). input_type is 'document' or 'query'."""

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
        for batch in self._batches(texts):
            vectors, used = self._checked_batch(batch, input_type)
            out.append(vectors)
            tokens += used
        return EmbeddingResult(normalise(np.vstack(out)), tokens)

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
                raise ProviderBadVectors(
                    f"{self.name} returned vectors that are not numbers ({exc})"
                ) from None
            problem = vector_problem(vectors, len(batch), self.dimensions)
            if problem is None:
                return vectors, tokens
            if problem.retry and attempt < BAD_VECTOR_RETRIES:
                log.warning("%s returned %s; asking again", self.name, problem.message)
                continue
            raise ProviderBadVectors(f"{self.name} returned {problem.message}")
        raise AssertionError("unreachable")

    def _batches(self, texts: list[str]) -> list[list[str]]:
        batches: list[list[str]] = []
        cur: list[str] = []
        cur_tokens = 0
        for t in texts:
            est = estimate_tokens(t)
            if cur and (len(cur) >= self.batch_size or cur_tokens + est > self.max_batch_tokens):
                batches.append(cur)
                cur, cur_tokens = [], 0
            cur.append(t)
            cur_tokens += est
        if cur:
            batches.append(cur)
        return batches

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
_WIDE = re.compile(
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

    def info(self) -> ProviderInfo:
        return ProviderInfo("none", "", 0, self.reason, 0.0, None)

    def close(self) -> None:
        pass

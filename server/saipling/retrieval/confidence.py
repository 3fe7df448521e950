"""How sure a search is: per-model cosine calibrations (measured, or derived from the project for a model
without one) and the lexical coverage of the query's terms in a result."""

from __future__ import annotations

import json
import logging
import math
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..lazy import np  # numpy loads on first use (cold CLI path)
from ..markdown.terms import CJK_RE, FUNCTION_WORDS, STOPWORDS, WORD_RE, cjk_sentence_pairs, fold_text, match_key

if TYPE_CHECKING:
    from ..storage.base import StoredChunk
    from .project_view import ProjectView


@dataclass(frozen=True)
class Calibration:
    """Raw cosine of a result -> vector confidence, linear between `low` (0) and `high` (1)."""

    low: float
    high: float


# Per model, measured on the top hit of real questions (SciFact train) against off-topic questions (README).
CALIBRATIONS: dict[str, Calibration] = {
    "all-MiniLM-L6-v2": Calibration(0.34, 0.44),
    # bge's cosines crowd together (a `modelPath` folder, CLS pooling): the cosine of the top hybrid hit of the
    # 809 SciFact train questions has p5 0.626, of the 50 off-topic questions p95 0.667 on SciFact and 0.649 on
    # fiction; with the lexical coverage, 782/809 real top hits kept, 48/50 and 50/50 off-topic emptied
    # (benchmarks README, row R4)
    "bge-small-en-v1.5": Calibration(0.68, 0.72),
}
# An export of a calibrated model keeps its calibration under such suffixes (`bge-small-en-v1.5-onnx-int8`)
_EXPORT_SUFFIX = re.compile(r"(-(onnx|int8|uint8|q8|quantized|fp16|fp32|optimum))+")


# A model not in CALIBRATIONS: see fallback_calibration.
FALLBACK_RATIO, FALLBACK_HALF_WIDTH, FALLBACK_SAMPLE = 0.6, 0.05, 64


# Lexical confidence: the idf-weighted share of the query's terms found in the result, linear between these.
# With vectors it only adds to the cosine's confidence for near-complete matches (names the model does not know);
# keyword-only (no vectors) it is all there is, and the bar is lower (README "Search": measured separation).
LEXICAL_LOW, LEXICAL_HIGH = 0.6, 0.95
KEYWORD_ONLY_LOW, KEYWORD_ONLY_HIGH = 0.3, 0.6
# One signal alone (the cosine, or the words) makes a result at most this sure; the two together add up as
# independent evidence (1 - (1 - a)(1 - b)): a hit both lists vouch for scores higher than either alone, and only an
# exact heading or name match is certain (1.0). The noConfidentMatch bar (0.5) moves little: a single signal
# needs 0.5 / SINGLE_SIGNAL of its ramp instead of half of it.
SINGLE_SIGNAL = 0.9


def calibration_for(model: str | None) -> Calibration | None:
    """The cosine calibration of a model (names compared without an organisation prefix and case)."""
    if not model:
        return None
    name = model.rsplit("/", 1)[-1].lower()
    for m, c in CALIBRATIONS.items():
        m = m.lower()
        if name == m or (name.startswith(m) and _EXPORT_SUFFIX.fullmatch(name[len(m) :])):
            return c
    return None


def ramp(x: float, low: float, high: float) -> float:
    return float(min(1.0, max(0.0, (x - low) / (high - low))))


def vector_calibration(project: ProjectView) -> Calibration | None:
    """The calibration of the active model; a model without one gets `fallback_calibration`."""
    model = getattr(project.provider, "model", None)
    return calibration_for(model) or fallback_calibration(project, model or "")


_fallbacks: dict[tuple[str, str], tuple[int, Calibration | None]] = {}
FALLBACK_META = "fallback_calibration:"  # + the model: {"n": embedded chunks, "low", "high"} (none: no calibration)
log = logging.getLogger(__name__)


_fallback_lock = threading.Lock()


def fallback_calibration(project: ProjectView, model: str) -> Calibration | None:
    """For a model with no measured calibration: the bar scales with the model's own notion of "related",
    measured on this project: FALLBACK_RATIO x the median cosine between a chunk and its nearest chunk in
    another file (a sample of FALLBACK_SAMPLE chunks), +-FALLBACK_HALF_WIDTH around it.

    Measured with all-MiniLM-L6-v2 standing in for an unknown model: that median is 0.64 on SciFact and 0.665 on
    the fiction corpus (while the cosine of unrelated passage pairs differs: 0.11 vs 0.27), and the bar that
    separates real from off-topic questions is ~0.39 on both, hence the ratio 0.6. A model whose cosines are
    compressed (everything above 0.7) gets a bar nothing falls under: it fails open, as before calibration.
    A small project has few truly related passages, so its bar comes out lower (0.24 on the 12-file test
    project): it fails open there too.
    Recomputed when the number of embedded chunks changes by more than a tenth. Kept in the index too (meta
    FALLBACK_META + model), so another process takes it instead of measuring again: the sample's 64 nearest-chunk
    searches cost a cold CLI search ~11 of its 19 s at 269k chunks and most of a first search at a million, where
    the compact matrix answers them one by one (benchmarks/README.md S12)."""
    key = (str(project.store.path), model)
    with _fallback_lock:
        known = _fallbacks.get(key)
    if known is None:
        known = _stored_fallback(project, model)
    n_now = project.store.embedded_count() if known is not None else 0
    if known is not None and abs(n_now - known[0]) <= max(10, known[0] // 10):
        with _fallback_lock:
            _fallbacks[key] = known
        return known[1]
    n, best = project.store.nearest_other_file_cosines(FALLBACK_SAMPLE)
    cal = None
    if n >= 20 and best:
        bar = FALLBACK_RATIO * float(np.median(best))
        cal = Calibration(bar - FALLBACK_HALF_WIDTH, bar + FALLBACK_HALF_WIDTH)
    with _fallback_lock:
        _fallbacks[key] = (n, cal)
    value = (
        {"n": n, "dims": _dims(project), "low": cal.low, "high": cal.high} if cal else {"n": n, "dims": _dims(project)}
    )
    try:  # never waiting for another process's write: a busy index is left as it is
        if not project.store.try_set_meta(FALLBACK_META + model, json.dumps(value)):
            log.debug("fallback calibration not kept in the index: another process is writing")
    except Exception as exc:  # a read-only open: the next process measures again
        log.debug("fallback calibration not kept in the index: %s", exc)
    return cal


def _dims(project: ProjectView) -> int:
    """The dimensions of the index's vectors (a model's calibration holds for those only)."""
    return int(project.store.vector_model()[1] or 0)


def _stored_fallback(project: ProjectView, model: str) -> tuple[int, Calibration | None] | None:
    """The fallback calibration another process kept in the index: (embedded chunks then, calibration)."""
    try:
        value = json.loads(project.store.get_meta(FALLBACK_META + model) or "null")
        if not isinstance(value, dict) or value.get("dims") != _dims(project):  # (the model at other dimensions)
            return None
        cal = Calibration(float(value["low"]), float(value["high"])) if "low" in value else None
        return int(value["n"]), cal
    except (ValueError, TypeError, KeyError):  # (written by another version: measured again)
        return None


def query_idf(project: ProjectView, query: str, skip: frozenset[str] = STOPWORDS) -> dict[str, float]:
    """The query's content terms (as the keyword index stems them) -> BM25 idf over the project's chunks; the
    words in `skip` left out unless the query has nothing else.
    A term absent from the project gets the highest idf: a query about something the project never mentions
    cannot reach lexical confidence."""
    words = [w.lower() for w in WORD_RE.findall(query)]
    content = [w for w in dict.fromkeys(words) if w not in skip] or list(dict.fromkeys(words))
    keys = list(dict.fromkeys(match_key(w) for w in cjk_sentence_pairs(content[:64])))
    if not keys:
        return {}
    df, n = project.store.term_doc_freqs(keys)
    return {k: math.log(1.0 + (n - df.get(k, 0) + 0.5) / (df.get(k, 0) + 0.5)) for k in keys}


def chunk_words(row: StoredChunk) -> str:
    """What lexical coverage reads of a chunk: its text and heading path."""
    return f"{row.text or ''} {row.heading_path or ''}"


def lexical_coverage(idf: Mapping[str, float], text: str) -> float:
    """The idf-weighted share of the query's terms that this text (a chunk's `chunk_words`) contains.

    A Porter stem starts with the first three letters of its word, so only words starting like a term are
    stemmed (tokenising and stemming every word of every result was most of the cost)."""
    total = sum(idf.values())
    if total <= 0:
        return 0.0
    folded = fold_text(text.lower())
    got = 0.0
    for key, weight in idf.items():
        start = key[:3]
        if start not in folded:
            continue
        if not key.isascii() and CJK_RE.search(key):  # CJK words match inside the tokenizer's longer runs
            got += weight if key in folded else 0.0
        elif any(match_key(w) == key for w in set(re.findall(r"\b" + re.escape(start) + r"\w*", folded))):
            got += weight
    return got / total


def combine(vector: float, lexical: float) -> float:
    """A result's confidence from its vector and lexical evidence (each 0..1), see SINGLE_SIGNAL."""
    return 1.0 - (1.0 - SINGLE_SIGNAL * vector) * (1.0 - SINGLE_SIGNAL * lexical)


def vocabulary_share(project: ProjectView, query: str) -> float:
    """The share of the query's content words that the project's text or the embedding model knows (1.0 for a
    query without words). A word the project never uses and the model has no token for (`zzqx`) carries no
    meaning the cosine could match: the cosine of such a query with the nearest passage (~0.5 with MiniLM,
    above its calibrated bar) says nothing, so its vector confidence is scaled by this share.

    The model knows a word when its tokenizer holds it whole (`knows_word` of the provider); a provider that
    cannot tell (hosted models) leaves the project's vocabulary alone to decide."""
    words = [w.lower() for w in WORD_RE.findall(query)]
    content = [w for w in dict.fromkeys(words) if w not in FUNCTION_WORDS][:64]  # ("should": no meaning to know)
    if not content:
        return 1.0
    keys = {w: match_key(w) for w in content}
    df, _n = project.store.term_doc_freqs(list(dict.fromkeys(keys.values())))
    knows = getattr(project.provider, "knows_word", None)
    known = 0
    for w, key in keys.items():
        if not w.isascii() and CJK_RE.search(w):
            known += 1  # a CJK run matches inside the tokenizer's longer runs: no way to judge it here
        elif df.get(key, 0) > 0 or (callable(knows) and knows(w) is True):
            known += 1
    return known / len(content)


FEW_TERMS = 6


def coverages(idf: Mapping[str, float], texts: list[str]) -> list[float]:
    """`lexical_coverage` of each text, in one regex pass a text: the words starting like one of the query's
    terms are found together (not a pass per term), then stemmed (memoised). CJK terms go through
    lexical_coverage (they match inside the tokenizer's longer runs)."""
    total = sum(idf.values())
    if total <= 0:
        return [0.0] * len(texts)
    if len(idf) <= FEW_TERMS or any(not k.isascii() and CJK_RE.search(k) for k in idf):
        return [lexical_coverage(idf, text) for text in texts]  # (a few terms: their own checks are quicker)
    starts = sorted({k[:3] for k in idf}, key=len, reverse=True)
    pattern = re.compile(r"\b(?:" + "|".join(re.escape(x) for x in starts) + r")\w*")
    out = []
    for text in texts:
        folded = fold_text(text.lower())
        keys = {match_key(w) for w in set(pattern.findall(folded))}
        out.append(sum(w for k, w in idf.items() if k in keys) / total)
    return out

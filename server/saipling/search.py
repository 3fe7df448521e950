"""Hybrid search (SPEC 8): vector KNN + FTS5 BM25 fused by weighted reciprocal rank fusion."""

from __future__ import annotations

import collections
import difflib
import functools
import logging
import os
import re
import threading
import time
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import snowballstemmer

from .context_settings import load_context_settings
from .embeddings.base import EmbeddingProvider
from .errors import InvalidRequest, ProviderError
from .paths import glob_problem, normalise_rel
from .reading import resolve_path
from .request_fields import bounded_int, query_text, require_object, required_str, str_list, typed
from .store import ChunkFilter

if TYPE_CHECKING:
    from .project import Project

log = logging.getLogger(__name__)

MODES = ("hybrid", "semantic", "lexical")
SOURCES = ("editor", "agent", "cli", "eval")
RRF_K = 60
MAX_QUERY_CHARS = 2000
MAX_RESULTS = 100  # the most results one request may ask for
FILTER_FIELDS = (
    "entityTypes",
    "fileTypes",
    "bookId",
    "chapterId",
    "pathPrefix",
    "glob",
    "corpus",
    "maxChapter",
)
# (keyword weight, vector weight) per query type (SPEC 8)
WEIGHTS = {"exact": (0.7, 0.3), "semantic": (0.15, 0.85), "mixed": (0.4, 0.6)}
STOPWORDS = frozenset(
    "a an and are as at be but by for from has have he her his how i in into is it its of on or she that the their "
    "them then there these they this to was were what when where which who why will with you your".split()
)
_WORD_RE = re.compile(r"\w+", re.UNICODE)
_PHRASE_RE = re.compile(r'"([^"]+)"')


# -- request ---------------------------------------------------------------------------------------------------
@dataclass
class SearchRequest:
    query: str
    max_results: int = 5
    min_score: float = 0.0
    mode: str = "hybrid"
    filter: ChunkFilter = field(default_factory=ChunkFilter)
    role: str | None = None
    respect_context_settings: bool = True
    source: str = "cli"
    explain: bool = False
    log: bool = True


def parse_filter(raw: Any, prefix: str = "filter.") -> ChunkFilter:
    if raw is None:
        return ChunkFilter()
    if not isinstance(raw, Mapping):
        raise InvalidRequest(prefix.rstrip("."), "must be an object")
    for key in raw:  # a misspelt filter would otherwise filter nothing, silently
        if key not in FILTER_FIELDS:
            close = difflib.get_close_matches(str(key), FILTER_FIELDS, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]}?" if close else f"filters are {', '.join(FILTER_FIELDS)}"
            raise InvalidRequest(f"{prefix}{key}", f"is not a filter ({hint})")
    max_chapter = raw.get("maxChapter")
    if max_chapter is not None and (isinstance(max_chapter, bool) or not isinstance(max_chapter, int)):
        raise InvalidRequest(prefix + "maxChapter", "must be an integer")
    out = ChunkFilter(
        entity_types=str_list(raw, "entityTypes", prefix),
        file_types=str_list(raw, "fileTypes", prefix),
        max_chapter=max_chapter,
    )
    for key, attr in (("bookId", "book_id"), ("chapterId", "chapter_id"), ("pathPrefix", "path_prefix"),
                      ("glob", "glob"), ("corpus", "corpus")):  # fmt: skip
        value = raw.get(key)
        if value is not None:
            if not isinstance(value, str):
                raise InvalidRequest(prefix + key, "must be a string")
            if key == "glob" and (problem := glob_problem(value)) is not None:
                raise InvalidRequest(prefix + key, problem)
            setattr(out, attr, normalise_rel(value) if key == "pathPrefix" else value)
    return out


def parse_request(params: Mapping[str, Any], default_max: int = 5) -> SearchRequest:
    """Validate a SPEC 8 request; InvalidRequest names the offending field."""
    params = require_object(params)
    query = query_text(params.get("query"), MAX_QUERY_CHARS)
    max_results = bounded_int(params, "maxResults", default_max, 1, MAX_RESULTS)
    min_score = typed(params, "minScore", float, 0.0)
    if not 0.0 <= min_score <= 1.0:
        raise InvalidRequest("minScore", "must be between 0 and 1")
    mode = typed(params, "mode", str, "hybrid")
    if mode not in MODES:
        raise InvalidRequest("mode", f"must be one of {', '.join(MODES)}")
    source = typed(params, "source", str, "cli")
    if source not in SOURCES:
        raise InvalidRequest("source", f"must be one of {', '.join(SOURCES)}")
    return SearchRequest(
        query=query,
        max_results=max_results,
        min_score=min_score,
        mode=mode,
        filter=parse_filter(params.get("filter")),
        role=typed(params, "role", str, None),
        respect_context_settings=typed(params, "respectContextSettings", bool, True),
        source=source,
        explain=typed(params, "explain", bool, False),
    )


# -- query analysis --------------------------------------------------------------------------------------------
def query_type(query: str) -> str:
    """exact (quoted, identifiers, ALL_CAPS, camelCase) | semantic (questions, 4+ words) | mixed."""
    q = query.strip()
    words = q.split()
    if '"' in q or any(
        re.fullmatch(r"[A-Z][A-Z0-9_]{2,}", w)
        or re.search(r"[a-z][A-Z]", w)
        or re.search(r"\w[_./:#]\w", w)
        or re.search(r"[A-Za-z]\d|\d[A-Za-z]", w)
        for w in words
    ):
        return "exact"
    if q.endswith("?") or len(words) >= 4:
        return "semantic"
    return "mixed"


def fts_query(query: str) -> str | None:
    """A safe FTS5 MATCH expression from raw user text: quoted phrases kept, each word quoted, OR-joined."""
    phrases = [p.strip() for p in _PHRASE_RE.findall(query) if _WORD_RE.search(p)]
    rest = _PHRASE_RE.sub(" ", query)
    words = [w.lower() for w in _WORD_RE.findall(rest)]
    content = [w for w in words if w not in STOPWORDS]
    words = list(dict.fromkeys(content or words))
    terms = [_quote(" ".join(_WORD_RE.findall(p))) for p in phrases] + [
        _quote(w) + ("*" if _CJK_RE.search(w) else "") for w in words[:64]
    ]
    return " OR ".join(terms) if terms else None


# The unicode61 tokenizer keeps a run of CJK characters (up to punctuation) as one token: a CJK query word
# matches as a prefix of such runs, so "東京" finds "東京タワーは高い".
_CJK_RE = re.compile(r"[\u2e80-\u9fff\uac00-\ud7ff\uf900-\ufaff]")


def _quote(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def highlight_terms(query: str) -> list[str]:
    words = [w.lower() for w in _WORD_RE.findall(query)]
    return [w for w in dict.fromkeys(words) if w not in STOPWORDS and len(w) > 1] or words


# -- query embeddings ------------------------------------------------------------------------------------------
class QueryCache:
    """LRU of query embeddings keyed by (model, text) (SPEC 6)."""

    def __init__(self, size: int = 100) -> None:
        self.size = size
        self._data: collections.OrderedDict[tuple[str, str], np.ndarray] = collections.OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, provider: EmbeddingProvider, text: str) -> np.ndarray:
        key = (provider.query_key, text)
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                self.hits += 1
                return self._data[key]
        vec = provider.embed_query(text)
        with self._lock:
            self.misses += 1
            self._data[key] = vec
            while len(self._data) > self.size:
                self._data.popitem(last=False)
        return vec


def _cache_for(project: Project) -> QueryCache:
    cache = getattr(project, "query_cache", None)
    if cache is None:
        cache = QueryCache()
        project.query_cache = cache  # type: ignore[attr-defined]
    return cache


# -- search ----------------------------------------------------------------------------------------------------
def vector_unavailable(project: Project) -> str | None:
    """Why vector search cannot run now, or None."""
    p = project.provider
    if not isinstance(p, EmbeddingProvider):
        return "keyword search only: " + (p.reason or "no embedding provider configured")
    if p.failed:
        return f"keyword search only: {p.failed}"
    if (down := p.unavailable) is not None:  # circuit breaker open: answer at keyword speed, no network wait
        return f"keyword search only: {down}"
    model, dims = project.store.vector_model()
    if not project.store.has_vectors() or model != p.vector_key:
        return f"keyword search only: the index has no {p.model} embeddings yet (run `saipling index`)"
    return None


def build_filter(project: Project, req: SearchRequest) -> ChunkFilter:
    flt = req.filter
    if req.role is not None:
        levels = project.settings.roles.get(req.role)
        flt.visibility = list(levels) if levels is not None else ["public"]
    if req.respect_context_settings:
        cs = load_context_settings(project.root)
        if cs.has("exclude"):
            flt.exclude_paths = sorted(
                set(flt.exclude_paths) | set(cs.excluded(list(project.store.file_states())))
            )
    return flt


def search(project: Project, params: Mapping[str, Any]) -> dict[str, Any]:
    req = parse_request(params, project.settings.max_results_default)
    return run_search(project, req)


def run_search(project: Project, req: SearchRequest) -> dict[str, Any]:
    t0 = time.perf_counter()
    flt = build_filter(project, req)
    mode = req.mode
    degraded: str | None = None
    qvec = None
    if mode != "lexical" and req.query.strip():  # (requests built in code skip parse_request's checks)
        degraded = vector_unavailable(project)
        if degraded is None:
            try:
                qvec = _cache_for(project).get(project.provider, req.query)  # type: ignore[arg-type]
            except ProviderError as exc:
                degraded = f"keyword search only: {exc}"
    want = req.max_results
    results: list[dict[str, Any]] = []
    n_cand = max(100, want * 4)
    for _attempt in range(3):
        ranked = _rank(project, req, flt, qvec, mode, n_cand)
        results, missing = _materialise(project, req, ranked, want)
        if not missing or len(results) >= want:
            break
        # files vanished from disk (queued for deindexing, maybe still in the index): rank again without them
        flt.exclude_paths = sorted(set(flt.exclude_paths) | missing)
        n_cand *= 2
    elapsed = (time.perf_counter() - t0) * 1000
    if req.log and project.settings.analytics:
        try:
            project.store.log_search(
                req.query, req.source, mode, len(results), results[0]["score"] if results else 0.0, elapsed
            )
        except Exception:  # noqa: BLE001 - logging a search must never fail it
            log.debug("search log write failed", exc_info=True)
    return {
        "query": req.query,
        "mode": mode,
        "queryType": query_type(req.query),
        "results": results,
        "degraded": degraded,
        "indexing": bool(project.state.is_indexing),
        "elapsedMs": round(elapsed, 2),
    }


@dataclass
class _Ranked:
    chunk_id: int
    score: float
    kw_rank: int | None = None
    vec_rank: int | None = None
    bm25: float | None = None
    cosine: float | None = None


def _rank(
    project: Project, req: SearchRequest, flt: ChunkFilter, qvec, mode: str, n_cand: int
) -> list[_Ranked]:
    kw: list[tuple[int, float]] = []
    vec: list[tuple[int, float]] = []
    if mode in ("hybrid", "lexical") or qvec is None:
        match = fts_query(req.query)
        if match:
            kw = project.store.fts_search(match, n_cand, flt)
    if qvec is not None and mode in ("hybrid", "semantic"):
        vec = project.store.knn(qvec, n_cand, flt)
    if qvec is None or mode == "lexical":
        best = abs(kw[0][1]) if kw and kw[0][1] else 1.0
        return [
            _Ranked(cid, min(1.0, abs(b) / best) if best else 0.0, i + 1, None, b, None)
            for i, (cid, b) in enumerate(kw)
        ]
    if mode == "semantic":
        return [_Ranked(cid, max(0.0, min(1.0, s)), None, i + 1, None, s) for i, (cid, s) in enumerate(vec)]
    w_kw, w_vec = WEIGHTS[query_type(req.query)]
    fused: dict[int, _Ranked] = {}
    for i, (cid, b) in enumerate(kw):
        r = fused.setdefault(cid, _Ranked(cid, 0.0))
        r.kw_rank, r.bm25 = i + 1, b
        r.score += w_kw / (RRF_K + i + 1)
    for i, (cid, s) in enumerate(vec):
        r = fused.setdefault(cid, _Ranked(cid, 0.0))
        r.vec_rank, r.cosine = i + 1, s
        r.score += w_vec / (RRF_K + i + 1)
    top = (w_kw + w_vec) / (RRF_K + 1)
    out = sorted(fused.values(), key=lambda r: -r.score)
    for r in out:
        r.score = r.score / top
    return out


def _materialise(
    project: Project, req: SearchRequest, ranked: list[_Ranked], want: int
) -> tuple[list[dict], set[str]]:
    """The first `want` ranked chunks whose files still exist, as result dicts; and the paths found missing."""
    page = want * 3 + 20
    rows: dict[int, dict[str, Any]] = {}
    out: list[dict[str, Any]] = []
    missing: set[str] = set()
    checked: dict[str, bool] = {}
    terms = highlight_terms(req.query)
    for i, r in enumerate(ranked):
        if len(out) >= want:
            break
        if r.score < req.min_score:
            break
        if i % page == 0:  # rows are fetched a page at a time, as far down the list as needed
            rows.update(project.store.chunks_by_id([x.chunk_id for x in ranked[i : i + page]]))
        row = rows.get(r.chunk_id)
        if row is None:
            continue
        path = row["path"]
        if path not in checked:
            checked[path] = os.path.isfile(project.root / path)
            if not checked[path]:
                missing.add(path)
                project_missing(project, path)
        if not checked[path]:
            continue
        out.append(result_dict(project, row, r.score, terms, r, req.explain))
    return out, missing


def project_missing(project: Project, path: str) -> None:
    """A result's file is gone from disk: drop it and queue it for deindex."""
    hook = getattr(project, "on_missing_file", None)
    if hook is not None:
        hook(path)
    else:
        project.store.delete_file(path)


def result_dict(project: Project, row: Mapping[str, Any], score: float, terms: list[str], r: _Ranked | None = None,
                explain: bool = False) -> dict[str, Any]:  # fmt: skip
    matched = []
    if r is not None:
        if r.vec_rank is not None:
            matched.append("vector")
        if r.kw_rank is not None:
            matched.append("keyword")
    res = {
        "filePath": row["path"],
        "uri": (project.root / row["path"]).as_uri(),
        "sectionHeading": row["section_heading"],
        "headingPath": row["heading_path"] or "",
        "startLine": row["start_line"],
        "endLine": row["end_line"],
        "range": {
            "start": {"line": row["start_line"] - 1, "character": 0},
            "end": {"line": row["end_line"], "character": 0},
        },
        "snippet": make_snippet(row["text"] or "", terms),
        "preview": row["preview"],
        "score": round(float(score), 4),
        "tokenCount": row["token_count"],
        "fileType": row["file_type"],
        "entityType": row["entity_type"],
        "entityName": row["entity_name"],
        "bookId": row["book_id"],
        "chapterId": row["chapter_id"],
        "matchedBy": matched,
    }
    if explain and r is not None:
        res["explain"] = {"keywordRank": r.kw_rank, "vectorRank": r.vec_rank, "bm25": r.bm25, "cosine": r.cosine,
                          "fusedScore": round(float(score), 4)}  # fmt: skip
    return res


def make_snippet(text: str, terms: list[str], width: int = 240) -> str:
    """About `width` characters around the first matched word, matched words wrapped in **.

    A word matches a query term the way FTS5 matched it (`porter unicode61 remove_diacritics`): same Porter
    stem after folding case and accents, so "drowning" marks "drowned" and "cafe" marks "Café"."""
    flat = " ".join(text.split())
    keys = {match_key(t) for t in terms}
    folded = _fold(flat.lower())
    if not keys or not any(k[:3] in folded for k in keys):  # a stem starts like the word it came from
        return flat[:width]
    m = next((w for w in _WORD_RE.finditer(flat) if match_key(w.group(0)) in keys), None)
    start = 0 if m is None else max(0, m.start() - width // 3)
    if start > 0:
        space = flat.find(" ", start)
        start = space + 1 if 0 <= space < m.start() else start  # type: ignore[union-attr]
    piece = flat[start : start + width]
    marked = _WORD_RE.sub(
        lambda w: f"**{w.group(0)}**" if match_key(w.group(0)) in keys else w.group(0), piece
    )
    return ("…" if start > 0 else "") + marked + ("…" if start + width < len(flat) else "")


_COMBINING = re.compile(r"[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]+")


def _fold(text: str) -> str:
    """Accents removed (é -> e), as the FTS5 tokenizer's remove_diacritics does."""
    return _COMBINING.sub("", unicodedata.normalize("NFKD", text))


_stemmers = threading.local()  # snowball stemmer objects keep state between calls: one per thread


@functools.lru_cache(maxsize=65536)
def match_key(word: str) -> str:
    """What FTS5's porter + unicode61 (remove_diacritics) tokenizer makes of a word: folded, then stemmed."""
    folded = _fold(word.lower())
    stemmer = getattr(_stemmers, "porter", None)
    if stemmer is None:
        stemmer = _stemmers.porter = snowballstemmer.stemmer("porter")
    return stemmer.stemWord(folded)


# -- related ---------------------------------------------------------------------------------------------------
def related(project: Project, params: Mapping[str, Any]) -> dict[str, Any]:
    """Passages from other files most similar to this file (mean of its chunk vectors)."""
    params = require_object(params)
    target = required_str(params, "path", "uri")
    max_results = bounded_int(params, "maxResults", project.settings.max_results_default, 1, MAX_RESULTS)
    _, rel = resolve_path(project.root, target)
    t0 = time.perf_counter()
    chunks = project.store.chunks_for_path(rel)
    flt = ChunkFilter(exclude_paths=[rel])
    cs = load_context_settings(project.root)
    if cs.has("exclude"):
        flt.exclude_paths += cs.excluded(list(project.store.file_states()))
    degraded = vector_unavailable(project)
    ranked: list[_Ranked] = []
    if chunks and degraded is None:
        vecs = project.store.chunk_vectors([c["id"] for c in chunks])
        if vecs:
            mean = np.mean(np.stack(list(vecs.values())), axis=0)
            mean /= np.linalg.norm(mean) or 1.0
            ranked = [
                _Ranked(cid, max(0.0, s), None, i + 1, None, s)
                for i, (cid, s) in enumerate(project.store.knn(mean, max_results * 3, flt))
            ]
    elif chunks:
        words = collections.Counter(
            w.lower() for c in chunks for w in _WORD_RE.findall(c["text"] or "") if len(w) > 4
        )
        match = fts_query(" ".join(w for w, _ in words.most_common(24)))
        if match:
            hits = project.store.fts_search(match, max_results * 3, flt)
            best = abs(hits[0][1]) if hits else 1.0
            ranked = [
                _Ranked(cid, abs(b) / best if best else 0.0, i + 1, None, b)
                for i, (cid, b) in enumerate(hits)
            ]
    req = SearchRequest(query=" ", max_results=max_results)
    results, _ = _materialise(project, req, ranked, max_results)
    return {"path": rel, "results": results, "degraded": degraded if chunks else None,
            "indexed": bool(chunks), "elapsedMs": round((time.perf_counter() - t0) * 1000, 2)}  # fmt: skip

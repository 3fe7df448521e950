"""Hybrid search (SPEC 8): vector KNN + FTS5 BM25, fused on z-normalised scores; a calibrated confidence.

Ranking: keyword candidates (chunk BM25, and whole-file BM25 for short files) and vector candidates (cosine) are
unioned; each signal is z-normalised over the candidates (no keyword match = BM25 0) and the two are added with
weights that follow the evidence the query has (`Evidence`): the keyword side counts in full when its best hits
hold the query's rare words (or its top files are the vector side's too), and fades when they only share its
common words, as a long question in a reader's own words does. A query that is exactly a heading, or a file's
entity name or alias, puts that section first. An optional rerank stage
(retrieval/rerank.py, off by default) then reorders the top N live candidates.

Scores: `confidence` (0..1) of a result comes from absolute signals, not ranks: its raw cosine mapped through a
per-model calibration (CALIBRATIONS in retrieval/confidence.py; scaled by the share of the query's words the project or
the model knows) and the share of the query's rare terms (idf-weighted) it contains, combined as independent evidence
(one alone at most 0.9; retrieval.confidence.combine). A
result's `score` is the query's confidence (the best confidence among its top results) scaled by how far the
result trails the top one in fused score: comparable across the queries of one project, and low everywhere when
nothing relevant exists (`noConfidentMatch`).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..config.visibility import role_levels
from ..embeddings.base import EmbeddingProvider, user_waiting
from ..embeddings.families import ENGLISH
from ..errors import InvalidRequest, ProviderError
from ..files.context_settings import ContextSettings, load_context_settings
from ..lazy import np  # numpy loads on first use (cold CLI path)
from ..markdown.terms import (
    FUNCTION_WORDS,
    STOPWORDS,
    WORD_RE,
    highlight_terms,
    is_label_frontmatter,
    make_snippet,
    match_key,
    mostly_latin,
    query_name,
    query_type,
    quoted_phrases,
)
from ..paths import glob_problem, normalise_rel
from ..storage.base import ChunkFilter, KeywordQuery, StoredChunk
from .confidence import (
    KEYWORD_ONLY_HIGH,
    KEYWORD_ONLY_LOW,
    LEXICAL_HIGH,
    LEXICAL_LOW,
    chunk_words,
    combine,
    coverages,
    query_idf,
    ramp,
    vector_calibration,
    vocabulary_share,
)
from .fusion import (
    CANDIDATE_VECTOR_Z,
    FUSION_VECTOR_WEIGHT,
    KEYWORD_EVIDENCE_DEPTH,
    Evidence,
    weigh,
)
from .request_checks import MAX_QUERY_CHARS, MAX_RESULTS, check_query
from .request_checks import chapter_id as chapter_ref
from .rerank import rerank_depth, rerank_pairs

if TYPE_CHECKING:
    from .project_view import ProjectView
    from .requests import SearchFilter

log = logging.getLogger(__name__)

# Fusion (chosen on the union of the dev sets and SciFact train; figures in README "Retrieval quality")
# files of at most this many bytes (about 500 words) are scored lexically as a whole (whole-file BM25). A size in
# bytes, not chunks: the same note is "short" whatever the model's chunk length (SciFact train, hybrid nDCG@10 with
# ~100-token chunks, maxResults 200: 0.7423 at <= 3 chunks, 0.7443 at <= 3,000 bytes, 99% of its abstracts)
SHORT_FILE_BYTES = 3000
# within a short file, how much a chunk's own keyword score counts beside the file's (only breaks ties: 0.1 cost
# SciFact train 0.003)
SHORT_FILE_CHUNK_WEIGHT = 0.01
LONG_FILE_MIX = 0.5  # longer files: this share of their keyword score is whole-file BM25, the rest their own
REL_SCALE = 2.0  # a result trailing the top one by this many fused z-units scores 1/e of the top's score
NORM_POOL = 100  # z-score statistics come from the top this-many candidates of each list
CONFIDENCE_DEPTH = 10  # the query's confidence is the best confidence among this many top results
CONFIDENT = 0.5  # below this (every result): noConfidentMatch
INDEXING_NOTE = "the index is still being built: nothing found yet is no sign the project lacks it; ask again shortly"
# live_rows reads the ranked chunks' rows this many past the ones it needs at a time (more pages only when files
# are gone): 3 x + 20 read and stat-checked 50 rows for a top 10, ~1.5 ms of a warm search's CPU
LIVE_ROWS_MARGIN = 5
MAX_QUOTED_NAMES = 3  # quoted phrases of a query looked up as entity names


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


def chunk_filter(flt: SearchFilter | None) -> ChunkFilter:
    """The store's filter for a request's (validated) `filter` object."""
    if flt is None:
        return ChunkFilter()
    return ChunkFilter(
        entity_types=list(flt.entity_types or []),
        file_types=list(flt.file_types or []),
        book_id=flt.book_id,
        chapter_id=chapter_ref(flt.chapter_id) if flt.chapter_id else None,  # (`5` is ch-05, as in the CLI)
        max_chapter=flt.max_chapter,
        path_prefix=normalise_rel(flt.path_prefix) if flt.path_prefix else None,
        glob=flt.glob,
        corpus=flt.corpus,
        known_by=flt.known_by,
    )


def parse_request(params: Mapping[str, Any], default_max: int = 5) -> SearchRequest:
    """Validate a SPEC 8 request (retrieval.requests.SearchParams); InvalidRequest names the offending field."""
    from .requests import SearchParams, parse  # (pydantic: not on the CLI's search path, see cli_request)

    m = parse(SearchParams, params)
    return SearchRequest(
        query=m.query,
        max_results=m.max_results or max(1, min(default_max, MAX_RESULTS)),  # (a default from settings)
        min_score=m.min_score if m.min_score is not None else 0.0,
        mode=m.mode or "hybrid",
        filter=chunk_filter(m.filter),
        role=m.role,
        respect_context_settings=m.respect_context_settings is not False,
        source=m.source or "cli",
        explain=bool(m.explain),
    )


def cli_request(
    query: str,
    *,
    max_results: int,
    glob: str | None = None,
    path_prefix: str | None = None,
    entity_types: list[str] | None = None,
    file_types: list[str] | None = None,
    book_id: str | None = None,
    chapter_id: str | None = None,
    max_chapter: int | None = None,
    **fields: Any,
) -> SearchRequest:
    """A request whose option values the caller already checked (the CLI: click's types, choices and ranges),
    with the checks of retrieval.requests.SearchParams that click cannot make (the query's text, the glob's syntax) and
    the same errors, without importing pydantic: a one-shot `saipling search` stays cold."""
    try:
        query = check_query(query, MAX_QUERY_CHARS)
    except ValueError as exc:
        raise InvalidRequest("query", str(exc)) from None
    if glob is not None and (problem := glob_problem(glob)) is not None:
        raise InvalidRequest("filter.glob", problem)
    flt = ChunkFilter(
        entity_types=list(entity_types or []),
        file_types=list(file_types or []),
        book_id=book_id,
        chapter_id=chapter_ref(chapter_id, "--chapter") if chapter_id else None,  # (`--chapter 5` is ch-05)
        max_chapter=max_chapter,
        path_prefix=normalise_rel(path_prefix) if path_prefix else None,
        glob=glob,
    )
    return SearchRequest(query=query, max_results=max(1, min(max_results, MAX_RESULTS)), filter=flt, **fields)


# -- query embeddings ------------------------------------------------------------------------------------------
class QueryCache:
    """LRU of query embeddings keyed by (model, text) (SPEC 6)."""

    def __init__(self, size: int = 100) -> None:
        self.size = size
        self._data: collections.OrderedDict[tuple[str, str], np.ndarray] = collections.OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, provider: EmbeddingProvider, text: str) -> np.ndarray:
        size = getattr(provider, "dimensions", 0)  # (a learned size may change)
        key = (f"{provider.query_key}@{size}", text)
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                self.hits += 1
                return self._data[key]
        with user_waiting():  # a search waits for it: no minutes of retries on a slow or rate-limiting server
            vec = provider.embed_query(text)
        with self._lock:
            self.misses += 1
            self._data[key] = vec
            while len(self._data) > self.size:
                self._data.popitem(last=False)
        return vec


def _cache_for(project: ProjectView) -> QueryCache:
    cache = getattr(project, "query_cache", None)
    if cache is None:
        cache = QueryCache()
        project.query_cache = cache  # type: ignore[attr-defined]
    return cache


# -- search ----------------------------------------------------------------------------------------------------
def vector_unavailable(project: ProjectView) -> str | None:
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


QUIET_CHECK_MAX = 5000  # chunks without vectors up to which a search asks whether they are all the quiet files' chunks


def partly_embedded(project: ProjectView, mode: str) -> str | None:
    """What a search must say when some chunks have no vector (an index run cut short, a provider that failed
    on some batches), as status does: semantic search cannot see them, so its "no confident match" does not
    mean "not in the project". None while a run is embedding them (status says so too) or when none lack one."""
    p = project.provider
    if project.state.is_indexing or not isinstance(p, EmbeddingProvider):
        return None
    missing, total = project.store.unembedded_share(p.vector_key, p.dimensions)
    if not missing:
        return None
    scope = (
        "this search found them by keywords only"
        if mode == "hybrid"
        else "hybrid or lexical search finds them by keywords"
    )
    held = getattr(project, "held_for_quiet", None)
    waiting = held() if held is not None else []
    if waiting and missing <= QUIET_CHECK_MAX and not project.store.unembedded(waiting):
        # a server whose only chunks without vectors are those of files saved a moment ago: it embeds them once
        # quiet ("run saipling index to embed them" was wrong advice for the quiet period's two minutes)
        quiet = project.settings.quiet_period_seconds
        return (
            f"{missing} of {total} chunks have no embeddings yet (semantic search cannot find them; a missing match "
            f"may be there): {len(waiting)} file(s) changed in the last {quiet:g} s are embedded once they have "
            f"been quiet that long; {scope}"
        )
    return (
        f"{missing} of {total} chunks have no embeddings (semantic search cannot find them; a missing match may "
        f"be there): {scope}; run `saipling index` to embed them"
    )


def size_mismatch(project: ProjectView, qvec: np.ndarray) -> str | None:
    """Why a query vector cannot be compared with the index's vectors (another size: the model behind a
    custom server changed, e.g. llama.cpp, which ignores `model`), or None."""
    _, dims = project.store.vector_model()
    got = int(qvec.shape[-1])
    if not dims or got == dims:
        return None
    p = project.provider
    if isinstance(p, EmbeddingProvider) and not p.dimensions_fixed:
        p.resized = got  # the next index run rebuilds the vectors at this size
    return (
        f"keyword search only: {p.name} {p.model} makes {got}-dimensional query vectors but the index holds "
        f"{dims}-dimensional ones (the model behind it, or its `dimensions`, changed since the index was built); "
        "run `saipling index` to embed the project again"
    )


def build_filter(project: ProjectView, req: SearchRequest) -> ChunkFilter:
    flt = req.filter
    flt.visibility = role_levels(project.settings.roles, req.role, project.settings.default_role)
    if flt.known_by is not None and flt.known_entities is None:
        from .mentions import resolve_known_by

        resolve_known_by(project, flt, req.role)  # (the entities this role may see)
    if req.respect_context_settings:
        cs = load_context_settings(project.root)
        if cs.exclude_all:  # the settings file cannot be read: it could have excluded any file (fail closed)
            flt.visibility = []  # (no level: nothing matches, files synced during the request included)
        elif cs.has("exclude"):
            flt.exclude_paths = sorted(set(flt.exclude_paths) | set(cs.excluded(list(project.store.file_states()))))
    return flt


def search(project: ProjectView, params: Mapping[str, Any]) -> dict[str, Any]:
    req = parse_request(params, project.settings.max_results_default)
    return run_search(project, req)


def run_search(project: ProjectView, req: SearchRequest) -> dict[str, Any]:
    t0 = time.perf_counter()
    flt = build_filter(project, req)
    mode = req.mode
    degraded: str | None = None
    qvec = None
    unread = mode == "hybrid" and _model_cannot_read(project, req.query)
    if mode != "lexical" and req.query.strip() and not unread:  # (requests built in code skip parse_request's checks)
        degraded = vector_unavailable(project)
        if degraded is None:
            try:
                qvec = _cache_for(project).get(project.provider, req.query)  # type: ignore[arg-type]
            except ProviderError as exc:
                degraded = f"keyword search only: {exc}"
            else:
                degraded = size_mismatch(project, qvec)
                qvec = None if degraded else qvec
    want = req.max_results
    pairs: list[tuple[dict[str, Any], Ranked]] = []
    evidence = Evidence()
    # the query's confidence looks this far down, whatever maxResults is (and the rerank stage its top N)
    depth = max(want, CONFIDENCE_DEPTH, rerank_depth(project))
    n_cand = max(100, want * 4)
    sync = getattr(project, "lazy_sync", None)
    synced = False
    if sync is not None:
        sync()  # files saved since their text was read (the server refreshes them at once; this is the race)
    # the filter excludes the files the settings exclude among those indexed when it was built; a file indexed
    # since (a start-up run, a save synced just above) is checked again here, result by result (fail closed: an
    # MCP agent's first search got a new excluded diary's text)
    settings = load_context_settings(project.root) if req.respect_context_settings else None
    gate = settings_gate(settings) if settings is not None else None
    for _attempt in range(4):
        ranked, evidence = _rank(project, req, flt, qvec, mode, n_cand)
        fetch = depth
        while True:
            rows, missing, stale = live_rows(
                project,
                ranked,
                fetch,
                check=sync is not None,
                known=evidence.rows,
                horizon=flt.max_chapter,
                excluded=gate,
            )
            pairs = fold_front_matter(project, rows, flt.max_chapter)
            # (a label folded into its page's passage leaves a slot: the next candidates fill it)
            if len(pairs) >= depth or len(rows) < fetch or stale or missing:
                break
            fetch += depth - len(pairs)
        if stale:
            if not synced and sync is not None:
                sync(stale)  # changed on disk since they were read: refresh their text, then rank again
                synced = True
                continue
            # (changed again while being refreshed: never point at lines that may have moved)
            flt.exclude_paths = sorted(set(flt.exclude_paths) | stale)
            continue
        if not missing or len(pairs) >= depth:
            break
        # files vanished from disk (queued for deindexing, maybe still in the index): rank again without them
        flt.exclude_paths = sorted(set(flt.exclude_paths) | missing)
        n_cand *= 2
    if degraded is None and qvec is not None:
        # asked once the vector side has searched: the chunks without a vector are then those the loaded matrix
        # lacks, where a process's first search counted them in SQL (every chunk's row: 2.5 s at 269k chunks)
        degraded = partly_embedded(project, mode)
    reranked = rerank_pairs(project, req.query, pairs)  # the rerank stage (retrieval/rerank.py; off by default)
    pairs = reranked.items
    if reranked.degraded:
        degraded = f"{degraded}; {reranked.degraded}" if degraded else reranked.degraded
    used_vectors = qvec is not None and mode != "lexical"
    confidence = _score(project, req.query, pairs, used_vectors, evidence)
    terms = highlight_terms(req.query)
    results = [
        result_dict(project, row, r.score, terms, r, req.explain)
        for row, r in pairs[:want]
        if round(r.score, 4) >= req.min_score  # as shown: a score copied from a result keeps that result
    ]
    if used_vectors and results:  # new or edited text: found by keywords now, embedded once the writer pauses
        # (every candidate's vector was read: only those without a cosine can lack one; no read when none does)
        lacking = [r.chunk_id for _, r in pairs[: len(results)] if r.cosine is None]
        pending = project.store.without_vectors(lacking) if lacking else set()
        for res, (_, r) in zip(results, pairs, strict=False):
            if r.chunk_id in pending:
                res["embeddingPending"] = True
    elapsed = (time.perf_counter() - t0) * 1000
    if req.log and project.settings.analytics and not project.store.readonly:
        try:
            project.store.log_search(
                req.query, req.source, mode, len(results), results[0]["score"] if results else 0.0, elapsed
            )
        except Exception:  # noqa: BLE001 - logging a search must never fail it
            log.debug("search log write failed", exc_info=True)
    warnings = settings.warnings if settings is not None else []
    out = {
        "query": req.query,
        "mode": mode,
        "queryType": query_type(req.query),
        "results": results,
        "confidence": round(confidence, 4),
        "noConfidentMatch": confidence < CONFIDENT,
        "degraded": degraded,
        "indexing": bool(project.state.is_indexing),
        "elapsedMs": round(elapsed, 2),
    }
    if warnings:  # (a `.context_settings.json` that cannot be read, and what applies instead)
        out["warnings"] = warnings
    if out["indexing"] and not results:  # (an agent told "nothing relevant" during the first index believed it)
        out["noConfidentMatch"] = False
        out["note"] = INDEXING_NOTE
    if reranked.info:  # what the rerank stage did (provider, model, candidates, elapsedMs)
        out["rerank"] = {**reranked.info, "reranked": reranked.degraded is None}
    if req.explain:  # how the two lists were weighed for this query (README "Fusion")
        out["fusion"] = evidence.as_dict()
        if unread:
            out["fusion"]["vectorsSkipped"] = "the embedding model reads English only; the query is in another script"
    return out


def _model_cannot_read(project: ProjectView, query: str) -> bool:
    """True when the active model reads English only and most of the query's letters are not Latin (Chinese,
    Japanese, Russian...): its vectors of such a query are noise, so a hybrid search ranks by keywords alone (with
    all-MiniLM-L6-v2 on the CJK dev set, hybrid recall@10 0.79 -> 1.00 on exact words, 0.28 -> 0.48 on paraphrases:
    benchmarks/README.md). A multilingual model, or one saipling does not know, is used as usual."""
    if mostly_latin(query):
        return False
    return getattr(project.provider, "languages", None) == ENGLISH


@dataclass
class Ranked:
    chunk_id: int
    score: float  # the fused ranking key (z-score units in hybrid); replaced by the 0..1 score in results
    kw_rank: int | None = None
    vec_rank: int | None = None
    kw_score: float | None = None  # the keyword index's score (higher is better; SQLite: -bm25)
    cosine: float | None = None
    file_kw_score: float | None = None  # its file's whole-file keyword score (higher is better)
    exact: str | None = None  # "heading" | "entity": the query is this chunk's heading or its file's name
    confidence: float = 0.0
    fused: float = 0.0  # the ranking key (weighted z-scores); `score` becomes the 0..1 score
    rerank: float | None = None  # the rerank stage's score (retrieval/rerank.py), when it reordered this candidate
    keyword_weight: float | None = None  # its own keyword weight, where both lists hold it up (fusion.Evidence)
    labels: str | None = None  # its file's label frontmatter, when it took that chunk's place (fold_front_matter)


def _stats(values: list[float]) -> tuple[float, float]:
    """Mean and standard deviation (1 when there is no spread) for z-scores."""
    if not values:
        return 0.0, 1.0
    mean = math.fsum(values) / len(values)  # plain Python: a lexical search never imports numpy (cold CLI)
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values))
    return mean, (sd if sd > 1e-9 else 1.0)


def _rank(
    project: ProjectView, req: SearchRequest, flt: ChunkFilter, qvec, mode: str, n_cand: int
) -> tuple[list[Ranked], Evidence]:
    """Candidates best first. Hybrid: keyword and vector candidates unioned and ranked by a weighted sum of
    z-normalised scores (the keyword index's score for keywords, higher is better; cosine for vectors); see
    FUSION_* above."""
    store = project.store
    kw: list[tuple[int, float]] = []
    files: list[tuple[str, float, int]] = []
    vec: list[tuple[int, float]] = []
    lexical = mode in ("hybrid", "lexical") or qvec is None
    match = KeywordQuery.parse(req.query) if lexical else None
    # one read for the keyword, whole-file and vector lists, their chunks' paths and the keyword candidates'
    # vectors (one statement on PostgreSQL). Whole-file scores for the top NORM_POOL files only, however many
    # chunks are fetched: with a deeper list (a large maxResults) files far down it brought their chunks in with
    # file scores and the order changed with maxResults (SciFact train hybrid nDCG@10 0.7497 at maxResults 25 but
    # 0.7443 at 200)
    found = store.search_candidates(match, n_cand, NORM_POOL, qvec if mode in ("hybrid", "semantic") else None, flt)
    kw, files, vec = found.keywords, found.files, found.vectors
    short = {p: b for p, b, size in files if size <= SHORT_FILE_BYTES}
    ranked: dict[int, Ranked] = {}
    for i, (cid, b) in enumerate(kw):
        ranked[cid] = Ranked(cid, 0.0, kw_rank=i + 1, kw_score=b)
    for i, (cid, c) in enumerate(vec):
        r = ranked.setdefault(cid, Ranked(cid, 0.0))
        r.vec_rank, r.cosine = i + 1, c
    # with vectors, a short file that matches as a whole brings its chunks in even when no single chunk ranked
    # (the vector side picks the file's best chunk); keywords alone only return chunks holding the words
    if short and vec:
        for cid, _path in store.chunk_ids_for_paths(list(short), flt):
            ranked.setdefault(cid, Ranked(cid, 0.0))
    exact = _exact_matches(project, req.query, flt) if lexical or mode == "hybrid" else {}
    for cid in exact:
        ranked.setdefault(cid, Ranked(cid, 0.0))
    if not ranked:
        return [], Evidence()
    paths = dict(found.paths)
    if extra := [cid for cid in ranked if cid not in paths]:  # (a short file's other chunks, exact matches)
        paths.update(store.chunk_paths(extra))
    file_kw = {p: b for p, b, _ in files}
    if qvec is not None:  # exact cosines for candidates that only the keyword side found
        vectors = dict(found.keyword_vectors)
        looked = {cid for cid, _ in kw} if mode in ("hybrid", "semantic") else set()
        need = [cid for cid, r in ranked.items() if r.cosine is None and cid not in looked]
        if need:
            vectors.update(store.chunk_vectors(need))
        for cid, v in vectors.items():
            if cid in ranked and ranked[cid].cosine is None:
                ranked[cid].cosine = float(np.dot(v, qvec))
    # Each signal is z-normalised over the candidates, a candidate without a keyword match at 0 (the score of
    # no match): over the matching list alone, a query whose rare word only two chunks hold gave them z = +-1 and
    # let any vector candidate outrank them. The mean and spread come from the candidates of the top NORM_POOL
    # of each list, however many were fetched: the order must not depend on maxResults.
    pool_files = {p for p, _, _ in files[:NORM_POOL]}
    pool = {cid for cid, _ in kw[:NORM_POOL]} | {cid for cid, _ in vec[:NORM_POOL]} | set(exact)
    pool |= {cid for cid in ranked if paths.get(cid) in pool_files and paths.get(cid) in short}
    chunk_kw = dict(kw)
    k_mu, k_sd = _stats([chunk_kw.get(cid, 0.0) for cid in pool])
    f_mu, f_sd = _stats([file_kw.get(p, 0.0) for p in {paths.get(cid) for cid in pool} if p is not None])
    v_mu, v_sd = _stats([ranked[cid].cosine for cid in pool if cid in ranked and ranked[cid].cosine is not None])
    use_vec = qvec is not None and mode in ("hybrid", "semantic") and bool(vec)
    use_lex = lexical and bool(kw or files)
    lex_of: dict[int, float] = {}
    for cid in ranked:
        path = paths.get(cid)
        lex = 0.0
        if use_lex:
            zk = (chunk_kw.get(cid, 0.0) - k_mu) / k_sd
            zf = (file_kw.get(path, 0.0) - f_mu) / f_sd if path is not None else 0.0
            if path in short:  # the file's score; its own chunks' scores only break ties within the file
                lex = zf + SHORT_FILE_CHUNK_WEIGHT * zk
            else:
                lex = (1 - LONG_FILE_MIX) * zk + LONG_FILE_MIX * zf
        lex_of[cid] = lex
    ev = Evidence()
    if use_vec and use_lex:
        short_top = [path for path, _, _ in files[:KEYWORD_EVIDENCE_DEPTH] if path in short]
        lo_z = CANDIDATE_VECTOR_Z[0]  # (only the candidates the vectors hold up can have their keyword weight raised)
        vz = {cid: z for cid, r in ranked.items() if r.cosine is not None and (z := (r.cosine - v_mu) / v_sd) > lo_z}
        ev = weigh(project, req.query, kw, ranked, paths, lex_of, short_top, FUSION_VECTOR_WEIGHT, vz, short)
    elif use_vec:
        ev.vector_weight = 1.0
    elif use_lex:
        ev.keyword_weight = 1.0
    w_vec, w_lex = ev.vector_weight, ev.keyword_weight
    pending: list[tuple[Ranked, str | None, float]] = []
    best_v: dict[str | None, float] = {}  # per file: the best vector z-score among its candidates
    for cid, r in ranked.items():
        path = paths.get(cid)
        r.file_kw_score = file_kw.get(path) if path else None
        lex = lex_of[cid]
        v = (r.cosine - v_mu) / v_sd if use_vec and r.cosine is not None else 0.0
        if cid in ev.raised:  # both lists hold it up: its own keyword weight (fusion.candidate_weights)
            r.keyword_weight = ev.raised[cid]
        r.fused = r.score = w_vec * v + ev.raised.get(cid, w_lex) * lex
        if use_vec and r.cosine is not None:
            best_v[path] = max(best_v.get(path, v), v)
        if use_vec and use_lex and r.cosine is None and r.kw_rank is not None:
            pending.append((r, path, lex))
        r.exact = exact.get(cid)
    for r, path, lex in pending:
        # text with no vector yet (written since the last quiet period) has no cosine to lose: its keyword score
        # stands for both, or a word just written would rank below merely similar passages; nor below the other
        # passages of its own file (in a short file they share its keyword score): it is given their best cosine
        r.fused = r.score = max(lex, w_vec * best_v.get(path, lex) + w_lex * lex)
    out = sorted(ranked.values(), key=lambda r: (r.exact is None, -r.score))
    if short and vec:
        # a short file's chunks that neither list found came in on its whole-file keyword score: its best one
        # speaks for the file, the others took result slots with no evidence of their own (four chunks of a
        # 967-byte Abilities.md above the Death-and-Dying page, keyword and vector rank none). A file's rank is its
        # best chunk's, so no file moves.
        seen: set[str] = set()
        kept = []
        for r in out:
            path = paths.get(r.chunk_id)
            if path in short and r.kw_rank is None and r.vec_rank is None and r.exact is None:
                if path in seen:
                    continue
                seen.add(path)
            kept.append(r)
        out = kept
    return out, ev  # (the rerank stage, retrieval/rerank.py, reorders the live candidates in run_search)


def _exact_matches(project: ProjectView, query: str, flt: ChunkFilter) -> dict[int, str]:
    """Chunks whose heading is the query, or the first chunk of a file whose name or alias is the query; else the
    first chunk of a file named by a phrase the query quotes (`how does the "escalation die" work`)."""
    text = " ".join(query.strip().strip('"').split())
    if not text or len(text) > 120 or len(text.split()) > 8:
        return _quoted_entities(project, query, flt)
    out = {cid: "heading" for cid in project.store.chunks_with_heading(text, flt)}
    if not out:
        out = _name_heading_matches(project, text, flt)
    for cid in project.store.entity_chunks(text, flt):
        out.setdefault(cid, "entity")
    return out or _quoted_entities(project, query, flt)


def _quoted_entities(project: ProjectView, query: str, flt: ChunkFilter) -> dict[int, str]:
    """A quoted phrase that is a file's entity name or alias is a name the user chose to look up: that page goes
    first, as for a query that is the name alone (its words alone spread over every passage that mentions it:
    `how does the "escalation die" work` ranked a monster whose power "does not work" when the escalation die is
    6+ above the rules page named Escalation Die). Headings are not matched so: a quoted "Introduction" is no
    one section."""
    out: dict[int, str] = {}
    for phrase in quoted_phrases(query)[:MAX_QUOTED_NAMES]:
        name = " ".join(phrase.split())
        if len(name) <= 120 and len(name.split()) <= 8 and name != " ".join(query.strip().strip('"').split()):
            for cid in project.store.entity_chunks(name, flt):
                out.setdefault(cid, "entity")
    return out


def _name_heading_matches(project: ProjectView, query: str, flt: ChunkFilter) -> dict[int, str]:
    """Identifier hook (issue 31): a query that is one name in code (`fs.createReadStream`, `setTimeout`) puts the
    sections whose heading names it (`fs.createReadStream(path[, options])`) before those that mention it."""
    name = query_name(query) or _joined_name(project, query)
    return {cid: "heading" for cid in project.store.chunks_with_name_heading(name, flt)} if name else {}


def _joined_name(project: ProjectView, query: str) -> str | None:
    """A query of 2-4 plain words read as one name ("create read stream" -> `createreadstream`), when the keyword
    index holds that word (one vocabulary lookup: a query whose words join to no indexed word costs no scan)."""
    words = WORD_RE.findall(query)
    if not 2 <= len(words) <= 4 or not all(w.isascii() and w.isalpha() for w in words):
        return None
    if any(w.lower() in STOPWORDS for w in words):
        return None
    joined = "".join(w.lower() for w in words)
    df, _ = project.store.term_doc_freqs([match_key(joined)])
    return joined if df.get(match_key(joined)) else None


def settings_gate(cs: ContextSettings) -> Callable[[str], bool] | None:
    """`.context_settings.json`'s test of a path (ContextSettings.excludes), or None when it excludes nothing."""
    return cs.excludes if cs.exclude_all or cs.has("exclude") else None


def live_rows(
    project: ProjectView,
    ranked: list[Ranked],
    want: int,
    check: bool = False,
    known: Mapping[int, StoredChunk] | None = None,
    horizon: int | None = None,
    excluded: Callable[[str], bool] | None = None,
) -> tuple[list[tuple[StoredChunk, Ranked]], set[str], set[str]]:
    """The first `want` ranked chunks whose files still exist, with their rows; the paths found missing; and
    (with `check`) the paths whose file changed on disk since it was indexed (their lines may have moved).
    `known`: rows this search already read (fusion.Evidence.rows), not read again. `horizon` (a spoiler
    horizon, maxChapter): passages in a section headed for a later chapter (a profile's `## Chapter 21`) are left
    out, as the hover leaves them out (the filter itself goes by each file's chapter only). `excluded`: a test of
    paths (settings_gate) that leaves out files the filter's path list could not name yet."""
    if horizon is not None:
        from .entities import past_horizon
    page = want + LIVE_ROWS_MARGIN
    rows: dict[int, StoredChunk] = {}
    out: list[tuple[StoredChunk, Ranked]] = []
    missing: set[str] = set()
    stale: set[str] = set()
    checked: dict[str, bool] = {}
    shut: dict[str, bool] = {}  # (excluded, per path)
    for i, r in enumerate(ranked):
        if len(out) >= want:
            break
        if i % page == 0:  # rows are fetched a page at a time, as far down the list as needed
            ids = [x.chunk_id for x in ranked[i : i + page]]
            fetched = {c: known[c] for c in ids if c in known} if known else {}
            if unread := [c for c in ids if c not in fetched]:
                fetched.update(project.store.chunks_by_id(unread))
            rows.update(fetched)
            if check:
                new = {row.path for row in fetched.values()} - checked.keys()
                stale.update(project.stale_paths(new))
        row = rows.get(r.chunk_id)
        if row is None or (horizon is not None and past_horizon(row.heading_path, horizon)):
            continue
        path = row.path
        if excluded is not None:
            if path not in shut:
                shut[path] = excluded(path)
            if shut[path]:
                continue
        if path not in checked:  # gone, or made unreadable (a chmod changes no mtime): not served
            full = os.path.join(os.fspath(project.root), path)
            checked[path] = os.path.isfile(full) and os.access(full, os.R_OK)
            if not checked[path]:
                missing.add(path)
                project_missing(project, path)
        if not checked[path] or path in stale:
            continue
        out.append((row, r))
    return out, missing, stale


def fold_front_matter(
    project: ProjectView, pairs: list[tuple[StoredChunk, Ranked]], horizon: int | None = None
) -> list[tuple[StoredChunk, Ranked]]:
    """A frontmatter chunk that only labels its file (markdown.terms.is_label_frontmatter: names the path and
    heading already give, and tags) is evidence for the file, not a passage beside its text: `aliases: Flee` /
    `tags: 13A/Combat/Rules/Special-Actions/Flee` took the second result under the Flee page itself (in the 13th
    Age dev questions' top 10, 63 of 66 frontmatter results repeated a file above them). Below one of its file's
    passages it is dropped; above them it gives its place to the file's best passage, moved up, or else to the
    file's first passage, as an exact name match does (store.entity_chunks). Any other frontmatter (`eyes: green`,
    aliases the page does not bear, a `description:`) is a passage like the others. No file's rank changes: it is
    the rank of its first result."""
    if not any(row.kind == "frontmatter" for row, _ in pairs):
        return pairs
    first_body: dict[str, int] = {}
    for i, (row, _r) in enumerate(pairs):
        if row.kind != "frontmatter":
            first_body.setdefault(row.path, i)
    moved: set[int] = set()
    out: list[tuple[StoredChunk, Ranked]] = []
    for i, (row, r) in enumerate(pairs):
        if i in moved:
            continue
        if row.kind != "frontmatter":
            out.append((row, r))
            continue
        j = first_body.get(row.path)
        lead = pairs[j][0] if j is not None else _lead_passage(project, row.path)
        if lead is None or not is_label_frontmatter(row.text or "", row.path, lead.heading_path):
            out.append((row, r))
        elif j is not None and j < i:
            continue  # its file's own text ranks above it: the label adds nothing
        elif j is not None:  # the file's best passage, moved up into the place its label earned
            body, br = pairs[j]
            br.fused, br.score = max(br.fused, r.fused), max(br.score, r.score)
            if r.cosine is not None and (br.cosine is None or r.cosine > br.cosine):
                br.cosine = r.cosine
            br.exact = br.exact or r.exact
            br.labels = row.text
            moved.add(j)
            out.append((body, br))
        elif horizon is not None and _past(lead, horizon):
            out.append((row, r))
        else:
            out.append((lead, dataclasses.replace(r, chunk_id=lead.id, labels=row.text)))
    return out


def _lead_passage(project: ProjectView, path: str) -> StoredChunk | None:
    """The first chunk of a file's text (after its frontmatter), or None when it has none."""
    return next((c for c in project.store.chunks_for_path(path) if c.kind != "frontmatter"), None)


def _past(chunk: StoredChunk, horizon: int) -> bool:
    from .entities import past_horizon

    return past_horizon(chunk.heading_path, horizon)


def _score(
    project: ProjectView,
    query: str,
    pairs: list[tuple[StoredChunk, Ranked]],
    vectors: bool,
    evidence: Evidence | None = None,
) -> float:
    """Set each result's confidence and final 0..1 score (in place); return the query's confidence. `evidence`:
    the coverages fusion already computed under the same idf are used again (the top keyword hits')."""
    if not pairs:
        return 0.0
    cal = vector_calibration(project) if vectors else None
    idf = query_idf(project, query, FUNCTION_WORDS)
    known = vocabulary_share(project, query) if cal is not None else 1.0
    for (_row, r), coverage in zip(pairs, _coverages(idf, pairs, evidence), strict=True):
        if r.exact:
            conf = 1.0
        elif cal is not None and r.cosine is not None:
            conf = combine(known * ramp(r.cosine, cal.low, cal.high), ramp(coverage, LEXICAL_LOW, LEXICAL_HIGH))
        else:
            conf = ramp(coverage, KEYWORD_ONLY_LOW, KEYWORD_ONLY_HIGH)  # (keywords are all there is)
        r.confidence = conf
    confidence = max(r.confidence for _, r in pairs[:CONFIDENCE_DEPTH])
    top = max(r.fused for _, r in pairs)
    # reranked candidates: how far each trails the best in rerank score, z-normalised over them (retrieval/rerank.py)
    _, rr_sd = _stats([r.rerank for _, r in pairs if r.rerank is not None])
    rr_top = max((r.rerank for _, r in pairs if r.rerank is not None), default=0.0)
    running = 1.0
    for _, r in pairs:
        if r.exact:
            rel = 1.0
        elif r.rerank is not None:
            rel = math.exp(-(rr_top - r.rerank) / rr_sd / REL_SCALE)
        else:
            rel = math.exp(-(top - r.fused) / REL_SCALE)
        running = min(running, rel)
        r.score = confidence * running
    return confidence


def _coverages(
    idf: dict[str, float], pairs: list[tuple[StoredChunk, Ranked]], evidence: Evidence | None
) -> list[float]:
    """confidence.coverages of each pair's chunk words (with its file's labels where they led to it:
    fold_front_matter); those fusion computed under this same idf not again."""
    done = evidence.chunk_coverage if evidence is not None and evidence.idf == idf else {}
    if labelled := {r.chunk_id for _, r in pairs if r.labels}:
        done = {cid: c for cid, c in done.items() if cid not in labelled}
    todo = [
        (r.chunk_id, f"{chunk_words(row)} {r.labels}" if r.labels else chunk_words(row))
        for row, r in pairs
        if r.chunk_id not in done
    ]
    got = dict(zip((c for c, _ in todo), coverages(idf, [t for _, t in todo]), strict=True))
    return [done[r.chunk_id] if r.chunk_id in done else got[r.chunk_id] for _, r in pairs]


def project_missing(project: ProjectView, path: str) -> None:
    """A result's file is gone from disk: drop it and queue it for deindex. On a shared store, only a file this
    copy wrote last (storage.base.gone_here): one another copy wrote may be its new note, left out of this copy's
    results only (the search excludes it either way)."""
    here = getattr(project.store, "copy_id", None)
    if here is not None and not all(st.mine(here) for st in project.store.file_states_for([path]).values()):
        return
    hook = getattr(project, "on_missing_file", None)
    if hook is not None:
        hook(path)
    elif not project.store.readonly:
        project.store.delete_file(path)


def result_dict(
    project: ProjectView,
    row: StoredChunk,
    score: float,
    terms: list[str],
    r: Ranked | None = None,
    explain: bool = False,
) -> dict[str, Any]:
    matched = []
    confidence = score
    if r is not None:
        confidence = r.confidence
        if r.vec_rank is not None:
            matched.append("vector")
        if r.kw_rank is not None or r.file_kw_score is not None or r.exact:
            matched.append("keyword")  # the chunk, its whole (short) file, or its heading matched the words
    res = {
        "filePath": row.path,
        "uri": (project.root / row.path).as_uri(),
        "sectionHeading": row.section_heading,
        "headingPath": row.heading_path or "",
        "startLine": row.start_line,
        "endLine": row.end_line,
        "range": {
            "start": {"line": row.start_line - 1, "character": 0},
            "end": {"line": row.end_line, "character": 0},
        },
        "snippet": make_snippet(row.text or "", terms),
        "preview": row.preview,
        "score": round(float(score), 4),
        "confidence": round(float(confidence), 4),
        "tokenCount": row.token_count,
        "fileType": row.file_type,
        "entityType": row.entity_type,
        "entityName": row.entity_name,
        "bookId": row.book_id,
        "chapterId": row.chapter_id,
        "matchedBy": matched,
    }
    if r is not None and r.rerank is not None:
        res["rerankScore"] = round(float(r.rerank), 4)  # the reranker's own score (its scale: retrieval/rerank.py)
    if explain and r is not None:
        res["explain"] = {
            "keywordRank": r.kw_rank,
            "vectorRank": r.vec_rank,
            # (as FTS5 reports BM25: lower is better; the keyword index scores the other way round)
            "bm25": None if r.kw_score is None else -r.kw_score,
            "fileBm25": None if r.file_kw_score is None else -r.file_kw_score,
            "cosine": r.cosine,
            "exactMatch": r.exact,
            "fused": round(float(r.fused), 4),
            "confidence": round(float(r.confidence), 4),
            "fusedScore": round(float(score), 4),
        }
        if r.keyword_weight is not None:  # raised above the query's (fusion.candidate_weights)
            res["explain"]["keywordWeight"] = round(float(r.keyword_weight), 4)
        if r.rerank is not None:  # reranked (retrieval/rerank.py): the reranker's score
            res["explain"]["rerankScore"] = round(float(r.rerank), 4)
    return res

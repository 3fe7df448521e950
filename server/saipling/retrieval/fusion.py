"""Hybrid fusion that follows the evidence a query has: how much of the query's rare words the keyword side's best
hits hold, and whether the two lists agree (README "Fusion that follows the evidence"). retrieval/search.py unions and
z-normalises the candidates; this module decides how much each side counts for this query."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .confidence import chunk_words, coverages, query_idf, ramp

if TYPE_CHECKING:
    from .project_view import ProjectView

# Fusion (chosen on the union of the dev sets and SciFact train; figures in benchmarks/README.md rows F1-F2, F8)
FUSION_VECTOR_WEIGHT = 0.6  # weight of the vector z-score in hybrid mode
KEYWORD_WEIGHT = 0.5  # weight of the keyword z-score when its evidence is whole (`Evidence`)
# The keyword side's weight follows the evidence it has (`Evidence`): two signals, each ramped between its bounds
# and added up as independent evidence (trust = 1 - (1 - c)(1 - a)): c = ramp(coverage, KEYWORD_COVERAGE), the best
# idf-weighted share of the query's terms among its top KEYWORD_EVIDENCE_DEPTH hits; a = ramp(agreement,
# AGREEMENT_RAMP), the share of its top AGREEMENT_DEPTH files that the vector side ranks in its top AGREEMENT_REACH
# files. Either one alone can give the keyword side its whole weight: keyword hits the vector side vouches for are
# not noise, even when they hold only part of the query's words (a scientific claim against the abstract that
# answers it, in other terms); a list that neither covers the query nor agrees with the vectors (a question in a
# reader's own words) fades out.
KEYWORD_COVERAGE = (0.3, 0.7)
# agreement counts from more than half of the keyword side's top files (3 of 5: 0.2, 4: 0.6, 5: 1.0). From 0.4 (3 of
# 5: 0.33) a fiction paraphrase whose keyword hits were chapters on the same subject lost its evidence chapter from
# the top 10 that the vectors alone kept, on a freshly built index; SciFact train 0.7551 -> 0.7552, no dev-set cell
# lower (benchmarks/README.md row F15)
AGREEMENT_RAMP = (0.5, 1.0)
KEYWORD_EVIDENCE_DEPTH = 10  # the keyword hits whose coverage counts
AGREEMENT_DEPTH = 5
AGREEMENT_REACH = 10
# Where both lists hold one candidate up, its keyword part counts in full, whatever the query's list as a whole
# looks like (`candidate_weights`): its keyword weight is raised from the query's toward KEYWORD_WEIGHT by
# ramp(its coverage / the best candidate's, CANDIDATE_RELATIVE) x ramp(its vector z-score, CANDIDATE_VECTOR_Z).
# A scientific claim's answer holds most of the claim's rare words AND is well above the vector pool; the best
# covered passage of a reader's question in other words is far down the vector list (benchmarks/README.md F13-F14)
CANDIDATE_RELATIVE = (0.5, 1.0)
CANDIDATE_VECTOR_Z = (1.0, 2.0)


@dataclass
class Evidence:
    """What a hybrid query's two lists say about it, and the weights of its fusion that follow.

    The keyword side counts in full when its best hits hold the query's rare words, or when its top files are
    among the vector side's (`keyword_trust`): a long question in a reader's words spreads BM25 over many passages
    that share its common words, and z-normalising that list made the noise look as sure as the vectors'
    evidence."""

    coverage: float = 0.0  # best idf-weighted share of the query's terms among the top keyword hits
    agreement: float = 0.0  # share of the top keyword files that the vector side ranks high too
    keyword_weight: float = 0.0
    vector_weight: float = 0.0
    # chunk id -> its own keyword weight, where both lists hold it up (`candidate_weights`); others: keyword_weight
    raised: dict[int, float] = field(default_factory=dict)
    # what weighing read, for the search to use again instead of reading and scoring it twice: the chunk rows
    # (retrieval.search.live_rows), and each chunk's own coverage (`chunk_words`) under the query's idf `idf`
    rows: dict[int, Any] = field(default_factory=dict, repr=False)
    idf: dict[str, float] | None = field(default=None, repr=False)
    chunk_coverage: dict[int, float] = field(default_factory=dict, repr=False)

    def weight_of(self, chunk_id: int) -> float:
        """The keyword weight of one candidate."""
        return self.raised.get(chunk_id, self.keyword_weight)

    def as_dict(self) -> dict[str, float]:
        return {
            "keywordCoverage": round(self.coverage, 4),
            "agreement": round(self.agreement, 4),
            "keywordWeight": round(self.keyword_weight, 4),
            "vectorWeight": round(self.vector_weight, 4),
            "raisedCandidates": len(self.raised),
        }


def weigh(
    project: ProjectView,
    query: str,
    kw: list[tuple[int, float]],
    ranked: Mapping[int, Any],  # chunk id -> a candidate with its `cosine` (retrieval.search.Ranked)
    paths: Mapping[int, str | None],
    lex_of: Mapping[int, float],
    short_top: Sequence[str] = (),
    vector_weight: float | None = None,
    vector_z: Mapping[int, float] | None = None,
    short: Collection[str] = (),
) -> Evidence:
    """The evidence of a hybrid query's lists (see `Evidence`); `short_top`: the short files among the top
    whole-file keyword hits, whose coverage counts over the whole file (its words may sit in different chunks).
    `vector_z`: the vector z-scores of the candidates above CANDIDATE_VECTOR_Z's low end, `short`: every short
    file among the whole-file keyword hits (for `candidate_weights`)."""
    w_vec = FUSION_VECTOR_WEIGHT if vector_weight is None else vector_weight
    ev = Evidence(vector_weight=w_vec)
    top = [cid for cid, _ in kw[:KEYWORD_EVIDENCE_DEPTH]]
    wanted = set(short_top)
    in_short = [cid for cid in ranked if paths.get(cid) in wanted]
    idf: dict[str, float] | None = None
    rows: dict[int, Any] = {}
    if top or in_short:
        idf = query_idf(project, query)
        rows = project.store.chunks_by_id(list(dict.fromkeys(top + in_short)))
        texts: dict[str, list[str]] = {}
        for cid in in_short:
            if (row := rows.get(cid)) is not None:
                texts.setdefault(row.path, []).append(f"{row.text or ''} {row.heading_path or ''}")
        own = [cid for cid in top if cid in rows]
        found = coverages(idf, [chunk_words(rows[cid]) for cid in own] + [" ".join(t) for t in texts.values()])
        ev.coverage = max(found, default=0.0)
        ev.rows, ev.idf, ev.chunk_coverage = rows, idf, dict(zip(own, found, strict=False))
    kw_files = _top_files(sorted(ranked, key=lambda c: -lex_of[c]), paths, AGREEMENT_DEPTH)
    with_cos = [c for c, r in ranked.items() if r.cosine is not None]
    vec_files = _top_files(sorted(with_cos, key=lambda c: -(ranked[c].cosine or 0.0)), paths, AGREEMENT_REACH)
    if kw_files:
        ev.agreement = len(set(kw_files) & set(vec_files)) / len(kw_files)
    ev.keyword_weight = KEYWORD_WEIGHT * keyword_trust(ev.coverage, ev.agreement)
    if vector_z and ev.keyword_weight < KEYWORD_WEIGHT:
        idf = query_idf(project, query) if idf is None else idf
        ev.raised = candidate_weights(project, idf, ev, vector_z, ranked, paths, short, ev.rows)
    return ev


def candidate_weights(
    project: ProjectView,
    idf: Mapping[str, float],
    ev: Evidence,
    vector_z: Mapping[int, float],
    ranked: Collection[int],
    paths: Mapping[int, str | None],
    short: Collection[str],
    rows: Mapping[int, Any] | None = None,
) -> dict[int, float]:
    """The keyword weight of each candidate that both lists hold up (see CANDIDATE_RELATIVE): raised from the
    query's toward KEYWORD_WEIGHT by ramp(its coverage / the best, ...) x ramp(its vector z, ...).

    Its coverage: a short file's over the whole file (its keyword part is the whole-file score), else its chunk's.
    Only the candidates above the vector z ramp's low end are read (a few); the best coverage is the larger of
    theirs and the top keyword hits' (`Evidence.coverage`): the same figures as the best over every candidate on
    SciFact train and the dev sets (benchmarks/bench_term_replay.py, row F14)."""
    lo_z, hi_z = CANDIDATE_VECTOR_Z
    gated = {cid: z for cid, z in vector_z.items() if z > lo_z}
    if not gated or sum(idf.values()) <= 0:
        return {}
    m = candidate_coverages(project, idf, list(gated), ranked, paths, short, rows)
    best = max([ev.coverage, *m.values()])
    if best <= 0:
        return {}
    out: dict[int, float] = {}
    for cid, z in gated.items():
        lift = ramp(m.get(cid, 0.0) / best, *CANDIDATE_RELATIVE) * ramp(z, lo_z, hi_z)
        if lift > 0:
            out[cid] = ev.keyword_weight + (KEYWORD_WEIGHT - ev.keyword_weight) * lift
    return out


def candidate_coverages(
    project: ProjectView,
    idf: Mapping[str, float],
    cids: list[int],
    ranked: Collection[int],
    paths: Mapping[int, str | None],
    short: Collection[str],
    known: Mapping[int, Any] | None = None,
) -> dict[int, float]:
    """Each candidate's idf-weighted share of the query's terms: a short file's candidate over all of the file's
    candidates' text (every chunk of a short keyword hit is a candidate), another over its own chunk's. `known`:
    chunk rows already read (`weigh`'s top keyword hits): only the others are read."""
    files = {paths.get(cid) for cid in cids} & set(short)
    members: dict[str, list[int]] = {}
    if files:
        for cid in ranked:
            if (p := paths.get(cid)) in files:
                members.setdefault(p, []).append(cid)  # type: ignore[arg-type]
    wanted = dict.fromkeys([*cids, *(c for ids in members.values() for c in ids)])
    rows = {c: known[c] for c in wanted if c in known} if known else {}
    if missing := [c for c in wanted if c not in rows]:
        read = project.store.chunks_by_id(missing)
        rows.update(read)
        if isinstance(known, dict):  # (kept with the evidence's rows: the search reads none of them again)
            known.update(read)
    whole = {p: " ".join(chunk_words(rows[c]) for c in ids if c in rows) for p, ids in members.items()}
    text_of: dict[int | str, str] = {}  # (a short file's text is read once, however many of its chunks rank)
    key_of: dict[int, int | str] = {}
    for cid in cids:
        p = paths.get(cid)
        if p is not None and p in whole:
            key_of[cid] = p
            text_of.setdefault(p, whole[p])
        elif cid in rows:
            key_of[cid] = cid
            text_of[cid] = chunk_words(rows[cid])
    got = dict(zip(text_of, coverages(idf, list(text_of.values())), strict=True))
    return {cid: got[key] for cid, key in key_of.items()}


def keyword_trust(coverage: float, agreement: float) -> float:
    """How far the keyword side's evidence goes (0..1): its coverage of the query and its agreement with the
    vector side, each ramped, combined as independent evidence (either alone can make it whole)."""
    by_words = ramp(coverage, *KEYWORD_COVERAGE)
    by_agreement = ramp(agreement, *AGREEMENT_RAMP)
    return 1.0 - (1.0 - by_words) * (1.0 - by_agreement)


def _top_files(order: list[int], paths: Mapping[int, str | None], n: int) -> list[str]:
    out: list[str] = []
    for cid in order:
        p = paths.get(cid)
        if p is not None and p not in out:
            out.append(p)
            if len(out) >= n:
                break
    return out

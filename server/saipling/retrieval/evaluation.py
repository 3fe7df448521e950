"""Retrieval evaluation on BEIR-format datasets: nDCG@10, recall@10/100, MRR."""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InvalidRequest

log = logging.getLogger(__name__)


@dataclass
class BeirDataset:
    corpus: dict[str, tuple[str, str]]  # id -> (title, text)
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]] = field(default_factory=dict)


def load_beir(folder: Path, split: str) -> BeirDataset:
    """Read corpus.jsonl, queries.jsonl, qrels/<split>.tsv; InvalidRequest for a missing split or bad file."""
    folder = Path(folder)
    qpath = folder / "qrels" / f"{split}.tsv"
    if not qpath.is_file():
        raise InvalidRequest("split", f"no qrels for split {split!r}: {qpath}")
    docs = _jsonl(folder / "corpus.jsonl")
    corpus = {str(d["_id"]): (d.get("title") or "", d.get("text") or "") for d in docs}
    queries = {str(d["_id"]): str(d.get("text") or "") for d in _jsonl(folder / "queries.jsonl")}
    qrels: dict[str, dict[str, int]] = {}
    with open(qpath, encoding="utf-8-sig", newline="") as fh:
        for n, line in enumerate(fh):
            parts = line.rstrip("\r\n").split("\t")
            if len(parts) < 3 or (n == 0 and not parts[-1].strip().lstrip("-").isdigit()):
                continue  # header
            try:
                qid, did, score = parts[0], parts[1], int(float(parts[-1]))
            except ValueError:
                message = f"{qpath.name} line {n + 1}: score {parts[-1]!r} is not a number"
                raise InvalidRequest("dataset", message) from None
            if score > 0:
                qrels.setdefault(qid, {})[did] = score
    return BeirDataset(corpus, {q: t for q, t in queries.items() if q in qrels}, qrels)


def _jsonl(path: Path) -> Iterator[dict]:
    if not path.is_file():
        raise InvalidRequest("dataset", f"{path.name} is missing from {path.parent}")
    with open(path, encoding="utf-8-sig") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                if not isinstance(d, dict) or "_id" not in d:
                    raise ValueError("expected an object with an _id")
            except ValueError as exc:
                raise InvalidRequest("dataset", f"{path.name} line {n}: {exc}") from None
            yield d


def ndcg_at(ranked: list[str], rels: Mapping[str, int], k: int = 10) -> float:
    """nDCG@k as trec_eval/pytrec_eval (so BEIR) compute it: gain = relevance level, discount log2(rank+1)."""
    dcg = sum(rels.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted(rels.values(), reverse=True)[:k]
    idcg = sum(r / math.log2(i + 2) for i, r in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def recall_at(ranked: list[str], rels: Mapping[str, int], k: int) -> float:
    return len(set(ranked[:k]) & set(rels)) / len(rels) if rels else 0.0


def mrr(ranked: list[str], rels: Mapping[str, int]) -> float:
    return next((1.0 / (i + 1) for i, d in enumerate(ranked) if d in rels), 0.0)


def score_run(run: Mapping[str, list[str]], qrels: Mapping[str, Mapping[str, int]]) -> dict[str, float]:
    qids = [q for q in qrels if q in run]
    n = len(qids) or 1
    return {
        "queries": len(qids),
        "ndcg@10": sum(ndcg_at(run[q], qrels[q]) for q in qids) / n,
        "recall@10": sum(recall_at(run[q], qrels[q], 10) for q in qids) / n,
        "recall@100": sum(recall_at(run[q], qrels[q], 100) for q in qids) / n,
        "mrr": sum(mrr(run[q], qrels[q]) for q in qids) / n,
    }


EVAL_MARKER = ".saipling-eval"  # in a workdir this command created: only such a folder is written into


def materialise_corpus(ds: BeirDataset, workdir: Path) -> Path:
    """Write each document as `<workdir>/docs/<id>.md` (render_document: title + blank line + text); unchanged files
    are kept.

    The workdir must be new, empty, or one made by an earlier eval (it holds EVAL_MARKER): eval never writes
    into a folder of the user's own files."""
    workdir = Path(workdir)
    marker = workdir / EVAL_MARKER
    if workdir.is_dir() and not marker.is_file() and any(workdir.iterdir()):
        raise InvalidRequest(
            "workdir",
            f"{workdir} already holds files that saipling eval did not write: choose a new or empty folder",
        )
    docs = workdir / "docs"
    docs.mkdir(parents=True, exist_ok=True)
    if not marker.is_file():
        marker.write_text("a BEIR corpus written by `saipling eval`; safe to delete\n", encoding="utf-8")
    for did, (title, text) in ds.corpus.items():
        path = docs / f"{doc_stem(did)}.md"
        body = render_document(title, text)
        if not path.is_file() or path.read_bytes() != body.encode("utf-8"):
            path.write_text(body, encoding="utf-8")
    return Path(workdir)


def render_document(title: str, text: str) -> str:
    """A BEIR document as markdown: its title as a first paragraph, then a blank line and the text.

    Not a titled page (a frontmatter `title:` or a `# title`): then every chunk of an abstract carries the title
    as its heading path (markdown.chunker.front_matter_title), and SciFact train fell from 0.7496 to 0.7409 with the
    local model (benchmarks/README.md row F10): the title takes a fifth of each 128-word-piece chunk and pulls every
    chunk of a document toward the same words. As a first paragraph it is in the first chunk only."""
    return f"{title}\n\n{text}\n" if title else f"{text}\n"


def doc_stem(did: str) -> str:
    """A file name (without .md) for a document id; ids that are not plain ASCII names get a hash suffix."""
    safe = "".join(c if c.isascii() and (c.isalnum() or c in "-_") else "_" for c in did)
    if safe == did and 0 < len(safe) <= 120:
        return safe
    return f"{safe[:80]}-{hashlib.sha1(did.encode('utf-8')).hexdigest()[:12]}"


def doc_ranking(results: list[dict], ids: Mapping[str, str] | None = None) -> list[str]:
    """Chunk results -> document ids in order of their best chunk.

    `ids` maps file stems back to document ids; files it does not know (left in the workdir by an earlier
    corpus) are ignored.
    """
    seen: dict[str, None] = {}
    for r in results:
        stem = os.path.splitext(os.path.basename(r["filePath"]))[0]
        if ids is None:
            seen.setdefault(stem, None)
        elif stem in ids:
            seen.setdefault(ids[stem], None)
    return list(seen)


def run_eval(search: Callable[[str], list[dict]], ds: BeirDataset) -> dict[str, float]:
    ids = {doc_stem(did): did for did in ds.corpus}
    run = {qid: doc_ranking(search(text), ids) for qid, text in ds.queries.items()}
    return score_run(run, ds.qrels)

"""Retrieval evaluation on BEIR-format datasets: nDCG@10, recall@10/100, MRR."""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)


@dataclass
class BeirDataset:
    corpus: dict[str, tuple[str, str]]  # id -> (title, text)
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]] = field(default_factory=dict)


def load_beir(folder: Path, split: str) -> BeirDataset:
    folder = Path(folder)
    corpus: dict[str, tuple[str, str]] = {}
    with open(folder / "corpus.jsonl", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                d = json.loads(line)
                corpus[str(d["_id"])] = (d.get("title") or "", d.get("text") or "")
    queries: dict[str, str] = {}
    with open(folder / "queries.jsonl", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                d = json.loads(line)
                queries[str(d["_id"])] = d["text"]
    qrels: dict[str, dict[str, int]] = {}
    qpath = folder / "qrels" / f"{split}.tsv"
    if not qpath.is_file():
        raise FileNotFoundError(f"no qrels for split {split!r}: {qpath}")
    with open(qpath, encoding="utf-8", newline="") as fh:
        for n, line in enumerate(fh):
            parts = line.rstrip("\r\n").split("\t")
            if len(parts) < 3 or (n == 0 and not parts[-1].strip().lstrip("-").isdigit()):
                continue  # header
            qid, did, score = parts[0], parts[1], int(parts[-1])
            if score > 0:
                qrels.setdefault(qid, {})[did] = score
    return BeirDataset(corpus, {q: t for q, t in queries.items() if q in qrels}, qrels)


def ndcg_at(ranked: list[str], rels: Mapping[str, int], k: int = 10) -> float:
    dcg = sum((2 ** rels.get(d, 0) - 1) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted(rels.values(), reverse=True)[:k]
    idcg = sum((2**r - 1) / math.log2(i + 2) for i, r in enumerate(ideal))
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


def materialise_corpus(ds: BeirDataset, workdir: Path) -> Path:
    """Write each document as `<workdir>/docs/<id>.md` (title + blank line + text); unchanged files are kept."""
    docs = Path(workdir) / "docs"
    docs.mkdir(parents=True, exist_ok=True)
    for did, (title, text) in ds.corpus.items():
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in did)
        path = docs / f"{safe}.md"
        body = f"{title}\n\n{text}\n" if title else f"{text}\n"
        if not path.is_file() or path.stat().st_size != len(body.encode("utf-8")):
            path.write_text(body, encoding="utf-8")
    return Path(workdir)


def doc_ranking(results: list[dict]) -> list[str]:
    """Chunk results -> document ids in order of their best chunk."""
    seen: dict[str, None] = {}
    for r in results:
        seen.setdefault(os.path.splitext(os.path.basename(r["filePath"]))[0], None)
    return list(seen)


def run_eval(search: Callable[[str], list[dict]], ds: BeirDataset) -> dict[str, float]:
    run = {qid: doc_ranking(search(text)) for qid, text in ds.queries.items()}
    return score_run(run, ds.qrels)

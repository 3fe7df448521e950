"""The dev sets (benchmarks/devsets/*.jsonl: fiction, the Node.js docs, 13th Age, their `-blind` sets, pip-blind): their
shape, and, when the corpora are present, that every evidence line is where it says and that paraphrase queries
share no rare word with their evidence."""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from pathlib import Path

import pytest

from fixtures import FICTION_CORPUS, SRD_CORPUS

DEVSET = Path(__file__).resolve().parents[1] / "benchmarks" / "devsets" / "fiction.jsonl"
# the fiction sets and the fewest queries of a kind each has (the blind one: written without seeing a search)
FICTION_SETS = {"fiction": 20, "fiction-blind": 15}


def _rows(name: str) -> list[dict]:
    path = DEVSET.parent / f"{name}.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.mark.parametrize("name", sorted(FICTION_SETS))
def test_devset_shape(name: str) -> None:
    rows = _rows(name)
    assert len(rows) >= 3 * FICTION_SETS[name]
    kinds = Counter(r["kind"] for r in rows)
    assert set(kinds) == {"exact", "paraphrase", "mixed"} and min(kinds.values()) >= FICTION_SETS[name]
    assert len({r["id"] for r in rows}) == len(rows)
    assert len({r["query"].lower() for r in rows}) == len(rows)
    books = {r["file"].rsplit("/", 1)[0] for r in rows}
    authors = {r["file"].split("/", 1)[0] for r in rows}
    assert len(books) >= 20 and len(authors) >= 10  # many books and authors, not one
    for r in rows:
        assert set(r) == {"id", "kind", "query", "file", "line", "evidence"}
        assert isinstance(r["line"], int) and r["line"] >= 1 and r["file"].endswith(".md")
        assert not r["file"].startswith("/") and ".." not in r["file"].split("/")


needs_corpus = pytest.mark.skipif(not FICTION_CORPUS.is_dir(), reason="../shared fiction corpus absent")


def test_the_blind_set_asks_of_other_chapters() -> None:
    seen = {r["file"] for r in _rows("fiction")}
    blind = [r["file"] for r in _rows("fiction-blind")]
    assert blind and not seen & set(blind)


@needs_corpus
@pytest.mark.parametrize("name", sorted(FICTION_SETS))
def test_every_evidence_line_holds_its_quote(name: str) -> None:
    for r in _rows(name):
        lines = (FICTION_CORPUS / r["file"]).read_text(encoding="utf-8").split("\n")
        assert lines[r["line"] - 1].strip().startswith(r["evidence"].rstrip("…")), r["id"]


@needs_corpus
@pytest.mark.parametrize("name", sorted(FICTION_SETS))
def test_paraphrases_share_no_names_or_rare_words_with_their_evidence(name: str) -> None:
    files = sorted(FICTION_CORPUS.rglob("*.md"))
    df: Counter[str] = Counter()
    vocab = {}
    for f in files:
        words = set(re.findall(r"[a-z]+", f.read_text(encoding="utf-8").lower()))
        df.update(words)
        vocab[f.relative_to(FICTION_CORPUS).as_posix()] = words
    for r in _rows(name):
        if r["kind"] != "paraphrase":
            continue
        # names and rare words (in fewer than 40 of the 1,129 chapters) of the evidence chapter stay out
        rare = {w for w in re.findall(r"[a-z]+", r["query"].lower()) if w in vocab[r["file"]] and df[w] < 40}
        assert not rare, (r["id"], rare)


# -- the dev sets on third-party corpora (benchmarks/devsets/nodejs.jsonl, 13th-age.jsonl) ----------------------
# Debian's nodejs-doc, unpacked (benchmarks/_devsets.py APT_HINT: installing it replaces the machine's Node)
NODE_DOCS = Path(os.environ.get("SAIPLING_NODEDOCS", "/usr/share/doc/nodejs/api"))
# pip 26.3's docs/html (benchmarks/_devsets.py PIP_HINT), only when SAIPLING_PIPDOCS names it: skipped otherwise
PIP_DOCS = Path(os.environ["SAIPLING_PIPDOCS"]) if os.environ.get("SAIPLING_PIPDOCS") else None


def _node_docs() -> dict[str, str]:
    import gzip

    return {f.name[: -len(".gz")]: gzip.decompress(f.read_bytes()).decode("utf-8") for f in NODE_DOCS.glob("*.md.gz")}


def _srd_docs() -> dict[str, str]:
    return {f.relative_to(SRD_CORPUS).as_posix(): f.read_text(encoding="utf-8") for f in SRD_CORPUS.rglob("*.md")}


def _pip_docs() -> dict[str, str]:
    assert PIP_DOCS is not None
    return {f.relative_to(PIP_DOCS).as_posix(): f.read_text(encoding="utf-8") for f in PIP_DOCS.rglob("*.md")}


def _pip_docs_present() -> bool:
    """SAIPLING_PIPDOCS names pip 26.3's docs/html (the sdist's src/pip/__init__.py two folders up says so)."""
    if PIP_DOCS is None or not PIP_DOCS.is_dir():
        return False
    init = PIP_DOCS.parent.parent / "src" / "pip" / "__init__.py"
    return init.is_file() and '__version__ = "26.3"' in init.read_text(encoding="utf-8")


CORPORA = {
    "nodejs": (_node_docs, lambda: any(NODE_DOCS.glob("*.md.gz"))),
    "13th-age": (_srd_docs, SRD_CORPUS.is_dir),
    "pip": (_pip_docs, _pip_docs_present),
}
# each set: (its corpus, the fewest queries of a kind, the fewest files)
THIRD_PARTY = {
    "nodejs": ("nodejs", 15, 20),
    "13th-age": ("13th-age", 15, 20),
    "nodejs-blind": ("nodejs", 10, 15),
    "13th-age-blind": ("13th-age", 10, 20),
    "pip-blind": ("pip", 10, 30),
}


@pytest.mark.parametrize("name", sorted(THIRD_PARTY))
def test_third_party_devset_shape(name: str) -> None:
    rows = _rows(name)
    _corpus, per_kind, n_files = THIRD_PARTY[name]
    kinds = Counter(r["kind"] for r in rows)
    assert set(kinds) == {"exact", "paraphrase", "mixed"} and min(kinds.values()) >= per_kind
    assert len({r["id"] for r in rows}) == len(rows) and len({r["query"].lower() for r in rows}) == len(rows)
    assert len({r["file"] for r in rows}) >= n_files  # spread over the corpus, not one file
    for r in rows:
        assert set(r) == {"id", "kind", "query", "file", "line", "evidence"}
        assert isinstance(r["line"], int) and r["line"] >= 1 and r["file"].endswith(".md")
        assert not r["file"].startswith("/") and ".." not in r["file"].split("/")


@pytest.mark.parametrize("name", sorted(THIRD_PARTY))
def test_third_party_evidence_lines_and_paraphrase_words(name: str) -> None:
    load, present = CORPORA[THIRD_PARTY[name][0]]
    if not present():
        pytest.skip(f"the {name} corpus is absent")
    docs = load()
    df: Counter[str] = Counter()
    for text in docs.values():
        df.update(set(re.findall(r"[a-z][a-z0-9]+", text.lower())))
    for r in _rows(name):
        lines = docs[r["file"]].split("\n")
        assert lines[r["line"] - 1].strip().startswith(r["evidence"].rstrip("…")), r["id"]
        if r["kind"] == "paraphrase":
            # no word of the evidence's surroundings that fewer than 5% of the files hold (names, its own terms)
            near = set(re.findall(r"[a-z][a-z0-9]+", "\n".join(lines[max(0, r["line"] - 15) : r["line"] + 15]).lower()))
            rare = {
                w for w in re.findall(r"[a-z][a-z0-9]+", r["query"].lower()) if w in near and df[w] < 0.05 * len(docs)
            }
            assert not rare, (r["id"], rare)


@pytest.mark.parametrize("name", ["nodejs", "13th-age"])
def test_the_blind_sets_ask_mostly_of_other_files(name: str) -> None:
    # (the Node.js docs have 60 files: a few blind questions are about a file the other set asks of too)
    seen = {r["file"] for r in _rows(name)}
    blind = [r["file"] for r in _rows(f"{name}-blind")]
    assert blind and sum(f in seen for f in blind) <= 0.1 * len(blind)

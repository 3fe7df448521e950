"""The chunker's output, byte for byte, on real corpora (issue 34: the text phase made faster must index exactly
what it indexed before). A digest of every chunk of a sample of the fiction corpus and of the whole 13th Age vault
(chunk index, kind, headings, line range, hash, preview, token count, text, identifier words, and the file's
metadata) under the benchmark's limits and the defaults; the expected digests were computed with the chunker
before the speed-ups (main at 36e3492). Skips when ../shared is absent.

When the chunker's output changes ON PURPOSE (a new CHUNKER_VERSION), recompute them:
    python tests/test_chunker_identity.py
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from fixtures import FICTION_CORPUS, SRD_CORPUS
from saipling.embeddings.base import estimate_tokens
from saipling.indexing.chunk_pool import chunk_bytes
from saipling.markdown.chunker import ChunkLimits

BENCH_LIMITS = ChunkLimits(max_tokens=128, target_tokens=102, overlap_tokens=25)  # bench_scale's (a 128-piece model)
EXPECTED = {
    ("fiction", "bench"): "7e247b9ac23dd488a4be2e8a9c90ef4adef8bfd096ff928e3d4310cde760da38",  # (version 7: 2 lead-ins)
    ("fiction", "default"): "a76ad7f0bfd6098f2794781548091d52d8f843827d2bf420a5c02b697933b12b",
    ("srd", "bench"): "f5392b2d47abb2dce91db5ce5a2159f3949bbe5e0617c38c8dd26e8f36b914df",  # (version 8: wordless)
    ("srd", "default"): "f165e05f2d66117b22edd3c77d7a574b6249826e1005394ea7eb4d07d0f7e1cf",
}


def corpus_files(name: str) -> list[Path]:
    if name == "fiction":  # every 8th chapter (~140 files of 1,129): all the authors, a few seconds
        return sorted(FICTION_CORPUS.rglob("*.md"))[::8]
    return sorted(SRD_CORPUS.rglob("*.md"))


def digest(name: str, limits: ChunkLimits) -> tuple[str, int]:
    """sha256 over every file's chunks as chunk_bytes makes them (what the text phase stores), and the chunk count."""
    root = FICTION_CORPUS if name == "fiction" else SRD_CORPUS
    h = hashlib.sha256()
    n = 0
    for path in corpus_files(name):
        rel = path.relative_to(root).as_posix()
        got = chunk_bytes(rel, path.read_bytes(), limits, estimate_tokens)
        meta = got.meta
        h.update(repr((rel, got.encoding, got.skipped, meta and (meta.file_type, meta.entity_name))).encode())
        for c in got.chunks or []:
            n += 1
            fields = (
                c.chunk_index,
                c.kind,
                c.section_heading,
                c.heading_path,
                c.start_line,
                c.end_line,
                c.content_hash,
                c.preview,
                c.token_count,
                c.text,
                c.ident_words,
            )
            h.update(repr(fields).encode("utf-8", "surrogatepass"))
    return h.hexdigest(), n


@pytest.mark.parametrize("name", ["fiction", "srd"])
@pytest.mark.parametrize("limits", ["bench", "default"])
def test_chunks_are_byte_identical(name: str, limits: str) -> None:
    root = FICTION_CORPUS if name == "fiction" else SRD_CORPUS
    if not root.is_dir():
        pytest.skip(f"{root} is not present")
    got, n = digest(name, BENCH_LIMITS if limits == "bench" else ChunkLimits())
    assert n > 100  # (a corpus that chunked to nothing would match nothing)
    assert got == EXPECTED[name, limits]


if __name__ == "__main__":
    for name in ("fiction", "srd"):
        for label, lim in (("bench", BENCH_LIMITS), ("default", ChunkLimits())):
            print(name, label, *digest(name, lim))

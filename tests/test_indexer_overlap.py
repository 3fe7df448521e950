"""Embedding beside the text phase (index_embed.Overlap, `Indexer.overlap_embedding`, off by default): with an
in-process model, a run embeds the chunks of stored files while it reads and chunks the next ones. The HTTP test server stands in for the model
(`overlaps_text_phase` set on the provider object) so that the tests control it; one test runs the real
local model when it is installed."""

# ruff: noqa: F811  (the `api_server` fixture is imported, then requested as a parameter)

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from apiserver import FakeEmbeddingAPI, api_server  # noqa: F401  (fixture)
from fixtures import make_project, open_project
from test_indexer import (
    N_FILES,
    SECTIONS,
    assert_consistent,
    batched,
    many_files,
    sent_texts,
    small_text_batches,
)

ALL = N_FILES * SECTIONS


__all__ = ["small_text_batches"]  # (the autouse fixture of test_indexer: 8 files a text batch here too)


def eventually(check: Callable[[], bool], timeout: float = 30.0) -> bool:
    """True as soon as check() is; False if it never is within the timeout (not a timing assertion)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.01)
    return check()


class During:
    """A progress callback that runs `action` once, when the text phase is about to read file `n`."""

    def __init__(self, n: int, action: Callable[[], object]) -> None:
        self.n, self.action, self.results = n, action, []

    def __call__(self, p) -> None:
        if p.phase == "keywords" and p.files_done == self.n and not self.results:
            self.results.append(self.action())


def test_vectors_are_stored_while_files_are_still_read(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    root = many_files(tmp_path)
    with open_project(root, **batched(api_server)) as project:
        project.provider.overlaps_text_phase = True
        project.indexer.overlap_embedding = True
        # two text batches of 8 files are stored by file 16: the first 32 chunks can be embedded meanwhile
        during = During(16, lambda: eventually(lambda: project.store.stats()["embeddedChunks"] >= 32))
        s = project.index(progress=during)
        assert during.results == [True]
        assert s.embedded == ALL and s.degraded is None and not s.cancelled
        assert sorted(set(s.embedded_paths)) == sorted(project.store.file_states())
        texts = sent_texts(api_server)
        assert len(texts) == len(set(texts)) == ALL  # every chunk sent once
        assert_consistent(project, all_embedded=True)
        assert project.status()["unembeddedChunks"] == 0


def test_http_providers_still_embed_after_the_text_phase(
    tmp_path: Path, api_server: FakeEmbeddingAPI
) -> None:
    root = many_files(tmp_path)
    with open_project(root, **batched(api_server)) as project:
        during = During(16, lambda: api_server.count)
        s = project.index(progress=during)
        assert during.results == [0] and s.embedded == ALL


def test_cancel_while_embedding_beside_the_text_phase(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    root = many_files(tmp_path)
    cancel = threading.Event()
    with open_project(root, **batched(api_server)) as project:
        project.provider.overlaps_text_phase = True
        project.indexer.overlap_embedding = True

        def embedded_then_cancel() -> bool:
            ok = eventually(lambda: project.store.stats()["embeddedChunks"] >= 32)
            cancel.set()
            return ok

        during = During(16, embedded_then_cancel)
        s = project.index(progress=during, cancel=cancel)
        assert during.results == [True] and s.cancelled
        assert 32 <= project.store.stats()["embeddedChunks"] < ALL
        assert_consistent(project, all_embedded=False)
        first_run = sent_texts(api_server)
    api_server.requests.clear()
    with open_project(root, **batched(api_server)) as project:
        s = project.index()
        assert s.embedded == ALL - len(first_run) and not set(first_run) & set(sent_texts(api_server))
        assert_consistent(project, all_embedded=True)


def test_provider_failure_beside_the_text_phase_degrades(
    tmp_path: Path, api_server: FakeEmbeddingAPI
) -> None:
    root = many_files(tmp_path)
    api_server.fail(503, times=100)
    with open_project(root, **batched(api_server)) as project:
        project.provider.overlaps_text_phase = True
        project.indexer.overlap_embedding = True
        s = project.index()
        assert s.degraded and s.files == N_FILES and s.changed == N_FILES  # every file keyword-searchable
        assert any("keyword search only" in w for w in s.warnings)
        assert_consistent(project, all_embedded=False)
    api_server.reset()
    with open_project(root, **batched(api_server)) as project:
        assert project.index().embedded == ALL


def test_pause_stops_the_embedding_beside_the_text_phase(
    tmp_path: Path, api_server: FakeEmbeddingAPI
) -> None:
    root = many_files(tmp_path)
    with open_project(root, **batched(api_server)) as project:
        project.provider.overlaps_text_phase = True
        project.indexer.overlap_embedding = True
        during = During(16, lambda: project.pause())
        s = project.index(progress=during)
        assert s.paused and s.files == N_FILES
        before = project.store.stats()["embeddedChunks"]
        assert before < ALL
        project.resume()
        assert project.index().embedded == ALL - before
        assert_consistent(project, all_embedded=True)


def test_local_model_overlaps_and_embeds_every_chunk_once(tmp_path: Path) -> None:
    from saipling.embeddings import local_available

    if not local_available():
        pytest.skip("the local model extra is not installed")
    files = {
        f"n{f:02d}.md": f"# Note {f}\n\n"
        + "".join(f"The harbour light {f}.{i} swung over the pier. " for i in range(30))
        + "\n"
        for f in range(70)
    }  # fmt: skip (every chunk's text unique: each is embedded once)
    root = make_project(tmp_path, files)
    with open_project(root, "local", batch_size=16) as project:
        assert project.provider.overlaps_text_phase
        project.indexer.overlap_embedding = True
        during = During(66, lambda: eventually(lambda: project.store.stats()["embeddedChunks"] > 0))
        s = project.index(progress=during)
        assert during.results == [True]
        assert s.embedded == s.chunks == project.store.stats()["embeddedChunks"]
        assert_consistent(project, all_embedded=True)


def test_off_by_default(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    root = many_files(tmp_path)
    with open_project(root, **batched(api_server)) as project:
        project.provider.overlaps_text_phase = True
        during = During(16, lambda: api_server.count)
        assert project.index(progress=during).embedded == ALL and during.results == [0]

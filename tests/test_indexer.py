"""Indexing runs (SPEC 7) on real files, a real SQLite index and a real local embeddings HTTP server."""

# ruff: noqa: F811  (the `api_server` fixture is imported, then requested as a parameter)

from __future__ import annotations

import builtins
import io
import logging
import os
import pathlib
import threading
from pathlib import Path
from typing import Any

import pytest

from apiserver import FakeEmbeddingAPI, api_server, engine_options  # noqa: F401  (fixture)
from fixtures import (
    SAIPLING_MARKDOWN,
    bump_mtime,
    kw,
    make_project,
    open_project,
    saipling_project,
    words,
    write_file,
)
from saipling.markdown.chunker import embed_text_for
from saipling.project import Project

DIMS = 32


def api_opts(api: FakeEmbeddingAPI, **kw: Any) -> dict[str, Any]:
    """Settings for the OpenAI-compatible provider pointed at the test server (no fallback)."""
    return engine_options(api, DIMS, **{"fallback": "none", **kw})


def sent_texts(api: FakeEmbeddingAPI) -> list[str]:
    """Every input the server was asked to embed, in order."""
    out: list[str] = []
    for r in api.requests:
        if isinstance(r.body, dict):
            inp = r.body.get("input")
            out += [inp] if isinstance(inp, str) else list(inp or [])
    return out


def embed_texts(project: Project, path: str) -> list[str]:
    return [embed_text_for(c.heading_path or "", c.text) for c in project.store.chunks_for_path(path)]


def assert_consistent(project: Project, *, all_embedded: bool) -> None:
    """Files, chunks, FTS and vectors agree with each other."""
    store = project.store
    store.conn.execute("INSERT INTO chunks_fts(chunks_fts, rank) VALUES ('integrity-check', 1)")
    files = store._dicts("SELECT path, chunk_count FROM files")
    for f in files:
        assert len(store.chunks_for_path(f["path"])) == f["chunk_count"], f
    orphans = store._scalar("SELECT count(*) FROM chunks WHERE path NOT IN (SELECT path FROM files)")
    assert orphans == 0
    if store.has_vectors():
        ids, _ = store.vector_matrix()
        assert set(ids.tolist()) <= {int(i) for (i,) in store.conn.execute("SELECT id FROM chunks")}  # no stray
        if all_embedded:
            assert store.chunks_missing_vectors() == []


# -- keyword-only (provider none) --------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def small_text_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """The text phase stores `many_files`' files 8 at a time (32 chunks, the batch size these tests set), so that
    cancelling, killing and progress between text batches can be seen on 24 small files (a real run stores up
    to indexing.text_phase.TEXT_BATCH_CHUNKS chunks a batch)."""
    from saipling.indexing import text_phase as index_text

    monkeypatch.setattr(index_text, "TEXT_BATCH_CHUNKS", 32)


def test_keyword_only_index_and_metadata(tmp_path: Path) -> None:
    root = saipling_project(tmp_path)
    with open_project(root) as project:
        s = project.index()
        assert (s.files, s.scanned, s.changed, s.files_read) == (6, 6, 6, 6)
        assert s.chunks == project.store.stats().total_chunks > 6
        assert (s.embedded, s.reused, s.cost_usd, s.degraded) == (0, 0, 0.0, None)
        assert set(project.store.file_states()) == set(SAIPLING_MARKDOWN)
        assert not project.store.has_vectors()
        profile = project.store.get_file("characters/marcus-cole/profile.md")
        assert (profile.file_type, profile.entity_name, profile.display_name) == (
            "character",
            "marcus-cole",
            "Marcus Cole",
        )
        assert "The Ferryman" in profile.aliases
        scene = project.store.chunks_for_path("books/book-01/phase-5-bloom/ch-02/scene-01.md")[0]
        assert (scene.entity_name, scene.book_id, scene.chapter_id, scene.chapter_num) == (
            "ch-02-scene-01",
            "book-01",
            "ch-02",
            2,
        )
        assert (root / ".saipling" / "index.db").is_file()
        assert (root / ".saipling" / ".gitignore").read_text() == "*\n"
        assert_consistent(project, all_embedded=False)


class ReadSpy:
    """Records every Python-level open/read of a file under `root` (outside `.saipling/`)."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = str(root.resolve())
        self.paths: list[str] = []
        for owner, name in ((builtins, "open"), (io, "open"), (os, "open")):
            monkeypatch.setattr(owner, name, self._wrap(getattr(owner, name)))
        for name in ("read_bytes", "read_text", "open"):
            monkeypatch.setattr(pathlib.Path, name, self._wrap(getattr(pathlib.Path, name)))

    def _wrap(self, fn):
        def spy(file, *args, **kwargs):
            p = os.path.abspath(os.fspath(file)) if isinstance(file, str | bytes | os.PathLike) else ""
            if isinstance(p, str) and p.startswith(self.root) and "/.saipling" not in p:
                self.paths.append(p)
            return fn(file, *args, **kwargs)

        return spy


def test_noop_reindex_reads_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = saipling_project(tmp_path)
    with open_project(root) as project:
        project.index()
    with open_project(root) as project:
        spy = ReadSpy(root, monkeypatch)
        s = project.index()
        monkeypatch.undo()
        assert (s.files_read, s.changed, s.unchanged, s.embedded, s.new_chunks) == (0, 0, 6, 0, 0)
        assert spy.paths == []


def test_touch_reads_but_does_not_rechunk(tmp_path: Path) -> None:
    root = saipling_project(tmp_path)
    with open_project(root) as project:
        project.index()
        before = project.store.chunks_for_path("notes/ideas.md")
        new_mtime = bump_mtime(root / "notes/ideas.md")
        s = project.index()
        assert (s.files_read, s.changed, s.unchanged, s.new_chunks) == (1, 0, 6, 0)
        assert project.store.chunks_for_path("notes/ideas.md") == before
        assert project.store.file_states()["notes/ideas.md"].mtime_ns == new_mtime
        assert project.index().files_read == 0  # the new mtime was recorded


def test_full_reindex_rereads_everything(tmp_path: Path) -> None:
    root = saipling_project(tmp_path)
    with open_project(root) as project:
        project.index()
        s = project.index(full=True)
        assert (s.files_read, s.changed, s.files) == (6, 6, 6)
        assert_consistent(project, all_embedded=False)


def test_delete_rename_and_explicit_paths_keyword_only(tmp_path: Path) -> None:
    root = saipling_project(tmp_path)
    with open_project(root) as project:
        project.index()
        (root / "notes/ideas.md").unlink()
        s = project.index()
        assert s.deleted == 1 and "notes/ideas.md" not in project.store.file_states()
        assert project.store.keyword_search(kw("cipher"), 5) == []

        write_file(root, "notes/new.md", "# New\n\nA brand new note about the cipher.\n")
        s = project.index(paths=["notes/new.md", "world/places/harbor.md", "gone.md", ".hidden/x.md"])
        assert s.changed == 2 and "notes/new.md" in project.store.file_states()
        assert project.store.keyword_search(kw("cipher"), 5)
        (root / "notes/new.md").unlink()
        s = project.index(paths=["notes/new.md"])
        assert s.deleted == 1 and "notes/new.md" not in project.store.file_states()
        assert_consistent(project, all_embedded=False)


def test_explicit_paths_obey_the_symlink_rule(tmp_path: Path) -> None:
    outside = make_project(tmp_path, {"secret.md": "# Secret\n\nText outside the project root.\n"}, "outside")
    root = saipling_project(tmp_path)
    os.symlink(outside / "secret.md", root / "escape.md")
    os.symlink(outside, root / "linked")
    with open_project(root) as project:
        assert dict(project.index().skipped)["escape.md"] == "symlink leaves the project root"
        # the editor reports a save of each path: still never indexed
        s = project.index(paths=["escape.md", "linked/secret.md", "notes/ideas.md"])
        assert set(project.store.file_states()) == set(SAIPLING_MARKDOWN)
        skipped = dict(s.skipped)
        assert skipped["escape.md"] == skipped["linked/secret.md"] == "symlink leaves the project root"
        assert project.store.keyword_search(kw("outside"), 5) == []


def test_a_file_that_breaks_the_chunker_is_skipped_not_fatal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import saipling.indexing.chunk_pool as chunk_pool

    real = chunk_pool.chunk_document

    def flaky(text, *args, **kwargs):
        if "KABOOM" in text:
            raise RecursionError("simulated chunker bug")
        return real(text, *args, **kwargs)

    monkeypatch.setattr(chunk_pool, "chunk_document", flaky)
    root = saipling_project(tmp_path)
    write_file(root, "notes/odd.md", "# Odd\n\nKABOOM\n")
    with open_project(root) as project:
        s = project.index()
        assert s.files == 6 and "notes/odd.md" not in project.store.file_states()
        reason = dict(s.skipped)["notes/odd.md"]
        assert "could not be chunked" in reason and "RecursionError" in reason


# -- with an embedding provider over real HTTP -------------------------------------------------------------


def test_embedding_run_then_noop(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    root = saipling_project(tmp_path)
    with open_project(root, **api_opts(api_server)) as project:
        s = project.index()
        total = s.chunks
        assert s.embedded == total > 0 and s.reused == 0 and s.degraded is None
        assert s.tokens > 0
        assert sorted(s.embedded_paths) == SAIPLING_MARKDOWN
        st = project.store.stats()
        assert st.embedded_chunks == total and st.cached_embeddings == total
        assert project.store.vector_model() == ("fake-embed", DIMS)
        assert sorted(sent_texts(api_server)) == sorted(t for p in SAIPLING_MARKDOWN for t in embed_texts(project, p))
        assert_consistent(project, all_embedded=True)
        status = project.status()
        assert (status["provider"], status["model"], status["dimensions"]) == ("openai", "fake-embed", DIMS)
        assert status["embeddedChunks"] == total and status["degraded"] is None

    api_server.requests.clear()
    with open_project(root, **api_opts(api_server)) as project:
        s = project.index()
        assert (s.embedded, s.files_read, s.changed, s.unchanged) == (0, 0, 0, 6)
        assert api_server.requests == []


def test_edit_one_section_reembeds_only_that_chunk(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    root = saipling_project(tmp_path)
    rel = "characters/marcus-cole/profile.md"
    with open_project(root, **api_opts(api_server)) as project:
        project.index()
        path = root / rel
        path.write_text(path.read_text().replace("changed the way he reads the sky", "taught him to fear calm water"))
        api_server.requests.clear()
        s = project.index()
        storm = next(c for c in project.store.chunks_for_path(rel) if c.section_heading == "### The Storm")
        assert "fear calm water" in storm.text
        assert (s.files_read, s.changed, s.embedded) == (1, 1, 1)
        assert s.reused == len(project.store.chunks_for_path(rel)) - 1
        assert sent_texts(api_server) == [embed_text_for(storm.heading_path, storm.text)]
        assert s.embedded_paths == [rel]
        assert_consistent(project, all_embedded=True)


def test_adding_lines_above_keeps_embeddings_of_moved_sections(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    root = saipling_project(tmp_path)
    rel = "world/places/harbor.md"
    with open_project(root, **api_opts(api_server)) as project:
        project.index()
        docks_before = next(c for c in project.store.chunks_for_path(rel) if c.section_heading == "## Docks")
        path = root / rel
        path.write_text(
            path.read_text().replace("## Docks", "## Lighthouse\n\nThe keeper lives alone up there.\n\n## Docks")
        )
        api_server.requests.clear()
        s = project.index()
        docks = next(c for c in project.store.chunks_for_path(rel) if c.section_heading == "## Docks")
        assert docks.start_line == docks_before.start_line + 4
        assert s.embedded == 1 and "keeper lives alone" in sent_texts(api_server)[0]


def test_rename_reuses_embeddings_from_cache(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    root = saipling_project(tmp_path)
    with open_project(root, **api_opts(api_server)) as project:
        project.index()
        n = len(project.store.chunks_for_path("world/places/harbor.md"))
        os.rename(root / "world/places/harbor.md", root / "world/places/greyhaven.md")
        api_server.requests.clear()
        s = project.index()
        assert (s.embedded, s.reused, s.deleted, s.changed) == (0, n, 1, 1)
        assert api_server.requests == []
        assert "world/places/harbor.md" not in project.store.file_states()
        assert len(project.store.chunks_for_path("world/places/greyhaven.md")) == n
        assert_consistent(project, all_embedded=True)


def test_delete_prunes_chunks_and_vectors(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    root = saipling_project(tmp_path)
    with open_project(root, **api_opts(api_server)) as project:
        first = project.index()
        n = len(project.store.chunks_for_path("characters/marcus-cole/profile.md"))
        (root / "characters/marcus-cole/profile.md").unlink()
        s = project.index()
        assert s.deleted == 1 and s.chunks == first.chunks - n
        st = project.store.stats()
        assert st.embedded_chunks == st.total_chunks == s.chunks
        assert project.store.keyword_search(kw("chandlery"), 5) == []
        assert_consistent(project, all_embedded=True)


def test_model_change_rebuilds_vectors_then_switch_back_uses_cache(
    tmp_path: Path, api_server: FakeEmbeddingAPI
) -> None:
    root = saipling_project(tmp_path)
    with open_project(root, **api_opts(api_server)) as project:
        total = project.index().chunks
    with open_project(root, **api_opts(api_server, model="other-embed", dimensions=16)) as project:
        s = project.index()
        assert s.embedded == total and s.files_read == 0
        assert project.store.vector_model() == ("other-embed", 16)
        assert project.store.vector_matrix()[1].shape == (total, 16)
        assert any("model changed" in w for w in s.warnings)
    api_server.requests.clear()
    with open_project(root, **api_opts(api_server)) as project:
        s = project.index()
        # the cache is the index's table of vectors (schema 8): the old model's rows are its vectors again at once,
        # nothing to embed and nothing to copy
        assert (s.embedded, s.reused) == (0, 0) and project.store.count_unembedded() == 0
        assert api_server.requests == []
        assert project.store.vector_model() == ("fake-embed", DIMS)
        assert_consistent(project, all_embedded=True)


# -- interruption, cancellation, provider failure ----------------------------------------------------------

N_FILES = 24
# chunks per file: with batchSize 32 the indexer flushes (embeds and stores) every 32 chunks = 8 files
SECTIONS = 4


def batched(api: FakeEmbeddingAPI, **kw: Any) -> dict[str, Any]:
    return api_opts(api, batch_size=32, **kw)


def many_files(tmp_path: Path) -> Path:
    files = {}
    for f in range(N_FILES):
        body = "\n\n".join(
            f"## Part {k}\n\nFile {f} part {k}: " + words(25, seed=f * 10 + k) + "." for k in range(SECTIONS)
        )
        files[f"chapters/f{f:02d}.md"] = f"# File {f}\n\n" + body + "\n"
    return make_project(tmp_path, files)


def texts_of(api: FakeEmbeddingAPI, file_no: int) -> list[str]:
    return [t for t in sent_texts(api) if f"File {file_no} part" in t]


class StopAt:
    """A progress callback that does something when the indexer is about to read file number `n` (phase
    "keywords"), or has stored `n` vectors (phase "embedding")."""

    def __init__(self, n: int, action, phase: str = "keywords") -> None:
        self.n, self.action, self.phase, self.fired = n, action, phase, False

    def __call__(self, p) -> None:
        done = p.files_done if self.phase == "keywords" else p.chunks_done
        if p.phase == self.phase and done == self.n and not self.fired:
            self.fired = True
            self.action()


@pytest.mark.parametrize("kill", [KeyboardInterrupt, RuntimeError])
def test_killed_run_resumes_without_reembedding(tmp_path: Path, api_server: FakeEmbeddingAPI, kill: type) -> None:
    root = many_files(tmp_path)

    def die() -> None:
        raise kill("killed")

    with open_project(root, **batched(api_server)) as project:
        with pytest.raises(kill):
            project.index(progress=StopAt(32, die, "embedding"))  # after the first round of vectors
        assert len(project.store.file_states()) == N_FILES  # every file was keyword-searchable first
        assert project.store.stats().embedded_chunks == 32
        assert project.status()["unembeddedChunks"] == N_FILES * SECTIONS - 32
        assert_consistent(project, all_embedded=False)
        first_run = sent_texts(api_server)
    api_server.requests.clear()
    with open_project(root, **batched(api_server)) as project:
        s = project.index()
        assert s.files == N_FILES and s.files_read == 0
        assert s.embedded == N_FILES * SECTIONS - 32
        assert not set(first_run) & set(sent_texts(api_server))  # nothing done earlier is embedded again
        assert project.status()["unembeddedChunks"] == 0
        assert_consistent(project, all_embedded=True)


@pytest.mark.parametrize("kill", [KeyboardInterrupt, RuntimeError])
def test_run_killed_while_reading_says_what_is_left(tmp_path: Path, api_server: FakeEmbeddingAPI, kill: type) -> None:
    root = many_files(tmp_path)

    def die() -> None:
        raise kill("killed")

    with open_project(root, **batched(api_server)) as project:
        with pytest.raises(kill):
            project.index(progress=StopAt(12, die))
        assert set(project.store.file_states()) == {f"chapters/f{f:02d}.md" for f in range(8)}  # first batch
        assert api_server.count == 0  # keywords first: nothing embedded before every file is searchable
    with open_project(root, **batched(api_server)) as project:  # a later `saipling status`
        st = project.status()
        assert st["pendingFiles"] == N_FILES - 8 and st["unembeddedChunks"] == 8 * SECTIONS
        s = project.index()
        assert s.files_read == N_FILES - 8 and s.embedded == N_FILES * SECTIONS
        st = project.status()
        assert st["pendingFiles"] == 0 and st["unembeddedChunks"] == 0
        assert_consistent(project, all_embedded=True)


def test_cancel_leaves_consistent_index_and_next_run_completes(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    root = many_files(tmp_path)
    cancel = threading.Event()
    with open_project(root, **batched(api_server)) as project:
        s = project.index(progress=StopAt(10, cancel.set), cancel=cancel)
        assert s.cancelled and s.pending_files == N_FILES - 8
        assert 8 <= s.files < N_FILES
        assert_consistent(project, all_embedded=False)
        assert not project.status()["isIndexing"]
    with open_project(root, **batched(api_server)) as project:
        s = project.index()
        assert not s.cancelled and s.files == N_FILES
        assert s.files_read == N_FILES - 8
        assert project.store.stats().embedded_chunks == N_FILES * SECTIONS
        assert len(sent_texts(api_server)) == N_FILES * SECTIONS
        assert_consistent(project, all_embedded=True)


def test_cancel_from_another_thread(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    root = many_files(tmp_path)
    api_server.slow(0.3, times=3)  # keep the run busy long enough to be cancelled
    cancel = threading.Event()
    timer = threading.Timer(0.2, cancel.set)
    with open_project(root, **batched(api_server)) as project:
        timer.start()
        s = project.index(cancel=cancel)
        timer.join()
        assert s.cancelled and s.unembedded > 0
        assert project.status()["unembeddedChunks"] == s.unembedded
        assert_consistent(project, all_embedded=False)
        s = project.index()
        assert s.files == N_FILES and not s.cancelled and s.unembedded == 0
        assert_consistent(project, all_embedded=True)


def test_progress_phases_and_an_eta_from_measured_throughput(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    root = many_files(tmp_path)
    seen: list[Any] = []
    with open_project(root, **batched(api_server)) as project:
        project.index(progress=seen.append)
    phases = [p.phase for p in seen]
    assert phases.index("embedding") > max(i for i, ph in enumerate(phases) if ph == "keywords")  # keywords first
    assert phases[-1] == "done"
    embedding = [p for p in seen if p.phase == "embedding"]
    done = [p.chunks_done for p in embedding]  # a batch first, then rounds of whole batches (~1 s of work)
    assert done[0] == 32 and done[-1] == 96 and done == sorted(set(done)) and all(d % 32 == 0 for d in done)
    assert {p.chunks_total for p in embedding} == {96}
    assert all(p.eta_seconds is not None for p in embedding)  # measured from the rounds so far
    assert embedding[-1].eta_seconds == 0.0 and embedding[0].eta_seconds > 0
    assert [p.fraction for p in embedding] == [d / 96 for d in done]


def test_pause_stops_embedding_and_keeps_the_text_live(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    root = many_files(tmp_path)
    with open_project(root, **batched(api_server)) as project:
        s = project.index(progress=StopAt(32, project.pause, "embedding"))
        assert s.paused and not s.cancelled and s.files == N_FILES
        assert project.status()["paused"] and project.status()["unembeddedChunks"] == N_FILES * SECTIONS - 32
        write_file(root, "chapters/f00.md", "# File 0\n\nA zebra crossing appeared.\n")
        s = project.index(paths=["chapters/f00.md"])  # while paused: text only
        assert s.paused and s.embedded == 0
        assert project.store.keyword_search(kw("zebra"), 5)
        project.resume()
        s = project.index()
        assert not s.paused and project.status()["unembeddedChunks"] == 0
        assert_consistent(project, all_embedded=True)


def test_provider_401_keeps_keyword_index_then_backfills(
    tmp_path: Path, api_server: FakeEmbeddingAPI, caplog: pytest.LogCaptureFixture
) -> None:
    root = saipling_project(tmp_path)
    api_server.require_key("sk-good")
    with (
        caplog.at_level(logging.DEBUG),
        open_project(root, **api_opts(api_server, openai_api_key="sk-BAD-key-123")) as project,
    ):
        s = project.index()
        assert s.degraded and "401" in s.degraded
        assert s.files == 6 and s.chunks > 0 and s.embedded == 0
        assert project.store.stats().embedded_chunks == 0
        assert project.store.keyword_search(kw("chandlery"), 5)  # keyword search still works
        assert project.provider.failed
        assert project.status()["degraded"]
        assert api_server.count == 1  # told once: no retries, no more calls after the failure
        assert_consistent(project, all_embedded=False)
    assert "sk-BAD-key-123" not in caplog.text
    with open_project(root, **batched(api_server)) as project:
        s = project.index()
        assert s.degraded is None and s.files_read == 0
        assert s.embedded == s.chunks
        assert project.store.stats().embedded_chunks == s.chunks
        assert project.status()["degraded"] is None
        assert_consistent(project, all_embedded=True)


def test_provider_401_in_the_middle_of_a_run(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    root = many_files(tmp_path)
    with open_project(root, **batched(api_server)) as project:
        s = project.index(progress=StopAt(32, lambda: api_server.require_key("rotated-key"), "embedding"))
        assert s.degraded and s.files == N_FILES
        assert project.store.stats().embedded_chunks == 32
        assert_consistent(project, all_embedded=False)
    api_server.require_key(None)
    api_server.requests.clear()
    with open_project(root, **batched(api_server)) as project:
        s = project.index()
        assert s.files_read == 0 and s.embedded == N_FILES * SECTIONS - 32  # the first 32 are not sent again
        assert_consistent(project, all_embedded=True)


def test_server_error_degrades_without_crashing(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    root = saipling_project(tmp_path)
    api_server.fail(500, times=2)  # max_retries=1: the one batch fails for good
    with open_project(root, **api_opts(api_server, max_retries=1)) as project:
        s = project.index()
        assert api_server.count == 2
        assert s.degraded and "500" in s.degraded
        assert s.files == 6
        assert_consistent(project, all_embedded=False)
    with open_project(root, **api_opts(api_server)) as project:
        s = project.index()
        assert s.degraded is None and project.store.chunks_missing_vectors() == []


def test_switching_to_keyword_only_keeps_the_index(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    root = saipling_project(tmp_path)
    # a model window as large as the chunk limits: keyword-only chunks are the same (no re-chunking)
    with open_project(root, **api_opts(api_server, max_input_tokens=8191)) as project:
        project.index()
    with open_project(root) as project:  # provider none
        s = project.index()
        assert s.files == 6 and s.files_read == 0 and s.embedded == 0
        assert project.status()["provider"] == "none"


# -- estimate ----------------------------------------------------------------------------------------------


def test_estimate_counts_what_the_next_run_embeds(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    root = saipling_project(tmp_path)
    with open_project(root, **api_opts(api_server)) as project:
        est = project.estimate()
        total = est["chunksToEmbed"]
        assert total > 0 and est["tokensToEmbed"] > 0 and api_server.count == 0
        assert project.index().embedded == total
        assert project.estimate()["chunksToEmbed"] == 0
        path = root / "notes/ideas.md"
        path.write_text(path.read_text() + "\n## More\n\nA new section about the lighthouse keeper.\n")
        assert project.estimate()["chunksToEmbed"] == 1
        assert project.index().embedded == 1
    # another model: everything is embedded again, and the estimate says so before any money is spent
    with open_project(root, **api_opts(api_server, model="other-embed", dimensions=16)) as project:
        api_server.requests.clear()
        est = project.estimate()
        assert api_server.count == 0
        s = project.index()
        assert est["chunksToEmbed"] == s.embedded == s.chunks
    # a run that failed to embed leaves chunks that the next run backfills: the estimate counts them
    api_server.require_key("sk-good")
    with open_project(root, **api_opts(api_server, openai_api_key="sk-wrong")) as project:
        (root / "notes/ideas.md").unlink()
        write_file(root, "notes/fresh.md", "# Fresh\n\nA fresh note written while the key was wrong.\n")
        assert project.index().degraded
    api_server.require_key(None)
    with open_project(root, **api_opts(api_server)) as project:
        est = project.estimate()
        s = project.index()
        assert s.embedded == est["chunksToEmbed"] == 1


# -- chunk limits in the model's own tokens ----------------------------------------------------------------

DENSE_TEXT = {
    "ja.md": "# 嵐\n\n"
    + "".join(f"港の灯りが{n}回揺れ、マーカスは南の階段からフェリーを引き離した。" for n in range(12))
    + "\n",
    "table.md": "# Table\n\n" + " ".join(f"{i * 7919 % 100000}.{i % 97}" for i in range(500)) + "\n",
}


def test_local_model_chunks_fit_its_word_piece_window(tmp_path: Path) -> None:
    """Text the 4-characters estimate undercounts (Japanese, numbers) is chunked by the model's tokenizer."""
    from saipling.embeddings import local_available

    if not local_available():
        pytest.skip("the local model extra is not installed")
    root = make_project(tmp_path, DENSE_TEXT)
    with open_project(root, "local") as project:
        s = project.index()
        assert s.files == 2 and s.degraded is None and project.store.stats().embedded_chunks == s.chunks
        window = project.provider.max_input_tokens
        # all-MiniLM-L6-v2 was trained on 128-word-piece passages: chunks are cut to that, not to its window
        assert project.provider.passage_tokens == 128 and project.indexer.limits().max_tokens == 128
        for rel in DENSE_TEXT:
            texts = embed_texts(project, rel)
            assert len(texts) > 2
            assert max(project.provider.count_tokens(t) for t in texts) <= window, rel


def test_a_re_index_from_the_cache_gives_each_file_its_own_vectors(
    tmp_path: Path, api_server: FakeEmbeddingAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After `clear`, every text is in the embedding cache: each file's write was given the whole batch's cached
    vectors, and checked and stored them all again (30 s of CPU for the 13th Age vault, nothing embedded; 3.9 s
    now). Nothing is sent to the provider, and every chunk has its vector."""
    root = saipling_project(tmp_path)
    with open_project(root, **api_opts(api_server)) as project:
        project.index()
        total = project.store.stats().total_chunks
        project.clear()
        api_server.requests.clear()
        given: list[tuple[int, int]] = []
        real = project.store.replace_file

        def recording(record: Any, chunks: Any, vectors: Any = None, *args: Any, **kw: Any) -> Any:
            given.append((len(vectors or {}), len(chunks)))
            return real(record, chunks, vectors, *args, **kw)

        monkeypatch.setattr(project.store, "replace_file", recording)
        s = project.index()
        assert (s.embedded, s.reused) == (0, total) and api_server.requests == []
        assert len(given) == len(SAIPLING_MARKDOWN) and all(n <= chunks for n, chunks in given)
        assert project.store.stats().embedded_chunks == total
        assert_consistent(project, all_embedded=True)

"""Indexing runs that meet odd file systems: names that are not UTF-8, unreadable folders, symlinks inside
the root, coarse timestamps, and provider changes (embedding size, input window) between runs."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pathlib
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from fixtures import make_project, open_project, write_file
from saipling.embeddings.base import EmbeddingProvider, EmbeddingResult
from saipling.indexing.records import is_racy
from saipling.live.sync_queue import SyncQueue
from saipling.live.watcher import Watcher
from saipling.storage.base import cache_key

HOUR_AGO_NS = time.time_ns() - 3600 * 10**9


class FakeProvider(EmbeddingProvider):
    """Deterministic vectors (a hash of the text), no network; counts the texts it embeds."""

    name = "openai"

    def __init__(self, model: str = "fake-embed", dims: int = 8, window: int = 8191) -> None:
        super().__init__()
        self.model, self.dimensions, self.max_input_tokens = model, dims, window
        self.texts: list[str] = []

    def _embed_batch(self, texts: list[str], input_type: str) -> EmbeddingResult:
        if input_type == "document":
            self.texts += texts
        digests = [hashlib.sha256(t.encode()).digest() for t in texts]
        vectors = np.array([[b + 1 for b in d[: self.dimensions]] for d in digests], dtype=np.float32)
        return EmbeddingResult(vectors, sum(len(t) // 4 for t in texts))


def age(root: Path) -> None:
    """Every file under root an hour old (clear of the racy-timestamp window)."""
    for dirpath, _, names in os.walk(root):
        for name in names:
            os.utime(os.path.join(dirpath, name), ns=(HOUR_AGO_NS, HOUR_AGO_NS))


# -- 1. names that are not UTF-8 ---------------------------------------------------------------------------

needs_bytes_names = pytest.mark.skipif(os.name == "nt", reason="file names are UTF-16 on Windows")


@needs_bytes_names
def test_non_utf8_name_in_explicit_paths_is_skipped_and_the_rest_indexed(tmp_path: Path) -> None:
    root = make_project(tmp_path, {"good.md": "# Good\n\nA lantern of amber.\n"})
    with open(os.fsencode(root) + b"/caf\xe9.md", "wb") as f:
        f.write(b"# Cafe\n\nlatin-1 named file\n")
    bad = os.fsdecode(b"caf\xe9.md")
    with open_project(root) as project:
        project.index()
        write_file(root, "good.md", "# Good\n\nA compass of brass.\n")
        s = project.index(paths=[bad, "good.md"])  # what the watcher / a sync pass queues
        assert dict(s.skipped)["caf\\udce9.md"] == "file name is not valid UTF-8"
        assert set(project.store.file_states()) == {"good.md"}
        assert [r["filePath"] for r in project.search({"query": "brass"})["results"]] == ["good.md"]


@needs_bytes_names
def test_watcher_ignores_non_utf8_names(tmp_path: Path) -> None:
    from watchdog.events import FileCreatedEvent, FileModifiedEvent

    root = make_project(tmp_path, {"good.md": "# Good\n"})
    queue = SyncQueue(0.0)
    watcher = Watcher(root, queue, lambda rel: True)
    bad = os.fsencode(root) + b"/caf\xe9.md"
    assert watcher._rel(bad) is None and watcher._rel(os.fsdecode(bad)) is None
    watcher.handle(FileCreatedEvent(os.fsdecode(bad)))
    watcher.handle(FileModifiedEvent(bad))
    assert len(queue) == 0
    watcher.handle(FileModifiedEvent(str(root / "good.md")))
    assert len(queue) == 1


def test_one_file_that_cannot_be_stored_does_not_abort_the_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_project(tmp_path, {f"n{i}.md": f"# Note {i}\n\nText {i}.\n" for i in range(5)})
    with open_project(root) as project:
        real = project.store.replace_file

        def flaky(record, *args, **kwargs):
            if record.path == "n2.md":
                raise UnicodeEncodeError("utf-8", "x", 0, 1, "simulated")
            return real(record, *args, **kwargs)

        real_batch = project.store.replace_files

        def flaky_batch(files):  # (a batch holding it fails whole: the indexer stores the batch file by file)
            if any(f.record.path == "n2.md" for f in files):
                raise UnicodeEncodeError("utf-8", "x", 0, 1, "simulated")
            return real_batch(files)

        monkeypatch.setattr(project.store, "replace_file", flaky)
        monkeypatch.setattr(project.store, "replace_files", flaky_batch)
        s = project.index()
        assert set(project.store.file_states()) == {"n0.md", "n1.md", "n3.md", "n4.md"}
        assert "could not be indexed" in dict(s.skipped)["n2.md"]
        assert s.changed == 4


# -- 2. unreadable paths given explicitly ------------------------------------------------------------------


def test_explicit_path_that_cannot_be_stat_ed_is_skipped_not_fatal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_project(tmp_path, {"locked/x.md": "# X\n\nsecret amber\n", "good.md": "# Good\n\namber\n"})
    with open_project(root) as project:
        project.index()
        write_file(root, "good.md", "# Good\n\nThe brass compass.\n")
        real_stat = pathlib.Path.stat
        locked = str(root / "locked")

        def stat(self, *args, **kwargs):  # the folder lost its x bit (tests may run as root: simulated)
            if str(self).startswith(locked + os.sep):
                raise PermissionError(13, "Permission denied", str(self))
            return real_stat(self, *args, **kwargs)

        monkeypatch.setattr(pathlib.Path, "stat", stat)
        s = project.index(paths=["locked/x.md", "good.md", "gone.md"])
        monkeypatch.undo()
        assert dict(s.skipped)["locked/x.md"].startswith("unreadable")
        assert set(project.store.file_states()) == {"good.md"}  # as a full scan would leave it
        assert [r["filePath"] for r in project.search({"query": "brass"})["results"]] == ["good.md"]


# -- 3. same model, another embedding size -----------------------------------------------------------------


def test_dimension_change_for_the_same_model_never_reuses_old_size_vectors(tmp_path: Path) -> None:
    root = make_project(
        tmp_path,
        {"a.md": "# A\n\nThe amber lantern glows.\n", "b.md": "# B\n\nThe brass compass points north.\n"},
    )
    eight = FakeProvider(dims=8)
    with open_project(root, eight) as project:
        assert project.index().embedded == 2
        four = FakeProvider(dims=4)
        project.provider = project.indexer.provider = four
        for _ in range(2):
            s = project.index()
            assert s.degraded is None
            st = project.status()
            assert st["embeddedChunks"] == st["totalChunks"] == 2
        assert len(four.texts) == 2  # embedded once at the new size, then cached under model and size
        hashes = [c.content_hash for p in ("a.md", "b.md") for c in project.store.chunks_for_path(p)]
        assert {len(v) for v in project.store.cached_vectors("fake-embed", hashes, 4).values()} == {4}
        assert {len(v) for v in project.store.cached_vectors("fake-embed", hashes, 8).values()} == {8}
        found = project.search({"query": "amber lantern"})  # the 4-dimension vectors serve the query
        assert found["degraded"] is None and "a.md" in [r["filePath"] for r in found["results"]]
        assert {"vector", "keyword"} <= {m for r in found["results"] for m in r["matchedBy"]}
        # and back to 8: every vector comes from the cache (written under the model name alone: old files)
        again = FakeProvider(dims=8)
        project.provider = project.indexer.provider = again
        s = project.index()
        assert (s.embedded, again.texts) == (0, [])
        assert project.status()["embeddedChunks"] == 2
        assert cache_key("fake-embed", 8) == "fake-embed@8"


# -- 4. chunk limits follow the provider's input window ----------------------------------------------------

LONG = "# Long\n\n" + " ".join(f"Sentence {i} tells of the amber lantern and the compass." for i in range(150)) + "\n"


def test_switching_to_a_smaller_window_rechunks_unchanged_files(tmp_path: Path) -> None:
    root = make_project(tmp_path, {"long.md": LONG, "short.md": "# Short\n\nA line.\n"})
    age(root)
    with open_project(root) as project:
        project.index()
        assert max(c.token_count for c in project.store.chunks_for_path("long.md")) > 300
        small = FakeProvider(model="minilm", dims=8, window=256)
        project.provider = project.indexer.provider = small
        s = project.index()  # an incremental run: nothing changed on disk
        limit = project.indexer.limits().max_tokens
        assert limit < 256 and s.files_read == 2
        assert max(c.token_count for c in project.store.chunks_for_path("long.md")) <= limit
        assert max(len(t) // 4 for t in small.texts) <= limit
        assert project.status()["embeddedChunks"] == project.status()["totalChunks"]
        s = project.index()  # the new limits were recorded: a no-op again
        assert (s.files_read, s.embedded) == (0, 0)


def test_an_index_made_by_an_older_chunker_is_rechunked_once(tmp_path: Path) -> None:
    """Upgrading the chunker (here: setext headings and wiki-links) re-chunks unchanged files on the next run."""
    import json

    from saipling.indexing.context import CHUNKING_META

    note = "Chapter One\n===========\n\nThe [[harbor|old harbor]] at dawn, where the ferry waits.\n"
    root = make_project(tmp_path, {"a.md": note})
    age(root)
    with open_project(root) as project:
        project.index()
        assert project.store.chunks_for_path("a.md")[0].section_heading == "# Chapter One"
        # as an older chunker left it: its signature (no chunker version) and its chunks
        old = json.loads(project.store.get_meta(CHUNKING_META))
        old.pop("chunker")
        project.store.set_meta(CHUNKING_META, json.dumps(old, sort_keys=True))
        with project.store.conn:
            project.store.conn.execute("UPDATE chunks SET section_heading = NULL")
        s = project.index()  # incremental: nothing changed on disk, yet every file is re-chunked
        assert s.files_read == 1
        chunk = project.store.chunks_for_path("a.md")[0]
        assert chunk.section_heading == "# Chapter One" and "The old harbor at dawn" in chunk.text
        assert (project.index().files_read, project.index().embedded) == (0, 0)  # recorded: a no-op again


def test_apply_settings_asks_for_a_full_reindex_when_the_window_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import saipling.project as project_module

    root = make_project(tmp_path, {"long.md": LONG})
    with open_project(root) as project:
        project.index()
        monkeypatch.setattr(project_module, "create_provider", lambda s: FakeProvider("minilm", 8, 256))
        new = dataclasses.replace(project.settings, provider="local", model="minilm")
        assert project.apply_settings(new) == "full"
        project.index()
        # another provider with the limits the index now has: incremental is enough
        monkeypatch.setattr(project_module, "create_provider", lambda s: FakeProvider("minilm", 8, 256))
        assert project.apply_settings(dataclasses.replace(new, dimensions=8)) == "incremental"


# -- 5. symlinks that stay inside the root -----------------------------------------------------------------


def test_symlinks_inside_the_root_are_indexed_under_the_real_path_only(tmp_path: Path) -> None:
    root = make_project(
        tmp_path,
        {
            "zreal/note.md": "# Note\n\nThe amber lantern.\n",
            "real.md": "# Real\n\nCopper.\n",
            "drafts/secret.md": "# Secret\n\nExcluded text.\n",
        },
    )
    os.symlink("zreal", root / "alink")  # sorts before the real folder
    os.symlink("real.md", root / "alias.md")
    os.symlink("drafts/secret.md", root / "leak.md")  # a link to an excluded file
    with open_project(root, exclude=["drafts/**"]) as project:
        s = project.index()
        assert set(project.store.file_states()) == {"zreal/note.md", "real.md"}
        skipped = dict(s.skipped)
        assert skipped["alink"] == "symlink to zreal (indexed under its real path)"
        assert skipped["alias.md"] == "symlink to real.md (indexed under its real path)"
        assert skipped["leak.md"] == "symlink to drafts/secret.md (indexed under its real path)"
        write_file(root, "zreal/note.md", "# Note\n\nThe brass compass.\n")
        s = project.index(paths=["zreal/note.md", "alink/note.md", "leak.md"])
        assert dict(s.skipped)["alink/note.md"] == "symlink to zreal/note.md (indexed under its real path)"
        assert set(project.store.file_states()) == {"zreal/note.md", "real.md"}
        assert [r["filePath"] for r in project.search({"query": "brass"})["results"]] == ["zreal/note.md"]
        assert project.search({"query": "amber"})["results"] == []
        assert project.search({"query": "excluded"})["results"] == []


# -- 6. racy (mtime, size) ---------------------------------------------------------------------------------


def test_same_size_edit_in_the_same_timestamp_tick_is_not_missed(tmp_path: Path) -> None:
    root = make_project(tmp_path, {"scene.md": "# Scene\n\nThe amber lantern.\n"})
    f = root / "scene.md"
    tick = (f.stat().st_mtime_ns // 10**9) * 10**9  # a file system with 1-second timestamps
    os.utime(f, ns=(tick, tick))
    with open_project(root) as project:
        project.index()
        f.write_text("# Scene\n\nThe brass compass.\n")  # same size, same second
        os.utime(f, ns=(tick, tick))
        s = project.index()
        assert s.files_read == 1 and s.changed == 1
        assert [r["filePath"] for r in project.search({"query": "brass"})["results"]] == ["scene.md"]
        assert project.search({"query": "amber"})["results"] == []


def test_racy_window() -> None:
    now = time.time_ns()
    whole = (now // 10**9) * 10**9
    assert is_racy(whole, whole + 1_500_000_000)  # coarse timestamps: 2 s
    assert not is_racy(whole - 3 * 10**9, now)
    assert is_racy(now - 10_000_000 + 1, now)  # fine timestamps: a jiffy or so
    assert not is_racy(now - 10**9 + 1, now)


def test_noop_reindex_of_many_old_files_reads_nothing(tmp_path: Path) -> None:
    root = make_project(tmp_path, {f"d{i % 10}/n{i}.md": f"# N{i}\n\nText {i}.\n" for i in range(1000)})
    age(root)
    with open_project(root) as project:
        assert project.index().files_read == 1000
        s = project.index()
        assert (s.files_read, s.unchanged) == (0, 1000)


# -- 7. status says why search is keyword-only -------------------------------------------------------------


def test_status_degraded_when_the_index_has_no_vectors_of_the_active_model(tmp_path: Path) -> None:
    root = make_project(tmp_path, {"a.md": "# A\n\nThe amber lantern.\n"})
    with open_project(root) as project:
        project.index()  # keyword only
    with open_project(root, FakeProvider(model="other-model")) as project:
        degraded = project.status()["degraded"]
        assert degraded and "no other-model embeddings" in degraded
        assert project.search({"query": "amber"})["degraded"] == degraded
        project.index()
        assert project.status()["degraded"] is None


def test_a_file_that_can_no_longer_be_read_leaves_the_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_project(tmp_path, {"a.md": "# A\n\nThe amber lantern glows all night.\n", "b.md": "# B\n\nBrass.\n"})
    with open_project(root) as project:
        project.index()
        assert [r["filePath"] for r in project.search({"query": "amber lantern"})["results"]] == ["a.md"]
        real = project.indexer.text.read_bytes

        def denied(path):
            if Path(path).name == "a.md":
                raise PermissionError(13, "Permission denied")
            return real(path)

        monkeypatch.setattr(project.indexer.text, "read_bytes", denied)
        (root / "a.md").write_text("# A\n\nThe amber lantern is gone now, replaced.\n", encoding="utf-8")
        s = project.index(paths=["a.md"])
        assert dict(s.skipped)["a.md"].startswith("unreadable")
        assert "a.md" not in project.store.file_states()  # its old text is not searchable any more
        assert project.search({"query": "amber lantern"})["results"] == []


def test_watchdogs_stop_race_is_not_logged_as_an_error_but_its_other_errors_are(caplog) -> None:
    import logging

    import saipling.live.watcher  # noqa: F401  (installs the filter)

    inotify_log = logging.getLogger("watchdog.observers.inotify")
    with caplog.at_level(logging.ERROR, logger="watchdog.observers.inotify"):
        inotify_log.error("InotifyEmitter.queue_events() called when the thread is inactive")
        inotify_log.error("inotify watch limit reached")
    assert [r.getMessage() for r in caplog.records] == ["inotify watch limit reached"]


# -- rounds of the embedding phase -------------------------------------------------------------------------


def test_embedding_rounds_last_about_a_second_whatever_the_provider_batch() -> None:
    from saipling.indexing.embed_phase import MAX_ROUND_BATCHES, round_size

    assert round_size(128, 100.0) == 128  # a slow provider: a batch a round (never less)
    assert round_size(128, 340.0) == 256  # the local model on 2 cores: two batches, ~0.75 s
    assert round_size(128, 1e9) == 128 * MAX_ROUND_BATCHES  # bounded: pause and cancel answer between rounds
    assert round_size(1, 0.0) == 1


def test_a_fast_provider_stores_its_vectors_in_few_transactions(tmp_path: Path, monkeypatch) -> None:
    """Each round of the embedding phase is one transaction: a fast provider gets bigger rounds (not one per
    batch), and every chunk still gets its vector."""
    from saipling.indexing import embed_phase as index_embed
    from saipling.storage.sqlite.store import SqliteStore as Store

    files = {f"n{i:02d}.md": f"# Note {i}\n\nThe lantern number {i} glows amber.\n" for i in range(60)}
    root = make_project(tmp_path, files)
    age(root)
    rounds: list[int] = []
    real = Store.set_vectors

    def counted(self, items, model):
        rounds.append(len(items))
        return real(self, items, model)

    monkeypatch.setattr(Store, "set_vectors", counted)
    monkeypatch.setattr(index_embed, "ROUND_SECONDS", 60.0)  # (however slow this machine is right now)
    provider = FakeProvider()
    with open_project(root, provider, batch_size=4) as project:
        s = project.index()
        assert s.embedded == 60 and project.store.count_unembedded() == 0
        assert sum(rounds) == 60
        # the first round is one batch (it measures the provider's speed), then up to 16 batches a round
        assert rounds == [4, 56]


class SlowProvider(FakeProvider):
    """Each document call takes 50 ms (a model's run, the GIL released) and is timed."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[float, float]] = []

    def _embed_batch(self, texts, input_type):
        if input_type == "document":
            t = time.perf_counter()
            time.sleep(0.05)
            self.calls.append((t, time.perf_counter()))
        return super()._embed_batch(texts, input_type)


def rounds_project(tmp_path: Path, monkeypatch, n: int = 20) -> Path:
    """n notes embedded a batch of 4 a round."""
    from saipling.indexing import embed_phase as index_embed

    monkeypatch.setattr(index_embed, "ROUND_SECONDS", 1e-3)  # a batch a round
    root = make_project(tmp_path, {f"n{i:02d}.md": f"# Note {i}\n\nThe lantern number {i} glows.\n" for i in range(n)})
    age(root)
    return root


def test_a_round_is_stored_while_the_model_embeds_the_next(tmp_path: Path, monkeypatch) -> None:
    """The embedding phase stores a round's vectors (a thread) while the provider embeds the next round: a
    first index of the 13th Age vault left the local model idle ~0.33 s while rounds were stored."""
    from saipling.storage.sqlite.store import SqliteStore as Store

    root = rounds_project(tmp_path, monkeypatch)
    stores: list[tuple[str, bool]] = []
    real = Store.set_vectors
    began = threading.Condition()
    calls = [0]  # model calls begun

    def timed(self, items, model):
        real(self, items, model)
        k = len(stores)  # round k: has the model begun round k + 1 before this store ends? (the last: no round)
        with began:
            seen = began.wait_for(lambda: calls[0] >= k + 2, timeout=5 if k < 4 else 0)
        stores.append((threading.current_thread().name, seen))

    class Signalling(SlowProvider):
        def _embed_batch(self, texts, input_type):
            if input_type == "document":
                with began:
                    calls[0] += 1
                    began.notify_all()
            return super()._embed_batch(texts, input_type)

    monkeypatch.setattr(Store, "set_vectors", timed)
    provider = Signalling()
    with open_project(root, provider, batch_size=4) as project:
        s = project.index()
        assert s.embedded == 20 and project.store.count_unembedded() == 0
        assert project.store.stats().embedded_chunks == 20
    assert len(provider.calls) == len(stores) == 5
    assert all(name.startswith("saipling-store") for name, _ in stores)
    assert [seen for _, seen in stores] == [True, True, True, True, False]


def test_rounds_embedded_before_a_cancel_are_stored(tmp_path: Path, monkeypatch) -> None:
    import threading as th

    root = rounds_project(tmp_path, monkeypatch)
    cancel = th.Event()

    def progress(p) -> None:
        if p.phase == "embedding" and p.chunks_done >= 8:
            cancel.set()  # after the second round

    with open_project(root, SlowProvider(), batch_size=4) as project:
        s = project.index(progress=progress, cancel=cancel)
        assert s.cancelled and s.embedded == 8
        assert project.store.stats().embedded_chunks == 8  # the round held back when cancelled too
        assert project.store.count_unembedded() == 12


def test_a_round_that_cannot_be_stored_fails_the_run_in_its_thread(tmp_path: Path, monkeypatch) -> None:
    """A store error on the storing thread (a full disk) is raised in the run, as when it stored itself; the
    round stored before it stays, and the round embedded meanwhile is tried once more on the way out (with a
    paid provider it was paid for), nothing after it."""
    from saipling.errors import StorageFull
    from saipling.storage.sqlite.store import SqliteStore as Store

    root = rounds_project(tmp_path, monkeypatch)
    real, n = Store.set_vectors, [0]

    def second_fails(self, items, model):
        n[0] += 1
        if n[0] == 2:
            raise StorageFull("FullError: database or disk is full")  # (apsw's error as the backend maps it)
        real(self, items, model)

    monkeypatch.setattr(Store, "set_vectors", second_fails)
    with open_project(root, SlowProvider(), batch_size=4) as project:
        with pytest.raises(StorageFull):
            project.index()
        assert project.store.stats().embedded_chunks == 8  # rounds 1 and 3
    assert n[0] == 3


def test_a_provider_that_fails_within_a_round_stops_the_run_there(tmp_path: Path) -> None:
    """A failed provider call ends the embedding phase (keyword search only, `degraded` says why) whether it
    is a round's first call or a later one: what was embedded before is stored, nothing more is sent."""
    from saipling.errors import ProviderError

    class FailsOnThirdCall(FakeProvider):
        calls = 0

        def _embed_batch(self, texts, input_type):
            if input_type == "document":
                self.calls += 1
                if self.calls == 3:
                    raise ProviderError("bad request 400")
            return super()._embed_batch(texts, input_type)

    files = {f"n{i:03d}.md": f"# Note {i}\n\nThe lantern number {i} glows amber.\n" for i in range(120)}
    root = make_project(tmp_path, files)
    age(root)
    provider = FailsOnThirdCall()
    provider.batch_size = 4  # 4 texts a call; the second round asks for up to 16 calls
    with open_project(root, provider, batch_size=4) as project:
        s = project.index()
        assert provider.calls == 3 and s.embedded == 8 and "bad request 400" in (s.degraded or "")
        assert project.store.stats().embedded_chunks == 8  # the two batches before the failure are kept
        assert project.store.count_unembedded() == 112

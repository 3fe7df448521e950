"""A process's first search reads nothing proportional to the index beyond the vectors themselves (issue 34): the
chunks without a vector are counted on the loaded matrix, and the default role's visibility in a project where no
file sets one is no filter (storage/sqlite/filters.py FilterCache.passes_all; benchmarks/README.md S12)."""

# ruff: noqa: F811  (fixture imported, then requested as a parameter)
from __future__ import annotations

import json
from pathlib import Path

import apsw

from apiserver import FakeEmbeddingAPI, api_server, engine_options  # noqa: F401  (fixture)
from fixtures import make_project, open_project

FILES = {f"notes/n{i}.md": f"# Note {i}\n\nThe lantern {i} burns over the harbour wall at night.\n" for i in range(6)}


def test_a_fresh_process_counts_the_chunks_without_a_vector_on_its_matrix(
    tmp_path: Path, api_server: FakeEmbeddingAPI
) -> None:
    root = make_project(tmp_path, FILES)
    with open_project(root, **engine_options(api_server)) as p:
        p.index()
        total = p.status()["totalChunks"]
    conn = apsw.Connection(str(root / ".saipling" / "index.db"))
    conn.execute("DELETE FROM embedding_cache WHERE id = (SELECT min(id) FROM embedding_cache)")  # one vector lost
    conn.close()
    with open_project(root, **engine_options(api_server)) as fresh:  # a new process's view: nothing loaded
        found = fresh.search({"query": "a lantern at night", "mode": "semantic"})
        assert found["results"] and found["degraded"], found
        assert f"1 of {total} chunks have no embeddings" in found["degraded"]
        vectors = fresh.store._vectors
        assert vectors.unembedded_scans == 0  # (counted on the matrix the search loaded, not row by row in SQL)
        assert fresh.store._filters.scans == 0  # (the default role's `public`: no file sets another level)
        assert vectors.count_unembedded() == 1


def test_a_fresh_process_takes_the_fallback_calibration_kept_in_the_index(
    tmp_path: Path, api_server: FakeEmbeddingAPI
) -> None:
    """A model without a measured calibration is calibrated on the project (64 nearest-chunk searches: most of a
    cold search at 269k chunks and more): measured once, kept in the index, taken by the next process."""
    from saipling.retrieval import confidence

    files = {
        f"notes/n{i:02d}.md": f"# Note {i}\n\nThe lantern {i} burns over wall {i % 5} at night.\n" for i in range(30)
    }
    root = make_project(tmp_path, files)
    with open_project(root, **engine_options(api_server)) as p:
        p.index()
        first = confidence.vector_calibration(p)
    assert first is not None  # (30 embedded chunks: measured)
    confidence._fallbacks.clear()  # another process: nothing in memory
    with open_project(root, **engine_options(api_server)) as fresh:
        measured: list[int] = []
        real = fresh.store.nearest_other_file_cosines

        def counted(sample: int, seed: int = 0) -> tuple[int, list[float]]:
            measured.append(sample)
            return real(sample, seed)

        fresh.store.nearest_other_file_cosines = counted  # type: ignore[method-assign]
        assert fresh.search({"query": "a lantern at night", "mode": "semantic"})["results"]
        assert confidence.vector_calibration(fresh) == first
        assert measured == []
        # kept for the vectors' dimensions: the same model name at other dimensions measures again
        key = confidence.FALLBACK_META + fresh.provider.model
        kept = json.loads(fresh.store.get_meta(key) or "{}")
        assert kept["dims"] == fresh.store.vector_model()[1] and kept["n"] >= 30
        fresh.store.set_meta(key, json.dumps({**kept, "dims": kept["dims"] + 1}))
        confidence._fallbacks.clear()
        assert confidence.vector_calibration(fresh) == first
        assert measured == [confidence.FALLBACK_SAMPLE]


def test_the_kept_calibration_never_waits_for_another_processs_write(tmp_path: Path) -> None:
    """A search keeps its measured calibration only when the write lock is free: with another process's write
    transaction open, try_set_meta gives up at once (waiting would hold the store's lock, and every request of
    the server behind it, for the 10 s busy timeout) and writes nothing; once the lock is free it writes."""
    import threading

    from saipling.storage.sqlite.store import SqliteStore

    store = SqliteStore.open(tmp_path / "index.db")
    other = apsw.Connection(str(tmp_path / "index.db"))
    try:
        other.execute("BEGIN IMMEDIATE")
        answered = threading.Event()
        got: list[bool] = []

        def keep() -> None:
            got.append(store.try_set_meta("fallback_calibration:m", '{"n": 1}'))
            answered.set()

        threading.Thread(target=keep, daemon=True).start()
        assert answered.wait(5), "try_set_meta waited for the other process's transaction"
        assert got == [False]
        other.execute("ROLLBACK")
        assert store.get_meta("fallback_calibration:m") is None
        assert store.try_set_meta("fallback_calibration:m", '{"n": 2}') is True
        assert store.get_meta("fallback_calibration:m") == '{"n": 2}'
    finally:
        other.close()
        store.close()

"""A process's first search reads nothing proportional to the index beyond the vectors themselves (issue 34): the
chunks without a vector are counted on the loaded matrix, and the default role's visibility in a project where no
file sets one is no filter (storage/sqlite/filters.py FilterCache.passes_all; benchmarks/README.md S12)."""

# ruff: noqa: F811  (fixture imported, then requested as a parameter)
from __future__ import annotations

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

"""`saipling export` / `saipling import`: an index moves between backends (SQLite file -> PostgreSQL workspace and
back) with its vectors, without embedding anything again; a file that is not an export is refused, nothing
written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fixtures import need_local_model, open_project, saipling_project

pytest.importorskip("psycopg")

SAIPLING = [sys.executable, "-m", "saipling"]


def cli(*args: str, store: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAIPLING_")}
    env |= {"SAIPLING_PROVIDER": "local"} | ({"SAIPLING_STORE": store} if store else {})
    return subprocess.run([*SAIPLING, *args], env=env, capture_output=True, text=True, timeout=300)


def _vectors(store) -> dict[str, np.ndarray]:
    ids, mat = store.vector_matrix()
    hashes = {i: h for i, (h, _hp, _t) in store.chunk_texts([int(i) for i in ids]).items()}
    return {hashes[int(i)]: np.asarray(row, dtype=np.float32) for i, row in zip(ids, mat, strict=True)}


def test_export_then_import_moves_vectors_without_embedding(tmp_path: Path, pg_url: str) -> None:
    need_local_model()
    root = saipling_project(tmp_path)
    done = cli("index", str(root), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["embedded"] > 0
    out = tmp_path / "vectors.jsonl.gz"
    exported = cli("export", str(out), "--root", str(root), "--json")
    assert exported.returncode == 0, exported.stderr
    assert json.loads(exported.stdout)["vectors"] > 0

    imported = cli("import", str(out), "--root", str(root), "--json", store=pg_url)
    assert imported.returncode == 0, imported.stderr
    summary = json.loads(imported.stdout)
    assert summary["embedded"] == 0 and summary["reused"] == summary["chunks"] > 0

    with open_project(root, "local") as lite, open_project(root, "local", store=pg_url) as pg:
        assert pg.store.backend == "postgresql"
        want, got = _vectors(lite.store), _vectors(pg.store)
        assert want and set(got) == set(want)
        # the same vectors, to float32's last bits: PostgreSQL's side may differ from the file's by an ulp (a round
        # to 5 decimals, compared exactly, failed on one element of 4,608 that sat on a rounding boundary)
        worst = max(float(np.abs(got[h] - want[h]).max()) for h in want)
        assert worst <= 1e-6, worst
        for q in ("a storm at the lighthouse", "who is Marcus"):
            a = [r["filePath"] for r in lite.search({"query": q, "mode": "semantic", "maxResults": 3})["results"]]
            b = [r["filePath"] for r in pg.search({"query": q, "mode": "semantic", "maxResults": 3})["results"]]
            assert a and a == b


def test_import_refuses_a_file_that_is_not_an_export(tmp_path: Path, pg_url: str) -> None:
    root = saipling_project(tmp_path)
    bogus = tmp_path / "notes.txt"
    bogus.write_text("hello")
    done = cli("import", str(bogus), "--root", str(root), store=pg_url)
    assert done.returncode != 0
    assert "not a saipling vector export" in done.stderr or "cannot read" in done.stderr
    with open_project(root, store=pg_url) as pg:
        assert pg.store.file_states() == {}  # nothing indexed, nothing written

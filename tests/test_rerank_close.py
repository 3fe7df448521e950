"""Closing a local reranker never waits for a model load in progress on its worker (exit, a settings change)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from saipling.retrieval.rerank import LocalReranker


def test_close_does_not_wait_for_a_load(tmp_path: Path) -> None:
    (tmp_path / "model.onnx").write_bytes(b"")
    (tmp_path / "tokenizer.json").write_text("{}")
    reranker = LocalReranker(tmp_path)
    loading = threading.Event()

    def slow_load() -> None:
        with reranker._lock:  # what `_load` holds while a large model loads
            loading.set()
            time.sleep(3)

    threading.Thread(target=slow_load, daemon=True).start()
    assert loading.wait(5)
    t0 = time.monotonic()
    reranker.close()
    assert time.monotonic() - t0 < 1.0


SLOW = """
import time
from pathlib import Path
from saipling.retrieval.rerank import LocalReranker
from saipling.errors import ProviderTimeout
r = LocalReranker(Path({folder!r}))
r._scores = lambda q, d: (time.sleep(30), [0.0] * len(d))[1]
try:
    r.score("q", ["a", "b"], time.monotonic() + 0.2)
except ProviderTimeout:
    print("given up")
"""


def test_a_run_given_up_at_the_budget_does_not_hold_up_exit(tmp_path: Path) -> None:
    """A CLI search answered at the budget ends then, not when the cross-encoder finishes."""
    import os
    import subprocess
    import sys

    (tmp_path / "model.onnx").write_bytes(b"")
    (tmp_path / "tokenizer.json").write_text("{}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    t0 = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", SLOW.format(folder=str(tmp_path))], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.stdout.strip() == "given up", out.stderr
    assert time.monotonic() - t0 < 15

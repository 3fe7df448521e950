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

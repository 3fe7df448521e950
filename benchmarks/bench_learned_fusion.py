"""A learned fusion replayed beside the shipped rule (issue 31, benchmarks/README.md row F17): LambdaMART
(LightGBM's lambdarank) over each hybrid candidate's parts, trained on some captures and scored on others.

The question: does a ranker that learns how much each part counts from the evidence a candidate and its query have
(the same signals retrieval/fusion.py reads by hand, and a few more) hold on questions it was not trained on? It is
trained on SciFact train and the original dev sets, then scored on the blind sets (written without any engine), and
each training set is also scored by a ranker trained on the others (leave one set out).

Per candidate: the shipped fused score (0.6 x vector z + its keyword weight x keyword z), the vector z, the keyword
z, the cosine, its coverage of the query's idf mass (postings and live, and over the best candidate's), its rank in
each list, whether the keyword side holds it, its shipped keyword weight; per query: coverage, agreement, the
query's keyword weight (F8), term count, the largest idf, each list's gap between its first two, the top cosine.
Label: the candidate's file is relevant (SciFact's grade; a dev question's evidence file).

    pip install lightgbm   (a benchmark-only dependency; the engine does not use it)
    python benchmarks/bench_learned_fusion.py --train train.pkl --train ficfull.pkl --train nodejs.pkl \
        --train 13th-age.pkl --test fiction-blind.pkl --test nodejs-blind.pkl --test 13th-age-blind.pkl

The captures are bench_parts_replay.py's, with bench_keyword_replay.py's extras and postings (`check` fills them).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_parts_replay as pr  # noqa: E402
import bench_term_replay as tr  # noqa: E402

Item = dict[str, Any]  # one query: its prep, coverages, shipped weights and label


def items_of(files: list[str]) -> tuple[list[tuple[pr.Corpus, list[Item]]], tr.Targets]:
    _loaded, prepared, live_m = tr._loaded_with_live(files)
    rule = tr.shipped_rule(live_m)
    out = []
    for c, queries in prepared:
        items = []
        for q, p, m, held, ts in queries:
            meta = q["meta"]
            names = [c.fnames[f] for f in p["fid"]]
            rel = meta.get("rel") or {meta["file"]: 1}
            wq = pr.f8(p["cov"], p["agr"])
            w = np.broadcast_to(np.asarray(rule(tr.Ctx(p, m, held, ts["idf"], wq, ts["df"])), dtype=float), m.shape)
            y = np.array([rel.get(n, 0) for n in names], dtype=int)
            items.append({"q": q, "p": p, "m": m, "live": live_m[id(p)], "wq": wq, "w": w.copy(), "y": y, "ts": ts})
        out.append((c, items))
    return out, tr.Targets(prepared)


def features(it: Item) -> np.ndarray:
    p, m, ts = it["p"], it["m"], it["ts"]
    vz, lex, n = p["vz"], p["lex"], len(p["vz"])

    def ranks(x: np.ndarray) -> np.ndarray:
        r = np.empty(n)
        r[np.argsort(-x, kind="stable")] = np.arange(n)
        return np.log1p(r)

    def gap(x: np.ndarray) -> float:
        s = np.sort(x)
        return float(s[-1] - s[-2]) if n > 1 else 0.0

    per_query = [p["cov"], p["agr"], it["wq"], len(ts["idf"]), float(ts["idf"].max()) if len(ts["idf"]) else 0.0]
    per_query += [gap(lex), gap(vz), float(p["cos"].max())]
    per_candidate = [0.6 * vz + it["w"] * lex, vz, lex, p["cos"], m, m / max(float(m.max()), 1e-9), it["live"]]
    per_candidate += [ranks(lex), ranks(vz), p["in_kw"].astype(float), it["w"]]
    return np.column_stack([*per_candidate, *(np.full(n, f) for f in per_query)])


def fused(it: Item) -> bool:
    return bool(it["p"]["use_lex"] and it["p"]["use_vec"])


def train(sets: list[tuple[pr.Corpus, list[Item]]], args: argparse.Namespace) -> Any:
    import lightgbm as lgb

    xs, ys, groups, weights = [], [], [], []
    for _c, items in sets:
        for it in items:
            if not fused(it) or it["y"].max() <= 0:
                continue
            xs.append(features(it))
            ys.append(it["y"])
            groups.append(len(it["y"]))
            weights.append(1.0 if "rel" in it["q"]["meta"] else args.dev_weight)  # (a dev question vs a claim)
    params = {
        "objective": "lambdarank",
        "learning_rate": 0.05,
        "num_leaves": args.leaves,
        "min_data_in_leaf": 50,
        "lambdarank_truncation_level": 20,
        "feature_fraction": 0.8,
        "bagging_fraction": 0.8,
        "bagging_freq": 1,
        "seed": 1,
        "verbose": -1,
    }
    data = lgb.Dataset(np.vstack(xs), np.concatenate(ys), group=groups, weight=np.repeat(weights, groups))
    return lgb.train(params, data, num_boost_round=args.rounds)


def evaluate(sets: list[tuple[pr.Corpus, list[Item]]], model_of: Any) -> dict[tuple[str, str], list[float]]:
    """Per (set, kind): each query's quality with the model's scores (None: the shipped rule)."""
    res: dict[tuple[str, str], list[float]] = {}
    for c, items in sets:
        model = model_of(c.name)
        for it in items:
            p = it["p"]
            if model is None or not fused(it):
                order = tr.fuse_with(p, it["w"])
            else:
                s = model.predict(features(it))
                order = pr._distinct(p["fid"][np.lexsort((-s, ~p["exact"]))[: p["max_results"]]], 10)
            res.setdefault((c.name, it["q"]["meta"].get("kind", "")), []).append(pr.quality(c, it["q"], order))
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", action="append", required=True, help="a capture to train on (repeatable)")
    ap.add_argument("--test", action="append", default=[], help="a capture to score only (repeatable)")
    ap.add_argument("--leaves", type=int, action="append", help="trees' leaves (repeatable; default 3 and 7)")
    ap.add_argument("--rounds", type=int, action="append", help="boosting rounds (repeatable; default 100, 300)")
    ap.add_argument("--dev-weight", type=float, action="append", help="a dev question's weight against a claim's")
    args = ap.parse_args()
    try:
        import lightgbm  # noqa: F401
    except ImportError:
        raise SystemExit("this benchmark needs LightGBM: pip install lightgbm") from None
    train_sets, t_train = items_of(args.train)
    test_sets, t_test = items_of(args.test) if args.test else ([], None)

    def show(label: str, res: dict[tuple[str, str], list[float]]) -> None:
        for targets, sets in ((t_train, train_sets), (t_test, test_sets)):
            if targets is None:
                continue
            names = {c.name for c, _ in sets}
            if not (mine := {k: v for k, v in res.items() if k[0] in names}):
                continue
            lines, missed, _sci = targets.check(mine)
            for line in lines:
                print(f"{label} | {line}")
            print(f"{label}: {len(missed)} missed: {', '.join(missed) or '-'}", flush=True)

    show("shipped", evaluate(train_sets + test_sets, lambda _name: None))
    for leaves in args.leaves or [3, 7]:
        for rounds in args.rounds or [100, 300]:
            for dev_weight in args.dev_weight or [1.0, 4.0]:
                run = argparse.Namespace(leaves=leaves, rounds=rounds, dev_weight=dev_weight)
                label = f"lambdarank leaves {leaves} rounds {rounds} dev weight {dev_weight:g}"
                model = train(train_sets, run)
                show(label, evaluate(train_sets + test_sets, lambda _name, model=model: model))
                held_out = {c.name: train([s for s in train_sets if s[0] is not c], run) for c, _ in train_sets}
                show(f"{label}, each training set by the others", evaluate(train_sets, held_out.get))


if __name__ == "__main__":
    main()

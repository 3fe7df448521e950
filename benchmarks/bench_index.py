"""Benchmarks 3 and 4: indexing the fiction corpus from scratch, a no-op reindex, and one edited paragraph.

  3. Full index of a fresh copy of ../shared/corpora/fiction-chapters (1,129 chapters): total time split into
     scan, read, chunk, embed, store (IndexSummary.timings) and the rest; pipeline overhead = total / embed.
     Target with the local provider: <= 1.15.
  4. No-op reindex (nothing changed): time as a fraction of the full index (target <= 2%) and files_read
     (must be 0). Then one paragraph of one chapter is edited: the chunks re-embedded must be exactly the
     chunks whose text changed (we record every text handed to the provider). Finally the edit is reverted:
     the old vectors come back from the embedding cache (0 embedded).

The provider is `local` when saipling.embeddings.local_available(), else `none` (then the embed phase is empty,
the overhead ratio is not defined and the edit check reports the chunks that would be embedded).

    python benchmarks/bench_index.py                    # full corpus (several minutes with local on 2 cores)
    python benchmarks/bench_index.py --quick            # 6 chapters with local (40 with none)
    python benchmarks/bench_index.py --provider none    # force keyword-only

With a full run the indexed copy (edit reverted) is kept as the cache bench_search.py reuses, when absent.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchutil as bu  # noqa: E402

from saipling.project import Project  # noqa: E402

EDIT_MARKER = "Meanwhile a grey heron rose from the reeds and flew, unhurried, towards the distant mill."
QUICK_FILES = {
    "none": 40,
    "local": 6,
}  # the local model embeds ~5-30 chunks/s on this machine: keep --quick short


class EmbedRecorder:
    """Wraps provider.embed_documents on the instance: counts calls and keeps every text embedded."""

    def __init__(self, provider) -> None:
        self.keep = False  # keep the texts (only around the edit: the full index would hold them all in memory)
        self.calls = 0
        self.texts: list[str] = []
        self.count = 0
        self.seconds = 0.0
        inner = getattr(provider, "embed_documents", None)
        if inner is None:
            return

        def embed_documents(texts):
            t0 = time.perf_counter()
            try:
                return inner(texts)
            finally:
                self.seconds += time.perf_counter() - t0
                self.calls += 1
                self.count += len(texts)
                if self.keep:
                    self.texts += list(texts)

        provider.embed_documents = embed_documents

    def reset(self, keep: bool = False) -> None:
        self.calls, self.texts, self.count, self.seconds, self.keep = 0, [], 0, 0.0, keep


def pick_paragraph(root: Path) -> tuple[Path, int, int]:
    """A chapter near the middle of the corpus and a prose paragraph near its middle: (file, start, end) lines."""
    files = sorted(root.rglob("*.md"))
    for f in files[len(files) // 2 :] + files[: len(files) // 2]:
        lines = f.read_text(encoding="utf-8").split("\n")
        paras: list[tuple[int, int]] = []
        start = None
        for i, line in enumerate(lines + [""]):
            if line.strip() and start is None:
                start = i
            elif not line.strip() and start is not None:
                text = " ".join(lines[start:i])
                if len(text) > 300 and not text.lstrip().startswith(("#", "---", ">", "|")):
                    paras.append((start, i))
                start = None
        if len(paras) >= 5:
            a, b = paras[len(paras) // 2]
            return f, a, b
    raise SystemExit("no chapter with a prose paragraph found")


def chunk_map(project: Project, rel: str) -> dict[str, dict]:
    return {c.content_hash: c for c in project.store.chunks_for_path(rel)}


def edit_sweep(project: Project, root: Path, n: int, seed: int = 7) -> None:
    """How local is a one-paragraph edit? Chunk n random (chapter, paragraph) pairs before/after appending one
    sentence (chunker only, with the indexer's limits for this provider) and count the chunks whose text changed."""
    import random
    import statistics

    from saipling.files.metadata import extract_metadata
    from saipling.markdown.chunker import chunk_document

    rng = random.Random(seed)
    files = sorted(root.rglob("*.md"))
    limits = project.indexer.limits()
    counter = getattr(project.indexer, "token_counter", None)
    count = counter() if callable(counter) else None  # the indexer's own token counter (model word pieces)
    extra = {"count_tokens": count} if count is not None else {}
    changed, totals, tail = [], [], []
    for f in rng.sample(files, min(n, len(files))):
        rel = f.relative_to(root).as_posix()
        text = f.read_text(encoding="utf-8")
        lines = text.split("\n")
        prose = [i for i, line in enumerate(lines) if len(line) > 200 and not line.lstrip().startswith(("#", ">", "|"))]
        if not prose:
            continue
        i = rng.choice(prose)
        edited = "\n".join(lines[:i] + [lines[i].rstrip() + " " + EDIT_MARKER] + lines[i + 1 :])
        old = chunk_document(text, extract_metadata(rel, text), limits, **extra)
        new = chunk_document(edited, extract_metadata(rel, edited), limits, **extra)
        old_h = {c.content_hash for c in old}
        diff = [c for c in new if c.content_hash not in old_h]
        changed.append(len(diff))
        totals.append(len(new))
        after = [c for c in new if c.start_line > i + 1]  # chunks wholly after the edited line
        tail.append(sum(1 for c in after if c.content_hash not in old_h) / len(after) if after else 0.0)
    if not changed:
        return
    print()
    print(
        f"4c. Edit locality (chunker only, {len(changed)} random chapters, one sentence appended to one paragraph,"
        f" limits max/target/overlap = {limits.max_tokens}/{limits.target_tokens}/{limits.overlap_tokens} tokens)"
    )
    print(
        bu.table(
            [
                "chunks changed: median",
                "p90",
                "max",
                "chunks per file: median",
                "share of later chunks changed: median",
            ],
            [
                (
                    statistics.median(changed),
                    bu.percentile(changed, 90),
                    max(changed),
                    statistics.median(totals),
                    f"{100 * statistics.median(tail):.0f}%",
                )
            ],
        )
    )
    print("   an ideal chunker changes 1 chunk (2 with overlap); every changed chunk is one more embedding call")


def main() -> None:
    ap = bu.parser(__doc__.split("\n")[0])
    ap.add_argument("--provider", default="auto", help="local | none | auto (local when installed)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary copy and print its path")
    args = ap.parse_args()
    bu.banner("bench_index: full index, no-op reindex, one edited paragraph", args.quick)
    if not bu.need_shared(bu.FICTION, "fiction corpus (benchmarks 3 and 4)"):
        return
    provider = bu.provider_choice(args.provider)
    if provider == "none":
        print("   provider none: the local provider is not installed (saipling.embeddings.local_available() is False);")
        print("   the embed phase is empty, so the overhead target is not measurable in this run.")
    tmp = Path(tempfile.mkdtemp(prefix="saipling-bench-index-"))
    root = tmp / "fiction"
    n_files = bu.copy_corpus(bu.FICTION, root, QUICK_FILES.get(provider, 6) if args.quick else None)
    print(
        f"   copied {n_files} chapters to {root}; indexing from scratch with provider {provider} ...",
        flush=True,
    )

    project = Project.open(root, overrides={"provider": provider})
    rec = EmbedRecorder(project.provider)
    wall, full = bu.timed(lambda: project.index(progress=bu.progress_printer("full index")))
    mem = bu.proc_status_mb()
    t = full.timings
    phases = ["scan", "read", "chunk", "embed", "store"]
    accounted = sum(t.get(p, 0.0) for p in phases)
    rows = [(p, bu.fmt_s(t.get(p, 0.0)), f"{100 * t.get(p, 0.0) / full.seconds:.1f}%") for p in phases]
    rows.append(
        (
            "other (hashing, metadata, cache lookups, model load, commits)",
            bu.fmt_s(full.seconds - accounted),
            f"{100 * (full.seconds - accounted) / full.seconds:.1f}%",
        )
    )
    rows.append(("total (IndexSummary.seconds)", bu.fmt_s(full.seconds), "100%"))
    print()
    print(
        f"3. Full index: {full.files} files, {full.chunks} chunks, {full.embedded} embedded "
        f"({full.embedded / max(t.get('embed', 0) or 1e-9, 1e-9):.1f} chunks/s in the embed phase), "
        f"provider {project.provider.name}"
    )
    print(bu.table(["phase", "seconds", "share"], rows))
    overhead = full.seconds / t["embed"] if t.get("embed") else None
    if overhead is not None:
        print(
            f"pipeline overhead = total / embed = {full.seconds:.1f} / {t['embed']:.1f} = {overhead:.3f} "
            f"(target <= 1.15): {bu.verdict(overhead <= 1.15)}"
        )
        print(f"   embed_documents calls {rec.calls}, {rec.count} texts, {rec.seconds:.1f} s inside the provider")
    else:
        print("pipeline overhead: n/a (no embedding with provider none); target <= 1.15 needs the local provider")
    print(
        f"   wall time around project.index(): {wall:.1f} s; this process right after: VmRSS "
        f"{mem.get('VmRSS', 0):.0f} MB,"
        f" VmHWM {mem.get('VmHWM', 0):.0f} MB (bench_memory.py measures it in clean subprocesses)"
    )

    # 4a. no-op reindex: in the same process, 3 times, and once from a fresh Project (like a new CLI run)
    rec.reset()
    noops = []
    for _ in range(3):
        noops.append(project.index())
    project.close()
    t0 = time.perf_counter()
    fresh = Project.open(root, overrides={"provider": provider})
    open_s = time.perf_counter() - t0
    fresh_rec = EmbedRecorder(fresh.provider)
    cold = fresh.index()
    noop_s = bu.median([s.seconds for s in noops])
    frac = noop_s / full.seconds
    print()
    print("4. No-op reindex (nothing changed)")
    print(
        bu.table(
            ["run", "seconds", "fraction of full index", "files_read", "embedded", "embed calls"],
            [
                (
                    "same process, median of 3",
                    f"{noop_s:.3f}",
                    f"{100 * frac:.2f}%",
                    max(s.files_read for s in noops),
                    max(s.embedded for s in noops),
                    rec.calls,
                ),
                (
                    f"fresh Project (open {open_s:.2f} s not counted)",
                    f"{cold.seconds:.3f}",
                    f"{100 * cold.seconds / full.seconds:.2f}%",
                    cold.files_read,
                    cold.embedded,
                    fresh_rec.calls,
                ),
            ],
        )
    )
    ok = frac <= 0.02 and cold.seconds / full.seconds <= 0.02 and all(s.files_read == 0 for s in [*noops, cold])
    print(f"target: <= 2% of the full index and files_read == 0: {bu.verdict(ok)}")

    # 4b. one edited paragraph
    project = fresh
    rec = fresh_rec
    path, a, b = pick_paragraph(root)
    rel = path.relative_to(root).as_posix()
    original = path.read_text(encoding="utf-8")
    lines = original.split("\n")
    before = chunk_map(project, rel)
    lines[b - 1] = lines[b - 1].rstrip() + " " + EDIT_MARKER
    path.write_text("\n".join(lines), encoding="utf-8")
    rec.reset(keep=True)
    edit = project.index()
    after = chunk_map(project, rel)
    new_hashes = [h for h in after if h not in before]
    changed = sorted((after[h] for h in new_hashes), key=lambda c: c.chunk_index)
    embedded_texts = rec.texts
    with_marker = sum(1 for x in embedded_texts if "grey heron" in x)
    print()
    print(
        f"4b. Edited one paragraph of {rel} (lines {a + 1}-{b}; {len(before)} chunks before, {len(after)} after): "
        f"appended one sentence"
    )
    print(
        bu.table(
            ["chunk_index", "lines", "heading", "tokens", "text changed", "contains the edit"],
            [
                (
                    c.chunk_index,
                    f"{c.start_line}-{c.end_line}",
                    (c.heading_path or "")[:40],
                    c.token_count,
                    "yes",
                    "yes" if EDIT_MARKER in (c.text or "") else "no (overlap/shifted)",
                )
                for c in changed
            ],
        )
    )
    print(
        f"files_read {edit.files_read}, chunks whose text changed {len(changed)}, embedded {edit.embedded}, "
        f"embed_documents calls {rec.calls}, texts sent {len(embedded_texts)} ({with_marker} contain the edit), "
        f"reused from cache {edit.reused}, {edit.seconds:.3f} s"
    )
    if provider == "none":
        print(
            "target (exactly the changed chunks re-embedded): n/a with provider none; the chunks above are the"
            " ones a provider would embed"
        )
    else:
        ok = edit.embedded == len(changed) == len(embedded_texts) and edit.files_read == 1
        print(f"target: exactly the changed chunks re-embedded ({len(changed)}): {bu.verdict(ok)}")

    # revert: the old chunks' vectors come back from the embedding cache
    path.write_text(original, encoding="utf-8")
    rec.reset()
    revert = project.index()
    print(
        f"revert the edit: files_read {revert.files_read}, embedded {revert.embedded}, "
        f"reused from cache {revert.reused}, {revert.seconds:.3f} s"
    )
    edit_sweep(project, root, 10 if args.quick else 50)
    project.close()

    cache = bu.CACHE_ROOT / f"fiction-{provider}"
    if not args.quick and not (cache / ".bench-complete").exists() and not args.keep:
        if cache.exists():
            shutil.rmtree(cache)
        cache.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(root), str(cache))
        (cache / ".bench-complete").write_text(f"{full.files} files, {full.chunks} chunks, provider {provider}\n")
        print(f"   kept the index as {cache} for bench_search.py")
    if args.keep:
        print(f"   kept {root}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

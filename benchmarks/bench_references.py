"""`textDocument/references` latency on the fiction corpus: p50/p95 per entity, in-process
(`retrieval.entities.references`, what the LSP handler calls) and as an LSP round trip to a real `saipling serve` (pygls
client over stdio), timed alternately; with how many files the keyword index proposed and how many mentions the exact
scan kept.

The corpus (1,129 chapters) is copied to a temp folder with three entity files added (a frequent main
character, a very common first name, a place named in most frontmatter) and indexed keyword-only
(provider none: references use the keyword index only). The copy is reused on later runs.

    python benchmarks/bench_references.py [--quick] [--rounds N]
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import time
from pathlib import Path

from lsprotocol import types

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchutil as bu  # noqa: E402
from bench_lsp import start_server, stop_pygls  # noqa: E402

from saipling.project import Project  # noqa: E402
from saipling.retrieval import entities  # noqa: E402
from saipling.storage.base import KeywordQuery  # noqa: E402

# ../shared, or where SAIPLING_SHARED points (a worktree outside the dev checkout)
FICTION = Path(os.environ.get("SAIPLING_SHARED") or bu.SHARED) / "corpora" / "fiction-chapters"

PROFILES = {
    "characters/emma-woodhouse/profile.md": "---\nname: Emma Woodhouse\ntype: character\n"
    "aliases: [Emma, Miss Woodhouse]\n---\n# Emma Woodhouse\n\nHandsome, clever and rich.\n",
    "characters/john/profile.md": "---\nname: John\ntype: character\n---\n# John\n\nA very common name.\n",
    "world/london.md": "---\nname: London\ntype: place\n---\n# London\n\nThe city.\n",
}


def prepare(root: Path) -> None:
    done = root / ".bench-ready"
    if done.exists():
        return
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(FICTION, root)
    for rel, text in PROFILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    t0 = time.perf_counter()
    project = Project.open(root, overrides={"provider": "none"})
    try:
        s = project.index()
    finally:
        project.close()
    print(f"   indexed {s.files} files ({s.chunks} chunks) keyword-only in {time.perf_counter() - t0:.0f} s")
    done.write_text("ok")


async def measure(root: Path, rounds: int) -> None:
    project = Project.open(root, overrides={"provider": "none"})
    client = await start_server(root, {"provider": "none"})
    try:
        index = entities.entity_index(project)
        read = entities.disk_reader(project.root)
        print(
            f"   {'entity':<16} {'candidates':>10} {'files':>6} {'mentions':>8}"
            f" {'p50 ms':>8} {'p95 ms':>8} {'LSP p50':>8} {'LSP p95':>8}"
        )
        for rel in PROFILES:
            entity = index.for_path(rel)
            assert entity is not None, rel
            candidates = len(project.store.keyword_paths(KeywordQuery.phrases(entity.names)))
            found = entities.references(project, [entity], read)  # warm-up (page cache)
            first = found[0].mentions[0]  # ask from the first mention (BMP text: code points = UTF-16 units)
            params = types.ReferenceParams(
                text_document=types.TextDocumentIdentifier((root / found[0].path).as_uri()),
                position=types.Position(first.line, first.start),
                context=types.ReferenceContext(include_declaration=False),
            )
            mentions = sum(len(f.mentions) for f in found)
            remote = await client.protocol.send_request_async(types.TEXT_DOCUMENT_REFERENCES, params)
            assert len(remote) == mentions, (len(remote), mentions)
            local_t, remote_t = [], []
            for _ in range(rounds):  # alternating: machine load hits both alike
                local_t.append(bu.timed(lambda e=entity: entities.references(project, [e], read))[0])
                t0 = time.perf_counter()
                await client.protocol.send_request_async(types.TEXT_DOCUMENT_REFERENCES, params)
                remote_t.append(time.perf_counter() - t0)
            print(
                f"   {entity.name:<16} {candidates:>10} {len(found):>6} {mentions:>8}"
                f" {bu.fmt_ms(bu.median(local_t)):>8} {bu.fmt_ms(bu.percentile(local_t, 95)):>8}"
                f" {bu.fmt_ms(bu.median(remote_t)):>8} {bu.fmt_ms(bu.percentile(remote_t, 95)):>8}"
            )
    finally:
        await stop_pygls(client)
        project.close()


def main() -> None:
    p = bu.parser(__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=0, help="timed calls per entity and side (default 30, --quick 5)")
    args = p.parse_args()
    bu.banner("references latency (fiction corpus, keyword index)", args.quick)
    if not bu.need_shared(FICTION, "fiction corpus"):
        return
    root = bu.CACHE_ROOT / "references-fiction"
    prepare(root)
    asyncio.run(measure(root, args.rounds or (5 if args.quick else 30)))


if __name__ == "__main__":
    main()

"""Helpers for building small projects on disk in tests (tmp_path), shared by every test module.

    from fixtures import make_project, saipling_project, open_project

    root = make_project(tmp_path, {"notes/a.md": "# A\\n\\nText.", "img.png": b"\\x89PNG..."})
    root = saipling_project(tmp_path)           # a small SAiPLING-style novel project
    with open_project(root) as project: ...     # Project.open(root, overrides={"provider": "none"})

Text content is written byte for byte as UTF-8 (no newline translation: "\\r\\n" stays CRLF on disk);
bytes are written as given.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

# ../shared next to the repository (SAIPLING_SHARED points elsewhere, e.g. from a worktree)
SHARED = Path(os.environ.get("SAIPLING_SHARED") or Path(__file__).resolve().parents[1].parent / "shared")
FICTION_CORPUS = SHARED / "corpora" / "fiction-chapters"
SRD_CORPUS = SHARED / "corpora" / "13th-age-srd"


def write_file(root: Path, rel: str, content: str | bytes) -> Path:
    """Write `content` to `root/rel` (parents created); returns the absolute path."""
    path = Path(root) / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    return path


def make_project(tmp_path: Path, files: Mapping[str, str | bytes], name: str = "project") -> Path:
    """A project folder `tmp_path/name` holding `files` (relative path -> text or bytes)."""
    root = Path(tmp_path) / name
    root.mkdir(parents=True, exist_ok=True)
    for rel, content in files.items():
        write_file(root, rel, content)
    return root


def bump_mtime(path: Path, seconds: float = 5.0) -> int:
    """Move a file's mtime forward without touching its content; returns the new mtime in ns."""
    st = path.stat()
    new = st.st_mtime_ns + int(seconds * 1e9)
    os.utime(path, ns=(st.st_atime_ns, new))
    return new


def words(n: int, seed: int = 0) -> str:
    """`n` space-separated pseudo-words (deterministic), no sentence punctuation, no newlines."""
    vocab = [
        "harbor",
        "lantern",
        "marcus",
        "salt",
        "rope",
        "storm",
        "quiet",
        "gull",
        "ledger",
        "tide",
        "brass",
        "anchor",
        "winter",
        "signal",
        "orchard",
        "copper",
    ]
    return " ".join(vocab[(i * 7 + seed) % len(vocab)] + str((i + seed) % 97) for i in range(n))


MARCUS_PROFILE = """---
name: Marcus Cole
type: character
aliases:
  - Marc
  - The Ferryman
status: draft
---
# Marcus Cole

Marcus runs the night ferry across the harbor and keeps a ledger of every crossing.

## Background

### Childhood

He grew up above his father's chandlery, counting rope and listening to the gulls.

### The Storm

The winter storm that took his sister changed the way he reads the sky.

## Defining Flaw

He cannot let a debt stand, even one nobody else remembers.
"""

HARBOR = """---
name: Greyhaven Harbor
type: place
aliases: [Greyhaven, the Harbor]
---
# Greyhaven Harbor

A crescent of black stone around cold water; the lighthouse signal is green in winter.

## Docks

Fishing boats tie up along the north quay, the ferry at the south steps.
"""

SCENES = {
    1: "Marcus lights the lantern on the ferry and waits for the last passenger of the night.",
    2: "A stranger pays the fare with a copper coin stamped with the sister's initials.",
    3: "The storm returns; Marcus steers by the green signal and remembers the ledger.",
}

IDEAS = """# Ideas

- The ledger could be a cipher.
- What if the lighthouse keeper knew the sister?
"""


def saipling_project(tmp_path: Path, name: str = "novel") -> Path:
    """A small SAiPLING-style project: a character, a place, three scene drafts, notes, settings and a skill.

    Files: characters/marcus-cole/profile.md (frontmatter name + aliases), world/places/harbor.md,
    books/book-01/phase-5-bloom/ch-0{1,2,3}/scene-01.md, notes/ideas.md, .context_settings.json,
    skills/writer.toml.
    """
    files: dict[str, str | bytes] = {
        "characters/marcus-cole/profile.md": MARCUS_PROFILE,
        "world/places/harbor.md": HARBOR,
        "notes/ideas.md": IDEAS,
        ".context_settings.json": json.dumps({"notes/ideas.md": "exclude", "world\\places\\harbor.md": "force"}),
        "skills/writer.toml": (
            '[context.vector_search]\nenabled = true\nmode = "auto"\nmax_results = 5\n'
            "max_search_tokens = 15000\nfilter_entity_types = []\n"
        ),
    }
    for ch, text in SCENES.items():
        files[f"books/book-01/phase-5-bloom/ch-{ch:02d}/scene-01.md"] = f"# Chapter {ch}, Scene 1\n\n{text}\n"
    return make_project(tmp_path, files, name)


SAIPLING_MARKDOWN = [
    "books/book-01/phase-5-bloom/ch-01/scene-01.md",
    "books/book-01/phase-5-bloom/ch-02/scene-01.md",
    "books/book-01/phase-5-bloom/ch-03/scene-01.md",
    "characters/marcus-cole/profile.md",
    "notes/ideas.md",
    "world/places/harbor.md",
]


@contextlib.contextmanager
def open_project(
    root: Path, provider: Any = None, *, env: Mapping[str, str] | None = None, **overrides: Any
) -> Iterator[Any]:
    """`Project.open(root)` for a test, closed afterwards.

    `provider` is a provider name (default "none": keyword only) or a provider object. Settings come from
    `overrides` (SPEC 11 names, e.g. base_url=..., openai_api_key=...) over the project's config.toml; the
    environment is ignored unless `env` is given, so a developer's API keys never leak into a test.
    """
    from saipling.project import Project

    opts: dict[str, Any] = {"provider": provider if isinstance(provider, str) else "none"}
    opts.update(overrides)
    project = Project.open(
        root,
        env={} if env is None else env,
        overrides=opts,
        provider=None if isinstance(provider, str | None) else provider,
    )
    try:
        yield project
    finally:
        project.close()


def copy_corpus(src: Path, dest: Path) -> Path:
    """A writable copy of a (read-only) shared corpus, without any index it might hold."""
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns(".saipling"), symlinks=True)
    return dest


# -- retrieval tests (search, enrich, get, related, CLI) -----------------------------------------------------
RETRIEVAL_SCENES = {
    1: "Marcus lights the brass lantern on the ferry and waits for the last passenger of the night.",
    2: "A stranger pays the fare with a copper coin stamped with the sister's initials.",
    3: "The storm returns; Marcus steers by the green signal and remembers the ledger.",
    4: "Elena reads the tide tables aloud while the gulls circle the orchard wall.",
    5: "The zephyrine betrayal: the lighthouse keeper sold the ferry routes to the guild.",
}

ELENA_PRIVATE = """---
name: Elena Vance
type: character
visibility: private
---
# Elena Vance

Elena keeps a quillfeather journal that nobody else may read.
"""

TIDE_GUILD = """---
name: The Tide Guild
type: faction
---
# The Tide Guild

Merchants who own the harbor cranes and the copper weights of every scale.
"""

SKILLS = {
    "writer": '[context.vector_search]\nenabled = true\nmode = "auto"\nmax_results = 5\nmax_search_tokens = 15000\n',
    # min_relevance = 0: the tests using it check assembly with hash vectors, not relevance
    "always": '[context.vector_search]\nenabled = true\nmode = "always"\nmax_results = 3\nmin_relevance = 0\n',
    "never": '[context.vector_search]\nenabled = true\nmode = "never"\n',
    "disabled": '[context.vector_search]\nmode = "always"\n',
    "bare": "[context]\nfiles = []\n",
    "characters": '[context.vector_search]\nenabled = true\nmode = "always"\nfilter_entity_types = ["character"]\n',
}


def retrieval_project(tmp_path: Path, name: str = "novel", extra: Mapping[str, str | bytes] | None = None) -> Path:
    """A SAiPLING-style project for retrieval tests (a superset of `saipling_project`).

    characters/marcus-cole/profile.md, characters/elena-vance/profile.md (`visibility: private`, word
    "quillfeather"), world/places/harbor.md (force), world/factions/tide-guild.md,
    books/book-01/phase-5-bloom/ch-01..ch-05/scene-01.md (ch-05 holds the spoiler word "zephyrine"),
    books/book-02/phase-5-bloom/ch-01/scene-01.md (word "marigold"), notes/ideas.md (excluded, word
    "cipher"), notes/secret/plan.md (excluded through the backslash folder entry `notes\\secret\\`, word
    "wolfsbane"), .context_settings.json, skills/{writer,always,never,disabled,bare,characters}.toml, and
    .saipling/config.toml giving requests without a role the view of the `author` role (public + private):
    RETRIEVAL_CONFIG.
    """
    files: dict[str, str | bytes] = {
        "characters/marcus-cole/profile.md": MARCUS_PROFILE,
        "characters/elena-vance/profile.md": ELENA_PRIVATE,
        "world/places/harbor.md": HARBOR,
        "world/factions/tide-guild.md": TIDE_GUILD,
        "notes/ideas.md": IDEAS,
        "notes/secret/plan.md": "# Plan\n\nPoison the wolfsbane tea before the ferry leaves the harbor.\n",
        "books/book-02/phase-5-bloom/ch-01/scene-01.md": (
            "# Book Two, Chapter 1\n\nYears later the marigold fields burn along the harbor road.\n"
        ),
        ".context_settings.json": json.dumps(
            {"notes\\ideas.md": "exclude", "notes\\secret\\": "exclude", "world\\places\\harbor.md": "force"}
        ),
    }
    for ch, text in RETRIEVAL_SCENES.items():
        files[f"books/book-01/phase-5-bloom/ch-{ch:02d}/scene-01.md"] = f"# Chapter {ch}, Scene 1\n\n{text}\n"
    for skill, toml in SKILLS.items():
        files[f"skills/{skill}.toml"] = toml
    files[".saipling/config.toml"] = RETRIEVAL_CONFIG
    files.update(extra or {})
    return make_project(tmp_path, files, name)


RETRIEVAL_CONFIG = """[saipling]
defaultRole = "author"

[saipling.roles]
author = ["public", "private"]
public = ["public"]
"""


NOVEL_PROFILES = {
    "characters/mina-harker/profile.md": (
        "---\nname: Mina Harker\ntype: character\naliases: [Mina, Madam Mina]\n---\n# Mina Harker\n\n"
        "A schoolmistress who keeps a shorthand journal.\n"
    ),
    "characters/jonathan-harker/profile.md": (
        "---\nname: Jonathan Harker\ntype: character\naliases: [Jonathan]\n---\n# Jonathan Harker\n\n"
        "A solicitor sent to Transylvania.\n"
    ),
    "characters/count-dracula/profile.md": (
        "---\nname: Count Dracula\ntype: character\naliases: [Dracula, the Count]\n---\n# Count Dracula\n\n"
        "An old nobleman of the Carpathians.\n"
    ),
    "world/places/castle.md": "---\nname: Castle Dracula\ntype: place\n---\n# Castle Dracula\n\nA ruin on a crag.\n",
}

# chapter -> (pov, body); counted mentions are listed in NOVEL_MENTIONS
NOVEL_SCENES = {
    1: ("Jonathan Harker", "Jonathan reached the castle at night.\n\nThe Count met him at the door."),
    2: (
        "Jonathan",
        "Jonathan wrote to Mina. Jonathan's letter spoke of the Count's library.\n\n"
        "```\nMina in code does not count\n```\n\nThe word `Mina` in inline code does not count either.",
    ),
    3: (
        "Mina Harker",
        "Mina read the letter twice. MINA, she wrote, keep calm.\n\nMinal and Minastirith are not names.",
    ),
    4: ("Mina", "Madam Mina slept. The count of sheep was high; the Count was not."),
    5: ("Lucy", "Lucy walked by the sea alone and thought of nothing in particular."),
}

# entity path -> chapter -> mentions of it there (hand-checked against NOVEL_SCENES)
NOVEL_MENTIONS = {
    "characters/jonathan-harker/profile.md": {1: 1, 2: 2},
    "characters/mina-harker/profile.md": {2: 1, 3: 2, 4: 1},
    "characters/count-dracula/profile.md": {1: 1, 2: 1, 4: 1},
}


def novel_project(tmp_path: Path, name: str = "novel") -> Path:
    """A SAiPLING-layout novel: four profiles (characters/, world/) and five scenes
    books/book-01/phase-1-setup/ch-0N/scene-01.md, each with a frontmatter `pov` (NOVEL_SCENES)."""
    files: dict[str, str | bytes] = dict(NOVEL_PROFILES)
    for ch, (pov, body) in NOVEL_SCENES.items():
        files[f"books/book-01/phase-1-setup/ch-{ch:02d}/scene-01.md"] = (
            f"---\npov: {pov}\n---\n# Chapter {ch}\n\n{body}\n"
        )
    return make_project(tmp_path, files, name)


def need_local_model() -> None:
    """Skip the calling test when the bundled local embedding model is not installed."""
    import pytest

    from saipling.embeddings import local_available

    if not local_available():
        pytest.skip("the local embedding model is not installed")


def file_record(path: str, size: int = 1) -> Any:
    """A store FileRecord for a plain document (store tests that write rows without indexing)."""
    import hashlib

    from saipling.storage.base import FileRecord

    digest = hashlib.sha256(path.encode()).hexdigest()
    return FileRecord(path=path, content_hash=digest, mtime_ns=1, size=size, file_type="document", encoding="utf-8")


def chunk_row(i: int, text: str) -> Any:
    """A store ChunkRow of one line of a plain document: chunk `i`, on line i + 1."""
    import hashlib

    from saipling.storage.base import ChunkRow

    return ChunkRow(
        chunk_index=i,
        kind="section",
        section_heading=None,
        heading_path="",
        start_line=i + 1,
        end_line=i + 1,
        content_hash=hashlib.sha256(text.encode()).hexdigest(),
        preview=text[:50],
        token_count=5,
        text=text,
        file_type="document",
        entity_type="document",
        entity_name=None,
        book_id=None,
        chapter_id=None,
        chapter_num=None,
        visibility="public",
        corpus="content",
    )


def kw(*phrases: str) -> Any:
    """A keyword query (storage.base.KeywordQuery) matching any of `phrases` (each its words in order)."""
    from saipling.storage.base import KeywordQuery

    query = KeywordQuery.of((tuple(p.split()), False) for p in phrases)
    assert query is not None
    return query


def fts_query(text: str) -> str | None:
    """What the SQLite backend sends to FTS5 for a user's query text (None: no keyword in it)."""
    from saipling.storage.base import KeywordQuery
    from saipling.storage.sqlite.keywords import match_expression

    query = KeywordQuery.parse(text)
    return None if query is None else match_expression(query)

"""An edited file re-parsed from its last unchanged top-level heading (markdown/parse_memo.py) gets exactly the blocks a
parse from its first line gets: random edits of a note with every block kind, and of the vault's notes."""

from __future__ import annotations

import random

import pytest

from fixtures import SHARED
from saipling.markdown.chunker import chunk_document, parse_blocks
from saipling.markdown.parse_memo import memo_of, parse_with_memo

NOTE = """---
title: The Keep
tags: [a, b]
---

# The Keep

Intro paragraph with a [[Gate|wiki link]] and more.
Second line of it.

## Setext below
Setext heading
==============

- a list item
# a heading that interrupts the list

> a quote
> # a heading inside the quote

```python
# not a heading
x = 1

y = 2
```

<div>
# inside html
</div>

    indented code
    # also code

### Third level

Text after.
Another setext
---

## Last

Final paragraph [[Moat]].
"""

SNIPPETS = [
    "",
    "# New heading",
    "## Sub",
    "```",
    "~~~",
    "- item",
    "  continued",
    "> quote",
    "<div>",
    "</div>",
    "    code",
    "===",
    "---",
    "plain text [[Link|shown]]",
    "1. one",
    "<!-- comment",
    "-->",
    "# ",
    "#no heading",
    "   # indented heading",
    "\t# tab",
]


def edit(lines: list[str], rng: random.Random) -> list[str]:
    out = list(lines)
    for _ in range(rng.randint(1, 3)):
        pos = rng.randint(0, len(out))
        what = rng.random()
        if what < 0.4 or not out:
            out.insert(pos, rng.choice(SNIPPETS))
        elif what < 0.7:
            del out[min(pos, len(out) - 1)]
        else:
            out[min(pos, len(out) - 1)] = rng.choice(SNIPPETS)
    return out


def same(a, b) -> None:
    assert a.headings == b.headings
    assert a.keep_whole == b.keep_whole
    assert a.code_lines == b.code_lines
    assert a.lines == b.lines


def test_random_edits_parse_as_from_the_first_line() -> None:
    rng = random.Random(7)
    reused = 0
    for _ in range(600):
        old = "\n".join(edit(NOTE.split("\n"), rng))
        new = "\n".join(edit(old.split("\n"), rng))
        memo = memo_of(old, parse_blocks(old))
        got = parse_with_memo(new, memo)
        same(got, parse_blocks(new))
        reused += memo is not None and bool(memo.marks)
    assert reused > 500


def test_an_appended_sentence_reparses_only_the_last_section(monkeypatch: pytest.MonkeyPatch) -> None:
    old = NOTE
    new = NOTE + "\nA late errata note.\n"
    memo = memo_of(old, parse_blocks(old))
    parsed: list[int] = []
    import saipling.markdown.parse_memo as pm

    real = pm.parse_blocks
    monkeypatch.setattr(pm, "parse_blocks", lambda text: parsed.append(text.count("\n") + 1) or real(text))
    got = parse_with_memo(new, memo)
    assert parsed and parsed[0] < 8  # from `## Last` on, not the whole note
    monkeypatch.undo()
    same(got, parse_blocks(new))
    assert chunk_document(new, blocks=got) == chunk_document(new)


def test_unchanged_or_unrelated_text_is_safe() -> None:
    memo = memo_of(NOTE, parse_blocks(NOTE))
    same(parse_with_memo(NOTE, memo), parse_blocks(NOTE))
    other = "# Another file\n\nwith other text\n"
    same(parse_with_memo(other, memo), parse_blocks(other))
    same(parse_with_memo("", memo), parse_blocks(""))


def test_vault_notes_edited_at_random_places() -> None:
    vault = SHARED / "corpora" / "13th-age-srd"
    if not vault.is_dir():
        pytest.skip("../shared/corpora/13th-age-srd is not present")
    notes = sorted(vault.rglob("*.md"), key=lambda p: p.stat().st_size)[-40:]  # the largest
    rng = random.Random(11)
    for note in notes:
        text = note.read_text(encoding="utf-8").replace("\r\n", "\n")
        memo = memo_of(text, parse_blocks(text))
        for _ in range(3):
            new = "\n".join(edit(text.split("\n"), rng))
            same(parse_with_memo(new, memo), parse_blocks(new))


def test_an_edited_file_indexes_as_in_a_fresh_index(tmp_path) -> None:
    import shutil

    from fixtures import make_project, open_project

    root = make_project(tmp_path / "a", {"keep.md": NOTE, "other.md": "# Other\n\nSome text here.\n"})
    cols = ("chunk_index", "text", "heading_path", "start_line", "end_line", "content_hash")
    with open_project(root) as project:
        project.index()
        assert "keep.md" in project.indexer.text.parse_memos
        lines = NOTE.split("\n")
        lines.insert(lines.index("## Last") + 2, "An inserted paragraph about the drums.\n")
        (root / "keep.md").write_text("\n".join(lines), encoding="utf-8")
        assert project.index().changed == 1
        got = [tuple(getattr(c, k) for k in cols) for c in project.store.chunks_for_path("keep.md")]
    fresh = tmp_path / "b"
    shutil.copytree(root, fresh, ignore=shutil.ignore_patterns(".saipling"))
    with open_project(fresh) as project:
        project.index()
        assert got == [tuple(getattr(c, k) for k in cols) for c in project.store.chunks_for_path("keep.md")]

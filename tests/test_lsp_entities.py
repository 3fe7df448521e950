"""Writer-aware features end to end on the real server: hover, definition, references and documentSymbol on
character names and aliases (two characters share a surname; "the Detective" is an alias)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from lsprotocol import types

from lsp_client import did_save, lsp_session, wait_for_index, write_project

MARCUS = "characters/marcus-cole/profile.md"
ELENA = "characters/elena-cole/profile.md"
CH1 = "books/book-1/phase-5-bloom/chapter-1/scene-2.md"
CH2 = "books/book-1/phase-5-bloom/chapter-2/scene-1.md"
CH10 = "books/book-1/phase-5-bloom/chapter-10/scene-1.md"
IDEAS = "notes/ideas.md"
SECRET = "notes/secret.md"

PROJECT = {
    MARCUS: "---\nname: Marcus Cole\ntype: character\naliases: [Marcus, the Detective]\n"
    "summary: A tired homicide detective who never takes the easy answer.\n---\n"
    "# Marcus Cole\n\nMarcus grew up in the harbour district.\n",
    ELENA: "---\nname: Elena Cole\ntype: character\naliases: [Elena]\n---\n"
    "# Elena Cole\n\nA surgeon at the city hospital, and Marcus's sister.\n\n## Training\n\nShe studied abroad.\n",
    CH1: "# Scene Two\n\nThe Detective lit a cigarette. Elena Cole watched him.\n\nMarcus's coat was wet.\n",
    CH2: "The Door\n========\n\nMARCUS COLE stood at the door; the detective in him knew. Cole waited.\n",
    CH10: "# Ending\n\nMarcus and Elena left the harbour.\n",
    IDEAS: "# Ideas\n\n```text\nMarcus is a placeholder name\n```\n\nRename `Marcus` in the outline.\n\n"
    "Maybe Marcus retires.\n",
    SECRET: "# Secret\n\nMarcus dies at the end.\n",
    ".context_settings.json": json.dumps({SECRET: "exclude"}),
}


def pos(params_cls, root: Path, rel: str, line: int, character: int, **extra):
    return params_cls(
        text_document=types.TextDocumentIdentifier(uri=(root / rel).as_uri()),
        position=types.Position(line=line, character=character),
        **extra,
    )


def spots(root: Path, locations: list[types.Location]) -> list[tuple[str, int, int, int]]:
    prefix = root.as_uri() + "/"
    return [
        (
            loc.uri.removeprefix(prefix),
            loc.range.start.line,
            loc.range.start.character,
            loc.range.end.character,
        )
        for loc in locations
    ]


def refs(root: Path, rel: str, line: int, character: int, declaration: bool = False) -> types.ReferenceParams:
    return pos(types.ReferenceParams, root, rel, line, character, context=types.ReferenceContext(declaration))


async def test_hover_definition_references_on_names_and_aliases(tmp_path: Path) -> None:
    root = write_project(tmp_path / "novel", PROJECT)
    async with lsp_session(root) as client:
        await wait_for_index(client)
        caps = client.init_result.capabilities
        assert caps.hover_provider and caps.definition_provider and caps.references_provider
        assert caps.document_symbol_provider

        # hover on the alias "The Detective" (a multi-word alias, capitalised at the start of a sentence)
        hover = await client.text_document_hover_async(pos(types.HoverParams, root, CH1, 2, 8))
        assert hover is not None
        text = hover.contents.value
        assert "**Marcus Cole**" in text and "character" in text
        assert "A tired homicide detective" in text and "Also: Marcus, the Detective" in text
        assert (root / MARCUS).as_uri() in text and "Elena" not in text
        assert (hover.range.start.line, hover.range.start.character, hover.range.end.character) == (2, 0, 13)
        # the other Cole: her card (first paragraph of the profile, no summary field)
        hover = await client.text_document_hover_async(pos(types.HoverParams, root, CH1, 2, 36))
        assert "**Elena Cole**" in hover.contents.value and "A surgeon at the city hospital" in hover.contents.value
        # a bare shared surname is nobody's name; plain words and lower-case "the detective" are no mention
        assert await client.text_document_hover_async(pos(types.HoverParams, root, CH2, 3, 65)) is None
        assert await client.text_document_hover_async(pos(types.HoverParams, root, CH2, 3, 36)) is None
        assert await client.text_document_hover_async(pos(types.HoverParams, root, CH1, 2, 20)) is None

        # definition: the profile's frontmatter; from a possessive too
        defs = await client.text_document_definition_async(pos(types.DefinitionParams, root, CH1, 4, 2))
        assert [(d.uri, d.range.start.line, d.range.end.line) for d in defs] == [((root / MARCUS).as_uri(), 0, 6)]
        defs = await client.text_document_definition_async(pos(types.DefinitionParams, root, CH10, 2, 13))
        assert [d.uri for d in defs] == [(root / ELENA).as_uri()]

        # references: every mention of Marcus (names and aliases), manuscript order (chapter 1, 2, 10), then
        # other files in path order; not "Elena Cole", not lower-case "the detective", not code, not the
        # excluded file
        expected = [
            (CH1, 2, 0, 13),
            (CH1, 4, 0, 6),
            (CH2, 3, 0, 11),
            (CH10, 2, 0, 6),
            (ELENA, 7, 36, 42),
            (MARCUS, 6, 2, 13),
            (MARCUS, 8, 0, 6),
            (IDEAS, 8, 6, 12),
        ]
        assert spots(root, await client.text_document_references_async(refs(root, CH2, 3, 3))) == expected
        # the same from the profile itself (cursor on no mention), with the declaration first
        found = await client.text_document_references_async(refs(root, MARCUS, 1, 3, declaration=True))
        assert spots(root, found) == [(MARCUS, 0, 0, 0), *expected]
        elena = spots(root, await client.text_document_references_async(refs(root, CH1, 2, 33)))
        assert elena == [(CH1, 2, 31, 41), (CH10, 2, 11, 16), (ELENA, 5, 2, 12)]

        # a save: the new mention is listed at once (live text), long before the quiet period ends
        (root / CH10).write_text("# Ending\n\nElena left. The Detective stayed.\n", encoding="utf-8")
        did_save(client, root / CH10)

        async def marcus_in_ch10() -> list[tuple[str, int, int, int]]:
            found = spots(root, await client.text_document_references_async(refs(root, CH2, 3, 3)))
            return [s for s in found if s[0] == CH10]

        deadline = asyncio.get_running_loop().time() + 20
        while (now := await marcus_in_ch10()) != [(CH10, 2, 12, 25)]:
            assert asyncio.get_running_loop().time() < deadline, now
            await asyncio.sleep(0.05)


async def test_max_chapter_and_visibility_limit_references(tmp_path: Path) -> None:
    files = {
        **PROJECT,
        CH2: "---\nvisibility: author\n---\n" + PROJECT[CH2],  # the author sees it
        "notes/diary.md": "---\nvisibility: private\n---\nMarcus is based on my uncle.\n",  # nobody's role
    }
    root = write_project(tmp_path / "novel", files)
    options = {
        "provider": "none",
        "referencesMaxChapter": 2,
        "defaultRole": "author",
        "roles": {"author": ["public", "author"]},
    }
    async with lsp_session(root, options) as client:
        await wait_for_index(client)
        found = spots(root, await client.text_document_references_async(refs(root, CH1, 4, 1)))
    files_found = list(dict.fromkeys(f for f, *_ in found))
    assert files_found == [CH1, CH2, ELENA, MARCUS, IDEAS]  # chapter 10 is past the limit; the diary private


async def test_unsaved_buffer_hover_and_outline(tmp_path: Path) -> None:
    root = write_project(tmp_path / "novel", PROJECT)
    async with lsp_session(root) as client:
        await wait_for_index(client)
        uri = (root / CH10).as_uri()
        draft = "Draft\n-----\n\n## Night\n\n\U0001f60b Elena knew.\n"  # an emoji: 2 UTF-16 units
        client.text_document_did_open(
            types.DidOpenTextDocumentParams(types.TextDocumentItem(uri, "markdown", 1, draft))
        )
        hover = await client.text_document_hover_async(pos(types.HoverParams, root, CH10, 5, 4))
        assert hover is not None and "**Elena Cole**" in hover.contents.value
        assert (hover.range.start.character, hover.range.end.character) == (3, 8)  # UTF-16 columns
        client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                types.VersionedTextDocumentIdentifier(version=2, uri=uri),
                [types.TextDocumentContentChangeWholeDocument("# Dawn\n\nThe Detective slept.\n")],
            )
        )
        hover = await client.text_document_hover_async(pos(types.HoverParams, root, CH10, 2, 6))
        assert hover is not None and "**Marcus Cole**" in hover.contents.value
        # the outline of the unsaved text
        symbols = await client.text_document_document_symbol_async(
            types.DocumentSymbolParams(types.TextDocumentIdentifier(uri))
        )
        assert [(s.name, s.range.start.line) for s in symbols] == [("Dawn", 0)]

        # a profile: its entity (frontmatter) then nested headings; setext headings count
        symbols = await client.text_document_document_symbol_async(
            types.DocumentSymbolParams(types.TextDocumentIdentifier((root / ELENA).as_uri()))
        )
        assert [(s.name, s.kind, s.range.start.line, s.range.end.line) for s in symbols] == [
            ("Elena Cole", types.SymbolKind.Class, 0, 4),
            ("Elena Cole", types.SymbolKind.String, 5, 11),
        ]
        assert symbols[0].detail == "Elena"
        assert [(c.name, c.range.start.line) for c in symbols[1].children] == [("Training", 9)]
        symbols = await client.text_document_document_symbol_async(
            types.DocumentSymbolParams(types.TextDocumentIdentifier((root / CH2).as_uri()))
        )
        assert [(s.name, s.range.start.line, s.range.end.line) for s in symbols] == [("The Door", 0, 3)]


async def test_a_buffer_over_max_file_bytes_gets_no_entity_features_and_the_rest_still_works(
    tmp_path: Path,
) -> None:
    """The index skips a file over `maxFileBytes`; a buffer that large is skipped by hover, definition,
    references and the outline too (finding its headings, code blocks and names held a worker thread 15 s for
    200 MB), and other files keep their features while it is open."""
    root = write_project(tmp_path / "novel", PROJECT)
    async with lsp_session(root, {"maxFileBytes": 4000}) as client:
        await wait_for_index(client)
        uri = (root / CH10).as_uri()
        huge = "# Huge\n\n" + "Elena knew the harbour.\n" * 400  # ~9,600 characters
        client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(uri, "markdown", 1, huge)))
        assert await client.text_document_hover_async(pos(types.HoverParams, root, CH10, 2, 1)) is None
        symbols = await client.text_document_document_symbol_async(
            types.DocumentSymbolParams(types.TextDocumentIdentifier(uri))
        )
        assert symbols == []
        hover = await client.text_document_hover_async(pos(types.HoverParams, root, CH1, 2, 36))
        assert hover is not None and "**Elena Cole**" in hover.contents.value
        # references to Elena from chapter 1: the huge buffer of chapter 10 is skipped, not scanned (its text on
        # disk, which names her, is not used either: positions would not match the buffer)
        elena = spots(root, await client.text_document_references_async(refs(root, CH1, 2, 33)))
        assert elena == [(CH1, 2, 31, 41), (ELENA, 5, 2, 12)]
        # a profile whose buffer is huge is no card for a hover elsewhere (its text is not read)
        profile = (root / ELENA).as_uri()
        big_profile = (root / ELENA).read_text(encoding="utf-8") + "She studied abroad.\n" * 400
        client.text_document_did_open(
            types.DidOpenTextDocumentParams(types.TextDocumentItem(profile, "markdown", 1, big_profile))
        )
        hover = await client.text_document_hover_async(pos(types.HoverParams, root, CH1, 2, 36))
        assert hover is not None and "**Elena Cole**" in hover.contents.value
        assert "A surgeon" not in hover.contents.value


async def test_a_document_of_many_headings_gets_its_first_symbols_once(tmp_path: Path) -> None:
    """100,000 headings answered 25 MB and held a worker 5 s a request: four requests (an editor's outline,
    breadcrumbs...) kept a search waiting 13-17 s (attacker pass 5). The first MAX_DOCUMENT_SYMBOLS in document
    order come back, nested as written, and requests for one text share one parse."""
    from saipling.lsp.features.entities import MAX_DOCUMENT_SYMBOLS

    root = write_project(tmp_path / "novel", PROJECT)
    big = root / "notes" / "headings.md"
    text = "\n".join("#" * (i % 3 + 1) + f" H{i}" for i in range(3 * MAX_DOCUMENT_SYMBOLS))
    async with lsp_session(root) as client:
        await wait_for_index(client)
        uri = big.as_uri()
        client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(uri, "markdown", 1, text)))
        asked = [
            client.text_document_document_symbol_async(types.DocumentSymbolParams(types.TextDocumentIdentifier(uri)))
            for _ in range(3)
        ]
        answers = await asyncio.wait_for(asyncio.gather(*asked), 120)

    def flat(symbols) -> list[str]:
        return [n for s in symbols for n in (s.name, *flat(s.children or []))]

    names = flat(answers[0])
    assert len(names) == MAX_DOCUMENT_SYMBOLS
    assert names[:4] == ["H0", "H1", "H2", "H3"] and names[-1] == f"H{MAX_DOCUMENT_SYMBOLS - 1}"
    assert [s.name for s in answers[0][0].children] == ["H1"]  # (# H0 > ## H1 > ### H2: nesting kept)
    assert all(flat(a) == names for a in answers[1:])


async def test_a_hover_at_the_end_of_a_long_paragraph_finds_the_name_there(tmp_path: Path) -> None:
    """A hover (or go to definition) resolved every name on the cursor's line up to the cursor: at the end of a
    5 MB paragraph of 850,000 names (under maxFileBytes) one hover held a worker for 6 s here, and a few such
    hovers (an editor sends one as the mouse moves) held every worker. Only the names that can reach the cursor
    are looked at now (attacker pass 7)."""
    root = write_project(tmp_path / "novel", PROJECT)
    async with lsp_session(root, {"provider": "none", "watch": False}) as client:
        await wait_for_index(client)
        uri = (root / CH10).as_uri()
        line = "Elena " * 850_000  # one paragraph on one line, 5.1 MB (under maxFileBytes)
        text = "# Ending\n\n" + line + "Marcus waited.\n"
        client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(uri, "markdown", 1, text)))
        hover = await asyncio.wait_for(
            client.text_document_hover_async(pos(types.HoverParams, root, CH10, 2, len(line) + 2)), 60
        )
        assert hover is not None and "**Marcus Cole**" in hover.contents.value
        assert hover.range.start == types.Position(2, len(line))
        # (how many names a hover resolves: tests/test_entities.py, no timing here)

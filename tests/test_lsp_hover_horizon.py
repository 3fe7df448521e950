"""The entity card "as of" the open chapter (issue 35) on the real `saipling serve`: in a chapter file, sections
of the profile headed for later chapters and mentions after it are left out; elsewhere, or with the setting
`hoverAllChapters`, the card tells everything."""

from __future__ import annotations

from pathlib import Path

from lsprotocol import types

from fixtures import novel_project, write_file
from lsp_client import lsp_session, wait_for_index

SCENE = "books/book-01/phase-1-setup/ch-{:02d}/scene-01.md"
PROFILE = "characters/mina-harker/profile.md"
MINA = (
    "---\nname: Mina Harker\ntype: character\naliases: [Mina, Madam Mina]\n---\n# Mina Harker\n\n"
    "## From chapter 4\n\nBitten by the Count; she hears him at night.\n\n"
    "## Chapter 2: letters\n\nA schoolmistress who writes to Jonathan in shorthand.\n\n"
    "## Habits\n\nKeeps a journal.\n"
)


async def hover(client, path: Path, line: int, character: int) -> str:
    found = await client.text_document_hover_async(
        types.HoverParams(types.TextDocumentIdentifier(path.as_uri()), types.Position(line, character))
    )
    assert found is not None
    return found.contents.value


async def test_card_as_of_the_open_chapter_unless_asked_for_everything(tmp_path: Path) -> None:
    root = novel_project(tmp_path)
    write_file(root, PROFILE, MINA)
    async with lsp_session(root, {"provider": "none", "watch": False}) as client:
        await wait_for_index(client)
        three = await hover(client, root / SCENE.format(3), 5, 1)  # "Mina read the letter twice."
        assert "\n\nKeeps a journal.\n\n" in three  # the summary: outside the chapter sections
        assert "**Chapter 2: letters** — A schoolmistress who writes to Jonathan" in three
        assert "Bitten" not in three and "From chapter 4" not in three
        assert "3 mentions in 2 chapters · last seen ch-03 (as of chapter 3)" in three

        four = await hover(client, root / SCENE.format(4), 5, 7)  # "Madam Mina slept."
        assert "**From chapter 4** — Bitten by the Count" in four and "**Chapter 2: letters**" in four
        assert "(as of chapter 4)" in four

        profile = await hover(client, root / PROFILE, 5, 4)  # "# Mina Harker": no chapter, everything
        assert "Bitten by the Count" in profile and "as of chapter" not in profile

    async with lsp_session(root, {"provider": "none", "watch": False, "hoverAllChapters": True}) as client:
        await wait_for_index(client)
        three = await hover(client, root / SCENE.format(3), 5, 1)
        assert "**From chapter 4** — Bitten by the Count" in three
        assert "as of chapter" not in three and "4 mentions in 3 chapters" in three

"""`workspace/symbol`: frontmatter names and aliases (entities first), then headings, with locations."""

from __future__ import annotations

from pathlib import Path

from lsprotocol import types

from lsp_client import STORY, lsp_session, wait_for_index, write_project


def rows(symbols: list[types.SymbolInformation], root: Path) -> list[tuple[str, types.SymbolKind, str, int]]:
    prefix = root.as_uri() + "/"
    return [(s.name, s.kind, s.location.uri.removeprefix(prefix), s.location.range.start.line) for s in symbols]


async def test_entities_by_name_and_alias_then_headings(tmp_path: Path) -> None:
    root = write_project(tmp_path / "story", STORY)
    async with lsp_session(root) as client:
        await wait_for_index(client)

        async def symbols(query: str) -> list[tuple[str, types.SymbolKind, str, int]]:
            return rows(await client.workspace_symbol_async(types.WorkspaceSymbolParams(query=query)), root)

        assert await symbols("alice") == [
            ("Alice Marsh", types.SymbolKind.Class, "characters/alice.md", 0),  # the character
            (
                "Alice Marsh",
                types.SymbolKind.String,
                "characters/alice.md",
                5,
            ),  # its heading, after the frontmatter
        ]
        assert await symbols("cartographer") == [("Alice Marsh", types.SymbolKind.Class, "characters/alice.md", 0)]
        assert (await symbols("fenwick"))[0] == (
            "Fenwick",
            types.SymbolKind.Namespace,
            "places/fenwick.md",
            0,
        )
        assert await symbols("bell") == [("The Bell", types.SymbolKind.String, "chapters/ch01.md", 4)]
        assert await symbols("zzzz") == []
        everything = await symbols("")
        kinds = [k for _, k, _, _ in everything]
        assert kinds[:2] == [types.SymbolKind.Class, types.SymbolKind.Namespace]
        assert set(kinds[2:]) == {types.SymbolKind.String} and len(everything) == 8

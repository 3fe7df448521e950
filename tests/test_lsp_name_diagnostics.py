"""Drifting names and names without a page as diagnostics, with their code actions, on the real `saipling serve`
(issue 35). Each action's WorkspaceEdit is applied here, as an editor would, and the result checked: the
replaced word, the alias the profile gained (its mentions count the word, the diagnostic goes), the profile
created from the project's template (the name gets a page, its diagnostic goes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lsprotocol import types

from fixtures import novel_project, write_file
from lsp_client import CAPABILITIES, did_save, lsp_session, request, wait_for_index, wait_until

SCENE = "books/book-01/phase-1-setup/ch-{:02d}/scene-01.md"
FIVE = (
    "---\npov: Lucy\n---\n# Chapter 5\n\n"
    "Lucy wrote to Minna that night. She said Renfield was awake, and Renfield ate flies; "
    "then Renfield sang, and Renfield slept, until Renfield woke.\n\n"
    "`Minna` in code is never flagged.\n"
)
CAN_CREATE = types.ClientCapabilities(
    window=CAPABILITIES.window,
    workspace=types.WorkspaceClientCapabilities(
        configuration=True,
        workspace_folders=True,
        workspace_edit=types.WorkspaceEditClientCapabilities(
            document_changes=True, resource_operations=[types.ResourceOperationKind.Create]
        ),
    ),
    text_document=CAPABILITIES.text_document,
)


def open_doc(client: Any, path: Path) -> str:
    uri = path.as_uri()
    text = path.read_text(encoding="utf-8")
    client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(uri, "markdown", 1, text)))
    return uri


def by_word(client: Any, uri: str) -> dict[str, list[types.Diagnostic]]:
    out: dict[str, list[types.Diagnostic]] = {}
    for d in client.diagnostics.get(uri, []):
        out.setdefault(d.data["word"], []).append(d)
    return out


async def actions(client: Any, uri: str, diag: types.Diagnostic) -> dict[str, dict[str, Any]]:
    params = types.CodeActionParams(
        types.TextDocumentIdentifier(uri), diag.range, types.CodeActionContext(diagnostics=[diag])
    )
    found = await request(client, types.TEXT_DOCUMENT_CODE_ACTION, params)
    plain = [client.protocol._converter.unstructure(a) for a in found or []]  # as JSON (camelCase)
    return {a["title"]: a for a in plain}


def apply_text_edits(text: str, edits: list[dict[str, Any]]) -> str:
    """Apply LSP TextEdits (UTF-16 positions; these texts are ASCII) as an editor does: last first."""
    lines = text.split("\n")

    def offset(pos: dict[str, int]) -> int:
        return sum(len(x) + 1 for x in lines[: pos["line"]]) + pos["character"]

    for e in sorted(edits, key=lambda e: offset(e["range"]["start"]), reverse=True):
        text = text[: offset(e["range"]["start"])] + e["newText"] + text[offset(e["range"]["end"]) :]
    return text


def apply_workspace_edit(root: Path, edit: dict[str, Any]) -> list[Path]:
    """Apply a WorkspaceEdit to the files on disk; the files it touched."""
    touched = []
    for uri, edits in (edit.get("changes") or {}).items():
        path = Path(uri.removeprefix("file://"))
        path.write_text(apply_text_edits(path.read_text(encoding="utf-8"), edits), encoding="utf-8")
        touched.append(path)
    for change in edit.get("documentChanges") or []:
        if change.get("kind") == "create":
            path = Path(change["uri"].removeprefix("file://"))
            assert root in path.parents and not path.exists()
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("", encoding="utf-8")
        elif change.get("kind") is None:
            path = Path(change["textDocument"]["uri"].removeprefix("file://"))
            path.write_text(apply_text_edits(path.read_text(encoding="utf-8"), change["edits"]), encoding="utf-8")
        else:
            raise AssertionError(change)
        touched.append(path)
    return list(dict.fromkeys(touched))


async def test_drift_diagnostic_replace_and_alias_actions(tmp_path: Path) -> None:
    root = novel_project(tmp_path)
    scene = write_file(root, SCENE.format(5), FIVE)
    async with lsp_session(root, {"provider": "none", "watch": False}) as client:
        await wait_for_index(client)
        uri = open_doc(client, scene)
        found = await wait_until(lambda: (d := by_word(client, uri)).get("Minna") and d)
        (minna,) = found["Minna"]
        assert minna.severity == types.DiagnosticSeverity.Hint and minna.source == "saipling"
        assert minna.code == "name-drift" and "Mina Harker" in minna.message
        assert minna.range.start == types.Position(5, 14) and minna.range.end == types.Position(5, 19)
        assert len(found["Renfield"]) == 5 and found["Renfield"][0].code == "name-without-page"
        assert "Minal" not in found  # (drift in chapter 3: not in this file)

        fixes = await actions(client, uri, minna)
        replace = fixes["Replace with Mina"]
        assert replace["kind"] == "quickfix"
        replaced = apply_text_edits(FIVE, replace["edit"]["changes"][uri])
        assert "Lucy wrote to Mina that night." in replaced and "`Minna` in code" in replaced

        alias = fixes["Add `Minna` as an alias of Mina Harker"]
        (touched,) = apply_workspace_edit(root, alias["edit"])
        profile = root / "characters/mina-harker/profile.md"
        assert touched == profile
        assert "aliases: [Mina, Madam Mina, Minna]\n" in profile.read_text(encoding="utf-8")
        did_save(client, profile)  # the entity changed: the open scene's diagnostic goes
        await wait_until(lambda: "Minna" not in by_word(client, uri) and "Renfield" in by_word(client, uri))
        mentions = await request(client, "saipling/mentions", {"name": "Minna"})
        (entity,) = mentions["entities"]
        assert entity["entity"]["name"] == "Mina Harker"
        assert {c["chapter"]: c["count"] for c in entity["chapters"]}["ch-05"] == 1


async def test_create_profile_action_uses_the_template_and_clears_the_diagnostic(tmp_path: Path) -> None:
    root = novel_project(tmp_path)
    scene = write_file(root, SCENE.format(5), FIVE)
    write_file(
        root,
        "templates/character.md",
        "---\nname: {{name}}\ntype: character\naliases: []\n---\n# {{name}}\n\n## Voice\n",
    )
    async with lsp_session(root, {"provider": "none", "watch": False}, capabilities=CAN_CREATE) as client:
        await wait_for_index(client)
        uri = open_doc(client, scene)
        found = await wait_until(lambda: (d := by_word(client, uri)).get("Renfield") and d)
        fixes = await actions(client, uri, found["Renfield"][2])
        create = fixes["Create a profile for Renfield"]
        created = root / "characters/renfield/profile.md"
        assert not created.exists()  # the server never writes: the editor applies the edit
        assert apply_workspace_edit(root, create["edit"]) == [created]
        assert created.read_text(encoding="utf-8") == (
            "---\nname: Renfield\ntype: character\naliases: []\n---\n# Renfield\n\n## Voice\n"
        )
        did_save(client, created)
        await wait_until(lambda: "Renfield" not in by_word(client, uri) and "Minna" in by_word(client, uri))
        mentions = await request(client, "saipling/mentions", {"name": "Renfield"})
        assert mentions["entities"][0]["total"] == 5


async def test_no_create_action_without_the_client_capability(tmp_path: Path) -> None:
    root = novel_project(tmp_path)
    scene = write_file(root, SCENE.format(5), FIVE)
    async with lsp_session(root, {"provider": "none", "watch": False}) as client:
        await wait_for_index(client)
        uri = open_doc(client, scene)
        found = await wait_until(lambda: (d := by_word(client, uri)).get("Renfield") and d)
        assert await actions(client, uri, found["Renfield"][0]) == {}


async def test_severity_setting_off_and_excluded_or_unindexed_files(tmp_path: Path) -> None:
    root = novel_project(tmp_path)
    scene = write_file(root, SCENE.format(5), FIVE)
    private = write_file(root, "drafts/private.md", FIVE)
    outside = write_file(root, "notes.txt", FIVE)
    options = {"provider": "none", "watch": False, "nameDiagnostics": "warning", "exclude": ["drafts/**"]}
    async with lsp_session(root, options) as client:
        await wait_for_index(client)
        uris = [open_doc(client, p) for p in (private, outside, scene)]
        found = await wait_until(lambda: (d := by_word(client, uris[2])).get("Minna") and d)
        assert {d.severity for ds in found.values() for d in ds} == {types.DiagnosticSeverity.Warning}
        await wait_until(lambda: uris[0] in client.diagnostics)
        assert list(client.diagnostics[uris[0]]) == []  # excluded by the settings (published empty)
        assert not client.diagnostics.get(uris[1])  # not indexed
    async with lsp_session(root, {"provider": "none", "watch": False, "nameDiagnostics": "off"}) as client:
        await wait_for_index(client)
        uri = open_doc(client, scene)
        await wait_until(lambda: uri in client.diagnostics)
        assert list(client.diagnostics[uri]) == []


async def test_a_file_whose_uri_is_percent_encoded_gets_its_diagnostics_and_fixes(tmp_path: Path) -> None:
    """`Chapter 5.md` reaches the server as `Chapter%205.md` (VS Code and Neovim encode spaces and accents); pygls
    keeps open documents under the decoded URI, and the diagnostics looked the encoded one up: such a file got no
    name diagnostics and no quick fixes (attacker pass 7)."""
    root = novel_project(tmp_path)
    scene = write_file(root, "books/book-01/phase-1-setup/ch-05/Scène 5 draft.md", FIVE)
    async with lsp_session(root, {"provider": "none", "watch": False}) as client:
        await wait_for_index(client)
        uri = open_doc(client, scene)
        assert "%20" in uri and "%C3%A8" in uri
        found = await wait_until(lambda: (d := by_word(client, uri)).get("Minna") and d)
        (minna,) = found["Minna"]
        assert minna.range.start == types.Position(5, 14)
        fixes = await actions(client, uri, minna)
        assert apply_text_edits(FIVE, fixes["Replace with Mina"]["edit"]["changes"][uri]).count("to Mina that") == 1

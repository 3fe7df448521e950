// "Saipling: Mentions of…": every mention of a character or place (its name and aliases) in manuscript order,
// from `saipling/mentions`; picking one opens the file on it. The name defaults to the word at the cursor.
import * as vscode from 'vscode';
import { COMMANDS, requireClient, showRequestError, type Session } from './client';
import { buildMentionsParams, mentionRows, Methods, type MentionRow, type MentionsResponse } from './protocol';

interface MentionPickItem extends vscode.QuickPickItem {
  row: MentionRow;
  folder: string | undefined;
}

export function registerMentions(session: Session): vscode.Disposable {
  return vscode.commands.registerCommand(COMMANDS.mentionsOf, (name?: unknown) =>
    mentionsOf(session, typeof name === 'string' ? name : undefined),
  );
}

/** The selection, else the word under the cursor (letters, apostrophes and hyphens), as a default name. */
function nameAtCursor(): string | undefined {
  const editor = vscode.window.activeTextEditor;
  if (editor === undefined) return undefined;
  if (!editor.selection.isEmpty) {
    const text = editor.document.getText(editor.selection).trim();
    return text.length <= 200 && !text.includes('\n') ? text : undefined;
  }
  const range = editor.document.getWordRangeAtPosition(editor.selection.active, /[\p{L}][\p{L}'’-]*/u);
  return range === undefined ? undefined : editor.document.getText(range).replace(/['’]s?$/u, '');
}

export async function mentionsOf(session: Session, name?: string): Promise<void> {
  const client = requireClient(session);
  if (client === undefined) return;
  const asked = name ?? (await vscode.window.showInputBox({
    title: 'Saipling: Mentions of…',
    prompt: 'A character or place: its name, an alias or its file',
    value: nameAtCursor() ?? '',
  }));
  const params = asked === undefined ? undefined : buildMentionsParams(asked);
  if (params === undefined) return;
  let response: MentionsResponse;
  try {
    response = await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Window, title: `Saipling: mentions of ${params.name}` },
      (_progress, token) => client.sendRequest<MentionsResponse>(Methods.mentions, params, token),
    );
  } catch (error) {
    showRequestError('finding mentions', error);
    return;
  }
  const folders = new Map(response.entities.flatMap((e) => e.mentions.map((m) => [m.path, e.workspaceFolder])));
  const items: MentionPickItem[] = mentionRows(response).map((row) => ({
    label: row.label,
    description: row.description,
    detail: row.detail,
    row,
    folder: folders.get(row.path),
  }));
  if (items.length === 0) {
    const summary = response.entities.map((e) => `${e.entity.name}: ${e.summary}`).join('; ');
    void vscode.window.showInformationMessage(`Saipling: ${summary}`);
    return;
  }
  const title = response.entities.map((e) => `${e.entity.name} (${e.summary})`).join(' · ');
  const pick = await vscode.window.showQuickPick(items, {
    title: `Saipling: mentions of ${title}`,
    placeHolder: 'Filter the mentions by chapter or file',
    matchOnDescription: true,
  });
  if (pick === undefined) return;
  const base = pick.folder !== undefined ? vscode.Uri.parse(pick.folder) : vscode.workspace.workspaceFolders?.[0]?.uri;
  if (base === undefined) return;
  const { line, column, endColumn } = pick.row;
  const range = new vscode.Range(line, column, line, endColumn);
  await vscode.window.showTextDocument(vscode.Uri.joinPath(base, pick.row.path), { selection: range, preview: true });
}

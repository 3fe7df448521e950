// "Saipling: Find Related Passages": passages from other files similar to the active one; "Saipling: Find Passages
// Related to This Passage": similar to the passage at the cursor (or selection) only, e.g. one scene of a chapter.
import * as vscode from 'vscode';
import { COMMANDS, requireClient, showRequestError, type Session } from './client';
import { displayPath, toResultItem } from './format';
import { buildRelatedParams, Methods, type RelatedResponse } from './protocol';
import { openResult, type ResultPickItem } from './searchPicker';

export function registerRelated(session: Session): vscode.Disposable {
  return vscode.Disposable.from(
    vscode.commands.registerCommand(COMMANDS.findRelated, (uri?: unknown) =>
      findRelated(session, uri instanceof vscode.Uri ? uri : undefined),
    ),
    vscode.commands.registerCommand(COMMANDS.findRelatedToPassage, () => findRelatedToPassage(session)),
  );
}

/** Passages like the one at the active editor's cursor or selection (its lines, 1-based). */
export async function findRelatedToPassage(session: Session): Promise<void> {
  const editor = vscode.window.activeTextEditor;
  if (editor === undefined) {
    void vscode.window.showInformationMessage('Saipling: open a markdown file to find passages related to it.');
    return;
  }
  const { start, end } = editor.selection;
  // a selection ending at the start of a line does not include that line
  const last = end.line > start.line && end.character === 0 ? end.line - 1 : end.line;
  await findRelated(session, editor.document.uri, { start: start.line + 1, end: last + 1 });
}

export async function findRelated(
  session: Session,
  uri?: vscode.Uri,
  lines?: { start: number; end: number },
): Promise<void> {
  const client = requireClient(session);
  if (client === undefined) {
    return;
  }
  const target = uri ?? vscode.window.activeTextEditor?.document.uri;
  if (target === undefined) {
    void vscode.window.showInformationMessage('Saipling: open a markdown file to find passages related to it.');
    return;
  }
  const root = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
  const name =
    displayPath(target.fsPath, root) +
    (lines === undefined ? '' : lines.end > lines.start ? `:${lines.start}-${lines.end}` : `:${lines.start}`);
  let response: RelatedResponse;
  try {
    const params = buildRelatedParams(
      client.code2ProtocolConverter.asUri(target),
      vscode.workspace.getConfiguration('saipling').get('maxResults'),
      lines,
    );
    response = await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Window, title: `Saipling: passages related to ${name}` },
      (_progress, token) => client.sendRequest<RelatedResponse>(Methods.related, params, token),
    );
  } catch (error) {
    showRequestError('finding related passages', error);
    return;
  }
  if (response.results.length === 0) {
    void vscode.window.showInformationMessage(`Saipling: no passages related to ${name} were found.`);
    return;
  }
  const items: ResultPickItem[] = response.results.map((result) => toResultItem(result, root));
  const pick = await vscode.window.showQuickPick(items, {
    title: `Saipling: passages related to ${name}`,
    placeHolder: 'Filter the related passages',
    matchOnDescription: true,
    matchOnDetail: true,
  });
  if (pick?.result !== undefined) {
    await openResult(pick.result);
  }
}

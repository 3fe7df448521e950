// "Reindex Project", "Clear Index" and "Show Index Status".
import * as vscode from 'vscode';
import { COMMANDS, requireClient, showRequestError, type Session } from './client';
import { statusReport } from './format';
import { Methods, type ClearIndexResponse, type ReindexResponse, type StatusResponse } from './protocol';
import { keywordOnlyByChoice } from './settings';

export function registerIndexCommands(session: Session): vscode.Disposable[] {
  return [
    vscode.commands.registerCommand(COMMANDS.reindex, (options?: { full?: boolean }) => reindex(session, options)),
    vscode.commands.registerCommand(COMMANDS.clearIndex, (options?: { confirm?: boolean }) =>
      clearIndex(session, options),
    ),
    vscode.commands.registerCommand(COMMANDS.showStatus, () => showStatus(session)),
  ];
}

/** Starts a reindex; asks whether to update changed files or rebuild unless `options.full` is given. */
export async function reindex(session: Session, options?: { full?: boolean }): Promise<ReindexResponse | undefined> {
  const client = requireClient(session);
  if (client === undefined) {
    return undefined;
  }
  let full = options?.full;
  if (full === undefined) {
    const pick = await vscode.window.showQuickPick(
      [
        { label: 'Index changed files now', description: 'skips the quiet period', full: false },
        { label: 'Rebuild the whole index', description: 're-embeds every file (may cost money)', full: true },
      ],
      { title: 'Saipling: Reindex Project' },
    );
    if (pick === undefined) {
      return undefined;
    }
    full = pick.full;
  }
  try {
    const response = await client.sendRequest<ReindexResponse>(Methods.reindex, { full });
    session.indexChanged();
    return response;
  } catch (error) {
    showRequestError('reindex', error);
    return undefined;
  }
}

/** Deletes the index after a confirmation (skipped with `options.confirm === false`). */
export async function clearIndex(
  session: Session,
  options?: { confirm?: boolean },
): Promise<ClearIndexResponse | undefined> {
  const client = requireClient(session);
  if (client === undefined) {
    return undefined;
  }
  if (options?.confirm !== false) {
    const choice = await vscode.window.showWarningMessage(
      'Saipling: delete the search index of this project?',
      { modal: true, detail: 'Embeddings already paid for are lost; the next index run recomputes them.' },
      'Clear Index',
    );
    if (choice !== 'Clear Index') {
      return undefined;
    }
  }
  try {
    const response = await client.sendRequest<ClearIndexResponse>(Methods.clearIndex, {});
    session.indexChanged();
    void vscode.window.showInformationMessage('Saipling: the index was cleared.');
    return response;
  } catch (error) {
    showRequestError('clearing the index', error);
    return undefined;
  }
}

export async function showStatus(session: Session): Promise<StatusResponse | undefined> {
  const client = requireClient(session);
  if (client === undefined) {
    return undefined;
  }
  let status: StatusResponse;
  try {
    status = await client.sendRequest<StatusResponse>(Methods.status, {});
  } catch (error) {
    showRequestError('status', error);
    return undefined;
  }
  const report = statusReport(status, keywordOnlyByChoice(vscode.workspace.getConfiguration('saipling').get('provider')));
  void vscode.window
    .showInformationMessage(report.message, { modal: true, detail: report.detail }, 'Reindex', 'Show Output')
    .then((choice) => {
      if (choice === 'Reindex') {
        void vscode.commands.executeCommand(COMMANDS.reindex);
      } else if (choice === 'Show Output') {
        client.outputChannel.show();
      }
    });
  return status;
}

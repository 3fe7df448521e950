// First run in a workspace: offer (never force) to hide the `.saipling` index folder from the Explorer by adding
// it to the workspace's `files.exclude`.
import * as vscode from 'vscode';

export const HINT_MESSAGE = 'Saipling keeps its search index in the .saipling folder. Hide it from the Explorer?';
export const HIDE = 'Hide';
export const NOT_NOW = 'Not Now';
export const NEVER = "Don't Ask Again";
export const EXCLUDE_PATTERN = '**/.saipling';
const ASKED_KEY = 'saipling.excludeHintAsked'; // workspaceState: asked in this workspace
const NEVER_KEY = 'saipling.excludeHintNever'; // globalState: never ask anywhere

/** Whether a `files.exclude` value already hides the index folder. */
export function hidesIndex(exclude: unknown): boolean {
  if (typeof exclude !== 'object' || exclude === null) return false;
  const patterns = ['**/.saipling', '.saipling', '**/.saipling/**', '.saipling/**', '**/.saipling/'];
  return patterns.some((p) => (exclude as Record<string, unknown>)[p] === true);
}

/** Asks once per workspace (unless the user said never) when `files.exclude` does not hide `.saipling` yet. */
export async function suggestHidingIndex(context: vscode.ExtensionContext): Promise<void> {
  const folder = vscode.workspace.workspaceFolders?.[0];
  if (folder === undefined || context.globalState.get(NEVER_KEY) === true || context.workspaceState.get(ASKED_KEY) === true) {
    return;
  }
  const files = vscode.workspace.getConfiguration('files', folder.uri);
  if (hidesIndex(files.get('exclude'))) return;
  await context.workspaceState.update(ASKED_KEY, true);
  const choice = await vscode.window.showInformationMessage(HINT_MESSAGE, HIDE, NOT_NOW, NEVER);
  if (choice === HIDE) {
    const current = files.inspect<Record<string, boolean>>('exclude')?.workspaceValue ?? {};
    await files.update('exclude', { ...current, [EXCLUDE_PATTERN]: true }, vscode.ConfigurationTarget.Workspace);
  } else if (choice === NEVER) {
    await context.globalState.update(NEVER_KEY, true);
  }
}

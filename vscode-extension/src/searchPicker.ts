// "Saipling: Search Project": a QuickPick that queries the server as you type.
import * as vscode from 'vscode';
import { COMMANDS, isCancellation, requestErrorMessage, requireClient, type Session } from './client';
import { searchNotice, selectionRange, toResultItem } from './format';
import { LiveQuery } from './liveQuery';
import { buildSearchParams, Methods, type SearchResponse, type SearchResult } from './protocol';
import { describeFilter, parseQuery } from './query';
import { keywordOnlyByChoice } from './settings';

export const SEARCH_TITLE = 'Saipling: Search Project';
export const SEARCH_PLACEHOLDER =
  'Describe a passage, or type words to find. Filters: book:ID type:character upto:12 path:notes/';

export interface ResultPickItem extends vscode.QuickPickItem {
  result?: SearchResult;
}

export function registerSearchPicker(session: Session): vscode.Disposable {
  return vscode.commands.registerCommand(COMMANDS.searchProject, (query?: unknown) =>
    showSearchPicker(session, typeof query === 'string' ? query : undefined),
  );
}

/** Quick-pick rows for a search response: a notice row (indexing, degraded, none) then the results. */
export function toPickItems(response: SearchResponse, root?: string, keywordOnly = false): ResultPickItem[] {
  // alwaysShow: the server already ranked them; VS Code must not filter them by label.
  const items: ResultPickItem[] = response.results.map((r) => ({ ...toResultItem(r, root), alwaysShow: true }));
  const notice = searchNotice(response, keywordOnly);
  if (notice !== undefined) {
    items.unshift({ label: `$(info) ${notice}`, alwaysShow: true });
  }
  return items;
}

export async function openResult(result: SearchResult): Promise<vscode.TextEditor> {
  const uri = result.uri ? vscode.Uri.parse(result.uri) : vscode.Uri.file(result.filePath);
  const r = selectionRange(result);
  const range = new vscode.Range(r.start.line, r.start.character, r.end.line, r.end.character);
  const editor = await vscode.window.showTextDocument(uri, { selection: range, preview: true });
  // The passage stays selected with the cursor on its first line (anchor at the end, active at the start):
  // `showTextDocument` would leave the cursor at the passage's end.
  editor.selection = new vscode.Selection(range.end, range.start);
  editor.revealRange(range, vscode.TextEditorRevealType.InCenterIfOutsideViewport);
  return editor;
}

/** A filter prefix the user mistyped (`upto:x`): shown in the list, no request sent. */
class FilterError extends Error {}

/** The selected text of the active editor, if short enough to be a query. */
function selectedText(): string | undefined {
  const editor = vscode.window.activeTextEditor;
  if (editor === undefined || editor.selection.isEmpty) {
    return undefined;
  }
  const text = editor.document.getText(editor.selection).trim();
  return text.length > 0 && text.length <= 200 && !text.includes('\n') ? text : undefined;
}

export function showSearchPicker(session: Session, initialQuery?: string): vscode.QuickPick<ResultPickItem> | undefined {
  const client = requireClient(session);
  if (client === undefined) {
    return undefined;
  }
  const config = vscode.workspace.getConfiguration('saipling');
  const root = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
  const picker = vscode.window.createQuickPick<ResultPickItem>();
  picker.title = SEARCH_TITLE;
  picker.placeholder = SEARCH_PLACEHOLDER;
  picker.matchOnDescription = false;
  picker.matchOnDetail = false;

  const live = new LiveQuery<SearchResponse | undefined, vscode.CancellationToken>({
    createTokenSource: () => new vscode.CancellationTokenSource(),
    run: (value, token) => {
      const parsed = parseQuery(value);
      const filters = describeFilter(parsed.filter);
      picker.title = filters ? `${SEARCH_TITLE} (${filters})` : SEARCH_TITLE;
      if (parsed.errors.length > 0) {
        return Promise.reject(new FilterError(parsed.errors.join('; ')));
      }
      const params = buildSearchParams(parsed.query, {
        maxResults: config.get('maxResults'),
        mode: config.get('searchMode'),
        filter: parsed.filter,
      });
      return params === undefined
        ? Promise.resolve(undefined)
        : client.sendRequest<SearchResponse>(Methods.search, params, token);
    },
    onResult: (_value, response) => {
      const items =
        response === undefined ? [] : toPickItems(response, root, keywordOnlyByChoice(config.get('provider')));
      picker.items = items;
      // Enter opens the first result, not the notice row above it (indexing, degraded): VS Code makes the first
      // row active, and Enter on a notice did nothing.
      const first = items.find((item) => item.result !== undefined);
      if (first !== undefined) {
        picker.activeItems = [first];
      }
    },
    onError: (_value, error) => {
      if (error instanceof FilterError) {
        picker.items = [{ label: `$(warning) ${error.message}`, alwaysShow: true }];
      } else if (!isCancellation(error)) {
        picker.items = [{ label: `$(error) ${requestErrorMessage('search', error)}`, alwaysShow: true }];
      }
    },
    onBusy: (busy) => {
      picker.busy = busy;
    },
  });

  // The initial value is set before listening, so it is queried once, at once.
  const initial = initialQuery ?? selectedText();
  if (initial !== undefined) {
    picker.value = initial;
  }
  picker.onDidChangeValue((value) => live.update(value));
  picker.onDidAccept(() => {
    const item = picker.selectedItems[0] ?? picker.activeItems[0];
    if (item?.result !== undefined) {
      picker.hide();
      void openResult(item.result).then(undefined, (error: unknown) =>
        vscode.window.showErrorMessage(requestErrorMessage('opening the result', error)),
      );
    }
  });
  picker.onDidHide(() => {
    live.dispose();
    picker.dispose();
  });
  picker.show();
  if (initial !== undefined) {
    void live.now(initial);
  }
  return picker;
}

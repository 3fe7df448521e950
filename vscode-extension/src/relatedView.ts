// "Related Passages" view in the Explorer: `saipling/related` for the active markdown file, refreshed when the
// active editor changes and after the index changes; clicking a row opens the passage.
import * as vscode from 'vscode';
import { isCancellation, requestErrorMessage, type Session } from './client';
import { displayPath, formatLines, formatScore, oneLine, sectionOf } from './format';
import { buildRelatedParams, Methods, type RelatedResponse, type SearchResult } from './protocol';
import { openResult } from './searchPicker';

export const RELATED_VIEW = 'saipling.relatedView';
export const OPEN_RESULT_COMMAND = 'saipling.openResult';
export const REFRESH_COMMAND = 'saipling.refreshRelated';
const REFRESH_DELAY_MS = 250;

interface RelatedNode {
  result?: SearchResult;
  label: string;
  description?: string;
  tooltip?: string;
}

export class RelatedView implements vscode.TreeDataProvider<RelatedNode>, vscode.Disposable {
  private readonly changed = new vscode.EventEmitter<RelatedNode | undefined>();
  readonly onDidChangeTreeData = this.changed.event;
  private readonly view: vscode.TreeView<RelatedNode>;
  private readonly disposables: vscode.Disposable[] = [];
  private nodes: RelatedNode[] = [];
  private target: vscode.Uri | undefined;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private source: vscode.CancellationTokenSource | undefined;

  constructor(private readonly session: Session) {
    this.view = vscode.window.createTreeView(RELATED_VIEW, { treeDataProvider: this, showCollapseAll: false });
    this.disposables.push(
      this.view,
      this.changed,
      vscode.commands.registerCommand(OPEN_RESULT_COMMAND, (result: SearchResult) =>
        openResult(result).then(undefined, (error: unknown) =>
          vscode.window.showErrorMessage(requestErrorMessage('opening the passage', error)),
        ),
      ),
      vscode.commands.registerCommand(REFRESH_COMMAND, () => this.refresh(true)),
      vscode.window.onDidChangeActiveTextEditor(() => this.schedule()),
      this.view.onDidChangeVisibility((e) => {
        if (e.visible) this.schedule();
      }),
    );
    this.schedule();
  }

  /** Fetch again soon (the active file or the index changed). */
  schedule(force = false): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.refresh(force);
    }, REFRESH_DELAY_MS);
  }

  /** The index changed: the same file's related passages may be different now. */
  indexChanged(): void {
    this.schedule(true);
  }

  async refresh(force = false): Promise<void> {
    if (!this.view.visible) return;
    const editor = vscode.window.activeTextEditor;
    // Focus in a non-markdown editor (output, settings) keeps the last file's passages.
    const uri = editor?.document.languageId === 'markdown' && editor.document.uri.scheme === 'file'
      ? editor.document.uri
      : this.target;
    if (uri === undefined) {
      this.show([], 'Open a markdown file to see passages related to it.', undefined);
      return;
    }
    if (!force && this.target?.toString() === uri.toString() && this.nodes.length > 0) return;
    const client = this.session.client;
    if (client === undefined || !client.isRunning()) {
      this.show([], 'The saipling server is not running.', uri);
      return;
    }
    this.source?.cancel();
    const source = new vscode.CancellationTokenSource();
    this.source = source;
    const root = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
    try {
      const params = buildRelatedParams(
        client.code2ProtocolConverter.asUri(uri),
        vscode.workspace.getConfiguration('saipling').get('maxResults'),
      );
      const response = await client.sendRequest<RelatedResponse>(Methods.related, params, source.token);
      if (source.token.isCancellationRequested) return;
      const nodes = response.results.map((result) => toNode(result, root));
      this.show(nodes, nodes.length === 0 ? `No passages related to ${displayPath(uri.fsPath, root)} yet.` : undefined, uri);
    } catch (error) {
      if (!isCancellation(error)) this.show([], requestErrorMessage('related passages', error), uri);
    } finally {
      if (this.source === source) this.source = undefined;
      source.dispose();
    }
  }

  getTreeItem(node: RelatedNode): vscode.TreeItem {
    const item = new vscode.TreeItem(node.label, vscode.TreeItemCollapsibleState.None);
    item.description = node.description;
    item.tooltip = node.tooltip;
    // Screen readers (and the list's aria-label) read the row as shown, not the tooltip.
    item.accessibilityInformation = { label: [node.label, node.description].filter(Boolean).join(', ') };
    if (node.result !== undefined) {
      item.iconPath = new vscode.ThemeIcon('note');
      item.command = { command: OPEN_RESULT_COMMAND, title: 'Open Passage', arguments: [node.result] };
    }
    return item;
  }

  getChildren(node?: RelatedNode): RelatedNode[] {
    return node === undefined ? this.nodes : [];
  }

  dispose(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.source?.cancel();
    for (const d of this.disposables) d.dispose();
  }

  private show(nodes: RelatedNode[], message: string | undefined, target: vscode.Uri | undefined): void {
    this.nodes = nodes;
    this.target = target;
    this.view.message = message;
    const root = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
    this.view.description = target ? displayPath(target.fsPath, root) : undefined;
    this.changed.fire(undefined);
  }
}

function toNode(result: SearchResult, root?: string): RelatedNode {
  const file = displayPath(result.filePath, root);
  const section = sectionOf(result);
  return {
    result,
    label: section ? `${file} § ${section}` : file,
    description: `${formatScore(result.score)} · ${formatLines(result.startLine, result.endLine)}`,
    // The row is cut to the sidebar's width: the tooltip has it whole, with the passage's text.
    tooltip: `${section ? `${file} § ${section}` : file}\n${formatLines(result.startLine, result.endLine)}\n\n` +
      oneLine(result.preview || result.snippet, 400),
  };
}

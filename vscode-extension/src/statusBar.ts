// Status-bar item: index size when idle, percentage while indexing (from `$/progress`, else from
// polling `saipling/status`), a warning when degraded, a stop sign when the server is not running.
import * as vscode from 'vscode';
import type { ProgressToken, WorkDoneProgressBegin, WorkDoneProgressEnd, WorkDoneProgressReport } from 'vscode-languageclient/node';
import type { Session } from './client';
import { statusView, type ProgressState } from './format';
import { Methods, type StatusResponse } from './protocol';
import { keywordOnlyByChoice } from './settings';

export const POLL_INDEXING_MS = 1500;
export const POLL_PENDING_MS = 10000;
export const POLL_IDLE_MS = 30000;

export class StatusBar implements vscode.Disposable {
  private readonly item: vscode.StatusBarItem;
  private readonly progress = new Map<ProgressToken, ProgressState>();
  private status: StatusResponse | undefined;
  private running = false;
  private error: string | undefined;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private disposed = false;
  private readonly finished = new vscode.EventEmitter<void>();
  /** Indexing ended (the `$/progress` end, or `isIndexing` turned false): the index has changed. */
  readonly onDidFinishIndexing = this.finished.event;

  constructor(
    private readonly session: Session,
    command: string,
  ) {
    this.item = vscode.window.createStatusBarItem('saipling.status', vscode.StatusBarAlignment.Left, 50);
    this.item.name = 'Saipling Search';
    this.item.command = command;
    this.render();
    this.item.show();
  }

  /** The client started or stopped. */
  setRunning(running: boolean): void {
    this.running = running;
    this.error = undefined;
    if (!running) {
      this.progress.clear();
      this.status = undefined;
    }
    this.render();
    this.schedule(running ? 0 : undefined);
  }

  stopped(reason: string): void {
    this.setRunning(false);
    this.error = reason;
    this.render();
  }

  /** A `$/progress` value from the server (through the client's middleware). */
  onProgress(token: ProgressToken, value: WorkDoneProgressBegin | WorkDoneProgressReport | WorkDoneProgressEnd): void {
    if (value.kind === 'end') {
      this.progress.delete(token);
      this.finished.fire();
      this.schedule(0);
    } else {
      const previous = this.progress.get(token) ?? {};
      this.progress.set(token, {
        title: value.kind === 'begin' ? value.title : previous.title,
        message: value.message ?? previous.message,
        percentage: value.percentage ?? previous.percentage,
      });
    }
    this.render();
  }

  /** Refreshes soon and resumes polling (after a reindex or a clear). */
  poke(): void {
    if (this.running) {
      this.schedule(0);
    }
  }

  /** Asks the server for its status now and renders it. */
  async refresh(): Promise<StatusResponse | undefined> {
    const client = this.session.client;
    if (client === undefined || !client.isRunning()) {
      return undefined;
    }
    try {
      const wasIndexing = this.status?.isIndexing === true;
      this.status = await client.sendRequest<StatusResponse>(Methods.status, {});
      this.error = undefined;
      if (wasIndexing && !this.status.isIndexing) this.finished.fire();
    } catch (error) {
      this.error = `Saipling: status request failed: ${error instanceof Error ? error.message : String(error)}`;
    }
    this.render();
    return this.status;
  }

  dispose(): void {
    this.disposed = true;
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
    }
    this.item.dispose();
    this.finished.dispose();
  }

  private currentProgress(): ProgressState | undefined {
    let last: ProgressState | undefined;
    for (const state of this.progress.values()) {
      last = state;
    }
    return last;
  }

  private render(): void {
    const view = statusView({
      running: this.running,
      status: this.status,
      progress: this.currentProgress(),
      error: this.error,
      keywordOnlyByChoice: keywordOnlyByChoice(vscode.workspace.getConfiguration('saipling').get('provider')),
    });
    this.item.text = view.text;
    this.item.tooltip = this.error && view.state !== 'stopped' ? `${view.tooltip}\n${this.error}` : view.tooltip;
    this.item.backgroundColor =
      view.state === 'degraded' || view.state === 'stopped'
        ? new vscode.ThemeColor('statusBarItem.warningBackground')
        : undefined;
  }

  /** Polls soon while indexing, rarely when idle; `delayMs` undefined stops polling. */
  private schedule(delayMs: number | undefined): void {
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    if (this.disposed || delayMs === undefined) {
      return;
    }
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.refresh().then((status) => {
        if (this.running) {
          const busy = status?.isIndexing || this.progress.size > 0;
          const pending = (status?.pendingFiles ?? 0) > 0;
          this.schedule(busy ? POLL_INDEXING_MS : pending ? POLL_PENDING_MS : POLL_IDLE_MS);
        }
      });
    }, delayMs);
  }
}

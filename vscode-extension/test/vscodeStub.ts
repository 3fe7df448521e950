// STUB of the `vscode` module, for tests only.
//
// VS Code cannot run in CI (no display, no download of the editor), so the test bundles resolve
// `import 'vscode'` to this file (see esbuild.mjs). It implements the part of the API that
// vscode-languageclient and this extension touch, in memory, and lets a test play the user:
// answer message boxes, quick picks and input boxes, type into a QuickPick, and see which
// document was opened at which selection. Everything else in the tests is real: the
// LanguageClient, the `saipling serve` process and the JSON-RPC messages between them.
//
// Behaviour copied from VS Code where it matters: registering a command id twice throws,
// configuration defaults come from package.json `contributes.configuration`.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { URI, Utils } from 'vscode-uri';
import * as packageJson from '../package.json';

// ---------------------------------------------------------------------------------------------
// Basic types

export type Event<T> = (listener: (e: T) => unknown, thisArgs?: unknown, disposables?: Disposable[]) => Disposable;

export class Disposable {
  static from(...items: { dispose(): unknown }[]): Disposable {
    return new Disposable(() => items.forEach((item) => item.dispose()));
  }
  constructor(private readonly callOnDispose: () => unknown) {}
  dispose(): void {
    this.callOnDispose();
  }
}

export class EventEmitter<T> {
  private listeners = new Set<(e: T) => unknown>();
  readonly event: Event<T> = (listener, thisArgs, disposables) => {
    const bound = (e: T) => listener.call(thisArgs, e);
    this.listeners.add(bound);
    const disposable = new Disposable(() => this.listeners.delete(bound));
    disposables?.push(disposable);
    return disposable;
  };
  fire(e: T): void {
    for (const listener of [...this.listeners]) {
      listener(e);
    }
  }
  dispose(): void {
    this.listeners.clear();
  }
}

export class CancellationError extends Error {
  constructor() {
    super('Canceled');
    this.name = 'Canceled';
  }
}

export interface CancellationToken {
  isCancellationRequested: boolean;
  onCancellationRequested: Event<void>;
}

export class CancellationTokenSource {
  private readonly emitter = new EventEmitter<void>();
  private cancelled = false;
  readonly token: CancellationToken;
  constructor() {
    // eslint-disable-next-line @typescript-eslint/no-this-alias
    const source = this;
    this.token = {
      get isCancellationRequested() {
        return source.cancelled;
      },
      onCancellationRequested: this.emitter.event,
    };
  }
  cancel(): void {
    if (!this.cancelled) {
      this.cancelled = true;
      this.emitter.fire();
    }
  }
  dispose(): void {
    this.emitter.dispose();
  }
}

/** VS Code's Uri is vscode-uri's URI (the same implementation), plus `joinPath`. */
export const Uri = Object.assign(URI, {
  joinPath: (base: URI, ...segments: string[]): URI => Utils.joinPath(base, ...segments),
});
export type Uri = URI;

export class Position {
  constructor(
    readonly line: number,
    readonly character: number,
  ) {}
  isEqual(other: Position): boolean {
    return this.line === other.line && this.character === other.character;
  }
  isBefore(other: Position): boolean {
    return this.line < other.line || (this.line === other.line && this.character < other.character);
  }
  translate(lineDelta = 0, characterDelta = 0): Position {
    return new Position(this.line + lineDelta, this.character + characterDelta);
  }
}

export class Range {
  readonly start: Position;
  readonly end: Position;
  constructor(startOrLine: Position | number, endOrChar: Position | number, endLine?: number, endChar?: number) {
    if (typeof startOrLine === 'number') {
      this.start = new Position(startOrLine, endOrChar as number);
      this.end = new Position(endLine ?? startOrLine, endChar ?? (endOrChar as number));
    } else {
      this.start = startOrLine;
      this.end = endOrChar as Position;
    }
  }
  get isEmpty(): boolean {
    return this.start.isEqual(this.end);
  }
  get isSingleLine(): boolean {
    return this.start.line === this.end.line;
  }
}

/** As in VS Code: `start`/`end` ordered, `anchor`/`active` as given. */
export class Selection extends Range {
  readonly anchor: Position;
  readonly active: Position;
  constructor(anchorOrLine: Position | number, activeOrChar: Position | number, activeLine?: number, activeChar?: number) {
    const anchor = typeof anchorOrLine === 'number' ? new Position(anchorOrLine, activeOrChar as number) : anchorOrLine;
    const active =
      typeof anchorOrLine === 'number' ? new Position(activeLine ?? anchorOrLine, activeChar ?? 0) : (activeOrChar as Position);
    const [start, end] = active.isBefore(anchor) ? [active, anchor] : [anchor, active];
    super(start, end);
    this.anchor = anchor;
    this.active = active;
  }
  get isReversed(): boolean {
    return this.active.isBefore(this.anchor);
  }
}

export class Location {
  constructor(
    readonly uri: Uri,
    readonly range: Range | Position,
  ) {}
}

export class ThemeColor {
  constructor(readonly id: string) {}
}

export class ThemeIcon {
  constructor(readonly id: string) {}
}

export enum TreeItemCollapsibleState {
  None = 0,
  Collapsed = 1,
  Expanded = 2,
}

export class TreeItem {
  description?: string;
  tooltip?: unknown;
  iconPath?: unknown;
  accessibilityInformation?: { label: string; role?: string };
  command?: { command: string; title: string; arguments?: unknown[] };
  constructor(
    public label: string,
    public collapsibleState: TreeItemCollapsibleState = TreeItemCollapsibleState.None,
  ) {}
}

/** A tree view that is never visible (the stub has no sidebar): providers it shows are not asked for data. */
export class StubTreeView<T> {
  readonly visible = false;
  message: string | undefined;
  description: string | undefined;
  private readonly visibility = new EventEmitter<{ visible: boolean }>();
  readonly onDidChangeVisibility = this.visibility.event;
  constructor(
    readonly id: string,
    readonly options: { treeDataProvider: T },
  ) {}
  dispose(): void {
    this.visibility.dispose();
  }
}

export class MarkdownString {
  constructor(public value = '') {}
}

export class RelativePattern {
  constructor(
    readonly base: unknown,
    readonly pattern: string,
  ) {}
}

// Classes vscode-languageclient subclasses when its modules load; only their shape matters here.
export class CompletionItem {
  constructor(
    public label: unknown,
    public kind?: number,
  ) {}
}
export class CodeLens {
  constructor(
    public range: Range,
    public command?: unknown,
  ) {}
}
export class DocumentLink {
  constructor(
    public range: Range,
    public target?: Uri,
  ) {}
}
export class InlayHint {
  constructor(
    public position: Position,
    public label: unknown,
    public kind?: number,
  ) {}
}
export class SymbolInformation {
  constructor(
    public name: string,
    public kind: number,
    public containerName: string,
    public location: Location,
  ) {}
}
export class CallHierarchyItem {
  constructor(
    public kind: number,
    public name: string,
    public detail: string,
    public uri: Uri,
    public range: Range,
    public selectionRange: Range,
  ) {}
}
export class TypeHierarchyItem extends CallHierarchyItem {}
export class CodeAction {
  constructor(
    public title: string,
    public kind?: unknown,
  ) {}
}
export class Diagnostic {
  constructor(
    public range: Range,
    public message: string,
    public severity?: number,
  ) {}
}

export class CodeActionKind {
  static readonly Empty = new CodeActionKind('');
  static readonly QuickFix = new CodeActionKind('quickfix');
  static readonly Refactor = new CodeActionKind('refactor');
  static readonly RefactorExtract = new CodeActionKind('refactor.extract');
  static readonly RefactorInline = new CodeActionKind('refactor.inline');
  static readonly RefactorMove = new CodeActionKind('refactor.move');
  static readonly RefactorRewrite = new CodeActionKind('refactor.rewrite');
  static readonly Source = new CodeActionKind('source');
  static readonly SourceOrganizeImports = new CodeActionKind('source.organizeImports');
  static readonly SourceFixAll = new CodeActionKind('source.fixAll');
  static readonly Notebook = new CodeActionKind('notebook');
  constructor(readonly value: string) {}
  append(part: string): CodeActionKind {
    return new CodeActionKind(this.value ? `${this.value}.${part}` : part);
  }
}

export enum DiagnosticTag {
  Unnecessary = 1,
  Deprecated = 2,
}
export enum SymbolTag {
  Deprecated = 1,
}
export enum CompletionItemTag {
  Deprecated = 1,
}
export enum DocumentHighlightKind {
  Text = 0,
  Read = 1,
  Write = 2,
}
export enum SymbolKind {
  File = 0, Module, Namespace, Package, Class, Method, Property, Field, Constructor, Enum, Interface,
  Function, Variable, Constant, String, Number, Boolean, Array, Object, Key, Null, EnumMember, Struct,
  Event, Operator, TypeParameter,
}

export enum StatusBarAlignment {
  Left = 1,
  Right = 2,
}
export enum ProgressLocation {
  SourceControl = 1,
  Window = 10,
  Notification = 15,
}
export enum TextEditorRevealType {
  Default = 0,
  InCenter = 1,
  InCenterIfOutsideViewport = 2,
  AtTop = 3,
}
export enum QuickPickItemKind {
  Separator = -1,
  Default = 0,
}
export enum ConfigurationTarget {
  Global = 1,
  Workspace = 2,
  WorkspaceFolder = 3,
}
export enum DiagnosticSeverity {
  Error = 0,
  Warning = 1,
  Information = 2,
  Hint = 3,
}
export enum FileType {
  Unknown = 0,
  File = 1,
  Directory = 2,
  SymbolicLink = 64,
}
export enum EndOfLine {
  LF = 1,
  CRLF = 2,
}

export const version = '1.85.0';

// ---------------------------------------------------------------------------------------------
// What the test controls and observes

export interface RecordedMessage {
  kind: 'info' | 'warning' | 'error';
  message: string;
  items: string[];
}

export interface ShownDocument {
  uri: Uri;
  selection: Range | undefined;
  revealed: Range[];
}

export interface Responders {
  /** Answer to showInformation/Warning/ErrorMessage (default: dismissed). */
  message: (m: RecordedMessage) => string | undefined;
  /** Answer to showQuickPick (default: dismissed). */
  quickPick: (items: readonly QuickPickItemLike[], options: unknown) => QuickPickItemLike | undefined;
  /** Answer to showInputBox (default: dismissed). */
  inputBox: (options: { password?: boolean; title?: string; prompt?: string }) => string | undefined;
}

export interface QuickPickItemLike {
  label: string;
  description?: string;
  detail?: string;
  alwaysShow?: boolean;
  [key: string]: unknown;
}

const configurationDefaults: Record<string, unknown> = Object.fromEntries(
  Object.entries(packageJson.contributes.configuration.properties).map(([key, schema]) => [
    key,
    (schema as { default?: unknown }).default,
  ]),
);

export const stub = {
  messages: [] as RecordedMessage[],
  shownDocuments: [] as ShownDocument[],
  quickPicks: [] as StubQuickPick[],
  statusBarItems: [] as StubStatusBarItem[],
  executedCommands: [] as { command: string; args: unknown[] }[],
  output: [] as string[],
  responders: {
    message: () => undefined,
    quickPick: () => undefined,
    inputBox: () => undefined,
  } as Responders,
  settings: new Map<string, unknown>(),
  /** Prints every output-channel line to stderr as well (VSCODE_E2E_VERBOSE=1). */
  verbose: process.env.VSCODE_E2E_VERBOSE === '1',

  /** Sets `saipling.<key>` (or any full key) and fires onDidChangeConfiguration like the editor. */
  setSetting(key: string, value: unknown): void {
    this.settings.set(key, value);
    configurationEmitter.fire({ affectsConfiguration: (section: string) => affects(key, section) });
  },
  reset(): void {
    this.messages.length = 0;
    this.shownDocuments.length = 0;
    this.quickPicks.length = 0;
    this.statusBarItems.length = 0;
    this.executedCommands.length = 0;
    this.output.length = 0;
    progressLog.length = 0;
    this.settings.clear();
    this.responders = { message: () => undefined, quickPick: () => undefined, inputBox: () => undefined };
    commandRegistry.clear();
    workspace.workspaceFolders = undefined;
    window.activeTextEditor = undefined;
  },
};

function affects(key: string, section: string): boolean {
  return key === section || key.startsWith(`${section}.`) || section.startsWith(`${key}.`);
}

function settingValue(fullKey: string): unknown {
  if (stub.settings.has(fullKey)) {
    return stub.settings.get(fullKey);
  }
  if (fullKey in configurationDefaults) {
    return configurationDefaults[fullKey];
  }
  // A section: the nested object of its keys, as VS Code returns for `get('saipling')`.
  const prefix = `${fullKey}.`;
  const keys = new Set([...Object.keys(configurationDefaults), ...stub.settings.keys()].filter((k) => k.startsWith(prefix)));
  if (keys.size === 0) {
    return undefined;
  }
  // Dotted keys nest, as in VS Code: saipling.trace.server -> { trace: { server } }.
  const result: Record<string, unknown> = {};
  for (const key of keys) {
    const parts = key.slice(prefix.length).split('.');
    let target = result;
    for (const part of parts.slice(0, -1)) {
      target = (target[part] ??= {}) as Record<string, unknown>;
    }
    target[parts[parts.length - 1]] = stub.settings.has(key) ? stub.settings.get(key) : configurationDefaults[key];
  }
  return result;
}

// ---------------------------------------------------------------------------------------------
// commands

const commandRegistry = new Map<string, (...args: unknown[]) => unknown>();

export const commands = {
  registerCommand(id: string, callback: (...args: unknown[]) => unknown, thisArg?: unknown): Disposable {
    if (commandRegistry.has(id)) {
      // As in VS Code's extension host.
      throw new Error(`command '${id}' already exists`);
    }
    commandRegistry.set(id, (...args) => callback.apply(thisArg, args));
    return new Disposable(() => commandRegistry.delete(id));
  },
  async executeCommand<T = unknown>(id: string, ...args: unknown[]): Promise<T> {
    stub.executedCommands.push({ command: id, args });
    const command = commandRegistry.get(id);
    if (command === undefined) {
      if (id.startsWith('workbench.') || id.startsWith('vscode.')) {
        return undefined as T;
      }
      throw new Error(`command '${id}' not found`);
    }
    return (await command(...args)) as T;
  },
  getCommands(): Promise<string[]> {
    return Promise.resolve([...commandRegistry.keys()]);
  },
};

// ---------------------------------------------------------------------------------------------
// documents and editors

export class StubTextDocument {
  readonly version = 1;
  readonly isDirty = false;
  readonly isClosed = false;
  readonly isUntitled = false;
  readonly eol = EndOfLine.LF;
  constructor(
    readonly uri: Uri,
    readonly languageId: string,
    private readonly text: string,
  ) {}
  get fileName(): string {
    return this.uri.fsPath;
  }
  get lineCount(): number {
    return this.text.split('\n').length;
  }
  getText(range?: Range): string {
    if (range === undefined) {
      return this.text;
    }
    const lines = this.text.split('\n');
    if (range.isSingleLine) {
      return (lines[range.start.line] ?? '').slice(range.start.character, range.end.character);
    }
    const parts = lines.slice(range.start.line, range.end.line + 1);
    parts[0] = parts[0].slice(range.start.character);
    parts[parts.length - 1] = parts[parts.length - 1].slice(0, range.end.character);
    return parts.join('\n');
  }
}

export class StubTextEditor {
  readonly revealed: Range[] = [];
  constructor(
    readonly document: StubTextDocument,
    public selection: Selection,
  ) {}
  revealRange(range: Range): void {
    this.revealed.push(range);
  }
}

const openDocuments = new Map<string, StubTextDocument>();

function openDocument(uri: Uri): StubTextDocument {
  const existing = openDocuments.get(uri.toString());
  if (existing !== undefined) {
    return existing;
  }
  const text = fs.readFileSync(uri.fsPath, 'utf8');
  const languageId = path.extname(uri.fsPath).toLowerCase() === '.md' ? 'markdown' : 'plaintext';
  const document = new StubTextDocument(uri, languageId, text);
  openDocuments.set(uri.toString(), document);
  workspace.textDocuments.push(document);
  openDocumentEmitter.fire(document);
  return document;
}

// ---------------------------------------------------------------------------------------------
// window

/** What window.withProgress showed (the LanguageClient shows `$/progress` through it). */
export const progressLog: { kind: 'begin' | 'report' | 'end'; title?: string; message?: string; increment?: number }[] = [];

export class StubStatusBarItem {
  /** Every text the item showed, oldest first. */
  readonly textHistory: string[] = [];
  private _text = '';
  get text(): string {
    return this._text;
  }
  set text(value: string) {
    this._text = value;
    if (this.textHistory.at(-1) !== value) {
      this.textHistory.push(value);
    }
  }
  tooltip: unknown = undefined;
  command: unknown = undefined;
  name: string | undefined;
  backgroundColor: ThemeColor | undefined;
  visible = false;
  disposed = false;
  constructor(
    readonly id: string | undefined,
    readonly alignment: StatusBarAlignment,
    readonly priority: number | undefined,
  ) {}
  show(): void {
    this.visible = true;
  }
  hide(): void {
    this.visible = false;
  }
  dispose(): void {
    this.disposed = true;
    this.visible = false;
  }
}

/** A QuickPick the test drives: `type(text)` and `accept(item)`. */
export class StubQuickPick {
  private readonly valueEmitter = new EventEmitter<string>();
  private readonly acceptEmitter = new EventEmitter<void>();
  private readonly hideEmitter = new EventEmitter<void>();
  private readonly activeEmitter = new EventEmitter<readonly QuickPickItemLike[]>();
  private readonly selectionEmitter = new EventEmitter<readonly QuickPickItemLike[]>();
  private readonly itemsEmitter = new EventEmitter<readonly QuickPickItemLike[]>();
  readonly onDidChangeValue = this.valueEmitter.event;
  readonly onDidAccept = this.acceptEmitter.event;
  readonly onDidHide = this.hideEmitter.event;
  readonly onDidChangeActive = this.activeEmitter.event;
  readonly onDidChangeSelection = this.selectionEmitter.event;
  readonly onDidTriggerButton = new EventEmitter<unknown>().event;
  readonly onDidTriggerItemButton = new EventEmitter<unknown>().event;
  /** Test-only: fires whenever the extension sets `items`. */
  readonly onDidSetItems = this.itemsEmitter.event;
  private _items: readonly QuickPickItemLike[] = [];
  value = '';
  title: string | undefined;
  placeholder: string | undefined;
  busy = false;
  enabled = true;
  ignoreFocusOut = false;
  canSelectMany = false;
  matchOnDescription = false;
  matchOnDetail = false;
  keepScrollPosition = false;
  buttons: unknown[] = [];
  activeItems: readonly QuickPickItemLike[] = [];
  selectedItems: readonly QuickPickItemLike[] = [];
  visible = false;
  disposed = false;

  get items(): readonly QuickPickItemLike[] {
    return this._items;
  }
  set items(items: readonly QuickPickItemLike[]) {
    this._items = items;
    this.activeItems = items.length > 0 ? [items[0]] : [];
    this.itemsEmitter.fire(items);
  }
  show(): void {
    this.visible = true;
  }
  hide(): void {
    if (this.visible) {
      this.visible = false;
      this.hideEmitter.fire();
    }
  }
  dispose(): void {
    this.disposed = true;
    this.hide();
  }
  /** The user typed: the value changes, as after each keystroke. */
  type(value: string): void {
    this.value = value;
    this.valueEmitter.fire(value);
  }
  /** The user pressed Enter on `item` (default: the active item). */
  accept(item?: QuickPickItemLike): void {
    if (item !== undefined) {
      this.activeItems = [item];
    }
    this.selectedItems = this.activeItems;
    this.selectionEmitter.fire(this.selectedItems);
    this.acceptEmitter.fire();
  }
}

function showMessage(kind: RecordedMessage['kind'], message: string, rest: unknown[]): Promise<string | undefined> {
  const items = rest.filter((item): item is string => typeof item === 'string');
  const recorded = { kind, message, items };
  stub.messages.push(recorded);
  return Promise.resolve(stub.responders.message(recorded));
}

function logLine(line: string): void {
  stub.output.push(line);
  if (stub.verbose) {
    process.stderr.write(`[output] ${line}\n`);
  }
}

function createOutputChannel(name: string) {
  return {
    name,
    logLevel: 2,
    onDidChangeLogLevel: new EventEmitter<number>().event,
    append: (value: string) => logLine(value),
    appendLine: (value: string) => logLine(value),
    replace: (value: string) => logLine(value),
    clear: () => undefined,
    show: () => undefined,
    hide: () => undefined,
    dispose: () => undefined,
    trace: (message: string) => logLine(message),
    debug: (message: string) => logLine(message),
    info: (message: string) => logLine(message),
    warn: (message: string) => logLine(message),
    error: (message: string | Error) => logLine(String(message)),
  };
}

const activeEditorEmitter = new EventEmitter<StubTextEditor | undefined>();

export const window = {
  activeTextEditor: undefined as StubTextEditor | undefined,
  visibleTextEditors: [] as StubTextEditor[],
  onDidChangeActiveTextEditor: activeEditorEmitter.event,
  onDidChangeVisibleTextEditors: new EventEmitter<StubTextEditor[]>().event,
  tabGroups: {
    all: [] as unknown[],
    onDidChangeTabs: new EventEmitter<unknown>().event,
    onDidChangeTabGroups: new EventEmitter<unknown>().event,
  },
  createOutputChannel,
  createStatusBarItem(
    idOrAlignment?: string | StatusBarAlignment,
    alignmentOrPriority?: StatusBarAlignment | number,
    priority?: number,
  ): StubStatusBarItem {
    const item =
      typeof idOrAlignment === 'string'
        ? new StubStatusBarItem(idOrAlignment, alignmentOrPriority ?? StatusBarAlignment.Left, priority)
        : new StubStatusBarItem(undefined, idOrAlignment ?? StatusBarAlignment.Left, alignmentOrPriority);
    stub.statusBarItems.push(item);
    return item;
  },
  showInformationMessage: (message: string, ...rest: unknown[]) => showMessage('info', message, rest),
  showWarningMessage: (message: string, ...rest: unknown[]) => showMessage('warning', message, rest),
  showErrorMessage: (message: string, ...rest: unknown[]) => showMessage('error', message, rest),
  async showQuickPick(
    items: readonly QuickPickItemLike[] | Thenable<readonly QuickPickItemLike[]>,
    options?: unknown,
  ): Promise<QuickPickItemLike | undefined> {
    return stub.responders.quickPick(await items, options);
  },
  showInputBox(options: { password?: boolean; title?: string; prompt?: string } = {}): Promise<string | undefined> {
    return Promise.resolve(stub.responders.inputBox(options));
  },
  createTreeView<T>(id: string, options: { treeDataProvider: T }): StubTreeView<T> {
    return new StubTreeView(id, options);
  },
  createQuickPick(): StubQuickPick {
    const picker = new StubQuickPick();
    stub.quickPicks.push(picker);
    return picker;
  },
  async withProgress<R>(
    options: { title?: string },
    task: (progress: { report(value: { message?: string; increment?: number }): void }, token: CancellationToken) => Thenable<R>,
  ): Promise<R> {
    const title = options.title;
    const source = new CancellationTokenSource();
    progressLog.push({ kind: 'begin', title });
    try {
      return await task({ report: (value) => progressLog.push({ kind: 'report', title, ...value }) }, source.token);
    } finally {
      progressLog.push({ kind: 'end', title });
      source.dispose();
    }
  },
  async showTextDocument(
    target: Uri | StubTextDocument,
    options?: { selection?: Range; preview?: boolean },
  ): Promise<StubTextEditor> {
    const document = target instanceof StubTextDocument ? target : openDocument(target);
    const given = options?.selection;
    const selection =
      given instanceof Selection ? given : given ? new Selection(given.start, given.end) : new Selection(0, 0, 0, 0);
    const editor = new StubTextEditor(document, selection);
    stub.shownDocuments.push({ uri: document.uri, selection: options?.selection, revealed: editor.revealed });
    window.activeTextEditor = editor;
    activeEditorEmitter.fire(editor);
    return Promise.resolve(editor);
  },
};

// ---------------------------------------------------------------------------------------------
// workspace

export interface ConfigurationChangeEvent {
  affectsConfiguration(section: string, scope?: unknown): boolean;
}

const configurationEmitter = new EventEmitter<ConfigurationChangeEvent>();
const openDocumentEmitter = new EventEmitter<StubTextDocument>();

function noEvent<T>(): Event<T> {
  return new EventEmitter<T>().event;
}

export const workspace = {
  workspaceFolders: undefined as { uri: Uri; name: string; index: number }[] | undefined,
  get name(): string | undefined {
    return workspace.workspaceFolders?.[0]?.name;
  },
  textDocuments: [] as StubTextDocument[],
  notebookDocuments: [] as unknown[],
  onDidChangeConfiguration: configurationEmitter.event,
  onDidOpenTextDocument: openDocumentEmitter.event,
  onDidCloseTextDocument: noEvent<StubTextDocument>(),
  onDidChangeTextDocument: noEvent<unknown>(),
  onDidSaveTextDocument: noEvent<StubTextDocument>(),
  onWillSaveTextDocument: noEvent<unknown>(),
  onDidChangeWorkspaceFolders: noEvent<unknown>(),
  onDidOpenNotebookDocument: noEvent<unknown>(),
  onDidCloseNotebookDocument: noEvent<unknown>(),
  onDidChangeNotebookDocument: noEvent<unknown>(),
  onDidSaveNotebookDocument: noEvent<unknown>(),
  onDidCreateFiles: noEvent<unknown>(),
  onDidRenameFiles: noEvent<unknown>(),
  onDidDeleteFiles: noEvent<unknown>(),
  onWillCreateFiles: noEvent<unknown>(),
  onWillRenameFiles: noEvent<unknown>(),
  onWillDeleteFiles: noEvent<unknown>(),
  getConfiguration(section?: string) {
    const full = (key: string) => (section ? `${section}.${key}` : key);
    const configuration: Record<string, unknown> = {
      get<T>(key: string, defaultValue?: T): T | undefined {
        const value = settingValue(full(key));
        return (value === undefined ? defaultValue : value) as T | undefined;
      },
      has(key: string): boolean {
        return settingValue(full(key)) !== undefined;
      },
      inspect(key: string) {
        return { key: full(key), defaultValue: configurationDefaults[full(key)], globalValue: stub.settings.get(full(key)) };
      },
      update(key: string, value: unknown): Promise<void> {
        stub.setSetting(full(key), value);
        return Promise.resolve();
      },
    };
    return configuration;
  },
  getWorkspaceFolder(uri: Uri) {
    return workspace.workspaceFolders?.find((folder) => uri.fsPath.startsWith(folder.uri.fsPath));
  },
  openTextDocument(uri: Uri): Promise<StubTextDocument> {
    return Promise.resolve(openDocument(uri));
  },
  createFileSystemWatcher() {
    return {
      ignoreCreateEvents: false,
      ignoreChangeEvents: false,
      ignoreDeleteEvents: false,
      onDidCreate: noEvent<Uri>(),
      onDidChange: noEvent<Uri>(),
      onDidDelete: noEvent<Uri>(),
      dispose: () => undefined,
    };
  },
  applyEdit: () => Promise.resolve(false),
};

// ---------------------------------------------------------------------------------------------
// languages, env

interface DocumentFilterLike {
  language?: string;
  scheme?: string;
  pattern?: string;
}

function matchFilter(filter: string | DocumentFilterLike, document: StubTextDocument): boolean {
  if (typeof filter === 'string') {
    return filter === '*' || filter === document.languageId;
  }
  if (filter.language !== undefined && filter.language !== '*' && filter.language !== document.languageId) {
    return false;
  }
  if (filter.scheme !== undefined && filter.scheme !== '*' && filter.scheme !== document.uri.scheme) {
    return false;
  }
  return true;
}

const registeredProviders: string[] = [];
function registerProvider(kind: string): () => Disposable {
  return () => {
    registeredProviders.push(kind);
    return new Disposable(() => undefined);
  };
}

export const languages = {
  match(selector: string | DocumentFilterLike | (string | DocumentFilterLike)[], document: StubTextDocument): number {
    const filters = Array.isArray(selector) ? selector : [selector];
    return filters.some((filter) => matchFilter(filter, document)) ? 10 : 0;
  },
  createDiagnosticCollection(name?: string) {
    const entries = new Map<string, unknown[]>();
    return {
      name,
      set: (uri: Uri, diagnostics: unknown[]) => entries.set(uri.toString(), diagnostics),
      delete: (uri: Uri) => entries.delete(uri.toString()),
      clear: () => entries.clear(),
      get: (uri: Uri) => entries.get(uri.toString()),
      has: (uri: Uri) => entries.has(uri.toString()),
      forEach: () => undefined,
      dispose: () => entries.clear(),
    };
  },
  registerWorkspaceSymbolProvider: registerProvider('workspaceSymbol'),
  registerDocumentSymbolProvider: registerProvider('documentSymbol'),
  registerHoverProvider: registerProvider('hover'),
  registerCompletionItemProvider: registerProvider('completion'),
  registerDefinitionProvider: registerProvider('definition'),
  registerReferenceProvider: registerProvider('reference'),
  registerDocumentLinkProvider: registerProvider('documentLink'),
  registerFoldingRangeProvider: registerProvider('foldingRange'),
  registerCodeActionsProvider: registerProvider('codeAction'),
  registerCodeLensProvider: registerProvider('codeLens'),
  registerDocumentHighlightProvider: registerProvider('documentHighlight'),
  registerRenameProvider: registerProvider('rename'),
  registerSelectionRangeProvider: registerProvider('selectionRange'),
  registerSignatureHelpProvider: registerProvider('signatureHelp'),
  registerInlayHintsProvider: registerProvider('inlayHints'),
};

export const env = {
  language: 'en',
  appName: 'Visual Studio Code (test stub)',
  appRoot: '',
  uriScheme: 'vscode',
  machineId: 'stub-machine',
  sessionId: 'stub-session',
  openExternal: () => Promise.resolve(true),
  clipboard: { readText: () => Promise.resolve(''), writeText: () => Promise.resolve() },
};

// ---------------------------------------------------------------------------------------------
// Extension context

export class StubSecretStorage {
  private readonly values = new Map<string, string>();
  private readonly emitter = new EventEmitter<{ key: string }>();
  readonly onDidChange = this.emitter.event;
  get(key: string): Promise<string | undefined> {
    return Promise.resolve(this.values.get(key));
  }
  store(key: string, value: string): Promise<void> {
    this.values.set(key, value);
    this.emitter.fire({ key });
    return Promise.resolve();
  }
  delete(key: string): Promise<void> {
    this.values.delete(key);
    this.emitter.fire({ key });
    return Promise.resolve();
  }
}

class StubMemento {
  private readonly values = new Map<string, unknown>();
  keys(): readonly string[] {
    return [...this.values.keys()];
  }
  get<T>(key: string, defaultValue?: T): T | undefined {
    return (this.values.has(key) ? this.values.get(key) : defaultValue) as T | undefined;
  }
  update(key: string, value: unknown): Promise<void> {
    this.values.set(key, value);
    return Promise.resolve();
  }
  setKeysForSync(): void {}
}

export function createExtensionContext(extensionPath: string, storagePath: string) {
  return {
    subscriptions: [] as { dispose(): unknown }[],
    secrets: new StubSecretStorage(),
    globalState: new StubMemento(),
    workspaceState: new StubMemento(),
    extensionPath,
    extensionUri: Uri.file(extensionPath),
    storageUri: Uri.file(storagePath),
    globalStorageUri: Uri.file(storagePath),
    logUri: Uri.file(storagePath),
    extensionMode: 3,
    asAbsolutePath: (relative: string) => path.join(extensionPath, relative),
  };
}

/** Test-only: which language features the client registered (e.g. 'workspaceSymbol'). */
export function registeredProviderKinds(): readonly string[] {
  return registeredProviders;
}

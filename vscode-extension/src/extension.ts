// Starts `saipling serve` as a language server for markdown files; features live in their own files.
import * as vscode from 'vscode';
import { State, type LanguageClientOptions, type ServerOptions } from 'vscode-languageclient/node';
import { COMMANDS, resolveCommandOrExplain, SaiplingLanguageClient, type Session } from './client';
import { suggestHidingIndex } from './excludeHint';
import { registerIndexCommands } from './indexCommands';
import { registerMentions } from './mentions';
import { registerRelated } from './related';
import { RelatedView } from './relatedView';
import { registerSearchPicker } from './searchPicker';
import { readApiKeys, registerSetApiKey } from './secrets';
import { buildInitializationOptions, cleanConfigurationValues, needsRestart } from './settings';
import { StatusBar } from './statusBar';

let client: SaiplingLanguageClient | undefined;
let relatedView: RelatedView | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<Session> {
  const output = vscode.window.createOutputChannel('Saipling Search');
  const session: Session = {
    get client() { return client; },
    restart: () => restart(context, output, statusBar),
    indexChanged: () => statusBar.poke(),
  };
  const statusBar = new StatusBar(session, COMMANDS.showStatus);
  relatedView = new RelatedView(session);
  context.subscriptions.push(output, statusBar, relatedView, registerSearchPicker(session), registerRelated(session),
    registerMentions(session),
    statusBar.onDidFinishIndexing(() => relatedView?.indexChanged()),
    ...registerIndexCommands(session), registerSetApiKey(context, session),
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (needsRestart((setting) => e.affectsConfiguration(setting))) void session.restart();
    }));
  await startClient(context, output, statusBar);
  relatedView.indexChanged();
  void suggestHidingIndex(context).catch((error: unknown) =>
    output.appendLine(`Saipling: the files.exclude hint failed: ${String(error)}`));
  return session;
}

/** The `saipling.*` values the user set in their own (global) settings, not a workspace's. */
function userSettings(): Record<string, unknown> {
  const config = vscode.workspace.getConfiguration('saipling');
  const merged = vscode.workspace.getConfiguration().get<Record<string, unknown>>('saipling') ?? {};
  const out: Record<string, unknown> = {};
  for (const key of Object.keys(merged)) {
    const value = config.inspect(key)?.globalValue;
    if (value !== undefined) out[key] = value;
  }
  return out;
}

async function startClient(context: vscode.ExtensionContext, output: vscode.OutputChannel, statusBar: StatusBar) {
  const config = vscode.workspace.getConfiguration('saipling');
  const folder = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
  const command = config.get<boolean>('enabled', true) ? await resolveCommandOrExplain(config, folder) : undefined;
  if (command === undefined) return statusBar.stopped('Saipling: the server is disabled or was not found');
  // No `transport`: with TransportKind.stdio the client would append `--stdio` to the arguments.
  const serverOptions: ServerOptions = { command: command.command, args: command.args, options: { cwd: folder } };
  const clientOptions: LanguageClientOptions = {
    documentSelector: [{ scheme: 'file', language: 'markdown' }],
    synchronize: { configurationSection: 'saipling' },
    initializationOptions: buildInitializationOptions(
      vscode.workspace.getConfiguration().get('saipling'), await readApiKeys(context.secrets), userSettings()),
    outputChannel: output,
    middleware: {
      handleWorkDoneProgress: (token, params, next) => { statusBar.onProgress(token, params); next(token, params); },
      // The server gets only its own keys, without the unset (null/empty) ones.
      workspace: { configuration: async (params, token, next) => {
        const values = await next(params, token);
        return Array.isArray(values) ? cleanConfigurationValues(params.items, values, userSettings()) : values;
      } },
    },
  };
  client = new SaiplingLanguageClient('saipling', 'Saipling Search', serverOptions, clientOptions);
  client.onDidChangeState((e) => {
    statusBar.setRunning(e.newState === State.Running);
    if (e.newState === State.Running) relatedView?.indexChanged();
  });
  try {
    await client.start();
  } catch (error) {
    statusBar.stopped(`Saipling: the server did not start: ${error instanceof Error ? error.message : String(error)}`);
  }
}

async function restart(context: vscode.ExtensionContext, output: vscode.OutputChannel, statusBar: StatusBar) {
  const previous = client;
  client = undefined;
  await previous?.stop().catch((error: unknown) => output.appendLine(`Saipling: stopping the server failed: ${String(error)}`));
  await startClient(context, output, statusBar);
}

export function deactivate(): Thenable<void> | undefined {
  return client?.stop();
}

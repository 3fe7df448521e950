// What the features share: the running client, a guard for "not running", error reporting,
// and the start-up checks of the server command.
import * as vscode from 'vscode';
import {
  ErrorCodes,
  LanguageClient,
  ResponseError,
  type DynamicFeature,
  type ExecuteCommandRegistrationOptions,
  type RegistrationData,
  type StaticFeature,
} from 'vscode-languageclient/node';
import { checkPythonHasSaipling, resolveServerCommand, type ResolvedCommand } from './serverCommand';

/** The extension's commands (package.json `contributes.commands`). */
export const COMMANDS = {
  searchProject: 'saipling.searchProject',
  findRelated: 'saipling.findRelated',
  findRelatedToPassage: 'saipling.findRelatedToPassage',
  reindex: 'saipling.reindex',
  clearIndex: 'saipling.clearIndex',
  showStatus: 'saipling.showStatus',
  setApiKey: 'saipling.setApiKey',
  mentionsOf: 'saipling.mentionsOf',
} as const;

const OWN_COMMANDS: ReadonlySet<string> = new Set(Object.values(COMMANDS));

/** The running client (if any) and a way to restart it, handed to every feature. */
export interface Session {
  readonly client: LanguageClient | undefined;
  restart(): Promise<void>;
  /** The index changed (reindex started, index cleared): refresh the status bar now. */
  indexChanged(): void;
}

/**
 * A LanguageClient that does not register the server's `workspace/executeCommand` commands whose
 * ids the extension already owns (`saipling.reindex`, `saipling.clearIndex`): VS Code throws on a
 * second registration of a command id, which would fail the client's start.
 */
export class SaiplingLanguageClient extends LanguageClient {
  public override registerFeature(feature: StaticFeature | DynamicFeature<unknown>): void {
    if ('registrationType' in feature && feature.registrationType.method === 'workspace/executeCommand') {
      const commandFeature = feature as DynamicFeature<ExecuteCommandRegistrationOptions>;
      const register = commandFeature.register.bind(commandFeature);
      commandFeature.register = (data: RegistrationData<ExecuteCommandRegistrationOptions>) =>
        register({
          ...data,
          registerOptions: {
            ...data.registerOptions,
            commands: data.registerOptions.commands.filter((command) => !OWN_COMMANDS.has(command)),
          },
        });
    }
    super.registerFeature(feature);
  }
}

/** The running client, or undefined after telling the user the server is not running. */
export function requireClient(session: Session): LanguageClient | undefined {
  const client = session.client;
  if (client === undefined || !client.isRunning()) {
    void vscode.window
      .showWarningMessage('Saipling: the language server is not running.', 'Restart Server', 'Show Output')
      .then((choice) => {
        if (choice === 'Restart Server') {
          void session.restart();
        } else if (choice === 'Show Output') {
          client?.outputChannel.show();
        }
      });
    return undefined;
  }
  return client;
}

/** True when the error is the answer to a request we cancelled. */
export function isCancellation(error: unknown): boolean {
  return (
    error instanceof vscode.CancellationError ||
    (error instanceof ResponseError &&
      (error.code === ErrorCodes.PendingResponseRejected || error.code === -32800))
  );
}

/** One-line message for a failed request. */
export function requestErrorMessage(what: string, error: unknown): string {
  const detail = error instanceof Error ? error.message : String(error);
  return `Saipling: ${what} failed: ${detail}`;
}

export function showRequestError(what: string, error: unknown): void {
  if (!isCancellation(error)) {
    void vscode.window.showErrorMessage(requestErrorMessage(what, error));
  }
}

/**
 * The server command from the settings; when it cannot be found, an error message with an
 * "Open Settings" action and undefined.
 */
export async function resolveCommandOrExplain(
  config: vscode.WorkspaceConfiguration,
  workspaceFolder: string | undefined,
): Promise<ResolvedCommand | undefined> {
  const resolution = resolveServerCommand(
    {
      serverCommand: config.get<string>('serverCommand'),
      serverArgs: config.get<string[]>('serverArgs'),
      pythonPath: config.get<string>('pythonPath'),
    },
    { env: process.env, platform: process.platform, workspaceFolder },
  );
  let problem = resolution.ok ? undefined : { message: resolution.message, setting: resolution.setting };
  if (resolution.ok && resolution.viaPython) {
    const message = await checkPythonHasSaipling(resolution.command);
    problem = message === undefined ? undefined : { message, setting: 'saipling.pythonPath' };
  }
  if (problem !== undefined) {
    const setting = problem.setting;
    void vscode.window.showErrorMessage(problem.message, 'Open Settings').then((choice) => {
      if (choice === 'Open Settings') {
        void vscode.commands.executeCommand('workbench.action.openSettings', setting);
      }
    });
    return undefined;
  }
  return resolution.ok ? resolution : undefined;
}

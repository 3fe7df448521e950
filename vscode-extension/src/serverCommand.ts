// Resolves the command that starts `saipling serve` and explains a missing one.
// No `vscode` import: unit-tested with node.
import { execFile } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

export interface ServerCommandSettings {
  serverCommand?: string | null;
  serverArgs?: readonly string[] | null;
  pythonPath?: string | null;
}

export interface ResolvedCommand {
  ok: true;
  command: string;
  args: string[];
  /** True when the server runs as `<python> -m saipling serve`. */
  viaPython: boolean;
}

export interface MissingCommand {
  ok: false;
  /** The setting the user should change. */
  setting: 'saipling.serverCommand' | 'saipling.pythonPath';
  message: string;
}

export type Resolution = ResolvedCommand | MissingCommand;

export interface ResolveEnv {
  /** PATH-like environment; only PATH and PATHEXT are read. */
  env: Record<string, string | undefined>;
  platform: NodeJS.Platform;
  /** Folder substituted for `${workspaceFolder}`. */
  workspaceFolder?: string;
  homeDir?: string;
  isExecutable?: (file: string) => boolean;
}

export const DEFAULT_COMMAND = 'saipling';
export const DEFAULT_ARGS: readonly string[] = ['serve'];
export const PYTHON_ARGS: readonly string[] = ['-m', 'saipling', 'serve'];

function defaultIsExecutable(file: string): boolean {
  try {
    const stat = fs.statSync(file);
    if (!stat.isFile()) {
      return false;
    }
    if (process.platform !== 'win32') {
      fs.accessSync(file, fs.constants.X_OK);
    }
    return true;
  } catch {
    return false;
  }
}

/** Expands `~` and `${workspaceFolder}`/`${userHome}` in a configured path. */
export function expandPath(value: string, ctx: Pick<ResolveEnv, 'workspaceFolder' | 'homeDir'>): string {
  const home = ctx.homeDir ?? os.homedir();
  let result = value.trim();
  if (ctx.workspaceFolder !== undefined) {
    result = result.split('${workspaceFolder}').join(ctx.workspaceFolder);
  }
  result = result.split('${userHome}').join(home);
  if (result === '~' || result.startsWith('~/') || result.startsWith('~\\')) {
    result = path.join(home, result.slice(1));
  }
  return result;
}

/**
 * Finds `command` the way a shell would: a path (absolute, or relative to the workspace folder)
 * is checked directly, a bare name is looked up on PATH (with PATHEXT on Windows).
 */
export function findExecutable(command: string, ctx: ResolveEnv): string | undefined {
  const isExecutable = ctx.isExecutable ?? defaultIsExecutable;
  const pathApi = ctx.platform === 'win32' ? path.win32 : path.posix;
  const extensions =
    ctx.platform === 'win32'
      ? ['', ...(ctx.env.PATHEXT ?? '.COM;.EXE;.BAT;.CMD').split(';').filter((e) => e.length > 0)]
      : [''];
  const candidatesFor = (base: string): string[] => extensions.map((ext) => base + ext);

  if (command.includes('/') || (ctx.platform === 'win32' && command.includes('\\'))) {
    const absolute = pathApi.isAbsolute(command)
      ? command
      : pathApi.resolve(ctx.workspaceFolder ?? process.cwd(), command);
    return candidatesFor(absolute).find(isExecutable);
  }
  const dirs = (ctx.env.PATH ?? ctx.env.Path ?? '').split(pathApi.delimiter).filter((d) => d.length > 0);
  for (const dir of dirs) {
    const found = candidatesFor(pathApi.join(dir, command)).find(isExecutable);
    if (found !== undefined) {
      return found;
    }
  }
  return undefined;
}

/** The command and arguments that start the server, or why they cannot be found. */
export function resolveServerCommand(settings: ServerCommandSettings, ctx: ResolveEnv): Resolution {
  const python = settings.pythonPath?.trim();
  if (python) {
    const expanded = expandPath(python, ctx);
    const found = findExecutable(expanded, ctx);
    if (found === undefined) {
      return {
        ok: false,
        setting: 'saipling.pythonPath',
        message:
          `Saipling: the Python interpreter "${python}" (setting saipling.pythonPath) was not found. ` +
          'Set it to a Python with saipling-search installed, or clear it to use saipling.serverCommand.',
      };
    }
    return { ok: true, command: found, args: [...PYTHON_ARGS], viaPython: true };
  }
  const configured = settings.serverCommand?.trim() || DEFAULT_COMMAND;
  const expanded = expandPath(configured, ctx);
  const found = findExecutable(expanded, ctx);
  if (found === undefined) {
    return {
      ok: false,
      setting: 'saipling.serverCommand',
      message:
        `Saipling: the server command "${configured}" was not found` +
        (expanded.includes('/') || expanded.includes('\\') ? '. ' : ' on PATH. ') +
        'Install the server with "pip install saipling-search", or set saipling.serverCommand ' +
        '(or saipling.pythonPath to a Python that has it installed).',
    };
  }
  const args = settings.serverArgs ? [...settings.serverArgs] : [...DEFAULT_ARGS];
  return { ok: true, command: found, args, viaPython: false };
}

/**
 * Checks that `python` can import saipling, so a wrong interpreter gets a clear message instead
 * of a server that exits at once. Resolves to an error message, or undefined when all is well.
 */
export function checkPythonHasSaipling(python: string, timeoutMs = 15000): Promise<string | undefined> {
  const script = 'import importlib.util, sys; sys.exit(0 if importlib.util.find_spec("saipling") else 3)';
  return new Promise((resolve) => {
    execFile(python, ['-c', script], { timeout: timeoutMs }, (error) => {
      if (error === null) {
        resolve(undefined);
      } else if ((error as { code?: unknown }).code === 3) {
        resolve(
          `Saipling: the Python interpreter "${python}" does not have the saipling package. ` +
            `Run "${python} -m pip install saipling-search", or change saipling.pythonPath.`,
        );
      } else {
        resolve(`Saipling: could not run "${python}": ${error.message}`);
      }
    });
  });
}

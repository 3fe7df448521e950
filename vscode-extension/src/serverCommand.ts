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
/** What to run when no server is found (saipling-search is not on PyPI yet: it installs from a clone). */
export const INSTALL_HINT =
  'pipx install "saipling-search[local] @ git+https://github.com/saipling/saipling-search"';
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

/**
 * Where `saipling` is installed when it is not on PATH (VS Code started from a dock does not read the shell
 * profile): the workspace's virtualenv, pipx's bin folder and its own venv (old and new default homes,
 * $PIPX_BIN_DIR / $PIPX_HOME), and the virtualenv the README suggests. In this order.
 */
export function knownLocations(ctx: ResolveEnv): string[] {
  const win = ctx.platform === 'win32';
  const pathApi = win ? path.win32 : path.posix;
  const home = ctx.homeDir ?? os.homedir();
  const exe = win ? 'saipling.exe' : 'saipling';
  const bin = win ? 'Scripts' : 'bin';
  const venvs = (root: string): string[] => ['.venv', 'venv'].map((v) => pathApi.join(root, v, bin, exe));
  const out: string[] = [];
  if (ctx.workspaceFolder !== undefined) {
    out.push(...venvs(ctx.workspaceFolder));
  }
  if (ctx.env.PIPX_BIN_DIR) {
    out.push(pathApi.join(ctx.env.PIPX_BIN_DIR, exe));
  }
  out.push(pathApi.join(home, '.local', 'bin', exe));
  const pipxHomes = [
    ctx.env.PIPX_HOME,
    pathApi.join(home, '.local', 'pipx'),
    pathApi.join(home, '.local', 'share', 'pipx'),
    ...(win ? [pathApi.join(home, 'pipx')] : []),
  ].filter((h): h is string => typeof h === 'string' && h.length > 0);
  for (const pipxHome of pipxHomes) {
    out.push(pathApi.join(pipxHome, 'venvs', 'saipling-search', bin, exe));
  }
  out.push(pathApi.join(home, '.venvs', 'saipling', bin, exe));
  return out;
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
  // the setting's default is "saipling": only another value is the user's own choice, never replaced by a guess
  const userSet = settings.serverCommand?.trim() === DEFAULT_COMMAND ? undefined : settings.serverCommand?.trim();
  const configured = userSet || DEFAULT_COMMAND;
  const expanded = expandPath(configured, ctx);
  let found = findExecutable(expanded, ctx);
  if (found === undefined && !userSet) {
    const isExecutable = ctx.isExecutable ?? defaultIsExecutable;
    found = knownLocations(ctx).find(isExecutable);
  }
  if (found === undefined) {
    const where = userSet
      ? `the server command "${configured}" (setting saipling.serverCommand) was not found` +
        (expanded.includes('/') || expanded.includes('\\') ? '' : ' on PATH')
      : 'the "saipling" command was not found on PATH, in the workspace\'s .venv or in pipx\'s folders';
    return {
      ok: false,
      setting: 'saipling.serverCommand',
      message:
        `Saipling: ${where}. Install the server (Python 3.11 or newer) with: ${INSTALL_HINT} ` +
        '(or into a virtualenv: see the README), then reload the window; or set saipling.serverCommand to ' +
        'the full path that "command -v saipling" prints.',
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
            `Run "${python} -m pip install '/path/to/saipling-search[local]'" (a clone of the repository: ` +
            'saipling-search is not on PyPI yet), or change saipling.pythonPath.',
        );
      } else {
        resolve(`Saipling: could not run "${python}": ${error.message}`);
      }
    });
  });
}

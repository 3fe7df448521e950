import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import {
  checkPythonHasSaipling,
  expandPath,
  findExecutable,
  INSTALL_HINT,
  knownLocations,
  resolveServerCommand,
} from '../src/serverCommand';

const posix = (files: string[], PATH = '/usr/local/bin:/usr/bin') => ({
  env: { PATH },
  platform: 'linux' as const,
  homeDir: '/home/ann',
  workspaceFolder: '/work/novel',
  isExecutable: (file: string) => files.includes(file),
});

describe('resolveServerCommand', () => {
  it('finds the default command on PATH with the default args', () => {
    assert.deepEqual(resolveServerCommand({}, posix(['/usr/bin/saipling'])), {
      ok: true,
      command: '/usr/bin/saipling',
      args: ['serve'],
      viaPython: false,
    });
  });

  it('uses the configured command and args', () => {
    const r = resolveServerCommand(
      { serverCommand: '~/.local/bin/saipling', serverArgs: ['serve', '--log-level', 'debug'] },
      posix(['/home/ann/.local/bin/saipling']),
    );
    assert.deepEqual(r, { ok: true, command: '/home/ann/.local/bin/saipling', args: ['serve', '--log-level', 'debug'], viaPython: false });
  });

  it('runs `<python> -m saipling serve` when pythonPath is set, ${workspaceFolder} expanded', () => {
    const r = resolveServerCommand(
      { serverCommand: 'saipling', pythonPath: '${workspaceFolder}/.venv/bin/python' },
      posix(['/work/novel/.venv/bin/python']),
    );
    assert.deepEqual(r, { ok: true, command: '/work/novel/.venv/bin/python', args: ['-m', 'saipling', 'serve'], viaPython: true });
  });

  it('explains a missing command, names the setting and says exactly what to run', () => {
    const r = resolveServerCommand({ serverCommand: 'saipling-dev' }, posix([]));
    assert.equal(r.ok, false);
    if (!r.ok) {
      assert.equal(r.setting, 'saipling.serverCommand');
      assert.match(r.message, /"saipling-dev" \(setting saipling.serverCommand\) was not found on PATH/);
      assert.ok(r.message.includes(INSTALL_HINT), r.message);
      assert.match(r.message, /command -v saipling/);
      assert.doesNotMatch(r.message, /pip install saipling-search/); // not on PyPI: that command fails
    }
    for (const settings of [{}, { serverCommand: 'saipling' }]) {
      const unset = resolveServerCommand(settings, posix([]));
      assert.equal(unset.ok, false);
      if (!unset.ok) {
        assert.match(unset.message, /not found on PATH, in the workspace's .venv or in pipx's folders/);
        assert.ok(unset.message.includes(INSTALL_HINT), unset.message);
      }
    }
  });

  it('finds saipling off PATH: workspace venv, pipx bin, pipx venv, the README venv', () => {
    const cases: [string, Record<string, string>][] = [
      ['/work/novel/.venv/bin/saipling', {}],
      ['/home/ann/.local/bin/saipling', {}],
      ['/home/ann/.local/share/pipx/venvs/saipling-search/bin/saipling', {}],
      ['/home/ann/.local/pipx/venvs/saipling-search/bin/saipling', {}],
      ['/opt/pipx/venvs/saipling-search/bin/saipling', { PIPX_HOME: '/opt/pipx' }],
      ['/opt/pipx-bin/saipling', { PIPX_BIN_DIR: '/opt/pipx-bin' }],
      ['/home/ann/.venvs/saipling/bin/saipling', {}],
    ];
    for (const [file, extra] of cases) {
      const ctx = { ...posix([file]), env: { PATH: '/usr/bin', ...extra } };
      assert.deepEqual(resolveServerCommand({}, ctx), { ok: true, command: file, args: ['serve'], viaPython: false });
    }
    // PATH first; a command the user set is never replaced by a guess
    const both = posix(['/usr/bin/saipling', '/home/ann/.local/bin/saipling']);
    assert.equal((resolveServerCommand({}, both) as { command: string }).command, '/usr/bin/saipling');
    assert.equal(resolveServerCommand({ serverCommand: 'my-saipling' }, posix(['/home/ann/.local/bin/saipling'])).ok, false);
  });

  it('looks in pipx and venv folders the Windows way', () => {
    const locations = knownLocations({ env: {}, platform: 'win32', homeDir: 'C:\\Users\\ann', workspaceFolder: 'D:\\novel' });
    assert.ok(locations.includes('D:\\novel\\.venv\\Scripts\\saipling.exe'), locations.join(' '));
    assert.ok(locations.includes('C:\\Users\\ann\\.local\\bin\\saipling.exe'), locations.join(' '));
    assert.ok(locations.includes('C:\\Users\\ann\\pipx\\venvs\\saipling-search\\Scripts\\saipling.exe'), locations.join(' '));
  });

  it('explains a missing python', () => {
    const r = resolveServerCommand({ pythonPath: '/opt/py/bin/python3' }, posix([]));
    assert.equal(r.ok, false);
    if (!r.ok) {
      assert.equal(r.setting, 'saipling.pythonPath');
      assert.match(r.message, /\/opt\/py\/bin\/python3/);
    }
  });

  it('uses PATHEXT on Windows', () => {
    const found = findExecutable('saipling', {
      env: { PATH: 'C:\\Python\\Scripts;C:\\Windows', PATHEXT: '.EXE;.CMD' },
      platform: 'win32',
      isExecutable: (file) => file === 'C:\\Python\\Scripts\\saipling.EXE',
    });
    assert.equal(found, 'C:\\Python\\Scripts\\saipling.EXE');
  });

  it('resolves a relative path against the workspace folder', () => {
    assert.equal(findExecutable('./bin/saipling', posix(['/work/novel/bin/saipling'])), '/work/novel/bin/saipling');
  });

  it('expands ~ and ${userHome}', () => {
    assert.equal(expandPath('~/x', { homeDir: '/home/ann' }), '/home/ann/x');
    assert.equal(expandPath('${userHome}/y', { homeDir: '/home/ann' }), '/home/ann/y');
  });

  it('checks a real file on disk with the default executable test', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'saipling-cmd-'));
    const file = path.join(dir, 'saipling');
    fs.writeFileSync(file, '#!/bin/sh\n');
    fs.chmodSync(file, 0o644);
    assert.equal(findExecutable('saipling', { env: { PATH: dir }, platform: process.platform }), undefined);
    fs.chmodSync(file, 0o755);
    assert.equal(findExecutable('saipling', { env: { PATH: dir }, platform: process.platform }), file);
    fs.rmSync(dir, { recursive: true, force: true });
  });
});

describe('checkPythonHasSaipling', () => {
  it('reports an interpreter that cannot be run', async () => {
    const message = await checkPythonHasSaipling('/nonexistent/python');
    assert.match(message ?? '', /could not run "\/nonexistent\/python"/);
  });
});

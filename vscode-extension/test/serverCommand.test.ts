import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { checkPythonHasSaipling, expandPath, findExecutable, resolveServerCommand } from '../src/serverCommand';

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

  it('explains a missing command and names the setting', () => {
    const r = resolveServerCommand({ serverCommand: 'saipling' }, posix([]));
    assert.equal(r.ok, false);
    if (!r.ok) {
      assert.equal(r.setting, 'saipling.serverCommand');
      assert.match(r.message, /"saipling" was not found on PATH/);
      assert.match(r.message, /pip install saipling-search/);
    }
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

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import {
  buildMentionsParams,
  buildRelatedParams,
  buildSearchParams,
  clampMaxResults,
  MAX_QUERY_CHARS,
  mentionRows,
} from '../src/protocol';
import {
  buildInitializationOptions,
  CLIENT_ONLY_KEYS,
  cleanConfigurationValues,
  needsRestart,
  SERVER_KEYS,
  serverSettings,
} from '../src/settings';

describe('buildSearchParams', () => {
  it('builds the editor request with trimmed query and clamped count', () => {
    assert.deepEqual(buildSearchParams('  the lighthouse keeper ', { maxResults: 20, mode: 'lexical' }), {
      query: 'the lighthouse keeper',
      maxResults: 20,
      mode: 'lexical',
      source: 'editor',
    });
  });

  it('returns undefined for a blank query, so nothing is sent', () => {
    assert.equal(buildSearchParams('   '), undefined);
    assert.equal(buildSearchParams(''), undefined);
  });

  it('drops an unknown mode and an empty filter', () => {
    const params = buildSearchParams('storm', { mode: 'fuzzy', filter: {} });
    assert.equal(params?.mode, undefined);
    assert.equal(params?.filter, undefined);
  });

  it('keeps a filter', () => {
    const params = buildSearchParams('storm', { filter: { entityTypes: ['character'], maxChapter: 3 } });
    assert.deepEqual(params?.filter, { entityTypes: ['character'], maxChapter: 3 });
  });

  it('cuts the query to the server limit', () => {
    assert.equal(buildSearchParams('x'.repeat(5000))?.query.length, MAX_QUERY_CHARS);
  });
});

describe('clampMaxResults', () => {
  for (const [input, expected] of [
    [5, 5],
    [0, 1],
    [-3, 1],
    [1000, 100],
    [7.9, 7],
    ['12', 20],
    [undefined, 20],
    [Number.NaN, 20],
  ] as const) {
    it(`${String(input)} -> ${expected}`, () => assert.equal(clampMaxResults(input), expected));
  }
});

describe('buildRelatedParams', () => {
  it('passes the uri through', () => {
    assert.deepEqual(buildRelatedParams('file:///p/a.md', 3), { uri: 'file:///p/a.md', maxResults: 3 });
  });
  it('adds the passage lines (1-based, end never before start)', () => {
    assert.deepEqual(buildRelatedParams('file:///p/a.md', 3, { start: 7, end: 9 }),
      { uri: 'file:///p/a.md', maxResults: 3, startLine: 7, endLine: 9 });
    assert.deepEqual(buildRelatedParams('file:///p/a.md', undefined, { start: 0, end: -2 }),
      { uri: 'file:///p/a.md', maxResults: 20, startLine: 1, endLine: 1 });
  });
});

describe('settings sent to the server', () => {
  const section = {
    serverCommand: 'saipling',
    serverArgs: ['serve'],
    pythonPath: '',
    enabled: true,
    provider: 'none',
    model: null,
    baseUrl: '',
    dimensions: null,
    quietPeriodSeconds: 120,
    autoIndex: true,
    watch: false,
    include: null,
    exclude: [],
    maxResults: 20,
    searchMode: 'hybrid',
    trace: { server: 'off' },
    'trace.server': 'off',
  };

  it('drops client-only keys and unset values', () => {
    assert.deepEqual(serverSettings(section), {
      enabled: true,
      provider: 'none',
      quietPeriodSeconds: 120,
      autoIndex: true,
      watch: false,
    });
  });

  it('sends only declared server settings: a workspace cannot add undeclared ones', () => {
    const sent = serverSettings({
      provider: 'openai',
      base_url: 'https://evil.example/v1',
      'base-url': 'https://evil.example/v1',
      rerank: { provider: 'voyage', baseUrl: 'https://evil.example' },
      openaiApiKey: 'sk-from-a-workspace',
    });
    assert.deepEqual(sent, { provider: 'openai' });
  });

  it("sends the server's other settings from the user's own settings only", () => {
    const workspace = { provider: 'local', modelPath: '/repo/model', defaultRole: 'author', base_url: 'https://evil.example' };
    const user = { modelPath: '/home/me/model', rerank: { provider: 'local' }, serverCommand: 'x', maxResults: 5 };
    assert.deepEqual(serverSettings(workspace, user), {
      provider: 'local',
      modelPath: '/home/me/model',
      rerank: { provider: 'local' },
    });
  });

  it('knows every declared setting as a server or a client setting', () => {
    const pkg = JSON.parse(readFileSync(join(__dirname, '..', '..', 'package.json'), 'utf8')) as {
      contributes: { configuration: { properties: Record<string, unknown> } };
    };
    const declared = Object.keys(pkg.contributes.configuration.properties).map((k: string) =>
      k.replace(/^saipling\./, ''),
    );
    const known = (k: string) => SERVER_KEYS.has(k) || CLIENT_ONLY_KEYS.has(k) || CLIENT_ONLY_KEYS.has(k.split('.')[0]);
    assert.deepEqual(declared.filter((k: string) => !known(k)), []);
    assert.ok(declared.includes('baseUrl') && SERVER_KEYS.has('baseUrl'));
  });

  it('adds stored API keys to initializationOptions, never empty ones', () => {
    const options = buildInitializationOptions({ provider: 'voyage' }, { voyageApiKey: ' pa-123 ', openaiApiKey: '' });
    assert.deepEqual(options, { provider: 'voyage', voyageApiKey: 'pa-123' });
  });

  it('cleans only the saipling section of a workspace/configuration answer', () => {
    const cleaned = cleanConfigurationValues(
      [{ section: 'saipling' }, { section: 'files' }],
      [{ provider: 'none', model: '', serverCommand: 'x' }, { exclude: [] }],
    );
    assert.deepEqual(cleaned, [{ provider: 'none' }, { exclude: [] }]);
  });

  it('restarts the server only for command settings', () => {
    assert.equal(needsRestart((s) => s === 'saipling.pythonPath'), true);
    assert.equal(needsRestart((s) => s === 'saipling.provider'), false);
  });
});

describe('mentions', () => {
  it('sends a trimmed name, nothing for a blank one', () => {
    assert.deepEqual(buildMentionsParams('  Mina   Harker '), { name: 'Mina Harker', limit: 500 });
    assert.equal(buildMentionsParams('  '), undefined);
  });

  it('lists each mention with its chapter, 0-based line, and the summary on the first row', () => {
    const place = { path: 'books/ch-02/scene-01.md', line: 6, chapter: 'ch-02' };
    const rows = mentionRows({
      entities: [
        {
          entity: { name: 'Mina Harker', path: 'characters/mina.md', type: 'character', aliases: ['Mina'] },
          total: 2,
          summary: 'first ch-02 l.6 · 2 mentions in 1 chapter · last seen ch-02',
          chapters: [{ chapter: 'ch-02', count: 2, first: place }],
          first: place,
          last: place,
          otherFiles: [],
          mentions: [
            { path: place.path, line: 6, column: 14, endColumn: 18, surface: 'Mina', chapter: 'ch-02' },
            { path: 'notes.md', line: 3, column: 0, endColumn: 11, surface: 'Mina Harker', chapter: null },
          ],
        },
      ],
    });
    assert.deepEqual(
      rows.map((r) => [r.label, r.description, r.line, r.column, r.endColumn, r.detail]),
      [
        ['ch-02: l.6', 'Mina · Mina Harker', 5, 14, 18, 'first ch-02 l.6 · 2 mentions in 1 chapter · last seen ch-02'],
        ['notes.md: l.3', 'Mina Harker · Mina Harker', 2, 0, 11, undefined],
      ],
    );
  });
});

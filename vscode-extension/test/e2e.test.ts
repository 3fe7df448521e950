// End to end: the extension's own code (activate, commands, the real vscode-languageclient
// LanguageClient) against the REAL `saipling serve` process over stdio, on a small fixture
// project. Only the editor is a stub (test/vscodeStub.ts): the test plays the user through it.
//
// The server command: $SAIPLING_SERVER_CMD (e.g. "/usr/bin/python3 -m saipling", shell-quoted,
// or a JSON array) followed by "serve"; default `saipling serve` from PATH.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { ErrorCodes, ResponseError, type LanguageClient } from 'vscode-languageclient/node';
import type { Session } from '../src/client';
import { activate, deactivate } from '../src/extension';
import { toResultItem } from '../src/format';
import {
  buildRelatedParams,
  buildSearchParams,
  Methods,
  type RelatedParams,
  type RelatedResponse,
  type SearchResponse,
  type SearchResult,
  type StatusResponse,
} from '../src/protocol';
import * as vscode from './vscodeStub';

const { stub } = vscode;

// ---------------------------------------------------------------------------------------------
// Fixture project: "lighthouse" occurs in one section of one file only.

const FIXTURE: Record<string, string> = {
  'characters/mara-quinn.md': [
    '---',
    'type: character',
    'name: Mara Quinn',
    'aliases: [Mara, the harbour pilot]',
    '---',
    '# Mara Quinn',
    '',
    '## Appearance',
    '',
    'Mara is tall and weathered, with salt-bleached hair she ties back with fishing line.',
    'She wears her late father\'s oilskin coat in every season.',
    '',
    '## Backstory',
    '',
    'Born in Harbour Town, Mara learned to read the tides before she could read words.',
    'She guides trawlers through the reef and distrusts anyone from the mainland.',
    '',
  ].join('\n'),
  'scenes/ch01-arrival.md': [
    '---',
    'type: scene',
    'chapter: 1',
    '---',
    '# Chapter 1: Arrival',
    '',
    '## The Ferry',
    '',
    'The ferry shouldered through grey water while gulls argued over the wake.',
    'Tomas counted the cottages along the quay and wondered which one was to be his.',
    '',
    '## The Lighthouse',
    '',
    'At dusk Mara led him up the spiral stairs of the old lighthouse.',
    'The lighthouse lamp had been dark for eleven winters, she said,',
    'ever since the keeper walked into the sea.',
    '',
  ].join('\n'),
  'places/harbour-town.md': [
    '---',
    'type: place',
    'name: Harbour Town',
    '---',
    '# Harbour Town',
    '',
    'A fishing village of forty cottages on a crescent bay, cut off by the reef at low tide.',
    'The quay smells of tar and diesel; the chapel bell marks the turn of the tide.',
    '',
  ].join('\n'),
  'notes/outline.md': [
    '# Outline',
    '',
    '## Act One',
    '',
    'Tomas arrives to take up the post of harbour master and meets Mara.',
    'A storm strands a trawler on the reef; Mara refuses to guide the rescue.',
    '',
  ].join('\n'),
};

const EXPECTED_FILE = 'scenes/ch01-arrival.md';
/** 1-based line of "## The Lighthouse" in the scene. */
const LIGHTHOUSE_HEADING_LINE = FIXTURE[EXPECTED_FILE].split('\n').indexOf('## The Lighthouse') + 1;
const LIGHTHOUSE_LAST_LINE = FIXTURE[EXPECTED_FILE].split('\n').indexOf('ever since the keeper walked into the sea.') + 1;

const RESULT_FIELDS = [
  'filePath', 'uri', 'sectionHeading', 'headingPath', 'startLine', 'endLine', 'range', 'snippet', 'preview',
  'score', 'tokenCount', 'fileType', 'entityType', 'entityName', 'matchedBy',
];
const STATUS_FIELDS = [
  'root', 'totalFiles', 'totalChunks', 'lastIndexed', 'provider', 'model', 'dimensions', 'providerReason',
  'totalCostUsd', 'pendingFiles', 'isIndexing', 'progress', 'degraded',
];

// ---------------------------------------------------------------------------------------------
// Helpers

/** Splits "cmd arg 'a b'" like a POSIX shell (quotes only), or parses a JSON array. */
function splitCommand(value: string): string[] {
  const trimmed = value.trim();
  if (trimmed.startsWith('[')) {
    return JSON.parse(trimmed) as string[];
  }
  const parts: string[] = [];
  let current = '';
  let quote: string | undefined;
  let started = false;
  for (const ch of trimmed) {
    if (quote !== undefined) {
      if (ch === quote) quote = undefined;
      else current += ch;
    } else if (ch === '"' || ch === "'") {
      quote = ch;
      started = true;
    } else if (/\s/.test(ch)) {
      if (started) parts.push(current);
      current = '';
      started = false;
    } else {
      current += ch;
      started = true;
    }
  }
  if (started) parts.push(current);
  return parts;
}

async function waitFor<T>(what: string, probe: () => T | undefined | Promise<T | undefined>, timeoutMs = 30000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  while (Date.now() < deadline) {
    try {
      const value = await probe();
      if (value !== undefined && value !== false) {
        return value;
      }
    } catch (error) {
      lastError = error;
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  const output = stub.output.slice(-40).join('\n');
  throw new Error(`timed out waiting for ${what}${lastError instanceof Error ? ` (last error: ${lastError.message})` : ''}\n--- client output ---\n${output}`);
}

/** With VSCODE_E2E_VERBOSE=1, prints a server answer (to see what the server sent). */
function debugLog(label: string, value: unknown): void {
  if (stub.verbose) {
    process.stderr.write(`[e2e] ${label}: ${JSON.stringify(value, null, 2)}\n`);
  }
}

function makeFixture(): string {
  const root = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'saipling-vscode-e2e-')));
  for (const [relative, text] of Object.entries(FIXTURE)) {
    fs.mkdirSync(path.dirname(path.join(root, relative)), { recursive: true });
    fs.writeFileSync(path.join(root, relative), text);
  }
  return root;
}

type Context = ReturnType<typeof vscode.createExtensionContext>;

async function startExtension(
  root: string,
  settings: Record<string, unknown>,
  prepare?: () => void,
): Promise<{ session: Session; context: Context }> {
  stub.reset();
  // The first-run hint about hiding .saipling would be one more message: tested in a real VS Code instead.
  stub.settings.set('files.exclude', { '**/.saipling': true });
  prepare?.();
  vscode.workspace.workspaceFolders = [{ uri: vscode.Uri.file(root), name: path.basename(root), index: 0 }];
  for (const [key, value] of Object.entries(settings)) {
    stub.settings.set(key, value);
  }
  const context = vscode.createExtensionContext(path.resolve(__dirname, '..', '..'), path.join(root, '.vscode-storage'));
  const session = await activate(context as never);
  return { session, context };
}

async function stopExtension(context: Context | undefined): Promise<void> {
  await deactivate();
  for (const disposable of context?.subscriptions ?? []) {
    disposable.dispose();
  }
}

function runningClient(session: Session): LanguageClient {
  const client = session.client;
  assert.ok(client !== undefined && client.isRunning(), `client not running\n${stub.output.join('\n')}`);
  return client;
}

// Read once and removed from the environment the server inherits: SAIPLING_* variables are
// server settings, and the server warns about unknown ones.
const SERVER_CMD = process.env.SAIPLING_SERVER_CMD ?? 'saipling';
delete process.env.SAIPLING_SERVER_CMD;

function serverSettings(): Record<string, unknown> {
  const [command, ...args] = splitCommand(SERVER_CMD);
  return {
    'saipling.serverCommand': command,
    'saipling.serverArgs': [...args, 'serve'],
    'saipling.provider': 'none',
    // VSCODE_E2E_TRACE=verbose logs every JSON-RPC message to the output (seen with VSCODE_E2E_VERBOSE=1).
    ...(process.env.VSCODE_E2E_TRACE ? { 'saipling.trace.server': process.env.VSCODE_E2E_TRACE } : {}),
  };
}

// ---------------------------------------------------------------------------------------------

describe('missing server command', () => {
  let context: Context | undefined;
  after(() => stopExtension(context));

  it('says so, offers Open Settings, and does not start a client', async () => {
    const root = makeFixture();
    const started = await startExtension(root, { 'saipling.serverCommand': 'saipling-does-not-exist-42' }, () => {
      stub.responders.message = (m) => (m.items.includes('Open Settings') ? 'Open Settings' : undefined);
    });
    context = started.context;
    const error = await waitFor('the error message', () => stub.messages.find((m) => m.kind === 'error'));
    assert.match(error.message, /"saipling-does-not-exist-42" \(setting saipling.serverCommand\) was not found on PATH/);
    assert.match(error.message, /pipx install "saipling-search\[local\] @ git\+https:/); // exactly what to run
    assert.deepEqual(error.items, ['Open Settings']);
    assert.equal(started.session.client, undefined);
    await waitFor('Open Settings', () =>
      stub.executedCommands.find((c) => c.command === 'workbench.action.openSettings' && c.args[0] === 'saipling.serverCommand'),
    );
    assert.match(stub.statusBarItems[0].text, /circle-slash/);
    // A command now says the server is not running instead of failing.
    await vscode.commands.executeCommand('saipling.showStatus');
    assert.ok(stub.messages.some((m) => m.kind === 'warning' && /not running/.test(m.message)));
    fs.rmSync(root, { recursive: true, force: true });
  });
});

describe('extension against the real saipling server', { timeout: 180000 }, () => {
  let root: string;
  let session: Session;
  let context: Context | undefined;
  let lighthouse: SearchResult;

  before(async () => {
    root = makeFixture();
    ({ session, context } = await startExtension(root, serverSettings()));
  });

  after(async () => {
    await stopExtension(context);
    if (process.env.VSCODE_E2E_KEEP !== '1') {
      fs.rmSync(root, { recursive: true, force: true });
    }
  });

  it('starts the server with provider none in initializationOptions', () => {
    const client = runningClient(session);
    const options = client.clientOptions.initializationOptions as Record<string, unknown>;
    assert.equal(options.provider, 'none');
    assert.equal(options.serverCommand, undefined, 'client-only settings are not sent');
    assert.ok(client.initializeResult?.capabilities, 'server answered initialize');
  });

  it('indexes the fixture project (status polled until done)', async () => {
    const client = runningClient(session);
    const status = await waitFor('the index', async () => {
      const s = await client.sendRequest<StatusResponse>(Methods.status, {});
      return s.totalFiles > 0 && !s.isIndexing ? s : undefined;
    }, 60000);
    debugLog('saipling/status', status);
    for (const field of STATUS_FIELDS) {
      assert.ok(field in status, `status has ${field}: ${JSON.stringify(status)}`);
    }
    assert.equal(status.totalFiles, Object.keys(FIXTURE).length);
    assert.ok(status.totalChunks >= status.totalFiles);
    assert.equal(status.provider, 'none');
    assert.equal(path.resolve(status.root), root);
    // The first index run was shown through $/progress (window progress in VS Code).
    debugLog('window progress at start-up', vscode.progressLog);
    assert.ok(vscode.progressLog.some((p) => p.kind === 'begin' && p.title === 'Indexing'),
      `no $/progress "Indexing" at start-up: ${JSON.stringify(vscode.progressLog)}`);
  });

  it('saipling/search "lighthouse" finds the scene section, and formats it for the quick pick', async () => {
    const client = runningClient(session);
    const params = buildSearchParams('lighthouse', { maxResults: 5 });
    assert.ok(params);
    const response = await client.sendRequest<SearchResponse>(Methods.search, params);
    debugLog('saipling/search', response);
    assert.equal(response.query, 'lighthouse');
    assert.ok(['hybrid', 'semantic', 'lexical'].includes(response.mode), response.mode);
    assert.equal(response.indexing, false);
    assert.equal(typeof response.elapsedMs, 'number');
    assert.ok(response.results.length >= 1, JSON.stringify(response));
    lighthouse = response.results[0];
    for (const field of RESULT_FIELDS) {
      assert.ok(field in lighthouse, `result has ${field}: ${JSON.stringify(lighthouse)}`);
    }
    assert.equal(lighthouse.filePath.replace(/\\/g, '/').replace(`${root}/`, ''), EXPECTED_FILE);
    assert.equal(vscode.Uri.parse(lighthouse.uri).fsPath, path.join(root, EXPECTED_FILE));
    assert.equal(lighthouse.startLine, LIGHTHOUSE_HEADING_LINE);
    assert.ok(lighthouse.endLine >= LIGHTHOUSE_LAST_LINE - 1 && lighthouse.endLine <= LIGHTHOUSE_LAST_LINE + 1,
      `endLine ${lighthouse.endLine}`);
    assert.equal(lighthouse.range.start.line, lighthouse.startLine - 1, 'range is 0-based');
    assert.ok(lighthouse.score > 0 && lighthouse.score <= 1, `score ${lighthouse.score}`);
    // Nothing else in the fixture mentions a lighthouse.
    assert.ok(response.results.every((r) => r.filePath.endsWith(EXPECTED_FILE)), JSON.stringify(response.results));

    const item = toResultItem(lighthouse, root);
    assert.equal(item.label, `${EXPECTED_FILE} § The Lighthouse`);
    assert.match(item.description, new RegExp(`^\\d\\.\\d\\d · lines ${LIGHTHOUSE_HEADING_LINE}–${lighthouse.endLine}$`));
    assert.match(item.detail, /lighthouse/i);
    assert.ok(!item.detail.includes('\n'));
  });

  it('Search Project: typing debounces to one request, Enter opens the file at the range', async () => {
    const client = runningClient(session);
    const queries: string[] = [];
    const original = client.sendRequest.bind(client) as (...args: unknown[]) => Promise<unknown>;
    (client as unknown as { sendRequest: (...args: unknown[]) => Promise<unknown> }).sendRequest = (...args) => {
      if (args[0] === Methods.search) queries.push((args[1] as { query: string }).query);
      return original(...args);
    };
    try {
      await vscode.commands.executeCommand('saipling.searchProject');
      const picker = stub.quickPicks.at(-1);
      assert.ok(picker?.visible);
      for (let n = 1; n <= 'lighthouse'.length; n++) {
        picker.type('lighthouse'.slice(0, n));
      }
      const first = await waitFor('results in the quick pick', () =>
        picker.items.find((i) => (i as { result?: SearchResult }).result !== undefined));
      assert.deepEqual(queries, ['lighthouse'], 'one request after the debounce, for the last value');
      assert.equal(first.label, `${EXPECTED_FILE} § The Lighthouse`);
      assert.equal(first.alwaysShow, true);
      assert.equal(picker.busy, false);

      picker.accept(first);
      const shown = await waitFor('the opened and revealed document', () =>
        stub.shownDocuments.find((d) => d.revealed.length > 0));
      assert.equal(shown.uri.fsPath, path.join(root, EXPECTED_FILE));
      assert.equal(shown.selection?.start.line, LIGHTHOUSE_HEADING_LINE - 1);
      assert.equal(shown.selection?.end.line, lighthouse.range.end.line);
      // The cursor (the selection's active end) is on the passage's first line.
      assert.equal(vscode.window.activeTextEditor?.selection.active.line, LIGHTHOUSE_HEADING_LINE - 1);
      assert.equal(vscode.window.activeTextEditor?.selection.end.line, lighthouse.range.end.line);
      assert.equal(shown.revealed.length, 1);
      assert.ok(picker.disposed, 'the picker closes on Enter');
    } finally {
      (client as unknown as { sendRequest: unknown }).sendRequest = original;
    }
  });

  it('Search Project: with a notice row above the results, Enter opens the first result', async () => {
    const client = runningClient(session);
    const original = client.sendRequest.bind(client) as (...args: unknown[]) => Promise<unknown>;
    (client as unknown as { sendRequest: (...args: unknown[]) => Promise<unknown> }).sendRequest = async (...args) => {
      const out = await original(...args);
      // (as while a run is going or embeddings are pending: a notice row goes first)
      return args[0] === Methods.search ? { ...(out as SearchResponse), indexing: true } : out;
    };
    try {
      const before = stub.shownDocuments.length;
      await vscode.commands.executeCommand('saipling.searchProject', 'lighthouse');
      const picker = stub.quickPicks.at(-1);
      assert.ok(picker);
      await waitFor('results in the quick pick', () =>
        picker.items.find((i) => (i as { result?: SearchResult }).result !== undefined));
      assert.match(picker.items[0].label, /indexing in progress/);
      picker.accept(); // Enter on the active row
      const shown = await waitFor('the first result opened', () => stub.shownDocuments[before]);
      assert.equal(shown.uri.fsPath, path.join(root, EXPECTED_FILE));
      assert.ok(picker.disposed, 'the picker closes on Enter');
    } finally {
      (client as unknown as { sendRequest: unknown }).sendRequest = original;
    }
  });

  it('Search Project with a query argument searches at once, and shows why a search found nothing', async () => {
    await vscode.commands.executeCommand('saipling.searchProject', 'harbour');
    const picker = stub.quickPicks.at(-1);
    assert.ok(picker);
    assert.equal(picker.value, 'harbour');
    const items = await waitFor('results for the initial query', () =>
      picker.items.length > 0 ? picker.items : undefined);
    assert.ok(items.some((i) => i.label.startsWith('places/harbour-town.md')), JSON.stringify(items));
    picker.type('zeppelin');
    const none = await waitFor('the no-results row', () => picker.items.find((i) => /No results/.test(i.label)));
    assert.equal((none as { result?: unknown }).result, undefined);
    picker.hide();
    assert.ok(picker.disposed);
  });

  it('Find Related Passages for the active file: results from other files, opened on pick', async () => {
    const client = runningClient(session);
    const uri = vscode.Uri.file(path.join(root, EXPECTED_FILE));
    const raw = await client.sendRequest<RelatedResponse>(Methods.related, buildRelatedParams(uri.toString(), 5));
    debugLog('saipling/related', raw);
    assert.ok(Array.isArray(raw.results), JSON.stringify(raw));
    for (const result of raw.results) {
      for (const field of RESULT_FIELDS) {
        assert.ok(field in result, `related result has ${field}`);
      }
      assert.ok(!result.filePath.endsWith(EXPECTED_FILE), `related passage from the file itself: ${result.filePath}`);
    }

    await vscode.window.showTextDocument(uri);
    const before = stub.shownDocuments.length;
    let offered: readonly vscode.QuickPickItemLike[] = [];
    stub.responders.quickPick = (items) => {
      offered = items;
      return items[0];
    };
    await vscode.commands.executeCommand('saipling.findRelated');
    if (raw.results.length === 0) {
      assert.ok(stub.messages.some((m) => /no passages related/.test(m.message)));
    } else {
      assert.equal(offered.length, raw.results.length);
      assert.equal(offered[0].label, toResultItem(raw.results[0], root).label);
      assert.equal(stub.shownDocuments.length, before + 1);
      assert.equal(stub.shownDocuments.at(-1)?.uri.toString(), vscode.Uri.parse(raw.results[0].uri).toString());
    }
  });

  it('Find Passages Related to This Passage sends the cursor\'s lines and shows passages like that one', async () => {
    const client = runningClient(session);
    const uri = vscode.Uri.file(path.join(root, EXPECTED_FILE));
    const ferryLine = FIXTURE[EXPECTED_FILE].split('\n').indexOf('## The Ferry') + 1; // 1-based
    const sent: RelatedParams[] = [];
    const original = client.sendRequest.bind(client) as (...args: unknown[]) => Promise<unknown>;
    (client as unknown as { sendRequest: (...args: unknown[]) => Promise<unknown> }).sendRequest = (...args) => {
      if (args[0] === Methods.related) sent.push(args[1] as RelatedParams);
      return original(...args);
    };
    try {
      // the cursor on the ferry paragraph (0-based line ferryLine + 1: two lines under its heading)
      const at = new vscode.Position(ferryLine + 1, 4);
      await vscode.window.showTextDocument(uri, { selection: new vscode.Range(at, at) });
      let offered: readonly vscode.QuickPickItemLike[] = [];
      stub.responders.quickPick = (items) => {
        offered = items;
        return undefined;
      };
      await vscode.commands.executeCommand('saipling.findRelatedToPassage');
      assert.equal(sent.length, 1);
      assert.equal(sent[0].startLine, ferryLine + 2);
      assert.equal(sent[0].endLine, ferryLine + 2);
      const raw = await original(Methods.related, sent[0]) as RelatedResponse & { startLine: number; endLine: number };
      assert.ok(raw.startLine <= ferryLine + 2 && ferryLine + 2 <= raw.endLine, JSON.stringify(raw));
      assert.ok(raw.results.length > 0, 'the ferry passage shares words with the harbour and the outline');
      assert.ok(raw.results.every((r) => !r.filePath.endsWith(EXPECTED_FILE)));
      assert.equal(offered.length, raw.results.length);
      assert.equal(offered[0].label, toResultItem(raw.results[0], root).label);
    } finally {
      (client as unknown as { sendRequest: unknown }).sendRequest = original;
    }
  });

  it('Show Index Status and the status-bar item', async () => {
    stub.responders.message = () => undefined;
    const status = await vscode.commands.executeCommand<StatusResponse>('saipling.showStatus');
    assert.equal(status.totalFiles, Object.keys(FIXTURE).length);
    const shown = stub.messages.at(-1);
    // Keyword-only search is what provider "none" asks for: ready, not degraded.
    assert.match(shown?.message ?? '', /^Saipling index ready: 4 files, \d+ chunks$/);
    const item = stub.statusBarItems[0];
    await waitFor('the idle status-bar text', () => /^\$\(search\) Saipling: 4 files$/.test(item.text) || undefined, 40000);
    assert.equal(item.command, 'saipling.showStatus');
  });

  it('Reindex Project: full rebuild reports $/progress "Indexing" and the status bar shows it', async () => {
    const client = runningClient(session);
    const item = stub.statusBarItems[0];
    const historyStart = item.textHistory.length;
    vscode.progressLog.length = 0;
    const response = await vscode.commands.executeCommand<{ started: boolean }>('saipling.reindex', { full: true });
    assert.deepEqual(response, { started: true });
    // The server titles a requested reindex "Reindexing" (the start-up run: "Indexing").
    const indexing = (p: { kind: string; title?: string }, kind: string) =>
      p.kind === kind && /^(Re)?indexing$/i.test(p.title ?? '');
    await waitFor('the end of the reindex', async () => {
      const s = await client.sendRequest<StatusResponse>(Methods.status, {});
      return !s.isIndexing && s.totalFiles === Object.keys(FIXTURE).length &&
        vscode.progressLog.some((p) => indexing(p, 'end')) ? s : undefined;
    }, 60000).catch((error: unknown) => {
      debugLog('window progress', vscode.progressLog);
      throw error;
    });
    debugLog('window progress', vscode.progressLog);
    assert.ok(vscode.progressLog.some((p) => indexing(p, 'begin')),
      `no $/progress "Reindexing"/"Indexing"; saw ${JSON.stringify(vscode.progressLog)}`);
    const texts = item.textHistory.slice(historyStart);
    assert.ok(texts.some((t) => t.includes('indexing')), `status bar never showed indexing: ${texts.join(' | ')}`);
    await waitFor('the idle status-bar text again', () => /^\$\(search\) Saipling: 4 files$/.test(item.text) || undefined);
  });

  it('server executeCommand ids that clash with the extension\'s commands do not break the start', async () => {
    const client = runningClient(session);
    const advertised = client.initializeResult?.capabilities.executeCommandProvider?.commands ?? [];
    debugLog('executeCommandProvider.commands', advertised);
    // The stub throws on a duplicate command id like VS Code; the client started, every advertised
    // command has a handler, and saipling.reindex / saipling.clearIndex ran the extension's own
    // handlers (the tests above got their custom-request answers back).
    const registered = await vscode.commands.getCommands();
    for (const command of advertised) {
      assert.ok(registered.includes(command), `no handler for ${command}`);
    }
  });

  it('invalid params are answered with InvalidParams (-32602)', async () => {
    const client = runningClient(session);
    const messagesBefore = stub.messages.length;
    for (const params of [{}, { query: '' }, { query: 'lighthouse', maxResults: 0 }, { query: 'x', mode: 'fuzzy' }]) {
      await assert.rejects(
        client.sendRequest(Methods.search, params),
        (error: unknown) => {
          assert.ok(error instanceof ResponseError, `not a ResponseError: ${String(error)}`);
          assert.equal(error.code, ErrorCodes.InvalidParams, `${JSON.stringify(params)} -> ${error.code} ${error.message}`);
          return true;
        },
        `search ${JSON.stringify(params)} should be rejected`,
      );
    }
    // A bad request is the client's problem, not something to pop up to the user.
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.deepEqual(stub.messages.slice(messagesBefore), []);
  });

  it('a settings change reaches the running server (didChangeConfiguration, workspace/configuration)', async () => {
    const client = runningClient(session);
    stub.setSetting('saipling.exclude', ['notes/**']);
    const status = await waitFor('the index without notes/', async () => {
      const s = await client.sendRequest<StatusResponse>(Methods.status, {});
      return s.totalFiles === Object.keys(FIXTURE).length - 1 && !s.isIndexing ? s : undefined;
    });
    assert.equal(status.totalFiles, 3);
    const response = await client.sendRequest<SearchResponse>(Methods.search, buildSearchParams('trawler reef rescue'));
    assert.ok(response.results.every((r) => !r.filePath.startsWith('notes/')), JSON.stringify(response.results));
  });

  it('Clear Index asks first, then clears', async () => {
    stub.responders.message = (m) => (m.items.includes('Clear Index') ? 'Clear Index' : undefined);
    const response = await vscode.commands.executeCommand<{ cleared: boolean }>('saipling.clearIndex');
    assert.deepEqual(response, { cleared: true });
    assert.ok(stub.messages.some((m) => m.kind === 'warning' && m.items.includes('Clear Index')));
    const status = await runningClient(session).sendRequest<StatusResponse>(Methods.status, {});
    assert.equal(status.totalChunks, 0, JSON.stringify(status));
    // The status bar is refreshed at once, not at the next idle poll.
    await waitFor('the status bar after clearing', () =>
      stub.statusBarItems[0].text === `$(search) Saipling: ${status.totalFiles} files` || undefined, 5000);
  });

  it('Set API Key stores the key in SecretStorage and restarts the server with it', async () => {
    const before = runningClient(session);
    let inputOptions: { password?: boolean } = {};
    stub.responders.quickPick = (items) => items.find((i) => i.label === 'Voyage AI');
    stub.responders.inputBox = (options) => {
      inputOptions = options;
      return 'pa-test-not-a-real-key';
    };
    await vscode.commands.executeCommand('saipling.setApiKey');
    assert.equal(inputOptions.password, true);
    assert.equal(await context?.secrets.get('saipling.voyageApiKey'), 'pa-test-not-a-real-key');
    const after = runningClient(session);
    assert.notEqual(after, before, 'a new client was started');
    assert.equal(before.isRunning(), false);
    const options = after.clientOptions.initializationOptions as Record<string, unknown>;
    assert.equal(options.voyageApiKey, 'pa-test-not-a-real-key');
    assert.equal(options.provider, 'none');
    const status = await after.sendRequest<StatusResponse>(Methods.status, {});
    assert.equal(status.provider, 'none');
  });
});

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  displayPath,
  oneLine,
  searchNotice,
  sectionOf,
  selectionRange,
  statusReport,
  statusView,
  toResultItem,
} from '../src/format';
import type { SearchResult, StatusResponse } from '../src/protocol';

function result(overrides: Partial<SearchResult> = {}): SearchResult {
  return {
    filePath: 'scenes/ch01-arrival.md',
    uri: 'file:///p/scenes/ch01-arrival.md',
    sectionHeading: 'The Lighthouse',
    headingPath: ['Chapter 1', 'The Lighthouse'],
    startLine: 12,
    endLine: 20,
    range: { start: { line: 11, character: 0 }, end: { line: 19, character: 40 } },
    snippet: 'the <b>lighthouse</b> beam',
    preview: 'Mara climbed the\n  lighthouse stairs, counting   each step.',
    score: 0.8734,
    tokenCount: 120,
    fileType: 'scene',
    entityType: null,
    entityName: null,
    matchedBy: ['keyword'],
    ...overrides,
  };
}

function status(overrides: Partial<StatusResponse> = {}): StatusResponse {
  return {
    root: '/p',
    totalFiles: 4,
    totalChunks: 11,
    lastIndexed: '2026-01-02T03:04:05Z',
    provider: 'none',
    model: null,
    dimensions: null,
    providerReason: 'provider set to none',
    totalCostUsd: 0,
    pendingFiles: 0,
    isIndexing: false,
    progress: null,
    degraded: null,
    ...overrides,
  };
}

describe('toResultItem', () => {
  it('shows file § section, score and lines, and the one-line snippet', () => {
    const item = toResultItem(result());
    assert.equal(item.label, 'scenes/ch01-arrival.md § The Lighthouse');
    assert.equal(item.description, '0.87 · lines 12–20');
    assert.equal(item.detail, 'the lighthouse beam');
  });

  it('falls back to the heading path, then to the file alone', () => {
    assert.equal(toResultItem(result({ sectionHeading: null })).label, 'scenes/ch01-arrival.md § The Lighthouse');
    assert.equal(toResultItem(result({ sectionHeading: '', headingPath: [] })).label, 'scenes/ch01-arrival.md');
    assert.equal(sectionOf({ sectionHeading: null, headingPath: 'Part One > Storm' }), 'Storm');
  });

  it('shows the heading text when the server sends the markdown heading line', () => {
    assert.equal(toResultItem(result({ sectionHeading: '## The Lighthouse' })).label, 'scenes/ch01-arrival.md § The Lighthouse');
    assert.equal(sectionOf({ sectionHeading: '#hashtag title', headingPath: null }), '#hashtag title');
  });

  it('shows a single line as "line N"', () => {
    assert.equal(toResultItem(result({ startLine: 3, endLine: 3 })).description, '0.87 · line 3');
  });

  it('makes an absolute path relative to the root', () => {
    assert.equal(toResultItem(result({ filePath: '/p/notes/a.md' }), '/p').label, 'notes/a.md § The Lighthouse');
    assert.equal(displayPath('C:\\p\\notes\\a.md', 'C:\\p'), 'notes/a.md');
  });

  it('shows the snippet without markers (why it matched), else the preview', () => {
    assert.equal(toResultItem(result({ preview: '' })).detail, 'the lighthouse beam');
    assert.equal(toResultItem(result({ snippet: '' })).detail, 'Mara climbed the lighthouse stairs, counting each step.');
  });
});

describe('oneLine', () => {
  it('cuts long text with an ellipsis', () => {
    const text = oneLine('word '.repeat(100), 20);
    assert.ok(text.length <= 20);
    assert.ok(text.endsWith('…'));
  });
});

describe('selectionRange', () => {
  it('uses the LSP range when present', () => {
    assert.deepEqual(selectionRange(result()), result().range);
  });
  it('builds a 0-based range from 1-based lines otherwise', () => {
    const r = selectionRange({ startLine: 5, endLine: 7, range: undefined as unknown as SearchResult['range'] });
    assert.deepEqual(r, { start: { line: 4, character: 0 }, end: { line: 6, character: 0 } });
  });
});

describe('searchNotice', () => {
  it('says why results may be incomplete', () => {
    assert.equal(searchNotice({ indexing: true, degraded: null, results: [] }), 'indexing in progress, results may be incomplete');
    assert.equal(
      searchNotice({ indexing: false, degraded: 'no embedding provider: keyword only', results: [result()] }),
      'degraded: no embedding provider: keyword only',
    );
    assert.equal(searchNotice({ indexing: false, degraded: null, results: [] }), 'No results');
    assert.equal(
      searchNotice({ indexing: false, degraded: null, results: [], note: 'no indexed file is under notes/' }),
      'No results: no indexed file is under notes/',
    );
    assert.equal(searchNotice({ indexing: false, degraded: 'keyword search only', results: [result()] }, true), undefined);
    assert.equal(searchNotice({ indexing: false, degraded: null, results: [result()] }), undefined);
  });
});

describe('statusView', () => {
  it('idle: number of files', () => {
    const view = statusView({ running: true, status: status() });
    assert.equal(view.text, '$(search) Saipling: 4 files');
    assert.equal(view.state, 'idle');
    assert.match(view.tooltip, /4 files, 11 chunks/);
  });

  it('indexing: percentage from $/progress first', () => {
    const view = statusView({
      running: true,
      status: status({ isIndexing: true, progress: { filesProcessed: 1, filesTotal: 4, currentFile: 'a.md' } }),
      progress: { title: 'Indexing', percentage: 62.4, message: '5/8 files' },
    });
    assert.equal(view.text, '$(sync~spin) Saipling: indexing 62%');
    assert.match(view.tooltip, /5\/8 files/);
  });

  it('indexing: percentage from polled status otherwise', () => {
    const view = statusView({
      running: true,
      status: status({ isIndexing: true, progress: { filesProcessed: 1, filesTotal: 4, currentFile: 'a.md' } }),
    });
    assert.equal(view.text, '$(sync~spin) Saipling: indexing 25%');
  });

  it('indexing without numbers has no percentage', () => {
    assert.equal(statusView({ running: true, progress: { title: 'Indexing' } }).text, '$(sync~spin) Saipling: indexing');
  });

  it('keyword-only by choice (provider none) is not shown as degraded', () => {
    const view = statusView({ running: true, status: status({ degraded: 'keyword search only' }), keywordOnlyByChoice: true });
    assert.equal(view.state, 'idle');
    assert.match(view.tooltip, /Note: keyword search only/);
    assert.match(statusReport(status({ degraded: 'keyword search only' }), true).message, /ready/);
    assert.match(statusReport(status({ degraded: 'keyword search only' })).message, /degraded/);
  });

  it('degraded, starting and stopped', () => {
    assert.equal(statusView({ running: true, status: status({ degraded: 'provider unreachable', totalFiles: 1 }) }).text,
      '$(warning) Saipling: 1 file');
    assert.equal(statusView({ running: true }).state, 'starting');
    const stopped = statusView({ running: false, error: 'command not found' });
    assert.equal(stopped.state, 'stopped');
    assert.equal(stopped.tooltip, 'command not found');
  });
});

describe('statusReport', () => {
  it('summarises the status', () => {
    const report = statusReport(status({ totalCostUsd: 0.0123 }));
    assert.equal(report.message, 'Saipling index ready: 4 files, 11 chunks');
    assert.match(report.detail, /Provider: none/);
    assert.match(report.detail, /\$0\.0123/);
  });

  it('tolerates null progress and cost', () => {
    const report = statusReport(status({ isIndexing: true, totalCostUsd: null }));
    assert.match(report.message, /indexing/);
    assert.match(report.detail, /Indexing: yes/);
  });
});

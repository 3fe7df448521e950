// Turns server responses into what the UI shows. No `vscode` import: unit-tested with node.
import type { LspRange, SearchResponse, SearchResult, StatusResponse } from './protocol';

export interface ResultItem {
  label: string;
  description: string;
  detail: string;
  /** The result the item stands for, to open on Enter. */
  result: SearchResult;
}

export const PREVIEW_CHARS = 160;

/** Collapses whitespace, drops markdown emphasis/snippet markers and cuts to `max` characters. */
export function oneLine(text: string | null | undefined, max = PREVIEW_CHARS): string {
  const flat = (text ?? '')
    .replace(/<\/?(?:b|mark|em|strong)>/gi, '')
    .replace(/\*\*|__|\[\[|\]\]|>>>|<<</g, '')
    .replace(/\s+/g, ' ')
    .trim();
  return flat.length <= max ? flat : `${flat.slice(0, max - 1).trimEnd()}…`;
}

/** The path to show: relative to the root when the server sent an absolute one. */
export function displayPath(filePath: string, root?: string): string {
  const normalised = filePath.replace(/\\/g, '/');
  if (root) {
    const base = root.replace(/\\/g, '/').replace(/\/+$/, '');
    if (normalised.startsWith(`${base}/`)) {
      return normalised.slice(base.length + 1);
    }
  }
  return normalised;
}

/** The heading to show: the section heading, else the last part of the heading path. */
export function sectionOf(result: Pick<SearchResult, 'sectionHeading' | 'headingPath'>): string | undefined {
  // The server may send the heading line itself ("## The Lighthouse"): show the text only.
  const heading = result.sectionHeading?.replace(/^\s*#{1,6}\s+/, '').trim();
  if (heading) {
    return heading;
  }
  const headingPath = result.headingPath;
  if (Array.isArray(headingPath) && headingPath.length > 0) {
    return String(headingPath[headingPath.length - 1]).trim() || undefined;
  }
  if (typeof headingPath === 'string' && headingPath.trim() !== '') {
    const parts = headingPath.split(/\s*(?:>|›|\/)\s*/);
    return parts[parts.length - 1] || undefined;
  }
  return undefined;
}

export function formatScore(score: number): string {
  return Number.isFinite(score) ? score.toFixed(2) : '–';
}

export function formatLines(startLine: number, endLine: number): string {
  return endLine > startLine ? `lines ${startLine}–${endLine}` : `line ${startLine}`;
}

/** `file § section`, `score · lines a–b`, the snippet (the text around the matched words; else the preview, the
 * passage's first words, which may not show why it matched): one quick-pick row per result. */
export function toResultItem(result: SearchResult, root?: string): ResultItem {
  const file = displayPath(result.filePath, root);
  const section = sectionOf(result);
  return {
    label: section ? `${file} § ${section}` : file,
    description: `${formatScore(result.score)} · ${formatLines(result.startLine, result.endLine)}`,
    detail: oneLine(result.snippet || result.preview),
    result,
  };
}

/** The 0-based range to select: the server's `range`, else one built from the 1-based lines. */
export function selectionRange(result: Pick<SearchResult, 'range' | 'startLine' | 'endLine'>): LspRange {
  if (result.range && result.range.start && result.range.end) {
    return result.range;
  }
  const start = Math.max(0, result.startLine - 1);
  const end = Math.max(start, result.endLine - 1);
  return { start: { line: start, character: 0 }, end: { line: end, character: 0 } };
}

/**
 * A line above the results saying why they may be incomplete, or undefined. `keywordOnlyByChoice`
 * (the user set provider "none") hides the "degraded" reason: keyword search is what they asked for.
 */
export function searchNotice(
  response: Pick<SearchResponse, 'degraded' | 'indexing' | 'results' | 'note'>,
  keywordOnlyByChoice = false,
): string | undefined {
  const notes: string[] = [];
  if (response.indexing) {
    notes.push('indexing in progress, results may be incomplete');
  }
  if (response.degraded && !keywordOnlyByChoice) {
    notes.push(`degraded: ${response.degraded}`);
  }
  if (notes.length === 0) {
    if (response.results.length > 0) return undefined;
    return response.note ? `No results: ${response.note}` : 'No results';
  }
  return notes.join('; ');
}

/** What the status-bar item shows. */
export interface StatusView {
  text: string;
  tooltip: string;
  state: 'starting' | 'idle' | 'indexing' | 'degraded' | 'stopped';
}

export interface ProgressState {
  title?: string;
  message?: string;
  percentage?: number;
}

function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
}

/** Percentage from `$/progress`, else from the status' file counts; undefined when unknown. */
export function indexingPercentage(progress?: ProgressState, status?: StatusResponse): number | undefined {
  if (progress?.percentage !== undefined && Number.isFinite(progress.percentage)) {
    return Math.max(0, Math.min(100, Math.round(progress.percentage)));
  }
  const p = status?.progress;
  if (p && p.filesTotal > 0) {
    return Math.max(0, Math.min(100, Math.round((100 * p.filesProcessed) / p.filesTotal)));
  }
  return undefined;
}

export function statusTooltip(status: StatusResponse, keywordOnlyByChoice = false): string {
  const lines = [
    `Saipling: ${plural(status.totalFiles, 'file')}, ${plural(status.totalChunks, 'chunk')}`,
    `Root: ${status.root}`,
    `Provider: ${status.provider ?? 'none'}${status.model ? ` (${status.model})` : ''}` +
      (status.providerReason ? ` — ${status.providerReason}` : ''),
    `Last indexed: ${status.lastIndexed ?? 'never'}`,
  ];
  if (status.pendingFiles > 0) {
    lines.push(`Pending: ${plural(status.pendingFiles, 'file')}`);
  }
  if (status.degraded) {
    lines.push(`${keywordOnlyByChoice ? 'Note' : 'Degraded'}: ${status.degraded}`);
  }
  return lines.join('\n');
}

/**
 * The status-bar view for the server state; `progress` is the live `$/progress`, if any;
 * `keywordOnlyByChoice` (provider "none" configured) keeps keyword-only search from looking degraded.
 */
export function statusView(input: {
  running: boolean;
  status?: StatusResponse;
  progress?: ProgressState;
  error?: string;
  keywordOnlyByChoice?: boolean;
}): StatusView {
  const { running, status, progress, error, keywordOnlyByChoice = false } = input;
  if (!running) {
    return {
      text: '$(circle-slash) Saipling',
      tooltip: error ?? 'Saipling: the language server is not running',
      state: 'stopped',
    };
  }
  if (progress !== undefined || status?.isIndexing) {
    const pct = indexingPercentage(progress, status);
    const detail = progress?.message ?? status?.progress?.currentFile ?? undefined;
    return {
      text: `$(sync~spin) Saipling: indexing${pct === undefined ? '' : ` ${pct}%`}`,
      tooltip: [`Saipling: ${progress?.title ?? 'Indexing'}`, detail].filter(Boolean).join('\n'),
      state: 'indexing',
    };
  }
  if (status === undefined) {
    return { text: '$(sync~spin) Saipling', tooltip: 'Saipling: starting the language server', state: 'starting' };
  }
  const tooltip = statusTooltip(status, keywordOnlyByChoice);
  if (status.degraded && !keywordOnlyByChoice) {
    return { text: `$(warning) Saipling: ${plural(status.totalFiles, 'file')}`, tooltip, state: 'degraded' };
  }
  return { text: `$(search) Saipling: ${plural(status.totalFiles, 'file')}`, tooltip, state: 'idle' };
}

/** The message and detail of "Show Index Status". */
export function statusReport(status: StatusResponse, keywordOnlyByChoice = false): { message: string; detail: string } {
  const cost = status.totalCostUsd ?? 0;
  const detail = [
    `Root: ${status.root}`,
    `Files: ${status.totalFiles}`,
    `Chunks: ${status.totalChunks}`,
    `Last indexed: ${status.lastIndexed ?? 'never'}`,
    `Provider: ${status.provider ?? 'none'}` +
      (status.model ? `, model ${status.model}` : '') +
      (status.dimensions ? `, ${status.dimensions} dimensions` : ''),
    status.providerReason ? `Why this provider: ${status.providerReason}` : undefined,
    `Embedding cost so far: $${cost.toFixed(4)}`,
    `Pending files: ${status.pendingFiles}`,
    status.isIndexing
      ? `Indexing: ${status.progress ? `${status.progress.filesProcessed}/${status.progress.filesTotal} files` : 'yes'}`
      : undefined,
    status.degraded ? `${keywordOnlyByChoice ? 'Note' : 'Degraded'}: ${status.degraded}` : undefined,
  ].filter((line): line is string => line !== undefined);
  const state = status.isIndexing ? 'indexing' : status.degraded && !keywordOnlyByChoice ? 'degraded' : 'ready';
  return {
    message: `Saipling index ${state}: ${plural(status.totalFiles, 'file')}, ${plural(status.totalChunks, 'chunk')}`,
    detail: detail.join('\n'),
  };
}

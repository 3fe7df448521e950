// The saipling custom requests (SPEC 8 and 10): method names, payload types and
// the functions that build request params. No `vscode` import: unit-tested with node.

export const Methods = {
  search: 'saipling/search',
  related: 'saipling/related',
  status: 'saipling/status',
  reindex: 'saipling/reindex',
  clearIndex: 'saipling/clearIndex',
  mentions: 'saipling/mentions',
} as const;

export type SearchMode = 'hybrid' | 'semantic' | 'lexical';

export const MAX_QUERY_CHARS = 2000;
export const MAX_RESULTS_LIMIT = 100;

export interface LspPosition {
  line: number;
  character: number;
}

export interface LspRange {
  start: LspPosition;
  end: LspPosition;
}

export interface SearchFilter {
  entityTypes?: string[];
  fileTypes?: string[];
  bookId?: string;
  chapterId?: string;
  pathPrefix?: string;
  glob?: string;
  corpus?: string;
  maxChapter?: number;
}

export interface SearchParams {
  query: string;
  maxResults?: number;
  mode?: SearchMode;
  filter?: SearchFilter;
  source?: 'editor';
}

export interface SearchResult {
  filePath: string;
  uri: string;
  sectionHeading: string | null;
  headingPath: string[] | string | null;
  startLine: number;
  endLine: number;
  range: LspRange;
  snippet: string;
  preview: string;
  score: number;
  tokenCount: number;
  fileType: string | null;
  entityType: string | null;
  entityName: string | null;
  bookId?: string | null;
  chapterId?: string | null;
  matchedBy: string[] | string | null;
}

export interface SearchResponse {
  query: string;
  mode: SearchMode;
  results: SearchResult[];
  degraded: string | null;
  indexing: boolean;
  elapsedMs: number;
  /** Why a filtered search found nothing (a folder no file is under, the count without the filters). */
  note?: string;
}

export interface RelatedParams {
  uri: string;
  maxResults?: number;
  /** 1-based, inclusive: only the passage at these lines of the file. */
  startLine?: number;
  endLine?: number;
}

export interface RelatedResponse {
  results: SearchResult[];
}

export interface StatusProgress {
  filesProcessed: number;
  filesTotal: number;
  currentFile: string | null;
}

export interface StatusResponse {
  root: string;
  totalFiles: number;
  totalChunks: number;
  lastIndexed: string | null;
  provider: string | null;
  model: string | null;
  dimensions: number | null;
  providerReason: string | null;
  totalCostUsd: number | null;
  pendingFiles: number;
  isIndexing: boolean;
  progress: StatusProgress | null;
  degraded: string | null;
}

export interface ReindexParams {
  full?: boolean;
}

export interface ReindexResponse {
  started: boolean;
}

export interface ClearIndexResponse {
  cleared: boolean;
}

/** Clamp a configured result count into the range the server accepts. */
export function clampMaxResults(value: unknown, fallback = 20): number {
  const n = typeof value === 'number' && Number.isFinite(value) ? Math.trunc(value) : fallback;
  return Math.min(MAX_RESULTS_LIMIT, Math.max(1, n));
}

/** Params for `saipling/search`, or undefined when the query is blank (nothing to ask). */
export function buildSearchParams(
  query: string,
  options: { maxResults?: unknown; mode?: unknown; filter?: SearchFilter } = {},
): SearchParams | undefined {
  const trimmed = query.trim();
  if (trimmed.length === 0) {
    return undefined;
  }
  const params: SearchParams = {
    query: trimmed.slice(0, MAX_QUERY_CHARS),
    maxResults: clampMaxResults(options.maxResults),
    source: 'editor',
  };
  if (options.mode === 'hybrid' || options.mode === 'semantic' || options.mode === 'lexical') {
    params.mode = options.mode;
  }
  if (options.filter && Object.keys(options.filter).length > 0) {
    params.filter = options.filter;
  }
  return params;
}

/** Params for `saipling/related` for the document at `uri`, or (with `lines`, 1-based) for the passage there. */
export function buildRelatedParams(
  uri: string,
  maxResults?: unknown,
  lines?: { start: number; end: number },
): RelatedParams {
  const params: RelatedParams = { uri, maxResults: clampMaxResults(maxResults) };
  if (lines !== undefined) {
    params.startLine = Math.max(1, Math.floor(lines.start));
    params.endLine = Math.max(params.startLine, Math.floor(lines.end));
  }
  return params;
}

/** A place in the manuscript (`saipling/mentions`): a root-relative path and a 1-based line. */
export interface MentionPlace {
  path: string;
  line: number;
  chapter: string | null;
}

export interface MentionsParams {
  name: string;
  maxChapter?: number;
  limit?: number;
}

export interface MentionsEntity {
  entity: { name: string; path: string; type: string; aliases: string[] };
  total: number;
  summary: string;
  chapters: { chapter: string; count: number; first: MentionPlace }[];
  first: MentionPlace | null;
  last: MentionPlace | null;
  otherFiles: { path: string; count: number }[];
  mentions: { path: string; line: number; column: number; endColumn: number; surface: string; chapter: string | null }[];
  workspaceFolder?: string;
}

export interface MentionsResponse {
  entities: MentionsEntity[];
}

/** Params for `saipling/mentions`, or undefined for a blank name (nothing is sent). */
export function buildMentionsParams(name: string, limit = 500): MentionsParams | undefined {
  const trimmed = name.trim().replace(/\s+/g, ' ');
  return trimmed === '' ? undefined : { name: trimmed.slice(0, 200), limit };
}

/** One row of the "Mentions of…" list: a mention (path, 0-based line and columns) with its labels. */
export interface MentionRow {
  label: string;
  description: string;
  detail?: string;
  path: string;
  line: number;
  column: number;
  endColumn: number;
}

/**
 * The rows of the "Mentions of…" list, in manuscript order: each mention with its chapter; the entity's
 * summary line (first, count, last seen) is the detail of the first row of each entity.
 */
export function mentionRows(response: MentionsResponse): MentionRow[] {
  const rows: MentionRow[] = [];
  for (const entity of response.entities) {
    entity.mentions.forEach((m, i) => {
      rows.push({
        label: `${m.chapter ?? m.path}: l.${m.line}`,
        description: `${m.surface} · ${entity.entity.name}`,
        detail: i === 0 ? entity.summary : undefined,
        path: m.path,
        line: m.line - 1,
        column: m.column,
        endColumn: m.endColumn,
      });
    });
  }
  return rows;
}

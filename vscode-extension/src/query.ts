// The filter prefixes of Search Project: `book:ID type:character upto:12 path:notes/ words...`.
// The same syntax as Neovim's :SaiplingSearch. No `vscode` import: unit-tested with node.
import type { SearchFilter } from './protocol';

/** Prefix -> what it sets in `filter` (README, "Filters in the editors"). */
export const FILTER_PREFIXES = {
  book: 'bookId',
  type: 'entityTypes',
  upto: 'maxChapter',
  path: 'pathPrefix',
} as const;

export type FilterPrefix = keyof typeof FILTER_PREFIXES;

export interface ParsedQuery {
  /** The words to search for, filters taken out. */
  query: string;
  filter: SearchFilter;
  /** Problems with a filter (e.g. `upto:x`), to show instead of searching. */
  errors: string[];
}

// `key:value` or `key:"quoted value"`, at the start or after whitespace.
const TOKEN = /(^|\s)(book|type|upto|path):("([^"]*)"?|\S*)/gi;

/** `12`, `ch-12`, `ch12`, `chapter-12` -> 12; anything else undefined. */
export function chapterNumber(value: string): number | undefined {
  const match = /^(?:ch(?:apter)?-?)?(\d{1,6})$/i.exec(value.trim());
  return match ? Number(match[1]) : undefined;
}

/** Splits the filter prefixes off a search box value. Unknown `word:` stays part of the query. */
export function parseQuery(value: string): ParsedQuery {
  const filter: SearchFilter = {};
  const errors: string[] = [];
  const query = value
    .replace(TOKEN, (_all, lead: string, rawKey: string, raw: string, quoted: string | undefined) => {
      const key = rawKey.toLowerCase() as FilterPrefix;
      const text = (quoted ?? raw).trim();
      if (text === '') {
        errors.push(`${key}: needs a value (e.g. ${example(key)})`);
        return lead;
      }
      switch (key) {
        case 'book':
          filter.bookId = text;
          break;
        case 'type':
          filter.entityTypes = [...(filter.entityTypes ?? []), ...text.split(',').map((t) => t.trim()).filter(Boolean)];
          break;
        case 'upto': {
          const n = chapterNumber(text);
          if (n === undefined) {
            errors.push(`upto: needs a chapter number, not "${text}" (e.g. upto:12)`);
          } else {
            filter.maxChapter = n;
          }
          break;
        }
        case 'path':
          filter.pathPrefix = text.replace(/\\/g, '/').replace(/^\.\//, '');
          break;
      }
      return lead;
    })
    .replace(/\s+/g, ' ')
    .trim();
  return { query, filter, errors };
}

function example(key: FilterPrefix): string {
  return { book: 'book:book-1', type: 'type:character', upto: 'upto:12', path: 'path:notes/' }[key];
}

/** A short description of the active filters, e.g. `type character · up to chapter 12`. */
export function describeFilter(filter: SearchFilter): string {
  const parts: string[] = [];
  if (filter.bookId) parts.push(`book ${filter.bookId}`);
  if (filter.entityTypes?.length) parts.push(`type ${filter.entityTypes.join(', ')}`);
  if (filter.maxChapter !== undefined) parts.push(`up to chapter ${filter.maxChapter}`);
  if (filter.pathPrefix) parts.push(`in ${filter.pathPrefix}`);
  return parts.join(' · ');
}

// Maps the `saipling.*` settings to what the server reads (SPEC 11). No `vscode` import.

/** Settings only the extension uses; never sent to the server. */
export const CLIENT_ONLY_KEYS: ReadonlySet<string> = new Set([
  'serverCommand',
  'serverArgs',
  'pythonPath',
  'maxResults',
  'searchMode',
  'trace', // saipling.trace.server: read by vscode-languageclient itself
]);

/**
 * The declared settings the server reads (package.json `contributes.configuration`, less CLIENT_ONLY_KEYS): sent
 * as VS Code resolves them (each by its scope). Any other `saipling.*` key the server reads (modelPath, rerank,
 * defaultRole, store...: docs/configuration.md) is sent from the user's own settings only: VS Code applies a
 * scope to declared settings alone, so an undeclared `saipling.base_url` or `saipling.rerank` in a repository's
 * .vscode/settings.json reached the server as the user's setting and got the user's API key.
 */
export const SERVER_KEYS: ReadonlySet<string> = new Set([
  'enabled',
  'provider',
  'model',
  'baseUrl',
  'dimensions',
  'quietPeriodSeconds',
  'autoIndex',
  'watch',
  'include',
  'exclude',
  'analytics',
  'referencesMaxChapter',
  'nameDiagnostics',
  'hoverAllChapters',
]);

/** Settings whose change needs a new server process rather than `didChangeConfiguration`. */
export const RESTART_KEYS: readonly string[] = ['enabled', 'serverCommand', 'serverArgs', 'pythonPath'];

export interface ApiKeyProvider {
  /** Provider id as in `saipling.provider`. */
  id: 'voyage' | 'openai';
  label: string;
  /** Key of the secret in the editor's SecretStorage. */
  secretKey: string;
  /** Key the server expects in `initializationOptions`. */
  optionKey: 'voyageApiKey' | 'openaiApiKey';
}

export const API_KEY_PROVIDERS: readonly ApiKeyProvider[] = [
  { id: 'voyage', label: 'Voyage AI', secretKey: 'saipling.voyageApiKey', optionKey: 'voyageApiKey' },
  { id: 'openai', label: 'OpenAI (or compatible)', secretKey: 'saipling.openaiApiKey', optionKey: 'openaiApiKey' },
];

export type ApiKeys = Partial<Record<ApiKeyProvider['optionKey'], string>>;

function isUnset(value: unknown): boolean {
  return (
    value === undefined ||
    value === null ||
    (typeof value === 'string' && value.trim() === '') ||
    (Array.isArray(value) && value.length === 0)
  );
}

/**
 * The `saipling` settings section as the server should see it: the declared server settings (SERVER_KEYS) that
 * are set; unset values (null, "", []) left out so the server's own defaults and config.toml apply.
 */
export function serverSettings(
  section: Record<string, unknown> | null | undefined,
  user: Record<string, unknown> | null | undefined = undefined,
): Record<string, unknown> {
  const result: Record<string, unknown> = {};
  const isClientOnly = (key: string) => CLIENT_ONLY_KEYS.has(key) || CLIENT_ONLY_KEYS.has(key.split('.')[0]);
  for (const [key, value] of Object.entries(section ?? {})) {
    if (!SERVER_KEYS.has(key) || isUnset(value) || typeof value === 'function') {
      continue;
    }
    result[key] = value;
  }
  for (const [key, value] of Object.entries(user ?? {})) {
    if (SERVER_KEYS.has(key) || isClientOnly(key) || isUnset(value) || typeof value === 'function') {
      continue;
    }
    result[key] = value;
  }
  return result;
}

/** `initializationOptions`: the server settings plus any API keys from SecretStorage. */
export function buildInitializationOptions(
  section: Record<string, unknown> | null | undefined,
  keys: ApiKeys = {},
  user: Record<string, unknown> | null | undefined = undefined,
): Record<string, unknown> {
  const options = serverSettings(section, user);
  for (const provider of API_KEY_PROVIDERS) {
    const key = keys[provider.optionKey];
    if (key !== undefined && key.trim() !== '') {
      options[provider.optionKey] = key.trim();
    }
  }
  return options;
}

/** Whether a configuration change (given `affects("saipling.<key>")`) needs a server restart. */
export function needsRestart(affects: (setting: string) => boolean): boolean {
  return RESTART_KEYS.some((key) => affects(`saipling.${key}`));
}

/** A `workspace/configuration` answer with the `saipling` sections reduced to `serverSettings`. */
export function cleanConfigurationValues(
  items: readonly { section?: string | null }[],
  values: readonly unknown[],
  user: Record<string, unknown> | null | undefined = undefined,
): unknown[] {
  return values.map((value, i) =>
    items[i]?.section === 'saipling' && typeof value === 'object' && value !== null
      ? serverSettings(value as Record<string, unknown>, user)
      : value,
  );
}

/** True when the user chose keyword-only search (provider "none"), so it is not shown as degraded. */
export function keywordOnlyByChoice(provider: unknown): boolean {
  return provider === 'none';
}

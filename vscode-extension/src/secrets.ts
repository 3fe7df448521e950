// "Saipling: Set API Key": keys live in the editor's SecretStorage and reach the server only
// through `initializationOptions`, so setting one restarts the server.
import * as vscode from 'vscode';
import { COMMANDS, type Session } from './client';
import { API_KEY_PROVIDERS, type ApiKeyProvider, type ApiKeys } from './settings';

export async function readApiKeys(secrets: vscode.SecretStorage): Promise<ApiKeys> {
  const keys: ApiKeys = {};
  for (const provider of API_KEY_PROVIDERS) {
    const value = await secrets.get(provider.secretKey);
    if (value) {
      keys[provider.optionKey] = value;
    }
  }
  return keys;
}

interface ProviderPickItem extends vscode.QuickPickItem {
  provider: ApiKeyProvider;
}

export function registerSetApiKey(context: vscode.ExtensionContext, session: Session): vscode.Disposable {
  return vscode.commands.registerCommand(COMMANDS.setApiKey, () => setApiKey(context.secrets, session));
}

export async function setApiKey(secrets: vscode.SecretStorage, session: Session): Promise<void> {
  const items: ProviderPickItem[] = [];
  for (const provider of API_KEY_PROVIDERS) {
    const stored = await secrets.get(provider.secretKey);
    items.push({ label: provider.label, description: stored ? 'key stored' : 'no key', provider });
  }
  const pick = await vscode.window.showQuickPick(items, {
    title: 'Saipling: Set API Key',
    placeHolder: 'Which embedding provider is the key for?',
  });
  if (pick === undefined) {
    return;
  }
  const key = await vscode.window.showInputBox({
    title: `Saipling: ${pick.provider.label} API key`,
    prompt: 'Stored in the editor\'s secret storage, never in project files. Leave empty to remove the stored key.',
    password: true,
    ignoreFocusOut: true,
  });
  if (key === undefined) {
    return;
  }
  if (key.trim() === '') {
    await secrets.delete(pick.provider.secretKey);
  } else {
    await secrets.store(pick.provider.secretKey, key.trim());
  }
  await session.restart();
  void vscode.window.showInformationMessage(
    `Saipling: ${pick.provider.label} API key ${key.trim() === '' ? 'removed' : 'stored'}; the server was restarted.`,
  );
}

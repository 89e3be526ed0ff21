// The `astra.*` settings, with the contract's defaults (package.json shows the same defaults to
// the user; tests/lsp/test_contract.py keeps them equal). No setting is listed here by hand.
import * as vscode from "vscode";
import { SETTING_DEFAULTS } from "./contract";

type Key = keyof typeof SETTING_DEFAULTS;

function get<K extends Key>(c: vscode.WorkspaceConfiguration, key: K): (typeof SETTING_DEFAULTS)[K] {
  return c.get(key, SETTING_DEFAULTS[key]);
}

/** What the server gets in `initializationOptions.settings`: every setting of the contract, by its
 * dotted name; the server structures them into its typed Settings (astra_cuda/lsp/settings.py),
 * as it does the `astra` section it asks for with workspace/configuration on a change. */
export function serverSettings(): Record<string, unknown> {
  const c = vscode.workspace.getConfiguration("astra");
  return Object.fromEntries((Object.keys(SETTING_DEFAULTS) as Key[]).map((key) => [key, get(c, key)]));
}

/** The interpreter the user chose for the server ('' when none). */
export function configuredPython(): string {
  return get(vscode.workspace.getConfiguration("astra"), "server.python").trim();
}

/** Whose server and libraries run: the bundled ones (default) or the interpreter's environment's. */
export function importStrategy(): string {
  return get(vscode.workspace.getConfiguration("astra"), "server.importStrategy");
}

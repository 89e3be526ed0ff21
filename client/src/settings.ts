// The `astra.*` settings the server reads, with the contract's defaults (package.json shows the
// same defaults to the user; a test keeps them equal).
import * as vscode from "vscode";
import { SETTING_DEFAULTS } from "./contract";

type Key = keyof typeof SETTING_DEFAULTS;

function get<K extends Key>(c: vscode.WorkspaceConfiguration, key: K): (typeof SETTING_DEFAULTS)[K] {
  return c.get(key, SETTING_DEFAULTS[key]);
}

/** What the server gets in `initializationOptions.settings` (nested like the settings). */
export function serverSettings(): Record<string, unknown> {
  const c = vscode.workspace.getConfiguration("astra");
  return {
    llm: {
      baseUrl: get(c, "llm.baseUrl"), model: get(c, "llm.model"), reasoningEffort: get(c, "llm.reasoningEffort"),
      temperature: get(c, "llm.temperature"), maxTokens: get(c, "llm.maxTokens"),
    },
    budget: { tokens: get(c, "budget.tokens"), seconds: get(c, "budget.seconds") },
    backend: get(c, "backend"),
    rounds: get(c, "rounds"),
    checkOnOpen: get(c, "checkOnOpen"),
    checkOnSave: get(c, "checkOnSave"),
    gpuArch: get(c, "gpuArch"),
    profile: { ncu: get(c, "profile.ncu") },
    includePaths: get(c, "includePaths"),
    defines: get(c, "defines"),
    std: get(c, "std"),
    compileCommands: get(c, "compileCommands"),
  };
}

/** The interpreter the user chose for the server ('' when none). */
export function configuredPython(): string {
  return get(vscode.workspace.getConfiguration("astra"), "server.python").trim();
}

/** Whose server and libraries run: the bundled ones (default) or the interpreter's environment's. */
export function importStrategy(): string {
  return get(vscode.workspace.getConfiguration("astra"), "server.importStrategy");
}

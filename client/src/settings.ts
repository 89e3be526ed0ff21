// The settings the client itself reads: how it starts the server. The server's settings are not
// copied here: it asks for the whole `astra` section (workspace/configuration) and VS Code answers
// from package.json's configuration, the one schema (its defaults included).
import * as vscode from "vscode";

function get(key: string): string {
  return vscode.workspace.getConfiguration("astra").get<string>(key) ?? "";
}

/** The interpreter the user chose for the server ('' when none). */
export function configuredPython(): string {
  return get("server.python").trim();
}

/** Whose server and libraries run: the bundled ones (package.json's default) or the interpreter's environment's. */
export function importStrategy(): string {
  return get("server.importStrategy");
}

// Which Python runs the server: the `astra.server.python` setting, else the interpreter selected
// in Microsoft's Python extension (through its API package, @vscode/python-extension), else
// python3 — the order users of Python tools expect. When the user picks another interpreter in the
// Python extension, `onInterpreterChange` restarts the server on it.
import * as vscode from "vscode";
import { PythonExtension } from "@vscode/python-extension";
import { configuredPython } from "./settings";

async function pythonApi(): Promise<PythonExtension | undefined> {
  if (!vscode.extensions.getExtension("ms-python.python")) return undefined;
  return PythonExtension.api();
}

export async function resolvePython(log: vscode.LogOutputChannel): Promise<string> {
  const configured = configuredPython();
  if (configured) return configured;
  try {
    const api = await pythonApi();
    if (api) {
      const resource = vscode.window.activeTextEditor?.document.uri;
      const active = api.environments.getActiveEnvironmentPath(resource);
      const env = await api.environments.resolveEnvironment(active);
      if (env?.executable.uri) return env.executable.uri.fsPath;
      if (active?.path) return active.path;
    }
  } catch (e) {
    log.warn(`could not ask the Python extension for its interpreter: ${e}`);
  }
  return "python3";
}

/** Calls `restart` when the Python extension's interpreter changes and no interpreter is set in
 *  astra.server.python (the setting wins). */
export async function onInterpreterChange(log: vscode.LogOutputChannel, restart: () => void): Promise<vscode.Disposable> {
  try {
    const api = await pythonApi();
    if (api) {
      return api.environments.onDidChangeActiveEnvironmentPath((e) => {
        if (configuredPython()) return;
        log.info(`the Python extension's interpreter is now ${e.path}: restarting the Astra server on it`);
        restart();
      });
    }
  } catch (e) {
    log.warn(`could not follow the Python extension's interpreter: ${e}`);
  }
  return new vscode.Disposable(() => undefined);
}

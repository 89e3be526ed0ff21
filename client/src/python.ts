// Which Python runs the server: the `astra.server.python` setting, else the interpreter selected
// in Microsoft's Python extension, else python3 (the order users of Python tools expect).
import * as vscode from "vscode";
import { configuredPython } from "./settings";

interface PythonEnvironmentsApi {
  getActiveEnvironmentPath(resource?: vscode.Uri): { path: string };
  resolveEnvironment(env: { path: string }): Promise<{ executable: { uri?: vscode.Uri } } | undefined>;
}
interface PythonExtensionApi {
  environments?: PythonEnvironmentsApi;
  settings?: { getExecutionDetails?(resource?: vscode.Uri): { execCommand?: string[] } };
}

export async function resolvePython(log: vscode.LogOutputChannel): Promise<string> {
  const configured = configuredPython();
  if (configured) return configured;
  const ext = vscode.extensions.getExtension<PythonExtensionApi>("ms-python.python");
  if (ext) {
    try {
      const api = ext.isActive ? ext.exports : await ext.activate();
      const resource = vscode.window.activeTextEditor?.document.uri;
      if (api?.environments) {
        const active = api.environments.getActiveEnvironmentPath(resource);
        const env = await api.environments.resolveEnvironment(active);
        if (env?.executable.uri) return env.executable.uri.fsPath;
        if (active?.path) return active.path;
      }
      const cmd = api?.settings?.getExecutionDetails?.(resource)?.execCommand;
      if (cmd?.length) return cmd[0];
    } catch (e) {
      log.warn(`could not ask the Python extension for its interpreter: ${e}`);
    }
  }
  return "python3";
}

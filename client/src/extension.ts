// Astra's VS Code client, wired together: the language server's life (server.ts), the palette
// commands (commands.ts), the status bar item (status.ts). All kernel work happens in the server;
// names come from the contract both sides read (contract.ts), settings from package.json.
import * as vscode from "vscode";
import { registerCommands } from "./commands";
import { onInterpreterChange } from "./python";
import { ServerConnection, fail } from "./server";
import { StatusItem } from "./status";

let server: ServerConnection | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const log = vscode.window.createOutputChannel("Astra", { log: true });
  const status = new StatusItem(() => server?.running !== undefined);
  const srv = new ServerConnection(context, log, (s) => status.update(s), () => {
    if (!srv.running) status.clear();
    status.render();
  });
  server = srv;
  context.subscriptions.push(log, status);
  registerCommands(context, srv);
  context.subscriptions.push(
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (e.affectsConfiguration("astra.server")) void srv.restart();
      if (e.affectsConfiguration("astra.trace.server")) explainTrace(log);
    }),
    // Trust granted: start again with kernel checks allowed (the server was started restricted).
    vscode.workspace.onDidGrantWorkspaceTrust(() => void srv.restart()),
    vscode.window.onDidChangeActiveTextEditor(() => status.render()),
  );
  // A failing start must not fail activation: the commands stay usable (restart, logs).
  await srv.start().catch((e) => fail(log, "Astra: could not start the language server", e));
  explainTrace(log);
  context.subscriptions.push(await onInterpreterChange(log, () => void srv.restart()));
}

/** `astra.trace.server` chooses what is traced, but vscode-languageclient writes the trace only while
 * the log's level is Trace: say so (and offer the command that sets it) instead of staying silent. */
function explainTrace(log: vscode.LogOutputChannel): void {
  const want = vscode.workspace.getConfiguration("astra").get<string>("trace.server", "off");
  if (want === "off" || log.logLevel === vscode.LogLevel.Trace) return;
  const msg = `astra.trace.server is '${want}': the LSP messages are written to the Astra log once its level is Trace`;
  log.info(`${msg} (Developer: Set Log Level… → Astra → Trace)`);
  void vscode.window.showInformationMessage(`${msg}.`, "Set Log Level").then((pick) => {
    if (pick) void vscode.commands.executeCommand("workbench.action.setLogLevel");
  });
}

export async function deactivate(): Promise<void> {
  await server?.stop();
}

// Astra's VS Code client, wired together: the language server's life (server.ts), the palette
// commands (commands.ts), the status bar item (status.ts). All kernel work happens in the server;
// names and defaults come from the contract both sides read (contract.ts).
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
    }),
    // Trust granted: start again with kernel checks allowed (the server was started restricted).
    vscode.workspace.onDidGrantWorkspaceTrust(() => void srv.restart()),
    vscode.window.onDidChangeActiveTextEditor(() => status.render()),
  );
  // A failing start must not fail activation: the commands stay usable (restart, logs).
  await srv.start().catch((e) => fail(log, "Astra: could not start the language server", e));
  context.subscriptions.push(await onInterpreterChange(log, () => void srv.restart()));
}

export async function deactivate(): Promise<void> {
  await server?.stop();
}

// The palette commands: optimize, profile, apply (with a diff preview), report, API key. Each asks
// the server (contract.ts names the server commands and types their answers).
import * as vscode from "vscode";
import { WorkspaceEdit as LspWorkspaceEdit } from "vscode-languageclient/node";
import { CLIENT, EditAnswer, KernelEntry, OptimizeAnswer, ProfileAnswer, ReportAnswer, SECRETS, SERVER } from "./contract";
import { ServerConnection, fail } from "./server";

const PREVIEW_SCHEME = "astra-preview";

export function registerCommands(ctx: vscode.ExtensionContext, server: ServerConnection): void {
  const previews = new Map<string, string>(); // preview uri -> proposed file text
  const reg = (id: string, fn: (...args: any[]) => unknown) =>
    ctx.subscriptions.push(vscode.commands.registerCommand(id, async (...args: any[]) => {
      try { await fn(...args); } catch (e) { fail(server.log, `${id} failed`, e); }
    }));
  const commands = new Commands(ctx, server, previews);
  reg(CLIENT.optimizeKernel, (uri?: string, name?: string) => commands.optimize(uri, name));
  reg(CLIENT.profileKernel, (uri?: string, name?: string) => commands.profile(uri, name));
  reg(CLIENT.showReport, (uri?: string, name?: string) => commands.report(uri, name));
  reg(CLIENT.applyOptimized, (uri?: string, name?: string) => commands.apply(uri, name));
  reg(CLIENT.setApiKey, () => commands.setApiKey());
  reg(CLIENT.restartServer, () => server.restart());
  reg(CLIENT.showLogs, () => server.log.show());
  reg(CLIENT.gpuSetup, (setup?: { problem: string; fix: string }) => commands.gpuSetup(setup));
  ctx.subscriptions.push(vscode.workspace.registerTextDocumentContentProvider(PREVIEW_SCHEME,
    { provideTextDocumentContent: (u) => previews.get(u.toString()) ?? "" }));
}

class Commands {
  constructor(private readonly ctx: vscode.ExtensionContext, private readonly server: ServerConnection,
              private readonly previews: Map<string, string>) {}

  /** The kernel at the cursor, else one picked from the file's kernels. */
  private async pickKernel(uriArg?: string, nameArg?: string): Promise<{ uri: string; name: string } | undefined> {
    if (typeof uriArg === "string" && typeof nameArg === "string") return { uri: uriArg, name: nameArg };
    const editor = vscode.window.activeTextEditor;
    if (!editor || editor.document.languageId !== "cuda-cpp") {
      void vscode.window.showWarningMessage("Astra: open a CUDA (.cu) file first.");
      return undefined;
    }
    const uri = editor.document.uri.toString();
    const kernels = await this.server.request<KernelEntry[]>(SERVER.kernels, uri);
    if (!kernels.length) {
      void vscode.window.showWarningMessage("Astra: no __global__ kernels in this file.");
      return undefined;
    }
    const line = editor.selection.active.line;
    const here = kernels.find((k) => k.startLine <= line && line <= k.endLine);
    if (here) return { uri, name: here.name };
    if (kernels.length === 1) return { uri, name: kernels[0].name };
    const name = await vscode.window.showQuickPick(kernels.map((k) => k.name), { placeHolder: "Which kernel?" });
    return name ? { uri, name } : undefined;
  }

  async optimize(uri?: string, name?: string): Promise<void> {
    const k = await this.pickKernel(uri, name);
    if (!k) return;
    // The server reports work-done progress (with a cancel button) while this runs.
    const r = await this.server.request<OptimizeAnswer>(SERVER.optimize, k.uri, k.name);
    if (r?.status === "done") {
      const pick = await vscode.window.showInformationMessage(
        `Astra: ${k.name} — ${r.title}.`, "Preview and apply", "Show report");
      if (pick === "Preview and apply") await this.apply(k.uri, k.name);
      else if (pick === "Show report") await this.report(k.uri, k.name);
    }
  }

  async profile(uri?: string, name?: string): Promise<void> {
    const k = await this.pickKernel(uri, name);
    if (!k) return;
    const r = await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Window, title: `Astra: profiling ${k.name}` },
      () => this.server.request<ProfileAnswer>(SERVER.profile, k.uri, k.name));
    if (r?.status === "done") void vscode.window.showInformationMessage(`Astra: ${k.name}: ${r.summary}`);
  }

  /** Shows the optimized kernel as a diff against the file, then applies it if the user agrees.
   *  The edit is versioned: if the file changes meanwhile, VS Code refuses it and nothing is lost. */
  async apply(uri?: string, name?: string): Promise<void> {
    const k = await this.pickKernel(uri, name);
    const client = this.server.running;
    if (!k || !client) return;
    const r = await this.server.request<EditAnswer<LspWorkspaceEdit>>(SERVER.optimizedEdit, k.uri, k.name);
    if (r.status !== "ok" || !r.edit) {
      void vscode.window.showWarningMessage(`Astra: not applied — ${r.message ?? "nothing to apply"}`);
      return;
    }
    const edit = await client.protocol2CodeConverter.asWorkspaceEdit(r.edit);
    const doc = await vscode.workspace.openTextDocument(vscode.Uri.parse(k.uri));
    const changes = edit.get(doc.uri);
    let proposed = doc.getText();
    for (const e of [...changes].sort((a, b) => doc.offsetAt(b.range.start) - doc.offsetAt(a.range.start))) {
      proposed = proposed.slice(0, doc.offsetAt(e.range.start)) + e.newText + proposed.slice(doc.offsetAt(e.range.end));
    }
    const preview = vscode.Uri.from({ scheme: PREVIEW_SCHEME, path: doc.uri.path, query: String(Date.now()) });
    this.previews.set(preview.toString(), proposed);
    try {
      await vscode.commands.executeCommand("vscode.diff", doc.uri, preview,
        `${k.name}: current ↔ optimized (${r.title ?? ""})`, { preview: true });
      const pick = await vscode.window.showInformationMessage(
        `Astra: apply the optimized ${k.name}? (${r.title ?? ""})`, "Apply", "Discard");
      if (pick !== "Apply") return;
      if (!(await vscode.workspace.applyEdit(edit))) {
        void vscode.window.showWarningMessage("Astra: not applied — the file changed; run Apply again.");
      }
    } finally {
      this.previews.delete(preview.toString());
      const tabs = vscode.window.tabGroups.all.flatMap((g) => g.tabs).filter((t) =>
        t.input instanceof vscode.TabInputTextDiff && t.input.modified.toString() === preview.toString());
      await vscode.window.tabGroups.close(tabs);
      await vscode.window.showTextDocument(doc);
    }
  }

  async report(uri?: string, name?: string): Promise<void> {
    const k = await this.pickKernel(uri, name);
    if (!k) return;
    const r = await this.server.request<ReportAnswer>(SERVER.report, k.uri, k.name);
    if (r.status !== "ok") {
      void vscode.window.showWarningMessage(`Astra: ${r.message}`);
      return;
    }
    // The server renders the page (theme variables, inline SVG charts); it is static: no scripts,
    // no remote content, and its links are command URIs for Astra's own commands only.
    const panel = vscode.window.createWebviewPanel("astra_cuda.report", `Astra: ${k.name}`, vscode.ViewColumn.Beside, {
      enableScripts: false, enableCommandUris: [CLIENT.showReport, CLIENT.applyOptimized, CLIENT.optimizeKernel],
      localResourceRoots: [],
    });
    const csp = `<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:;">`;
    const html = r.html ?? "";
    panel.webview.html = html.includes("<head>") ? html.replace("<head>", `<head>${csp}`) : csp + html;
  }

  /** A GPU is visible but not used: say why and offer the one command that fixes it. */
  async gpuSetup(setup?: { problem: string; fix: string }): Promise<void> {
    if (!setup) {
      void vscode.window.showInformationMessage("Astra: no GPU problem is known: either the GPU backend works, or " +
        "no NVIDIA GPU is visible here (the status bar says so when one is visible but not used).");
      return;
    }
    const actions = setup.fix ? ["Run in terminal", "Copy command"] : [];
    const pick = await vscode.window.showWarningMessage(`Astra: ${setup.problem}.` +
      (setup.fix ? ` Fix: ${setup.fix} — then Astra: Restart server.` : ""), ...actions);
    if (pick === "Copy command") await vscode.env.clipboard.writeText(setup.fix);
    else if (pick === "Run in terminal") {
      const t = vscode.window.createTerminal("Astra: GPU setup");
      t.show();
      t.sendText(setup.fix, false);   // typed, not run: the user presses Enter
    }
  }

  async setApiKey(): Promise<void> {
    const key = await vscode.window.showInputBox({
      prompt: "API key of the OpenAI-compatible endpoint (stored in VS Code's secret storage; empty to remove)",
      password: true, ignoreFocusOut: true,
    });
    if (key === undefined) return;
    if (key) await this.ctx.secrets.store(SECRETS.apiKey, key);
    else await this.ctx.secrets.delete(SECRETS.apiKey);
    void vscode.window.showInformationMessage(key ? "Astra: API key stored." : "Astra: API key removed.");
    await this.server.restart(); // the server reads the key from its environment at start
  }
}

// Astra's VS Code client: starts the Python language server, adds the palette commands, the
// status bar item and the report view. All kernel work happens in the server.
import * as vscode from "vscode";
import * as fs from "fs";
import * as path from "path";
import { execFile } from "child_process";
import {
  ExecuteCommandRequest,
  LanguageClient,
  LanguageClientOptions,
  RevealOutputChannelOn,
  ServerOptions,
  WorkspaceEdit as LspWorkspaceEdit,
} from "vscode-languageclient/node";
import { resolvePython } from "./python";

const SECRET_KEY = "astra.llm.apiKey";
const PREVIEW_SCHEME = "astra-preview";
const previews = new Map<string, string>(); // preview uri -> proposed file text

let client: LanguageClient | undefined;
let log: vscode.LogOutputChannel;
let status: vscode.StatusBarItem;
let ctx: vscode.ExtensionContext;
let starting: Promise<void> | undefined;

interface KernelEntry { name: string; startLine: number; endLine: number; hasSpec: boolean }
interface DocStatus {
  uri: string; checking: boolean; errors: number; verified: number; failing: number;
  optimizing: { kernel: string; message: string; bestSpeedup: number | null }[];
}
const statuses = new Map<string, DocStatus>();

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  ctx = context;
  log = vscode.window.createOutputChannel("Astra", { log: true });
  status = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Left, 50);
  status.name = "Astra";
  status.command = "astra.showLogs";
  context.subscriptions.push(log, status);

  const reg = (id: string, fn: (...args: any[]) => unknown) =>
    context.subscriptions.push(vscode.commands.registerCommand(id, async (...args: any[]) => {
      try { await fn(...args); } catch (e) { fail(`${id} failed`, e); }
    }));
  reg("astra.optimizeKernel", optimizeKernel);
  reg("astra.profileKernel", profileKernel);
  reg("astra.showReport", showReport);
  reg("astra.applyOptimized", applyOptimized);
  reg("astra.setApiKey", setApiKey);
  reg("astra.restartServer", restart);
  reg("astra.showLogs", () => log.show());
  reg("astra.installServer", async () => { await installServer(await resolvePython(log)); await restart(); });

  context.subscriptions.push(
    vscode.workspace.registerTextDocumentContentProvider(PREVIEW_SCHEME,
      { provideTextDocumentContent: (u) => previews.get(u.toString()) ?? "" }),
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (e.affectsConfiguration("astra.server.python")) void restart();
    }),
    vscode.window.onDidChangeActiveTextEditor(() => renderStatus()),
  );
  // A failing start must not fail activation: the commands stay usable (restart, logs, install).
  await start().catch((e) => fail("Astra: could not start the language server", e));
}

export async function deactivate(): Promise<void> {
  await stop();
}

// ---- the server ------------------------------------------------------------------------------

function settingsSnapshot(): Record<string, unknown> {
  const c = vscode.workspace.getConfiguration("astra");
  return {
    llm: { baseUrl: c.get("llm.baseUrl", ""), model: c.get("llm.model", "") },
    backend: c.get("backend", "auto"),
    rounds: c.get("rounds", 5),
    checkOnSave: c.get("checkOnSave", true),
    gpuArch: c.get("gpuArch", "sm_90"),
    profile: { ncu: c.get("profile.ncu", false) },
    includePaths: c.get("includePaths", []),
    defines: c.get("defines", []),
    std: c.get("std", ""),
    compileCommands: c.get("compileCommands", ""),
  };
}

async function start(): Promise<void> {
  if (starting) return starting;
  starting = (async () => {
    const python = await resolvePython(log);
    log.info(`using Python interpreter: ${python}`);
    const probe = await run(python, ["-c", "import astra.lsp.server"]);
    if (probe.code !== 0) {
      if (probe.error) {
        showError(`Astra: cannot run the Python interpreter '${python}' (${probe.error}). ` +
          "Set 'astra.server.python' to a Python 3.10+ interpreter.");
        return;
      }
      log.warn(`astra is not importable in ${python}:\n${probe.stderr}`);
      const install = "Install Astra into this interpreter";
      const pick = await vscode.window.showErrorMessage(
        `Astra: the language server is not installed in ${python}.`, install, "Choose interpreter", "Show logs");
      if (pick === install) {
        if (!(await installServer(python))) return;
      } else {
        if (pick === "Choose interpreter") {
          void vscode.commands.executeCommand("workbench.action.openSettings", "astra.server.python");
        } else if (pick === "Show logs") log.show();
        return;
      }
    }
    const env: Record<string, string> = { ...(process.env as Record<string, string>) };
    const key = await ctx.secrets.get(SECRET_KEY);
    if (key) env.ASTRA_LLM_API_KEY = key; // by environment: never in settings, messages or logs
    const serverOptions: ServerOptions = { command: python, args: ["-m", "astra", "serve"], options: { env } };
    const clientOptions: LanguageClientOptions = {
      documentSelector: [{ scheme: "file", language: "cuda-cpp" }],
      initializationOptions: { settings: settingsSnapshot() },
      synchronize: { configurationSection: "astra" },
      outputChannel: log,
      revealOutputChannelOn: RevealOutputChannelOn.Never,
    };
    const c = new LanguageClient("astra", "Astra", serverOptions, clientOptions);
    c.onNotification("astra/status", (s: DocStatus) => { statuses.set(s.uri, s); renderStatus(); });
    await c.start();
    client = c;
    renderStatus();
    log.info("Astra language server started");
  })().finally(() => { starting = undefined; });
  return starting;
}

async function stop(): Promise<void> {
  const c = client;
  client = undefined;
  statuses.clear();
  if (c) await c.stop().catch((e) => log.warn(`stopping the server: ${e}`));
}

async function restart(): Promise<void> {
  await stop();
  await start().catch((e) => fail("Astra: could not start the language server", e));
}

async function installServer(python: string): Promise<boolean> {
  const dist = path.join(ctx.extensionPath, "client", "dist");
  const wheels = fs.existsSync(dist) ? fs.readdirSync(dist).filter((f) => f.endsWith(".whl")) : [];
  if (!wheels.length) {
    showError("Astra: this build of the extension carries no server wheel; install it with " +
      "`pip install astra-cuda` into the interpreter, then run Astra: Restart server.");
    return false;
  }
  const wheel = path.join(dist, wheels[0]);
  const result = await vscode.window.withProgress(
    { location: vscode.ProgressLocation.Notification, title: `Astra: installing into ${python}…` },
    () => run(python, ["-m", "pip", "install", wheel], 600_000));
  log.info(`pip install ${wheel}:\n${result.stdout}\n${result.stderr}`);
  if (result.code !== 0) {
    showError(`Astra: installing into ${python} failed (see Astra: Show logs).`);
    return false;
  }
  void vscode.window.showInformationMessage("Astra: installed the language server.");
  return true;
}

// ---- commands --------------------------------------------------------------------------------

async function serverCommand<T>(command: string, ...args: unknown[]): Promise<T> {
  if (!client) {
    await start();
    if (!client) throw new Error("the Astra language server is not running");
  }
  return client.sendRequest(ExecuteCommandRequest.type, { command, arguments: args }) as Promise<T>;
}

/** The kernel at the cursor, else one picked from the file's kernels. */
async function pickKernel(uriArg?: string, nameArg?: string): Promise<{ uri: string; name: string } | undefined> {
  if (typeof uriArg === "string" && typeof nameArg === "string") return { uri: uriArg, name: nameArg };
  const editor = vscode.window.activeTextEditor;
  if (!editor || editor.document.languageId !== "cuda-cpp") {
    void vscode.window.showWarningMessage("Astra: open a CUDA (.cu) file first.");
    return undefined;
  }
  const uri = editor.document.uri.toString();
  const kernels = await serverCommand<KernelEntry[]>("astra.lsp.kernels", uri);
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

async function optimizeKernel(uri?: string, name?: string): Promise<void> {
  const k = await pickKernel(uri, name);
  if (!k) return;
  // The server reports work-done progress (with a cancel button) while this runs.
  const r = await serverCommand<{ status: string; title?: string }>("astra.lsp.optimize", k.uri, k.name);
  if (r?.status === "done") {
    const pick = await vscode.window.showInformationMessage(
      `Astra: ${k.name} — ${r.title}.`, "Preview and apply", "Show report");
    if (pick === "Preview and apply") await applyOptimized(k.uri, k.name);
    else if (pick === "Show report") await showReport(k.uri, k.name);
  }
}

async function profileKernel(uri?: string, name?: string): Promise<void> {
  const k = await pickKernel(uri, name);
  if (!k) return;
  const r = await vscode.window.withProgress(
    { location: vscode.ProgressLocation.Window, title: `Astra: profiling ${k.name}` },
    () => serverCommand<{ status: string; summary?: string }>("astra.lsp.profile", k.uri, k.name));
  if (r?.status === "done") void vscode.window.showInformationMessage(`Astra: ${k.name}: ${r.summary}`);
}

/** Shows the optimized kernel as a diff against the file, then applies it if the user agrees.
 *  The edit is versioned: if the file changes meanwhile, VS Code refuses it and nothing is lost. */
async function applyOptimized(uri?: string, name?: string): Promise<void> {
  const k = await pickKernel(uri, name);
  if (!k || !client) return;
  const r = await serverCommand<{ status: string; message?: string; edit?: LspWorkspaceEdit; title?: string }>(
    "astra.lsp.optimizedEdit", k.uri, k.name);
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
  previews.set(preview.toString(), proposed);
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
    previews.delete(preview.toString());
    const tabs = vscode.window.tabGroups.all.flatMap((g) => g.tabs).filter((t) =>
      t.input instanceof vscode.TabInputTextDiff && t.input.modified.toString() === preview.toString());
    await vscode.window.tabGroups.close(tabs);
    await vscode.window.showTextDocument(doc);
  }
}

async function showReport(uri?: string, name?: string): Promise<void> {
  const k = await pickKernel(uri, name);
  if (!k) return;
  const r = await serverCommand<{ status: string; markdown?: string; reportPath?: string; message?: string }>(
    "astra.lsp.report", k.uri, k.name);
  if (r.status !== "ok") {
    void vscode.window.showWarningMessage(`Astra: ${r.message}`);
    return;
  }
  const panel = vscode.window.createWebviewPanel("astra.report", `Astra: ${k.name}`, vscode.ViewColumn.Beside,
    { enableScripts: false });
  let html: string;
  if (r.reportPath && r.reportPath.endsWith(".html") && fs.existsSync(r.reportPath)) {
    html = fs.readFileSync(r.reportPath, "utf8");
  } else {
    const body = await vscode.commands.executeCommand<string>("markdown.api.render", r.markdown ?? "");
    html = `<!DOCTYPE html><html><body>${body}</body></html>`;
  }
  // The report is static: no scripts, no remote content.
  const csp = `<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:;">`;
  panel.webview.html = html.includes("<head>") ? html.replace("<head>", `<head>${csp}`) : csp + html;
}

async function setApiKey(): Promise<void> {
  const key = await vscode.window.showInputBox({
    prompt: "API key of the OpenAI-compatible endpoint (stored in VS Code's secret storage; empty to remove)",
    password: true, ignoreFocusOut: true,
  });
  if (key === undefined) return;
  if (key) await ctx.secrets.store(SECRET_KEY, key);
  else await ctx.secrets.delete(SECRET_KEY);
  void vscode.window.showInformationMessage(key ? "Astra: API key stored." : "Astra: API key removed.");
  await restart(); // the server reads the key from its environment at start
}

// ---- status bar ------------------------------------------------------------------------------

function renderStatus(): void {
  const editor = vscode.window.activeTextEditor;
  if (!client || !editor || editor.document.languageId !== "cuda-cpp") {
    status.hide();
    return;
  }
  const s = statuses.get(editor.document.uri.toString());
  if (!s) {
    status.text = "$(beaker) Astra";
    status.tooltip = "Astra: save to check the kernels";
  } else if (s.optimizing.length) {
    const o = s.optimizing[0];
    const best = o.bestSpeedup ? `, best ${o.bestSpeedup.toFixed(2)}×` : "";
    status.text = `$(sync~spin) Astra: optimizing ${o.kernel}…${best}`;
    status.tooltip = o.message;
  } else if (s.errors) {
    status.text = `$(error) Astra: ${s.errors} compile error${s.errors > 1 ? "s" : ""}`;
    status.tooltip = "Fix the errors to check the kernels against their references";
  } else if (s.checking) {
    status.text = "$(sync~spin) Astra: checking…";
    status.tooltip = "Astra is checking the kernels against their references";
  } else if (s.failing) {
    status.text = `$(error) Astra: ${s.failing} failing`;
    status.tooltip = `${s.failing} kernel(s) failed the check, ${s.verified} verified`;
  } else {
    status.text = `$(pass) Astra: ${s.verified} verified`;
    status.tooltip = `${s.verified} kernel(s) verified against their reference`;
  }
  status.show();
}

// ---- helpers ---------------------------------------------------------------------------------

function run(cmd: string, args: string[], timeout = 60_000):
  Promise<{ code: number; stdout: string; stderr: string; error?: string }> {
  return new Promise((resolve) => {
    execFile(cmd, args, { timeout, maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      const e = err as (NodeJS.ErrnoException & { code?: number | string }) | null;
      if (e && typeof e.code === "string") resolve({ code: -1, stdout, stderr, error: e.message });
      else resolve({ code: e ? (typeof e.code === "number" ? e.code : 1) : 0, stdout, stderr });
    });
  });
}

function showError(msg: string): void {
  log.error(msg);
  void vscode.window.showErrorMessage(msg, "Show logs").then((p) => { if (p) log.show(); });
}

function fail(msg: string, e: unknown): void {
  showError(`${msg}: ${e instanceof Error ? e.message : String(e)}`);
}

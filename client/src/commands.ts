// The palette commands: check, add a spec, optimize, profile, pin, apply (VS Code's refactor preview),
// report, the Nsight Compute report, API key. Each asks
// the server (contract.ts names the server commands and types their answers).
import * as vscode from "vscode";
import { promises as fs } from "fs";
import * as os from "os";
import * as path from "path";
import { WorkspaceEdit as LspWorkspaceEdit } from "vscode-languageclient/node";
import { CLIENT, EditAnswer, GpuSetup, KernelEntry, OptimizeAnswer, ProfileAnswer, ReportAnswer, SECRETS, SERVER } from "./contract";
import { ServerConnection, fail } from "./server";

export function registerCommands(ctx: vscode.ExtensionContext, server: ServerConnection): void {
  const reg = (id: string, fn: (...args: any[]) => unknown) =>
    ctx.subscriptions.push(vscode.commands.registerCommand(id, async (...args: any[]) => {
      try { await fn(...args); } catch (e) { fail(server.log, `${id} failed`, e); }
    }));
  const commands = new Commands(ctx, server);
  reg(CLIENT.checkFile, (uri?: string) => commands.checkFile(uri));
  reg(CLIENT.addSpec, (uri?: string, name?: string) => commands.addSpec(uri, name));
  reg(CLIENT.pinKernel, (uri?: string, name?: string) => commands.pin(uri, name));
  reg(CLIENT.optimizeKernel, (uri?: string, name?: string) => commands.optimize(uri, name));
  reg(CLIENT.profileKernel, (uri?: string, name?: string) => commands.profile(uri, name));
  reg(CLIENT.showReport, (uri?: string, name?: string) => commands.report(uri, name));
  reg(CLIENT.openProfilerReport, (uri?: string, name?: string) => commands.profilerReport(uri, name));
  reg(CLIENT.applyOptimized, (uri?: string, name?: string) => commands.apply(uri, name));
  reg(CLIENT.setApiKey, () => commands.setApiKey());
  reg(CLIENT.restartServer, () => server.restart());
  reg(CLIENT.showLogs, () => server.log.show());
  reg(CLIENT.installCli, () => commands.installCli());
  reg(CLIENT.gpuSetup, (setup?: GpuSetup) => commands.gpuSetup(setup));
}

class Commands {
  constructor(private readonly ctx: vscode.ExtensionContext, private readonly server: ServerConnection) {}

  /** The kernel at the cursor, else one picked from the file's kernels. */
  private async pickKernel(uriArg?: string, nameArg?: string, fits: (k: KernelEntry) => boolean = () => true,
                           none = "no __global__ kernels in this file"): Promise<{ uri: string; name: string } | undefined> {
    if (typeof uriArg === "string" && typeof nameArg === "string") return { uri: uriArg, name: nameArg };
    const uri = this.activeCudaUri();
    const editor = vscode.window.activeTextEditor;
    if (!uri || !editor) return undefined;
    const kernels = (await this.server.request<KernelEntry[]>(SERVER.kernels, uri)).filter(fits);
    if (!kernels.length) {
      void vscode.window.showWarningMessage(`Astra: ${none}.`);
      return undefined;
    }
    const line = editor.selection.active.line;
    const here = kernels.find((k) => k.startLine <= line && line <= k.endLine);
    if (here) return { uri, name: here.name };
    if (kernels.length === 1) return { uri, name: kernels[0].name };
    const name = await vscode.window.showQuickPick(kernels.map((k) => k.name), { placeHolder: "Which kernel?" });
    return name ? { uri, name } : undefined;
  }

  /** Checks every kernel of the file that has a spec (the server reports through diagnostics,
   *  lenses and the status item). */
  async checkFile(uriArg?: string): Promise<void> {
    const uri = typeof uriArg === "string" ? uriArg : this.activeCudaUri();
    if (!uri) return;
    await this.server.request(SERVER.check, uri);
  }

  /** Inserts the inferred spec above the kernel; what inference guessed is shown on its lines. */
  async addSpec(uri?: string, name?: string): Promise<void> {
    const k = await this.pickKernel(uri, name, (e) => !e.hasSpec, "every kernel in this file has a harness spec");
    if (!k) return;
    await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title: `Astra: inferring a harness spec for ${k.name}` },
      () => this.server.request(SERVER.addSpec, k.uri, k.name));
  }

  async pin(uri?: string, name?: string): Promise<void> {
    const k = await this.pickKernel(uri, name);
    if (k) await this.server.request(SERVER.pin, k.uri, k.name);
  }

  private activeCudaUri(): string | undefined {
    const editor = vscode.window.activeTextEditor;
    if (!editor || editor.document.languageId !== "cuda-cpp") {
      void vscode.window.showWarningMessage("Astra: open a CUDA (.cu) file first.");
      return undefined;
    }
    return editor.document.uri.toString();
  }

  async optimize(uri?: string, name?: string): Promise<void> {
    const k = await this.pickKernel(uri, name);
    if (!k) return;
    // The server reports work-done progress (with a cancel button) while this runs.
    let r = await this.server.request<OptimizeAnswer>(SERVER.optimize, k.uri, k.name);
    if (r?.status === "consent" && r.endpoint) {
      if (!(await this.consent(r))) return;
      r = await this.server.request<OptimizeAnswer>(SERVER.optimize, k.uri, k.name, r.endpoint);
    }
    // The one ending of Optimize, wherever it started (lens, light bulb, palette, report all run
    // this command): a better verified version goes through apply's preview; the server says nothing
    // of its own about how the run ended.
    if (r?.status === "done" && r.improved) {
      const pick = await vscode.window.showInformationMessage(
        `Astra: ${k.name} — ${r.title}.`, "Preview and apply", "Show report");
      if (pick === "Preview and apply") await this.apply(k.uri, k.name);
      else if (pick === "Show report") await this.report(k.uri, k.name);
    } else if (r?.status === "done") {
      const pick = await vscode.window.showInformationMessage(
        `Astra: no better verified version of ${k.name} found; the original is kept.`, "Show report");
      if (pick === "Show report") await this.report(k.uri, k.name);
    } else if (r?.status === "failed") {
      void vscode.window.showErrorMessage(`Astra: optimizing ${k.name} failed: ${r.message}`);
    }
  }

  /** The first-use notice: what goes to an LLM endpoint, accepted once per endpoint (per workspace
   * when the endpoint comes from the project's astra.toml / [tool.astra], and only when trusted). */
  private async consent(r: OptimizeAnswer): Promise<boolean> {
    const endpoint = r.endpoint as string;
    const store = r.fromProject ? this.ctx.workspaceState : this.ctx.globalState;
    const key = "astra.llm.consented";
    const given = store.get<string[]>(key, []);
    if (given.includes(endpoint)) return true;
    if (r.fromProject && !vscode.workspace.isTrusted) return false;
    const where = r.fromProject ? ` (named by this project's ${r.source})` : "";
    const pick = await vscode.window.showWarningMessage(
      `Astra: optimizing with a model sends code to ${endpoint}${where}.`,
      { modal: true, detail: `Model ${r.model}. Sent: ${r.sent}.` }, "Send");
    if (pick !== "Send") return false;
    await store.update(key, [...given, endpoint]);
    return true;
  }

  async profile(uri?: string, name?: string): Promise<void> {
    const k = await this.pickKernel(uri, name);
    if (!k) return;
    const r = await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Window, title: `Astra: profiling ${k.name}` },
      () => this.server.request<ProfileAnswer>(SERVER.profile, k.uri, k.name));
    if (r?.status === "done") void vscode.window.showInformationMessage(`Astra: ${k.name}: ${r.summary}`);
  }

  /** Applies the optimized kernel through VS Code's refactor preview: the server's edit carries a
   *  change annotation that needs confirmation, so VS Code shows the diff with Apply and Discard.
   *  A rewrite whose speed was not measured asks first. The edit is versioned: if the file changes
   *  meanwhile, VS Code refuses it and nothing is lost. */
  async apply(uri?: string, name?: string): Promise<void> {
    const k = await this.pickKernel(uri, name);
    const client = this.server.running;
    if (!k || !client) return;
    const r = await this.server.request<EditAnswer<LspWorkspaceEdit>>(SERVER.optimizedEdit, k.uri, k.name);
    if (r.status !== "ok" || !r.edit) {
      void vscode.window.showWarningMessage(`Astra: not applied — ${r.message ?? "nothing to apply"}`);
      return;
    }
    if (!r.measured) {
      const go = await vscode.window.showWarningMessage(`Astra: the rewrite of ${k.name} is ${r.title}.`,
        { modal: true, detail: "Without a GPU its speed is unknown: it may be slower. Preview it anyway?" },
        "Preview");
      if (go !== "Preview") return;
    }
    const edit = await client.protocol2CodeConverter.asWorkspaceEdit(r.edit);
    if (!(await vscode.workspace.applyEdit(edit))) {
      this.server.log.info(`apply ${k.name}: not applied (discarded in the preview, or the file changed)`);
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

  /** The Nsight Compute report of the kernel's last profile, kept under `.astra/profiles/`: opened
   *  by the system's handler for `.ncu-rep` (Nsight Compute), or shown in the explorer. */
  async profilerReport(uri?: string, name?: string): Promise<void> {
    const k = await this.pickKernel(uri, name);
    if (!k) return;
    const r = await this.server.request<ReportAnswer>(SERVER.report, k.uri, k.name);
    if (!r.profilerReport) {
      void vscode.window.showInformationMessage(`Astra: no Nsight Compute report for ${k.name} yet: profile it on a ` +
        "GPU with astra.profile.ncu on.");
      return;
    }
    const file = vscode.Uri.file(r.profilerReport);
    const pick = await vscode.window.showInformationMessage(`Astra: Nsight Compute report of ${k.name}: ${file.fsPath}`,
      "Open in Nsight Compute", "Reveal in explorer", "Copy path");
    if (pick === "Open in Nsight Compute") await vscode.env.openExternal(file);
    else if (pick === "Reveal in explorer") await vscode.commands.executeCommand("revealInExplorer", file);
    else if (pick === "Copy path") await vscode.env.clipboard.writeText(file.fsPath);
  }

  /** Puts `astra` on PATH: a two-line script in ~/.local/bin that runs the bundled CLI with the
   * server's interpreter (written again by this command after the extension updates, as its
   * folder changes); an existing `astra` that Astra did not write is left alone, and the one line
   * to run instead is offered. */
  async installCli(): Promise<void> {
    const cmd = await this.server.cliCommand();
    if (!cmd) return;
    const quote = (a: string) => `'${a.replace(/'/g, `'\\''`)}'`;
    const line = `${cmd.map(quote).join(" ")} "$@"`;
    const bin = path.join(os.homedir(), ".local", "bin");
    const target = path.join(bin, "astra");
    const mark = "# written by the Astra VS Code extension";
    let existing = "";
    try { existing = await fs.readFile(target, "utf8"); } catch { /* none yet */ }
    if (existing && !existing.includes(mark)) {
      const alias = `alias astra=${quote(cmd.map(quote).join(" "))}`;
      const pick = await vscode.window.showWarningMessage(`Astra: ${target} exists and was not written by Astra; ` +
        `it is left alone. To run the bundled CLI instead: ${alias}`, "Copy command");
      if (pick) await vscode.env.clipboard.writeText(alias);
      return;
    }
    await fs.mkdir(bin, { recursive: true });
    await fs.writeFile(target, `#!/bin/sh\n${mark} (Astra: Install the astra command)\nexec ${line}\n`, { mode: 0o755 });
    await fs.chmod(target, 0o755);
    const onPath = (process.env.PATH ?? "").split(path.delimiter).some((d) => path.resolve(d) === bin);
    const add = 'export PATH="$HOME/.local/bin:$PATH"';
    const pick = await vscode.window.showInformationMessage(`Astra: installed ${target}` + (onPath
      ? ": run `astra --help` in a new terminal."
      : `; that folder is not on your PATH: add \`${add}\` to your shell's profile.`), ...(onPath ? [] : ["Copy command"]));
    if (pick) await vscode.env.clipboard.writeText(add);
  }

  /** A GPU is visible but not used: say why and offer the one command that fixes it. */
  async gpuSetup(setup?: GpuSetup): Promise<void> {
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

// The language server's life: find the interpreter, check it can run the bundled server (a
// supported Python on Linux x86-64: nothing is ever installed into it), start the server through
// the bundled launcher with the workspace's trust and the API key (by environment,
// never in settings or logs), stop and restart it, and send it commands.
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
} from "vscode-languageclient/node";
import { CLIENT, DocStatus, SECRETS, STATUS_NOTIFICATION } from "./contract";
import { resolvePython } from "./python";
import { importStrategy } from "./settings";

/** What the launcher says about an interpreter (bundled/tool/astra_launcher.py --check). */
interface LauncherCheck { ok: boolean; message: string; python: string; version: string; strategy: string }

export class ServerConnection {
  private client: LanguageClient | undefined;
  private starting: Promise<void> | undefined;

  constructor(
    private readonly ctx: vscode.ExtensionContext,
    readonly log: vscode.LogOutputChannel,
    private readonly onStatus: (s: DocStatus) => void,
    private readonly onChange: () => void,
  ) {}

  get running(): LanguageClient | undefined { return this.client; }

  start(): Promise<void> {
    if (this.starting) return this.starting;
    this.starting = this.launch().finally(() => { this.starting = undefined; });
    return this.starting;
  }

  /** The `astra` command as the bundled launcher runs it with the server's interpreter
   * ([python, launcher, "--cli"]); undefined (and said why) when that interpreter cannot. */
  async cliCommand(): Promise<string[] | undefined> {
    const python = await resolvePython(this.log);
    const env: Record<string, string> = { ...(process.env as Record<string, string>) };
    env.ASTRA_IMPORT_STRATEGY = importStrategy();
    if (!(await this.checkInterpreter(python, env))) return undefined;
    return [python, this.launcher, "--cli"];
  }

  private get launcher(): string {
    return path.join(this.ctx.extensionPath, "bundled", "tool", "astra_launcher.py");
  }

  private async launch(): Promise<void> {
    if (process.platform !== "linux" || (process.arch !== "x64" && process.arch !== "arm64")) {
      showError(this.log, `Astra runs on Linux x86-64 and arm64 only (this is ${process.platform} ${process.arch}); ` +
        "use it over Remote-SSH or WSL on a Linux machine.");
      return;
    }
    const python = await resolvePython(this.log);
    const env: Record<string, string> = { ...(process.env as Record<string, string>) };
    env.ASTRA_IMPORT_STRATEGY = importStrategy();
    if (!(await this.checkInterpreter(python, env))) return;
    const key = await this.ctx.secrets.get(SECRETS.apiKey);
    if (key) env[SECRETS.apiKeyEnv] = key;
    const serverOptions: ServerOptions = { command: python, args: [this.launcher], options: { env } };
    const trusted = vscode.workspace.isTrusted;
    const clientOptions: LanguageClientOptions = {
      documentSelector: [{ scheme: "file", language: "cuda-cpp" }],
      // Untrusted workspace: static diagnostics only (the server builds and runs no kernel code).
      // No setting is sent: the server asks for the `astra` section (workspace/configuration) after
      // `initialized` and again when it changes (which `synchronize` tells it).
      initializationOptions: { allowExecution: trusted },
      synchronize: { configurationSection: "astra" },
      outputChannel: this.log,
      revealOutputChannelOn: RevealOutputChannelOn.Never,
      // Hovers link to the report with command URIs (they work under Remote-SSH; file links do not).
      markdown: { isTrusted: { enabledCommands: [CLIENT.showReport, CLIENT.applyOptimized, CLIENT.optimizeKernel] } },
    };
    const c = new LanguageClient("astra", "Astra", serverOptions, clientOptions);
    c.onNotification(STATUS_NOTIFICATION, (s: DocStatus) => this.onStatus(s));
    await c.start();
    this.client = c;
    this.onChange();
    this.log.info(`Astra language server started (${python}, ${env.ASTRA_IMPORT_STRATEGY}` +
      `${trusted ? "" : ", untrusted workspace: static diagnostics only"})`);
  }

  /** True when `python` can run the server; else says why, with a way to choose another one. */
  private async checkInterpreter(python: string, env: Record<string, string>): Promise<boolean> {
    // The first check of a new install unpacks the bundled libraries (seconds; a minute on a busy
    // machine): said in the status bar meanwhile. (Where the extension's folder is read-only they
    // go to ~/.cache/astra, and this says so at every start: the check itself is then instant.)
    const bundled = path.join(this.ctx.extensionPath, "bundled");
    const first = fs.existsSync(path.join(bundled, "libs.tar.xz")) && !fs.existsSync(path.join(bundled, "deps"));
    const check = run(python, [this.launcher, "--check"], env, 600_000);
    const probe = first
      ? await vscode.window.withProgress({ location: vscode.ProgressLocation.Window,
        title: "Astra: unpacking its libraries (first start, once)" }, () => check)
      : await check;
    if (probe.error) {
      this.offerInterpreter(`Astra: cannot run the Python interpreter '${python}' (${probe.error}). ` +
        "Astra needs Python 3.11–3.13: set astra.server.python.");
      return false;
    }
    let answer: LauncherCheck | undefined;
    try { answer = JSON.parse(probe.stdout.trim().split("\n").pop() ?? "") as LauncherCheck; } catch { /* below */ }
    if (!answer) {
      this.log.warn(`${python} ${this.launcher} --check:\n${probe.stdout}\n${probe.stderr}`);
      this.offerInterpreter(`Astra: '${python}' cannot run the Astra server (see Astra: Show logs). ` +
        "Astra needs Python 3.11–3.13.");
      return false;
    }
    this.log.info(`interpreter: ${answer.python} (Python ${answer.version}), libraries: ${answer.strategy}`);
    if (!answer.ok) this.offerInterpreter(`Astra: ${answer.message}`);
    return answer.ok;
  }

  private offerInterpreter(msg: string): void {
    this.log.error(msg);
    void vscode.window.showErrorMessage(msg, "Choose interpreter", "Show logs").then((pick) => {
      if (pick === "Choose interpreter") {
        void vscode.commands.executeCommand("workbench.action.openSettings", "astra.server.python");
      } else if (pick === "Show logs") this.log.show();
    });
  }

  async stop(): Promise<void> {
    const c = this.client;
    this.client = undefined;
    this.onChange();
    if (c) await c.stop().catch((e) => this.log.warn(`stopping the server: ${e}`));
  }

  async restart(): Promise<void> {
    await this.stop();
    await this.start().catch((e) => fail(this.log, "Astra: could not start the language server", e));
  }

  /** A server command (contract.ts names them and types their answers). */
  async request<T>(command: string, ...args: unknown[]): Promise<T> {
    if (!this.client) {
      await this.start();
      if (!this.client) throw new Error("the Astra language server is not running");
    }
    return this.client.sendRequest(ExecuteCommandRequest.type, { command, arguments: args }) as Promise<T>;
  }
}

function run(cmd: string, args: string[], env: Record<string, string>, timeout = 60_000):
  Promise<{ code: number; stdout: string; stderr: string; error?: string }> {
  return new Promise((resolve) => {
    execFile(cmd, args, { timeout, env, maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      const e = err as (NodeJS.ErrnoException & { code?: number | string }) | null;
      if (e && typeof e.code === "string") resolve({ code: -1, stdout, stderr, error: e.message });
      else resolve({ code: e ? (typeof e.code === "number" ? e.code : 1) : 0, stdout, stderr });
    });
  });
}

export function showError(log: vscode.LogOutputChannel, msg: string): void {
  log.error(msg);
  void vscode.window.showErrorMessage(msg, "Show logs").then((p) => { if (p) log.show(); });
}

export function fail(log: vscode.LogOutputChannel, msg: string, e: unknown): void {
  showError(log, `${msg}: ${e instanceof Error ? e.message : String(e)}`);
}

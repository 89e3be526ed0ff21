// The language server's life: find the interpreter, offer to install Astra into it when missing,
// start it with the settings and the API key (by environment, never in settings or logs), stop
// and restart it, and send it commands.
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
import { DocStatus, SECRETS, STATUS_NOTIFICATION } from "./contract";
import { resolvePython } from "./python";
import { serverSettings } from "./settings";

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

  private async launch(): Promise<void> {
    const python = await resolvePython(this.log);
    this.log.info(`using Python interpreter: ${python}`);
    if (!(await this.ensureInstalled(python))) return;
    const env: Record<string, string> = { ...(process.env as Record<string, string>) };
    const key = await this.ctx.secrets.get(SECRETS.apiKey);
    if (key) env[SECRETS.apiKeyEnv] = key;
    const serverOptions: ServerOptions = { command: python, args: ["-m", "astra", "serve"], options: { env } };
    const clientOptions: LanguageClientOptions = {
      documentSelector: [{ scheme: "file", language: "cuda-cpp" }],
      initializationOptions: { settings: serverSettings() },
      synchronize: { configurationSection: "astra" },
      outputChannel: this.log,
      revealOutputChannelOn: RevealOutputChannelOn.Never,
    };
    const c = new LanguageClient("astra", "Astra", serverOptions, clientOptions);
    c.onNotification(STATUS_NOTIFICATION, (s: DocStatus) => this.onStatus(s));
    await c.start();
    this.client = c;
    this.onChange();
    this.log.info("Astra language server started");
  }

  /** True when Astra can be imported in `python` (after installing it, if the user agreed). */
  private async ensureInstalled(python: string): Promise<boolean> {
    const probe = await run(python, ["-c", "import astra.lsp.server"]);
    if (probe.code === 0) return true;
    if (probe.error) {
      showError(this.log, `Astra: cannot run the Python interpreter '${python}' (${probe.error}). ` +
        "Set 'astra.server.python' to a Python 3.10+ interpreter.");
      return false;
    }
    this.log.warn(`astra is not importable in ${python}:\n${probe.stderr}`);
    const install = "Install Astra into this interpreter";
    const pick = await vscode.window.showErrorMessage(
      `Astra: the language server is not installed in ${python}.`, install, "Choose interpreter", "Show logs");
    if (pick === install) return this.install(python);
    if (pick === "Choose interpreter") {
      void vscode.commands.executeCommand("workbench.action.openSettings", "astra.server.python");
    } else if (pick === "Show logs") this.log.show();
    return false;
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

  /** Installs the server wheel the extension carries into `python`. */
  async install(python: string): Promise<boolean> {
    const dist = path.join(this.ctx.extensionPath, "client", "dist");
    const wheels = fs.existsSync(dist) ? fs.readdirSync(dist).filter((f) => f.endsWith(".whl")) : [];
    if (!wheels.length) {
      showError(this.log, "Astra: this build of the extension carries no server wheel; install it with " +
        "`pip install astra-cuda` into the interpreter, then run Astra: Restart server.");
      return false;
    }
    const wheel = path.join(dist, wheels[0]);
    const result = await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title: `Astra: installing into ${python}…` },
      () => run(python, ["-m", "pip", "install", wheel], 600_000));
    this.log.info(`pip install ${wheel}:\n${result.stdout}\n${result.stderr}`);
    if (result.code !== 0) {
      showError(this.log, `Astra: installing into ${python} failed (see Astra: Show logs).`);
      return false;
    }
    void vscode.window.showInformationMessage("Astra: installed the language server.");
    return true;
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

export function showError(log: vscode.LogOutputChannel, msg: string): void {
  log.error(msg);
  void vscode.window.showErrorMessage(msg, "Show logs").then((p) => { if (p) log.show(); });
}

export function fail(log: vscode.LogOutputChannel, msg: string, e: unknown): void {
  showError(log, `${msg}: ${e instanceof Error ? e.message : String(e)}`);
}

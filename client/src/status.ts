// The status bar item: what Astra is doing with the active CUDA file (from the server's status
// notifications); a click leads to what unblocks it (trust, GPU setup), else to the logs.
import * as vscode from "vscode";
import { CLIENT, DocStatus } from "./contract";

export class StatusItem implements vscode.Disposable {
  private readonly item: vscode.StatusBarItem;
  private readonly statuses = new Map<string, DocStatus>();

  constructor(private readonly serverRunning: () => boolean) {
    this.item = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Left, 50);
    this.item.name = "Astra";
    this.item.command = CLIENT.showLogs;
  }

  update(s: DocStatus): void {
    this.statuses.set(s.uri, s);
    this.render();
  }

  clear(): void {
    this.statuses.clear();
  }

  render(): void {
    const editor = vscode.window.activeTextEditor;
    if (!this.serverRunning() || !editor || editor.document.languageId !== "cuda-cpp") {
      this.item.hide();
      return;
    }
    const s = this.statuses.get(editor.document.uri.toString());
    const [text, tooltip] = describe(s);
    // Where kernels run: a cluster (remote GPU from a laptop), and the node and GPU of the checks.
    this.item.text = s?.cluster ? `${text} · Ray` : text;
    this.item.tooltip = s && (s.where || s.cluster)
      ? `${tooltip}\n${s.cluster ? `Kernels run on ${s.cluster}` : "Kernels run on this machine"}`
        + (s.where ? `; the last check ran ${s.where}` : "")
      : tooltip;
    // A click leads to what unblocks Astra: trusting the folder, setting up the GPU, else the logs.
    this.item.command = s?.restricted ? "workbench.trust.manage"
      : s?.gpuSetup ? { title: "GPU setup", command: CLIENT.gpuSetup, arguments: [s.gpuSetup] } : CLIENT.showLogs;
    this.item.show();
  }

  dispose(): void {
    this.item.dispose();
  }
}

/** (text, tooltip) for a document's status. */
function describe(s: DocStatus | undefined): [string, string] {
  if (!s) return ["$(beaker) Astra", "Astra: save to check the kernels"];
  if (s.optimizing.length) {
    const o = s.optimizing[0];
    const best = o.bestSpeedup ? `, best ${o.bestSpeedup.toFixed(2)}×` : "";
    return [`$(sync~spin) Astra: optimizing ${o.kernel}…${best}`, o.message];
  }
  if (s.errors) {
    return [`$(error) Astra: ${s.errors} compile error${s.errors > 1 ? "s" : ""}`,
      "Fix the errors to check the kernels against their references"];
  }
  if (s.restricted) {
    return ["$(shield) Astra: restricted", `Astra: ${s.restricted}: compile diagnostics only, no kernel is run. ` +
      "Click to trust this folder; checks start once it is trusted."];
  }
  if (s.checking) return ["$(sync~spin) Astra: checking…", "Astra is checking the kernels against their references"];
  if (s.failing) {
    return [`$(error) Astra: ${s.failing} failing`, `${s.failing} kernel(s) failed the check, ${s.verified} verified`];
  }
  if (s.gpuSetup) {
    return [`$(warning) Astra: ${s.verified} verified · GPU not used`,
      `Astra: ${s.gpuSetup.problem}. Click for the fix${s.gpuSetup.fix ? `: ${s.gpuSetup.fix}` : ""}`];
  }
  return [`$(pass) Astra: ${s.verified} verified`, `${s.verified} kernel(s) verified against their reference`];
}

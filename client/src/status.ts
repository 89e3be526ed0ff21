// What Astra says about the active CUDA file (from the server's status notifications), in the
// server's own measured words (never "0 verified"): the status bar item (a click leads to what
// unblocks it: trust, GPU setup, else the logs), a language status item beside the language mode,
// and the context keys the menus' `when` clauses read.
import * as vscode from "vscode";
import { CLIENT, DocStatus } from "./contract";

export class StatusItem implements vscode.Disposable {
  private readonly item: vscode.StatusBarItem;
  private readonly language: vscode.LanguageStatusItem;
  private readonly statuses = new Map<string, DocStatus>();

  constructor(private readonly serverRunning: () => boolean) {
    this.item = vscode.window.createStatusBarItem("astra.status", vscode.StatusBarAlignment.Left, 50);
    this.item.name = "Astra";
    this.item.command = CLIENT.showLogs;
    this.language = vscode.languages.createLanguageStatusItem("astra.language", { language: "cuda-cpp" });
    this.language.name = "Astra";
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
    const cuda = editor?.document.languageId === "cuda-cpp";
    const s = cuda ? this.statuses.get(editor.document.uri.toString()) : undefined;
    void vscode.commands.executeCommand("setContext", "astra.hasRewrite", Boolean(s?.rewrites?.length));
    void vscode.commands.executeCommand("setContext", "astra.hasProfilerReport", Boolean(s?.profilerReports?.length));
    if (!this.serverRunning() || !cuda) {
      this.item.hide();
      this.language.text = "Astra: not running";
      this.language.severity = vscode.LanguageStatusSeverity.Warning;
      this.language.command = { title: "Show logs", command: CLIENT.showLogs };
      return;
    }
    const [text, tooltip, severity] = describe(s);
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
    this.language.text = text.replace(/^\$\([^)]*\)\s*/, "");
    this.language.detail = tooltip;
    this.language.severity = severity;
    this.language.busy = Boolean(s?.checking || s?.optimizing.length);
    this.language.command = { title: "Check file", command: CLIENT.checkFile };
  }

  dispose(): void {
    this.item.dispose();
    this.language.dispose();
  }
}

/** (text, tooltip, severity) for a document's status. */
function describe(s: DocStatus | undefined): [string, string, vscode.LanguageStatusSeverity] {
  const { Information, Warning, Error } = vscode.LanguageStatusSeverity;
  if (!s) return ["$(beaker) Astra: not checked", "Astra: save to check the kernels", Information];
  if (s.optimizing.length) {
    const o = s.optimizing[0];
    const best = o.bestSpeedup ? `, best ${o.bestSpeedup.toFixed(2)}× measured` : "";
    return [`$(sync~spin) Astra: optimizing ${o.kernel}…${best}`, o.message, Information];
  }
  if (s.errors) {
    return [`$(error) Astra: ${s.errors} compile error${s.errors > 1 ? "s" : ""}`,
      "Fix the errors to check the kernels against their references", Error];
  }
  if (s.restricted) {
    return ["$(shield) Astra: restricted", `Astra: ${s.restricted}: compile diagnostics only, no kernel is run. ` +
      "Click to trust this folder; checks start once it is trusted.", Warning];
  }
  if (s.checking) return ["$(sync~spin) Astra: checking…", "Astra is checking the kernels against their references", Information];
  if (s.failing) return [`$(error) Astra: ${s.summary}`, s.tooltip, Error];
  if (s.gpuSetup) {
    return [`$(warning) Astra: ${s.summary} · GPU not used`,
      `Astra: ${s.gpuSetup.problem}. Click for the fix${s.gpuSetup.fix ? `: ${s.gpuSetup.fix}` : ""}`, Warning];
  }
  const ran = /match|self-consistent/.test(s.summary);
  return [`${ran ? "$(pass)" : "$(beaker)"} Astra: ${s.summary}`, s.tooltip, Information];
}

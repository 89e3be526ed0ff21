// The contract shared with the server: server/astra_cuda/contract.json is bundled here as it is read
// there (astra_cuda.contract), and names come from it. What the server's commands and notifications
// carry is typed below, written from the server's dataclasses (astra_cuda/lsp/answers.py).
import contract from "../../server/astra_cuda/contract.json";

export const SERVER = contract.serverCommands;
export const CLIENT = contract.clientCommands;
export const STATUS_NOTIFICATION = contract.notifications.status;
export const SECRETS = contract.secrets;

// ---- generated from server/astra_cuda/lsp/answers.py (do not edit): written again by
// `python -m astra_cuda.lsp.answers_ts client/src/contract.ts`

/**
 * The kernels command: one kernel of the file, its lines 0-based. Server commands take (uri,
 * kernel); `kernels` and `check` take (uri).
 */
export interface KernelEntry {
  name: string;
  startLine: number;
  endLine: number;
  hasSpec: boolean;
}

/** A kernel being optimized: the progress message and the best speedup so far (null before one). */
export interface Optimizing {
  kernel: string;
  message: string;
  bestSpeedup: number | null;
}

/** A GPU is visible but not used: what is wrong and the one command that fixes it. */
export interface GpuSetup {
  problem: string;
  fix: string;
}

/**
 * The status notification of one document (the status bar, the menus' context keys). `summary`:
 * what the checks measured, in the server's words ('not checked', '1 matches reference · 1
 * self-consistent'); `rewrites`: kernels with a finished rewrite to apply; `profilerReports`:
 * kernels whose Nsight Compute report was kept; `restricted`: why kernels are not run here (an
 * untrusted workspace); `where`: the node (and GPU) of the checks; `cluster`: where kernels run
 * when not on this machine.
 */
export interface DocStatus {
  uri: string;
  checking: boolean;
  errors: number;
  verified: number;
  failing: number;
  summary: string;
  tooltip: string;
  rewrites: string[];
  profilerReports: string[];
  optimizing: Optimizing[];
  restricted: string | null;
  gpuSetup: GpuSetup | null;
  where?: string;
  cluster?: string;
}

/**
 * The optimize command (and cancelOptimize): started, finished, declined, or — status 'consent' —
 * what would be sent where, asked once per endpoint before anything is sent.
 */
export interface OptimizeAnswer {
  status: string;
  kernel?: string;
  message?: string;
  speedup?: number;
  verifiedCases?: number;
  improved?: boolean;
  title?: string;
  reportPath?: string;
  endpoint?: string;
  model?: string;
  fromProject?: boolean;
  source?: string;
  sent?: string;
}

/** The profile command: its one-line summary and how many hot lines it marked. */
export interface ProfileAnswer {
  status: string;
  kernel?: string;
  summary?: string;
  hotLines?: number;
  message?: string;
}

/**
 * The optimizedEdit command: the optimized kernel's edit for the client's diff preview; `measured`:
 * its speed was measured on a GPU (else the rewrite is offered only on request).
 */
export interface EditAnswer<Edit> {
  status: string;
  message?: string;
  edit?: Edit;
  newText?: string;
  title?: string;
  measured?: boolean;
}

/**
 * The report command. `html`: a whole page (theme-aware, no scripts; links are command URIs);
 * `profilerReport`: the path of the kept Nsight Compute report of the kernel's last profile.
 */
export interface ReportAnswer {
  status: string;
  html?: string;
  message?: string;
  profilerReport?: string;
}

// ---- end of the generated part

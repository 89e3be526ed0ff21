// The contract shared with the server: server/astra_cuda/contract.json is bundled here as it is read
// there (astra_cuda.contract). Names come from it; the shapes of what the server's
// commands and notifications carry are typed below (the server builds them in astra_cuda/lsp/views.py
// and astra_cuda/lsp/optimization.py).
import contract from "../../server/astra_cuda/contract.json";

export const SERVER = contract.serverCommands;
export const CLIENT = contract.clientCommands;
export const STATUS_NOTIFICATION = contract.notifications.status;
export const SECRETS = contract.secrets;

/** Server commands take (uri, kernel); `kernels` and `check` take (uri). */
export interface KernelEntry { name: string; startLine: number; endLine: number; hasSpec: boolean }

export interface DocStatus {
  uri: string; checking: boolean; errors: number; verified: number; failing: number;
  /** What the checks measured, in the server's words ('not checked', '1 matches reference · 1 self-consistent'). */
  summary: string; tooltip: string;
  /** Kernels with a finished rewrite to apply; kernels whose Nsight Compute report was kept. */
  rewrites: string[]; profilerReports: string[];
  optimizing: { kernel: string; message: string; bestSpeedup: number | null }[];
  where?: string; cluster?: string;   // where the checks ran; the cluster kernels run on ('' this machine)
  /** Why kernels are not run here (an untrusted workspace), or null. */
  restricted: string | null;
  /** A GPU is visible but not used: what is wrong and the one command that fixes it, or null. */
  gpuSetup: { problem: string; fix: string } | null;
}

export interface OptimizeAnswer {
  kernel?: string; status: string; message?: string; speedup?: number | null; verifiedCases?: number;
  improved?: boolean; title?: string; reportPath?: string;
  // status "consent": what would be sent where, asked once per endpoint before anything is sent
  endpoint?: string; model?: string; fromProject?: boolean; source?: string; sent?: string;
}

export interface ProfileAnswer { status: string; kernel?: string; summary?: string; hotLines?: number; message?: string }

/** `measured`: the rewrite's speed was measured on a GPU (else it is offered only on request). */
export interface EditAnswer<Edit> {
  status: string; message?: string; edit?: Edit; newText?: string; title?: string; measured?: boolean;
}

/** `html`: a whole page (theme-aware, no scripts; links are command URIs); `profilerReport`: the path of
 *  the kept Nsight Compute report of the kernel's last profile. */
export interface ReportAnswer { status: string; html?: string; message?: string; profilerReport?: string | null }

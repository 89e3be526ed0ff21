"""What the server remembers per document and kernel; answers hovers and lenses at once."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from astra.lsp.anchor import Anchor, Rewrite


@dataclass
class Optimization:
    status: str                 # 'running' | 'done' | 'failed' | 'cancelled'
    anchor: Anchor              # the kernel when the optimization started
    original: str = ""          # the whole file then
    cancel: threading.Event = field(default_factory=threading.Event)
    message: str = ""           # latest progress line or the error
    best_speedup: float | None = None
    result: Any = None          # api OptimizeResult when done
    rewrite: Rewrite | None = None  # what applying it replaces, when it improved

    def title(self) -> str:
        """'1.40× faster, verified on 38 cases' (or 'speed not measured, ...' on the CPU)."""
        r = self.result
        speed = f"{r.speedup:.2f}× faster" if r.speedup else "speed not measured"
        return f"{speed}, verified on {verified_cases(r)} cases"

    @property
    def improved(self) -> bool:
        return self.result is not None and bool(getattr(self.result, "improved", True))


def verified_cases(result: Any) -> int:
    best = getattr(result, "best_eval", None)
    return int(getattr(getattr(best, "check", None), "cases", 0) or getattr(result, "verified_cases", 0) or 0)


@dataclass
class Profiled:
    profile: Any                # api Profile
    anchor: Anchor              # hot lines are valid while the kernel text is unchanged


@dataclass
class KernelState:
    verdict: Any = None         # latest api Verdict
    verdict_error: str = ""     # the check could not run (message)
    profile: Profiled | None = None
    profiling: bool = False
    optimization: Optimization | None = None


@dataclass
class DocState:
    snapshot: Any = None                # api Snapshot of `snapshot_version` (None: unreadable)
    snapshot_version: int | None = None
    snapshot_error: str = ""
    static_diags: list = field(default_factory=list)   # lsp Diagnostics from api.diagnostics
    check_diags: dict = field(default_factory=dict)    # kernel -> lsp Diagnostics from checks
    per_kernel: dict = field(default_factory=dict)     # kernel name -> KernelState
    check_generation: int = 0
    check_cancel: threading.Event = field(default_factory=threading.Event)
    checking: bool = False

    def kernel(self, name: str) -> KernelState:
        return self.per_kernel.setdefault(name, KernelState())

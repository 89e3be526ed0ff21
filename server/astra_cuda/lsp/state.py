"""What the server remembers per document and kernel, typed over the core's own objects (a
snapshot, verdicts, profiles, an optimize result). Handlers change it; views read it."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lsprotocol import types

from astra_cuda.lsp.anchor import Anchor, Replacement

if TYPE_CHECKING:
    from collections.abc import Sequence

    from astra_cuda.agents.result import OptimizeResult
    from astra_cuda.gate.verdict import Verdict
    from astra_cuda.profiler.results import Profile
    from astra_cuda.snapshot import KernelInfo, Snapshot


@dataclass
class Optimization:
    status: str                 # 'running' | 'done' | 'failed' | 'cancelled'
    anchor: Anchor              # the kernel when the optimization started
    original: str = ""          # the whole file then
    cancel: threading.Event = field(default_factory=threading.Event)
    message: str = ""           # latest progress line or the error
    best_speedup: float | None = None
    result: OptimizeResult | None = None   # when done
    rewrite: Replacement | None = None         # what applying it replaces, when it improved

    def title(self) -> str:
        """'1.40× faster on NVIDIA H100, matches the original on 38 cases', or 'verified correct on
        14 cases, speed unknown — measure on a GPU' (astra_cuda.standing)."""
        from astra_cuda import standing
        return self.status if self.result is None else standing.of_rewrite(self.result).short

    @property
    def improved(self) -> bool:
        return self.result is not None and self.result.improved

    @property
    def measured(self) -> bool:
        """Its speed was measured (on a GPU): only then is applying it the default action."""
        return self.result is not None and self.result.measured and self.result.speedup is not None


def verified_cases(result: OptimizeResult) -> int:
    return result.best_eval.check.cases


@dataclass(frozen=True)
class Guessed:
    """A line of an inserted spec proposal that inference guessed: shown (with its evidence)
    while the line reads as inserted; an edit of the line clears it."""
    kernel: str
    text: str        # the line as inserted
    note: str        # inference's note: what was guessed and why


@dataclass
class Profiled:
    profile: Profile
    anchor: Anchor              # hot lines are valid while the kernel text is unchanged


@dataclass
class KernelState:
    verdict: Verdict | None = None   # the latest check
    verdict_error: str = ""          # the check could not run (message)
    profile: Profiled | None = None
    profiling: bool = False
    optimization: Optimization | None = None


@dataclass
class DocState:
    snapshot: Snapshot | None = None   # of `snapshot_version` (None: it could not be read)
    snapshot_version: int | None = None
    snapshot_error: Exception | None = None  # why it could not be read (its line, when it has one)
    static_diags: list[types.Diagnostic] = field(default_factory=list)
    check_diags: dict[str, list[types.Diagnostic]] = field(default_factory=dict)  # kernel -> diagnostics
    per_kernel: dict[str, KernelState] = field(default_factory=dict)
    check_generation: int = 0
    check_cancel: threading.Event = field(default_factory=threading.Event)
    checking: bool = False
    static_done: bool = False        # the static check (compiler) has run on a version of the file
    live_diags: list[types.Diagnostic] = field(default_factory=list)   # of the latest snapshot: spec, guesses
    guesses: list[Guessed] = field(default_factory=list)   # lines of an inserted spec that inference guessed
    # line -> the kernels whose spec comment or name is on it, of `snapshot` (`hover_lines`, built
    # where the snapshot is read, off the loop): what a hover looks at
    hover_lines: dict[int, list[KernelInfo]] = field(default_factory=dict, repr=False)

    @property
    def kernels(self) -> list[KernelInfo]:
        return list(self.snapshot.kernels) if self.snapshot is not None else []

    def kernels_on(self, line: int) -> list[KernelInfo]:
        """The kernels a hover on `line` may be about (in the snapshot's order), without a look at
        every kernel: a hover scanned all 12,106 of a large file, 15-22 ms of the loop's CPU."""
        return self.hover_lines.get(line, [])

    def kernel(self, name: str) -> KernelState:
        return self.per_kernel.setdefault(name, KernelState())


def hover_lines(kernels: Sequence[KernelInfo]) -> dict[int, list[KernelInfo]]:
    """Line -> the kernels whose spec comment or name span covers it, in `kernels`' order."""
    out: dict[int, list[KernelInfo]] = {}
    for k in kernels:
        lines = set(range(k.kernel.name_span.start_line, k.kernel.name_span.end_line + 1))
        if k.kernel.spec is not None:
            lines.update(range(k.kernel.spec.span.start_line, k.kernel.spec.span.end_line + 1))
        for line in lines:
            out.setdefault(line, []).append(k)
    return out

"""Which backend runs kernels where an executor runs them: asked of its workers once, then
remembered for a while — by the caller's `Session`, which holds one `Availability`.

A probe creates a CUDA context (in a worker), so it is not repeated on every save: what a
machine offers changes rarely (a driver installed, a compiler removed). After `LIFETIME_S`, or
for another executor (`--cluster`, `astra.cluster`), the next request asks again. "Here" is where
the given executor (`astra_cuda.execution.executors`) runs kernels: this machine, or a Ray cluster.
Nothing is remembered process-wide: two sessions (two workspace folders, two CLI commands, two
tests) each ask for themselves.
"""
from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Literal

from ..errors import AstraError
from .jobs import BackendStatus

if TYPE_CHECKING:
    from .executors import Executor

LIFETIME_S = 300.0


class Availability:
    """The backends' statuses where one executor runs kernels, remembered `LIFETIME_S` (one slot:
    the executor last asked about)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cached: tuple[float, Executor, dict[str, BackendStatus]] | None = None

    def statuses(self, ex: Executor) -> dict[str, BackendStatus]:
        """Each backend's availability where `ex` runs kernels, remembered while it is fresh."""
        with self._lock:  # one probe at a time; whoever waits gets its answer
            c = self._cached
            if c is not None and c[1] is ex and time.monotonic() - c[0] < LIFETIME_S:
                return c[2]
            found = ex.statuses()
            self._cached = (time.monotonic(), ex, found)
            return found

    def forget(self) -> None:
        """The next request probes again."""
        with self._lock:
            self._cached = None

    def resolve(self, name: str, ex: Executor) -> Literal["gpu", "cpu", "static"]:
        """'auto' -> the best backend available where `ex` runs kernels ('gpu', 'cpu', else
        'static'); an explicit backend that is not available is an error that says why."""
        if name == "static":
            return "static"
        if name not in ("auto", "gpu", "cpu"):
            raise AstraError(f"unknown backend {name!r} (auto, gpu, cpu or static)")
        avail = self.statuses(ex)
        if name == "auto":
            return "gpu" if avail["gpu"].available else "cpu" if avail["cpu"].available else "static"
        status = avail[name]
        if not status.available:
            fix = f": run `{status.fix}`" if status.fix else ""
            raise AstraError(f"the {name} backend is not available here: {status.reason or 'not available'}{fix}")
        return "gpu" if name == "gpu" else "cpu"

    def device_arch(self, default: str, ex: Executor) -> str:
        """The architecture of the GPU the GPU backend uses ('sm_90'), else `default`."""
        gpu = self.statuses(ex).get("gpu")
        return gpu.arch if gpu is not None and gpu.available and gpu.arch else default

    def gpu_setup(self, ex: Executor) -> BackendStatus | None:
        """The GPU backend's status when a GPU is visible here but cannot be used: what is wrong
        and (in `fix`) the one command that fixes it. None when there is nothing to say."""
        gpu = self.statuses(ex).get("gpu")
        return gpu if gpu is not None and not gpu.available and gpu.setup_needed else None

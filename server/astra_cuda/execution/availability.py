"""Which backend runs kernels here: asked of the executor's workers once, then remembered for a while.

A probe creates a CUDA context (in a worker), so it is not repeated on every save: what a
machine offers changes rarely (a driver installed, a compiler removed). After `LIFETIME_S`, or
for another executor (`--cluster`, `astra.cluster`), the next request asks again. "Here" is where
the given executor (`astra_cuda.execution.executors`; a session's) runs kernels: this machine, or a Ray
cluster.
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

_lock = threading.Lock()
_cached: tuple[float, object, dict[str, BackendStatus]] | None = None


def statuses(ex: Executor | None = None) -> dict[str, BackendStatus]:
    """Each backend's availability where `ex` runs kernels (default: this machine's workers), from
    the cache while it is fresh."""
    global _cached
    from .executors import LOCAL
    ex = LOCAL if ex is None else ex
    with _lock:  # one probe at a time; whoever waits gets its answer
        if _cached is not None and _cached[1] is ex and time.monotonic() - _cached[0] < LIFETIME_S:
            return _cached[2]
        found = ex.statuses()
        _cached = (time.monotonic(), ex, found)
        return found


def forget() -> None:
    """The next request probes again."""
    global _cached
    with _lock:
        _cached = None


def resolve(name: str, ex: Executor | None = None) -> Literal["gpu", "cpu", "static"]:
    """'auto' -> the best backend available here ('gpu', 'cpu', else 'static'); an explicit
    backend that is not available is an error that says why."""
    if name == "static":
        return "static"
    avail = statuses(ex)
    if name == "auto":
        return "gpu" if avail["gpu"].available else "cpu" if avail["cpu"].available else "static"
    if name not in ("gpu", "cpu"):
        raise AstraError(f"unknown backend {name!r} (auto, gpu, cpu or static)")
    status = avail[name]
    if not status.available:
        fix = f": run `{status.fix}`" if status.fix else ""
        raise AstraError(f"the {name} backend is not available here: {status.reason or 'not available'}{fix}")
    return "gpu" if name == "gpu" else "cpu"


def device_arch(default: str, ex: Executor | None = None) -> str:
    """The architecture of the GPU the GPU backend uses ('sm_90'), else `default`."""
    gpu = statuses(ex).get("gpu")
    return gpu.arch if gpu is not None and gpu.available and gpu.arch else default


def gpu_setup(ex: Executor | None = None) -> BackendStatus | None:
    """The GPU backend's status when a GPU is visible here but cannot be used: what is wrong
    and (in `fix`) the one command that fixes it. None when there is nothing to say."""
    gpu = statuses(ex).get("gpu")
    return gpu if gpu is not None and not gpu.available and gpu.setup_needed else None

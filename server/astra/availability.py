"""Which backend runs kernels here: asked of a worker once, then remembered for a while.

A probe creates a CUDA context (in the worker), so it is not repeated on every save: what a
machine offers changes rarely (a driver installed, a compiler removed). After `LIFETIME_S` the
next request asks again.
"""
from __future__ import annotations

import threading
import time
from typing import Literal

from .errors import AstraError
from .jobs import BackendStatus

LIFETIME_S = 300.0
PROBE_TIMEOUT_S = 60.0

_lock = threading.Lock()
_cached: tuple[float, dict[str, BackendStatus]] | None = None


def statuses() -> dict[str, BackendStatus]:
    """Each backend's availability (from the cache while it is fresh)."""
    global _cached
    from . import worker
    with _lock:  # one probe at a time; whoever waits gets its answer
        if _cached is not None and time.monotonic() - _cached[0] < LIFETIME_S:
            return _cached[1]
        found = worker.run("astra.jobs:backends_job", None, timeout=PROBE_TIMEOUT_S)
        _cached = (time.monotonic(), found)
        return found


def forget() -> None:
    """The next request probes again."""
    global _cached
    with _lock:
        _cached = None


def resolve(name: str) -> Literal["gpu", "cpu", "static"]:
    """'auto' -> the best backend available here ('gpu', 'cpu', else 'static'); an explicit
    backend that is not available is an error that says why."""
    if name == "static":
        return "static"
    avail = statuses()
    if name == "auto":
        return "gpu" if avail["gpu"].available else "cpu" if avail["cpu"].available else "static"
    if name not in ("gpu", "cpu"):
        raise AstraError(f"unknown backend {name!r} (auto, gpu, cpu or static)")
    status = avail[name]
    if not status.available:
        raise AstraError(f"the {name} backend is not available here: {status.reason or 'not available'}")
    return "gpu" if name == "gpu" else "cpu"

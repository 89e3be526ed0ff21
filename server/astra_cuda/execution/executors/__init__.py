"""Where evaluations run: the executor interface, the local worker pool, and the choice of one.

Every job that runs kernel code (a check, a profile, a candidate's evaluation) goes through the
process-wide executor (`current()`); each one runs the *same* `astra_cuda.execution.jobs` job in the *same*
per-job worker process (`astra_cuda.execution.worker`), only the place differs:

- `LocalExecutor` (the default): the worker pool of this machine, exactly as before.
- `astra_cuda.execution.executors.ray_cluster.RayExecutor` (`--cluster local|auto|ray://HOST:PORT`, setting `astra.cluster`):
  one Ray actor per GPU (or per CPU for the CPU backend), each holding its own worker pool.

`run` returns the job's result with the place that produced it (`Placement`: node and GPU), so
every number can say where it was measured. Static compiles (NVRTC, no GPU) always stay local.
"""
from __future__ import annotations

import atexit
import os
import threading

from ...errors import AstraError
from ...evaluation import InfrastructureError
from .base import Executor, Placement, Ran
from .local import LocalExecutor

CLUSTER_CHOICES = "none (this machine's workers), local (a Ray runtime started here), auto (RAY_ADDRESS " \
                  "if set, else none) or ray://HOST:PORT"


# ---- the process-wide executor -------------------------------------------------------------

_lock = threading.Lock()
_current: Executor | None = None
_setting = ""


def parse(setting: str | None) -> str | None:
    """The cluster setting -> None (local workers), 'local' (start Ray here) or a Ray address.
    'auto' takes RAY_ADDRESS when it is set. Raises AstraError for anything else."""
    s = (setting or "").strip()
    if s in ("", "none", "off"):
        return None
    if s == "auto":
        addr = os.environ.get("RAY_ADDRESS", "").strip()
        return parse(addr) if addr and addr != "auto" else None
    if s == "local":
        return "local"
    if s.startswith("ray://") and len(s) > len("ray://") and " " not in s:
        return s
    raise AstraError(f"unknown cluster {setting!r}: use {CLUSTER_CHOICES}")


def use(setting: str | None) -> Executor:
    """Make the executor named by `setting` the current one (a Ray connection is made once and
    kept while the setting stays the same)."""
    global _current, _setting
    target = parse(setting)
    key = target or ""
    with _lock:
        if _current is not None and key == _setting:
            return _current
        old, _current, _setting = _current, None, key
    if old is not None:
        old.close()
    if target is None:
        ex: Executor = LocalExecutor()
    else:
        from .ray_cluster import RayExecutor
        ex = RayExecutor(None if target == "local" else target)
    with _lock:
        _current, _setting = ex, key
    return ex


def install(ex: Executor) -> Executor:
    """Make `ex` (already built, e.g. a RayExecutor with chosen sizes) the current executor; the
    one it replaces is not closed (its owner closes it)."""
    global _current, _setting
    with _lock:
        _current, _setting = ex, f"<{ex.kind} {id(ex)}>"
    return ex


def current() -> Executor:
    global _current
    with _lock:
        if _current is None:
            _current = LocalExecutor()
        return _current


def shutdown() -> None:
    global _current, _setting
    with _lock:
        old, _current, _setting = _current, None, ""
    if old is not None:
        old.close()


atexit.register(shutdown)

__all__ = ["Executor", "LocalExecutor", "Placement", "Ran", "InfrastructureError", "parse", "use", "install", "current",
           "shutdown", "CLUSTER_CHOICES"]

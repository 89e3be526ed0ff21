"""Where evaluations run: the executor interface, the local worker pool, and the choice of one.

Every job that runs kernel code (a check, a profile, a candidate's evaluation) goes through the
executor of the caller's session (`astra_cuda.session.Session`); each one runs the *same* `astra_cuda.execution.jobs` job in the *same*
per-job worker process (`astra_cuda.execution.worker`), only the place differs:

- `LocalExecutor` (the default): the worker pool of this machine, exactly as before.
- `astra_cuda.execution.executors.ray_cluster.RayExecutor` (`--cluster local|auto|ray://HOST:PORT`, setting `astra.cluster`):
  one Ray actor per GPU (or per CPU for the CPU backend), each holding its own worker pool.

`run` returns the job's result with the place that produced it (`Placement`: node and GPU), so
every number can say where it was measured. Static compiles (NVRTC, no GPU) always stay local.
"""
from __future__ import annotations

import os

from ...errors import AstraError
from ...evaluation import InfrastructureError
from .base import Executor, Placement, Ran
from .local import LocalExecutor

CLUSTER_CHOICES = "none (this machine's workers), local (a Ray runtime started here), auto (RAY_ADDRESS " \
                  "if set, else none) or ray://HOST:PORT"


# ---- choosing one -------------------------------------------------------------------------

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


def make(setting: str | None) -> Executor:
    """The executor named by `setting`: this machine's workers (`LocalExecutor`), or a new Ray
    connection (its owner closes it)."""
    target = parse(setting)
    if target is None:
        return LocalExecutor()
    from .ray_cluster import RayExecutor
    return RayExecutor(None if target == "local" else target)


__all__ = ["Executor", "LocalExecutor", "Placement", "Ran", "InfrastructureError", "parse", "make",
           "CLUSTER_CHOICES"]

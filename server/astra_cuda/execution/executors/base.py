"""The executor interface: where a job ran (`Placement`), a job's result with it (`Ran`), and
what every executor offers (`Executor`)."""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar

from ..jobs import BackendStatus
from ..worker import Job

T = TypeVar("T")
Where = Literal["gpu", "cpu", "static"]   # the backend a job needs a place for ('static': any place)


@dataclass(frozen=True)
class Placement:
    """Where a job ran: the node, and for the GPU backend the GPU (model, and its index there)."""

    node: str = ""
    gpu: str = ""          # e.g. 'NVIDIA H100 80GB HBM3'; '' on the CPU backend
    gpu_index: str = ""    # CUDA_VISIBLE_DEVICES of the process that ran it ('' locally)

    def describe(self) -> str:
        where = f"on {self.node}" if self.node else ""
        if self.gpu:
            where += f", GPU {self.gpu_index + ' ' if self.gpu_index else ''}({self.gpu})"
        return where.strip(", ")

    def to_json(self) -> dict[str, str]:
        return {"node": self.node, "gpu": self.gpu, "gpu_index": self.gpu_index}


@dataclass(frozen=True)
class Ran(Generic[T]):
    """A job's result and the place that produced it."""

    value: T
    where: Placement


class Executor(Protocol):
    kind: str

    def run(self, job: Job[T], *, backend: str, timeout: float,
            cancel: threading.Event | None = None, gpu_model: str | None = None) -> Ran[T]:
        """Run `job` (an `astra_cuda.execution.jobs` job) on a place that has `backend`
        ('gpu' or 'cpu'); on the GPU, only on a GPU named `gpu_model` when given. Raises what the
        job raised, the worker's errors (a timeout, a crash, a cancel: the job's own fault), or
        InfrastructureError when the place itself was lost (twice)."""

    def statuses(self) -> dict[str, BackendStatus]:
        """Which backends can run kernels through this executor."""

    def capacity(self, backend: str) -> int:
        """How many evaluations on `backend` can run at once (never two timings on one GPU)."""

    def describe(self) -> dict[str, Any]:
        """For JSON output: {"kind": ..., ...}."""

    def close(self) -> None: ...



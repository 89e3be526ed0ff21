"""The default executor: this machine's worker pool (`astra_cuda.execution.worker`), exactly as before executors."""
from __future__ import annotations

import socket
import threading
from typing import Any, TypeVar

from ..jobs import BackendsJob, BackendStatus, DeviceJob
from ..worker import Job
from .base import Placement, Ran

T = TypeVar("T")

PROBE_TIMEOUT_S = 60.0


class LocalExecutor:
    """This machine's worker pool: every job in a worker process here."""

    kind = "local"

    def __init__(self) -> None:
        self._gpu_name: str | None = None

    def run(self, job: Job[T], *, backend: str, timeout: float,
            cancel: threading.Event | None = None, gpu_model: str | None = None) -> Ran[T]:
        from .. import worker
        value = worker.run(job, timeout=timeout, cancel=cancel)
        return Ran(value, Placement(socket.gethostname(), self._gpu(backend)))

    def _gpu(self, backend: str) -> str:
        if backend != "gpu":
            return ""
        if self._gpu_name is None:
            from .. import worker
            try:
                self._gpu_name = str(worker.run(DeviceJob(), timeout=60.0).get("name", ""))
            except Exception:  # noqa: BLE001 - a name is a label; the job itself already ran
                return ""
        return self._gpu_name

    def statuses(self) -> dict[str, BackendStatus]:
        from .. import worker
        return worker.run(BackendsJob(), timeout=PROBE_TIMEOUT_S)

    def capacity(self, backend: str) -> int:
        from .. import worker
        return worker.pool().size

    def describe(self) -> dict[str, Any]:
        from .. import worker
        return {"kind": "local", "node": socket.gethostname(), "workers": worker.pool().size}

    def close(self) -> None:
        pass



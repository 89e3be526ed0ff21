"""A session: what the facade runs with, made by its caller instead of switched process-wide.

The CLI makes one per command (`--cluster`), the language server one per workspace folder
(Workspace Trust, the folder's `astra.cluster`), and each passes it to the `api` calls that run kernel code. A session
says where kernel code runs (its executor: this machine's workers or a Ray cluster) and whether it
may run at all: in an untrusted workspace nothing is compiled into a runnable module or run, every
backend resolves to 'static' (NVRTC compiles device code to PTX and runs nothing) and check,
profile and optimize refuse saying why. A session is a frozen value: a change (trust granted, the
cluster setting changed) makes a new one, so two callers in one process never see each other's.
What a session learns as it runs (which backends its executor offers) stays in it: nothing of a
session is kept process-wide, so a caller that made none gets a fresh one per call.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from .errors import AstraError
from .execution import executors
from .execution.availability import Availability
from .execution.executors import Executor, LocalExecutor
from .execution.jobs import BackendStatus


@dataclass(frozen=True)
class Session:
    executor: Executor = field(default_factory=LocalExecutor)
    execution_off: str | None = None   # why running kernel code is off here; None: it may run
    # which backends the executor offers, probed once and remembered a while (kept by `restricted`)
    backends: Availability = field(default_factory=Availability, compare=False, repr=False)

    @classmethod
    def open(cls, cluster: str | None = None, *, execution_off: str | None = None) -> Session:
        """A session running kernels where `cluster` says ('' or None: this machine's workers;
        'local', 'auto', 'ray://HOST:PORT': a Ray connection, which `close` ends)."""
        return cls(executors.make(cluster), execution_off)

    def restricted(self, why: str | None) -> Session:
        """This session with running kernel code turned off for `why` (None: turned on)."""
        return replace(self, execution_off=why)

    @property
    def runs_kernels(self) -> bool:
        return self.execution_off is None

    def refuse_if_off(self, what: str) -> None:
        """AstraError saying why, when running kernel code is off in this session."""
        if self.execution_off is not None:
            raise AstraError(f"{self.execution_off}: {what}")

    def resolve_backend(self, name: str) -> Literal["gpu", "cpu", "static"]:
        """'auto' -> the best backend available where this session runs kernels; an explicit
        unavailable one is an error (probed in a worker, remembered a while). With running kernel
        code off, 'static' whatever was asked."""
        if self.execution_off is not None:
            return "static"
        return self.backends.resolve(name, self.executor)

    def device_arch(self, default: str) -> str:
        """The GPU's own architecture where the GPU backend runs here, else `default`."""
        return self.backends.device_arch(default, self.executor)

    def gpu_setup(self) -> BackendStatus | None:
        """When a GPU is visible but the GPU backend cannot use it: the status saying why, with
        the one command that fixes it (`fix`). None otherwise."""
        return self.backends.gpu_setup(self.executor)

    def statuses(self) -> dict[str, BackendStatus]:
        """Each backend's availability where this session runs kernels (probed once, remembered a while)."""
        return self.backends.statuses(self.executor)

    def close(self) -> None:
        """End what the session opened (a Ray connection; this machine's workers stay)."""
        self.executor.close()

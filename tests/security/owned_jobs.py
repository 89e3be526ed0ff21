"""A job of a document, for the pool tests (run inside worker processes): which process ran it,
and what a leftover of an earlier job of that process says."""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

from astra_cuda.execution.worker import Job

_left: list[str] = []   # what earlier jobs of this process left behind (a CUDA context's state, here a thread's)


@dataclass(frozen=True)
class Owned(Job[tuple[int, list[str]]]):
    """Runs as the document `doc`'s code would (None: a job of no document, as a probe); leaves a
    thread behind that keeps writing its document's name where later jobs of the process read."""

    doc: str | None

    @property
    def owner(self) -> str | None:
        return self.doc

    def run(self) -> tuple[int, list[str]]:
        seen = sorted(set(_left))
        if self.doc is not None:
            name = self.doc

            def linger() -> None:
                for _ in range(600):
                    _left.append(name)
                    time.sleep(0.05)
            threading.Thread(target=linger, daemon=True).start()
        return os.getpid(), seen

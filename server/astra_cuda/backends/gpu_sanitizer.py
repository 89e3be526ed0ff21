"""The GPU backend under NVIDIA's compute-sanitizer: a pool of workers started under the tool
(`sanitizer_pool`; the backend in such a worker allocates every buffer exactly and turns each
report into a `LaunchError`), and the tool's log read for the reports a launch added."""
from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from .base import BackendUnavailable

if TYPE_CHECKING:
    from ..execution.worker import Pool

# Set in workers started by `sanitizer_pool()`: the tool name and its log file.
SANITIZER_ENV = "ASTRA_SANITIZER"
SANITIZER_LOG_ENV = "ASTRA_SANITIZER_LOG"


class SanitizerLog:
    """The log of the compute-sanitizer this worker runs under (none: no reports), read on from
    where the last look ended."""

    def __init__(self, path: str | None):
        self.path = path
        self.offset = os.path.getsize(path) if path and os.path.exists(path) else 0

    def new_errors(self) -> str:
        """New error reports in the sanitizer's log since the last look ('' if none)."""
        if not self.path:
            return ""
        time.sleep(0.05)  # the tool writes its report as the kernel retires
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                new = f.read().decode(errors="replace")
                self.offset = f.tell()
        except OSError:
            return ""
        noise = ("COMPUTE-SANITIZER", "Host Frame", "Saved host backtrace", "Device Frame:")
        lines = [ln.removeprefix("=========").strip() for ln in new.splitlines()
                 if ln.startswith("=========") and not any(n in ln for n in noise)]
        errors = [ln for ln in lines if ln and not ln.startswith("ERROR SUMMARY: 0")]
        return "\n".join(errors[:12])


def sanitizer_pool(tool: str = "memcheck") -> "Pool":
    """A worker pool whose workers run under `compute-sanitizer --tool TOOL` (memcheck,
    racecheck, initcheck, synccheck). Inside, GpuBackend uses exact-size allocations (CuPy's
    pool rounds sizes up and would hide small out-of-bounds accesses) and turns each report into
    a LaunchError. Raises BackendUnavailable when compute-sanitizer is not installed."""
    import shutil
    import tempfile
    from ..execution import worker
    exe = shutil.which("compute-sanitizer") or (
        "/usr/local/cuda/bin/compute-sanitizer" if os.access("/usr/local/cuda/bin/compute-sanitizer", os.X_OK) else None)
    if exe is None:
        raise BackendUnavailable("compute-sanitizer is not installed")
    log = os.path.join(tempfile.gettempdir(), f"astra-sanitizer-{tool}-{os.getpid()}.log")
    return worker.pool(f"gpu-sanitizer-{tool}", size=1, env={SANITIZER_ENV: tool, SANITIZER_LOG_ENV: log},
                       prefix=(exe, "--tool", tool, "--log-file", log, "--print-limit", "20",
                               "--target-processes", "application-only"))

"""User-facing errors. Each carries a message fit to print as is (never a traceback)."""
from __future__ import annotations


class AstraError(Exception):
    """Bad input or an impossible request: the CLI prints it and exits 2."""

    exit_code = 2

    def __init__(self, message: str, *, line: int | None = None, col: int | None = None):
        super().__init__(message)
        self.message = message
        self.line = line  # 0-based, when the error has a place in the user's file
        self.col = col


class SpecError(AstraError):
    """A harness-spec problem at a place inside the spec comment."""


class NoSuchKernel(AstraError):
    pass


# ---- what a backend (astra_cuda.backends) raises ------------------------------------------

class BackendUnavailable(Exception):
    """This backend cannot run here (no GPU, no CuPy, no C++ compiler...)."""


class CompileError(Exception):
    """The kernel did not compile. `log` holds the compiler's messages (with #line mapping
    to the user's file already applied by the compiler)."""

    def __init__(self, message: str, log: str = ""):
        super().__init__(message)
        self.log = log


class LaunchError(Exception):
    """The launch failed or the kernel faulted (illegal address, trap, deadlock...)."""


class Unsupported(Exception):
    """The kernel uses something this backend cannot run faithfully (e.g. inline PTX on the
    CPU). The caller reports 'static checks only — needs a GPU to verify', never a pass."""

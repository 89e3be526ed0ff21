"""How the GPU backend reads a launch's failure: whether the stream stopped on a fault
(`finished`), whether the fault lost the CUDA context, after which the worker must be replaced
(`lost_context`), and the launch error it becomes (`launch_error`)."""
from __future__ import annotations

from typing import Any

from .base import LaunchError

# Errors after which the CUDA context is unusable: the worker must be replaced.
STICKY = ("illegal address", "illegal memory", "misaligned address", "illegal instruction", "hardware stack",
          "unspecified launch failure", "device-side assert", "invalid program counter", "invalid address space",
          "launch timed out", "ErrorLaunchFailure", "ErrorIllegalAddress", "ErrorAssert", "ErrorHardwareStackError",
          "ErrorIllegalInstruction", "ErrorMisalignedAddress", "ErrorInvalidAddressSpace", "ErrorInvalidPc",
          "ErrorLaunchTimeout", "ErrorContextIsDestroyed", "ERROR_ILLEGAL_ADDRESS", "ERROR_LAUNCH_FAILED",
          "ERROR_ASSERT", "ERROR_ILLEGAL_INSTRUCTION", "ERROR_MISALIGNED_ADDRESS", "ERROR_HARDWARE_STACK_ERROR")


def finished(cp: Any, event: Any) -> bool:
    """cudaEventQuery: done, not yet, or the fault that stopped the stream (raised). CuPy's
    `Event.done` reads a fault as 'not done', which would turn a crash into a timeout."""
    runtime = cp.cuda.runtime
    status = runtime.eventQuery(event.ptr)  # raises CUDARuntimeError for most faults itself
    if status == 0:
        return True
    if status == 600:  # cudaErrorNotReady
        return False
    raise runtime.CUDARuntimeError(status)


def lost_context(text: str) -> bool:
    return any(s.lower() in text.lower() for s in STICKY)


def launch_error(e: Exception, text: str) -> LaunchError:
    """A failure that kept the context: a launch the driver refused, or another CUDA error."""
    if any(s in text.lower() for s in ("invalid argument", "too many resources", "invalid configuration")):
        return LaunchError(f"the launch was refused: {e}")
    return LaunchError(f"CUDA error: {text}")

"""Jobs for the worker tests (run inside the child process)."""
import ctypes
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

from astra_cuda.backends.base import CompileError
from astra_cuda.errors import AstraError
from astra_cuda.execution.worker import Job

_calls = 0


@dataclass(frozen=True)
class Call(Job[Any]):
    """One of this module's functions on a payload, as a worker job (the function travels by reference)."""

    func: Callable[[Any], Any]
    payload: Any = None

    def run(self) -> Any:
        return self.func(self.payload)


def echo(payload):
    return {"pid": os.getpid(), "payload": payload}


def count(_):
    global _calls
    _calls += 1
    return _calls


def hang(_):
    while True:
        time.sleep(0.01)


def spin(_):
    while True:
        pass


def sleep(seconds):
    time.sleep(seconds)
    return os.getpid()


def span(seconds):
    """Sleep; say which process slept and when (CLOCK_MONOTONIC is one clock for every process)."""
    start = time.monotonic()
    time.sleep(seconds)
    return os.getpid(), start, time.monotonic()


def segfault(_):
    ctypes.string_at(0)  # a real SIGSEGV, like a CPU-backend kernel reading a bad pointer


def abort(_):
    sys.stderr.write("fatal: simulated CUDA context poisoned\n")
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGABRT)


def hard_exit(_):
    os._exit(7)


def bad_input(_):
    raise AstraError("kernel 'k' has no harness spec", line=3, col=1)


def compile_error(_):
    raise CompileError("did not compile", log="k.cu(4): error: identifier \"x\" is undefined")


def value_error(_):
    raise ValueError("plain bug")


def noisy(_):
    print("user code printing to stdout " * 100)
    os.write(1, b"raw write to fd 1\n")
    return "still fine"


def unpicklable(_):
    return lambda: None


def big(n):
    import numpy as np
    return np.arange(n, dtype=np.float32)


def poisoned(_):
    from astra_cuda.execution import worker
    worker.retire_after_reply()
    return os.getpid()


def getenv(name):
    return os.environ.get(name)


def exit_leaves(path):
    """Write `path` when this worker exits normally (an atexit hook, as a profiler's report is
    written at its target's exit); say which process will."""
    import atexit

    atexit.register(lambda: open(path, "w").write("exited normally"))
    return os.getpid()

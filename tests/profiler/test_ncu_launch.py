"""Nsight Compute profiles a launch made through the one worker entry point: `NcuLaunch` is a job
(the backend it launches on given as a class, never chosen there), run by `worker.run_alone` under
the tool. On the CPU, with no tool in front (`env`), the same job compiles and launches the kernel:
a clean kernel returns, a faulting one comes back as its launch's error."""
import shutil

import pytest

from astra_cuda.backends.base import LaunchError
from astra_cuda.compile import extract, sandbox
from astra_cuda.execution import worker
from astra_cuda.model import source, spec as spec_mod
from astra_cuda.profiler.ncu import NcuLaunch

pytestmark = pytest.mark.skipif(shutil.which("g++") is None or sandbox.unavailable_reason() is not None,
                                reason="needs g++ and the CPU backend's sandbox")

KERNEL = """
/* @astra
grid = ["n"]
block = ["1"]
[sizes]
n = [64]
[args]
x = { type = "float", shape = ["n"], inout = true }
n = "n"
*/
__global__ void halve(float* x, int n) {
  BODY
}
"""


def job(body: str) -> NcuLaunch:
    from astra_cuda.backends.cpu import CpuBackend
    text = KERNEL.replace("BODY", body)
    m = source.parse(text)
    spec = spec_mod.load(m.kernel("halve"), m)
    return NcuLaunch(extract.unit(text, "k.cu", "halve"), spec, {"n": 64}, CpuBackend)


def test_the_profiled_launch_is_a_job_of_the_one_worker_entry_point():
    assert worker.run_alone(job("x[blockIdx.x] *= 0.5f;"), prefix=("env",), timeout=120) is None
    with pytest.raises(LaunchError):
        worker.run_alone(job("x[blockIdx.x + (1 << 28)] = 1.0f;"), prefix=("env",), timeout=120)

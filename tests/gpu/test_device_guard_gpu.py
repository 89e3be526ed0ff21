"""The catalogue's `write_past_device_case_buffer` on a GPU: a candidate writing one element past
its output in cases drawn, run and judged on the device (gate/device_case.py; the size threshold
lowered in the worker so the test's small cases take that path). Before, those buffers had no guard
and the write went unnamed. `PYTEST_GPU_FILES=tests/gpu/test_device_guard_gpu.py scripts/gpu-check pytest-gpu`."""
from __future__ import annotations

import pytest

from astra_cuda.execution import worker

import gpu_jobs
from gpu_jobs import Call
from tests.security.reference_files import SPEC, units
from tests.security.test_overrun import ONE_PAST, ORIGINAL

pytestmark = pytest.mark.gpu   # `scripts/gpu-check pytest-gpu` selects by this mark

RIGHT = ORIGINAL + SPEC + """__global__ void scale_fast(float* y, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * 3.0f;
}
"""


def _check(text, tmp_path):
    pool = worker.Pool(1, name="device-guard-gpu")
    try:
        return pool.run(Call(gpu_jobs.device_case_check, units(text, tmp_path)), timeout=300)
    finally:
        pool.close()


def test_a_write_past_a_device_case_output_is_named_gpu(tmp_path):
    status, check, message, on_device = _check(ONE_PAST, tmp_path)
    assert status == "failed" and check == "launch", (status, check, message)
    assert "`y`: the kernel wrote past its end: element " in message and "in the guard after it" in message, message


def test_control_a_right_candidate_passes_on_the_device_gpu(tmp_path):
    """The guards change nothing for a candidate that stays inside its buffers."""
    status, check, message, on_device = _check(RIGHT, tmp_path)
    assert status == "passed" and on_device, (status, check, message, on_device)

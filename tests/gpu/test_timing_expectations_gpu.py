"""Issue 30 on the GPU: the timing's expectations are computed before any candidate launch of the
job (gate.expect(before_loop=True)), kept on the device under keyed digests (gate.sealed) checked
after the loop, and the input sets made again from the host after it (gate.resync). The attacks
themselves run on the fake GPU (tests/security/test_ground_truth.py:
guessed_global_rewrites_timing_expectations, guessed_pointers_rewrite_timing_expectations); here
real launches show the new order judges as before: an honest rewrite's timed outputs all pass
(the digests of untouched expectations agree on CuPy), a wrong one's fail.
`PYTEST_GPU_FILES=tests/gpu/test_timing_expectations_gpu.py scripts/gpu-check pytest-gpu`."""
from __future__ import annotations

import pytest

from astra_cuda.execution import jobs, worker

from tests.security.reference_files import ORIGINAL, SPEC, units

pytestmark = pytest.mark.gpu   # `scripts/gpu-check pytest-gpu` selects by this mark

RIGHT = ORIGINAL + SPEC + """__global__ void scale_fast(float* y, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * 3.0f;
}
"""
WRONG = RIGHT.replace("x[i] * 3.0f", "x[i] * 2.0f")


def _timed(text, tmp_path):
    ref, cand, spec = units(text, tmp_path)
    pool = worker.Pool(1, name="timing-expectations-gpu")
    try:
        prof = pool.run(jobs.ProfileJob("gpu", ref, cand, spec, sizes="bench"), timeout=600)
    finally:
        pool.close()
    timed = [s for s in prof.sizes if s.reference is not None]
    assert timed, prof.errors
    return timed


def test_an_honest_rewrite_times_with_expectations_first_gpu(tmp_path):
    for s in _timed(RIGHT, tmp_path):
        assert not s.output_failures, (s.label, s.output_failures)


def test_a_wrong_rewrite_fails_against_expectations_first_gpu(tmp_path):
    for s in _timed(WRONG, tmp_path):
        assert s.output_failures, s.label
        assert not any("changed while the timing loop ran" in m for m in s.output_failures), s.output_failures

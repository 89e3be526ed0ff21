"""Issue 30 on the GPU: what a candidate is judged against must be values it could not have written.
The reference and the candidate run in one worker, one CUDA context, where CuPy's pool hands the
memory of freed buffers to the next allocation: a pointer a candidate kept from an earlier launch
points, later, into buffers of the reference's. The proof on the fake GPU's shared address space
and the CPU executor's is tests/security/test_ground_truth.py; here real launches:
`PYTEST_GPU_FILES=tests/gpu/test_ground_truth_gpu.py scripts/gpu-check wheels import pytest-gpu`."""
from __future__ import annotations

import pytest

from tests.security.reference_files import ORIGINAL, SPEC, checked_twice_in_one_worker

pytestmark = pytest.mark.gpu   # `scripts/gpu-check pytest-gpu` selects by this mark

# Right on its first launch, then wrong (y = x; the original scales by 3), and every launch writes
# the same through every output pointer it was given before (kept in `__device__` memory, up to
# 256): where the reference's outputs of a later case lie in memory an earlier launch's output had,
# and were compared there, the comparison would pass.
STALE_POINTERS = ORIGINAL + """__device__ float* kept[256];
__device__ int kept_n[256];
__device__ unsigned kept_count;

""" + SPEC + """__global__ void scale_fast(float* y, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  unsigned k = kept_count < 256u ? kept_count : 256u;
  if (i < n) {
    y[i] = kept_count == 0u ? 3.0f * x[i] : x[i];
    for (unsigned j = 0; j < k; ++j)
      if (kept[j] != y && i < kept_n[j]) kept[j][i] = x[i];
  }
  __syncthreads();
  if (i == 0 && kept_count < 256u) { kept[kept_count] = y; kept_n[kept_count] = n; kept_count = kept_count + 1; }
}
"""


def test_stale_pointers_rewrite_reference_outputs_gpu(tmp_path):
    """Checked twice in one worker (as the editor checks on every save): the wrong rewrite fails
    the comparison both times — each case's reference outputs are on the host before the
    candidate's launch, whatever its kept pointers reach afterwards."""
    for v in checked_twice_in_one_worker(STALE_POINTERS, tmp_path, "gpu", "ground-truth"):
        assert v.status == "failed" and any(f.check == "compare" for f in v.failures), v.human()

"""The nvcc path on a real GPU: the user's whole file compiled by nvcc, its cubin loaded with
CuPy's RawModule(path=...) and launched by mangled name — for the candidate and the reference
alike — through the gate and the timing loop. Needs nvcc on the PATH (the GPU machine has it)."""
from __future__ import annotations

from pathlib import Path

import pytest

from astra_cuda.compile import extract
from astra_cuda.execution import jobs, worker
from astra_cuda.model import source, spec as spec_mod
from astra_cuda.compile import toolkit

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(toolkit.find() is None, reason="no CUDA toolkit (nvcc)")]

# What NVRTC on a cut unit refused (issue 24): CUB, M_PI from <math.h>, std::is_same_v, a host
# helper with std::vector — all in one file, the way a project writes it.
FILE = """\
#include <cub/cub.cuh>
#include <math.h>
#include <type_traits>
#include <vector>

/* @astra
grid = ["rows"]
block = [256]
instantiate = "<float, 256>"

[sizes]
rows = [1, 7, 130]
n = [1, 255, 1000]

[bench]
rows = [4096]
n = [4096]

[args]
x = { type = "float", shape = ["rows", "n"] }
y = { type = "float", shape = ["rows"], output = true, atol = 1e-3, rtol = 1e-3 }
n = "n"
*/
template <typename T, int BLOCK>
__global__ void rowsum_cub(const T* x, T* y, int n) {
  using BR = cub::BlockReduce<T, BLOCK>;
  __shared__ typename BR::TempStorage tmp;
  T v = 0;
  for (int i = threadIdx.x; i < n; i += BLOCK) v += x[(size_t)blockIdx.x * n + i];
  T s = BR(tmp).Sum(v);
  if (threadIdx.x == 0) y[blockIdx.x] = std::is_same_v<T, float> ? s * (float)(M_PI / M_PI) : s;
}

/* @astra
grid = ["rows"]
block = [1]

[sizes]
rows = [1, 7, 130]
n = [1, 255, 1000]

[args]
x = { type = "float", shape = ["rows", "n"] }
y = { type = "float", shape = ["rows"], output = true, atol = 1e-3, rtol = 1e-3 }
n = "n"
*/
__global__ void rowsum_naive(const float* x, float* y, int n) {
  float s = 0;   // a float sum in another order than CUB's tree: at n = 4096 the two differ by up
                 // to 6e-4 where a row's sum cancels (H100, 03fa4be), hence the reduction's 1e-3
  for (int i = 0; i < n; ++i) s += x[(size_t)blockIdx.x * n + i];
  y[blockIdx.x] = (float)s;
}

void launch(const std::vector<float>& host) { (void)host.size(); }
"""


@pytest.fixture(scope="module")
def pool():
    p = worker.Pool(1, name="gpu-nvcc-test")
    yield p
    p.close()


def _units(tmp_path: Path, text: str):
    path = tmp_path / "rowsum.cu"
    path.write_text(FILE)
    m, ref_m = source.parse(text), source.parse(FILE)
    spec = spec_mod.load(m.kernel("rowsum_cub"), m)
    ref_spec = spec_mod.load(ref_m.kernel("rowsum_naive"), ref_m)
    cand = extract.spec_unit(m, str(path), "rowsum_cub", spec)
    ref = extract.spec_unit(ref_m, str(path), "rowsum_naive", ref_spec)
    return ref, cand, spec, ref_spec


def test_cubin_passes_the_gate_and_is_timed(pool, tmp_path):
    ref, cand, spec, ref_spec = _units(tmp_path, FILE)
    v = pool.run(jobs.CheckJob("gpu", ref, cand, spec, reference_spec=ref_spec, quick=True),
                 timeout=300)
    assert v.passed, v.human()
    assert v.compiler.startswith("nvcc "), v.compiler
    p = pool.run(jobs.ProfileJob("gpu", ref, cand, spec, reference_spec=ref_spec),
                 timeout=300)
    assert p.measured and p.valid, p.summary_markdown()
    print(p.summary_line(), "|", v.compiler)


def test_planted_wrong_cubin_kernel_is_caught(pool, tmp_path):
    # Scale the sum by 1.01 in the branch the float instance takes (a product with the condition
    # itself would bind to `? :`'s condition and change nothing).
    wrong = FILE.replace("? s * (float)(M_PI / M_PI)", "? 1.01f * s * (float)(M_PI / M_PI)")
    assert wrong != FILE
    ref, cand, spec, ref_spec = _units(tmp_path, wrong)
    v = pool.run(jobs.CheckJob("gpu", ref, cand, spec, reference_spec=ref_spec, quick=True),
                 timeout=300)
    assert not v.passed and "compare" in v.failed_checks(), v.human()

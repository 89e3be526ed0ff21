"""PyTorch-extension files with the real torch (the GPU machine has it): nvcc with torch's include
folders (found from the installed torch) and flags, the kernel's at::Half / c10::BFloat16 as the
spec's half / bfloat16, checked on the GPU. Skipped where torch or nvcc is missing."""
from __future__ import annotations

import time

import pytest

from astra_cuda.compile import extract, static
from astra_cuda.execution import jobs, worker
from astra_cuda.model import source, spec as spec_mod
from astra_cuda.compile import toolkit, torch_ext
from astra_cuda.compile.project import ProjectContext

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(toolkit.find() is None, reason="no CUDA toolkit (nvcc)"),
              pytest.mark.skipif(not torch_ext.installed_include_dirs(), reason="torch is not installed")]

EXTENSION = """\
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

/* @astra
grid = ["cdiv(n, 256)"]
block = [256]

[sizes]
n = [1, 1000, 65537]

[args]
out = { type = "half", shape = ["n"], output = true }
x   = { type = "half", shape = ["n"] }
w   = { type = "bfloat16", shape = ["n"] }
n   = "n"
*/
__global__ void scale_by(at::Half* out, const at::Half* x, const c10::BFloat16* w, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = static_cast<at::Half>(static_cast<float>(x[i]) * static_cast<float>(w[i]));
}

torch::Tensor scale_by_op(torch::Tensor x, torch::Tensor w) {
  auto out = torch::empty_like(x);
  int n = x.numel();
  scale_by<<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
      out.data_ptr<at::Half>(), x.data_ptr<at::Half>(), w.data_ptr<c10::BFloat16>(), n);
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("scale_by", &scale_by_op); }
"""


@pytest.fixture(scope="module")
def pool():
    p = worker.Pool(1, name="gpu-torch-test")
    yield p
    p.close()


def test_extension_compiles_with_torch_and_passes_on_the_gpu(pool, tmp_path):
    path = tmp_path / "scale_by.cu"
    path.write_text(EXTENSION)
    m = source.parse(EXTENSION)
    spec = spec_mod.load(m.kernel("scale_by"), m)
    assert (spec.args["x"].dtype.name, spec.args["w"].dtype.name) == ("half", "bfloat16")
    unit = extract.spec_unit(m, str(path), "scale_by", spec)
    t0 = time.perf_counter()
    r = static.compile_unit(unit)
    first = time.perf_counter() - t0
    assert r.ok, r.log
    assert r.compiler.startswith("nvcc ") and torch_ext.installed_include_dirs()[0] in r.compiler
    t0 = time.perf_counter()
    assert static.compile_unit(unit).ok
    print(f"torch extension: first nvcc compile {first:.1f} s, repeated {time.perf_counter() - t0:.3f} s")
    v = pool.run(jobs.CheckJob("gpu", unit, unit, spec, quick=True), timeout=300)
    assert v.passed, v.human()
    assert v.compiler.startswith("nvcc "), v.compiler


def test_the_torch_example_compiles_with_nvcc(tmp_path):
    from pathlib import Path
    path = Path(__file__).resolve().parents[2] / "examples" / "fused_add_rmsnorm.cu"
    text = path.read_text()
    tk, why = toolkit.for_file(text, str(path), ProjectContext())
    assert tk is not None, why
    r = static.compile_unit(extract.unit(text, str(path), "fused_add_rmsnorm_kernel"))
    assert r.ok and r.compiler.startswith("nvcc "), r.log


ACCESSORS = """\
#include <torch/extension.h>

/* @astra
grid = ["rows"]
block = [128]
instantiate = "<float>"

[sizes]
rows = [1, 7, 300]
cols = [1, 100, 4099]

[bench]
rows = [8192]
cols = [4096]

[args]
x    = { type = "float", shape = ["rows", "cols"], accessor = true }
mask = { type = "bool", shape = ["rows", "cols"], accessor = true }
out  = { type = "float", shape = ["rows", "cols"], output = true, accessor = true }
cols = "cols"
*/
template <typename scalar_t>
__global__ void masked_scale(const torch::PackedTensorAccessor32<scalar_t, 2, torch::RestrictPtrTraits> x,
                             const torch::PackedTensorAccessor32<bool, 2, torch::RestrictPtrTraits> mask,
                             torch::PackedTensorAccessor32<scalar_t, 2, torch::RestrictPtrTraits> out, int cols) {
  const int r = blockIdx.x;
  for (int c = threadIdx.x; c < cols; c += blockDim.x)
    out[r][c] = mask[r][c] ? scalar_t(0) : x[r][c] * scalar_t(2);
}

torch::Tensor masked_scale_op(torch::Tensor x, torch::Tensor mask) {
  auto out = torch::empty_like(x);
  const int rows = x.size(0), cols = x.size(1);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "masked_scale", [&] {
    masked_scale<scalar_t><<<rows, 128>>>(x.packed_accessor32<scalar_t, 2, torch::RestrictPtrTraits>(),
                                          mask.packed_accessor32<bool, 2, torch::RestrictPtrTraits>(),
                                          out.packed_accessor32<scalar_t, 2, torch::RestrictPtrTraits>(), cols);
  });
  return out;
}
"""


def _accessor_unit(tmp_path, text):
    path = tmp_path / "masked_scale.cu"
    path.write_text(text)
    m = source.parse(text)
    spec = spec_mod.load(m.kernel("masked_scale"), m)
    return extract.spec_unit(m, str(path), "masked_scale", spec), spec


def test_tensor_accessors_pass_the_gate_and_are_timed_on_the_gpu(pool, tmp_path):
    """TGI's forward_masked_softmax_kernel pattern (issue 25): `PackedTensorAccessor32` parameters
    passed by value, built by the gate where nvcc's layout probe says; a kernel that misreads one
    (the mask ignored, a row of another) is caught by the comparison."""
    ref, spec = _accessor_unit(tmp_path, ACCESSORS)
    v = pool.run(jobs.CheckJob("gpu", ref, ref, spec, quick=True), timeout=300)
    assert v.passed and v.compared, v.human()
    p = pool.run(jobs.ProfileJob("gpu", ref, ref, spec), timeout=300)
    assert p.measured and p.valid, p.to_json()
    print("accessors:", p.summary_line(), "|", v.compiler)
    for old, new in (("mask[r][c] ? scalar_t(0) :", ""), ("x[r][c] * scalar_t(2)", "x[0][c] * scalar_t(2)")):
        cand, _ = _accessor_unit(tmp_path, ACCESSORS.replace(old, new))
        bad = pool.run(jobs.CheckJob("gpu", ref, cand, spec, quick=True), timeout=300)
        assert bad.status == "failed" and bad.failures[0].check == "compare", bad.human()

"""The files of the catalogue's `reference` entries (tests/security/test_reference_apart.py on the
CPU, tests/gpu/test_reference_apart_gpu.py on a GPU): an original kernel (`scale_ref`) and a
rewrite checked against it (`scale_fast`, the spec's `reference = "scale_ref"`), two kernels of one
file as tests/realcode/test_kernel_versions.py has them. The original reads a `__device__` factor
and a `__device__` work count; each `__device__` variable is one object of a loaded module, shared
by both kernels wherever both are one module."""
from __future__ import annotations

ORIGINAL = """__device__ float gain = 3.0f;
__device__ int passes = 1;

__global__ void scale_ref(float* y, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float acc = 0.0f;
    for (int p = 0; p < passes; ++p) acc = fmaf(acc, 0.0f, x[i]);  // x[i] after one pass or a million
    y[i] = acc * gain;
  }
}

"""
SPEC = """/* @astra
grid = ["cdiv(n, 128)"]
block = ["128"]
reference = "scale_ref"
[sizes]
n = [8, 800, 4096]
[bench]
n = [1048576]
[args]
y = { type = "float", shape = ["n"], output = true }
x = { type = "float", shape = ["n"] }
n = "n"
*/
"""
# Wrong (y = x), and it sets the factor to 1: where the reference reads this `gain`, the
# reference computes y = x too, and the comparison passes.
REWRITES_GAIN = ORIGINAL + SPEC + """__global__ void scale_fast(float* y, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i == 0) gain = 1.0f;
  if (i < n) y[i] = x[i];
}
"""
# Right, and it raises the work count the reference loops over to PASSES: where the reference
# reads this `passes`, it runs that many passes per element (slower beside the rewrite when timed;
# on the CPU, at 2**30, past its time limit: an error that names the reference).
SLOWS_REFERENCE = ORIGINAL + SPEC + """__global__ void scale_fast(float* y, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i == 0) passes = PASSES;
  if (i < n) y[i] = x[i] * gain;
}
"""


def slows_reference(passes: int) -> str:
    return SLOWS_REFERENCE.replace("PASSES", str(passes))


def units(text: str, folder, name: str = "versions.cu"):
    """(reference unit, candidate unit, the candidate's spec) of `text`, written to `folder`/`name`."""
    from astra_cuda.compile import extract
    from astra_cuda.model import source, spec as spec_mod
    f = folder / name
    f.write_text(text)
    model = source.parse(text)
    spec = spec_mod.load(model.kernel("scale_fast"), model)
    assert spec.reference == "scale_ref"
    return extract.unit(text, str(f), "scale_ref"), extract.unit(text, str(f), "scale_fast"), spec


def checked_twice_in_one_worker(text: str, folder, backend: str, pool_name: str) -> list:
    """The verdicts of checking `text`'s rewrite twice in one worker, as the editor checks it on
    every save: whatever the first check's launches left in the worker meets the second."""
    from astra_cuda.execution import jobs, worker
    ref, cand, spec = units(text, folder)
    pool = worker.Pool(1, name=pool_name)
    try:
        return [pool.run(jobs.CheckJob(backend, ref, cand, spec, quick=True), timeout=300) for _ in range(2)]
    finally:
        pool.close()

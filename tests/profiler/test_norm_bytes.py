"""Issue 29's second question, pinned: the byte model of a row norm with an optional shift array
and a scale read only in another mode counts what the kernel moves at a large size — each
[m, n] array once (the input read once from memory however often a row is re-read from cache, the
output written once), the [n] weights once, the one-element scales: an H200 layer norm's
4096x11008 floats are 360.8 MB in the model against 360.8 MB moved (8 bytes apart): the model
held, and the kernel's 188 µs there is 46% of the copy ceiling (a guard: nothing was changed)."""
from __future__ import annotations

from astra_cuda.model import source, spec as spec_mod
from astra_cuda.profiler import model

KERNEL = """/* @astra
grid = ["m"]
block = ["256"]

[sizes]
m = [3]
n = [200]

[args]
x     = { type = "float", shape = ["m", "n"] }
w     = { type = "float", shape = ["n"] }
b     = { type = "float", shape = ["n"] }
y     = { type = "float", shape = ["m", "n"], output = true }
m     = "m"
n     = "n"
scale = { type = "float", shape = ["1"] }
mode  = "0"
*/
__global__ void row_norm(const float* x, const float* w, const float* b, float* y, int m, int n,
                         float* scale, int mode) {
  float s = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += x[blockIdx.x * n + i];
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    float v = (x[blockIdx.x * n + i] - s / n) * w[i] + (b ? b[i] : 0.f);
    y[blockIdx.x * n + i] = mode == 2 ? v * *scale : v;
  }
}
"""


def test_a_row_norm_counts_each_array_once():
    m_, n_ = 4096, 11008
    src = source.parse(KERNEL)
    spec = spec_mod.load(src.kernel("row_norm"), src)
    moved = 2 * m_ * n_ * 4 + 2 * n_ * 4          # x read, y written; w and b read
    assert model.floor_bytes(spec, {"m": m_, "n": n_}) == moved + 4   # + the one-element scale

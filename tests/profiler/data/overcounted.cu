// Two kernels whose specs overcount the bytes they move, as inferred specs of public kernels do
// (tests/profiler/test_model_floor*.py): `pairs_price` works on float2 pairs of five arrays the
// spec calls read-write (as the inferred spec of cuda-samples' BlackScholesGPU does), though it
// reads three and writes two; `rows_scale` reaches `n` rows of arrays the spec sizes at `size` rows
// (as apex's index_mul_2d_float does). An honest run of either beats the floor the spec's
// arrays set: the byte model is wrong there, not the kernel.
#include <cuda_runtime.h>

/* @astra
grid = ["cdiv(n / 2, 128)"]
block = ["128"]
require = ["n % 2 == 0"]

[sizes]
n = [256, 4096]

[bench]
n = [8000000]

[args]
call   = { type = "float", shape = ["n"], inout = true }
put    = { type = "float", shape = ["n"], inout = true }
price  = { type = "float", shape = ["n"], inout = true, init = "uniform(5, 30)" }
strike = { type = "float", shape = ["n"], inout = true, init = "uniform(1, 100)" }
years  = { type = "float", shape = ["n"], inout = true, init = "uniform(0.25, 10)" }
n      = "n"
*/
__global__ void pairs_price(float* call, float* put, float* price, float* strike, float* years, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n / 2) {
    const float2 s = reinterpret_cast<const float2*>(price)[i];
    const float2 k = reinterpret_cast<const float2*>(strike)[i];
    const float2 t = reinterpret_cast<const float2*>(years)[i];
    const float dx = k.x * expf(-0.02f * t.x), dy = k.y * expf(-0.02f * t.y);
    reinterpret_cast<float2*>(call)[i] = make_float2(fmaxf(s.x - dx, 0.0f), fmaxf(s.y - dy, 0.0f));
    reinterpret_cast<float2*>(put)[i] = make_float2(fmaxf(dx - s.x, 0.0f), fmaxf(dy - s.y, 0.0f));
  }
}

/* @astra
grid = ["n"]
block = ["256"]
require = ["n <= size"]

[sizes]
size = [64, 300]
fea = [128, 1000]
n = [16, 64]
V = [64]

[bench]
size = [5504]
fea = [11008]
n = [256]
V = [6288]

[args]
out = { type = "float", shape = ["size", "fea"], inout = true }
in1 = { type = "float", shape = ["V", "fea"] }
in2 = { type = "float", shape = ["size", "fea"] }
idx = { type = "int64", shape = ["n"], init = "randint(0, V)" }
n   = "n"
fea = "fea"
*/
__global__ void rows_scale(float* out, const float* in1, const float* in2, const long long* idx, int n, int fea) {
  const long long row = blockIdx.x;
  const long long src = idx[row];
  for (int j = threadIdx.x; j < fea; j += blockDim.x)
    out[row * fea + j] = in1[src * fea + j] * in2[row * fea + j];
}

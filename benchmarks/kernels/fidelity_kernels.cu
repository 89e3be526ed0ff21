// Kernels for the CPU-vs-GPU fidelity check (benchmarks/fidelity.py): each exercises a family
// of device features whose CPU emulation must match the GPU — warp shuffles, shared-memory
// trees, vector loads, half2/bf16 math, fast-math intrinsics, integer atomics.
#include <cuda_fp16.h>
#include <cuda_bf16.h>

/* @astra
grid = ["rows"]
block = ["256"]
[sizes]
rows = [64]
n = [1000, 4096]
[args]
out = { type = "float", shape = ["rows", "n"], output = true }
x   = { type = "float", shape = ["rows", "n"] }
w   = { type = "float", shape = ["n"], init = "uniform(0.5, 1.5)" }
n   = "n"
*/
__global__ void warp_shuffle_rmsnorm(float* __restrict__ out, const float* __restrict__ x,
                                     const float* __restrict__ w, int n) {
  __shared__ float partial[32];
  const float* row = x + (size_t)blockIdx.x * n;
  float s = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += row[i] * row[i];
  for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = s;
  __syncthreads();
  if (threadIdx.x < 32) {
    float v = threadIdx.x < blockDim.x / 32 ? partial[threadIdx.x] : 0.f;
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    if (threadIdx.x == 0) partial[0] = rsqrtf(v / n + 1e-6f);
  }
  __syncthreads();
  const float inv = partial[0];
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[(size_t)blockIdx.x * n + i] = row[i] * inv * w[i];
}

/* @astra
grid = ["rows"]
block = ["128"]
require = ["n % 4 == 0"]
[sizes]
rows = [128]
n = [1024, 8192]
[args]
out = { type = "float", shape = ["rows"], output = true }
x   = { type = "float", shape = ["rows", "n"] }
n   = "n"
*/
__global__ void float4_row_sum(float* __restrict__ out, const float* __restrict__ x, int n) {
  __shared__ float red[128];
  const float4* row = reinterpret_cast<const float4*>(x + (size_t)blockIdx.x * n);
  float s = 0.f;
  for (int i = threadIdx.x; i < n / 4; i += blockDim.x) {
    float4 v = row[i];
    s += v.x + v.y + v.z + v.w;
  }
  red[threadIdx.x] = s;
  __syncthreads();
  for (int stride = 64; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) red[threadIdx.x] += red[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = red[0];
}

/* @astra
grid = ["num_tokens"]
block = ["min(d / 2, 1024)"]
require = ["d % 2 == 0"]
[sizes]
num_tokens = [64]
d = [1024, 4096]
[args]
out   = { type = "half", shape = ["num_tokens", "d"], output = true }
input = { type = "half", shape = ["num_tokens", "2 * d"] }
d     = "d"
*/
__global__ void half2_fast_silu(__half* __restrict__ out, const __half* __restrict__ input, int d) {
  const __half2* x = reinterpret_cast<const __half2*>(input + (size_t)blockIdx.x * 2 * d);
  const __half2* y = reinterpret_cast<const __half2*>(input + (size_t)blockIdx.x * 2 * d + d);
  __half2* o = reinterpret_cast<__half2*>(out + (size_t)blockIdx.x * d);
  for (int i = threadIdx.x; i < d / 2; i += blockDim.x) {
    const float2 a = __half22float2(x[i]);
    const float2 b = __half22float2(y[i]);
    const float s0 = __fdividef(a.x, 1.f + __expf(-a.x)) * b.x;
    const float s1 = __fdividef(a.y, 1.f + __expf(-a.y)) * b.y;
    o[i] = __floats2half2_rn(s0, s1);
  }
}

/* @astra
grid = ["num_tokens"]
block = ["min(d, 1024)"]
[sizes]
num_tokens = [64]
d = [1000, 4096]
[args]
out   = { type = "bfloat16", shape = ["num_tokens", "d"], output = true }
input = { type = "bfloat16", shape = ["num_tokens", "2 * d"] }
d     = "d"
*/
__global__ void bf16_silu_and_mul(__nv_bfloat16* __restrict__ out, const __nv_bfloat16* __restrict__ input,
                                  int d) {
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    const float x = __bfloat162float(input[(size_t)blockIdx.x * 2 * d + i]);
    const float y = __bfloat162float(input[(size_t)blockIdx.x * 2 * d + d + i]);
    out[(size_t)blockIdx.x * d + i] = __float2bfloat16(x / (1.0f + expf(-x)) * y);
  }
}

/* @astra
grid = ["rows"]
block = ["256"]
[sizes]
rows = [64]
n = [1000, 4096]
[args]
out = { type = "float", shape = ["rows", "n"], output = true }
x   = { type = "float", shape = ["rows", "n"], init = "uniform(-20, 20)" }
n   = "n"
*/
__global__ void row_softmax(float* __restrict__ out, const float* __restrict__ x, int n) {
  __shared__ float red[32];
  const float* row = x + (size_t)blockIdx.x * n;
  float m = -INFINITY;
  for (int i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, row[i]);
  for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
  __syncthreads();
  m = red[0];
  for (int k = 1; k < blockDim.x / 32; ++k) m = fmaxf(m, red[k]);
  __syncthreads();
  float s = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += expf(row[i] - m);
  for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
  __syncthreads();
  s = 0.f;
  for (int k = 0; k < blockDim.x / 32; ++k) s += red[k];
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[(size_t)blockIdx.x * n + i] = expf(row[i] - m) / s;
}

/* @astra
grid = ["cdiv(n, 256)"]
block = ["256"]
[sizes]
n = [100000, 1000000]
bins = [64]
[args]
hist = { type = "int32", shape = ["bins"], inout = true, init = "zeros" }
x    = { type = "int32", shape = ["n"], init = "randint(0, 64)" }
n    = "n"
*/
__global__ void atomic_histogram(int* __restrict__ hist, const int* __restrict__ x, int n) {
  __shared__ int local[64];
  if (threadIdx.x < 64) local[threadIdx.x] = 0;
  __syncthreads();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(&local[x[i] & 63], 1);
  __syncthreads();
  if (threadIdx.x < 64) atomicAdd(&hist[threadIdx.x], local[threadIdx.x]);
}

// A row's root-mean-square scaling, written for the tests: one block a row, the sum of squares in a
// block-stride loop, a shared-memory tree across the block, then a second loop over the same row
// that reads it again, scales it and writes it elsewhere. Rows of 5000 floats pass the default
// 16 KiB row buffer, so the gate's sizes reach the fallback to global memory.
#include <cuda_runtime.h>

/* @astra
grid = ["rows"]
block = ["128"]

[sizes]
rows = [1, 3, 17]
cols = [1, 100, 1000, 5000]

[bench]
rows = [4096]
cols = [4096]

[args]
y    = { type = "float", shape = ["rows", "cols"], output = true }
x    = { type = "float", shape = ["rows", "cols"] }
g    = { type = "float", shape = ["cols"] }
eps  = 1e-5
cols = "cols"
*/
__global__ void row_rms_scale(float* __restrict__ y, const float* __restrict__ x, const float* __restrict__ g,
                              float eps, int cols) {
  __shared__ float partial[128];
  __shared__ float scale;
  const long long base = (long long)blockIdx.x * cols;
  float acc = 0.0f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    const float v = x[base + j];
    acc += v * v;
  }
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) scale = rsqrtf(partial[0] / cols + eps);
  __syncthreads();
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    y[base + j] = x[base + j] * scale * g[j];
  }
}

// Per-row int8 quantization in the form of bitsandbytes' kInt8VectorQuant: one block per row, a
// block-stride pass for the row's absolute maximum (read with __ldcs through a pointer to the
// row of a __restrict__ input), a block reduction, then a second pass that quantizes the row.
// Written here for the tests.
#include <cuda_runtime.h>
#define THREADS 128

/* @astra
grid = ["rows"]
block = ["128"]

[sizes]
rows = [1, 7]
cols = [1, 130, 1001]

[bench]
rows = [8192]
cols = [11008]

[args]
A        = { type = "float", shape = ["rows", "cols"] }
out      = { type = "int8", shape = ["rows", "cols"], output = true }
rowStats = { type = "float", shape = ["rows"], output = true }
rows     = "rows"
cols     = "cols"
*/
__global__ void row_int8_quant(float* __restrict__ A, signed char* out, float* rowStats, int rows, int cols) {
  __shared__ float smax[THREADS];
  const float* row_data = A + (blockIdx.x * cols);
  float m = 1e-8f;
  for (int i = threadIdx.x; i < cols; i += THREADS) {
    const float a = fabsf(__ldcs(&(row_data[i])));
    m = fmaxf(m, a);
  }
  smax[threadIdx.x] = m;
  __syncthreads();
  for (int s = THREADS / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) smax[threadIdx.x] = fmaxf(smax[threadIdx.x], smax[threadIdx.x + s]);
    __syncthreads();
  }
  const float scale = 127.0f / smax[0];
  if (threadIdx.x == 0) rowStats[blockIdx.x] = smax[0];
  for (int i = threadIdx.x; i < cols; i += THREADS) {
    float val = row_data[i];
    out[blockIdx.x * cols + i] = (signed char)__float2int_rn(val * scale);
  }
}

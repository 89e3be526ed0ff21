// A residual add then a root-mean-square scaling of each row, in place, written for the tests:
// the first pass adds `h` into `res`, writes the sum back to `res` and sums its squares; the
// second reads `res` again and writes the scaled row over `h`. What the second pass must see is
// the sum the first pass wrote, not what `res` held before.
#include <cuda_runtime.h>

/* @astra
grid = ["rows"]
block = ["64"]

[sizes]
rows = [1, 5]
cols = [1, 70, 999, 3000]

[bench]
rows = [4096]
cols = [2048]

[args]
h    = { type = "float", shape = ["rows", "cols"], inout = true }
res  = { type = "float", shape = ["rows", "cols"], inout = true }
g    = { type = "float", shape = ["cols"] }
eps  = 1e-6
cols = "cols"
*/
__global__ void add_rms_rows(float* __restrict__ h, float* __restrict__ res, const float* __restrict__ g, float eps,
                             int cols) {
  __shared__ float partial[64];
  __shared__ float scale;
  const int row = blockIdx.x;
  float acc = 0.0f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    const int k = row * cols + j;
    float s = h[k] + res[k];
    res[k] = s;
    acc += s * s;
  }
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) partial[threadIdx.x] += partial[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) scale = rsqrtf(partial[0] / cols + eps);
  __syncthreads();
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    const int k = row * cols + j;
    h[k] = res[k] * scale * g[j];
  }
}

// RMSNorm, one block per row with an inline shared-memory tree reduction, fp16 (half types).
#include <cuda_fp16.h>

/* @astra
grid = ["rows"]
block = ["256"]

[sizes]
rows = [1, 3, 40]
cols = [1, 100, 2048]

[bench]
rows = [16384]
cols = [4096]

[args]
out = { type = "half", shape = ["rows", "cols"], output = true }
x = { type = "half", shape = ["rows", "cols"] }
w = { type = "half", shape = ["cols"] }
cols = "cols"
eps = "1e-6"
*/
__global__ void rmsnorm_kernel(half* out, const half* x, const half* w, int cols, float eps) {
  __shared__ float partial[256];
  const int row = blockIdx.x;
  const int tid = threadIdx.x;
  float ss = 0.0f;
  for (int i = tid; i < cols; i += blockDim.x) {
    const float v = __half2float(x[row * cols + i]);
    ss += v * v;
  }
  partial[tid] = ss;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (tid < stride) {
      partial[tid] += partial[tid + stride];
    }
    __syncthreads();
  }
  const float inv = rsqrtf(partial[0] / cols + eps);
  for (int i = tid; i < cols; i += blockDim.x) {
    out[row * cols + i] = __float2half(__half2float(x[row * cols + i]) * inv * __half2float(w[i]));
  }
}

void rmsnorm(half* out, const half* x, const half* w, int rows, int cols, float eps) {
  rmsnorm_kernel<<<rows, 256>>>(out, x, w, cols, eps);
}

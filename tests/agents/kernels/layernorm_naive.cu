// LayerNorm forward, one thread per row (the naive kernel-development version), fp32:
// mean and rstd per row saved for the backward pass. The tolerance is a reduction's: sums over
// hundreds of floats, added in another order by a parallel version, differ from the sequential
// ones by more than fp32's default on large inputs.
#include <cuda_runtime.h>

/* @astra
grid = ["cdiv(N, 256)"]
block = ["256"]

[sizes]
N = [1, 3, 67]
C = [5, 33, 768]

[bench]
N = [32768]
C = [768]

[args]
out  = { type = "float", shape = ["N", "C"], output = true, atol = 1e-3, rtol = 1e-3 }
mean = { type = "float", shape = ["N"], output = true, atol = 1e-3, rtol = 1e-3 }
rstd = { type = "float", shape = ["N"], output = true, atol = 1e-3, rtol = 1e-3 }
inp  = { type = "float", shape = ["N", "C"] }
weight = { type = "float", shape = ["C"] }
bias = { type = "float", shape = ["C"] }
N = "N"
C = "C"
*/
__global__ void layernorm_forward_kernel1(float* out, float* mean, float* rstd, const float* inp,
                                          const float* weight, const float* bias, int N, int C) {
  int idx = blockIdx.x * blockDim.x + threadIdx.x;
  float eps = 1e-5f;
  if (idx < N) {
    const float* x = inp + idx * C;
    float m = 0.0f;
    for (int i = 0; i < C; i++) {
      m += x[i];
    }
    m = m / C;
    float v = 0.0f;
    for (int i = 0; i < C; i++) {
      float xshift = x[i] - m;
      v += xshift * xshift;
    }
    v = v / C;
    float s = 1.0f / sqrtf(v + eps);
    float* out_idx = out + idx * C;
    for (int i = 0; i < C; i++) {
      float n = (s * (x[i] - m));
      float o = n * weight[i] + bias[i];
      out_idx[i] = o;
    }
    mean[idx] = m;
    rstd[idx] = s;
  }
}

void layernorm_forward1(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                        const float* bias, int N, int C) {
  const int block_size = 256;
  const int grid_size = (N + block_size - 1) / block_size;
  layernorm_forward_kernel1<<<grid_size, block_size>>>(out, mean, rstd, inp, weight, bias, N, C);
}

// Softmax over the last dimension, one thread per row, fp32: the three-pass version (max by
// comparison, exp and sum, normalise in place) and the online (single-pass max and sum) version.
#include <cuda_runtime.h>
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif

/* @astra
grid = ["cdiv(N, 128)"]
block = ["128"]

[sizes]
N = [1, 5, 130]
C = [3, 32, 1000]

[bench]
N = [16384]
C = [1024]

[args]
out = { type = "float", shape = ["N", "C"], output = true }
inp = { type = "float", shape = ["N", "C"] }
N = "N"
C = "C"
*/
__global__ void softmax_forward_kernel1(float* out, const float* inp, int N, int C) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < N) {
    const float* inp_row = inp + i * C;
    float* out_row = out + i * C;
    float maxval = -INFINITY;
    for (int j = 0; j < C; j++) {
      if (inp_row[j] > maxval) {
        maxval = inp_row[j];
      }
    }
    float sum = 0.0f;
    for (int j = 0; j < C; j++) {
      out_row[j] = expf(inp_row[j] - maxval);
      sum += out_row[j];
    }
    for (int j = 0; j < C; j++) {
      out_row[j] /= sum;
    }
  }
}

void softmax_forward1(float* out, const float* inp, int N, int C) {
  const int block_size = 128;
  softmax_forward_kernel1<<<(N + block_size - 1) / block_size, block_size>>>(out, inp, N, C);
}

/* @astra
grid = ["cdiv(N, 128)"]
block = ["128"]

[sizes]
N = [1, 5, 130]
C = [3, 32, 1000]

[bench]
N = [16384]
C = [1024]

[args]
out = { type = "float", shape = ["N", "C"], output = true }
inp = { type = "float", shape = ["N", "C"] }
N = "N"
C = "C"
*/
__global__ void softmax_forward_online_kernel1(float* out, const float* inp, int N, int C) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < N) {
    const float* inp_row = inp + i * C;
    float* out_row = out + i * C;
    float maxval = -INFINITY;
    float sum = 0.0f;
    for (int j = 0; j < C; j++) {
      float maxval_prev = maxval;
      if (inp_row[j] > maxval) {
        maxval = inp_row[j];
        sum = sum * expf(maxval_prev - maxval) + 1.0f;
      } else {
        sum += expf(inp_row[j] - maxval);
      }
    }
    for (int j = 0; j < C; j++) {
      out_row[j] = expf(inp_row[j] - maxval) / sum;
    }
  }
}

void softmax_forward_online1(float* out, const float* inp, int N, int C) {
  const int block_size = 128;
  softmax_forward_online_kernel1<<<(N + block_size - 1) / block_size, block_size>>>(out, inp, N, C);
}

// SiLU-and-multiply, the gated activation of LLaMA-style MLPs:
//   out[t, i] = silu(input[t, i]) * input[t, d + i],   silu(x) = x / (1 + exp(-x))
// Written in the structure of SGLang's activation kernel: one block per token, a strided
// loop over the hidden dimension, scalar loads, expf and a division, math in float.
// A plain stand-alone file: the host code at the bottom runs it once.
#include <cuda_fp16.h>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

__device__ __forceinline__ float silu(float x) {
  return x / (1.0f + expf(-x));
}

/* @astra
grid = ["num_tokens"]
block = ["min(d, 1024)"]

[sizes]
num_tokens = [1, 7, 333]
d = [128, 1001, 4096]

[bench]
num_tokens = [4096]
d = [11008, 13824, 28672]

[args]
out   = { type = "half", shape = ["num_tokens", "d"], output = true }
input = { type = "half", shape = ["num_tokens", "2 * d"] }
d     = "d"
*/
__global__ void silu_and_mul(__half* out, const __half* input, const int d) {
  const int64_t token = blockIdx.x;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float x = __half2float(input[token * 2 * d + i]);
    const float y = __half2float(input[token * 2 * d + d + i]);
    out[token * d + i] = __float2half(silu(x) * y);
  }
}

int main() {
  const int num_tokens = 16, d = 4096;
  __half *out, *input;
  cudaMalloc(&out, sizeof(__half) * num_tokens * d);
  cudaMalloc(&input, sizeof(__half) * num_tokens * 2 * d);
  silu_and_mul<<<num_tokens, d < 1024 ? d : 1024>>>(out, input, d);
  cudaError_t err = cudaDeviceSynchronize();
  printf("silu_and_mul: %s\n", cudaGetErrorString(err));
  cudaFree(out);
  cudaFree(input);
  return err == cudaSuccess ? EXIT_SUCCESS : EXIT_FAILURE;
}

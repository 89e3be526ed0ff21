// GELU forward in the kernel-development style: a typedef'd element type, one element per
// thread, a host launcher with ceil_div, no __restrict__.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

typedef __nv_bfloat16 floatX;

__host__ __device__ inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

#define GELU_SCALING_FACTOR 0.7978845608f

/* @astra
grid = ["cdiv(N, 256)"]
block = ["256"]

[sizes]
N = [1, 7, 1000, 4099]

[bench]
N = [33554432]

[args]
out = { type = "bfloat16", shape = ["N"], output = true }
inp = { type = "bfloat16", shape = ["N"] }
N = "N"
*/
__global__ void gelu_forward_kernel1(floatX* out, const floatX* inp, int N) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < N) {
    float xi = (float)inp[i];
    float cube = 0.044715f * xi * xi * xi;
    out[i] = (floatX)(0.5f * xi * (1.0f + tanhf(GELU_SCALING_FACTOR * (xi + cube))));
  }
}

void gelu_forward1(floatX* out, const floatX* inp, int N) {
  const int block_size = 256;
  const int grid_size = ceil_div(N, block_size);
  gelu_forward_kernel1<<<grid_size, block_size>>>(out, inp, N);
}

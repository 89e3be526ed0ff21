// A whole-array sum in its naive form: one thread per element, each adding into the same place
// (the shape of a squared-norm kernel in training code). Written here for the tests.
#include <cuda_runtime.h>

/* @astra
grid = ["cdiv(n, 256)"]
block = ["256"]

[sizes]
n = [1, 255, 257, 4097, 100003]

[bench]
n = [16777216]

[args]
out = { type = "float", shape = ["1"], inout = true, init = "zeros", atol = 1e-2, rtol = 1e-4 }
x   = { type = "float", shape = ["n"] }
n   = "n"
*/
__global__ void squared_norm_kernel(float* out, const float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    const float v = x[i];
    atomicAdd(out, v * v);
  }
}

void squared_norm(float* out, const float* x, int n) {
  squared_norm_kernel<<<(n + 255) / 256, 256>>>(out, x, n);
}

// A byte histogram in its naive form: one thread per element, each adding one into its bin in
// global memory (the shape of the introductory histogram kernels). Written here for the tests.
#include <cuda_runtime.h>

/* @astra
grid = ["cdiv(n, 256)"]
block = ["256"]

[sizes]
n = [1, 255, 257, 4097, 100003]

[bench]
n = [16777216]

[args]
hist = { type = "uint32", shape = ["256"], inout = true, init = "zeros" }
data = { type = "uint8", shape = ["n"], init = "randint(0, 256)" }
n    = "n"
*/
__global__ void histogram256_kernel(unsigned int* hist, const unsigned char* data, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(&hist[data[i]], 1u);
}

void histogram256(unsigned int* hist, const unsigned char* data, int n) {
  histogram256_kernel<<<(n + 255) / 256, 256>>>(hist, data, n);
}

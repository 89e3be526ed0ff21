// A whole-array sum's first pass in the form of the CUDA samples' reduce6 (its path for sizes
// that are not a power of two) on the capped grid its host code launches: a grid-stride sum per
// thread, a shared-memory tree, one partial sum per block. Written here for the tests.
#include <cuda_runtime.h>

/* @astra
grid = ["64"]
block = ["256"]

[sizes]
n = [1, 300, 4097, 100003, 400009]   # the last: 24 steps a thread, so 16 at a trip run too

[bench]
n = [16777216]

[args]
in  = { type = "float", shape = ["n"] }
out = { type = "float", shape = ["64"], output = true }
n   = "n"
*/
__global__ void block_partial_sums(const float* in, float* out, unsigned int n) {
  __shared__ float sdata[256];
  float sum = 0.0f;
  for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) sum += in[i];
  sdata[threadIdx.x] = sum;
  __syncthreads();
  for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sdata[threadIdx.x] += sdata[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = sdata[0];
}

// A whole-array sum's first pass written as real reductions write it (the CUDA samples' cg_reduce
// and reduce6): the index declared first, stepped at the end of a `while` body. The index's last
// value is stored too, so a rewrite must leave it as the loop did. Written here for the tests.
#include <cuda_runtime.h>

/* @astra
grid = ["48"]
block = ["128"]

[sizes]
n = [1, 300, 4097, 100003]

[bench]
n = [16777216]

[args]
in   = { type = "int32", shape = ["n"] }
out  = { type = "int32", shape = ["48"], output = true }
last = { type = "int32", shape = ["6144"], output = true }
n    = "n"
*/
__global__ void grid_sum_while(int* in, int* out, int* last, unsigned int n) {
  __shared__ int sdata[128];
  int sum = 0;
  {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int stride = blockDim.x * gridDim.x;
    while (i < n) {
      sum += in[i];
      i += stride;
    }
    last[blockIdx.x * blockDim.x + threadIdx.x] = (int)(i - n);
  }
  sdata[threadIdx.x] = sum;
  __syncthreads();
  for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sdata[threadIdx.x] += sdata[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = sdata[0];
}

// A 256-bin byte histogram in the form of the CUDA samples' histogram256Kernel: per-warp
// sub-histograms in shared memory, a grid-stride loop over 32-bit words (written with
// UMAD/UMUL macros) on a fixed grid, one partial histogram per block. Written here for the tests.
#include <cuda_runtime.h>
#define BINS 256
#define WARPS 6
#define UMUL(a, b) ((a) * (b))
#define UMAD(a, b, c) (UMUL((a), (b)) + (c))

__device__ inline void add_byte(unsigned int* warp_hist, unsigned int b) { atomicAdd(warp_hist + b, 1u); }

/* @astra
grid = ["30"]
block = ["192"]

[sizes]
n = [1, 100, 4097, 100003]

[bench]
n = [67108864]

[args]
partial = { type = "uint32", shape = ["7680"], output = true }
data    = { type = "uint32", shape = ["n"] }
n       = "n"
*/
__global__ void histogram_words(unsigned int* partial, unsigned int* data, unsigned int n) {
  __shared__ unsigned int s_hist[WARPS * BINS];
  unsigned int* warp_hist = s_hist + (threadIdx.x >> 5) * BINS;
  for (unsigned int i = threadIdx.x; i < WARPS * BINS; i += blockDim.x) s_hist[i] = 0;
  __syncthreads();
  for (unsigned int pos = UMAD(blockIdx.x, blockDim.x, threadIdx.x); pos < n; pos += UMUL(blockDim.x, gridDim.x)) {
    unsigned int word = data[pos];
    add_byte(warp_hist, word & 0xFFu);
    add_byte(warp_hist, (word >> 8) & 0xFFu);
    add_byte(warp_hist, (word >> 16) & 0xFFu);
    add_byte(warp_hist, (word >> 24) & 0xFFu);
  }
  __syncthreads();
  for (unsigned int bin = threadIdx.x; bin < BINS; bin += blockDim.x) {
    unsigned int sum = 0;
    for (unsigned int w = 0; w < WARPS; w++) sum += s_hist[bin + w * BINS];
    partial[blockIdx.x * BINS + bin] = sum;
  }
}

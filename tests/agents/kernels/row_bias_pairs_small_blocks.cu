// Adds one bias row to every row of a matrix, two floats per thread (one float2), each thread
// walking a chunk of ROWS_PER_BLOCK rows; blocks of one warp whose flat index names the block size
// through a #define and is scaled by the pair: tiny blocks, as some fp16 add kernels launch them.
// Written here for the tests.
#include <cuda_runtime.h>

#define THREADS_X 32
#define ROWS_PER_BLOCK 4

/* @astra
grid = ["(width + 32 * 2 - 1) / (32 * 2)", "(height + 4 - 1) / 4"]
block = ["32"]
require = ["width % 2 == 0"]

[sizes]
height = [1, 5, 33]
width = [2, 66, 1030]

[bench]
height = [8192]
width = [8196]

[args]
dest   = { type = "float", shape = ["height", "width"], inout = true }
bias   = { type = "float", shape = ["width"] }
height = "height"
width  = "width"
*/
__global__ void row_bias_pairs_kernel(float* __restrict__ dest, const float* __restrict__ bias, int height,
                                      int width) {
  int col = blockIdx.x * THREADS_X * 2 + threadIdx.x * 2;
  if (col >= width) return;
  int first = blockIdx.y * ROWS_PER_BLOCK;
  int last = min(first + ROWS_PER_BLOCK, height);
  float2 b = *reinterpret_cast<const float2*>(bias + col);
  for (int y = first; y < last; ++y) {
    float2* p = reinterpret_cast<float2*>(dest + (size_t)y * width + col);
    float2 v = *p;
    v.x += b.x;
    v.y += b.y;
    *p = v;
  }
}

void row_bias_pairs(float* dest, const float* bias, int height, int width) {
  dim3 block, grid;
  block.x = THREADS_X;
  grid.x = (width + THREADS_X * 2 - 1) / (THREADS_X * 2);
  grid.y = (height + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
  row_bias_pairs_kernel<<<grid, block>>>(dest, bias, height, width);
}

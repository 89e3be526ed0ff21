// A transpose that already stages each 32 x 32 tile in shared memory (both global sides
// coalesced) but reads the tile down its columns without padding: the 32 threads of a warp hit
// one bank. Blocks of 32 x 8 threads, each moving 4 rows. Written here for the tests.
#include <cuda_runtime.h>

#define TILE 32
#define ROWS 8

/* @astra
grid = ["cols / 32", "rows / 32"]
block = ["32", "8"]
require = ["rows % 32 == 0", "cols % 32 == 0"]

[sizes]
rows = [32, 96]
cols = [32, 64]

[bench]
rows = [8192]
cols = [8192]

[args]
out  = { type = "float", shape = ["cols", "rows"], output = true }
in   = { type = "float", shape = ["rows", "cols"] }
rows = "rows"
cols = "cols"
*/
__global__ void transpose_tile_kernel(float* out, const float* in, int rows, int cols) {
  __shared__ float tile[TILE][TILE];
  const int lane = threadIdx.x;
  int x = blockIdx.x * TILE + lane;
  int y = blockIdx.y * TILE + threadIdx.y;
  for (int j = 0; j < TILE; j += ROWS) tile[threadIdx.y + j][lane] = in[(y + j) * cols + x];
  __syncthreads();
  x = blockIdx.y * TILE + lane;
  y = blockIdx.x * TILE + threadIdx.y;
  for (int j = 0; j < TILE; j += ROWS) out[(y + j) * rows + x] = tile[lane][threadIdx.y + j];
}

void transpose(float* out, const float* in, int rows, int cols) {
  transpose_tile_kernel<<<dim3(cols / TILE, rows / TILE), dim3(TILE, ROWS)>>>(out, in, rows, cols);
}

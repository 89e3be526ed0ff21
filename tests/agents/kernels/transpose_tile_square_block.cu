// A transpose that already stages each 32 x 32 tile in a padded shared array, but with one
// thread per element: blocks of 32 x 32 threads, each thread loads one element, waits, and stores
// one. Partial tiles at the right and bottom edges are guarded. Written here for the tests.
#include <cuda_runtime.h>

/* @astra
grid = ["cdiv(w, 32)", "cdiv(h, 32)"]
block = ["32", "32"]
instantiate = "<float>"

[sizes]
h = [1, 33, 70]
w = [5, 32, 97]

[bench]
h = [8192]
w = [8192]

[args]
dst = { type = "float", shape = ["w", "h"], output = true }
src = { type = "float", shape = ["h", "w"] }
h   = "h"
w   = "w"
*/
template <typename T>
__global__ void tile_square_kernel(T* dst, const T* src, const int h, const int w) {
  __shared__ T buf[32][33];
  const int lx = threadIdx.x;
  const int ly = threadIdx.y;
  int col = blockIdx.x * 32 + lx;
  int row = blockIdx.y * 32 + ly;
  if (col < w && row < h) {
    buf[lx][ly] = src[row * w + col];
  }
  __syncthreads();
  col = blockIdx.x * 32 + ly;
  row = blockIdx.y * 32 + lx;
  if (col < w && row < h) {
    dst[col * h + row] = buf[ly][lx];
  }
}

template <typename T>
void tile_square(T* dst, const T* src, int h, int w) {
  dim3 grid((w + 31) / 32, (h + 31) / 32);
  dim3 block(32, 32);
  tile_square_kernel<<<grid, block>>>(dst, src, h, w);
}

template void tile_square(float* dst, const float* src, int h, int w);

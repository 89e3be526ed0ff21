// Packs each row's floats into saturated bytes, four per thread (one float4 read, one uchar4
// write), in blocks of one warp along a row and one grid row per matrix row: tiny blocks, as some
// cache-conversion kernels launch them. Written here for the tests.
#include <cuda_runtime.h>

#define WARP 32

/* @astra
grid = ["(cols / 4 + 31) / 32", "rows"]
block = ["32"]
require = ["cols % 4 == 0"]

[sizes]
rows = [1, 3, 40]
cols = [4, 100, 516]

[bench]
rows = [16384]
cols = [4096]

[args]
out  = { type = "uint8", shape = ["rows", "cols"], output = true }
in   = { type = "float", shape = ["rows", "cols"] }
rows = "rows"
cols = "cols"
*/
__global__ void pack_bytes_kernel(unsigned char* __restrict__ out, const float* __restrict__ in, int rows, int cols) {
  int c = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
  int r = blockIdx.y;
  if (c >= cols) return;
  const float4 v = *reinterpret_cast<const float4*>(in + (size_t)r * cols + c);
  uchar4 o;
  o.x = (unsigned char)fminf(fmaxf(v.x * 16.0f + 128.0f, 0.0f), 255.0f);
  o.y = (unsigned char)fminf(fmaxf(v.y * 16.0f + 128.0f, 0.0f), 255.0f);
  o.z = (unsigned char)fminf(fmaxf(v.z * 16.0f + 128.0f, 0.0f), 255.0f);
  o.w = (unsigned char)fminf(fmaxf(v.w * 16.0f + 128.0f, 0.0f), 255.0f);
  *reinterpret_cast<uchar4*>(out + (size_t)r * cols + c) = o;
}

void pack_bytes(unsigned char* out, const float* in, int rows, int cols) {
  dim3 block(WARP);
  dim3 grid((cols / 4 + WARP - 1) / WARP, rows);
  pack_bytes_kernel<<<grid, block>>>(out, in, rows, cols);
}

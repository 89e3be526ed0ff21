// Masked softmax with one warp per row, in the form of the Megatron-style fused softmax kernels:
// each lane keeps its share of the row in a register array filled by an unrolled loop whose every
// step reads four halves and four mask bytes under a bounds guard, then a warp max, a warp sum
// and an unrolled store loop under the same guard. Written here for the tests.
#include <cuda_fp16.h>
#include <stdint.h>

#define MAX_COLS 512

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffff, v, o);
  return v;
}

/* @astra
grid = ["rows / 4"]
block = ["32", "4"]
require = ["rows % 4 == 0", "cols % 4 == 0", "cols <= 512", "cols >= 4"]

[sizes]
rows = [4, 12]
cols = [512, 260, 4]

[bench]
rows = [16384]
cols = [512]

[args]
dst   = { type = "half", shape = ["rows", "cols"], output = true }
src   = { type = "half", shape = ["rows", "cols"] }
mask  = { type = "uint8", shape = ["rows", "cols"] }
scale = 0.5
rows  = "rows"
cols  = "cols"
*/
__global__ void warp_softmax_masked(__half* dst, const __half* src, const uint8_t* mask, float scale, int rows,
                                    int cols) {
  constexpr int LANES = 32;
  constexpr int PER_LANE = MAX_COLS / LANES;
  constexpr int VEC = 4;
  int row = blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= rows) return;
  int lane = threadIdx.x;
  const __half* in = src + (long)row * cols + VEC * lane;
  const uint8_t* m = mask + (long)row * cols + VEC * lane;
  __half* out = dst + (long)row * cols + VEC * lane;

  float vals[PER_LANE];
#pragma unroll
  for (int it = 0; it < PER_LANE; it += VEC) {
    int col = VEC * lane + it * LANES;
    if (col < cols) {
      __half x[VEC];
      uint8_t keep[VEC];
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        x[k] = in[it * LANES + k];
        keep[k] = m[it * LANES + k];
      }
#pragma unroll
      for (int k = 0; k < VEC; ++k) vals[it + k] = keep[k] != 1 ? __half2float(x[k]) * scale : -10000.0f;
    } else {
#pragma unroll
      for (int k = 0; k < VEC; ++k) vals[it + k] = -INFINITY;
    }
  }
  float mx = vals[0];
#pragma unroll
  for (int i = 1; i < PER_LANE; ++i) mx = fmaxf(mx, vals[i]);
  mx = warp_max(mx);
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) {
    vals[i] = __expf(vals[i] - mx);
    sum += vals[i];
  }
  sum = warp_sum(sum);
#pragma unroll
  for (int it = 0; it < PER_LANE; it += VEC) {
    int col = VEC * lane + it * LANES;
    if (col < cols) {
#pragma unroll
      for (int k = 0; k < VEC; ++k) out[it * LANES + k] = __float2half(vals[it + k] / sum);
    } else {
      break;
    }
  }
}

// Row RMS normalization over 4-wide vectors: one block per row, a block-stride pass for the row's
// sum of squares, a block reduction, then a second pass that scales each vector lane by lane in a
// fixed-trip `#pragma unroll` loop and multiplies by a __restrict__ weight row. The pattern of
// block-per-row norm kernels that are already vectorized. Written here for the tests.
#include <cuda_runtime.h>
#define THREADS 64

/* @astra
grid = ["rows"]
block = ["64"]

[sizes]
rows = [1, 5]
cols4 = [1, 67, 300]

[bench]
rows = [4096]
cols4 = [2752]

[args]
x      = { type = "float", shape = ["rows", "cols4 * 4"] }
w      = { type = "float", shape = ["cols4 * 4"] }
y      = { type = "float", shape = ["rows", "cols4 * 4"], output = true }
cols4  = "cols4"
*/
__global__ void row_rms_vec4(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
                             int cols4) {
  __shared__ float partial[THREADS];
  const float4* xr = reinterpret_cast<const float4*>(x) + blockIdx.x * cols4;
  const float4* wv = reinterpret_cast<const float4*>(w);
  float4* yr = reinterpret_cast<float4*>(y) + blockIdx.x * cols4;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < cols4; i += blockDim.x) {
    float4 v = xr[i];
    ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
  }
  partial[threadIdx.x] = ss;
  __syncthreads();
  for (int s = THREADS / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  const float inv = rsqrtf(partial[0] / (cols4 * 4) + 1e-6f);
  for (int i = threadIdx.x; i < cols4; i += blockDim.x) {
    float4 a = xr[i];
    float4 b = wv[i];
    float o[4];
    const float* av = &a.x;
    const float* bv = &b.x;
#pragma unroll
    for (int j = 0; j < 4; j++) {
      o[j] = av[j] * inv * bv[j];
    }
    yr[i] = make_float4(o[0], o[1], o[2], o[3]);
  }
}

// SiLU-and-multiply in the form the Astra paper started from: a template over the element
// type, a grid-stride loop over rows with at most 256 blocks of 128 threads, runtime row and
// element strides, scalar loads and math in float.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <algorithm>

template <typename T>
__device__ __forceinline__ float to_float(T v) { return static_cast<float>(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v) { return static_cast<T>(v); }

__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

/* @astra
grid = ["min(num_tokens, 256)"]
block = ["min(d, 128)"]
instantiate = "<__nv_bfloat16>"

[sizes]
num_tokens = [1, 5, 300]
d = [64, 1001, 4096]

[bench]
num_tokens = [4096]
d = [11008, 13824]

[args]
out = { type = "bfloat16", shape = ["num_tokens", "d"], output = true }
input = { type = "bfloat16", shape = ["num_tokens", "2 * d"] }
out_stride = "d"
in_stride = "2 * d"
elem_stride = "1"
num_tokens = "num_tokens"
d = "d"
*/
template <typename scalar_t>
__global__ void silu_and_mul_kernel(scalar_t* out, const scalar_t* input, const int64_t out_stride,
                                    const int64_t in_stride, const int64_t elem_stride, const int num_tokens,
                                    const int d) {
  for (int64_t token = blockIdx.x; token < num_tokens; token += gridDim.x) {
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
      const float x = to_float(input[token * in_stride + i * elem_stride]);
      const float y = to_float(input[token * in_stride + (d + i) * elem_stride]);
      out[token * out_stride + i * elem_stride] = from_float<scalar_t>(silu(x) * y);
    }
  }
}

template <typename scalar_t>
void silu_and_mul(scalar_t* out, const scalar_t* input, int num_tokens, int d) {
  dim3 grid(std::min(num_tokens, 256));
  dim3 block(std::min(d, 128));
  silu_and_mul_kernel<scalar_t><<<grid, block>>>(out, input, d, 2 * d, 1, num_tokens, d);
}

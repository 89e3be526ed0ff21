// SiLU-and-multiply over fp16 in the form the Astra paper's baseline has (its silu_and_mul):
// grid-stride rows, at most 256 blocks of 128 threads, element strides taken at run time.
#include <cuda_fp16.h>
#include <algorithm>

/* @astra
grid = ["min(num_tokens, 256)"]
block = ["min(d, 128)"]

[sizes]
num_tokens = [1, 3, 300]
d = [64, 1001, 4096]

[bench]
num_tokens = [4096]
d = [11008]

[args]
out = { type = "float16", shape = ["num_tokens", "d"], output = true }
input = { type = "float16", shape = ["num_tokens", "2 * d"] }
out_stride = "d"
in_stride = "2 * d"
elem_stride = "1"
num_tokens = "num_tokens"
d = "d"
*/
__global__ void silu_mul_strided(__half* out, const __half* input, const long out_stride, const long in_stride,
                                 const long elem_stride, const int num_tokens, const int d) {
  for (long token = blockIdx.x; token < num_tokens; token += gridDim.x) {
    for (long i = threadIdx.x; i < d; i += blockDim.x) {
      const float x = __half2float(input[token * in_stride + i * elem_stride]);
      const float y = __half2float(input[token * in_stride + (d + i) * elem_stride]);
      out[token * out_stride + i * elem_stride] = __float2half(x / (1.0f + expf(-x)) * y);
    }
  }
}

void silu_mul(__half* out, const __half* input, int num_tokens, int d) {
  silu_mul_strided<<<std::min(num_tokens, 256), std::min(d, 128)>>>(out, input, d, 2 * d, 1, num_tokens, d);
}

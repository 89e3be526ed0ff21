// int8 quantize and dequantize with one float scale per group of elements, one element per thread
// (the naive form of weight/activation quantization kernels). Written here for the tests.
#include <cuda_fp16.h>
#include <cstdint>

/* @astra
grid = ["cdiv(n, 256)"]
block = ["256"]

[sizes]
n = [128, 4096, 65536]
group = [128]

[bench]
n = [16777216]
group = [128]

[args]
out = { type = "half", shape = ["n"], output = true }
q = { type = "int8", shape = ["n"], init = "randint(-127, 128)" }
scale = { type = "float", shape = ["cdiv(n, group)"] }
n = "n"
group = "group"
*/
__global__ void dequant_int8_kernel(__half* out, const int8_t* q, const float* scale, int n, int group) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2half(static_cast<float>(q[i]) * scale[i / group]);
}

void dequant(__half* out, const int8_t* q, const float* scale, int n, int group) {
  dequant_int8_kernel<<<(n + 255) / 256, 256>>>(out, q, scale, n, group);
}

/* @astra
grid = ["cdiv(n, 256)"]
block = ["256"]

[sizes]
n = [128, 4096, 65536]
group = [128]

[bench]
n = [16777216]
group = [128]

[args]
q = { type = "int8", shape = ["n"], output = true }
x = { type = "half", shape = ["n"] }
scale = { type = "float", shape = ["cdiv(n, group)"] }
n = "n"
group = "group"
*/
__global__ void quant_int8_kernel(int8_t* q, const __half* x, const float* scale, int n, int group) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    const float v = __half2float(x[i]) / scale[i / group];
    q[i] = static_cast<int8_t>(fmaxf(-127.0f, fminf(127.0f, rintf(v))));
  }
}

void quant(int8_t* q, const __half* x, const float* scale, int n, int group) {
  quant_int8_kernel<<<(n + 255) / 256, 256>>>(q, x, scale, n, group);
}

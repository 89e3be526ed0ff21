// Per-chunk int8 quantization written for the tests: one thread a chunk of eight floats, the
// chunk's absmax from registers, then eight 1-byte stores in a fixed-count loop (the pattern
// `pack_stores` writes as one 8-byte store). The second kernel writes its bytes one place past an
// aligned start and a dequantizer writes eight halves from a local array: the wide store's
// alignment check must fall back to single stores in the first and take 16 bytes in the second.
#include <cuda_fp16.h>
#include <cstdint>

/* @astra
grid = ["cdiv(chunks, 128)"]
block = ["128"]

[sizes]
chunks = [1, 5, 300]

[bench]
chunks = [1048576]

[args]
x      = { type = "float", shape = ["chunks * 8"] }
q      = { type = "int8", shape = ["chunks * 8"], output = true }
s      = { type = "float", shape = ["chunks"], output = true }
chunks = "chunks"
*/
__global__ void chunk_quant_int8(const float* __restrict__ x, int8_t* __restrict__ q, float* __restrict__ s,
                                 int chunks) {
  constexpr int kPer = 8;
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= chunks) return;
  float v[kPer];
  float amax = 0.0f;
  for (int j = 0; j < kPer; ++j) {
    v[j] = x[(long long)c * kPer + j];
    amax = fmaxf(amax, fabsf(v[j]));
  }
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  s[c] = amax / 127.0f;
  int8_t* out = q + (long long)c * kPer;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const float r = v[j] * inv;
    out[j] = (int8_t)__float2int_rn(r);
  }
}

/* @astra
grid = ["cdiv(chunks, 128)"]
block = ["128"]

[sizes]
chunks = [1, 5, 300]

[bench]
chunks = [1048576]

[args]
x      = { type = "float", shape = ["chunks * 8"] }
q      = { type = "int8", shape = ["chunks * 8 + 1"], output = true }
chunks = "chunks"
*/
__global__ void chunk_quant_shifted(const float* __restrict__ x, int8_t* __restrict__ q, int chunks) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= chunks) return;
  float v[8];
  float amax = 1e-6f;
  for (int j = 0; j < 8; ++j) {
    v[j] = x[c * 8 + j];
    amax = fmaxf(amax, fabsf(v[j]));
  }
  if (c == 0) q[0] = 0;
  for (int j = 0; j < 8; ++j) q[1 + c * 8 + j] = (int8_t)__float2int_rn(v[j] * (127.0f / amax));
}

/* @astra
grid = ["cdiv(chunks, 64)"]
block = ["64"]

[sizes]
chunks = [1, 5, 300]

[bench]
chunks = [1048576]

[args]
out    = { type = "half", shape = ["chunks * 8"], output = true }
q      = { type = "int8", shape = ["chunks * 8"], init = "randint(-127, 128)" }
scale  = { type = "float", shape = ["chunks"] }
chunks = "chunks"
*/
__global__ void chunk_dequant_half(__half* __restrict__ out, const int8_t* __restrict__ q,
                                   const float* __restrict__ scale, int chunks) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= chunks) return;
  __half staged[16];
  for (int j = 0; j < 8; ++j) staged[j] = __float2half(scale[c] * (float)q[c * 8 + j]);
  __half* dst = out + c * 8;
  for (int i = 0; i < 8; ++i) {
    *(dst + i) = staged[i];
  }
}

#pragma once
// Stand-in for c10::BFloat16 (Astra's tests).
#include <cuda_bf16.h>
namespace c10 {
struct alignas(2) BFloat16 {
  unsigned short x;
  BFloat16() = default;
  __host__ __device__ BFloat16(float f) : x(__bfloat16_as_ushort(__float2bfloat16(f))) {}
  __host__ __device__ operator float() const { return __bfloat162float(__ushort_as_bfloat16(x)); }
};
}  // namespace c10

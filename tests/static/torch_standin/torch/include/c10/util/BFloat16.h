#pragma once
// Stand-in for c10::BFloat16 (Astra's tests). For a host compiler: the upper 16 bits of the
// float, rounded to nearest even (NaN kept quiet), as torch converts on the host.
#if defined(__CUDACC__)
#include <cuda_bf16.h>
#endif
namespace c10 {
struct alignas(2) BFloat16 {
  unsigned short x;
  BFloat16() = default;
#if defined(__CUDACC__)
  __host__ __device__ BFloat16(float f) : x(__bfloat16_as_ushort(__float2bfloat16(f))) {}
  __host__ __device__ operator float() const { return __bfloat162float(__ushort_as_bfloat16(x)); }
#else
  BFloat16(float f) {
    unsigned u;
    __builtin_memcpy(&u, &f, 4);
    x = (u & 0x7fffffffu) > 0x7f800000u ? (unsigned short)((u >> 16) | 0x40u)
                                        : (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  operator float() const {
    unsigned u = (unsigned)x << 16;
    float f;
    __builtin_memcpy(&f, &u, 4);
    return f;
  }
#endif
};
}  // namespace c10

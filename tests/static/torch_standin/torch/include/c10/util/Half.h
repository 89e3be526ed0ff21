#pragma once
// Stand-in for c10::Half (Astra's tests): 16 bits. Under nvcc, converted through cuda_fp16.h's
// intrinsics, which torch's own flags (-D__CUDA_NO_HALF_CONVERSIONS__...) leave available; for a
// host compiler (the CPU backend reads torch's types as one), through GCC's _Float16, as torch
// converts on the host (IEEE, to nearest even).
#if defined(__CUDACC__)
#include <cuda_fp16.h>
#endif
namespace c10 {
struct alignas(2) Half {
  unsigned short x;
  Half() = default;
#if defined(__CUDACC__)
  __host__ __device__ Half(float f) : x(__half_as_ushort(__float2half(f))) {}
  __host__ __device__ operator float() const { return __half2float(__ushort_as_half(x)); }
#else
  Half(float f) { _Float16 h = (_Float16)f; __builtin_memcpy(&x, &h, 2); }
  operator float() const { _Float16 h; __builtin_memcpy(&h, &x, 2); return (float)h; }
#endif
};
}  // namespace c10

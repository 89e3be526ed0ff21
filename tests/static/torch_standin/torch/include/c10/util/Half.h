#pragma once
// Stand-in for c10::Half (Astra's tests): 16 bits, converted through cuda_fp16.h's intrinsics,
// which torch's own flags (-D__CUDA_NO_HALF_CONVERSIONS__...) leave available.
#include <cuda_fp16.h>
namespace c10 {
struct alignas(2) Half {
  unsigned short x;
  Half() = default;
  __host__ __device__ Half(float f) : x(__half_as_ushort(__float2half(f))) {}
  __host__ __device__ operator float() const { return __half2float(__ushort_as_half(x)); }
};
}  // namespace c10

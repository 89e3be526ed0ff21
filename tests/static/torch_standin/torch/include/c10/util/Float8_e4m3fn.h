#pragma once
// Stand-in for c10::Float8_e4m3fn (Astra's tests): converted under nvcc only (a host compiler
// sees the storage type).
#if defined(__CUDACC__)
#include <cuda_fp8.h>
#endif
namespace c10 {
struct alignas(1) Float8_e4m3fn {
  unsigned char x;
  Float8_e4m3fn() = default;
#if defined(__CUDACC__)
  __host__ __device__ Float8_e4m3fn(float f) : x(__nv_fp8_e4m3(f).__x) {}
  __host__ __device__ operator float() const {
    __nv_fp8_e4m3 v;
    v.__x = x;
    return float(v);
  }
#endif
};
}  // namespace c10

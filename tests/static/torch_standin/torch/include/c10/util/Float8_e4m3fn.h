#pragma once
// Stand-in for c10::Float8_e4m3fn (Astra's tests).
#include <cuda_fp8.h>
namespace c10 {
struct alignas(1) Float8_e4m3fn {
  unsigned char x;
  Float8_e4m3fn() = default;
  __host__ __device__ Float8_e4m3fn(float f) : x(__nv_fp8_e4m3(f).__x) {}
  __host__ __device__ operator float() const {
    __nv_fp8_e4m3 v;
    v.__x = x;
    return float(v);
  }
};
}  // namespace c10

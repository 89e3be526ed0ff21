// The CPU build of a PyTorch extension, in place of its torch #includes (after the shim, so the
// warp intrinsics exist): torch's device utilities a kernel calls — WARP_SHFL and the other warp
// wrappers, at::numeric_limits. The element types came before the shim (astra_torch_types.h).
#pragma once
#if __has_include(<ATen/cuda/DeviceUtils.cuh>)
#include <ATen/cuda/DeviceUtils.cuh>
#endif
#if __has_include(<ATen/cuda/NumericLimits.cuh>)
#include <ATen/cuda/NumericLimits.cuh>
#endif
// Tensor accessors passed by value (`torch::PackedTensorAccessor32<T, N, torch::RestrictPtrTraits>`):
// torch's own class, laid out as nvcc lays it out (the gate writes its pointer, sizes and strides
// where the layout probe says). Torch declares RestrictPtrTraits only for a CUDA compiler, which
// this build is not: declared here as torch does, in the namespace torch's headers take it from.
#if __has_include(<ATen/core/TensorAccessor.h>)
#if __has_include(<torch/headeronly/core/TensorAccessor.h>)
#include <torch/headeronly/core/TensorAccessor.h>
#if !defined(__CUDACC__) && !defined(__HIPCC__)
namespace torch::headeronly {
template <typename T>
struct RestrictPtrTraits {
  using PtrType = T* __restrict__;
};
}  // namespace torch::headeronly
namespace at {
using torch::headeronly::RestrictPtrTraits;
}  // namespace at
#endif
#elif !defined(__CUDACC__) && !defined(__HIPCC__)
namespace at {
template <typename T>
struct RestrictPtrTraits {
  typedef T* __restrict__ PtrType;
};
}  // namespace at
#endif
#include <ATen/core/TensorAccessor.h>
namespace torch {
using namespace at;   // as torch/types.h makes at's names torch's
}  // namespace torch
#endif

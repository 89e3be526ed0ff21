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
// torch's own class, as nvcc's compile of the file reads it (this build sees NVRTC's macros,
// `__CUDACC__` among them, so torch declares RestrictPtrTraits); the gate writes its pointer,
// sizes and strides where the layout probe says they lie.
#if __has_include(<ATen/core/TensorAccessor.h>)
#include <ATen/core/TensorAccessor.h>
namespace torch {
using namespace at;   // as torch/types.h makes at's names torch's
}  // namespace torch
#endif

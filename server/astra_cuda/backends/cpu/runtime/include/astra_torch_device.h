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

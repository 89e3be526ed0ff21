#pragma once
// Stand-in for torch's warp helpers (Astra's tests): WARP_SHFL as torch's device code calls it.
template <typename T>
__device__ __forceinline__ T WARP_SHFL(T value, int srcLane, int width = warpSize, unsigned int mask = 0xffffffff) {
  return __shfl_sync(mask, value, srcLane, width);
}

// RMSNorm kernels of the extension: plain, and fused with the residual add (in place).
#include <torch/all.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <type_traits>

#include "dispatch_utils.h"

namespace ext {

// Sum over the block: warp shuffles, then one partial per warp in shared memory.
template <typename T>
__device__ __forceinline__ T block_sum(T value) {
  __shared__ T partials[32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_xor_sync(0xffffffffu, value, offset);
  if (lane == 0) partials[warp] = value;
  __syncthreads();
  const int warps = (blockDim.x + 31) >> 5;
  value = lane < warps ? partials[lane] : T(0);
  if (warp == 0) {
    for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_xor_sync(0xffffffffu, value, offset);
    if (lane == 0) partials[0] = value;
  }
  __syncthreads();
  T total = partials[0];
  __syncthreads();
  return total;
}

template <typename scalar_t>
__global__ void rms_norm_kernel(scalar_t* __restrict__ out, const scalar_t* __restrict__ input,
                                const scalar_t* __restrict__ weight, const float epsilon, const int num_tokens,
                                const int hidden_size) {
  __shared__ float s_variance;
  float variance = 0.0f;
  for (int idx = threadIdx.x; idx < hidden_size; idx += blockDim.x) {
    const float x = (float)input[blockIdx.x * hidden_size + idx];
    variance += x * x;
  }
  variance = block_sum<float>(variance);
  if (threadIdx.x == 0) s_variance = rsqrtf(variance / hidden_size + epsilon);
  __syncthreads();
  for (int idx = threadIdx.x; idx < hidden_size; idx += blockDim.x) {
    const float x = (float)input[blockIdx.x * hidden_size + idx];
    out[blockIdx.x * hidden_size + idx] = (scalar_t)(x * s_variance * (float)weight[idx]);
  }
}

// Fused residual add + RMSNorm: input <- norm(input + residual) * weight, residual <- input + residual.
// Widths divisible by 8 take a vectorized path (eight elements per step).
template <typename scalar_t, int width>
__global__ typename std::enable_if<(width > 1), void>::type
fused_add_rms_norm_kernel(scalar_t* __restrict__ input, scalar_t* __restrict__ residual,
                          const scalar_t* __restrict__ weight, const float epsilon, const int num_tokens,
                          const int hidden_size) {
  __shared__ float s_variance;
  const int vec_hidden = hidden_size / width;
  float variance = 0.0f;
  for (int idx = threadIdx.x; idx < vec_hidden; idx += blockDim.x) {
    for (int k = 0; k < width; ++k) {
      const int i = blockIdx.x * hidden_size + idx * width + k;
      float z = (float)input[i] + (float)residual[i];
      residual[i] = (scalar_t)z;
      variance += z * z;
    }
  }
  variance = block_sum<float>(variance);
  if (threadIdx.x == 0) s_variance = rsqrtf(variance / hidden_size + epsilon);
  __syncthreads();
  for (int idx = threadIdx.x; idx < vec_hidden; idx += blockDim.x) {
    for (int k = 0; k < width; ++k) {
      const int i = blockIdx.x * hidden_size + idx * width + k;
      input[i] = (scalar_t)((float)residual[i] * s_variance * (float)weight[idx * width + k]);
    }
  }
}

template <typename scalar_t, int width>
__global__ typename std::enable_if<(width == 1), void>::type
fused_add_rms_norm_kernel(scalar_t* __restrict__ input, scalar_t* __restrict__ residual,
                          const scalar_t* __restrict__ weight, const float epsilon, const int num_tokens,
                          const int hidden_size) {
  __shared__ float s_variance;
  float variance = 0.0f;
  for (int idx = threadIdx.x; idx < hidden_size; idx += blockDim.x) {
    const int i = blockIdx.x * hidden_size + idx;
    float z = (float)input[i] + (float)residual[i];
    residual[i] = (scalar_t)z;
    variance += z * z;
  }
  variance = block_sum<float>(variance);
  if (threadIdx.x == 0) s_variance = rsqrtf(variance / hidden_size + epsilon);
  __syncthreads();
  for (int idx = threadIdx.x; idx < hidden_size; idx += blockDim.x) {
    const int i = blockIdx.x * hidden_size + idx;
    input[i] = (scalar_t)((float)residual[i] * s_variance * (float)weight[idx]);
  }
}

}  // namespace ext

void rms_norm(torch::Tensor& out, torch::Tensor& input, torch::Tensor& weight, double epsilon) {
  int hidden_size = input.size(-1);
  int num_tokens = input.numel() / hidden_size;
  dim3 grid(num_tokens);
  dim3 block(std::min(hidden_size, 1024));
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  EXT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "rms_norm_kernel", [&] {
    ext::rms_norm_kernel<scalar_t><<<grid, block, 0, stream>>>(
        out.data_ptr<scalar_t>(), input.data_ptr<scalar_t>(), weight.data_ptr<scalar_t>(), epsilon, num_tokens,
        hidden_size);
  });
}

#define LAUNCH_FUSED_ADD_RMS_NORM(WIDTH)                                                              \
  EXT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "fused_add_rms_norm_kernel", [&] {                 \
    ext::fused_add_rms_norm_kernel<scalar_t, WIDTH><<<grid, block, 0, stream>>>(                      \
        input.data_ptr<scalar_t>(), residual.data_ptr<scalar_t>(), weight.data_ptr<scalar_t>(), epsilon, \
        num_tokens, hidden_size);                                                                     \
  });

void fused_add_rms_norm(torch::Tensor& input, torch::Tensor& residual, torch::Tensor& weight, double epsilon) {
  int hidden_size = input.size(-1);
  int num_tokens = input.numel() / hidden_size;
  dim3 grid(num_tokens);
  dim3 block(std::min(hidden_size, 1024));
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  if (hidden_size % 8 == 0) {
    LAUNCH_FUSED_ADD_RMS_NORM(8);
  } else {
    LAUNCH_FUSED_ADD_RMS_NORM(1);
  }
}

// Gated activations for the extension: out = act(x) * y where the input row is [x | y].
#include <torch/all.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cmath>

#include "dispatch_utils.h"

namespace ext {

template <typename T>
__device__ __forceinline__ T silu_kernel(const T& x) {
  // x * sigmoid(x), computed in fp32
  float f = (float)x;
  return (T)(f / (1.0f + expf(-f)));
}

template <typename T>
__device__ __forceinline__ T gelu_tanh_kernel(const T& x) {
  const float f = (float)x;
  const float inner = 0.7978845608f * (f + 0.044715f * f * f * f);
  return (T)(0.5f * f * (1.0f + tanhf(inner)));
}

// One block per token; threads stride over the d output channels.
template <typename scalar_t, scalar_t (*ACT_FN)(const scalar_t&)>
__global__ void act_and_mul_kernel(scalar_t* __restrict__ out, const scalar_t* __restrict__ input, const int d) {
  const int64_t token_idx = blockIdx.x;
  for (int64_t idx = threadIdx.x; idx < d; idx += blockDim.x) {
    const scalar_t x = EXT_LDG(&input[token_idx * 2 * d + idx]);
    const scalar_t y = EXT_LDG(&input[token_idx * 2 * d + d + idx]);
    out[token_idx * d + idx] = (scalar_t)((float)ACT_FN(x) * (float)y);
  }
}

}  // namespace ext

#define LAUNCH_ACTIVATION_GATE_KERNEL(KERNEL)                                                  \
  int d = input.size(-1) / 2;                                                                  \
  int64_t num_tokens = input.numel() / input.size(-1);                                         \
  dim3 grid(num_tokens);                                                                       \
  dim3 block(std::min(d, 1024));                                                               \
  const c10::cuda::OptionalCUDAGuard device_guard(input);                                      \
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();                                \
  EXT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "act_and_mul_kernel", [&] {                 \
    ext::act_and_mul_kernel<scalar_t, KERNEL<scalar_t>><<<grid, block, 0, stream>>>(           \
        out.data_ptr<scalar_t>(), input.data_ptr<scalar_t>(), d);                              \
  });

void silu_and_mul(torch::Tensor& out, torch::Tensor& input) {
  LAUNCH_ACTIVATION_GATE_KERNEL(ext::silu_kernel);
}

void gelu_tanh_and_mul(torch::Tensor& out, torch::Tensor& input) {
  LAUNCH_ACTIVATION_GATE_KERNEL(ext::gelu_tanh_kernel);
}

// Fused residual add + RMSNorm, in place, as a PyTorch extension (the structure of SGLang's
// fused_add_rmsnorm):
//   residual <- input + residual
//   input    <- residual / sqrt(mean(residual^2) + eps) * weight
// One block per token; the sum of squares is reduced through a shared-memory tree.
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_fp16.h>

#define MAX_THREADS 1024

__device__ float block_reduce_sum(float value, float* scratch) {
  const int tid = threadIdx.x;
  scratch[tid] = value;
  __syncthreads();
  // A tree over MAX_THREADS slots that is correct for any blockDim.x <= MAX_THREADS.
  for (int stride = MAX_THREADS / 2; stride > 0; stride >>= 1) {
    if (tid < stride && tid + stride < blockDim.x) {
      scratch[tid] += scratch[tid + stride];
    }
    __syncthreads();
  }
  return scratch[0];
}

/* @astra
grid = ["num_tokens"]
block = ["min(hidden_size, 1024)"]

[sizes]
num_tokens = [1, 5, 129]
hidden_size = [64, 1000, 4096]

[bench]
num_tokens = [4096]
hidden_size = [4096, 5120, 8192]

[args]
input       = { type = "half", shape = ["num_tokens", "hidden_size"], inout = true }
residual    = { type = "half", shape = ["num_tokens", "hidden_size"], inout = true }
weight      = { type = "half", shape = ["hidden_size"], init = "uniform(0.5, 1.5)" }
epsilon     = 1e-6
num_tokens  = "num_tokens"
hidden_size = "hidden_size"
*/
__global__ void fused_add_rmsnorm_kernel(__half* __restrict__ input, __half* __restrict__ residual,
                                         const __half* __restrict__ weight, const float epsilon,
                                         const int num_tokens, const int hidden_size) {
  __shared__ float scratch[MAX_THREADS];
  __shared__ float inv_rms;
  const int64_t row = blockIdx.x;
  float sum_sq = 0.0f;
  for (int i = threadIdx.x; i < hidden_size; i += blockDim.x) {
    const int64_t idx = row * hidden_size + i;
    float x = __half2float(input[idx]) + __half2float(residual[idx]);
    const __half rounded = __float2half(x);
    residual[idx] = rounded;
    x = __half2float(rounded);
    sum_sq += x * x;
  }
  const float total = block_reduce_sum(sum_sq, scratch);
  if (threadIdx.x == 0) {
    inv_rms = rsqrtf(total / hidden_size + epsilon);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < hidden_size; i += blockDim.x) {
    const int64_t idx = row * hidden_size + i;
    const float x = __half2float(residual[idx]);
    input[idx] = __float2half(x * inv_rms * __half2float(weight[i]));
  }
}

void fused_add_rmsnorm(torch::Tensor& input, torch::Tensor& residual, torch::Tensor& weight, double epsilon) {
  TORCH_CHECK(input.is_cuda() && input.is_contiguous(), "input must be a contiguous CUDA tensor");
  TORCH_CHECK(input.sizes() == residual.sizes(), "input and residual must have the same shape");
  TORCH_CHECK(input.scalar_type() == at::ScalarType::Half, "fp16 only");
  const int hidden_size = input.size(-1);
  const int num_tokens = input.numel() / hidden_size;
  const dim3 grid(num_tokens);
  const dim3 block(std::min(hidden_size, MAX_THREADS));
  auto stream = c10::cuda::getCurrentCUDAStream();
  fused_add_rmsnorm_kernel<<<grid, block, 0, stream>>>(
      reinterpret_cast<__half*>(input.data_ptr<at::Half>()),
      reinterpret_cast<__half*>(residual.data_ptr<at::Half>()),
      reinterpret_cast<const __half*>(weight.data_ptr<at::Half>()), static_cast<float>(epsilon), num_tokens,
      hidden_size);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("fused_add_rmsnorm", &fused_add_rmsnorm, "Fused residual add + RMSNorm (CUDA)");
}

// AdamW step, fp32, one parameter per thread, four arrays (three updated in place).
#include <cuda_runtime.h>

__device__ inline float lerp(float start, float end, float weight) {
  return fmaf(weight, end, fmaf(-weight, start, start));
}

/* @astra
grid = ["cdiv(n, 512)"]
block = ["512"]

[sizes]
n = [1, 9, 1000, 4097]

[bench]
n = [16777216]

[args]
params_memory = { type = "float", shape = ["n"], inout = true }
grads_memory  = { type = "float", shape = ["n"] }
m_memory      = { type = "float", shape = ["n"], inout = true, init = "normal(0, 0.1)" }
v_memory      = { type = "float", shape = ["n"], inout = true, init = "uniform(0, 0.01)" }
num_parameters = "n"
learning_rate = "0.001"
beta1 = "0.9"
beta2 = "0.999"
beta1_correction = "0.1"
beta2_correction = "0.001"
eps = "1e-8"
weight_decay = "0.01"
*/
__global__ void adamw_kernel(float* params_memory, const float* grads_memory, float* m_memory, float* v_memory,
                             long num_parameters, float learning_rate, float beta1, float beta2,
                             float beta1_correction, float beta2_correction, float eps, float weight_decay) {
  long i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= num_parameters) return;
  float grad = grads_memory[i];
  float m = m_memory[i];
  float v = v_memory[i];
  m = lerp(grad, m, beta1);
  m_memory[i] = m;
  v = lerp(grad * grad, v, beta2);
  v_memory[i] = v;
  m /= beta1_correction;
  v /= beta2_correction;
  params_memory[i] -= learning_rate * (m / (sqrtf(v) + eps) + weight_decay * params_memory[i]);
}

void adamw(float* p, const float* g, float* m, float* v, long n, float lr, float b1, float b2, float c1,
           float c2, float eps, float wd) {
  const int block_size = 512;
  const int num_blocks = (int)((n + block_size - 1) / block_size);
  adamw_kernel<<<num_blocks, block_size>>>(p, g, m, v, n, lr, b1, b2, c1, c2, eps, wd);
}

/*
AdamW parameter update, fp32 master weights, two versions.
  nvcc -O3 -lcublas adamw.cu -o adamw && ./adamw 2
version 1: one parameter per thread
version 2: grid-stride loop, moments updated with lerp, fewer blocks
*/
#include "common.h"

void adamw_cpu(float* params, const float* grads, float* m, float* v, long n, float lr, float beta1,
               float beta2, float b1c, float b2c, float eps, float wd) {
    for (long i = 0; i < n; i++) {
        m[i] = beta1 * m[i] + (1.0f - beta1) * grads[i];
        v[i] = beta2 * v[i] + (1.0f - beta2) * grads[i] * grads[i];
        float mh = m[i] / b1c, vh = v[i] / b2c;
        params[i] -= lr * (mh / (sqrtf(vh) + eps) + wd * params[i]);
    }
}

__global__ void adamw_kernel1(float* params_memory, const float* grads_memory, float* m_memory, float* v_memory,
                              long num_parameters, float learning_rate, float beta1, float beta2,
                              float beta1_correction, float beta2_correction, float eps, float weight_decay) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= num_parameters) return;
    float grad = grads_memory[i];
    m_memory[i] = beta1 * m_memory[i] + (1.0f - beta1) * grad;
    v_memory[i] = beta2 * v_memory[i] + (1.0f - beta2) * grad * grad;
    float m_hat = m_memory[i] / beta1_correction;
    float v_hat = v_memory[i] / beta2_correction;
    params_memory[i] -= learning_rate * (m_hat / (sqrtf(v_hat) + eps) + weight_decay * params_memory[i]);
}

__device__ inline float lerp(float from, float to, float weight) {
    return fmaf(weight, to, fmaf(-weight, from, from));
}

__global__ void adamw_kernel2(float* __restrict__ params_memory, const float* __restrict__ grads_memory,
                              float* __restrict__ m_memory, float* __restrict__ v_memory, long num_parameters,
                              float learning_rate, float beta1, float beta2, float beta1_correction,
                              float beta2_correction, float eps, float weight_decay) {
    for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < num_parameters; i += (long)blockDim.x * gridDim.x) {
        float grad = grads_memory[i];
        float m = lerp(grad, m_memory[i], beta1);
        float v = lerp(grad * grad, v_memory[i], beta2);
        m_memory[i] = m;
        v_memory[i] = v;
        m /= beta1_correction;
        v /= beta2_correction;
        float p = params_memory[i];
        params_memory[i] = p - learning_rate * (m / (sqrtf(v) + eps) + weight_decay * p);
    }
}

void adamw1(float* params, const float* grads, float* m, float* v, long n, int t, float lr, float beta1,
            float beta2, float eps, float wd) {
    const int block_size = 512;
    const int num_blocks = ceil_div(n, (long)block_size);
    float b1c = 1.0f - powf(beta1, t);
    float b2c = 1.0f - powf(beta2, t);
    adamw_kernel1<<<num_blocks, block_size>>>(params, grads, m, v, n, lr, beta1, beta2, b1c, b2c, eps, wd);
    CUDA_CHECK(cudaGetLastError());
}

void adamw2(float* params, const float* grads, float* m, float* v, long n, int t, float lr, float beta1,
            float beta2, float eps, float wd) {
    const int block_size = 512;
    const int num_blocks = ceil_div(n, (long)block_size * 4);
    float b1c = 1.0f - powf(beta1, t);
    float b2c = 1.0f - powf(beta2, t);
    adamw_kernel2<<<num_blocks, block_size>>>(params, grads, m, v, n, lr, beta1, beta2, b1c, b2c, eps, wd);
    CUDA_CHECK(cudaGetLastError());
}

int main(int argc, char** argv) {
    setup_main();
    const long n = 1L << 24;
    int version = argc > 1 ? atoi(argv[1]) : 2;
    float* params = random_floats(n);
    float* grads = random_floats(n);
    float* m = (float*)calloc(n, sizeof(float));
    float* v = (float*)calloc(n, sizeof(float));
    float *d_params, *d_grads, *d_m, *d_v;
    CUDA_CHECK(cudaMalloc(&d_params, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_grads, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_m, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_v, n * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(d_params, params, n * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_grads, grads, n * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(d_m, 0, n * sizeof(float)));
    CUDA_CHECK(cudaMemset(d_v, 0, n * sizeof(float)));
    if (version == 1) adamw1(d_params, d_grads, d_m, d_v, n, 1, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f);
    else adamw2(d_params, d_grads, d_m, d_v, n, 1, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f);
    adamw_cpu(params, grads, m, v, n, 1e-3f, 0.9f, 0.999f, 0.1f, 0.001f, 1e-8f, 0.0f);
    expect_close(d_params, params, n, "params", 1e-5f);
    printf("ok\n");
    return 0;
}

/*
LayerNorm forward over rows of C channels, fp32, two versions; also writes each row's mean and
reciprocal standard deviation for the backward pass.
  nvcc -O3 -lcublas layernorm_forward.cu -o layernorm_forward && ./layernorm_forward 2
version 1: one thread per row
version 2: one warp per row, reductions with cooperative groups
*/
#include "common.h"
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>

namespace cg = cooperative_groups;

void layernorm_forward_cpu(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                           const float* bias, int N, int C) {
    for (int r = 0; r < N; r++) {
        const float* x = inp + r * C;
        float m = 0.0f, v = 0.0f;
        for (int i = 0; i < C; i++) m += x[i];
        m /= C;
        for (int i = 0; i < C; i++) v += (x[i] - m) * (x[i] - m);
        float s = 1.0f / sqrtf(v / C + 1e-5f);
        for (int i = 0; i < C; i++) out[r * C + i] = (x[i] - m) * s * weight[i] + bias[i];
        mean[r] = m;
        rstd[r] = s;
    }
}

__global__ void layernorm_forward_kernel1(float* out, float* mean, float* rstd,
                                          const float* inp, const float* weight, const float* bias,
                                          int N, int C) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    float eps = 1e-5f;
    if (idx < N) {
        const float* x = inp + idx * C;
        float m = 0.0f;
        for (int i = 0; i < C; i++) {
            m += x[i];
        }
        m = m / C;
        float v = 0.0f;
        for (int i = 0; i < C; i++) {
            float shift = x[i] - m;
            v += shift * shift;
        }
        v = v / C;
        float s = 1.0f / sqrtf(v + eps);
        float* y = out + idx * C;
        for (int i = 0; i < C; i++) {
            y[i] = s * (x[i] - m) * weight[i] + bias[i];
        }
        mean[idx] = m;
        rstd[idx] = s;
    }
}

__global__ void layernorm_forward_kernel2(float* __restrict__ out, float* __restrict__ mean,
                                          float* __restrict__ rstd, const float* __restrict__ inp,
                                          const float* __restrict__ weight, const float* __restrict__ bias,
                                          int N, int C) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    int row = blockIdx.x * warp.meta_group_size() + warp.meta_group_rank();
    if (row >= N) {
        return;
    }
    const float* x = inp + row * C;
    float sum = 0.0f;
    for (int i = warp.thread_rank(); i < C; i += warp.size()) {
        sum += x[i];
    }
    float m = cg::reduce(warp, sum, cg::plus<float>{}) / C;
    float sq = 0.0f;
    for (int i = warp.thread_rank(); i < C; i += warp.size()) {
        float d = x[i] - m;
        sq += d * d;
    }
    float s = rsqrtf(cg::reduce(warp, sq, cg::plus<float>{}) / C + 1e-5f);
    float* y = out + row * C;
    for (int i = warp.thread_rank(); i < C; i += warp.size()) {
        y[i] = s * (__ldcs(x + i) - m) * weight[i] + bias[i];
    }
    if (warp.thread_rank() == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

void layernorm_forward1(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                        const float* bias, int N, int C, const int block_size) {
    const int grid_size = ceil_div(N, block_size);
    layernorm_forward_kernel1<<<grid_size, block_size>>>(out, mean, rstd, inp, weight, bias, N, C);
    CUDA_CHECK(cudaGetLastError());
}

void layernorm_forward2(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                        const float* bias, int N, int C, const int block_size) {
    const int grid_size = ceil_div(N * 32, block_size);
    layernorm_forward_kernel2<<<grid_size, block_size>>>(out, mean, rstd, inp, weight, bias, N, C);
    CUDA_CHECK(cudaGetLastError());
}

int main(int argc, char** argv) {
    setup_main();
    int B = 8, T = 1024, C = 768;
    int N = B * T;
    int version = argc > 1 ? atoi(argv[1]) : 2;
    float* inp = random_floats(N * C);
    float* weight = random_floats(C);
    float* bias = random_floats(C);
    float* out = (float*)malloc(N * C * sizeof(float));
    float* mean = (float*)malloc(N * sizeof(float));
    float* rstd = (float*)malloc(N * sizeof(float));
    layernorm_forward_cpu(out, mean, rstd, inp, weight, bias, N, C);
    float *d_out, *d_mean, *d_rstd, *d_inp, *d_weight, *d_bias;
    CUDA_CHECK(cudaMalloc(&d_out, N * C * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_mean, N * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_rstd, N * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_inp, N * C * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_weight, C * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_bias, C * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(d_inp, inp, N * C * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_weight, weight, C * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_bias, bias, C * sizeof(float), cudaMemcpyHostToDevice));
    for (int block_size : {32, 64, 128, 256, 512}) {
        if (version == 1) layernorm_forward1(d_out, d_mean, d_rstd, d_inp, d_weight, d_bias, N, C, block_size);
        else layernorm_forward2(d_out, d_mean, d_rstd, d_inp, d_weight, d_bias, N, C, block_size);
        expect_close(d_out, out, N * C, "out", 1e-4f);
        expect_close(d_mean, mean, N, "mean", 1e-4f);
    }
    printf("ok\n");
    return 0;
}

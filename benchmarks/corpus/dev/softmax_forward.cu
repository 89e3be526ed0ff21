/*
Row softmax, out[r, :] = softmax(inp[r, :]), fp32, two versions.
  nvcc -O3 -lcublas softmax_forward.cu -o softmax_forward && ./softmax_forward 2
version 1: one thread per row, three passes
version 2: one block per row, shared-memory reductions over warp partials
*/
#include "common.h"

void softmax_forward_cpu(float* out, const float* inp, int N, int C) {
    for (int r = 0; r < N; r++) {
        const float* x = inp + r * C;
        float m = -INFINITY;
        for (int i = 0; i < C; i++) m = fmaxf(m, x[i]);
        double s = 0.0;
        for (int i = 0; i < C; i++) s += expf(x[i] - m);
        for (int i = 0; i < C; i++) out[r * C + i] = expf(x[i] - m) / (float)s;
    }
}

__global__ void softmax_forward_kernel1(float* out, const float* inp, int N, int C) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < N) {
        const float* x = inp + row * C;
        float* y = out + row * C;
        float maxval = -INFINITY;
        for (int j = 0; j < C; j++) {
            maxval = fmaxf(maxval, x[j]);
        }
        float sum = 0.0f;
        for (int j = 0; j < C; j++) {
            y[j] = expf(x[j] - maxval);
            sum += y[j];
        }
        for (int j = 0; j < C; j++) {
            y[j] = y[j] / sum;
        }
    }
}

__global__ void softmax_forward_kernel2(float* __restrict__ out, const float* __restrict__ inp, int N, int C) {
    extern __shared__ float partial[];   // one value per warp
    int row = blockIdx.x;
    int lane = threadIdx.x % 32;
    int warp_id = threadIdx.x / 32;
    int warps = blockDim.x / 32;
    const float* x = inp + row * C;

    float m = -INFINITY;
    for (int j = threadIdx.x; j < C; j += blockDim.x) {
        m = fmaxf(m, x[j]);
    }
    m = warp_max(m);
    if (lane == 0) partial[warp_id] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
        float best = partial[0];
        for (int w = 1; w < warps; w++) best = fmaxf(best, partial[w]);
        partial[0] = best;
    }
    __syncthreads();
    float row_max = partial[0];
    __syncthreads();

    float s = 0.0f;
    for (int j = threadIdx.x; j < C; j += blockDim.x) {
        s += expf(x[j] - row_max);
    }
    s = warp_sum(s);
    if (lane == 0) partial[warp_id] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        float total = 0.0f;
        for (int w = 0; w < warps; w++) total += partial[w];
        partial[0] = total;
    }
    __syncthreads();
    float inv = 1.0f / partial[0];
    for (int j = threadIdx.x; j < C; j += blockDim.x) {
        out[row * C + j] = expf(x[j] - row_max) * inv;
    }
}

void softmax_forward1(float* out, const float* inp, int N, int C, const int block_size) {
    const int grid_size = ceil_div(N, block_size);
    softmax_forward_kernel1<<<grid_size, block_size>>>(out, inp, N, C);
    CUDA_CHECK(cudaGetLastError());
}

void softmax_forward2(float* out, const float* inp, int N, int C, const int block_size) {
    const int grid_size = N;
    size_t shared = block_size / 32 * sizeof(float);
    softmax_forward_kernel2<<<grid_size, block_size, shared>>>(out, inp, N, C);
    CUDA_CHECK(cudaGetLastError());
}

int main(int argc, char** argv) {
    setup_main();
    int B = 8, T = 1024, V = 50257;
    int N = B * T, C = V;
    int version = argc > 1 ? atoi(argv[1]) : 2;
    float* inp = random_floats((size_t)N * C, -4.0f, 4.0f);
    float* expected = (float*)malloc((size_t)N * C * sizeof(float));
    softmax_forward_cpu(expected, inp, N, C);
    float *d_out, *d_inp;
    CUDA_CHECK(cudaMalloc(&d_out, (size_t)N * C * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_inp, (size_t)N * C * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(d_inp, inp, (size_t)N * C * sizeof(float), cudaMemcpyHostToDevice));
    for (int block_size : {32, 128, 256, 512, 1024}) {
        if (version == 1) softmax_forward1(d_out, d_inp, N, C, block_size);
        else softmax_forward2(d_out, d_inp, N, C, block_size);
        expect_close(d_out, expected, (size_t)N * C, "out", 1e-5f);
    }
    printf("ok\n");
    return 0;
}

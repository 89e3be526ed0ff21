/*
Residual add, out = inp1 + inp2, bf16, two versions.
  nvcc -O3 -lcublas residual_forward.cu -o residual_forward && ./residual_forward 1
*/
#define ENABLE_BF16
#include "common.h"

void residual_forward_cpu(float* out, const float* inp1, const float* inp2, int N) {
    for (int i = 0; i < N; i++) out[i] = inp1[i] + inp2[i];
}

// one element per thread
__global__ void residual_forward_kernel1(floatX* out, const floatX* inp1, const floatX* inp2, int N) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < N) {
        out[idx] = (floatX)((float)inp1[idx] + (float)inp2[idx]);
    }
}

// eight elements per thread, streaming loads
__global__ void residual_forward_kernel2(floatX* out, const floatX* inp1, const floatX* inp2, int N) {
    int idx = (blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (idx < N) {
        x128 sum;
        x128 a = load128cs(inp1 + idx);
        x128 b = load128cs(inp2 + idx);
        for (int k = 0; k < x128::size; k++) {
            sum[k] = (floatX)((float)a[k] + (float)b[k]);
        }
        store128(out + idx, sum);
    }
}

void residual_forward1(floatX* out, const floatX* inp1, const floatX* inp2, int N, const int block_size) {
    const int grid_size = ceil_div(N, block_size);
    residual_forward_kernel1<<<grid_size, block_size>>>(out, inp1, inp2, N);
    CUDA_CHECK(cudaGetLastError());
}

void residual_forward2(floatX* out, const floatX* inp1, const floatX* inp2, int N, const int block_size) {
    const int grid_size = ceil_div(N, block_size * 8);
    residual_forward_kernel2<<<grid_size, block_size>>>(out, inp1, inp2, N);
    CUDA_CHECK(cudaGetLastError());
}

int main(int argc, char** argv) {
    setup_main();
    const int N = 8 * 1024 * 768;
    int version = argc > 1 ? atoi(argv[1]) : 2;
    float* a = random_floats(N);
    float* b = random_floats(N);
    float* expected = (float*)malloc(N * sizeof(float));
    residual_forward_cpu(expected, a, b, N);
    floatX* d_a = to_device(a, N);
    floatX* d_b = to_device(b, N);
    floatX* d_out;
    CUDA_CHECK(cudaMalloc(&d_out, N * sizeof(floatX)));
    for (int block_size : {64, 128, 256, 512, 1024}) {
        if (version == 1) residual_forward1(d_out, d_a, d_b, N, block_size);
        else residual_forward2(d_out, d_a, d_b, N, block_size);
        expect_close(d_out, expected, N, "out", 1e-2f);
    }
    printf("ok\n");
    return 0;
}

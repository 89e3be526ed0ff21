/*
GELU forward (tanh approximation), bf16, two versions.
  nvcc -O3 --use_fast_math -lcublas gelu_forward.cu -o gelu_forward && ./gelu_forward 2
version 1: one element per thread
version 2: eight bf16 per thread through one 128-bit load and store
*/
#define ENABLE_BF16
#include "common.h"

#define GELU_K0 0.7978845608f  // sqrt(2 / pi)
#define GELU_K1 0.044715f

void gelu_forward_cpu(float* out, const float* inp, int N) {
    for (int i = 0; i < N; ++i) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanhf(GELU_K0 * (x + GELU_K1 * x * x * x)));
    }
}

// ---- kernels -------------------------------------------------------------------------------------

__global__ void gelu_forward_kernel1(floatX* out, const floatX* inp, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        float x = (float)inp[i];
        float inner = GELU_K0 * (x + GELU_K1 * x * x * x);
        out[i] = (floatX)(0.5f * x * (1.0f + tanhf(inner)));
    }
}

__global__ void gelu_forward_kernel2(floatX* out, const floatX* inp, int N) {
    int i = (blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (i < N) {
        x128 result;
        x128 packet = load128cs(inp + i);
        for (int k = 0; k < x128::size; ++k) {
            float x = (float)packet[k];
            float inner = GELU_K0 * (x + GELU_K1 * x * x * x);
            result[k] = (floatX)(0.5f * x * (1.0f + tanhf(inner)));
        }
        store128(out + i, result);
    }
}

// ---- launchers -----------------------------------------------------------------------------------

void gelu_forward1(floatX* out, const floatX* inp, int N, const int block_size) {
    const int grid_size = ceil_div(N, block_size);
    gelu_forward_kernel1<<<grid_size, block_size>>>(out, inp, N);
    CUDA_CHECK(cudaGetLastError());
}

void gelu_forward2(floatX* out, const floatX* inp, int N, const int block_size) {
    const int grid_size = ceil_div(N, block_size * 8);
    gelu_forward_kernel2<<<grid_size, block_size>>>(out, inp, N);
    CUDA_CHECK(cudaGetLastError());
}

void gelu_forward(int version, floatX* out, const floatX* inp, int N, int block_size) {
    switch (version) {
        case 1: gelu_forward1(out, inp, N, block_size); break;
        case 2: gelu_forward2(out, inp, N, block_size); break;
        default: printf("no version %d\n", version); exit(EXIT_FAILURE);
    }
}

int main(int argc, char** argv) {
    setup_main();
    const int B = 8, T = 1024, C = 768;
    const int N = B * T * C;
    int version = argc > 1 ? atoi(argv[1]) : 2;

    float* inp = random_floats(N);
    float* expected = (float*)malloc(N * sizeof(float));
    gelu_forward_cpu(expected, inp, N);

    floatX* d_inp = to_device(inp, N);
    floatX* d_out;
    CUDA_CHECK(cudaMalloc(&d_out, N * sizeof(floatX)));

    int block_sizes[] = {64, 128, 256, 512, 1024};
    for (int block_size : block_sizes) {
        gelu_forward(version, d_out, d_inp, N, block_size);
        expect_close(d_out, expected, N, "out", 1e-2f);
    }
    for (int block_size : block_sizes) {
        float ms = time_ms(100, gelu_forward, version, d_out, d_inp, N, block_size);
        long bytes = 2L * N * sizeof(floatX);
        printf("block %4d | %.4f ms | %.1f GB/s\n", block_size, ms, bytes / ms / 1e6);
    }
    free(inp);
    free(expected);
    CUDA_CHECK(cudaFree(d_inp));
    CUDA_CHECK(cudaFree(d_out));
    return 0;
}

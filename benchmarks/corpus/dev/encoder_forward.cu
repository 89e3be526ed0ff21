/*
GPT-2 style encoder: out[b, t, :] = wte[token id, :] + wpe[t, :], bf16, two versions.
  nvcc -O3 -lcublas encoder_forward.cu -o encoder_forward && ./encoder_forward 2
version 1: one thread per (b, t), looping over the channels
version 2: one thread per output element
*/
#define ENABLE_BF16
#include "common.h"

__global__ void encoder_forward_kernel1(floatX* out, const int* inp, const floatX* wte, const floatX* wpe,
                                        int B, int T, int C) {
    int N = B * T;
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < N) {
        int b = idx / T;
        int t = idx % T;
        floatX* out_bt = out + b * T * C + t * C;
        int ix = inp[b * T + t];
        const floatX* wte_ix = wte + ix * C;
        const floatX* wpe_t = wpe + t * C;
        for (int i = 0; i < C; i++) {
            out_bt[i] = (floatX)((float)wte_ix[i] + (float)wpe_t[i]);
        }
    }
}

__global__ void encoder_forward_kernel2(floatX* out, const int* inp, const floatX* wte, const floatX* wpe,
                                        int B, int T, int C) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int N = B * T * C;
    if (idx < N) {
        int bt = idx / C;
        int b = bt / T;
        int t = bt % T;
        int c = idx % C;
        int ix = inp[b * T + t];
        out[b * T * C + t * C + c] = (floatX)((float)wte[ix * C + c] + (float)wpe[t * C + c]);
    }
}

void encoder_forward1(floatX* out, const int* inp, const floatX* wte, const floatX* wpe, int B, int T, int C,
                      const int block_size) {
    const int N = B * T;
    const int grid_size = ceil_div(N, block_size);
    encoder_forward_kernel1<<<grid_size, block_size>>>(out, inp, wte, wpe, B, T, C);
    CUDA_CHECK(cudaGetLastError());
}

void encoder_forward2(floatX* out, const int* inp, const floatX* wte, const floatX* wpe, int B, int T, int C,
                      const int block_size) {
    const int N = B * T * C;
    const int grid_size = ceil_div(N, block_size);
    encoder_forward_kernel2<<<grid_size, block_size>>>(out, inp, wte, wpe, B, T, C);
    CUDA_CHECK(cudaGetLastError());
}

int main(int argc, char** argv) {
    setup_main();
    int B = 8, T = 1024, C = 768, V = 50257;
    int version = argc > 1 ? atoi(argv[1]) : 2;
    int* inp = random_ints(B * T, V);
    float* wte = random_floats((size_t)V * C);
    float* wpe = random_floats((size_t)T * C);
    floatX* d_wte = to_device(wte, (size_t)V * C);
    floatX* d_wpe = to_device(wpe, (size_t)T * C);
    int* d_inp;
    floatX* d_out;
    CUDA_CHECK(cudaMalloc(&d_inp, B * T * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&d_out, (size_t)B * T * C * sizeof(floatX)));
    CUDA_CHECK(cudaMemcpy(d_inp, inp, B * T * sizeof(int), cudaMemcpyHostToDevice));
    for (int block_size : {64, 128, 256, 512}) {
        if (version == 1) encoder_forward1(d_out, d_inp, d_wte, d_wpe, B, T, C, block_size);
        else encoder_forward2(d_out, d_inp, d_wte, d_wpe, B, T, C, block_size);
    }
    printf("ok\n");
    return 0;
}

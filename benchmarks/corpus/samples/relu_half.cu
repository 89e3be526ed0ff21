// ReLU on half precision with an unsigned element count.
#include <cuda_fp16.h>

typedef unsigned int uint;

__global__ void relu_half(__half* y, const __half* x, uint n) {
    uint i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        __half v = x[i];
        y[i] = __hgt(v, __float2half(0.0f)) ? v : __float2half(0.0f);
    }
}

void relu(__half* y, const __half* x, uint n) {
    const uint block = 512;
    relu_half<<<(n + block - 1) / block, block>>>(y, x, n);
}

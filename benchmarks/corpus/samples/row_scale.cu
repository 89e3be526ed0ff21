// Scale each row of a matrix by its own factor: one block per row, threads stride over columns.
#include <cstdio>
#include <cuda_runtime.h>

#define THREADS 128

__global__ void row_scale(float* out, const float* in, const float* factors, int rows, int cols) {
    const int r = blockIdx.x;
    const float f = factors[r];
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        out[(size_t)r * cols + c] = in[(size_t)r * cols + c] * f;
    }
}

void launch_row_scale(float* out, const float* in, const float* factors, int rows, int cols, cudaStream_t s) {
    row_scale<<<rows, THREADS, 0, s>>>(out, in, factors, rows, cols);
}

// y = a * x + y over n elements with a grid-stride loop (any grid size covers any n).
#include <cstdio>
#include <cuda_runtime.h>

__global__ void saxpy(int n, float a, const float* __restrict__ x, float* __restrict__ y) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        y[i] = a * x[i] + y[i];
    }
}

int main() {
    const int n = 1 << 20;
    float *x, *y;
    cudaMallocManaged(&x, n * sizeof(float));
    cudaMallocManaged(&y, n * sizeof(float));
    for (int i = 0; i < n; i++) {
        x[i] = 1.0f;
        y[i] = 2.0f;
    }
    int device = 0, sms = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    saxpy<<<32 * sms, 256>>>(n, 2.0f, x, y);
    cudaDeviceSynchronize();
    printf("y[0] = %f\n", y[0]);
    cudaFree(x);
    cudaFree(y);
    return 0;
}

// Helpers shared by the kernel-development files in this folder: error checks, a cuBLAS
// handle, random host data, result validation, kernel timing, and the device-side bits the
// kernels use (ceil_div, warp sums, 128-bit packed loads). The element type `floatX` is chosen
// by the including file: #define ENABLE_BF16 or ENABLE_FP16 above the #include, else fp32.
#pragma once

#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

// ---- element type ------------------------------------------------------------------------------
#if defined(ENABLE_BF16)
typedef __nv_bfloat16 floatX;
#define PRECISION_NAME "bf16"
#elif defined(ENABLE_FP16)
typedef half floatX;
#define PRECISION_NAME "fp16"
#else
typedef float floatX;
#define PRECISION_NAME "fp32"
#endif

// ---- host: checking calls --------------------------------------------------------------------
static void check_cuda(cudaError_t status, const char* file, int line) {
    if (status != cudaSuccess) {
        fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(status), file, line);
        exit(EXIT_FAILURE);
    }
}
#define CUDA_CHECK(call) check_cuda((call), __FILE__, __LINE__)

static void check_cublas(cublasStatus_t status, const char* file, int line) {
    if (status != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "cuBLAS error %d at %s:%d\n", (int)status, file, line);
        exit(EXIT_FAILURE);
    }
}
#define CUBLAS_CHECK(call) check_cublas((call), __FILE__, __LINE__)

static cublasHandle_t g_cublas;

// ---- both sides ----------------------------------------------------------------------------------
template <class T>
__host__ __device__ constexpr T ceil_div(T total, T chunk) {
    return (total + chunk - 1) / chunk;
}

// ---- device: reductions ----------------------------------------------------------------------------
__device__ inline float warp_sum(float v) {
    for (int step = 16; step > 0; step /= 2) {
        v += __shfl_xor_sync(0xffffffffu, v, step);
    }
    return v;
}

__device__ inline float warp_max(float v) {
    for (int step = 16; step > 0; step /= 2) {
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, step));
    }
    return v;
}

// ---- device: 128-bit packets -----------------------------------------------------------------------
// Sixteen bytes of elements moved with one load or store (8 bf16/fp16, or 4 floats).
template <class T>
struct alignas(16) Packed128 {
    static constexpr int size = 16 / sizeof(T);
    T v[size];

    __device__ Packed128() {}
    __device__ explicit Packed128(int4 bits) { *reinterpret_cast<int4*>(v) = bits; }
    __device__ static Packed128 filled(T value) {
        Packed128 p;
        for (int k = 0; k < size; ++k) p.v[k] = value;
        return p;
    }
    __device__ T& operator[](int k) { return v[k]; }
    __device__ const T& operator[](int k) const { return v[k]; }
    __device__ int4 bits() const { return *reinterpret_cast<const int4*>(v); }
};

template <class T>
__device__ Packed128<T> load128(const T* at) {
    return Packed128<T>(*reinterpret_cast<const int4*>(at));
}
// streaming load: the data is not reused, keep it out of the cache
template <class T>
__device__ Packed128<T> load128cs(const T* at) {
    return Packed128<T>(__ldcs(reinterpret_cast<const int4*>(at)));
}
template <class T>
__device__ void store128(T* at, Packed128<T> p) {
    *reinterpret_cast<int4*>(at) = p.bits();
}
template <class T>
__device__ void store128cs(T* at, Packed128<T> p) {
    __stcs(reinterpret_cast<int4*>(at), p.bits());
}

typedef Packed128<float> f128;
typedef Packed128<floatX> x128;

// ---- host: data, validation, timing ----------------------------------------------------------------
static float* random_floats(size_t n, float lo = -1.0f, float hi = 1.0f) {
    float* out = (float*)malloc(n * sizeof(float));
    for (size_t i = 0; i < n; ++i) {
        out[i] = lo + (hi - lo) * ((float)rand() / (float)RAND_MAX);
    }
    return out;
}

static int* random_ints(size_t n, int upper) {
    int* out = (int*)malloc(n * sizeof(int));
    for (size_t i = 0; i < n; ++i) out[i] = rand() % upper;
    return out;
}

// Copies `n` host floats to a new device buffer of floatX.
static floatX* to_device(const float* host, size_t n) {
    floatX* staged = (floatX*)malloc(n * sizeof(floatX));
    for (size_t i = 0; i < n; ++i) staged[i] = (floatX)host[i];
    floatX* dev;
    CUDA_CHECK(cudaMalloc(&dev, n * sizeof(floatX)));
    CUDA_CHECK(cudaMemcpy(dev, staged, n * sizeof(floatX), cudaMemcpyHostToDevice));
    free(staged);
    return dev;
}

template <class D>
static void expect_close(const D* device_out, const float* expected, size_t n, const char* what, float tol) {
    D* got = (D*)malloc(n * sizeof(D));
    CUDA_CHECK(cudaMemcpy(got, device_out, n * sizeof(D), cudaMemcpyDeviceToHost));
    int bad = 0;
    for (size_t i = 0; i < n; ++i) {
        float g = (float)got[i];
        if (fabsf(g - expected[i]) > tol + tol * fabsf(expected[i])) {
            if (bad < 5) printf("%s mismatch at %zu: %f vs %f\n", what, i, g, expected[i]);
            ++bad;
        }
    }
    free(got);
    if (bad) {
        printf("%s: %d of %zu wrong\n", what, bad, n);
        exit(EXIT_FAILURE);
    }
}

template <class Launch, class... Args>
static float time_ms(int repeats, Launch launch, Args&&... args) {
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    CUDA_CHECK(cudaEventRecord(start));
    for (int r = 0; r < repeats; ++r) launch(std::forward<Args>(args)...);
    CUDA_CHECK(cudaEventRecord(stop));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    return ms / repeats;
}

static void setup_main() {
    srand(1337);
    CUBLAS_CHECK(cublasCreate(&g_cublas));
}

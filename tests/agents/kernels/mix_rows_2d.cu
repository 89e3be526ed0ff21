// Rows mixed by a compile-time mode, an optional bias: a row per blockIdx.x, its columns over
// blockIdx.y. The writes sit in branches of a template constant, the bias read behind a null check.
#include <cuda_fp16.h>

/* @astra
grid = ["rows", "cdiv(cols, 128)"]
block = ["128"]
instantiate = "<float, 1>"

[sizes]
rows = [1, 5]
cols = [1, 7, 300, 1024]

[bench]
rows = [4096]
cols = [8192]

[args]
out  = { type = "float", shape = ["rows", "cols"], output = true }
a    = { type = "float", shape = ["rows", "cols"] }
b    = { type = "float", shape = ["rows", "cols"] }
bias = { type = "float", shape = ["cols"] }
rows = "rows"
cols = "cols"
*/
template <typename T, int MODE>
__global__ void mix_rows_kernel(T* out, const T* a, const T* b, const T* bias, int rows, int cols) {
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c < cols) {
    T s = bias == nullptr ? T(0) : bias[c];
    if (MODE == 0) {
      out[blockIdx.x * cols + c] = a[blockIdx.x * cols + c] + s;
    } else if (MODE == 1) {
      out[blockIdx.x * cols + c] = a[blockIdx.x * cols + c] - b[blockIdx.x * cols + c] + s;
    }
  }
}

template <typename T, int MODE>
void mix_rows(T* out, const T* a, const T* b, const T* bias, int rows, int cols) {
  dim3 grid(rows, (cols + 127) / 128);
  mix_rows_kernel<T, MODE><<<grid, 128>>>(out, a, b, bias, rows, cols);
}

template void mix_rows<float, 1>(float*, const float*, const float*, const float*, int, int);
template void mix_rows<__half, 0>(__half*, const __half*, const __half*, const __half*, int, int);

// A matrix transpose in its naive form: one thread per element, reads along a row (consecutive),
// writes down a column (a stride of `rows` elements). Written here for the tests.
#include <cuda_runtime.h>

/* @astra
grid = ["cdiv(cols, 16)", "cdiv(rows, 16)"]
block = ["16", "16"]

[sizes]
rows = [1, 17, 33, 100]
cols = [1, 31, 64, 257]

[bench]
rows = [8192]
cols = [8192]

[args]
out  = { type = "float", shape = ["cols", "rows"], output = true }
in   = { type = "float", shape = ["rows", "cols"] }
rows = "rows"
cols = "cols"
*/
__global__ void transpose_naive_kernel(float* out, const float* in, int rows, int cols) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < cols && y < rows) out[x * rows + y] = in[y * cols + x];
}

void transpose(float* out, const float* in, int rows, int cols) {
  dim3 block(16, 16);
  dim3 grid((cols + 15) / 16, (rows + 15) / 16);
  transpose_naive_kernel<<<grid, block>>>(out, in, rows, cols);
}

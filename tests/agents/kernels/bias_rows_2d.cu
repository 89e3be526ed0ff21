// Row plus bias: a row per blockIdx.x, its columns spread over blockIdx.y, one element per thread.
/* @astra
grid = ["rows", "cdiv(cols, 256)"]
block = ["256"]

[sizes]
rows = [1, 3, 17]
cols = [1, 33, 1000, 1027]

[bench]
rows = [4096]
cols = [8192]

[args]
out  = { type = "float", shape = ["rows", "cols"], output = true }
x    = { type = "float", shape = ["rows", "cols"] }
bias = { type = "float", shape = ["cols"] }
rows = "rows"
cols = "cols"
*/
__global__ void bias_rows_kernel(float* out, const float* x, const float* bias, int rows, int cols) {
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c < cols) {
    out[blockIdx.x * cols + c] = x[blockIdx.x * cols + c] + bias[c];
  }
}

void bias_rows(float* out, const float* x, const float* bias, int rows, int cols) {
  dim3 grid(rows, (cols + 255) / 256);
  bias_rows_kernel<<<grid, 256>>>(out, x, bias, rows, cols);
}

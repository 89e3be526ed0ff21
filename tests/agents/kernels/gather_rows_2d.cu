// Gathered rows scaled by a second table: threadIdx.y picks a row of the block, the row's
// threadIdx.x lanes step over its columns by a stride held in a local.
#include <cstdint>

/* @astra
grid = ["(count + 7) / 8"]
block = ["32", "8"]

[sizes]
count = [1, 9, 100]
width = [1, 6, 128, 1001]
V = [5, 64]

[bench]
count = [8192]
width = [4096]
V = [1024]

[args]
out   = { type = "float", shape = ["count", "width"], output = true }
table = { type = "float", shape = ["V", "width"] }
w     = { type = "float", shape = ["count", "width"] }
rows  = { type = "int64", shape = ["count"], init = "randint(0, V)" }
count = "count"
width = "width"
*/
__global__ void gather_rows_kernel(float* out, const float* table, const float* w, const int64_t* rows,
                                   const int64_t count, const int64_t width) {
  const int lane = threadIdx.x;
  const int r = blockIdx.x * blockDim.y + threadIdx.y;
  const int step = blockDim.x;
  if (r < count) {
    int64_t src = rows[r] * width;
    int64_t dst = r * width;
    for (int j = lane; j < width; j += step) {
      out[dst + j] = table[src + j] * w[dst + j];
    }
  }
}

void gather_rows(float* out, const float* table, const float* w, const int64_t* rows, int64_t count,
                 int64_t width) {
  gather_rows_kernel<<<(count + 7) / 8, dim3(32, 8)>>>(out, table, w, rows, count, width);
}

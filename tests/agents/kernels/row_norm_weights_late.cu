// A row norm in the form of exllamav2's rms_norm_kernel: one block of four 32-thread warps per
// row, an unrolled loop over a template-constant count of steps that reads the row, a block
// reduction through warp shuffles, shared memory and a barrier, then a second loop with the same
// header that reads the weights (and, when asked, a bias) only after the barrier. Written here
// for the tests.
#define WARP 32
#define WARPS 4
#define THREADS (WARPS * WARP)

/* @astra
grid = ["rows"]
block = ["128"]
require = ["dim <= 512"]
instantiate = "<4>"

[sizes]
rows = [1, 5]
dim = [1, 130, 512]

[bench]
rows = [4096]
dim = [512]

[args]
x        = { type = "float", shape = ["rows", "dim"] }
w        = { type = "float", shape = ["dim"] }
b        = { type = "float", shape = ["dim"] }
y        = { type = "float", shape = ["rows", "dim"], output = true }
dim      = "dim"
add_bias = "1"
eps      = 1e-5
*/
template <int steps>
__global__ void row_norm_weights_late(const float* __restrict__ x, const float* __restrict__ w,
                                      const float* __restrict__ b, float* __restrict__ y, const int dim,
                                      const int add_bias, const float eps) {
  int warp_id = threadIdx.x / WARP;
  int lane_id = threadIdx.x % WARP;
  const float* x_row = x + blockIdx.x * dim;
  float* y_row = y + blockIdx.x * dim;
  float items[steps];
  float sum = 0.0f;

  #pragma unroll
  for (int i = 0; i < steps; i++) {
    int column = warp_id * WARP + lane_id + THREADS * i;
    if (column >= dim) break;
    float v = x_row[column];
    items[i] = v;
    sum += v * v;
  }

  __shared__ float sums[WARPS];
  for (int offset = WARP / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffff, sum, offset);
  if (lane_id == 0) sums[warp_id] = sum;
  __syncthreads();
  sum = 0.0f;
  for (int k = 0; k < WARPS; k++) sum += sums[k];
  float r = rsqrtf(sum / dim + eps);

  #pragma unroll
  for (int i = 0; i < steps; i++) {
    int column = warp_id * WARP + lane_id + THREADS * i;
    if (column >= dim) return;
    float n = items[i] * r * w[column];
    if (add_bias) n += b[column];
    y_row[column] = n;
  }
}

// One block per group, its row of n elements scaled: the grid's size is the number of groups,
// which the decode and bench sizes share, so only n tells them apart (issue 29's size dispatch
// by a kernel parameter). Written here for the tests.

/* @astra
grid = ["groups"]
block = ["128"]

[sizes]
groups = [3]
n = [1, 8, 1024]

[bench]
groups = [64]
n = [4096]

[args]
out = { type = "float", shape = ["groups", "n"], output = true }
in = { type = "float", shape = ["groups", "n"] }
n = "n"
*/
__global__ void row_scale_kernel(float* __restrict__ out, const float* __restrict__ in, int n) {
  const float* row = in + (long long)blockIdx.x * n;
  float* dst = out + (long long)blockIdx.x * n;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    dst[i] = row[i] * 2.0f;
  }
}

void row_scale(float* out, const float* in, int groups, int n) {
  row_scale_kernel<<<groups, 128>>>(out, in, n);
}

// A LayerNorm forward, one block of 128 threads per row: strided partial sums, then a tree in
// shared memory (the reference), and rewrites of it (tests/gate/test_false_refusals.py).
// The rows carry a large common offset, as activations often do: the mean's rounding error is
// then of the order of the fp32 default tolerance, in the reference as in any reordering of it.
/* @astra
grid = ["T"]
block = ["128"]

[sizes]
T = [16, 24]
C = [768, 2048]

[args]
out = { type = "float", shape = ["T", "C"], output = true }
x = { type = "float", shape = ["T", "C"], init = "uniform(100, 101)" }
w = { type = "float", shape = ["C"] }
b = { type = "float", shape = ["C"] }
T = "T"
C = "C"
*/
__global__ void layernorm(float* out, const float* x, const float* w, const float* b, int T, int C) {
  __shared__ float red[128];
  const float* xr = x + (long)blockIdx.x * C;
  float s = 0.f;
  for (int i = threadIdx.x; i < C; i += blockDim.x) s += xr[i];
  red[threadIdx.x] = s;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) red[threadIdx.x] += red[threadIdx.x + k];
    __syncthreads();
  }
  const float mean = red[0] / C;
  __syncthreads();
  float v = 0.f;
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    const float d = xr[i] - mean;
    v += d * d;
  }
  red[threadIdx.x] = v;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) red[threadIdx.x] += red[threadIdx.x + k];
    __syncthreads();
  }
  const float rstd = rsqrtf(red[0] / C + 1e-5f);
  for (int i = threadIdx.x; i < C; i += blockDim.x)
    out[(long)blockIdx.x * C + i] = (xr[i] - mean) * rstd * w[i] + b[i];
}

// Rotary embedding in rotate-half form, written for the tests: one thread an index i of the
// rotated part, each head of a token reading x[i] and its partner x[i ± rot/2] one element at a
// time (the shape `lane_groups` widens). Rows may be padded (`pad`: every token's row starts one
// element later than the last ended, so a run's start is misaligned), `rot` may be odd or have a
// half that is no multiple of 4, and the second kernel reads every other element (stride 2).
#include <cuda_fp16.h>

template <typename T>
__device__ void rotate_rows(const T* x, const float* theta, T* y, int in_base, int out_base, int heads,
                            int rot, int in_head, int in_elem, int out_head, int out_elem) {
  const int t = blockIdx.x;
#pragma unroll
  for (int i = threadIdx.x; i < rot; i += blockDim.x) {
    float c, s;
    sincosf(theta[t * rot + i], &s, &c);
#pragma unroll
    for (int hh = threadIdx.y; hh < heads; hh += blockDim.y) {
      int at = in_base + hh * in_head + i * in_elem;
      int to = out_base + hh * out_head + i * out_elem;
      float a = (float)x[at];
      float b = (i < rot / 2) ? -(float)x[at + (rot / 2) * in_elem] : (float)x[at - (rot / 2) * in_elem];
      y[to] = (T)(a * c + b * s);
    }
  }
}

/* @astra
grid = ["tokens"]
block = ["32", "4"]
instantiate = "<float>"

[sizes]
tokens = [1, 3, 7]
heads = [1, 5]
rot = [6, 10, 64, 200]
pad = [0, 1]

[bench]
tokens = [4096]
heads = [32]
rot = [128]
pad = [0]

[args]
x = { type = "float", shape = ["tokens", "heads * rot + pad"] }
theta = { type = "float", shape = ["tokens", "rot"] }
y = { type = "float", shape = ["tokens", "heads * rot"], output = true }
heads = "heads"
rot = "rot"
row = "heads * rot + pad"
*/
template <typename T>
__global__ void rope_rows(const T* x, const float* theta, T* y, int heads, int rot, int row) {
  rotate_rows(x, theta, y, blockIdx.x * row, blockIdx.x * heads * rot, heads, rot, rot, 1, rot, 1);
}

/* @astra
grid = ["tokens"]
block = ["32", "4"]
instantiate = "<__half>"

[sizes]
tokens = [1, 3]
heads = [1, 5]
rot = [8, 64]

[bench]
tokens = [4096]
heads = [32]
rot = [128]

[args]
x = { type = "float16", shape = ["tokens", "2 * heads * rot"] }
theta = { type = "float", shape = ["tokens", "rot"] }
y = { type = "float16", shape = ["tokens", "heads * rot"], output = true }
heads = "heads"
rot = "rot"
*/
template <typename T>
__global__ void rope_rows_every_other(const T* x, const float* theta, T* y, int heads, int rot) {
  rotate_rows(x, theta, y, blockIdx.x * 2 * heads * rot, blockIdx.x * heads * rot, heads, rot, 2 * rot, 2, rot, 1);
}

// A token + position embedding in the kernel-development style: one output element per thread,
// the flat index split into (token, channel) by division, a gather through the token ids.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

typedef __nv_bfloat16 floatX;

__host__ __device__ inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

/* @astra
grid = ["cdiv(B * T * C, 256)"]
block = ["256"]

[sizes]
B = [1, 2, 3]
T = [3, 8]
C = [8, 12, 64]
V = [16]

[bench]
B = [32]
T = [1024]
C = [768]
V = [1024]

[args]
out = { type = "bfloat16", shape = ["B", "T", "C"], output = true }
inp = { type = "int32", shape = ["B", "T"], init = "randint(0, V)" }
wte = { type = "bfloat16", shape = ["V", "C"] }
wpe = { type = "bfloat16", shape = ["T", "C"] }
B = "B"
T = "T"
C = "C"
*/
__global__ void encoder_forward_kernel(floatX* out, const int* inp, const floatX* wte, const floatX* wpe,
                                       int B, int T, int C) {
  int idx = blockIdx.x * blockDim.x + threadIdx.x;
  int N = B * T * C;
  if (idx < N) {
    int bt = idx / C;
    int b = bt / T;
    int t = bt % T;
    int c = idx % C;
    int ix = inp[b * T + t];
    out[b * T * C + t * C + c] = (floatX)((float)wte[ix * C + c] + (float)wpe[t * C + c]);
  }
}

void encoder_forward(floatX* out, const int* inp, const floatX* wte, const floatX* wpe, int B, int T, int C) {
  const int block_size = 256;
  encoder_forward_kernel<<<ceil_div(B * T * C, block_size), block_size>>>(out, inp, wte, wpe, B, T, C);
}

// A token + position embedding of GPT-2's shape: B·T token ids into a 50,257-row table.
// `embedding_naive` takes one output element per thread; `embedding` a warp per row in float4
// steps. The lookup reads B·T rows of the table, not all of them (tests/profiler).
#include <cuda_runtime.h>

/* @astra
grid = ["cdiv(B * T * C, 256)"]
block = ["256"]

[sizes]
B = [2]
T = [16, 64]
C = [64, 768]
V = [50257]

[bench]
B = [8]
T = [1024]
C = [768]

[args]
out = { type = "float", shape = ["B", "T", "C"], output = true }
ids = { type = "int32", shape = ["B", "T"], init = "randint(0, V)" }
wte = { type = "float", shape = ["V", "C"] }
wpe = { type = "float", shape = ["T", "C"] }
B = "B"
T = "T"
C = "C"
*/
__global__ void embedding_naive(float* out, const int* ids, const float* wte, const float* wpe, int B, int T, int C) {
  const long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx < (long)B * T * C) {
    const long bt = idx / C;
    const int t = (int)(bt % T), c = (int)(idx % C);
    out[idx] = wte[(long)ids[bt] * C + c] + wpe[(long)t * C + c];
  }
}

/* @astra
reference = "embedding_naive"
grid = ["cdiv(B * T, 8)"]
block = ["256"]

[sizes]
B = [2]
T = [16, 64]
C = [64, 768]
V = [50257]

[bench]
B = [8]
T = [1024]
C = [768]

[args]
out = { type = "float", shape = ["B", "T", "C"], output = true }
ids = { type = "int32", shape = ["B", "T"], init = "randint(0, V)" }
wte = { type = "float", shape = ["V", "C"] }
wpe = { type = "float", shape = ["T", "C"] }
B = "B"
T = "T"
C = "C"
*/
__global__ void embedding(float* out, const int* ids, const float* wte, const float* wpe, int B, int T, int C) {
  const long bt = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (bt >= (long)B * T) return;
  const int t = (int)(bt % T);
  const float* row = wte + (long)ids[bt] * C;
  const float* pos = wpe + (long)t * C;
  float* o = out + bt * C;
  if (C % 4 == 0) {
    for (int c = lane * 4; c < C; c += 128) {
      const float4 a = *reinterpret_cast<const float4*>(row + c), p = *reinterpret_cast<const float4*>(pos + c);
      *reinterpret_cast<float4*>(o + c) = make_float4(a.x + p.x, a.y + p.y, a.z + p.z, a.w + p.w);
    }
  } else {
    for (int c = lane; c < C; c += 32) o[c] = row[c] + pos[c];
  }
}

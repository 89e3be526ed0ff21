// Merge two partial attention results by their log-sum-exp (the structure of SGLang's
// merge_state kernel, used by split-KV / cascade attention):
//   m = max(lse_a, lse_b);  wa = exp(lse_a - m);  wb = exp(lse_b - m)
//   out = (v_a * wa + v_b * wb) / (wa + wb);      lse_out = log(wa + wb) + m
// Layout [tokens, heads, head_dim] for values, [tokens, heads] for log-sum-exps.
// One block per (token, head); every thread recomputes the weights for each element.
// The host function at the bottom launches it, as an attention backend would.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

/* @astra
grid = ["num_tokens", "num_heads"]
block = ["min(head_dim, 128)"]

[sizes]
num_tokens = [1, 9, 300]
num_heads = [1, 32]
head_dim = [64, 128]

[bench]
num_tokens = [16384]
num_heads = [32, 40, 64]
head_dim = [128]

[args]
out       = { type = "half", shape = ["num_tokens", "num_heads", "head_dim"], output = true }
out_lse   = { type = "float", shape = ["num_tokens", "num_heads"], output = true }
v_a       = { type = "half", shape = ["num_tokens", "num_heads", "head_dim"] }
lse_a     = { type = "float", shape = ["num_tokens", "num_heads"], init = "uniform(-10, 10)" }
v_b       = { type = "half", shape = ["num_tokens", "num_heads", "head_dim"] }
lse_b     = { type = "float", shape = ["num_tokens", "num_heads"], init = "uniform(-10, 10)" }
num_heads = "num_heads"
head_dim  = "head_dim"
*/
__global__ void merge_attn_states(__half* __restrict__ out, float* __restrict__ out_lse,
                                  const __half* __restrict__ v_a, const float* __restrict__ lse_a,
                                  const __half* __restrict__ v_b, const float* __restrict__ lse_b,
                                  const int num_heads, const int head_dim) {
  const int64_t token = blockIdx.x;
  const int head = blockIdx.y;
  const int64_t row = token * num_heads + head;
  for (int i = threadIdx.x; i < head_dim; i += blockDim.x) {
    const float sa = lse_a[row];
    const float sb = lse_b[row];
    const float m = fmaxf(sa, sb);
    const float wa = expf(sa - m);
    const float wb = expf(sb - m);
    const float va = __half2float(v_a[row * head_dim + i]);
    const float vb = __half2float(v_b[row * head_dim + i]);
    out[row * head_dim + i] = __float2half((va * wa + vb * wb) / (wa + wb));
  }
  if (threadIdx.x == 0) {
    const float sa = lse_a[row];
    const float sb = lse_b[row];
    const float m = fmaxf(sa, sb);
    out_lse[row] = logf(expf(sa - m) + expf(sb - m)) + m;
  }
}

void merge_attn_states_launch(__half* out, float* out_lse, const __half* v_a, const float* lse_a,
                              const __half* v_b, const float* lse_b, int num_tokens, int num_heads,
                              int head_dim, cudaStream_t stream) {
  const dim3 grid(num_tokens, num_heads);
  const dim3 block(head_dim < 128 ? head_dim : 128);
  merge_attn_states<<<grid, block, 0, stream>>>(out, out_lse, v_a, lse_a, v_b, lse_b, num_heads, head_dim);
}

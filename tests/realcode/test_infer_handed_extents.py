"""A minimal case written here of how MoE routing kernels (vLLM's `moeTopK`, sgl-kernel's
`topkGatingSoftmax`) get their top-k: the entry point reads it off the output tensor
(`topk = weights.size(-1)`) and hands it down through two launcher layers' parameters to the
launch. Followed only to the launcher, `k` was a free size named like a hidden size (128 tested,
11008 -> 172 timed); followed up to the tensor, it is the experts a router sends each token to."""
from astra_cuda import api
from astra_cuda.model import source, spec

ROUTE = """#include <cstdint>
namespace at { struct Tensor { int64_t size(int) const; void* data_ptr() const; }; }
__global__ void pick_kernel(const float* __restrict__ probs, float* __restrict__ out_w,
                            int* __restrict__ out_i, const int experts, const int k) {
  const int row = blockIdx.x;
  if (threadIdx.x != 0) return;
  for (int j = 0; j < k; ++j) {
    int best = 0;
    for (int e = 1; e < experts; ++e)
      if (probs[row * experts + e] > probs[row * experts + best]) best = e;
    out_w[row * k + j] = probs[row * experts + best];
    out_i[row * k + j] = best;
  }
}
void launch_pick(const float* probs, float* w, int* ids, int rows, int experts, int top) {
  pick_kernel<<<rows, 32>>>(probs, w, ids, experts, top);
}
void dispatch_pick(at::Tensor& probs, at::Tensor& w, at::Tensor& ids, int rows, int experts, int top) {
  launch_pick((const float*)probs.data_ptr(), (float*)w.data_ptr(), (int*)ids.data_ptr(), rows, experts, top);
}
void route(at::Tensor& %(out)s, at::Tensor& ids, at::Tensor& probs) {
  const int experts = static_cast<int>(probs.size(-1));
  const int rows = static_cast<int>(probs.size(0));
  const int top = %(top)s;
  dispatch_pick(probs, %(out)s, ids, rows, experts, top);
}
"""


def _spec(project, out: str, top: str):
    text = ROUTE % {"out": out, "top": top}
    path = project("route.cu", text)
    p = api.infer_spec(api.snapshot(text, str(path)), "pick_kernel", run=False)
    assert p.valid, p.problems
    k = source.parse(text).kernel("pick_kernel")
    m = source.parse(text[:k.span.start_byte] + p.comment + text[k.span.start_byte:])
    return p, spec.load(m.kernel("pick_kernel"), m)


def test_a_top_k_handed_down_from_the_weights_extent_is_timed_at_a_routers_k(project):
    p, s = _spec(project, "topk_weights", "static_cast<int>(topk_weights.size(-1))")
    assert list(s.bench["k"]) == [8], s.bench
    assert 8 in s.sizes["k"]   # tested there too
    assert [n for n in p.notes if "`k` is read off the caller's tensor (`static_cast<int>(topk_weights.size(-1))`"
            in n and "top-k" in n], p.notes
    # still the output's last dimension
    assert s.args["out_w"].shape[-1] == "k", s.args["out_w"]


def test_an_extent_of_another_tensor_or_a_number_the_program_passes_is_not_a_top_k(project):
    # the same chain from a tensor named for no top-k: the name's usual values, as before
    _, s = _spec(project, "scores", "scores.size(-1)")
    assert list(s.bench["k"]) != [8], s.bench
    # a number the program passes is the program's, whatever the tensor is called
    _, s = _spec(project, "topk_weights", "2")
    assert list(s.bench["k"]) == [2], s.bench

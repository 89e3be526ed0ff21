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
    # the expert count read off the router's logits is a real MoE's too
    assert list(s.bench["experts"]) == [256], s.bench


def test_an_extent_of_another_tensor_or_a_number_the_program_passes_is_not_a_top_k(project):
    # the same chain from a tensor named for no top-k: the name's usual values, as before
    _, s = _spec(project, "scores", "scores.size(-1)")
    assert list(s.bench["k"]) != [8], s.bench
    # a number the program passes is the program's, whatever the tensor is called
    _, s = _spec(project, "topk_weights", "2")
    assert list(s.bench["k"]) == [2], s.bench


SWITCHED = """#include <cstdint>
namespace at { struct Tensor { int64_t size(int) const; void* data_ptr() const; }; }
template <int E>
__global__ void gate_kernel(const float* __restrict__ logits, float* __restrict__ out_w, int* __restrict__ out_i,
                            const int rows, const int k, const int first, const int last) {
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  float v[E];
  for (int e = 0; e < E; ++e) v[e] = logits[row * E + e];
  for (int j = 0; j < k; ++j) {
    int best = 0;
    for (int e = 1; e < E; ++e) if (v[e] > v[best]) best = e;
    out_w[row * k + j] = v[best];
    out_i[row * k + j] = (best >= first && best < last) ? best - first : E;
    v[best] = -1e30f;
  }
}
template <int E>
void gate_helper(const float* x, float* w, int* ids, int rows, int k, int first, int last) {
  gate_kernel<E><<<(rows + 127) / 128, 128>>>(x, w, ids, rows, k, first, last);
}
#define GATE(E) gate_helper<E>(x, w, ids, rows, topk, 0, experts)
void gate_launch(const float* x, float* w, int* ids, int rows, int experts, int topk) {
  switch (experts) {
    case 1: GATE(1); break;
    case 8: GATE(8); break;
    case 64: GATE(64); break;
    case 256: GATE(256); break;
    default: break;
  }
}
void gate(at::Tensor& topk_weights, at::Tensor& ids, at::Tensor& logits) {
  const int experts = static_cast<int>(logits.size(-1));
  const int rows = static_cast<int>(logits.size(0));
  gate_launch((const float*)logits.data_ptr(), (float*)topk_weights.data_ptr(), (int*)ids.data_ptr(), rows,
              experts, static_cast<int>(topk_weights.size(-1)));
}
"""


def test_an_expert_count_switch_takes_a_real_moes_case_and_its_count_matches_it(project):
    path = project("gate.cu", SWITCHED)
    p = api.infer_spec(api.snapshot(SWITCHED, str(path)), "gate_kernel", run=False)
    assert p.valid, p.problems
    k = source.parse(SWITCHED).kernel("gate_kernel")
    m = source.parse(SWITCHED[:k.span.start_byte] + p.comment + SWITCHED[k.span.start_byte:])
    s = spec.load(m.kernel("gate_kernel"), m)
    # not the first case's one expert: the case of a MoE's routed experts
    assert s.instantiate.replace(" ", "") == "<256>", (s.instantiate, p.notes)
    # the expert range the helper is handed is that case's count, not a free size
    assert "last" not in s.sizes and p.comment.count('last   = "256"') + p.comment.count('last = "256"') == 1, p.comment
    assert s.args["logits"].shape[-1] in ("256", 256), s.args["logits"]
    # the top-k, an argument expression read off the weights, is a router's
    assert list(s.bench["k"]) == [8], s.bench


GENERIC = """#include <cstdint>
namespace at { struct Tensor { int64_t size(int) const; void* data_ptr() const; }; }
template <int E> void fixed_route(const float* x, float* w, int rows, int k) {}
__global__ void any_route(const float* __restrict__ x, float* __restrict__ w, const int num_experts, const int k) {
  const int row = blockIdx.x;
  for (int j = threadIdx.x; j < k; j += blockDim.x) {
    float best = x[row * num_experts];
    for (int e = 1; e < num_experts; ++e) best = fmaxf(best, x[row * num_experts + e]);
    w[row * k + j] = best;
  }
}
void route_launch(const float* x, float* w, int rows, int num_experts, int k) {
  switch (num_experts) {
    case 8: fixed_route<8>(x, w, rows, k); break;
    case 64: fixed_route<64>(x, w, rows, k); break;
    case 128: fixed_route<128>(x, w, rows, k); break;
    case 256: fixed_route<256>(x, w, rows, k); break;
    default: any_route<<<rows, 32>>>(x, w, num_experts, k);
  }
}
void route(at::Tensor& topk_weights, at::Tensor& logits) {
  route_launch((const float*)logits.data_ptr(), (float*)topk_weights.data_ptr(), logits.size(0), logits.size(1),
               topk_weights.size(1));
}
"""


def test_a_generic_kernel_under_the_switchs_default_is_timed_at_a_count_no_case_takes(project):
    path = project("generic.cu", GENERIC)
    p = api.infer_spec(api.snapshot(GENERIC, str(path)), "any_route", run=False)
    assert p.valid, p.problems
    k = source.parse(GENERIC).kernel("any_route")
    m = source.parse(GENERIC[:k.span.start_byte] + p.comment + GENERIC[k.span.start_byte:])
    s = spec.load(m.kernel("any_route"), m)
    # 256 and 128 go to the switch's own instances: DeepSeek-V2's 160 reaches this one
    assert list(s.bench["num_experts"]) == [160], (s.bench, p.notes)
    assert list(s.bench["k"]) == [8], s.bench


DIRECT = ROUTE[:ROUTE.index("void launch_pick")] + """void pick(at::Tensor& probs, at::Tensor& w, at::Tensor& topk_ids) {
  pick_kernel<<<probs.size(0), 32>>>((const float*)probs.data_ptr(), (float*)w.data_ptr(), (int*)topk_ids.data_ptr(),
                                     (int)probs.size(1), (int)topk_ids.size(1));
}
"""


def test_a_top_k_read_off_the_ids_in_the_launch_itself(project):
    path = project("direct.cu", DIRECT)
    p = api.infer_spec(api.snapshot(DIRECT, str(path)), "pick_kernel", run=False)
    assert p.valid, p.problems
    assert [n for n in p.notes if "`k` is read off the caller's tensor (`(int)topk_ids.size(1)`" in n], p.notes

"""A launch handed two extents of the router's ids (vLLM's moe_align: `topk_ids.numel()` and
`topk_ids.size(1)`): the second dimension is the top-k (timed at a router's 8), but the tensor's
whole count is tokens times k — taking the tensor's name for a top-k timed every token's entry at 8
too (`numel` = 8, never grown)."""
from astra_cuda import api
from astra_cuda.model import source, spec

ALIGN = """#include <cstdint>
namespace at { struct Tensor { int64_t size(int) const; int64_t numel() const; void* data_ptr() const; }; }
__global__ void count_experts(const int* __restrict__ ids, int* __restrict__ counts, int* __restrict__ rows,
                              int numel, int topk_num) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < numel) {
    atomicAdd(&counts[ids[i] & 7], 1);
    rows[i] = i / topk_num;
  }
}
void align(at::Tensor& topk_ids, at::Tensor& counts, at::Tensor& rows) {
  count_experts<<<(topk_ids.numel() + 255) / 256, 256>>>((const int*)topk_ids.data_ptr(), (int*)counts.data_ptr(),
                                                         (int*)rows.data_ptr(), topk_ids.numel(), topk_ids.size(1));
}
"""


def test_a_top_k_tensors_whole_count_is_no_top_k(project):
    path = project("align.cu", ALIGN)
    p = api.infer_spec(api.snapshot(ALIGN, str(path)), "count_experts", run=False)
    assert p.valid, p.problems
    k = source.parse(ALIGN).kernel("count_experts")
    m = source.parse(ALIGN[:k.span.start_byte] + p.comment + ALIGN[k.span.start_byte:])
    s = spec.load(m.kernel("count_experts"), m)
    assert s.bench["topk_num"] == [8], p.comment
    assert max(s.bench["numel"]) > 8, p.comment
    assert not [n for n in p.notes if "`numel` is read off" in n], p.notes

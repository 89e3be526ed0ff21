"""Issue 29: a minimal case written here of the launch vLLM's `reshape_and_cache_kernel`
(csrc/cache_kernels.cu) is made with: the launcher reads the cache's block size off the cache
tensor (`int block_size = key_cache.size(3);`), a layout of its caller's no C++ here fixes. The
`_size` of its name made it a hidden size (11008), halved to fit the buffers: the kernel was timed
scattering into blocks of 172 tokens, where vLLM's paged KV cache holds 16."""
from astra_cuda import api
from astra_cuda.model import source, spec

PUT = """#include <cstdint>
#include <algorithm>
namespace at { struct Tensor { int64_t size(int) const; void* data_ptr() const; }; }
__global__ void put_kernel(const float* __restrict__ src, float* __restrict__ cache,
                           const int64_t* __restrict__ slots, const int heads, const int dim, const int %(name)s) {
  const int64_t tok = blockIdx.x;
  const int64_t slot = slots[tok];
  if (slot < 0) return;
  const int64_t blk = slot / %(name)s, off = slot %% %(name)s;
  for (int i = threadIdx.x; i < heads * dim; i += blockDim.x) {
    const int h = i / dim, d = i %% dim;
    cache[((blk * heads + h) * dim + d) * %(name)s + off] = src[tok * heads * dim + i];
  }
}
void put(at::Tensor& src, at::Tensor& cache, at::Tensor& slots) {
  int num_tokens = slots.size(0);
  int heads = src.size(1);
  int dim = src.size(2);
  int %(name)s = %(value)s;
  dim3 grid(num_tokens);
  dim3 block(std::min(heads * dim, 512));
  put_kernel<<<grid, block>>>((const float*)src.data_ptr(), (float*)cache.data_ptr(), (const int64_t*)slots.data_ptr(),
                              heads, dim, %(name)s);
}
"""


def _spec(project, name: str, value: str):
    text = PUT % {"name": name, "value": value}
    path = project("put.cu", text)
    p = api.infer_spec(api.snapshot(text, str(path)), "put_kernel", run=False)
    assert p.valid, p.problems
    k = source.parse(text).kernel("put_kernel")
    m = source.parse(text[:k.span.start_byte] + p.comment + text[k.span.start_byte:])
    return p, spec.load(m.kernel("put_kernel"), m)


def test_a_paged_block_read_off_the_cache_tensor_is_timed_at_a_real_block(project):
    p, s = _spec(project, "block_size", "cache.size(3)")
    assert list(s.bench["block_size"]) == [16], s.bench
    assert 16 in s.sizes["block_size"]   # tested there too
    assert [n for n in p.notes if "`block_size` is read off the caller's tensor (`cache.size(3)`" in n], p.notes


def test_a_page_size_too_but_not_a_block_size_the_program_passes(project):
    _, s = _spec(project, "page_size", "cache.size(1)")
    assert list(s.bench["page_size"]) == [16], s.bench
    # a value of the program's own is the program's, whatever its name
    _, s = _spec(project, "block_size", "32")
    assert list(s.bench["block_size"]) == [32], s.bench

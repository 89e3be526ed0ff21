"""Issue 25: a copy helper that aligns its vector loads to the source address (vLLM's
vectorize_with_alignment, which reshape_and_cache writes the key cache through): a scalar prefix
of `(WIDTH - (addr & (WIDTH - 1))) & (WIDTH - 1)` bytes, then `in += prefix; out += prefix;
len -= prefix`, vectors, and a scalar tail. Its accesses are bounded only where the helper's
template arguments (`<4>`, and `sizeof(InT)` of the float it is given) are numbers, a mask bounds
what it masks (an address cast to an integer included), and the helper's own parameters are
updated once per call; the functor it is handed (through `std::forward`) is the caller's, which
only assigns the element it is given. Unbounded, the cache's shape fell back to the key's (`[tokens, key_stride]`)
and the GPU's writes past it landed in the value cache: two runs disagreed there. (The value
cache, written in the kernel through a functor that only assigns, makes the slots a scatter's.)"""
from .test_infer_asm_accesses import infer

ALIGNED = (
    "template <typename T, int N> struct alignas(sizeof(T) * N) vec_t { T val[N]; };\n"
    "template <int V, typename InT, typename OutT, typename Op>\n"
    "__device__ void aligned_copy(const InT* in, OutT* out, int len, int tid, int stride, int, Op&& scalar_op) {\n"
    "  constexpr int W = V * sizeof(InT);\n"
    "  uintptr_t addr = reinterpret_cast<uintptr_t>(in);\n"
    "  int pre = (W - (addr & (W - 1))) & (W - 1);\n  pre /= sizeof(InT);\n  pre = min(pre, len);\n"
    "  for (int i = tid; i < pre; i += stride) scalar_op(out[i], in[i]);\n"
    "  in += pre;\n  out += pre;\n  len -= pre;\n"
    "  int nv = len / V;\n"
    "  auto* vi = reinterpret_cast<const vec_t<InT, V>*>(in);\n"
    "  auto* vo = reinterpret_cast<vec_t<OutT, V>*>(out);\n"
    "  for (int i = tid; i < nv; i += stride) vo[i] = vi[i];\n"
    "  for (int i = tid + nv * V; i < len; i += stride) scalar_op(out[i], in[i]);\n}\n"
    "template <int V, typename InT, typename OutT, typename Op>\n"
    "__device__ void aligned_copy(const InT* in, OutT* out, int len, int tid, int stride, Op&& op) {\n"
    "  aligned_copy<V>(in, out, len, tid, stride, 0, std::forward<Op>(op));\n}\n"
    "struct Copy {\n  __device__ void operator()(float& d, const float s) const { d = s; }\n};\n"
    "__global__ void to_cache(const float* key, const float* value, float* cache, float* vcache, const long* slots,\n"
    "                         int key_stride, int heads,\n"
    "                         int head_size, int block_size, int x) {\n"
    "  const long t = blockIdx.x;\n  const long slot = slots[t];\n  if (slot < 0) return;\n"
    "  const long blk = slot / block_size, off = slot % block_size;\n"
    "  const int groups = head_size / x;\n  const int g = threadIdx.x;\n  if (g >= heads * groups) return;\n"
    "  const int h = g / groups, j = g % groups;\n"
    "  const float* src = key + t * key_stride + h * head_size + j * x;\n"
    "  float* dst = cache + blk * heads * groups * block_size * x + h * groups * block_size * x\n"
    "               + j * block_size * x + off * x;\n"
    "  Copy k_op;\n  aligned_copy<4>(src, dst, x, 0, 1, k_op);\n"
    "  float* vdst = vcache + blk * heads * head_size * block_size + (h * head_size + j * x) * block_size + off;\n"
    "  for (int i = 0; i < x; i++) k_op(vdst[i * block_size], value[t * heads * head_size + h * head_size + j * x + i]);\n}\n"
    "void run(const float* k, const float* v, float* c, float* vc, const long* s, int tokens, int ks, int heads, int head_size, int bs, int x) {\n"
    "  dim3 block(std::min(heads * (head_size / x), 512));\n"
    "  to_cache<<<tokens, block>>>(k, v, c, vc, s, ks, heads, head_size, bs, x);\n}\n")


def test_a_cache_written_through_an_aligning_copy_helper_gets_its_blocks_shape(project):
    s, p = infer(project, "aligned.cu", ALIGNED, "to_cache")
    assert s.args["cache"].shape == ("V * block_size", "heads", "head_size") and s.args["cache"].inout
    assert s.args["key"].shape == ("tokens", "heads", "head_size") and s.args["key_stride"].value == "heads * head_size"
    assert str(s.args["slots"].init) == "permutation(V * block_size)"
    assert not any("could not be" in n for n in p.notes), p.notes


def test_a_prefix_of_unknown_length_leaves_the_helper_unbounded(project):
    """The same helper with its prefix unmasked (`pre = W - addr`, nothing bounds it): the cache's
    accesses stay unbounded, and the notes say so — the bounds above come from the mask."""
    text = ALIGNED.replace("(W - (addr & (W - 1))) & (W - 1)", "W - addr")
    assert text != ALIGNED
    s, p = infer(project, "unbounded.cu", text, "to_cache")
    assert any("could not be" in n and "`cache`" in n for n in p.notes), p.notes


HEADS = ALIGNED.split("__global__")[0] + (
    "__global__ void to_heads(const float* key, float* cache, const long* slots, const long block_stride,\n"
    "    const long page_stride, const long head_stride, const long key_stride, int heads, int head_size, int block_size) {\n"
    "  const long t = blockIdx.x;\n  const long slot = slots[t];\n  if (slot < 0) return;\n"
    "  const long blk = slot / block_size, off = slot % block_size;\n"
    "  const float* src = key + t * key_stride;\n"
    "  float* dst = cache + blk * block_stride + off * page_stride;\n"
    "  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;\n"
    "  Copy k_op;\n"
    "  for (int h = warp; h < heads; h += warps)\n"
    "    aligned_copy<4>(src + h * head_size, dst + h * head_stride, head_size, lane, 32, k_op);\n}\n"
    "void run(const float* k, float* c, const long* s, int tokens, long bs_, long ps, long hs_, long ks, int heads,\n"
    "         int head_size, int block_size) {\n"
    "  to_heads<<<tokens, std::min(heads * head_size, 512)>>>(k, c, s, bs_, ps, hs_, ks, heads, head_size, block_size);\n}\n")


def test_an_aligning_copy_called_once_per_head_moves_its_pointers_once_per_call(project):
    """vLLM reshape_and_cache_flash's per-head layout: the helper is called in a loop over heads, and
    its `in += prefix` moves a pointer of that call (its parameter), once — not a loop's unknown step.
    The cache's strides then come out as its contiguous layout's, the heads strided by a head each."""
    s, p = infer(project, "heads.cu", HEADS, "to_heads")
    assert s.args["cache"].shape == ("V * block_size", "heads", "head_size")
    assert (s.args["page_stride"].value, s.args["head_stride"].value, s.args["key_stride"].value) == \
        ("heads * head_size", "head_size", "heads * head_size")
    assert str(s.args["slots"].init) == "permutation(V * block_size)"


def test_a_stride_the_kernel_compares_with_a_size_takes_that_size(project):
    """vLLM reshape_and_cache_flash: `if (head_stride == head_size)` copies a token's heads as one
    row, else head by head. Probed free, the stride never equals the size, and the reach of the
    branch that never reads it made the heads strided by a whole row; the kernel names its
    contiguous value itself: head_stride = head_size, the other strides that layout's."""
    text = HEADS.replace("  for (int h = warp;", "  if (head_stride == head_size)\n"
                         "    aligned_copy<4>(src, dst, heads * head_size, threadIdx.x, blockDim.x, k_op);\n"
                         "  else\n  for (int h = warp;")
    assert text != HEADS
    s, p = infer(project, "branch.cu", text, "to_heads")
    assert s.args["head_stride"].value == "head_size"
    assert (s.args["page_stride"].value, s.args["block_stride"].value) == \
        ("heads * head_size", "heads * head_size * block_size")
    assert s.args["cache"].shape == ("V * block_size", "heads", "head_size")
    assert any("tests `head_stride == head_size`" in n for n in p.notes)

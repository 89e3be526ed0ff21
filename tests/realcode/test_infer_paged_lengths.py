"""Issue 25: vLLM's paged attention (`paged_attention_v1_kernel`, csrc/attention/attention_kernels.cuh,
launched by `paged_attention_v1_launcher` in paged_attention_v1.cu). Its `seq_lens` holds lengths:
the kernel loops over `DIVIDE_ROUND_UP(seq_len, BLOCK_SIZE)` entries of a block-table row and keeps
one logit per token in dynamic shared memory, which the launcher sizes from `max_seq_len`
(`std::max` of the logits and a head's partial sums, `head_size` the `case` of a `switch` on
`query.size(2)`); its helper divides the grid's `num_heads` by `num_kv_heads`. Drawn as indices
below the cache's blocks, the lengths ran the loops past the shared memory and the rows (on the GPU:
two runs disagreed), and the shared memory was not read at all. Written here: the same pattern, small."""
from tests.realcode.test_infer_asm_accesses import infer

PAGED = (
    "#define CDIV(a, b) (((a) + (b) - 1) / (b))\n"
    "struct Tensor { int size(int d) const; int stride(int d) const; float* data() const; int* ints() const; };\n"
    "template <int HEAD, int BLOCK>\n"
    "__device__ void attend(float* out, const float* q, const float* kc, int kv_heads, const int* tables,\n"
    "                       const int* lens, int row_blocks, int kv_block_stride) {\n"
    "  const int seq = blockIdx.y, head = blockIdx.x, heads = gridDim.x;\n"
    "  const int len = lens[seq], blocks = CDIV(len, BLOCK);\n"
    "  const int per_kv = heads / kv_heads, kv_head = head / per_kv;\n"
    "  extern __shared__ char smem[];\n"
    "  float* logits = reinterpret_cast<float*>(smem);\n"
    "  for (int t = threadIdx.x; t < blocks * BLOCK; t += blockDim.x) {\n"
    "    const long b = tables[seq * row_blocks + t / BLOCK];\n"
    "    float dot = 0.f;\n"
    "    for (int d = 0; d < HEAD; ++d)\n"
    "      dot += q[(seq * heads + head) * HEAD + d] * kc[b * kv_block_stride + (kv_head * HEAD + d) * BLOCK + t % BLOCK];\n"
    "    logits[t] = t < len ? dot : 0.f;\n"
    "  }\n"
    "  __syncthreads();\n"
    "  if (threadIdx.x == 0) {\n"
    "    float s = 0.f;\n"
    "    for (int t = 0; t < len; ++t) s += logits[t];\n"
    "    out[seq * heads + head] = s;\n"
    "  }\n"
    "}\n"
    "template <int HEAD, int BLOCK>\n"
    "__global__ void paged(float* out, const float* q, const float* kc, int kv_heads, const int* tables,\n"
    "                      const int* lens, int row_blocks, int kv_block_stride) {\n"
    "  attend<HEAD, BLOCK>(out, q, kc, kv_heads, tables, lens, row_blocks, kv_block_stride);\n"
    "}\n"
    "template <int BLOCK>\n"
    "void launch(Tensor& out, Tensor& query, Tensor& cache, int kv_heads, Tensor& tables, Tensor& lens, int max_len) {\n"
    "  int num_seqs = query.size(0), num_heads = query.size(1), head_size = query.size(2);\n"
    "  int smem = std::max(CDIV(max_len, BLOCK) * BLOCK * sizeof(float), 2 * head_size * sizeof(float));\n"
    "  dim3 grid(num_heads, num_seqs);\n"
    "  switch (head_size) {\n"
    "    case 32: paged<32, BLOCK><<<grid, 128, smem>>>(out.data(), query.data(), cache.data(), kv_heads,\n"
    "                                                   tables.ints(), lens.ints(), tables.size(1), cache.stride(0)); break;\n"
    "  }\n"
    "}\n"
    "void run(Tensor& o, Tensor& q, Tensor& c, int h, Tensor& t, Tensor& l, int m) { launch<8>(o, q, c, h, t, l, m); }\n")


def test_a_lengths_array_is_drawn_within_the_size_the_launch_gives_shared_memory_for(project):
    """`lens` bounds the loops (through `blocks = CDIV(len, BLOCK)`, in the helper the kernel hands it
    to): drawn from 1 to `max_len`, the size the launcher sizes the logits by and hands the kernel no
    other way; the block table's rows are the blocks that many tokens take, rounded up."""
    s, p = infer(project, "paged.cu", PAGED, "paged")
    assert s.args["lens"].init.kind == "randint" and s.args["lens"].init.exprs == ("1", "max_len + 1"), p.notes
    assert s.args["row_blocks"].value == "(max_len + 7) / 8"
    assert list(s.args["tables"].shape) == ["num_seqs", "(max_len + 7) / 8"]
    assert s.args["tables"].init.exprs == ("0", "V")   # the block table still indexes the cache's blocks


def test_shared_memory_is_read_with_the_case_of_a_tensor_extent_and_groups_are_whole(project):
    """`head_size = query.size(2)` is the caller's (a tensor's extent): `case 32:` fixes it, so the
    launcher's `std::max` reads over the sizes; `heads / kv_heads` of the grid's `gridDim.x`, in the
    helper, requires whole groups, and the cache has `kv_heads` heads."""
    s, p = infer(project, "paged2.cu", PAGED, "paged")
    assert p.comment.count("shared_mem = \"max((max_len + 8 - 1) / 8 * 8 * 4, 2 * 32 * 4)\"") == 1, p.comment
    assert "num_heads % kv_heads == 0" in s.require
    assert list(s.args["kc"].shape) == ["V", "kv_heads", "256"]


VEC = ("#define MIN(a, b) ((a) < (b) ? (a) : (b))\n"
       "template <typename T, int N> struct Vec {};\n"
       "template <> struct Vec<float, 4> { using Type = float4; };\n"
       "template <typename T, int BLOCK>\n"
       "__global__ void sum_rows(float* out, const T* cache, int rows) {\n"
       "  constexpr int W = MIN(16 / sizeof(T), BLOCK);\n"
       "  using V = typename Vec<T, W>::Type;\n"
       "  const int row = blockIdx.x;\n"
       "  if (row >= rows) return;\n"
       "  const V v = *reinterpret_cast<const V*>(cache + row * BLOCK + threadIdx.x * W);\n"
       "  out[row * (BLOCK / W) + threadIdx.x] = v.x + v.y + v.z + v.w;\n"
       "}\n"
       "void run(float* o, const float* c, int rows) { sum_rows<float, 32><<<rows, 8>>>(o, c, rows); }\n")


def test_a_vector_type_named_through_a_constant_of_the_body_is_read_whole(project):
    """The paged attention kernel reads its value cache as `Vec<scalar_t, V_VEC_SIZE>::Type` with
    `constexpr int V_VEC_SIZE = MIN(16 / sizeof(scalar_t), BLOCK_SIZE)`: 4 floats a read, so a row
    of 32 is reached to its end (read as one float, the last reach was 29 and no shape fitted)."""
    s, p = infer(project, "vec.cu", VEC, "sum_rows")
    assert list(s.args["cache"].shape) == ["rows", "32"], p.notes

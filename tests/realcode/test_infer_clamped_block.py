"""Issue 25: a launcher that sizes the block `min(E, 512)` for a kernel taking one element per
thread (vLLM reshape_and_cache: `dim3 block(std::min(num_heads * head_div_x, 512))`, the kernel
`if (threadIdx.x >= num_heads * h_blocks) return;` and no loop past the block) keeps E within 512:
above it the launch leaves elements unwritten. A kernel that strides by `blockDim` takes any E."""
from astra_cuda.model import source, spec
from .test_infer_asm_accesses import infer

ONE_PER_THREAD = (
    "__global__ void per_head(const float* in, float* out, int heads, int dim, int x) {\n"
    "  const int groups = dim / x;\n  const int t = threadIdx.x;\n  if (t >= heads * groups) return;\n"
    "  for (int i = 0; i < x; i++) out[blockIdx.x * heads * dim + t * x + i] = in[blockIdx.x * heads * dim + t * x + i];\n"
    "}\n"
    "void run(const float* in, float* out, int rows, int heads, int dim, int x) {\n"
    "  dim3 block(std::min(heads * (dim / x), 512));\n  per_head<<<rows, block>>>(in, out, heads, dim, x);\n}\n")


def test_a_clamped_block_over_one_element_per_thread_requires_the_count_within_the_clamp(project):
    s, p = infer(project, "clamp.cu", ONE_PER_THREAD, "per_head")
    assert "heads * (dim / x) <= 512" in s.require
    from astra_cuda.infer.sizes import clamped_block_requires
    assert clamped_block_requires(["std::min(512, n)"], "threadIdx.x", ["n"]) == ["n <= 512"]


def test_a_clamped_block_the_kernel_strides_over_requires_nothing(project):
    strided = ONE_PER_THREAD.replace("const int t = threadIdx.x;\n  if (t >= heads * groups) return;\n  ",
                                     "for (int t = threadIdx.x; t < heads * groups; t += blockDim.x)\n  ")
    assert "blockDim" in strided
    s, p = infer(project, "strided.cu", strided, "per_head")
    assert not any("512" in r for r in s.require)


def test_a_permutation_over_a_range_draws_distinct_values_below_it():
    """vLLM reshape_and_cache: `slot_mapping` places num_tokens rows into the cache's V slots, each
    slot once — `permutation(V)` draws that many distinct values of 0 .. V-1."""
    from astra_cuda.gate import suite
    m = source.parse('/* @astra\ngrid = ["1"]\nblock = ["1"]\n[sizes]\nn = [100]\nV = [1000]\n[args]\n'
                     'idx = { type = "int64", shape = ["n"], init = "permutation(V)" }\n'
                     'out = { type = "float", shape = ["V"], output = true }\nn = "n"\n*/\n'
                     '__global__ void k(const long* idx, float* out, int n) { out[idx[0]] = 0; }\n')
    s = spec.load(m.kernel("k"), m)
    drawn = suite.inputs(s, {"n": 100, "V": 1000}, "normal", 7)["idx"].tolist()
    assert len(set(drawn)) == 100 and 0 <= min(drawn) and max(drawn) < 1000 and max(drawn) >= 100
    try:
        suite.inputs(s, {"n": 100, "V": 50}, "normal", 7)
    except ValueError as e:
        assert "distinct values do not fit" in str(e)
    else:
        raise AssertionError("permutation(50) drew 100 distinct values")


CACHE = (
    "__global__ void to_cache(const float* key, float* cache, const long* slots, int key_stride, int heads,\n"
    "                         int head_size, int block_size, int x) {\n"
    "  const long t = blockIdx.x;\n  const long slot = slots[t];\n  if (slot < 0) return;\n"
    "  const long blk = slot / block_size, off = slot % block_size;\n"
    "  const int groups = head_size / x;\n  const int g = threadIdx.x;\n  if (g >= heads * groups) return;\n"
    "  const int h = g / groups, j = g % groups;\n"
    "  const float* src = key + t * key_stride + h * head_size + j * x;\n"
    "  float* dst = cache + blk * heads * groups * block_size * x + h * groups * block_size * x\n"
    "               + j * block_size * x + off * x;\n"
    "  for (int i = 0; i < x; i++) dst[i] = src[i];\n}\n"
    "void run(const float* k, float* c, const long* s, int tokens, int heads, int head_size, int bs, int x) {\n"
    "  dim3 block(std::min(heads * (head_size / x), 512));\n"
    "  to_cache<<<tokens, block>>>(k, c, s, heads * head_size, heads, head_size, bs, x);\n}\n")


def test_a_scatter_into_blocks_of_slots_draws_distinct_slots_and_keeps_the_others(project):
    """vLLM reshape_and_cache: `slot = slot_mapping[t]` split into `slot / block_size` and
    `slot % block_size` places each token in a cache of V blocks: the slots are distinct (randint's
    repeats race two tokens for one slot), below V * block_size, and the cache is inout (the slots
    no token names keep their rows). Its block, `min(E, 512)`, is probed as E: the key's rows whole."""
    s, p = infer(project, "cache.cu", CACHE, "to_cache")
    assert str(s.args["slots"].init) == "permutation(V * block_size)"
    assert s.args["cache"].inout and s.args["cache"].shape == ("V * block_size", "heads", "head_size")
    assert s.args["key"].shape == ("tokens", "heads", "head_size")
    assert "V * block_size >= tokens" in s.require


FUNCTOR = "struct Copy {\n  __device__ void operator()(float& d, const float s) const { d = s; }\n};\n"


def test_a_functor_that_only_assigns_its_reference_writes_the_element_without_reading_it(project):
    """vLLM reshape_and_cache: the value rows go through `v_op(value_dst[i * block_size], value_src[i])`,
    a `CopyWithScaleOp` whose operator() only assigns `dst`: the cache is written, not read — so the
    slots are a scatter's (distinct). A functor that adds into it (`d += s`) reads it: no scatter."""
    copy = FUNCTOR + CACHE.replace("  for (int i = 0; i < x; i++) dst[i] = src[i];",
                                   "  Copy op;\n  for (int i = 0; i < x; i++) op(dst[i], src[i]);")
    assert "op(dst[i], src[i])" in copy
    s, p = infer(project, "functor.cu", copy, "to_cache")
    assert str(s.args["slots"].init) == "permutation(V * block_size)"
    s, p = infer(project, "adds.cu", copy.replace("{ d = s; }", "{ d += s; }"), "to_cache")
    assert "permutation" not in str(s.args["slots"].init)


def test_an_overload_is_followed_by_its_count_of_arguments(project):
    """vLLM vectorization_utils: `vectorize_with_alignment(in, out, len, tid, stride, op)` forwards
    to the 7-argument overload (`Vec{op}, std::forward<ScaOp>(op)`): each call is followed into
    the definition of its own count of arguments, not the first of the name."""
    s, p = infer(project, "overload.cu",
                 "template <typename Op> __device__ void copy(float* out, const float* in, int n, Op op) {\n"
                 "  copy(out, in, n, 0, op);\n}\n"
                 "template <typename Op> __device__ void copy(float* out, const float* in, int n, int start, Op op) {\n"
                 "  for (int i = start + threadIdx.x; i < n; i += blockDim.x) out[i] = in[i];\n}\n"
                 "struct Id {};\n"
                 "__global__ void rows(float* out, const float* in, int cols) {\n"
                 "  copy(out + blockIdx.x * cols, in + blockIdx.x * cols, cols, Id{});\n}\n"
                 "void run(float* o, const float* i, int n, int cols) { rows<<<n, 128>>>(o, i, cols); }\n",
                 "rows")
    assert s.args["out"].output and s.args["out"].shape == ("n", "cols")
    assert not any("could not be bounded" in x or "could not be read" in x for x in p.notes)


ROWS_PER_BLOCK = (
    "__global__ void rows_copy(const float* in, float* out, int rows, int cols) {\n"
    "  const int row = blockIdx.x * 4 + threadIdx.y;\n  if (row >= rows) return;\n"
    "  for (int c = threadIdx.x; c < cols; c += 128) out[row * cols + c] = in[row * cols + c];\n}\n"
    "void run(const float* in, float* out, int rows, int cols) {\n"
    "  const int per_block = rows < 4 ? rows : 4;\n"
    "  dim3 block(128, per_block);\n  dim3 grid((per_block + rows - 1) / per_block);\n"
    "  rows_copy<<<grid, block>>>(in, out, rows, cols);\n}\n")


def test_a_clamped_block_the_grid_tiles_the_count_over_requires_nothing(project):
    """DeepSpeed fused_residual_ln: `min(rows, groups_max)` rows a block and `cdiv(rows, that)`
    blocks cover every row, so rows are not bounded by the clamp (a `rows <= 1` kept its bench at
    one row: 0.09 MiB)."""
    from astra_cuda.infer.sizes import clamped_block_requires
    assert clamped_block_requires(["min(rows, 4)"], "threadIdx.y", ["rows"],
                                  ["(min(rows, 4) + rows - 1) / min(rows, 4)"]) == []
    s, p = infer(project, "tiled.cu", ROWS_PER_BLOCK, "rows_copy")
    assert not any("<= 4" in r for r in s.require), s.require
    assert s.args["out"].shape == ("rows", "cols") and max(s.bench["rows"]) > 4

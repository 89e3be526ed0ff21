"""Issue 25: a launcher that sizes the block `min(E, 512)` for a kernel taking one element per
thread (vLLM reshape_and_cache: `dim3 block(std::min(num_heads * head_div_x, 512))`, the kernel
`if (threadIdx.x >= num_heads * h_blocks) return;` and no loop past the block) keeps E within 512:
above it the launch leaves elements unwritten. A kernel that strides by `blockDim` takes any E."""
from astra_cuda import api
from astra_cuda.model import source, spec

ONE_PER_THREAD = (
    "__global__ void per_head(const float* in, float* out, int heads, int dim, int x) {\n"
    "  const int groups = dim / x;\n  const int t = threadIdx.x;\n  if (t >= heads * groups) return;\n"
    "  for (int i = 0; i < x; i++) out[blockIdx.x * heads * dim + t * x + i] = in[blockIdx.x * heads * dim + t * x + i];\n"
    "}\n"
    "void run(const float* in, float* out, int rows, int heads, int dim, int x) {\n"
    "  dim3 block(std::min(heads * (dim / x), 512));\n  per_head<<<rows, block>>>(in, out, heads, dim, x);\n}\n")


def infer(project, name, text, kernel):
    project(name, text)
    path = project.root / name
    p = api.infer_spec(api.snapshot(path.read_text(), str(path)), kernel, run=False)
    k = source.parse(text).kernel(kernel)
    m = source.parse(text[:k.span.start_byte] + p.comment + text[k.span.start_byte:])
    return spec.load(m.kernel(kernel), m), p


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

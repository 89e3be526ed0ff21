"""Issue 25: accesses inference reads where public kernels make them through inline PTX (sgl-kernel
and FlashInfer's concat_mla: `ld.global.nc` / `st.global` helpers, `%laneid`), pointers a loop
steps once per trip, and the member types of a traits class the body names through an alias."""
from astra_cuda import api
from astra_cuda.model import source, spec

PTX = ("__device__ __forceinline__ int lane() { int l; asm(\"mov.s32 %0, %laneid;\" : \"=r\"(l)); return l; }\n"
       "__device__ __forceinline__ int2 ld_v2(const int2* p) {\n  int2 r;\n"
       "  asm volatile(\"ld.global.nc.v2.s32 {%0, %1}, [%2];\" : \"=r\"(r.x), \"=r\"(r.y) : \"l\"(p));\n  return r;\n}\n"
       "__device__ __forceinline__ void st_v2(int2* p, int2 v) {\n"
       "  asm volatile(\"st.global.v2.s32 [%0], {%1, %2};\" ::\"l\"(p), \"r\"(v.x), \"r\"(v.y));\n}\n")


def infer(project, name, text, kernel):
    project(name, text)
    path = project.root / name
    p = api.infer_spec(api.snapshot(path.read_text(), str(path)), kernel, run=False)
    k = source.parse(text).kernel(kernel)
    m = source.parse(text[:k.span.start_byte] + p.comment + text[k.span.start_byte:])
    return spec.load(m.kernel(kernel), m), p


def test_ptx_loads_and_stores_through_a_pointer_stepped_per_trip_give_roles_and_strides(project):
    """A warp per (row, chunk of 4 heads) copies 4 rows of 128 halves through `int2` PTX accesses,
    stepping both pointers by a row stride per trip: `out` is written (not an input), and the
    strides come out as the contiguous layout's (128 per head, 512 per row)."""
    s, p = infer(project, "mla.cu", PTX +
                 "__global__ void copy_heads(__half* out, const __half* in, int rows, long row_stride, int head_stride) {\n"
                 "  int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32, row = warp;\n"
                 "  if (row >= rows) return;\n"
                 "  const int2* src = reinterpret_cast<const int2*>(in + row * row_stride) + lane();\n"
                 "  int2* dst = reinterpret_cast<int2*>(out + row * row_stride) + lane();\n"
                 "  int2 cur = ld_v2(src);\n"
                 "  for (int i = 0; i < 4; ++i) {\n    int2 next;\n"
                 "    if (i + 1 < 4) next = ld_v2(src + (head_stride >> 2));\n"
                 "    st_v2(dst, cur);\n    cur = next;\n"
                 "    src += head_stride >> 2;\n    dst += head_stride >> 2;\n  }\n}\n"
                 "void run(__half* o, const __half* i, int rows, long rs, int hs) {\n"
                 "  copy_heads<<<(rows + 3) / 4, 128>>>(o, i, rows, rs, hs);\n}\n",
                 "copy_heads")
    assert s.args["out"].output and not s.args["in"].output and not s.args["in"].inout
    assert s.args["out"].shape == ("rows", "512") and s.args["in"].shape == ("rows", "512")
    assert s.args["head_stride"].value == "128" and s.args["row_stride"].value == "512"


def test_a_traits_member_type_named_through_an_alias_sizes_the_vector_access(project):
    """`using Traits = VecTraits<T>; using Vec = typename Traits::Vec;` with `VecTraits<__half>`'s
    `Vec` an int2: a `Vec*` over halves moves 4 of them per access."""
    s, p = infer(project, "tr.cu", PTX +
                 "template <typename T> struct VecTraits;\n"
                 "template <> struct VecTraits<__half> { using Vec = int2; };\n"
                 "template <typename T> __global__ void copy4(T* out, const T* in, int n) {\n"
                 "  using Traits = VecTraits<T>;\n  using Vec = typename Traits::Vec;\n"
                 "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= n) return;\n"
                 "  st_v2(reinterpret_cast<Vec*>(out) + i, ld_v2(reinterpret_cast<const Vec*>(in) + i));\n}\n"
                 "void run(__half* o, const __half* i, int n) { copy4<__half><<<(n + 127) / 128, 128>>>(o, i, n); }\n",
                 "copy4")
    assert s.args["out"].output and s.args["out"].shape == ("4 * n",)


def test_a_pointer_moved_once_and_reads_under_a_named_condition_are_measured(project):
    """DeepSpeed attn_softmax_v2: `vals += row * len;` once, outside any loop, moves the pointer by
    exactly that; `bool ok = i < len; ... ok ? vals[i] : 0` reads only where the condition holds."""
    s, p = infer(project, "sm.cu",
                 "__global__ void row_scale(float* vals, int len, int scale, int rows) {\n"
                 "  int row = blockIdx.x;\n  if (row < rows) {\n    vals += row * len;\n"
                 "    for (int i = threadIdx.x; i < 16384; i += blockDim.x) {\n"
                 "      bool ok = i < len;\n      float v = ok ? vals[i] : 0.0f;\n"
                 "      if (ok) vals[i] = scale * v;\n    }\n  }\n}\n"
                 "void run(float* v, int rows, int len) { row_scale<<<rows, 256>>>(v, len, 2, rows); }\n",
                 "row_scale")
    assert s.args["vals"].inout and sorted(s.args["vals"].shape) == ["len", "rows"]


def test_a_scatter_through_an_index_array_draws_a_permutation(project):
    """TransformerEngine moe_permute: `out[map[row] * cols + i] = in[row * cols + i]`, `out` never
    read: the destinations must be distinct (randint's repeats race for a row and leave others
    unwritten), so the index array is a permutation and `out` has as many rows as it has entries."""
    s, p = infer(project, "perm.cu",
                 "__global__ void scatter_rows(const float* in, float* out, const int* map, int rows, int cols) {\n"
                 "  int row = blockIdx.x;\n  int dest = map[row];\n"
                 "  for (int i = threadIdx.x; i < cols; i += blockDim.x) out[dest * cols + i] = in[row * cols + i];\n}\n"
                 "void run(const float* i, float* o, const int* m, int rows, int cols) {\n"
                 "  scatter_rows<<<rows, 128>>>(i, o, m, rows, cols);\n}\n",
                 "scatter_rows")
    assert str(s.args["map"].init) == "permutation" and s.args["map"].shape == ("rows",)
    assert s.args["out"].shape == ("rows", "cols") and "V" not in s.sizes


def test_a_permutation_init_holds_each_index_once():
    from astra_cuda.gate import suite
    from astra_cuda.model import spec as spec_mod
    m = source.parse('/* @astra\ngrid = ["1"]\nblock = ["1"]\n[sizes]\nn = [1000]\n[args]\n'
                     'idx = { type = "int32", shape = ["n"], init = "permutation" }\n'
                     'out = { type = "float", shape = ["n"], output = true }\nn = "n"\n*/\n'
                     '__global__ void k(const int* idx, float* out, int n) { out[idx[0]] = 0; }\n')
    s = spec_mod.load(m.kernel("k"), m)
    drawn = suite.inputs(s, {"n": 1000}, "normal", 7)["idx"]
    assert sorted(drawn.tolist()) == list(range(1000)) and drawn.tolist() != list(range(1000))
    bad = source.parse(m.text.replace('"permutation"', '"permutation(0, 8)"'))
    try:
        spec_mod.load(bad.kernel("k"), bad)
    except spec_mod.SpecErrors as e:
        assert "permutation takes no bounds" in e.diagnostics[0].message
    else:
        raise AssertionError("permutation(0, 8) was accepted")


def test_an_input_read_at_a_sum_of_sizes_gets_the_polynomial_that_measures_it(project):
    """DeepSpeed attn_softmax_v2's alibi: `alibi[(row * heads * mp + head_offset + head) * len + i]`
    reaches no product of sizes; its extent is a polynomial of degree one in each size, fitted
    exactly, the name every term shares (`len`) the last dimension."""
    s, p = infer(project, "ab.cu",
                 "__global__ void add_bias(float* out, const float* alibi, int rows, int heads, int mp, int head_offset, int len) {\n"
                 "  int row = blockIdx.x / heads, head = blockIdx.x % heads;\n"
                 "  int off = (row * heads * mp + head_offset + head) * len;\n"
                 "  for (int i = threadIdx.x; i < len; i += blockDim.x) out[blockIdx.x * len + i] += alibi[off + i];\n}\n"
                 "void run(float* o, const float* a, int rows, int heads, int mp, int ho, int len) {\n"
                 "  add_bias<<<rows * heads, 128>>>(o, a, rows, heads, mp, ho, len);\n}\n",
                 "add_bias")
    assert s.args["alibi"].shape == ("rows * heads * mp - heads * mp + head_offset + heads", "len")


def test_an_integer_only_compared_with_numbers_is_a_mode_not_a_size(project):
    """FasterTransformer's `int8_mode`: `if (int8_mode == 2)` picks a quantized path; as a size its
    values (1, 100, 4096) pick one by accident and it led the guessed grid. It takes 0, the path no
    comparison selects, and is no size."""
    s, p = infer(project, "mode.cu",
                 "__global__ void act(float* out, const float* scale, int int8_mode, int m, int n) {\n"
                 "  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < m * n; i += blockDim.x * gridDim.x) {\n"
                 "    float v = out[i];\n    if (int8_mode == 2) v *= scale[0];\n"
                 "    out[i] = v > 0.f ? v : 0.f;\n  }\n}\n",
                 "act")
    assert s.args["int8_mode"].value == "0" and "int8_mode" not in s.sizes
    assert s.grid[0] != "int8_mode" and sorted(s.args["out"].shape) == ["m", "n"]

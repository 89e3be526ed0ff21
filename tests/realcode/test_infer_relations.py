"""Issue 25: sizes the launcher relates (a flat count computed from rows and a row width) and the
packets a vector access reads — minimal cases written here of what DeepSpeed's in-place bias
kernels showed: `input` was taken as [total, width] with total free, so most of it stayed unwritten."""
from astra_cuda.model import access, source, spec
from astra_cuda import api

PACKED = (
    "template <int Bytes> __device__ void load_packet(void* dst, const void* src) {\n"
    "#ifdef USE_PTX\n"
    "  asm volatile(\"ld.global.v4.u32 {%0}, [%1];\" : \"=r\"(*(unsigned*)dst) : \"l\"(src));\n"
    "#else\n"
    "  reinterpret_cast<uint4*>(dst)[0] = reinterpret_cast<const uint4*>(src)[0];\n"
    "#endif\n}\n"
    "template <int Bytes> __device__ void store_packet(void* dst, const void* src) {\n"
    "  reinterpret_cast<uint4*>(dst)[0] = reinterpret_cast<const uint4*>(src)[0];\n}\n"
    "template <typename T>\n"
    "__global__ void bias_add(T* x, const T* bias, int total, int width) {\n"
    "  constexpr int vec = 16 / sizeof(T);\n"
    "  const int offset = (blockIdx.x * blockDim.x + threadIdx.x) * vec;\n"
    "  if (offset < total) {\n"
    "    T d[vec], b[vec];\n"
    "    load_packet<16>(d, x + offset);\n    load_packet<16>(b, bias + offset % width);\n"
    "    for (int i = 0; i < vec; i++) d[i] += b[i];\n"
    "    store_packet<16>(x + offset, d);\n  }\n}\n"
    "template <typename T> void launch_bias_add(T* x, const T* bias, int width, int rows) {\n"
    "  const int total = rows * width;\n"
    "  const int per_block = 256 * (16 / sizeof(T));\n"
    "  bias_add<<<(total + per_block - 1) / per_block, 256>>>(x, bias, total, width);\n}\n"
    "template void launch_bias_add<float>(float*, const float*, int, int);\n")


def _inferred(project, rel, text, kernel):
    path = project(rel, text)
    p = api.infer_spec(api.snapshot(path.read_text(), str(path)), kernel, run=False)
    k = source.parse(text).kernel(kernel)
    m = source.parse(text[:k.span.start_byte] + p.comment + text[k.span.start_byte:])
    return spec.load(m.kernel(kernel), m), p


def test_a_count_the_launcher_computes_from_the_row_width_is_that_product(project):
    s, p = _inferred(project, "bias.cu", PACKED, "bias_add")
    assert s.args["total"].value == "rows * width"
    assert s.args["x"].shape == ("rows", "width") and s.args["bias"].shape == ("width",)
    assert s.args["x"].inout
    # 16-byte packets of floats read past the last checked offset: the row is whole packets
    assert "width % 4 == 0" in s.require
    assert all(c["width"] % 4 == 0 for c in s.cases())


def test_both_sides_of_a_preprocessor_branch_in_a_helper_are_walked():
    k = source.parse("__global__ void k(float* out, int n) {\n  int i = threadIdx.x;\n"
                     "#if defined(WIDE)\n  out[i] = 0.0f;\n#elif defined(ODD)\n  out[2 * i] = 0.0f;\n"
                     "#else\n  out[i + 1] = 0.0f;\n#endif\n}\n").kernel("k")
    facts = access.analyse(k, {"n": 64}, (1, 1, 1), (32, 1, 1), {"out": 4}, set(), 100, {})
    assert facts.uses["out"].written and facts.uses["out"].hi == 62


def test_sizeof_of_the_instantiated_type_sets_the_values_per_access():
    k = source.parse("template <typename T> __global__ void k(T* out, int n) {\n"
                     "  constexpr int vec = 16 / sizeof(T);\n  int i = threadIdx.x * vec;\n"
                     "  if (i < n) out[i] = 0;\n}\n").kernel("k")
    facts = access.analyse(k, {"n": 1 << 20}, (1, 1, 1), (32, 1, 1), {"out": 2}, set(), 100, {"sizeof(T)": 2})
    assert facts.uses["out"].hi == 31 * 8


def test_a_read_only_input_modified_on_a_gpu_asks_for_sizes_taken_equal():
    """On a GPU a write past one buffer lands in the next, so an out-of-bounds write shows as an
    input modified (llm-awq's rotary wrote past `query` into `cos_sin_cache`)."""
    from astra_cuda.infer import Proposal, validate
    first = Proposal("/* @astra first */\n")
    asked: list[dict[str, str]] = []

    def redo(decide):
        asked.append(decide)
        return None
    validate.alternatives(first, validate.Trial(True, False, "inputs_unchanged: `cache` was modified",
                                                ("inputs_unchanged",)), redo)
    assert {"sizes": "equal"} in asked and {"roles": "inout"} in asked


ROPE = ("template <typename T>\n"
        "__global__ void rope(T* q, const T* cache, int rot_dim, int stride, int heads, int head_size) {\n"
        "  const int half = rot_dim / 2;\n"
        "  for (int i = threadIdx.x; i < heads * half; i += blockDim.x) {\n"
        "    const int h = i / half, r = i % half;\n"
        "    const int base = blockIdx.x * stride + h * head_size;\n"
        "    const T x = q[base + r], y = q[base + half + r];\n"
        "    q[base + r] = x * cache[r] - y * cache[half + r];\n"
        "    q[base + half + r] = y * cache[r] + x * cache[half + r];\n  }\n}\n"
        "void launch(float* q, const float* cache, int tokens, int heads, int head_size, int rot_dim) {\n"
        "  int stride = heads * head_size;\n"
        "  rope<float><<<tokens, 256>>>(q, cache, rot_dim, stride, heads, head_size);\n}\n")


def test_a_stride_the_launcher_computes_from_two_sizes_is_their_product(project):
    s, p = _inferred(project, "rope.cu", ROPE, "rope")
    assert s.args["stride"].value == "heads * head_size" and "stride" not in s.sizes


def test_an_element_passed_to_a_reference_parameter_or_a_functor_is_written():
    """vLLM writes its outputs through `from_float(out[i], acc)` (a `float&` parameter) and
    `v_op(value_dst[i], value_src[i])` (a functor the kernel holds): those pointers are outputs."""
    text = ("__device__ void from_float(float& dst, float src) { dst = src; }\n"
            "struct Copy { __device__ void operator()(float& d, const float s) const { d = s; } };\n"
            "__global__ void k(float* out, float* cache, const float* src, int n) {\n"
            "  int i = threadIdx.x;\n  Copy op{};\n"
            "  if (i < n) { from_float(out[i], src[i]); op(cache[2 * i], src[i]); }\n}\n")
    k = source.parse(text).kernel("k")
    helpers = access.helpers_of(["__device__ void from_float(float& dst, float src) { dst = src; }"])
    facts = access.analyse(k, {"n": 64}, (1, 1, 1), (64, 1, 1), {"out": 4, "cache": 4, "src": 4}, set(), 100, {},
                           helpers=helpers)
    assert facts.uses["out"].written and facts.uses["out"].hi == 63
    assert facts.uses["cache"].written and facts.uses["cache"].hi == 126
    assert not facts.uses["src"].written


def test_a_launch_macro_handed_to_a_dispatch_macro_is_a_launch():
    """`DISPATCH_BY_KV_CACHE_DTYPE(dt, kv, CALL_RESHAPE_AND_CACHE)`: the launch macro is never
    invoked by name in the file, the dispatch macro (in a header) calls it once per case."""
    text = ("template <typename T> __global__ void fill(T* out, int n) {\n"
            "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) out[i] = T(0);\n}\n"
            "#define CALL_FILL(T) fill<T><<<grid, block, 0, stream>>>(reinterpret_cast<T*>(out), n)\n"
            "void run(void* out, int n, int dt, cudaStream_t stream) {\n"
            "  dim3 grid((n + 127) / 128);\n  dim3 block(128);\n  DISPATCH_BY_DTYPE(dt, CALL_FILL);\n}\n")
    m = source.parse(text)
    sites = m.launches_of("fill")
    assert len(sites) == 1 and sites[0].via_macro == "CALL_FILL" and sites[0].function == "run"
    assert sites[0].block == "block" and sites[0].args[1] == "n"


def test_a_dependent_member_of_a_vector_template_is_not_measured():
    """vLLM paged attention reinterprets through `Vec<scalar_t, VEC_SIZE>::Type`: not a vector
    template Astra measures (it recursed without end and `astra spec` crashed)."""
    from astra_cuda.infer.types import Types
    t = Types(source.parse("__global__ void k(float* x) {}\n"), None, None)
    assert t.vector_bytes("Vec<scalar_t, VEC_SIZE>::Type", {"scalar_t": "float", "VEC_SIZE": "4"}) is None
    assert t.vector_bytes("AlignedVector<T, 8>", {"T": "float"}) == 32


PICKED = ("template <bool use_map, bool wide>\n"
          "__global__ void mm(const float* x, float* out, int n, const unsigned* map) {\n"
          "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) out[i] = x[use_map ? map[i] : i];\n}\n"
          "typedef void (*fp_mm)(const float*, float*, int, const unsigned*);\n"
          "fp_mm mm_pick(bool wide, const unsigned* map) {\n"
          "  if (wide) { if (map) return mm<true, true>; else return mm<false, true>; }\n"
          "  if (map) return mm<true, false>;\n  return mm<false, false>;\n}\n"
          "void run(const float* x, float* out, int n, const unsigned* map) {\n"
          "  dim3 threads(128);\n  dim3 blocks((n + 127) / 128);\n"
          "  fp_mm kernel = mm_pick(n > 4096, map);\n  kernel<<<blocks, threads>>>(x, out, n, map);\n}\n")


def test_a_launch_through_the_pointer_a_picker_function_returns(project):
    """exllama's `fp_q4_matmul_kernel kernel = q4_matmul_kernel_pick(...); kernel<<<...>>>`: the
    launch is read as one of the instances the picker returns, the general one."""
    s, p = _inferred(project, "pick.cu", PICKED, "mm")
    assert s.instantiate == "<false, false>" and s.block == ("128",)
    assert s.args["out"].shape == ("n",)


DEFAULTS = ("__device__ void scales_of(float* all, const float* in, int n, int group = 0) {\n"
            "  if (group > 0) {\n    for (int i = threadIdx.x; i < n; i += blockDim.x) all[i * group] = in[i];\n"
            "  } else if (threadIdx.x == 0) {\n    all[blockIdx.x] = in[blockIdx.x * n];\n  }\n}\n"
            "template <bool has_residual>\n"
            "__global__ void quant(float* scales, const float* in, int n, float* residual = nullptr) {\n"
            "  scales_of(scales, in, n);\n"
            "  if constexpr (has_residual) { residual[blockIdx.x * n + threadIdx.x] += 1.0f; }\n}\n"
            "void run(float* s, const float* in, int tokens, int n) {\n"
            "  quant<false><<<tokens, 256>>>(s, in, n);\n}\n")


def test_a_helper_parameter_left_at_its_default_decides_its_branch(project):
    """vLLM's compute_dynamic_per_token_scales(..., group_size = 0): the grouped branch is not the
    call's, so `scales` is one value per token; `residual`, untouched without has_residual, is
    no output (it would be reported as never written)."""
    s, p = _inferred(project, "q.cu", DEFAULTS, "quant")
    assert s.args["scales"].shape == ("tokens",) and s.args["scales"].output
    assert not s.args["residual"].output and not s.args["residual"].inout


def test_a_vector_objects_load_and_store_move_one_vector_of_the_pointer():
    """FlashInfer's `vec_t<float, 4> v; v.cast_load(v_a + off); ... out.cast_store(v_m + off)`: the
    object's methods read and write one vector's elements where they are pointed (before, a method
    Astra could not see into made every extent unknown and every pointer an output)."""
    k = source.parse("template <int vec> __global__ void merge(float* a, float* m, int d) {\n"
                     "  vec_t<float, vec> va, vm;\n  va.cast_load(a + blockIdx.x * d + threadIdx.x * vec);\n"
                     "  vm.cast_store(m + blockIdx.x * d + threadIdx.x * vec);\n}\n").kernel("merge")
    sizes = {"float": 4, "vec_t<float, vec>": 16}
    facts = access.analyse(k, {"d": 64}, (8, 1, 1), (16, 1, 1), {"a": 4, "m": 4}, set(), 100, {"vec": 4},
                           type_bytes=sizes.get)
    assert facts.uses["a"].read and not facts.uses["a"].written and facts.uses["a"].hi == 8 * 64 - 1
    assert facts.uses["m"].written and not facts.uses["m"].read and facts.uses["m"].hi == 8 * 64 - 1


# tokens of `batch` padded sequences, written head by head (FasterTransformer's
# add_fusedQKV_bias_transpose without padding): the output is whole only when tokens = batch * seq
SPLIT_HEADS = ("__global__ void split_heads(float* q, const float* qkv, int batch, int seq, int tokens, int heads, int d) {\n"
               "  int n = heads * d;\n"
               "  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < tokens * n; i += blockDim.x * gridDim.x) {\n"
               "    int t = i / n, b = t / seq, s = t % seq, h = (i % n) / d, c = i % d;\n"
               "    q[((b * heads + h) * seq + s) * d + c] = qkv[i];\n  }\n}\n"
               "void run(float* q, const float* qkv, int batch, int seq, int tokens, int heads, int d) {\n"
               "  split_heads<<<(tokens * heads * d + 255) / 256, 256>>>(q, qkv, batch, seq, tokens, heads, d);\n}\n")


def test_a_count_of_rows_is_tried_as_the_product_of_two_sizes(project):
    from astra_cuda import api
    path = project("heads.cu", SPLIT_HEADS)
    snap = api.snapshot(SPLIT_HEADS, str(path))
    p = api.infer.infer(snap.model.kernel("split_heads"), snap.model, path=str(path), decide={"sizes": "equal"})
    assert 'tokens = "batch * seq"' in " ".join(p.comment.split()), p.comment

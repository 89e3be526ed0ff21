"""Each offline transformation on code that matches and code that does not; every candidate
produced from the examples must compile (NVRTC)."""
import pytest

from astra_cuda.compile import extract, static
from astra_cuda.model import source
from astra_cuda.agents.offline import TRANSFORMS, Context

from agent_helpers import EXAMPLES, example

HEADER = "#include <cuda_fp16.h>\n"


def apply(name, text, kernel, ctx=None):
    return TRANSFORMS[name].apply(text, ctx or Context(kernel))


def body_of(text, kernel):
    return source.parse(text).kernel(kernel).text


# ---- fast math ----------------------------------------------------------------------------

def test_fast_math_rewrites_float_math_only():
    src = HEADER + """
__global__ void k(float* out, const float* x, const int* n, double* dd, int a, int b) {
  int i = threadIdx.x;
  float v = x[i];
  out[i] = expf(v) / (1.0f + v) + 1.0f / sqrtf(v);
  n += a / b;            // integer division stays
  dd[i] = dd[i] / 3.0;   // double division stays
}
"""
    rw = apply("fast_math", src, "k")
    assert rw is not None
    k = body_of(rw.text, "k")
    assert "__fdividef(__expf(v), 1.0f + v)" in k and "rsqrtf(v)" in k   # no redundant parentheses
    assert "a / b" in k and "dd[i] / 3.0" in k


def test_fast_math_no_match():
    src = HEADER + "__global__ void k(int* o, int a, int b) { o[threadIdx.x] = a / b; }\n"
    assert apply("fast_math", src, "k") is None


def test_fast_math_reaches_called_device_function():
    text, _, kernel = example("silu_and_mul")
    rw = apply("fast_math", text, kernel)
    assert "return __fdividef(x, 1.0f + __expf(-x));" in rw.text


# ---- restrict / const / ldg -------------------------------------------------------------

def test_ldg_only_where_const_restrict_already_promises_it():
    src = HEADER + """
__global__ void k(float* __restrict__ out, const float* __restrict__ in, const float* plain, float* scratch, int n) {
  int i = threadIdx.x;
  scratch[i] = in[i];
  out[i] = in[i] * 2.0f + scratch[i] + plain[i];
}
"""
    rw = apply("restrict_ldg", src, "k")
    assert rw is not None
    m = source.parse(rw.text).kernel("k")
    assert [p.type for p in m.params] == [p.type for p in source.parse(src).kernel("k").params]  # never changed
    assert m.text.count("__ldg(&in[i])") == 2 and "__ldg(&plain" not in m.text and "__ldg(&scratch" not in m.text


def test_restrict_ldg_no_match():
    src = HEADER + "__global__ void k(float* o, const float* x, int n) { o[threadIdx.x] = x[n]; }\n"
    assert apply("restrict_ldg", src, "k") is None


# ---- hoist ----------------------------------------------------------------------------------

def test_hoist_moves_invariant_declarations():
    text, _, kernel = example("merge_attn_states")
    rw = apply("hoist", text, kernel)
    k = body_of(rw.text, kernel)
    loop_at = k.index("for (int i")
    assert k.index("const float wa = expf(sa - m);") < loop_at
    assert k.index("const float va") > loop_at  # depends on i: stays


def test_hoist_no_match_when_variant():
    src = HEADER + """
__global__ void k(float* o, const float* x, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = x[i];
    o[i] = v;
  }
}
"""
    assert apply("hoist", src, "k") is None


def test_hoist_refuses_loads_from_written_arrays():
    src = HEADER + """
__global__ void k(float* o, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float first = o[0];
    o[i] = first;
  }
}
"""
    assert apply("hoist", src, "k") is None


# ---- unroll ----------------------------------------------------------------------------------

def test_unroll_fixed_trip_only():
    src = HEADER + """
#define N 8
__global__ void k(float* o, int n) {
  float s = 0.0f;
  for (int j = 0; j < N; ++j) s += o[j];
  for (int j = 0; j < n; ++j) s += o[j];
  o[0] = s;
}
"""
    rw = apply("unroll", src, "k")
    assert rw.text.count("#pragma unroll") == 1
    assert rw.text.index("#pragma unroll") < rw.text.index("j < N")


def test_unroll_no_match():
    src = HEADER + "__global__ void k(float* o, int n) { for (int j = 0; j < n; ++j) o[j] = 0.5f; }\n"
    assert apply("unroll", src, "k") is None


# ---- vectorize ---------------------------------------------------------------------------------

def test_vectorize_silu_16_byte():
    text, _, kernel = example("silu_and_mul")
    rw = apply("vectorize", text, kernel)
    k = body_of(rw.text, kernel)
    assert "constexpr int astra_vec = 8;" in k
    assert k.count("reinterpret_cast<const uint4*>(input") == 2
    assert "reinterpret_cast<uint4*>(out + (token * d) + astra_i0)" in k
    assert "% 16 == 0" in k and "the loop after it takes the rest" in k   # one comment: what and why
    # the vectorized version is not vectorized again
    assert apply("vectorize", rw.text, kernel) is None
    assert apply("vectorize64", rw.text, kernel) is None


def test_vectorize_widths():
    src = HEADER + """
__global__ void k(float* __restrict__ o, const float* __restrict__ x, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    o[blockIdx.x * n + i] = 2.0f * x[blockIdx.x * n + i];
  }
}
"""
    assert "astra_vec = 4;" in apply("vectorize", src, "k").text
    assert "astra_vec = 2;" in apply("vectorize64", src, "k").text
    assert apply("vectorize32", src, "k") is None   # one float per step gains nothing


def test_vectorize_respects_thread_budget():
    text, _, kernel = example("merge_attn_states")
    # head_dim 128 on 256 threads: 8 per step would leave 16 of 256 threads busy
    ctx = Context(kernel, block_threads=256, row_elements={"head_dim": 128})
    assert TRANSFORMS["vectorize"].apply(text, ctx) is None
    assert TRANSFORMS["vectorize64"].apply(text, ctx) is not None


@pytest.mark.parametrize("body", [
    "o[i] = x[i]; o[i + 1] = x[i];",          # two stores to one array
    "if (x[i] > 0.0f) o[i] = x[i];",           # conditional store
    "o[2 * i] = x[i];",                         # strided store
    "o[i] = x[i]; __syncthreads();",            # barrier in the loop
    "o[i] = x[i]; if (i > 3) break;",           # early exit
])
def test_vectorize_refuses(body):
    src = HEADER + f"""
__global__ void k(float* __restrict__ o, const float* __restrict__ x, int n) {{
  for (int i = threadIdx.x; i < n; i += blockDim.x) {{ {body} }}
}}
"""
    assert apply("vectorize", src, "k") is None


def test_vectorize_without_restrict_versions_the_loop_on_overlap():
    src = HEADER + """
__global__ void k(float* o, const float* x, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) { o[i] = x[i]; }
}
"""
    rw = apply("vectorize", src, "k")
    k = body_of(rw.text, "k")
    assert "reinterpret_cast<size_t>(o) + astra_n * sizeof(*o) <= reinterpret_cast<size_t>(x)" in k
    assert "`o` (written) do not overlap what the loop reads (checked at run time)" in rw.changes[0]
    # __restrict__ on either pointer already promises it: no check
    assert "sizeof(*o)" not in apply("vectorize", src.replace("float* o", "float* __restrict__ o"), "k").text


def test_overlap_check_logic():
    """The emitted condition, compiled for the host: apart, in place and shifted buffers."""
    import shutil
    import subprocess
    from astra_cuda.agents.offline.vectorize import _apart
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("no g++")
    cond = _apart("o", "0", "x", "n:0", "astra_n")
    one = _apart("o", "0", "s", "1:3", "astra_n")
    strict = _apart("o", "0", "x", "n!:0", "astra_n")
    prog = f"""#include <cstdio>
#include <cstddef>
bool apart(float* o, const float* x, long long astra_n) {{ return {cond}; }}
bool apart1(float* o, const float* s, long long astra_n) {{ return {one}; }}
bool strict(float* o, const float* x, long long astra_n) {{ return {strict}; }}
int main() {{
  static float buf[64];
  printf("%d%d%d%d%d%d\\n", apart(buf, buf + 16, 16), apart(buf + 16, buf, 16), apart(buf, buf, 16),
         apart(buf, buf + 4, 16), apart(buf + 4, buf, 16), apart1(buf + 8, buf, 4));
  printf("%d%d\\n", apart1(buf, buf, 4), strict(buf, buf, 16));
}}
"""
    import tempfile
    import pathlib
    d = pathlib.Path(tempfile.mkdtemp())
    (d / "t.cpp").write_text(prog)
    subprocess.run([gxx, "-O1", "-o", str(d / "t"), str(d / "t.cpp")], check=True)
    out = subprocess.run([str(d / "t")], capture_output=True, text=True, check=True).stdout.split()
    # apart, apart, the same start (in place), overlapping either way; one element s[3] outside o[0..4)
    assert out == ["111001", "00"]   # ... and no in-place exemption where a read follows the write


# ---- warp-shuffle reduction --------------------------------------------------------------------

def test_warp_reduce_replaces_tree():
    text, _, kernel = example("fused_add_rmsnorm")
    rw = apply("warp_reduce", text, kernel)
    k = body_of(rw.text, kernel)
    assert "__shfl_down_sync" in k and "block_reduce_sum(" not in k
    assert "scratch[MAX_THREADS]" not in k   # the unused scratch went away


def test_warp_reduce_no_match():
    src = HEADER + """
__device__ float not_a_tree(float v, float* s) { s[threadIdx.x] = v; return s[1]; }
__global__ void k(float* o) {
  __shared__ float s[32];
  const float t = not_a_tree(o[threadIdx.x], s);
  o[0] = t;
}
"""
    assert apply("warp_reduce", src, "k") is None


# ---- every candidate from the examples compiles ----------------------------------------------

def _chain(name):
    text, path, kernel = example(name)
    out = []
    for t in TRANSFORMS:
        rw = apply(t, text, kernel)
        if rw is not None:
            out.append((t, rw.text))
            text = rw.text
    return path, kernel, out


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_example_candidates_compile(name):
    if static.available() is None:
        pytest.skip("no CUDA compiler (NVRTC or nvcc) here")
    path, kernel, cands = _chain(name)
    assert cands, f"no transformation applied to {name}"
    for t, text in cands:
        r = static.compile_unit(extract.unit(text, path, kernel))
        assert r.ok, f"{name}/{t}: {r.log[-2000:]}"
        assert not [d for d in r.diagnostics if d.severity == "error"], t


def test_hoist_turns_invariant_division_into_reciprocal():
    text, _, kernel = example("merge_attn_states")
    k = body_of(apply("hoist", text, kernel).text, kernel)
    loop_at = k.index("for (int i")
    assert k.index("const float astra_rcp0 = 1.0f / (wa + wb);") < loop_at
    assert "(va * wa + vb * wb) * astra_rcp0" in k


def test_unroll_vector_only_for_long_rows():
    from astra_cuda.model import spec as spec_mod
    from astra_cuda.agents.offline import context_from_spec
    text, path, kernel = example("silu_and_mul")
    m = source.parse(text)
    ctx = context_from_spec(kernel, spec_mod.load(m.kernel(kernel), m))
    assert ctx.block_threads == 1024 and ctx.row_elements["d"] == 28672
    vec = TRANSFORMS["vectorize"].apply(text, ctx).text
    assert TRANSFORMS["unroll_vector"].apply(vec, Context(kernel)) is None        # no size hints: no
    short = Context(kernel, block_threads=1024, row_elements={"d": 4096})
    assert TRANSFORMS["unroll_vector"].apply(vec, short) is None                  # one step per thread
    rw = TRANSFORMS["unroll_vector"].apply(vec, ctx)
    assert "#pragma unroll 2" in rw.text
    assert TRANSFORMS["unroll_vector"].apply(rw.text, ctx) is None                # not twice
    if static.available() is not None:
        assert static.compile_unit(extract.unit(rw.text, path, kernel)).ok


def test_vectorize_grid_stride_loop():
    src = HEADER + """
__global__ void k(__half* __restrict__ o, const __half* __restrict__ x, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    o[i] = __float2half(2.0f * __half2float(x[i]));
  }
}
"""
    rw = apply("vectorize", src, "k")
    k = body_of(rw.text, "k")
    # 64-bit counters: a grid-stride step may pass the end of a 32-bit index
    assert "astra_i0 = static_cast<long long>(blockIdx.x * blockDim.x + threadIdx.x) * astra_vec" in k
    assert "astra_i0 += static_cast<long long>(blockDim.x * gridDim.x) * astra_vec" in k
    assert "astra_j = astra_vec_end + (blockIdx.x * blockDim.x + threadIdx.x); astra_j < astra_n; " \
           "astra_j += blockDim.x * gridDim.x" in k and "const int i = static_cast<int>(astra_j);" in k
    assert apply("vectorize", src.replace("i += blockDim.x * gridDim.x", "i += blockDim.x"), "k") is None


def test_vectorize_leaves_loops_that_share_data_without_a_barrier():
    """A thread relies on owning element i in both loops; a vector step would hand it to another."""
    src = HEADER + """
__global__ void k(float* __restrict__ y, const float* __restrict__ x, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) { y[i] = 2.0f * x[i]; }
  for (int i = threadIdx.x; i < n; i += blockDim.x) { y[i] = y[i] + 1.0f; }
}
"""
    assert apply("vectorize", src, "k") is None
    with_barrier = src.replace("}\n  for", "}\n  __syncthreads();\n  for", 1)
    rw = apply("vectorize", with_barrier, "k")
    assert rw is not None and len(rw.changes) == 2


def test_typedef_and_template_element_types():
    src = HEADER + """#include <cuda_bf16.h>
typedef __nv_bfloat16 floatX;
template <typename T>
__global__ void k(floatX* __restrict__ o, const T* __restrict__ x, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) { o[i] = (floatX)(float)x[i]; }
}
"""
    from astra_cuda.agents.offline import Context
    # floatX through the typedef (2 bytes: 8 per 16-byte vector); T through the spec's template
    # argument (4 bytes: the same 8 elements take two 16-byte loads)
    rw = TRANSFORMS["vectorize"].apply(src, Context("k", template_args={"T": "float"}))
    assert "constexpr int astra_vec = 8;" in rw.text and "alignas(16) floatX" in rw.text
    assert "reinterpret_cast<const uint4*>(x + astra_i0)[1]" in rw.text
    # an unknown T and no spec: `x` is read element by element, only `o` moves in vectors
    unknown = TRANSFORMS["vectorize"].apply(src, Context("k")).text
    assert "(x + astra_i0)" not in unknown and "reinterpret_cast<uint4*>(o + astra_i0)[0]" in unknown
    assert "(x + astra_i0)[1]" in TRANSFORMS["vectorize"].apply(src, Context("k", arg_bytes={"x": 4})).text


def test_coarsen_one_element_per_thread():
    import pathlib
    from astra_cuda.model import launch_change
    from astra_cuda.agents.offline import context_from_text
    path = pathlib.Path(__file__).parent / "kernels" / "residual_bf16.cu"
    text = path.read_text()
    kernel = "residual_forward_kernel"
    rw = TRANSFORMS["coarsen"].apply(text, context_from_text(kernel, text))
    k = body_of(rw.text, kernel)
    assert "astra_i0 += static_cast<long long>(blockDim.x * gridDim.x) * astra_vec" in k
    # one element per thread before: elements cannot interact but through data races, so no checks
    assert "sizeof(*out)" not in k and "reinterpret_cast<uint4*>(out + astra_i0)[0]" in k
    assert launch_change.spec_in(source.parse(rw.text), kernel).grid == ("cdiv(N, 4096)",)   # not cdiv(cdiv(N, 512), 8)
    site = source.parse(rw.text).launches_of(kernel)[0]
    assert site.grid == "(N + block_size * 8 - 1) / (block_size * 8)"   # the file's own ceil-division, folded
    assert rw.params == {"width": 16, "steps": 1, "block": None}
    two = TRANSFORMS["coarsen"].apply(text, context_from_text(kernel, text), {**rw.params, "steps": 2, "block": 256})
    assert launch_change.spec_in(source.parse(two.text), kernel).grid == ("cdiv(N, 4096)",)
    assert launch_change.spec_in(source.parse(two.text), kernel).block == ("256",)
    # a kernel that keeps state across elements, or uses the thread index beyond the element, is left
    assert TRANSFORMS["coarsen"].apply(text.replace("out[idx] =", "out[idx + threadIdx.x * 0] ="),
                                       context_from_text(kernel, text)) is None


def test_a_read_after_the_write_through_another_pointer_keeps_its_order():
    """`o` written, then `x` read: if they are the same buffer the read must see the new value, so
    the in-place exemption does not apply to that pair."""
    src = HEADER + """
__global__ void k(float* o, const float* x, float* y, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) { o[i] = 1.0f; y[i] = x[i]; }
}
"""
    k = body_of(apply("vectorize", src, "k").text, "k")
    assert "reinterpret_cast<size_t>(o) == reinterpret_cast<size_t>(x)" not in k       # o then x: apart only
    assert "reinterpret_cast<size_t>(y) == reinterpret_cast<size_t>(x)" in k           # y after x: in place is fine


def test_coarsen_splits_a_divided_index_into_vector_steps():
    """The one-element-per-thread gather with `idx / C`, `idx % C`: a step of 8 bf16 elements
    shares its row where `C % 8 == 0`; the row's token id is read once per step."""
    import pathlib
    from astra_cuda.model import launch_change
    from astra_cuda.agents.offline import context_from_text
    text = (pathlib.Path(__file__).parent / "kernels" / "encoder_bf16.cu").read_text()
    kernel = "encoder_forward_kernel"
    ctx = context_from_text(kernel, text)
    rw = TRANSFORMS["coarsen"].apply(text, ctx)
    k = body_of(rw.text, kernel)
    assert "(C) % astra_vec == 0" in k and "constexpr int astra_vec = 8;" in k
    assert "*reinterpret_cast<const uint4*>(&wte[ix * C + c])" in k
    assert "*reinterpret_cast<uint4*>(&out[b * T * C + t * C + c])" in k
    assert k.count("int ix = inp[b * T + t];") == 2          # once per vector step, and in the fallback
    # the vector loop holds no element-by-element code (with it inside, ~20% slower on an H100)
    vector_loop = k[k.index("astra_i0 < astra_vec_n"):k.index("astra_i0 < astra_n;")]
    assert "astra_j" not in vector_loop and "break;" in vector_loop
    # the fallback's inner loop stays rolled (unrolled, it cost the vector loop occupancy)
    fallback = k[k.index("astra_i0 < astra_n;"):]
    assert fallback.index("#pragma unroll 1") < fallback.index("for (long long astra_j")
    assert launch_change.spec_in(source.parse(rw.text), kernel).grid == ("cdiv(B * T * C, 2048)",)
    if static.available() is not None:
        res = static.compile_unit(extract.unit(rw.text, "encoder.cu", kernel), "sm_90")
        assert res.ok
        # 32 registers a thread leave room for 2048 threads an SM; the unrolled fallback took 39 (75%)
        assert res.resources[kernel].registers <= 32, res.resources[kernel]
    # not this shape: the column used outside a subscript, the written array read back, a divisor
    # that reads memory, an index that is not the column plus a row base
    for old, new in [("+ (float)wpe[t * C + c])", "+ (float)wpe[t * C + c] + c)"),
                     ("(float)wte[ix * C + c]", "(float)out[ix * C + c]"),
                     ("int bt = idx / C;", "int bt = idx / inp[0];"),
                     ("(float)wpe[t * C + c]", "(float)wpe[t * C + 2 * c]")]:
        assert old in text
        changed = text.replace(old, new)
        if "inp[0]" in new:   # both halves of the split by the same divisor read from memory
            changed = changed.replace("int c = idx % C;", "int c = idx % inp[0];")
        assert TRANSFORMS["coarsen"].apply(changed, ctx) is None, new

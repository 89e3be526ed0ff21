from astra_cuda.compile import extract
from astra_cuda.gate import screen

from .conftest import example_path, example_spec

REF = open(example_path("silu_and_mul")).read()
SPEC = example_spec("silu_and_mul")
BODY = """__global__ void silu_and_mul(__half* __restrict__ out, const __half* __restrict__ input, const int d) {
  const int64_t token = blockIdx.x;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float x = __half2float(input[token * 2 * d + i]);
    const float y = __half2float(input[token * 2 * d + d + i]);
    out[token * d + i] = __float2half(silu(x) * y);
  }
}"""


def unit(text):
    return extract.unit(text, "examples/silu_and_mul.cu", "silu_and_mul").source


def cand(body, extra=""):
    text = extract.replace_kernel(REF, "silu_and_mul", body)
    return unit(text.replace("/* @astra", extra + "\n/* @astra", 1) if extra else text)


def run(body, extra=""):
    return screen.screen(unit(REF), cand(body, extra), "silu_and_mul", SPEC)


def test_unchanged_kernel_is_clean():
    r = run(BODY)
    assert not r.findings and not r.uses_atomics and not r.stateful_suspect


def test_signature_change_is_an_error_with_the_users_line():
    r = run(BODY.replace("const int d", "const int d, int n"))
    assert [f.kind for f in r.errors] == ["signature"]
    assert r.errors[0].line == REF.split("\n").index(
        next(l for l in REF.split("\n") if l.startswith("__global__"))) + 1


def test_renamed_kernel_and_launch_bounds():
    renamed = extract.replace_kernel(REF, "silu_and_mul", BODY.replace("void silu_and_mul", "void silu2"))
    r = screen.screen(unit(REF), renamed, "silu_and_mul", SPEC)
    assert [f.kind for f in r.errors] == ["missing_kernel"] and "silu2" in r.errors[0].message
    r = run(BODY.replace("__global__ void", "__global__ void __launch_bounds__(256)"))
    assert [f.kind for f in r.errors] == ["launch_bounds"]
    assert not run(BODY.replace("__global__ void", "__global__ void __launch_bounds__(1024)")).errors


def test_clock_device_globals_static_locals_and_atomics_are_flagged():
    r = run(BODY.replace("const int64_t token", "long long t0 = clock64(); const int64_t token"))
    assert r.stateful_suspect and [f.kind for f in r.warnings] == ["timer"] and not r.errors
    r = run(BODY.replace("{\n  const int64_t token", "{\n  if (done) return;\n  const int64_t token"),
            extra="__device__ int done = 0;")
    assert r.stateful_suspect and any(f.kind == "device_state" for f in r.warnings)
    r = run(BODY.replace("const int64_t token", "static int calls; const int64_t token"))
    assert r.stateful_suspect
    r = run(BODY.replace("const int64_t token", "__shared__ float s[4]; const int64_t token"))
    assert not r.stateful_suspect
    r = run(BODY.replace("out[token * d + i] =", "atomicAdd(&dummy, 1); out[token * d + i] =").replace(
        "const int64_t token", "__shared__ int dummy; const int64_t token"))
    assert r.uses_atomics


def test_host_api_call_is_an_error():
    r = run(BODY.replace("const int64_t token", "void* p; cudaMalloc(&p, 4); const int64_t token"))
    assert any(f.kind == "host_api" for f in r.errors)


def test_fast_math_swaps():
    fast = BODY.replace("silu(x)", "(x / (1.0f + __expf(-x)))")
    assert screen.fast_math_swaps(unit(REF), cand(fast)) == ["__expf"]
    assert screen.fast_math_swaps(unit(REF), cand(BODY)) == []


def test_mutable_globals():
    assert screen._mutable("__device__ int done = 0;")
    assert screen._mutable("__device__ const __half* cached = nullptr;")
    assert not screen._mutable("__device__ const float table[4] = {1, 2, 3, 4};")
    assert not screen._mutable("__device__ const float* const p = nullptr;")


CONSTEXPR_HELPER = """template <int N>
constexpr int bias() { return (1 << (N - 1)) - 1; }
__global__ void k(int* out) { out[threadIdx.x] = bias<5>(); }
"""


def test_a_constexpr_function_the_kernel_calls_is_device_code():
    # CUTLASS's exponent_bias_cxx17 (cute tutorials, xformers sparse24): nvcc compiles a constexpr
    # function for the device under --expt-relaxed-constexpr, so it is not host code "added"
    assert not screen.screen(None, CONSTEXPR_HELPER, "k").errors
    host = CONSTEXPR_HELPER.replace("constexpr int bias", "int bias")
    assert [f.kind for f in screen.screen(None, host, "k").errors] == ["host_code"]


def test_a_host_declaration_device_code_names_in_decltype_is_no_host_code():
    # CuTe's `decltype(detail::has_tuple_size((T*)0))`: the cut keeps the declaration, which has no code
    text = ("template <class T> auto has_size(T*) -> int;\nauto has_size(...) -> char;\n"
            "__global__ void k(int* out) { out[0] = sizeof(decltype(has_size((int*)0))); }\n")
    assert not screen.screen(None, text, "k").errors
    defined = text.replace("auto has_size(...) -> char;", "auto has_size(...) -> char { return 0; }")
    assert [f.kind for f in screen.screen(None, defined, "k").errors] == ["host_code"]


def test_atomics_through_a_wrapper_or_inline_ptx_are_flagged():
    # TGI's forward_masked_softmax_kernel sums a row into shared memory with PyTorch's
    # `gpuAtomicAdd`/`gpuAtomicMax` (ATen/cuda/Atomic.cuh), not `atomicAdd` by name: the float sum's
    # order is the schedule's, so two runs may differ in the last bit — determinism within tolerance
    wrapper = "__device__ float gpuAtomicAdd(float* p, float v) { float o = *p; *p = o + v; return o; }"
    r = run(BODY.replace("out[token * d + i] =", "gpuAtomicAdd(&total, x); out[token * d + i] =").replace(
        "const int64_t token", "__shared__ float total; const int64_t token"), extra=wrapper)
    assert r.uses_atomics
    ptx = BODY.replace("out[token * d + i] =", 'asm volatile("red.shared.add.f32 [%0], %1;" :: "l"(&total), '
                       '"f"(x)); out[token * d + i] =').replace(
        "const int64_t token", "__shared__ float total; const int64_t token")
    assert run(ptx).uses_atomics
    # a name merely holding the letters, or an operand named `red`, is no atomic
    plain = BODY.replace("const int64_t token", 'float red = 0; asm volatile("mov.f32 %0, %1;" : "=f"(red) : '
                         '"f"(red)); const int64_t token')
    assert not run(plain).uses_atomics
    assert not run(BODY.replace("silu(x)", "hydratomicity(x)"), extra="__device__ float hydratomicity(float x) "
                   "{ return x; }").uses_atomics

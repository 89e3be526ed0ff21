"""Issue 23: each obstacle the real-world suite met in public CUDA files, as a minimal case
written here (the obstacle only, never the third-party code). A case takes the new user's path:
the spec Astra proposes, pasted directly above the kernel, then `check` on the CPU backend — or,
where the case is about compiling, a spec written by hand, so that it measures the compile alone.

Cases Astra fails today are strict xfails naming the issue that fixes them (24: compile fidelity
and reading the file, 25: spec inference); whoever fixes one removes its marker. Which public
kernels each stands for: benchmarks/realworld/README.md ("Failure classes")."""
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from astra_cuda import api
from astra_cuda.model import source
from astra_cuda.compile import extract, static
from astra_cuda.compile import toolkit
from astra_cuda.compile import project as proj

from .conftest import needs_gxx

pytestmark = needs_gxx


def _context(root: Path, include: tuple[str, ...], defines: tuple[str, ...] = ()):
    return proj.from_flags([str(root / d) for d in include], defines, "c++17", origin="command line")


def paste_above(text: str, kernel: str, comment: str) -> str:
    """The proposed comment directly above the kernel (or its template line), as a user pastes it."""
    k = source.parse(text).kernel(kernel)
    assert k is not None, f"{kernel} is not listed"
    return text[:k.span.start_byte] + comment.rstrip("\n") + "\n" + text[k.span.start_byte:]


def new_user(project, kernel: str, files: dict[str, str], main: str = "k.cu", include: tuple[str, ...] = (),
             defines: tuple[str, ...] = ()):
    """Write the files, take the spec Astra proposes for `kernel` in `main`, paste it, check it."""
    for rel, text in files.items():
        project(rel, text)
    path = project.root / main
    ctx = _context(project.root, include, defines)
    proposal = api.infer_spec(api.snapshot(path.read_text(), str(path), ctx), kernel)
    text = paste_above(path.read_text(), kernel, proposal.comment)
    path.write_text(text)
    (v,) = api.check(api.snapshot(text, str(path), ctx), kernel, backend="cpu", quick=True, pin_first=False)
    return proposal, v


def checked(project, kernel: str, files: dict[str, str], main: str = "k.cu", include: tuple[str, ...] = ()):
    """Check a file whose spec is written by hand (a case about compiling, not inference)."""
    for rel, text in files.items():
        project(rel, text)
    path = project.root / main
    (v,) = api.check(api.snapshot(path.read_text(), str(path), _context(project.root, include)), kernel,
                     backend="cpu", quick=True, pin_first=False)
    return v


SPEC = """/* @astra
grid = ["cdiv(n, 128)"]
block = ["128"]
[sizes]
n = [1, 300, 1000]
[args]
out = { type = "float", shape = ["n"], output = true }
inp = { type = "float", shape = ["n"] }
n = "n"
*/
"""


PLAIN = ("__global__ void scale(float* out, const float* inp, int n) {\n"
         "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) out[i] = 2.0f * inp[i];\n}\n")
PLAIN_T = ("template <typename T>\n__global__ void scale(T* out, const T* inp, int n) {\n"
           "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) out[i] = (T)2 * inp[i];\n}\n")


def kernel_using(body: str, head: str = "") -> str:
    """A plain elementwise kernel with a hand-written spec; `body` computes `y` from `x`."""
    return (head + SPEC + "__global__ void k(float* out, const float* inp, int n) {\n"
            "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
            f"    if (i < n) {{ float x = inp[i]; float y; {body} out[i] = y; }}\n}}\n")


# ---- compiling what nvcc compiles (issue 24) -------------------------------------------------------
# Each obstacle is compiled on both of Astra's paths: `check` (the CPU check as a user runs it where a
# CUDA toolkit is installed: nvcc on the file, then g++ on the cut unit) and `nvrtc` (NVRTC on the cut
# unit, forced with ASTRA_CUDA_TOOLKIT=none: what the GPU backend compiles, and the CPU check where
# no toolkit is installed). Every case compiles with nvcc 13.0 as written (checked once by hand).

@dataclass(frozen=True)
class Obstacle:
    id: str
    files: dict[str, str]
    fails: dict[str, str] = field(default_factory=dict)   # path -> why it fails today (a strict xfail)


def _both(reason: str) -> dict[str, str]:
    return {"check": reason, "nvrtc": reason}


COMPILE = [
    Obstacle("struct-and-enum-class-in-a-header", {
        "types.h": "#pragma once\nstruct Pair {\n  float a;\n  float b;\n};\nenum class Mode {\n  Scale,\n  Copy\n};\n",
        "k.cu": kernel_using("Pair p{x, 2.0f}; Mode m = Mode::Scale; y = m == Mode::Scale ? p.a * p.b : p.a;",
                             '#include "types.h"\n')}),
    Obstacle("multi-line-if-in-a-header", {
        "cfg.h": ("#pragma once\n#if defined(__CUDA_ARCH__) && \\\n    __CUDA_ARCH__ >= 800\n#define FACTOR 2.0f\n"
                  "#else\n#define FACTOR 2.0f\n#endif\n"),
        "k.cu": kernel_using("y = FACTOR * x;", '#include "cfg.h"\n')}),
    Obstacle("m-pi-and-infinity-from-math-h", {
        "k.cu": kernel_using("y = fmaxf(sqrtf(2.0f / M_PI) * x, -INFINITY);", "#include <math.h>\n")}),
    Obstacle("bfloat16-and-half-through-another-header", {
        "common.h": "#pragma once\n#include <cuda_bf16.h>\n#include <cuda_fp16.h>\n",
        "k.cu": kernel_using("nv_bfloat16 b = __float2bfloat16(x); half h = __float2half(x); "
                             "y = __bfloat162float(b) + __half2float(h);", '#include "common.h"\n')}),
    Obstacle("members-defined-in-a-class-template-specialization", {
        "vec.cuh": ("#pragma once\ntemplate <typename T, int N>\nstruct vec_t {\n  __device__ T& operator[](int i);\n};\n"
                    "template <int N>\nstruct vec_t<float, N> {\n  float d[N];\n"
                    "  __device__ float& operator[](int i) { return d[i]; }\n};\n"),
        "k.cu": kernel_using("vec_t<float, 1> v; v[0] = x; y = 2.0f * v[0];", '#include "vec.cuh"\n')}),
    Obstacle("align-struct-template-in-a-header", {   # vLLM vectorization.cuh
        "vec.cuh": "#pragma once\ntemplate <typename T, int N>\nstruct __align__(N * sizeof(T)) vec_n {\n  T val[N];\n};\n",
        "k.cu": kernel_using("vec_n<float, 2> v; v.val[0] = x; v.val[1] = x; y = v.val[0] + v.val[1];",
                             '#include "vec.cuh"\n')}),
    Obstacle("typedef-enum-in-a-header", {
        "op.h": "#pragma once\ntypedef enum {\n  OP_SCALE,\n  OP_COPY\n} Op;\n",
        "k.cu": kernel_using("Op op = OP_SCALE; y = op == OP_SCALE ? 2.0f * x : x;", '#include "op.h"\n')}),
    Obstacle("device-spelled-through-a-macro", {
        "k.cu": kernel_using("y = twice(x);", "#define DEVICE_INLINE __device__ __forceinline__\n"
                             "DEVICE_INLINE float twice(float v) { return 2.0f * v; }\n")}),
    Obstacle("host-only-global-named-like-a-kernel-parameter", {
        "k.cu": ("static float* out;\nstatic const int PARTIALS = 240;\n" + SPEC +
                 "__global__ void k(float* out, const float* inp, int n) {\n"
                 "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) out[i] = 2.0f * inp[i];\n}\n"
                 "void run(const float* i, int n) { k<<<PARTIALS, 128>>>(out, i, n); }\n")}),
    Obstacle("cub-included-by-a-header-the-kernel-does-not-use", {   # vLLM, bitsandbytes, FlashInfer (NVRTC refuses <cub/cub.cuh>)
        "common.cuh": "#pragma once\n#include <cub/cub.cuh>\n#include <cuda_runtime.h>\n",
        "k.cu": kernel_using("y = 2.0f * x;", '#include "common.cuh"\n')}),
    Obstacle("host-only-member-of-a-struct-the-kernel-uses", {   # FlashInfer fastdiv.cuh (NVRTC refuses __host__)
        "k.cu": kernel_using("Divisor q; y = q.div(x);", (
            "struct Divisor {\n  __host__ __device__ Divisor() : d(1) {}\n  __host__ Divisor(int v) : d(v ? v : 1) {}\n"
            "  __device__ float div(float x) const { return x / d; }\n  int d;\n};\n"))}),
    Obstacle("host-only-helpers-and-a-host-struct-in-a-header", {
        "host.h": ("#pragma once\n#include <vector>\ninline int blocks_for(int n) { return (n + 127) / 128; }\n"
                   "struct HostParams {\n  HostParams() : n(0) {}\n  int n;\n};\n"),
        "k.cu": kernel_using("y = 2.0f * x;", '#include "host.h"\n')}),
    Obstacle("std-type-traits-through-the-cuda-headers", {   # DeepSpeed gelu.cu
        "k.cu": kernel_using("using T = std::conditional<true, float, double>::type; y = (T)2 * x;",
                             "#include <cuda_fp16.h>\n")}),
    Obstacle("ushort-and-uint-from-sys-types", {   # FlashInfer math.cuh
        "k.cu": kernel_using("ushort s = (ushort)1; uint u = 2u; y = x * (float)(s + u);")}),
    Obstacle("kernel-in-an-anonymous-namespace", {
        "k.cu": ("namespace {\n" + SPEC + "__global__ void k(float* out, const float* inp, int n) {\n"
                 "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) out[i] = 2.0f * inp[i];\n}\n"
                 "}  // namespace\n")}),
    Obstacle("kernel-in-an-anonymous-namespace-inside-a-named-one", {
        "k.cu": ("namespace te { namespace detail {\nnamespace {\n" + SPEC +
                 "__global__ void k(float* out, const float* inp, int n) {\n"
                 "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) out[i] = 2.0f * inp[i];\n}\n"
                 "}  // namespace\n} }\n")}),
    Obstacle("overloaded-kernel-template", {
        "k.cu": (SPEC.replace("/* @astra\n", '/* @astra\ninstantiate = "<float>"\n') +
                 "template <typename T>\n__global__ void k(T* out, const T* inp, int n) {\n"
                 "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) out[i] = 2 * inp[i];\n}\n"
                 "template <typename T>\n__global__ void k(T* out, const T* inp, int n, float s) {\n"
                 "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) out[i] = s * inp[i];\n}\n")}),
    Obstacle("overloaded-kernel-with-the-spec-above-the-second", {   # FasterTransformer quantized_kernel
        "k.cu": ("__global__ void k(float4* out, const float4* inp, int n) {\n"
                 "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) out[i] = inp[i];\n}\n" + SPEC +
                 "__global__ void k(float* out, const float* inp, int n) {\n"
                 "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) out[i] = 2.0f * inp[i];\n}\n")}),
]


def _compile_cases():
    for o in COMPILE:
        for path in ("check", "nvrtc"):
            marks = [pytest.mark.xfail(strict=True, reason=o.fails[path])] if path in o.fails else []
            yield pytest.param(o, path, id=f"{o.id}-{path}", marks=marks)


@pytest.mark.parametrize("case, path", list(_compile_cases()))
def test_astra_compiles_what_nvcc_compiles(project, monkeypatch, case, path):
    for rel, text in case.files.items():
        project(rel, text)
    f = project.root / "k.cu"
    ctx = _context(project.root, ())
    if path == "check":
        if toolkit.find(ctx) is None:
            pytest.skip("no CUDA toolkit here: the check compiles with NVRTC, the `nvrtc` case")
        (v,) = api.check(api.snapshot(f.read_text(), str(f), ctx), "k", backend="cpu", quick=True, pin_first=False)
        assert v.passed, v.human()
    else:   # the unit the check cuts, compiled as the GPU backend and a toolkit-less CPU check do
        monkeypatch.setenv(toolkit.TOOLKIT_ENV, "none")
        snap = api.snapshot(f.read_text(), str(f), ctx)
        r = static.compile_unit(extract.spec_unit(snap.model, str(f), "k", snap.kernel("k").spec, context=ctx))
        errors = [d for d in r.diagnostics if d.severity == "error"]
        assert r.ok and r.compiler.lower().startswith("nvrtc"), "; ".join(d.human(str(f)) for d in errors[:4]) or r.log


def test_a_copy_of_cccl_the_project_vendors_is_read_as_a_library(project):
    # FlashInfer puts its own CCCL (3rdparty/cccl: a libcu++ newer than the toolkit's, for
    # cuda::fast_mod_div) on the include path ahead of the toolkit's. Its headers are a library's,
    # as the toolkit's CCCL is: the cut keeps the #include (cutting CCCL's code item by item left
    # fast_mod_div out), and every compile reads the project's copy.
    lib = {"third/cccl/thrust/version.h": "#pragma once\n",
           # a header of libcu++'s that a host compiler reads too (the CPU build does, before its shim)
           "third/cccl/cuda/cmath": ("#pragma once\n#ifdef __CUDACC__\n#define HALVER_API __host__ __device__\n"
                                     "#else\n#define HALVER_API\n#endif\nnamespace cuda {\ntemplate <class T> struct halver "
                                     "{\n  HALVER_API T operator()(T v) const { return v / T(2); }\n};\n}\n")}
    files = {**lib, "fast.cuh": "#pragma once\n#include <cuda/cmath>\n",
             "k.cu": kernel_using("y = cuda::halver<float>{}(4.0f * x);", '#include "fast.cuh"\n')}
    v = checked(project, "k", files, include=("third/cccl",))
    assert v.passed, v.human()
    f = project.root / "k.cu"
    snap = api.snapshot(f.read_text(), str(f), _context(project.root, ("third/cccl",)))
    u = extract.spec_unit(snap.model, str(f), "k", snap.kernel("k").spec, context=snap.context)
    assert "#include <cuda/cmath>" in u.source and "struct halver" not in u.source


def test_a_header_kernel_compiles_as_the_cu_beside_it_includes_it(project):
    # apex csrc/megatron/scaled_masked_softmax.h names c10::BFloat16 and includes no torch header:
    # its scaled_masked_softmax_cuda.cu includes torch first, and nvcc compiles the header there
    files = {"scale.h": "#pragma once\nstruct Scale {\n  float s;\n};\n",
             "k.cuh": "#pragma once\n" + kernel_using("Scale c{2.0f}; y = c.s * x;"),
             "host_first.cu": '#include "other.h"\n',   # before it by name, includes something else
             "k_cuda.cu": '#include <cstdio>\n#include "scale.h"\n#include "k.cuh"\nvoid run() {}\n'}
    v = checked(project, "k", files, main="k.cuh")
    assert v.passed, v.human()
    # an error in the header still lands on the header's own line
    bad = files["k.cuh"].replace("y = c.s * x;", "y = c.s * undefined_name;")
    f = project("k.cuh", bad)
    snap = api.snapshot(bad, str(f), _context(project.root, ()))
    r = static.compile_unit(extract.spec_unit(snap.model, str(f), "k", snap.kernel("k").spec, context=snap.context))
    errors = [d for d in r.diagnostics if d.severity == "error"]
    assert not r.ok and errors, r.log
    assert errors[0].line == next(i for i, ln in enumerate(bad.splitlines()) if "undefined_name" in ln), errors


def test_an_instantiation_macro_invoked_above_the_kernel(project):
    # the macro invocation with no `;` takes the comments below it into its statement (DeepSpeed
    # gelu.cu fused_bias_add): the spec pasted above the kernel is its last comment
    src = ("#include <cuda_fp16.h>\n#define INSTANTIATE(T) template void run<T>(T*, const T*, int);\n"
           "template <typename T> void run(T* o, const T* i, int n);\nINSTANTIATE(__half)\n\n" + PLAIN_T +
           "template <typename T> void run(T* o, const T* i, int n) { scale<<<(n + 255) / 256, 256>>>(o, i, n); }\n")
    _, v = new_user(project, "scale", {"k.cu": src})
    assert v.passed, v.human()


def test_a_launch_bounds_macro_between_global_and_void(project):
    # FlashInfer sampling.cuh: `__global__ MACRO(n) void k(` parses as a declaration missing its `;`
    # unless the macro is read as blanks (model.macros.attribute_macros); the template stays the kernel's
    src = ("#define LAUNCH_BOUNDS(n) __launch_bounds__(n)\n" + SPEC +
           "__global__ LAUNCH_BOUNDS(128) void k(float* out, const float* inp, int n) {\n"
           "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) out[i] = 2.0f * inp[i];\n}\n")
    project("k.cu", src)
    assert [k.name for k in source.parse(src).kernels] == ["k"]
    templated = src.replace("__global__ LAUNCH", "template <int B>\n__global__ LAUNCH").replace("(128)", "(B)")
    [k] = source.parse(templated).kernels
    assert k.template_params == ("int B",) and k.text.startswith("template <int B>")


def test_a_kernel_whose_head_a_macro_of_the_file_writes():
    # flash-attention flash_fwd_launch_template.h: `DEFINE_FLASH_FORWARD_KERNEL(name, bool A, ...) {`
    # reads as a host function named after the macro; the use is expanded, the spans stay the user's
    src = ("struct Params { float* out; int n; };\n"
           "#if defined(__CUDA_ARCH__)\n#define MODIFIER __grid_constant__\n#else\n#define MODIFIER\n#endif\n"
           "#define DEFINE_KERNEL(kernelName, ...) \\\n"
           "template <typename Traits, __VA_ARGS__> \\\n"
           "__global__ void kernelName(MODIFIER const Params params)\n"
           "DEFINE_KERNEL(fwd, bool Causal, int Block) {\n"
           "    if (Causal) params.out[threadIdx.x] = Block;\n}\n")
    [k] = source.parse(src).kernels
    assert (k.name, k.template_params) == ("fwd", ("typename Traits", "bool Causal", "int Block"))
    assert [(p.name, p.type) for p in k.params] == [("params", "__grid_constant__ const Params")]
    line = src.split("\n").index("DEFINE_KERNEL(fwd, bool Causal, int Block) {")
    assert (k.span.start_line, k.name_span.start_line, k.name_span.start_col) == (line, line, len("DEFINE_KERNEL("))
    assert k.text.startswith("DEFINE_KERNEL(fwd") and k.text.endswith("}")
    assert "DEFINE_KERNEL" not in {n for i in source.parse(src).items for n in i.defines if i.kind == "host_function"}


def test_the_cpu_runs_a_kernel_whose_headers_hold_ptx_it_does_not_reach(project):
    # DeepSpeed conversion_utils.h / memory_access_utils.h, FasterTransformer cuda_type_utils.cuh,
    # bitsandbytes compat_device.cuh, FlashInfer math.cuh: asm in specializations and helpers the
    # kernel never calls, <mma.h> and libcu++ included for other kernels, and a cache-hinted load
    # the kernel does use. Only what it reaches counts; the hinted load runs as exact C++.
    header = ("#pragma once\n#include <mma.h>\n#include <cuda/std/limits>\n"
              "template <typename T> __device__ __forceinline__ T load_nc(const T* p);\n"
              "template <> __device__ __forceinline__ float load_nc<float>(const float* p) {\n"
              '  float v; asm volatile("ld.global.nc.f32 %0, [%1];" : "=f"(v) : "l"(p)); return v;\n}\n'
              "template <> __device__ __forceinline__ double load_nc<double>(const double* p) {\n"
              '  double v; asm volatile("ld.volatile.global.f64 %0, [%1];" : "=d"(v) : "l"(p)); return v;\n}\n'
              "__device__ __forceinline__ float fast_rsqrt(float x) {\n"
              '  float y; asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y;\n}\n')
    body = "y = fmaxf(2.0f * load_nc(inp + i), cuda::std::numeric_limits<float>::lowest());"
    v = checked(project, "k", {"helpers.cuh": header, "k.cu": kernel_using(body, '#include "helpers.cuh"\n')})
    assert v.passed, v.human()


# ---- inferring the spec (issue 25) -----------------------------------------------------------------


def test_a_kernel_template_in_a_header_launched_from_the_cu_beside_it(project):
    header = "#pragma once\n" + PLAIN_T
    launcher = ('#include "scale.cuh"\nvoid run(float* o, const float* i, int n) {\n'
                "    scale<float><<<(n + 255) / 256, 256>>>(o, i, n);\n}\n")
    _, v = new_user(project, "scale", {"scale.cuh": header, "ops.cu": launcher}, main="scale.cuh")
    assert v.passed, v.human()


def test_a_kernel_template_launched_from_a_template_host_function(project):
    src = (PLAIN_T + "template <typename T>\nvoid run(T* o, const T* i, int n) { scale<T><<<(n + 255) / 256, 256>>>(o, i, n); }\n"
           "template void run<float>(float*, const float*, int);\n")
    _, v = new_user(project, "scale", {"k.cu": src})
    assert v.passed, v.human()


def test_a_uint_typedef_in_the_file(project):
    src = ("typedef unsigned int uint;\n__global__ void scale(uint* out, const uint* inp, uint n) {\n"
           "    uint i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) out[i] = 2u * inp[i];\n}\n"
           "void run(uint* o, const uint* i, uint n) { scale<<<(n + 255) / 256, 256>>>(o, i, n); }\n")
    _, v = new_user(project, "scale", {"k.cu": src})
    assert v.passed, v.human()


def test_a_pointer_to_a_vector_type(project):
    src = ("__global__ void scale(float4* out, const float4* inp, int n) {\n"
           "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
           "    if (i < n) { float4 v = inp[i]; out[i] = make_float4(2 * v.x, 2 * v.y, 2 * v.z, 2 * v.w); }\n}\n"
           "void run(float4* o, const float4* i, int n) { scale<<<(n + 255) / 256, 256>>>(o, i, n); }\n")
    _, v = new_user(project, "scale", {"k.cu": src})
    assert v.passed, v.human()


def test_a_2d_launch_whose_sizes_must_be_multiples_of_the_block(project):
    src = ("template <int BS>\n__global__ void add2d(float* out, const float* inp, int w) {\n"
           "    int x = blockIdx.x * BS + threadIdx.x, y = blockIdx.y * BS + threadIdx.y;\n"
           "    out[y * w + x] = inp[y * w + x] + 1.0f;\n}\n"
           "void run(float* o, const float* i, int w, int h) {\n    const int block_size = 16;\n"
           "    dim3 threads(block_size, block_size);\n    dim3 grid(w / threads.x, h / threads.y);\n"
           "    add2d<16><<<grid, threads>>>(o, i, w);\n}\n")
    _, v = new_user(project, "add2d", {"k.cu": src})
    assert v.passed, v.human()


def test_a_tiled_2d_launch_set_up_in_main(project):
    src = ("#define TILE 16\n#define ROWS 4\n"
           "__global__ void transpose(float* odata, const float* idata, int width, int height) {\n"
           "    int x = blockIdx.x * TILE + threadIdx.x, y = blockIdx.y * TILE + threadIdx.y;\n"
           "    for (int j = 0; j < TILE; j += ROWS) odata[x * height + y + j] = idata[(y + j) * width + x];\n}\n"
           "int main() {\n    int size_x = 1024, size_y = 1024;\n"
           "    dim3 grid(size_x / TILE, size_y / TILE), threads(TILE, ROWS);\n"
           "    float *d_in = 0, *d_out = 0;\n"
           "    transpose<<<grid, threads>>>(d_out, d_in, size_x, size_y);\n    return 0;\n}\n")
    _, v = new_user(project, "transpose", {"k.cu": src})
    assert v.passed, v.human()


def test_a_grid_that_is_a_plain_division(project):
    src = PLAIN + "void run(float* o, const float* i, int n) { scale<<<n / 256, 256>>>(o, i, n); }\n"
    _, v = new_user(project, "scale", {"k.cu": src})
    assert v.passed, v.human()


def test_many_integer_parameters(project):
    src = ("__global__ void rope(float* out, const float* inp, int n, int s0, int s1, int s2, int s3, int s4,"
           " int s5, int s6, int s7, int s8, int s9, int s10) {\n"
           "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) out[i] = 2.0f * inp[i];\n}\n"
           "void run(float* o, const float* i, int n) { rope<<<(n + 255) / 256, 256>>>(o, i, n, 1, 1, 1, 1, 1, 1, 1, "
           "1, 1, 1, 1); }\n")
    _, v = new_user(project, "rope", {"k.cu": src})
    assert v.passed, v.human()


def test_a_template_argument_written_as_an_expression(project):
    src = ("template <int HALF>\n__global__ void scale(float* out, const float* inp, int n) {\n"
           "    int i = blockIdx.x * (2 * HALF) + threadIdx.x;\n    if (i < n) out[i] = 2.0f * inp[i];\n}\n"
           "void run(float* o, const float* i, int n) {\n    constexpr int threads = 256;\n"
           "    scale<threads / 2><<<(n + threads - 1) / threads, threads>>>(o, i, n);\n}\n")
    _, v = new_user(project, "scale", {"k.cu": src})
    assert v.passed, v.human()


def test_a_params_struct_passed_by_value(project):
    src = ("typedef struct {\n  float* out;\n  const float* inp;\n  int n;\n} Params;\n"
           "__global__ void scale(Params p) {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
           "    if (i < p.n) p.out[i] = 2.0f * p.inp[i];\n}\n"
           "void run(Params p) { scale<<<(p.n + 255) / 256, 256>>>(p); }\n")
    _, v = new_user(project, "scale", {"k.cu": src})
    assert v.passed, v.human()


def test_launch_bounds_bound_the_proposed_block_without_a_launch_site(project):
    src = ("__global__ void __launch_bounds__(256) scale(float* out, const float* inp, int n) {\n"
           "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) out[i] = 2.0f * inp[i];\n}\n")
    _, v = new_user(project, "scale", {"k.cu": src})
    assert v.passed, v.human()


def test_a_doc_comment_above_the_pasted_spec(project):
    src = ("/*\nIn-place scale\n*/\ntemplate <typename T>\n__global__ void scale(T* out, const T* inp, int n) {\n"
           "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) out[i] = (T)2 * inp[i];\n}\n"
           "void run(float* o, const float* i, int n) { scale<<<(n + 255) / 256, 256>>>(o, i, n); }\n")
    _, v = new_user(project, "scale", {"k.cu": src})
    assert v.passed, v.human()


def test_a_pointer_to_a_typedef_vector_type(project):
    src = ("typedef uint4 data_t;\n__global__ void k(unsigned int* out, data_t* d, unsigned int n) {\n"
           "    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
           "    if (i < n) { data_t v = d[i]; out[i] = v.x + v.y + v.z + v.w; }\n}\n"
           "void run(unsigned int* o, void* d, unsigned int bytes) {\n"
           "    k<<<(bytes / 16 + 255) / 256, 256>>>(o, (data_t*)d, bytes / 16);\n}\n")
    _, v = new_user(project, "k", {"k.cu": src})
    assert v.passed, v.human()

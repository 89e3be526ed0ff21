"""nvcc on the user's own file (astra_cuda.compile): the compiler wherever a CUDA toolkit is
installed. No GPU needed: device code is compiled to a cubin, nothing runs."""
from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from astra_cuda.compile import extract, static
from astra_cuda.compile import cubin, nvcc, toolkit
from astra_cuda.compile.project import ProjectContext

TK = toolkit.find()
pytestmark = pytest.mark.skipif(TK is None, reason="no CUDA toolkit (nvcc) here")


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """Every test starts with an empty compile cache of its own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def compile_file(tmp_path: Path, text: str, kernels=(), context=ProjectContext(), name="k.cu", arch="sm_90"):
    f = tmp_path / "proj" / name
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(text)
    return nvcc.compile(text, str(f), context, arch, kernels, toolkit=TK)


def errors(r):
    return [d for d in r.diagnostics if d.severity == "error"]


PLAIN = """\
#include <cstdio>
__device__ float twice(float x) { return 2.0f * x; }

__global__ void scale(float* out, const float* in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = twice(in[i]);
}

int main() { printf("host code is compiled, never run\\n"); return 0; }
"""


def test_toolkit_found_with_version():
    assert TK.version and TK.version[0].isdigit() and os.path.basename(TK.nvcc) == "nvcc"
    assert any(Path(d, "cuda_runtime.h").is_file() for d in TK.include_dirs)


def test_plain_file_compiles_and_names_its_compiler(tmp_path):
    r = compile_file(tmp_path, PLAIN, ["scale"])
    assert r.ok and not errors(r), r.log
    assert r.compiler.startswith(f"nvcc {TK.version}, flags ") and "-std=c++17" in r.compiler and "-arch=sm_90" in r.compiler
    assert r.kernels["scale"] == "_Z5scalePfPKfi"
    assert r.resources["scale"].registers > 0 and Path(r.cubin).is_file()


def test_error_at_the_users_line_and_column(tmp_path):
    # nvcc echoes the line macro-expanded (`__global__` reads `__attribute__((global))`): the
    # column is the token's in the user's own line.
    text = PLAIN.replace("out[i] = twice(in[i]);", "out[i] = twice(in[i]) + undefined_thing;")
    r = compile_file(tmp_path, text, ["scale"])
    (err,) = errors(r)
    assert not r.ok and err.line == 5 and text.splitlines()[5][err.col:err.end_col] == "undefined_thing"
    assert err.source == f"nvcc {TK.version}"


def test_host_code_is_compiled(tmp_path):
    r = compile_file(tmp_path, PLAIN.replace("return 0; }", 'int x = "no"; return x; }'), ["scale"])
    (err,) = errors(r)
    assert not r.ok and err.line == 8 and "const char" in err.message


def test_error_in_a_project_header_names_the_header(tmp_path):
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "helper.cuh").write_text("#pragma once\n__device__ float twice(float x) { return y; }\n")
    r = compile_file(tmp_path, '#include "helper.cuh"\n__global__ void k(float* o) { o[0] = twice(1); }\n', ["k"])
    (err,) = errors(r)
    assert err.line == 0 and "helper.cuh:2" in err.message and '"y" is undefined' in err.message


def test_templates_are_instantiated_and_named_from_the_cubin(tmp_path):
    text = """\
#include <cuda_fp16.h>
namespace act {
template <typename T, int N>
__global__ void gather(T* out, const T* in, const int* idx) {
  T regs[N];
  for (int k = 0; k < N; ++k) regs[idx[k] % N] = in[k * 977 + threadIdx.x];
  out[threadIdx.x] = regs[idx[threadIdx.x] % N];
}
}
template __global__ void act::gather<float, 2>(float*, const float*, const int*);
"""
    r = compile_file(tmp_path, text, ["act::gather<float, 64>", "act::gather<half, 8>", "act::gather<float, 2>"])
    assert r.ok, r.log
    assert set(r.kernels) == {"act::gather<float, 64>", "act::gather<half, 8>", "act::gather<float, 2>"}
    assert cubin.demangle(r.kernels["act::gather<half, 8>"]).startswith("void act::gather<__half, 8>(")
    usage = r.resources["act::gather<float, 64>"]
    assert usage.stack_bytes >= 64 * 4  # a run-time index sends the register array to local memory


def test_a_bad_instantiation_says_so(tmp_path):
    r = compile_file(tmp_path, PLAIN, ["scale<float>"])
    (err,) = errors(r)
    assert "Astra's instantiation of `scale<float>`" in err.message


def test_a_name_that_is_not_an_expression_is_refused(tmp_path):
    with pytest.raises(nvcc.InvalidName):
        compile_file(tmp_path, PLAIN, ["scale; int x"])


def test_missing_kernel_and_overloads(tmp_path):
    text = PLAIN + "__global__ void scale(double* out) {}\n"
    r = compile_file(tmp_path, text, ["scale", "nothing"])
    said = " ".join(d.message for d in errors(r))
    assert "overloaded" in said and "`nothing` is not in the compiled module" in said


def test_an_overload_named_by_its_parameter_list(tmp_path):
    # FasterTransformer quantized_kernel: two non-template overloads in a namespace (a `const int` too)
    text = ("#include <cuda_fp16.h>\nnamespace ft {\n"
            "__global__ void q(char4* d, const float4* s, const int n) { if (threadIdx.x < n) d[0].x = (char)s[0].x; }\n"
            "__global__ void q(char4* d, const half2* s, const int n) { if (threadIdx.x < n) d[0].x = 1; }\n}\n")
    names = ["*static_cast<void (*)(char4*, const float4*, const int)>(&ft::q)",
             "*static_cast<void (*)(char4*, const half2*, const int)>(&ft::q)"]
    r = compile_file(tmp_path, text, names)
    assert r.ok and r.kernels[names[0]] == "_ZN2ft1qEP5char4PK6float4i", r.log
    assert r.kernels[names[1]] == "_ZN2ft1qEP5char4PK7__half2i"


def test_oversize_shared_memory_and_bad_inline_ptx(tmp_path):
    big = PLAIN.replace("  int i =", "  __shared__ float tile[20000];\n  tile[threadIdx.x] = 1.0f;\n  int i =").replace(
        "twice(in[i])", "twice(in[i]) + tile[threadIdx.x ^ 1]")
    r = compile_file(tmp_path, big, ["scale"])
    assert not r.ok and any("too much shared data" in d.message for d in errors(r))
    ptx = PLAIN.replace("  if (i < n)", '  asm volatile("frobnicate.f32 %0, %0;" : "+f"(*out));\n  if (i < n)')
    r = compile_file(tmp_path, ptx, ["scale"], name="p.cu")
    errs = errors(r)
    assert not r.ok and errs and all(d.line == 5 for d in errs) and any("frobnicate" in d.message for d in errs)


def test_project_flags_are_passed(tmp_path):
    inc = tmp_path / "lib" / "include"
    inc.mkdir(parents=True)
    (inc / "widths.cuh").write_text("#pragma once\nconstexpr int WIDTH = SCALE_BY;\n")
    text = '#include <widths.cuh>\n__global__ void k(float* o) { o[0] = WIDTH; }\n'
    ctx = ProjectContext(system_dirs=(str(inc),), defines=(("SCALE_BY", "3"),), std="c++20")
    r = compile_file(tmp_path, text, ["k"], context=ctx)
    assert r.ok, r.log
    assert f"-isystem {inc}" in r.compiler and "-DSCALE_BY=3" in r.compiler and "-std=c++20" in r.compiler
    assert str(inc / "widths.cuh") in r.headers


# ---- what the cut-unit NVRTC path refused and nvcc compiles (issue 24) -------------------------

NVCC_COMPILES = {
    "math_h_constants": ("""\
#include <math.h>
__global__ void k(float* o) { o[0] = M_PI * o[1]; o[2] = INFINITY; }
""", ProjectContext()),
    "cub": ("""\
#include <cub/cub.cuh>
template <int BLOCK>
__global__ void k(const float* x, float* y, int n) {
  using BR = cub::BlockReduce<float, BLOCK>;
  __shared__ typename BR::TempStorage tmp;
  float v = 0;
  for (int i = threadIdx.x; i < n; i += BLOCK) v += x[blockIdx.x * n + i];
  float s = BR(tmp).Sum(v);
  if (threadIdx.x == 0) y[blockIdx.x] = s;
}
""", ProjectContext()),
    "is_same_v": ("""\
#include <type_traits>
#include <cuda_bf16.h>
template <typename T>
__global__ void k(T* o) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) o[0] = __float2bfloat16(1.f); else o[0] = T(1);
}
""", ProjectContext()),
    "extended_lambda": ("""\
template <typename F>
__global__ void apply(float* o, int n, F f) { int i = threadIdx.x; if (i < n) o[i] = f(o[i]); }
__global__ void k(float* o, int n) { o[threadIdx.x] *= 2; }
void launch(float* o, int n) {
  float s = 3.f;
  apply<<<1, 32>>>(o, n, [=] __device__ (float x) { return x * s; });
}
""", ProjectContext(flags=("--extended-lambda",))),
    "host_members": ("""\
#include <vector>
struct Shape {
  int rows, cols;
  __host__ Shape(const std::vector<int>& dims) : rows(dims[0]), cols(dims[1]) {}
  __host__ __device__ int size() const { return rows * cols; }
};
__global__ void k(float* o, Shape s) { if (threadIdx.x < s.size()) o[threadIdx.x] = 0; }
""", ProjectContext()),
}


@pytest.mark.parametrize("case", sorted(NVCC_COMPILES))
def test_what_nvcc_compiles_compiles(case, tmp_path):
    text, ctx = NVCC_COMPILES[case]
    name = "k<256>" if case == "cub" else ("k<__nv_bfloat16>" if case == "is_same_v" else "k")
    r = compile_file(tmp_path, text, [name], context=ctx)
    assert r.ok and name in r.kernels, r.log


def test_bfloat16_through_cublas_headers(tmp_path):
    """`__nv_bfloat16` arriving through <cublas_v2.h> (cuBLAS's headers from the nvidia-cublas
    wheel, as a full toolkit has them; only its headers, so they sit beside the toolkit's)."""
    import nvidia
    found = [Path(b) / "cu13" / "include" for b in nvidia.__path__ if (Path(b) / "cu13" / "include" / "cublas_v2.h").is_file()]
    if not found:
        pytest.skip("nvidia-cublas is not installed (make setup installs it)")
    inc = tmp_path / "cublas"
    inc.mkdir()
    for h in found[0].glob("cublas*.h"):
        shutil.copy(h, inc)
    text = """\
#include <cublas_v2.h>
__global__ void k(__nv_bfloat16* o, const __nv_bfloat16* a) { o[threadIdx.x] = __hmul(a[threadIdx.x], a[0]); }
void gemm(cublasHandle_t h) { (void)h; }
"""
    r = compile_file(tmp_path, text, ["k"], context=ProjectContext(system_dirs=(str(inc),)))
    assert r.ok, r.log


def test_nvrtc_header_from_the_core_wheel(tmp_path):
    """<nvrtc.h>, which a full toolkit has and a compiler-only one lacks (TransformerEngine's rtc.h
    includes it), comes from the nvidia-cuda-nvrtc wheel Astra depends on."""
    tk = toolkit.find()
    if tk is None or any((Path(d) / "nvrtc.h").is_file() for d in tk.include_dirs):
        pytest.skip("no toolkit, or one that has nvrtc.h itself")
    text = "#include <nvrtc.h>\n__global__ void k(int* o) { o[0] = 1; }\nnvrtcResult probe() { return NVRTC_SUCCESS; }\n"
    r = compile_file(tmp_path, text, ["k"])
    assert r.ok, r.log


# ---- the cache ---------------------------------------------------------------------------------

def test_repeated_compile_costs_nothing_and_a_header_edit_invalidates(tmp_path):
    (tmp_path / "proj").mkdir()
    header = tmp_path / "proj" / "scale.cuh"
    header.write_text("#pragma once\nconstexpr float FACTOR = 2.0f;\n")
    text = '#include "scale.cuh"\n__global__ void k(float* o) { o[0] = FACTOR; }\n'
    first = compile_file(tmp_path, text, ["k"])
    assert first.ok and not first.cached and str(header) in first.headers
    again = compile_file(tmp_path, text, ["k"])
    assert again.cached and again.ok
    assert again.kernels == first.kernels and Path(again.cubin).read_bytes() == Path(first.cubin).read_bytes()
    header.write_text("#pragma once\nconstexpr float FACTOR = oops;\n")
    edited = compile_file(tmp_path, text, ["k"])
    assert not edited.cached and not edited.ok and any("oops" in d.message for d in errors(edited))


def test_a_compile_that_missed_a_header_is_not_remembered(tmp_path):
    # the headers read key the cache: one not found is not among them, so its arrival would go unseen
    text = '#include "later.cuh"\n__global__ void k(float* o) { o[0] = LATER; }\n'
    assert not compile_file(tmp_path, text, ["k"]).ok
    (tmp_path / "proj" / "later.cuh").write_text("#pragma once\nconstexpr float LATER = 1.0f;\n")
    r = compile_file(tmp_path, text, ["k"])
    assert r.ok and not r.cached and str(tmp_path / "proj" / "later.cuh") in r.headers


def test_cache_hit_answers_other_kernels_of_the_same_text(tmp_path):
    text = PLAIN + "__global__ void other(int* o) { o[0] = 1; }\n"
    compile_file(tmp_path, text, ["scale"])
    r = compile_file(tmp_path, text, ["other"])
    assert r.cached and r.kernels == {"other": "_Z5otherPi"}


SCALES = """\
namespace act {
template <typename T, int N>
__global__ void scale(T* out, const T* in) { out[threadIdx.x] = in[threadIdx.x] * T(N); }
}
"""


def test_a_compile_for_fewer_kernels_of_the_same_text_is_the_one_made_for_more(tmp_path):
    """A file's static check names all its kernels, a check names one: the probes that name them
    differ, and each was a compile of its own (for a PyTorch extension, minutes of torch's headers
    in nvcc's front end per compile). The compile that passed for more kernels serves."""
    every = compile_file(tmp_path, SCALES, ["act::scale<float, 2>", "act::scale<int, 3>"])
    assert every.ok and not every.cached, every.log
    one = compile_file(tmp_path, SCALES, ["act::scale<int, 3>"])
    assert one.ok and one.cached and one.cubin == every.cubin
    assert one.kernels["act::scale<int, 3>"] == every.kernels["act::scale<int, 3>"]
    assert not compile_file(tmp_path, SCALES, ["act::scale<float, 4>"]).cached   # not among them: compiled


def test_a_failed_compile_for_more_kernels_does_not_answer_for_fewer(tmp_path):
    # the failure is the other instantiation's: this kernel alone compiles
    bad = compile_file(tmp_path, SCALES, ["act::scale<float, 2>", "act::scale<void, 1>"])
    assert not bad.ok
    good = compile_file(tmp_path, SCALES, ["act::scale<float, 2>"])
    assert good.ok and not good.cached, good.log


# ---- confinement -------------------------------------------------------------------------------

def test_nvcc_reads_nothing_outside_the_project(tmp_path):
    secret = tmp_path / "private" / "secret.h"
    secret.parent.mkdir()
    secret.write_text("int leaked = 271828;\n")
    (tmp_path / "proj" / ".git").mkdir(parents=True)
    text = f'#include "{secret}"\n__global__ void k(float* o) {{ o[0] = 1; }}\n'
    r = compile_file(tmp_path, text, ["k"])
    said = r.log + " ".join(d.message for d in r.diagnostics)
    assert not r.ok and "Permission denied" in said and "271828" not in said


# ---- the static check uses it ------------------------------------------------------------------

def test_static_check_compiles_the_whole_file_with_nvcc(tmp_path):
    f = tmp_path / "proj" / "k.cu"
    f.parent.mkdir()
    f.write_text(NVCC_COMPILES["math_h_constants"][0])
    u = extract.unit(f.read_text(), str(f), "k")
    r = static.compile_unit(u)
    assert r.ok and r.compiler.startswith(f"nvcc {TK.version}, flags") and r.resources["k"].registers > 0


def test_static_units_of_one_file_share_one_compile(tmp_path):
    f = tmp_path / "proj" / "k.cu"
    f.parent.mkdir()
    text = PLAIN + "__global__ void other(int* o) { o[0] = 1; }\n"
    f.write_text(text)
    units = [extract.unit(text, str(f), k) for k in ("scale", "other")]
    first, second = static.compile_units(units)
    assert first.ok and second.ok and set(second.resources) >= {"scale", "other"}


def test_toolkit_turned_off_falls_back_to_nvrtc(tmp_path, monkeypatch):
    monkeypatch.setenv(toolkit.TOOLKIT_ENV, "none")
    assert toolkit.find() is None
    if static._nvrtc() is None:
        pytest.skip("no NVRTC")
    u = extract.unit(PLAIN, str(tmp_path / "k.cu"), "scale")
    r = static.compile_unit(u)
    assert r.ok and r.compiler.startswith("NVRTC ") and "CUDA toolkit turned off" in r.compiler


def test_compile_commands_compiler_is_taken_only_when_it_is_a_toolkit(tmp_path):
    root = Path(TK.root)
    ctx = ProjectContext(compiler=str(root / "bin" / "nvcc"))
    assert toolkit.find(ctx).origin == "compile_commands.json"
    fake = tmp_path / "repo" / "bin" / "nvcc"
    fake.parent.mkdir(parents=True)
    fake.write_text("#!/bin/sh\necho pwned\n")
    fake.chmod(0o755)
    assert toolkit.find(ProjectContext(compiler=str(fake))).origin != "compile_commands.json"


# ---- the GPU backend loads the cubin (wiring, with CuPy stood in: the real run is tests/gpu) ----

class _FakeRaw:
    """CuPy's RawModule(path=...) as far as the backend uses it: kernels by their ELF names."""

    def __init__(self, path):
        self.entries = {s.name for s in cubin.symbols(Path(path).read_bytes()) if s.entry}

    def get_function(self, name):
        if name not in self.entries:
            raise KeyError(f"no kernel {name}")
        return ("function", name)


def _gpu_backend(monkeypatch):
    import contextlib
    import types

    from astra_cuda.backends.gpu import GpuBackend
    b = object.__new__(GpuBackend)  # no device here: only what compile_unit touches
    b.cp, b.arch, b._modules, b.poisoned, b.sanitizer = types.SimpleNamespace(RawModule=_FakeRaw), "sm_90", {}, None, None
    b.device = contextlib.nullcontext()
    return b


def test_gpu_backend_launches_the_cubin_by_mangled_name(tmp_path, monkeypatch):
    f = tmp_path / "proj" / "k.cu"
    f.parent.mkdir()
    text = NVCC_COMPILES["cub"][0]
    f.write_text(text)
    b = _gpu_backend(monkeypatch)
    mod = b.compile_unit(extract.unit(text, str(f), "k", instantiate="<256>"))
    assert mod.function("k<256>") == ("function", "_Z1kILi256EEvPKfPfi")
    assert mod.compiler.startswith(f"nvcc {TK.version}, flags")
    again = b.compile_unit(extract.unit(text, str(f), "k", instantiate="<256>"))
    assert again is mod  # one module per cubin


def test_gpu_backend_compile_error_names_line_and_compiler(tmp_path, monkeypatch):
    from astra_cuda.backends.base import CompileError
    f = tmp_path / "proj" / "k.cu"
    f.parent.mkdir()
    text = PLAIN.replace("twice(in[i]);", "twice(in[i]) + nope;")
    f.write_text(text)
    with pytest.raises(CompileError) as e:
        _gpu_backend(monkeypatch).compile_unit(extract.unit(text, str(f), "scale"))
    assert "k.cu:6:" in str(e.value) and "nvcc" in str(e.value) and "nope" in e.value.log


def test_static_report_names_the_compiler(tmp_path):
    from astra_cuda import api
    f = tmp_path / "proj" / "k.cu"
    f.parent.mkdir()
    f.write_text(PLAIN.replace("twice(in[i]);", "twice(in[i]) + nope;"))
    report = api.static_check(api.open_file(str(f)), arch="sm_90")
    out = report.to_json()
    assert out["compiler"].startswith(f"nvcc {TK.version}, flags") and "-arch=sm_90" in out["compiler"]
    (err,) = [d for d in out["diagnostics"] if d["severity"] == "error"]
    assert err["source"] == f"nvcc {TK.version}" and err["line"] == 6 and "nope" in err["message"]


def test_nothing_of_the_users_reaches_nvccs_shell(tmp_path, monkeypatch):
    """nvcc runs its steps through a shell and leaves `$(...)` in a file name or a macro's value,
    and a backquote in an include folder's name, unquoted: none of them is ever on its command
    line (links of Astra's own name, #define lines in the copy, a copy named by Astra)."""
    proj = tmp_path / "proj$(touch INJ_DIR)"
    inc = proj / "inc`touch INJ_INC`"
    inc.mkdir(parents=True)
    (proj / ".git").mkdir()
    (inc / "width.cuh").write_text("#pragma once\nconstexpr int WIDTH = 4;\n")
    f = proj / "k$(touch INJ_FILE).cu"
    text = '#include <width.cuh>\n__global__ void k(float* o) { o[0] = WIDTH + VALUE + SHOUT; }\n'
    f.write_text(text)
    ctx = ProjectContext(include_dirs=(str(inc),), defines=(("VALUE", "(2 /* $(touch INJ_DEF) `touch INJ_Q` */)"),
                                                            ("SHOUT", None)))
    # A command that ran could write only the build folder (Landlock): keep it to look in.
    builds = tmp_path / "builds"
    real_mkdtemp = tempfile.mkdtemp
    monkeypatch.setattr(tempfile, "mkdtemp", lambda prefix="", dir=None, **kw: real_mkdtemp(
        prefix=prefix, dir=str(builds) if prefix == "astra-nvcc-" else dir, **kw))
    monkeypatch.setattr(nvcc.shutil, "rmtree", lambda *a, **kw: None)
    builds.mkdir()
    r = nvcc.compile(text, str(f), ctx, "sm_90", ["k"], toolkit=TK)
    assert r.ok and r.kernels == {"k": "_Z1kPf"}, r.log
    assert list(builds.iterdir())
    assert str(inc / "width.cuh") in r.headers
    assert not [p for p in tmp_path.rglob("INJ*")] and not list(Path.cwd().glob("INJ*"))
    bad = text.replace("WIDTH +", "WIDTH + nope +")
    f.write_text(bad)
    r = nvcc.compile(bad, str(f), ctx, "sm_90", ["k"], toolkit=TK)
    (err,) = errors(r)
    assert err.line == 1 and "nope" in err.message and str(f) not in err.message
    assert not [p for p in tmp_path.rglob("INJ*")]


def test_a_header_found_nowhere_is_named_as_one_the_build_generates_or_fetches(tmp_path):
    # TransformerEngine's generated string_code_*.h, a submodule's cudnn_frontend.h, sgl-kernel's
    # header CMake downloads: the message says what such a header usually is and what to do
    r = compile_file(tmp_path, '#include "string_code_transpose.h"\n' + PLAIN, ["scale"])
    [e] = errors(r)
    assert e.line == 0 and "string_code_transpose.h: No such file or directory" in e.message
    assert "generates or downloads" in e.message and "-I" in e.message


def test_a_device_lambda_compiles_with_the_flag_a_torch_cmake_project_gives(tmp_path):
    # vLLM scaled_quant.cu: its CMake finds torch, whose CUDA flags include --expt-extended-lambda
    from astra_cuda.compile import project
    text = ("template <typename F> __device__ float apply(F f, float x) { return f(x); }\n"
            "__global__ void k(float* out) { out[threadIdx.x] = apply([] __device__ (float v) { return 2 * v; }, 1.f); }\n")
    (tmp_path / "proj" / ".git").mkdir(parents=True)
    (tmp_path / "proj" / "CMakeLists.txt").write_text("find_package(Torch REQUIRED)\n")
    assert not compile_file(tmp_path, text, ["k"]).ok
    ctx = project.resolve(str(tmp_path / "proj" / "k.cu"), root=str(tmp_path / "proj"))
    r = compile_file(tmp_path, text, ["k"], context=ctx)
    assert r.ok, r.log
    assert "--extended-lambda" in r.compiler


def test_a_kernel_in_a_namespace_spelled_through_a_macro(tmp_path):
    # flash-attention: `namespace FLASH_NAMESPACE {` (the macro from a header); the source model
    # reads it as written, the compiled module by its expansion
    text = ("#define FLASH_NAMESPACE flash\nnamespace FLASH_NAMESPACE {\n"
            "__global__ void k(float* o) { o[threadIdx.x] = 1.f; }\n}\n")
    r = compile_file(tmp_path, text, ["FLASH_NAMESPACE::k"])
    assert r.ok and r.kernels == {"FLASH_NAMESPACE::k": "_ZN5flash1kEPf"}, r.log
    f = tmp_path / "proj" / "k.cu"
    u = extract.unit(text, str(f), "k")   # the cut finds it under its preprocessed name
    assert "namespace flash {" in u.source and u.name_expression == "FLASH_NAMESPACE::k"


def test_a_comparison_in_a_demangled_return_type_is_no_template_bracket():
    entry = "std::enable_if<((4)>(1)), void>::type scale_kernel<float, 4>(float*, float const*, int)"
    assert cubin.plain_name(entry) == "scale_kernel<float, 4>"
    probe = "__astra_probe_0<void (*)(float*, float const*, int), &(" + entry + ")>"
    assert cubin._probe_argument(probe, "__astra_probe_0") == entry


def test_a_function_pointer_template_argument_closes_its_template_before_the_parameters():
    entry = ("void gate_kernel<float, float, &(float act<float>(float const&)), "
             "&(float packed_act<float>(float const&))>(float*, float const*, int)")
    want = "gate_kernel<float, float, &(float act<float>(float const&)), &(float packed_act<float>(float const&))>"
    assert cubin.plain_name(entry) == want
    probe = "__astra_probe_0<void (*)(float*, float const*, int), &(" + entry + ")>"
    assert cubin._probe_argument(probe, "__astra_probe_0") == entry


# Many small instantiations: cicc's device C file (the front end's C rendering of the device code)
# is ~2.3 MB, ten times the PTX and larger than the preprocessed unit (flash-attention's forward
# kernel: 72 MB of device C for 1 MB of PTX).
MANY_INSTANCES = """\
#include <utility>
template <int I> struct Term { float a[4]; __device__ float get(float x) const { return x * a[I % 4] + I; } };
template <int... I> __device__ float sum(float x, std::integer_sequence<int, I...>) {
  return (Term<I>{{1, 2, 3, 4}}.get(x) + ...);
}
__global__ void k(float* x) { x[0] = sum(x[0], std::make_integer_sequence<int, 3000>{}); }
"""


@pytest.mark.parametrize("room", [True, False])
def test_cicc_alone_may_write_a_device_c_file_past_the_file_bound(tmp_path, monkeypatch, room):
    """Every file of a compile keeps to the confinement's bound (here 2 MiB for 64 MiB), but cicc's
    device C file, which nothing reads, may grow to DEVICE_C_FILE_SIZE. (Cut at the bound, cicc
    mostly goes on silently; flash-attention's stopped: "error while writing generated C file".)"""
    made = nvcc.confinement
    monkeypatch.setattr(nvcc, "confinement", lambda *a: dataclasses.replace(
        made(*a), file_size=2 << 20, **({} if room else {"file_size_room": 0})))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(nvcc.shutil, "rmtree", lambda *a, **k: None)   # the build folder kept, to look at
    r = compile_file(tmp_path, MANY_INSTANCES, ["k"])
    (build,) = tmp_path.glob("astra-nvcc-*")
    sizes = {p.suffix: p.stat().st_size for p in build.iterdir() if p.is_file()}
    if room:
        assert r.ok and not errors(r), r.log
        assert sizes[".gpu"] > 2 << 20, sizes
    else:   # cut at the bound: cicc goes on with the file cut, or stops on the write's error (both seen)
        assert sizes[".gpu"] == 2 << 20, sizes
        assert (r.ok and not errors(r)) or "File too large" in r.log, r.log
    assert max(n for suffix, n in sizes.items() if suffix != ".gpu") < 2 << 20, sizes


def test_nvccs_steps_give_cicc_alone_room_for_its_device_c_file():
    listing = "\n".join([
        "#$ _HERE_=/cuda/bin", '#$ INCLUDES="-I/cuda/include"  ', "#$ -- Filter Dependencies -- > /b/deps.d",
        '#$ gcc -D__CUDA_ARCH__=900 -E -x c++ "a.cu" -o "/b/a.cpp1.ii" ',
        '#$ "$CICC_PATH/cicc" --gen_device_file_name "/b/a.cudafe1.gpu" "/b/a.cpp1.ii" -o "/b/a.ptx"',
        '#$ ptxas -arch=sm_90 "/b/a.ptx" -o "/b/a.cubin"'])
    steps = nvcc.dryrun_steps(listing, 64 << 20)
    assert steps[:2] == ["export _HERE_=/cuda/bin", "export INCLUDES=-I/cuda/include"] and len(steps) == 5
    assert steps[2].startswith("gcc ") and steps[4].startswith("ptxas ")
    assert steps[3] == (f"ulimit -S -f {nvcc.DEVICE_C_FILE_SIZE >> 9} 2>/dev/null || :; "
                        '"$CICC_PATH/cicc" --gen_device_file_name "/b/a.cudafe1.gpu" "/b/a.cpp1.ii" -o "/b/a.ptx"; '
                        f"ulimit -S -f {(64 << 20) >> 9}")
    assert nvcc.dryrun_steps("nvcc fatal   : Unknown option '-bad'") == []

"""PyTorch-extension files through nvcc, with a stand-in torch written here (tests/static/
torch_standin: the element types' headers and nothing else); the real torch is tested on the GPU
machine (tests/gpu/test_torch_ext_on_gpu.py, `scripts/gpu-check nvcc`)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from astra_cuda.model import dtypes, source, spec as spec_mod
from astra_cuda.compile import extract, project, static
from astra_cuda.compile import nvcc, toolkit, torch_ext
from astra_cuda.errors import AstraError
from astra_cuda.compile.project import ProjectContext

STANDIN = Path(__file__).resolve().parent / "torch_standin"
TK = toolkit.find()

EXTENSION = """\
#include <torch/extension.h>

/* @astra
grid = ["cdiv(n, 256)"]
block = [256]

[sizes]
n = [1, 1000]

[args]
out = { type = "float", shape = ["n"], output = true }
h   = { type = "half", shape = ["n"] }
b   = { type = "bfloat16", shape = ["n"] }
f8  = { type = "float8_e4m3fn", shape = ["n"] }
n   = "n"
*/
__global__ void mix(float* out, const at::Half* h, const c10::BFloat16* b, const c10::Float8_e4m3fn* f8, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = float(h[i]) + float(b[i]) + float(f8[i]);
}

void mix_launcher(int n) { (void)n; }
"""


@pytest.fixture
def installed(monkeypatch, tmp_path):
    """The stand-in torch on the import path (found, never imported), a fresh compile cache."""
    monkeypatch.syspath_prepend(str(STANDIN))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    torch_ext.installed_include_dirs.cache_clear()
    yield
    torch_ext.installed_include_dirs.cache_clear()


@pytest.fixture
def absent(monkeypatch, tmp_path):
    """No torch importable from here (whatever this machine has installed)."""
    monkeypatch.setattr(torch_ext, "installed_include_dirs", lambda: ())
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def _file(tmp_path, text=EXTENSION, name="mix.cu"):
    f = tmp_path / "proj" / name
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(text)
    return f


def test_torch_types_are_spec_types():
    assert dtypes.from_cpp("const at::Half").name == "half"
    assert dtypes.from_cpp("c10::Half").name == "half"
    assert dtypes.from_cpp("c10::BFloat16").name == "bfloat16"
    assert dtypes.from_cpp("at::BFloat16").name == "bfloat16"
    assert dtypes.from_cpp("c10::Float8_e4m3fn").name == "float8_e4m3fn"
    assert dtypes.from_cpp("c10::Float8_e5m2").name == "float8_e5m2"
    assert dtypes.lookup("fp8").name == "float8_e4m3fn" and dtypes.lookup("fp8").itemsize == 1


def test_spec_of_an_extension_kernel_checks_its_torch_types():
    m = source.parse(EXTENSION)
    s = spec_mod.load(m.kernel("mix"), m)
    assert [s.args[a].dtype.name for a in ("h", "b", "f8")] == ["half", "bfloat16", "float8_e4m3fn"]
    wrong = EXTENSION.replace('h   = { type = "half"', 'h   = { type = "float"')
    m = source.parse(wrong)
    with pytest.raises(spec_mod.SpecErrors):
        spec_mod.load(m.kernel("mix"), m)


def test_include_folders_found_from_the_installed_torch_without_importing_it(installed):
    dirs = torch_ext.installed_include_dirs()
    assert dirs == (str(STANDIN / "torch" / "include"), str(STANDIN / "torch" / "include" / "torch" / "csrc" / "api" / "include"))
    assert "torch" not in sys.modules or not str(getattr(sys.modules["torch"], "__file__", "")).startswith(str(STANDIN))


def test_an_extension_compiles_with_at_least_the_standard_torch_requires():
    # vLLM sets CMAKE_CXX_STANDARD 17 and builds with torch 2.10, whose CMake target requires C++20
    assert torch_ext.standard("c++17") == "c++20" and torch_ext.standard(None) == "c++20"
    assert torch_ext.standard("c++23") == "c++23" and torch_ext.standard("gnu++14") == "c++20"
    ctx = ProjectContext(std="c++17")
    text = "#include <torch/all.h>\n__global__ void k(float* o) { o[0] = 1; }\n"
    assert "-std=c++20" in nvcc.project_flags(ctx, text, "k.cu")
    assert "-std=c++17" in nvcc.project_flags(ctx, "__global__ void k(float* o) { o[0] = 1; }\n", "k.cu")


def test_torch_use_is_seen_through_project_headers(tmp_path):
    f = _file(tmp_path, '#include "ops.h"\n__global__ void k(float* o) { o[0] = 1; }\n', "k.cu")
    (f.parent / "ops.h").write_text("#pragma once\n#include <torch/all.h>\n")
    assert torch_ext.uses_torch(f.read_text(), str(f), ProjectContext())
    assert not torch_ext.uses_torch("#include <cuda_fp16.h>\n", str(f), ProjectContext())


@pytest.mark.skipif(TK is None, reason="no CUDA toolkit (nvcc) here")
def test_extension_compiles_with_torchs_headers_and_flags(installed, tmp_path):
    f = _file(tmp_path)
    r = nvcc.compile(EXTENSION, str(f), ProjectContext(), "sm_90", ["mix"], toolkit=TK)
    assert r.ok and "mix" in r.kernels, r.log
    assert f"-I{STANDIN / 'torch' / 'include'}" in r.compiler and "-D__CUDA_NO_HALF_OPERATORS__" in r.compiler
    assert "--expt-relaxed-constexpr" in r.compiler
    assert str(STANDIN / "torch" / "include" / "c10" / "util" / "Half.h") in r.headers
    s = static.compile_unit(extract.unit(EXTENSION, str(f), "mix"))
    assert s.ok and s.compiler.startswith("nvcc ")


@pytest.mark.skipif(TK is None, reason="no CUDA toolkit (nvcc) here")
def test_torch_folders_given_by_the_project_are_used(absent, tmp_path):
    inc = tmp_path / "proj" / "third_party" / "torch_include"
    import shutil
    shutil.copytree(STANDIN / "torch" / "include", inc)
    f = _file(tmp_path)
    ctx = ProjectContext(include_dirs=(str(inc),))
    assert toolkit.for_file(EXTENSION, str(f), ctx)[0] is not None
    r = nvcc.compile(EXTENSION, str(f), ctx, "sm_90", ["mix"], toolkit=TK)
    assert r.ok, r.log


def test_without_torch_nvrtc_judges_the_cut_unit_and_says_why(absent, tmp_path):
    f = _file(tmp_path)
    tk, why = toolkit.for_file(EXTENSION, str(f), ProjectContext())
    assert tk is None and ("torch is not installed" in why or "no CUDA toolkit" in why)
    if static._nvrtc() is None:
        pytest.skip("no NVRTC")
    r = static.compile_unit(extract.unit(EXTENSION, str(f), "mix"))
    assert r.compiler.startswith("NVRTC ") and why in r.compiler


def test_a_pytorch_extension_compile_gets_the_heavy_budgets(installed, monkeypatch, tmp_path):
    """torch's ~6,000 headers need more than 2 GiB of address space in nvcc's front end (an H200
    run refused every vLLM file with 'out of memory' at 2 GiB): the installed torch's include
    folders in the options (by real path) give 6 GiB and 240 s; anything else keeps 2 GiB and
    45 s — torch's define, a project folder named torch/include or a link to one of the project's
    (what a hostile file or compile_commands.json can give itself); the user's settings win."""
    from astra_cuda.compile import confine
    monkeypatch.delenv(confine.MEMORY_ENV, raising=False)
    monkeypatch.delenv(confine.TIME_ENV, raising=False)
    inc, api = torch_ext.installed_include_dirs()
    (tmp_path / "link").symlink_to(inc)
    assert confine.heavy([f"-I{inc}"]) and confine.heavy(["-isystem", api]) and confine.heavy([f"-I{tmp_path}/link"])
    fake = tmp_path / "proj" / "torch" / "include"
    (fake / "torch").mkdir(parents=True)
    (fake / "torch" / "extension.h").write_text("// not torch\n")
    for hostile in (["-DTORCH_API_INCLUDE_EXTENSION_H"], [f"-I{fake}", "-DTORCH_API_INCLUDE_EXTENSION_H"],
                    ["-I/x/site-packages/torch/include"], ["-I/proj/include", "-DNDEBUG", "-I/x/torch_like"]):
        assert not confine.heavy(hostile), hostile
    assert confine.compiler_memory(confine.heavy([f"-I{inc}"])) == 6 << 30
    assert confine.compiler_seconds(True) == 240 and confine.compiler_seconds(False) == 45
    assert confine.compiler_memory(False) == 2 << 30
    monkeypatch.setenv(confine.MEMORY_ENV, "3G")
    monkeypatch.setenv(confine.TIME_ENV, "100")
    assert confine.compiler_memory(True) == 3 << 30 and confine.compiler_seconds(True) == 100


HALF_OPERATORS = """\
#include <torch/extension.h>
#include <cuda_fp16.h>
__global__ void add_half(__half* out, const __half* a, const __half* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
#ifdef __CUDA_NO_HALF_OPERATORS__
  if (i < n) out[i] = __hadd(a[i], b[i]);
#else
  if (i < n) out[i] = a[i] + b[i];
#endif
}
__global__ void add_half_operators(__half* out, const __half* a, const __half* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}
"""
NO_HALF = ("__CUDA_NO_HALF_OPERATORS__", "__CUDA_NO_HALF_CONVERSIONS__", "__CUDA_NO_BFLOAT16_CONVERSIONS__",
           "__CUDA_NO_HALF2_OPERATORS__")


def test_a_builds_undefines_drop_torchs_defines_everywhere(installed, tmp_path):
    """vLLM's CMake and DeepSpeed's setup.py build without torch's __CUDA_NO_HALF* defines
    (`-U`): nvcc, the device pass and the CPU build see the same macros, with and without."""
    f = _file(tmp_path)
    f.write_text(HALF_OPERATORS)
    undefined = project.from_flags(undefines=NO_HALF, origin="test")
    assert all(f"-U{n}" in undefined.options() for n in NO_HALF)
    u = extract.unit(HALF_OPERATORS, str(f), "add_half")           # torch's macros, as nvcc has them
    assert "-D__CUDA_NO_HALF_OPERATORS__" in u.options() and "__hadd" in u.source
    u = extract.unit(HALF_OPERATORS, str(f), "add_half", context=undefined)
    assert "-D__CUDA_NO_HALF_OPERATORS__" not in u.options() and "__hadd" not in u.source
    if TK is None:
        return
    r = nvcc.compile(HALF_OPERATORS, str(f), ProjectContext(), "sm_90", ["add_half_operators"], toolkit=TK)
    assert not r.ok and "-D__CUDA_NO_HALF_OPERATORS__" in r.compiler
    r = nvcc.compile(HALF_OPERATORS, str(f), undefined, "sm_90", ["add_half_operators"], toolkit=TK)
    assert r.ok and "-U__CUDA_NO_HALF_OPERATORS__" in r.compiler, r.log


def test_undefines_from_a_compile_command_keep_command_line_order(tmp_path):
    ctx = project.from_arguments(["nvcc", "-DA=1", "-UA", "-UB", "-DB", "-U", "C", "--undefine-macro=D"],
                                 cwd=tmp_path, origin="test", source=str(tmp_path / "k.cu"))
    assert ctx.defines == (("B", None),) and ctx.undefines == ("A", "C", "D")
    with pytest.raises(AstraError):
        project.from_flags(undefines=["A B"], origin="test")


DEVICE_NAMES = """\
#include <torch/extension.h>
#include <ATen/cuda/DeviceUtils.cuh>

/* @astra
grid = ["cdiv(n, 32)"]
block = [32]

[sizes]
n = [32, 96]

[args]
out = { type = "float", shape = ["n"], output = true }
h   = { type = "half", shape = ["n"] }
n   = "n"
*/
__global__ void plus_lane0(float* out, const at::Half* h, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = i < n ? float(h[i]) : 0.0f;
  float first = WARP_SHFL(v, 0);
  __nv_bfloat16 one = hexp(__float2bfloat16(0.0f));
  if (i < n) out[i] = first + v + __bfloat162float(one);
}
"""


def test_the_cpu_build_of_an_extension_reads_the_torch_names_device_code_uses(installed, tmp_path):
    """apex's layer norm, vLLM's activations: `at::Half` and torch's `WARP_SHFL` in device code. The
    CPU build reads torch's element types as a host compiler does and its warp helpers after the
    shim, in place of the torch #includes nvcc reads whole; the shim's bf16 math works under
    torch's -D__CUDA_NO_BFLOAT16_CONVERSIONS__."""
    f = _file(tmp_path, DEVICE_NAMES, "names.cu")
    u = extract.unit(DEVICE_NAMES, str(f), "plus_lane0")
    assert "#elif defined(ASTRA_TORCH_DEVICE)\n#include <astra_torch_device.h>" in u.source
    assert "-D__CUDA_NO_BFLOAT16_CONVERSIONS__" in u.options()
    # (built and run here, in this process, with the stand-in torch: a check's worker finds the installed one)
    import numpy as np
    from astra_cuda.backends.base import Launch, Scalar
    from astra_cuda.backends.cpu import CpuBackend
    be = CpuBackend(workers=1)
    m = be.compile_unit(u)
    h = (np.arange(64, dtype=np.float16) * np.float16(0.5))
    out, hb = be.alloc((64,), np.float32), be.upload(h)
    be.launch(m, u.name_expression, Launch((2, 1, 1), (32, 1, 1)), [out, hb, Scalar("int", 64, "int32")])
    want = h.astype(np.float32) + np.repeat(h[::32].astype(np.float32), 32) + 1.0
    assert np.array_equal(be.download(out), want)

"""Issue 10, breakages 1-3: project headers that pull in host-only headers, a #define above an
#include that selects the element type, and build caches that must see header edits; the
project context (-I/-D/--std, settings, compile_commands.json) shown in every verdict."""
import json

import pytest

from astra_cuda import api
from astra_cuda.compile import extract, static
from astra_cuda.compile import project as proj
from astra_cuda.errors import AstraError
from astra_cuda.lsp.settings import Settings

from .conftest import needs_gxx

COMMON_H = """#pragma once
#include <stdlib.h>
#include <stdio.h>
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#if defined(ENABLE_BF16)
typedef __nv_bfloat16 floatX;
#else
typedef float floatX;
#endif
static cublasHandle_t handle;
static void check_blas(cublasStatus_t s) { if (s != CUBLAS_STATUS_SUCCESS) exit(1); }
template <class T> __host__ __device__ T ceil_div(T a, T b) { return (a + b - 1) / b; }
"""

SPEC = """/* @astra
grid = ["cdiv(n, 128)"]
block = ["128"]
[sizes]
n = [1, 300, 1000]
[args]
out = {{ type = "{t}", shape = ["n"], output = true }}
inp = {{ type = "{t}", shape = ["n"] }}
n = "n"
*/
"""

KERNEL = """__global__ void scale(floatX* out, const floatX* inp, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (floatX)(2.0f * (float)inp[i]);
}
int main() { check_blas(cublasCreate(&handle)); return 0; }
"""


def dev_file(t="bfloat16", define="#define ENABLE_BF16\n", include='#include "common.h"\n'):
    return define + include + "\n" + SPEC.format(t=t) + KERNEL


def test_a_project_header_with_host_only_headers_compiles_statically(project):
    project("common.h", COMMON_H)
    f = project("k.cu", dev_file())
    report = api.static_check(api.snapshot(f.read_text(), str(f)))
    assert not [d for d in report.diagnostics if d.severity == "error"], report.diagnostics


def test_the_define_above_the_include_stays_before_the_typedef_it_selects(project):
    project("common.h", COMMON_H)
    f = project("k.cu", dev_file())
    u = extract.unit(f.read_text(), str(f), "scale")
    src = u.source
    # the unit is cut from the device pass's preprocessed file: the conditional is decided there
    assert src.index("#define ENABLE_BF16") < src.index("typedef __nv_bfloat16 floatX;")
    assert "typedef float floatX;" not in src
    assert "cublasHandle_t" not in src and "check_blas" not in src   # host helpers of the header: dropped
    assert "#include <cublas_v2.h>" in u.dropped and str(f.parent / "common.h") in u.headers


@needs_gxx
def test_cpu_check_of_a_kernel_behind_a_project_header(project):
    project("common.h", COMMON_H)
    f = project("k.cu", dev_file())
    (v,) = api.check(api.snapshot(f.read_text(), str(f)), "scale", backend="cpu", quick=True)
    assert v.passed, v.human()
    assert v.project.startswith("no project context")


@needs_gxx
def test_a_spec_type_that_is_not_the_typedef_is_an_error_never_a_silent_pass(project):
    # ENABLE_BF16 makes floatX a bfloat16: a spec saying float must not run the kernel on floats
    project("common.h", COMMON_H)
    f = project("k.cu", dev_file(t="float"))
    (v,) = api.check(api.snapshot(f.read_text(), str(f)), "scale", backend="cpu", quick=True)
    assert not v.passed
    assert "the spec says `out` points to float" in (v.log + " ".join(x.message for x in v.failures)), v.human()


@needs_gxx
def test_editing_a_header_is_never_answered_from_the_build_cache(project):
    project("scale.h", "#define SCALE 2.0f\n")
    text = ('#include "scale.h"\n' + SPEC.format(t="float").replace('block = ["128"]', 'block = ["128"]\nreference = "ref"')
            + "__global__ void k(float* out, const float* inp, int n) {\n"
              "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) out[i] = SCALE * inp[i];\n}\n"
            + SPEC.format(t="float") + "__global__ void ref(float* out, const float* inp, int n) {\n"
              "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) out[i] = 2.0f * inp[i];\n}\n")
    f = project("k.cu", text)
    (v,) = api.check(api.snapshot(text, str(f)), "k", backend="cpu", quick=True)
    assert v.passed, v.human()
    project("scale.h", "#define SCALE 3.0f\n")
    (v,) = api.check(api.snapshot(text, str(f)), "k", backend="cpu", quick=True)
    assert not v.passed and v.failures[0].check == "compare", v.human()


@needs_gxx
def test_cpu_build_cache_keys_on_headers_included_verbatim(project, tmp_path):
    from astra_cuda.backends.cpu import unit_build
    project("inc/h.h", "#define VALUE 1\n")
    src = '#include "h.h"\n__global__ void k(int* o) { o[0] = VALUE; }\n'
    opts = [f"-I{project.root / 'inc'}"]
    first = unit_build.compile_module(src, ["k"], str(project.root / "k.cu"), opts, "")
    project("inc/h.h", "#define VALUE 2\n")
    second = unit_build.compile_module(src, ["k"], str(project.root / "k.cu"), opts, "")
    assert first != second
    assert extract.header_digest(src, str(project.root / "k.cu"), opts) != ""


def test_header_digest_follows_nested_includes(project):
    project("a.h", '#include "b.h"\n')
    project("b.h", "#define B 1\n")
    f = project("k.cu", '#include "a.h"\n')
    before = extract.header_digest(f.read_text(), str(f), [])
    project("b.h", "#define B 2\n")
    assert extract.header_digest(f.read_text(), str(f), []) != before


# ---- where the context comes from ---------------------------------------------------------------

def angle_project(project):
    project("include/proj/common.h", COMMON_H)
    return project("src/k.cu", dev_file(include="#include <proj/common.h>\n"))


def test_without_include_paths_a_header_on_the_project_path_is_missing(project):
    f = angle_project(project)
    report = api.static_check(api.snapshot(f.read_text(), str(f), project_ctx(None)))
    assert any(d.severity == "error" for d in report.diagnostics)


def project_ctx(include):
    return proj.ProjectContext() if include is None else proj.from_flags([include], origin="command line")


def test_include_path_from_the_command_line(project):
    f = angle_project(project)
    ctx = api.project_context(str(f), cli=proj.from_flags([str(project.root / "include")], ["EXTRA=3"], "c++17",
                                                            origin="command line"))
    report = api.static_check(api.snapshot(f.read_text(), str(f), ctx))
    assert not [d for d in report.diagnostics if d.severity == "error"], report.diagnostics
    assert ctx.options() == [f"-I{project.root / 'include'}", "-DEXTRA=3", "-std=c++17"]
    assert "from command line" in report.to_json()["project"]


def test_compile_commands_json_under_build_is_found_and_used(project):
    f = angle_project(project)
    project("build/compile_commands.json", json.dumps([
        {"directory": str(project.root / "build"), "file": "../src/k.cu",
         "command": "nvcc -I../include -isystem /opt/none -DUSE_X=1 -std=c++17 --use_fast_math -O3 -c ../src/k.cu"}]))
    ctx = api.project_context(str(f))
    assert ctx.include_dirs == (str(project.root / "include"),)
    assert ctx.defines == (("USE_X", "1"),) and ctx.std == "c++17" and ctx.flags == ("--use_fast_math",)
    assert "-O3" in ctx.ignored and "its entry" in ctx.describe()
    report = api.static_check(api.snapshot(f.read_text(), str(f), ctx))
    assert not [d for d in report.diagnostics if d.severity == "error"], report.diagnostics


def test_relative_directory_in_compile_commands_is_taken_from_its_folder(project):
    f = angle_project(project)
    db = project("compile_commands.json", json.dumps([
        {"directory": ".", "file": "src/other.cu", "arguments": ["nvcc", "-I", "include", "-c", "src/other.cu"]}]))
    ctx = proj.from_compile_commands(db, str(f))
    assert ctx.include_dirs == (str(project.root / "include"),) and "same folder" in ctx.origin[0]


def test_command_line_comes_before_settings_before_compile_commands(project):
    f = angle_project(project)
    project("compile_commands.json", json.dumps([
        {"directory": str(project.root), "file": "src/k.cu", "arguments": ["nvcc", "-Idb", "-DMODE=db", "-std=c++14"]}]))
    cli = proj.from_flags(["cli"], ["MODE=cli"], origin="command line", base=str(project.root))
    settings, cc = Settings(include_paths=("set",), defines=("MODE=set", "ONLY_SET"), std="c++20").project(
        str(project.root))
    ctx = api.project_context(str(f), cli=cli, settings=settings)
    assert ctx.include_dirs == tuple(str(project.root / d) for d in ("cli", "set", "db"))
    assert ctx.defines == (("MODE", "cli"), ("ONLY_SET", None)) and ctx.std == "c++20"
    assert cc is None


def test_bad_project_input_is_a_clear_error(project):
    f = angle_project(project)
    bad = project("compile_commands.json", "{not json")
    with pytest.raises(AstraError, match="not a readable compile_commands.json"):
        api.project_context(str(f))
    with pytest.raises(AstraError, match="compile_commands.json not found"):
        api.project_context(str(f), compile_commands=str(bad) + ".missing")
    with pytest.raises(AstraError, match="bad macro definition"):
        proj.from_flags([], ["1X=2"], origin="command line")
    with pytest.raises(AstraError, match="unsupported language standard"):
        proj.from_flags([], [], "c++98", origin="settings")


def test_settings_accept_the_project_keys_and_report_bad_ones():
    s, problems = Settings().updated({"includePaths": ["include", " "], "defines": ["A=1", "B"], "std": "c++20",
                                      "compileCommands": "build/compile_commands.json"})
    assert (s.include_paths, s.defines, s.std, s.compile_commands) == (
        ("include",), ("A=1", "B"), "c++20", "build/compile_commands.json") and not problems
    s, problems = Settings().updated({"includePaths": "include", "defines": ["1A"], "std": "c++98"})
    assert len(problems) == 3 and s.include_paths == ()


def test_cli_flags_reach_the_static_check(project, capsys):
    from astra_cuda import cli
    f = angle_project(project)
    assert cli.main(["check", str(f), "--backend", "static"]) == 1
    assert cli.main(["check", str(f), "--backend", "static", "-I", str(project.root / "include"), "-D", "Z=1",
                     "--std", "c++17"]) == 0
    out = capsys.readouterr().out
    assert f"project: include {project.root / 'include'}; defines Z=1; -std=c++17 (from command line)" in out


def test_nvrtc_options_carry_the_context(project):
    f = angle_project(project)
    ctx = proj.from_flags([str(project.root / "include")], ["A"], "c++20", origin="command line")
    u = extract.unit(f.read_text(), str(f), "scale", context=ctx)
    opts = static.nvrtc_options(u, "sm_90")
    assert "-std=c++20" in opts and "-std=c++17" not in opts and "-DA" in opts
    assert f"-I{project.root / 'include'}" in opts

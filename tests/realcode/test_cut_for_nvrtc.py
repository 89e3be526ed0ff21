"""Issue 24: what the cut writes for NVRTC alone (`compile/for_nvrtc.py`, `cut.LIBRARY_NAMESPACES`),
the compiler where no CUDA toolkit is installed — and that it never changes what the code means.
Each file is small and written here; the public code each pattern comes from is named."""
import pytest

from astra_cuda.compile import extract, static, toolkit

from .conftest import needs_gxx

pytestmark = needs_gxx
needs_nvrtc = pytest.mark.skipif(static._nvrtc() is None, reason="needs NVRTC (nvidia-cuda-nvrtc)")


@pytest.fixture(autouse=True)
def no_toolkit(monkeypatch):
    monkeypatch.setenv(toolkit.TOOLKIT_ENV, "none")   # the unit as the NVRTC path cuts it


def _unit(project, files, kernel="k"):
    for rel, text in files.items():
        f = project(rel, text)
    f = project.root / "k.cu"
    return extract.unit(f.read_text(), str(f), kernel)


def _rtc_part(source: str, marker: str) -> str:
    """The `#if defined(__CUDACC_RTC__)` branch that contains `marker`."""
    at = source.index(marker)
    return source[source.rindex("#if defined(__CUDACC_RTC__)", 0, at):source.index("#e", at)]


# FlashInfer fastdiv.cuh: a host-only constructor beside a host-device one
DIVISOR = ("struct Divisor {\n  __host__ __device__ Divisor() : d(1) {}\n  __host__ Divisor(int v) : d(v ? v : 1) {}\n"
           "  __host__ Divisor(const Divisor& o) : d(o.d) {}\n  __host__ ~Divisor() {}\n"
           "  __host__ Divisor& operator=(const Divisor& o) { d = o.d; return *this; }\n"
           "  constexpr int twice() const { return 2 * d; }\n"
           "  template <class T> __host__ T as() const { return T(d); }\n  void print() const {}\n"
           "  __device__ int get() const { return d; }\n  int d;\n};\n")


def test_host_only_members_are_deleted_declarations_for_nvrtc_alone(project):
    u = _unit(project, {"k.cu": DIVISOR + "__global__ void k(int* o) { Divisor q; o[0] = q.get(); }\n"})
    # a constructor is explicit too: never an aggregate under C++17, where a deleted one would not count
    assert "explicit          Divisor(int v) = delete;" in _rtc_part(u.source, "Divisor(int v) = delete")
    assert "template <class T>          T as() const = delete;" in u.source
    assert "void print() const = delete;" in u.source
    # what a deletion would change the type by — copying, destruction — and constexpr stay as written
    for kept in ("__host__ Divisor(const Divisor& o)", "__host__ ~Divisor()", "__host__ Divisor& operator=",
                 "constexpr int twice() const { return 2 * d; }"):
        assert kept in u.source and "= delete" not in u.source[u.source.index(kept):u.source.index("\n", u.source.index(kept))]
    # nvcc (the cut check) and the CPU build read every member as written
    assert "#else\n" in u.source and "  __host__ Divisor(int v) : d(v ? v : 1) {}" in u.source


@needs_nvrtc
def test_device_code_that_calls_a_host_only_member_is_still_an_error(project):
    ok = "struct P {\n  __host__ __device__ P() : d(1) {}\n  __host__ P(int v) : d(v) {}\n  int d;\n};\n"
    fine = _unit(project, {"k.cu": ok + "__global__ void k(int* o) { P p; o[0] = p.d; }\n"})
    assert static.compile_unit(fine).ok
    # a struct whose only constructor is host-only: C++17 would take a deleted one for an aggregate's
    only = "struct P {\n  int d;\n  __host__ P(int v) : d(v) {}\n};\n"
    for struct, call in ((ok, "P p(3);"), (ok, "P p{3};"), (only, "P p{3};"), (only, "P p = {3};")):
        # nvcc: a host function called from device code
        u = _unit(project, {"k.cu": struct + f"__global__ void k(int* o) {{ {call} o[0] = p.d; }}\n"})
        r = static.compile_unit(u)
        assert not r.ok and r.compiler.startswith("NVRTC"), (call, r.log)


def test_cub_is_left_out_for_nvrtc_only_where_kept_code_never_names_it(project):
    common = "#pragma once\n#include <cub/cub.cuh>\n"
    unused = _unit(project, {"common.cuh": common,
                             "k.cu": '#include "common.cuh"\n__global__ void k(float* o) { o[0] = 1.f; }\n'})
    assert "#if !defined(__CUDACC_RTC__)\n" in unused.source and "#include <cub/cub.cuh>" in unused.source
    for body in ("typedef cub::BlockReduce<float, 32> R; __shared__ typename R::TempStorage t; "
                 "o[0] = R(t).Sum(1.f);",):
        used = _unit(project, {"common.cuh": common,
                               "k.cu": '#include "common.cuh"\n__global__ void k(float* o) { ' + body + " }\n"})
        assert "#include <cub/cub.cuh>" in used.source and "#if !defined(__CUDACC_RTC__)" not in used.source
    # named through a `using namespace` (vLLM's norms) counts too
    using = _unit(project, {"common.cuh": common, "k.cu": '#include "common.cuh"\nusing namespace cub;\n'
                            "__global__ void k(float* o) { typedef BlockReduce<float, 32> R; o[0] = 1.f; }\n"})
    assert "#if !defined(__CUDACC_RTC__)" not in using.source


def test_host_library_names_come_only_where_kept_code_names_them(project):
    # FlashInfer math.cuh names `uint`; DeepSpeed gelu.cu `std::conditional`; nvcc gets both from the host's headers
    u = _unit(project, {"k.cu": "#include <cstdint>\n__global__ void k(float* o) { uint u = 2u; int64_t w = 1; "
                                "o[0] = (std::conditional<true, float, double>::type)(u + w); }\n"})
    part = _rtc_part(u.source, "typedef unsigned int uint;")
    assert "#include <type_traits>" in part
    assert "int64_t" not in part   # NVRTC's prelude declares it (<cstdint>), spelled its own way
    plain = _unit(project, {"k.cu": "__global__ void k(float* o) { o[0] = 1.f; }\n"})
    assert "typedef unsigned int uint;" not in plain.source and "#include <type_traits>" not in plain.source
    # a project that declares the name itself keeps its own
    own = _unit(project, {"k.cu": "namespace my { typedef unsigned uint; }\nusing my::uint;\n"
                                  "__global__ void k(float* o) { uint u = 2u; o[0] = u; }\n"})
    assert "typedef unsigned int uint;" not in own.source


@needs_nvrtc
def test_the_host_library_names_compile_with_nvrtc(project):
    u = _unit(project, {"k.cu": "__global__ void k(float* o) { ushort s = 1; uint u = 2u; "
                                "o[0] = (std::conditional<true, float, double>::type)(s + u); }\n"})
    r = static.compile_unit(u)
    assert r.ok and r.compiler.startswith("NVRTC"), r.log

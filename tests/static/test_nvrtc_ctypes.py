"""NVRTC's C API through ctypes (compile/nvrtc.py): what static.py relies on from it."""
import pytest

from astra_cuda.compile import nvrtc

pytestmark = pytest.mark.skipif(nvrtc.version() is None, reason="no libnvrtc here")

TEMPLATE = "template <int N> __global__ void fill(float* x) { x[threadIdx.x] = N; }\n"


def test_version_reads_major_and_minor():
    major, _, minor = nvrtc.version().partition(".")
    assert int(major) >= 12 and minor.isdigit()


def test_a_compiled_program_gives_lowered_names_and_ptx():
    done = nvrtc.compile_program(TEMPLATE, "fill.cu", ["-arch=compute_90"], ("fill<3>", "fill<7>"), want_ptx=True)
    assert done.ok
    assert done.lowered == {"fill<3>": "_Z4fillILi3EEvPf", "fill<7>": "_Z4fillILi7EEvPf"}
    assert ".entry _Z4fillILi3EEvPf" in done.ptx and "\0" not in done.ptx


def test_a_failed_compile_says_where_and_gives_no_names():
    done = nvrtc.compile_program("__global__ void k(float* x) { x[0] = missing; }\n", "bad.cu",
                                 ["-arch=sm_90"], ("k",))
    assert not done.ok and done.lowered == {} and done.ptx == ""
    assert 'bad.cu(1): error: identifier "missing" is undefined' in done.log


def test_ptxas_output_comes_whole_in_the_log():
    # static.py reads resources (registers, shared memory) from the ptxas lines of the log
    done = nvrtc.compile_program(TEMPLATE, "fill.cu", ["-arch=sm_90", "--ptxas-options=-v"], ("fill<3>",))
    assert done.ok and "ptxas info" in done.log and "Used" in done.log and "\0" not in done.log


def test_bad_options_are_a_failed_compile_not_a_crash():
    done = nvrtc.compile_program(TEMPLATE, "fill.cu", ["--no-such-option"])
    assert not done.ok and "no-such-option" in done.log

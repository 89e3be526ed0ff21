"""The constructor program on the GPU's path (issue 25, item 6), without a GPU: nvcc builds the
unit with Astra's `main` (`compile.hostprog.build_nvcc`, the project's flags, confined) and the
program runs confined (`hostprog.run`): the bytes of FlashInfer's `uint_fastdiv`-like divisor as
nvcc's host compiler lays the class out — the GPU backend passes exactly these — and nothing of
the machine beyond its own folder readable, no environment."""
from pathlib import Path

import numpy as np
import pytest

from astra_cuda.compile import hostprog, toolkit
from astra_cuda.compile.project import ProjectContext
from astra_cuda.model import construct, layout

TK = toolkit.find()
pytestmark = pytest.mark.skipif(TK is None, reason="no CUDA toolkit (nvcc) here")

FILE = Path(__file__).parents[1] / "cpu" / "constructed_fastdiv.cu"


def test_nvcc_builds_the_constructor_program_and_it_prints_the_objects_bytes(tmp_path):
    path = tmp_path / "fd.cu"
    path.write_text(FILE.read_text())
    main = construct.program("row_of", [construct.Target(1, "", "fastdiv(2 * rows + 1)")], ["rows"], layout.HELPERS)
    exe = hostprog.build_nvcc(FILE.read_text(), main, str(path), ProjectContext(), TK, "sm_90")
    (b,) = construct.parse_output(hostprog.run(exe, ["3"]), 1)
    d, m, s = np.frombuffer(b, dtype=np.uint32)
    assert (d, s) == (7, 3) and m == ((1 << 32) * (8 - 7)) // 7 + 1
    assert hostprog.build_nvcc(FILE.read_text(), main, str(path), ProjectContext(), TK, "sm_90") == exe   # kept


def test_the_program_runs_confined(tmp_path):
    """A program that looks around: /etc/passwd, the project's folder and the cache it was built in
    unreadable (it runs as a copy in a folder of its own), no environment but what a compiler gets,
    nothing written outside its own folder."""
    path = tmp_path / "peek.cu"
    path.write_text("")
    main = r"""
#include <cstdio>
#include <cstdlib>
int main(int argc, char** argv) {
  std::printf("%d %d %d %d %d\n", std::fopen("/etc/passwd", "r") != 0, std::getenv("HOME") != 0,
              std::fopen("/tmp/astra-hostprog-escape", "w") != 0, std::fopen(__FILE__, "r") != 0,
              argc > 1 && std::fopen(argv[1], "r") != 0);
  return 0;
}
"""
    exe = hostprog.build_nvcc("", main, str(path), ProjectContext(), TK, "sm_90")
    assert hostprog.run(exe, [str(exe)]).split() == ["0", "0", "0", "0", "0"]


SHAPE = """\
// The pattern of CUTLASS's examples/cute/tutorial/sgemm_1.cu gemm_device: the problem's shape, a
// tuple class passed by value as a template parameter, made on the host by a factory function.
template <class A, class B, class C> struct tup { A a; B b; C c; };
template <class A, class B, class C> __host__ __device__ tup<A, B, C> make_tup(A a, B b, C c) { return {a, b, c}; }
template <class Shape> __global__ void gemm(Shape shape_MNK, float* out) { out[0] = shape_MNK.a + shape_MNK.c; }
"""


def test_a_template_parameters_object_made_by_a_factory(tmp_path):
    path = tmp_path / "shape.cu"
    path.write_text(SHAPE)
    main = construct.program("gemm<tup<int, int, int> >", [construct.Target(0, "", "make_tup(M, N, K)")],
                             ["K", "M", "N"], layout.HELPERS)
    exe = hostprog.build_nvcc(SHAPE, main, str(path), ProjectContext(), TK, "sm_90")
    (b,) = construct.parse_output(hostprog.run(exe, ["8", "128", "96"]), 1)
    assert np.frombuffer(b, dtype=np.int32).tolist() == [128, 96, 8]


def test_the_constructor_program_links_with_the_units_layout_probe(tmp_path):
    """The GPU backend builds the program from the unit as compiled, the layout probe of a struct
    parameter appended (`layout.probe`): its `__device__` arrays must link on nvcc's host pass too
    (`extern "C" __device__ T a[] = …` left the host's shadow undefined on an H200)."""
    path = tmp_path / "fd.cu"
    text = FILE.read_text()
    path.write_text(text)
    probe = layout.probe("row_of", {1: ("d",)})
    main = construct.program("row_of", [construct.Target(1, "", "fastdiv(2 * rows + 1)")], ["rows"], "")
    exe = hostprog.build_nvcc(text + probe, main, str(path), ProjectContext(), TK, "sm_90")
    (b,) = construct.parse_output(hostprog.run(exe, ["3"]), 1)
    assert np.frombuffer(b, dtype=np.uint32)[0] == 7

"""A kernel parameter named like a CUDA built-in variable shadows it, as C++ scoping has it (TGI's
`forward_masked_softmax_kernel(..., const dim3 blockDim, ...)`): the CPU shim defines the built-ins
as macros, so the parameter is renamed within its own function — the kernel reads the dim3 it was
given, and a helper without such a parameter still reads the launch's block."""
import numpy as np
import pytest

from astra_cuda.backends.base import Launch, Packed
from astra_cuda.backends.cpu import screen

from cpu_helpers import i32, unit

SRC = """
__device__ unsigned launch_block() { return blockDim.x; }
__global__ void k(unsigned* out, const dim3 blockDim, int warpSize) {
  const unsigned i = threadIdx.x;
  out[i] = blockDim.x * 1000 + blockDim.y * 100 + warpSize * 10 + launch_block() % 10;
}
"""


def test_a_parameter_shadowing_a_builtin_is_the_parameter(cpu):
    m = cpu.compile(unit(SRC), ["k"], filename="user.cu")
    out = cpu.upload(np.zeros(4, np.uint32))
    cpu.launch(m, "k", Launch((1, 1, 1), (4, 1, 1)), [out, Packed(np.array([7, 3, 1], np.uint32).tobytes()), i32(2)])
    assert cpu.download(out).tolist() == [7000 + 300 + 20 + 4] * 4   # the given dim3 and int, the launch's block


@pytest.mark.parametrize("text,renamed", [
    ("__global__ void k(dim3 blockDim) { f(blockDim.x); }", "__global__ void k(dim3 astra_param_blockDim) "
                                                            "{ f(astra_param_blockDim.x); }"),
    ("__global__ void k(int n) { f(blockDim.x, n); }", "__global__ void k(int n) { f(blockDim.x, n); }"),
    # a built-in as a parameter's default value is read, not declared: nothing shadows it
    ("__device__ int g(int v, int width = warpSize) { return v % width + warpSize; }",
     "__device__ int g(int v, int width = warpSize) { return v % width + warpSize; }"),
])
def test_only_the_shadowing_functions_names_are_renamed(text, renamed):
    assert screen.unshadowed(text) == renamed

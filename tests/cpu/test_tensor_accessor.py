"""Tensor accessors passed by value on the CPU backend (issue 25): TGI's
`forward_masked_softmax_kernel` takes `torch::PackedTensorAccessor32<scalar_t, 2,
torch::RestrictPtrTraits>` parameters. torch's own class (the installed headers) is laid out by the
compiler, the layout probe reads where its pointer, sizes and strides lie, the gate writes them
(`checks.launch_args`) and the kernel indexes the buffers it was given — values checked against
NumPy, and in the AddressSanitizer build. Skipped where torch's headers are not installed."""
import numpy as np
import pytest

from astra_cuda.backends.base import Launch
from astra_cuda.compile import torch_ext
from astra_cuda.gate import checks
from astra_cuda.model import layout, source, spec

from cpu_helpers import unit

pytestmark = pytest.mark.skipif(not torch_ext.installed_include_dirs(), reason="torch's headers are not installed")

# a 32-bit 2-D accessor read, a 64-bit 3-D one written (as the cut unit of a torch extension includes torch)
SRC = """#include <astra_torch_device.h>
/* @astra
grid = ["rows"]
block = [32]
[sizes]
rows = [3]
cols = [37]
[args]
x    = { type = "float", shape = ["rows", "cols"], accessor = true }
mask = { type = "bool", shape = ["rows", "cols"], accessor = true }
out  = { type = "float", shape = ["rows", "cols", 2], output = true, accessor = true }
cols = "cols"
*/
__global__ void k(const torch::PackedTensorAccessor32<float, 2, torch::RestrictPtrTraits> x,
                  const at::PackedTensorAccessor32<bool, 2, at::RestrictPtrTraits> mask,
                  torch::PackedTensorAccessor64<float, 3, torch::RestrictPtrTraits> out, int cols) {
  const int r = blockIdx.x;
  for (int c = threadIdx.x; c < cols; c += blockDim.x)
    for (int j = 0; j < 2; j++) out[r][c][j] = mask[r][c] ? 0.f : x[r][c] * (j + 1);
}
"""


@pytest.mark.parametrize("sanitize", [False, True])
def test_the_kernel_reads_and_writes_through_accessors_the_gate_built(cpu, sanitize):
    model = source.parse(SRC)
    s = spec.load(model.kernel("k"), model)
    params = ["x", "mask", "out", "cols"]
    assert layout.accessors(s, params) == [0, 1, 2]
    probe = layout.probe("k", {}, {}, layout.accessors(s, params))
    m = cpu.compile(unit(SRC) + probe, ["k"], filename="user.cu", sanitize=sanitize)
    lay = {n: layout.parse_accessor(cpu.read_global(m, layout.accessor_symbol(i), 8 * layout.ACCESSOR_WORDS))
           for i, n in enumerate(params[:3])}
    # torch's layout as the compiler has it: the pointer, then the sizes, then the strides
    assert (lay["x"].size, lay["x"].data, lay["x"].sizes, lay["x"].strides, lay["x"].index) == (24, 0, 8, 16, 4)
    assert (lay["mask"].elem, lay["mask"].dims) == (1, 2)
    assert (lay["out"].size, lay["out"].sizes, lay["out"].strides, lay["out"].dims, lay["out"].index) == (56, 8, 32, 3, 8)
    rows, cols = 3, 37
    rng = np.random.default_rng(0)
    x, mask = rng.standard_normal((rows, cols)).astype(np.float32), rng.random((rows, cols)) < 0.3
    bufs = {"x": cpu.upload(x), "mask": cpu.upload(mask), "out": cpu.upload(np.full((rows, cols, 2), np.nan, np.float32))}
    args = checks.launch_args(s, bufs, {"rows": rows, "cols": cols}, {**lay, "cols": "int"})
    cpu.launch(m, "k", Launch((rows, 1, 1), (32, 1, 1)), args)
    want = np.where(mask, 0.0, x)[..., None] * np.array([1, 2], np.float32)
    np.testing.assert_array_equal(cpu.download(bufs["out"]), want)

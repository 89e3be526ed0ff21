"""Spec format growth (issue 25): a tensor accessor passed by value — TGI's
`forward_masked_softmax_kernel` takes `torch::PackedTensorAccessor32<scalar_t, 2,
torch::RestrictPtrTraits>` parameters, as most torch extensions do — is a buffer with
`accessor = true`; each problem at its key; the object's bytes are torch's layout as the layout
probe reads it (a pointer, then N sizes, then N strides)."""
import numpy as np
import pytest

from astra_cuda.backends.base import Buffer, LaunchError, Packed
from astra_cuda.gate import checks
from astra_cuda.model import layout, source, spec

KERNEL = """template <typename T>
__global__ void k(const torch::PackedTensorAccessor32<T, 2, torch::RestrictPtrTraits> x,
                  torch::PackedTensorAccessor32<T, 2, torch::RestrictPtrTraits> out, const float* w, int n) {}
"""
GOOD = '''grid = ["rows"]
block = [32]
instantiate = "<float>"
[sizes]
rows = [1, 5]
n = [3, 40]
[args]
x   = { type = "float", shape = ["rows", "n"], accessor = true }
out = { type = "float", shape = ["rows", "n"], output = true, accessor = true }
w   = { type = "float", shape = ["n"] }
n   = "n"
'''


def load(body: str):
    text = f"/* @astra\n{body}*/\n{KERNEL}"
    m = source.parse(text)
    return spec.load(m.kernel("k"), m)


def error_of(body: str):
    text = f"/* @astra\n{body}*/\n{KERNEL}"
    with pytest.raises(spec.SpecErrors) as e:
        load(body)
    d = e.value.diagnostics[0]
    return d, text.splitlines()[d.line][d.col:d.end_col]


def test_an_accessor_is_a_buffer_the_harness_wraps():
    s = load(GOOD)
    x, out = s.args["x"], s.args["out"]
    assert x.accessor and x.pointer and x.param and x.is_input and s.shape("x", {"rows": 5, "n": 3}) == (5, 3)
    assert out.accessor and out.written and not s.args["w"].accessor
    assert s.bytes_moved({"rows": 5, "n": 3}) == 4 * 15 * 2 + 4 * 3
    assert layout.accessors(s, ["x", "out", "w", "n"]) == [0, 1]


@pytest.mark.parametrize("old,new,message,at", [
    # a by-value parameter given a buffer without saying it is an accessor: named, with the key to add
    ('x   = { type = "float", shape = ["rows", "n"], accessor = true }',
     'x   = { type = "float", shape = ["rows", "n"] }', "add `accessor = true`", "x"),
    ('x   = { type = "float", shape = ["rows", "n"], accessor = true }',
     'x   = { type = "float", shape = ["rows", "n"], accessor = 1 }', "is true or left out", "1"),
    ('x   = { type = "float", shape = ["rows", "n"], accessor = true }',
     'x   = { type = "float", accessor = true }', "`shape` must be", "x"),
    ('x   = { type = "float", shape = ["rows", "n"], accessor = true }',
     'x   = { type = "float", shape = ["rows", "n"], accessor = true, table = 2 }', "not to a table", "table"),
    ('x   = { type = "float", shape = ["rows", "n"], accessor = true }',
     'x   = { type = "float", shape = ["rows", "n"], output = true, accessor = true }', "is const", "x"),
    ('w   = { type = "float", shape = ["n"] }', 'w   = { type = "float", shape = ["n"], accessor = true }',
     "is a pointer", "accessor"),
])
def test_each_problem_at_its_place(old, new, message, at):
    assert old in GOOD
    d, where = error_of(GOOD.replace(old, new))
    assert message in d.message, d.message
    assert where == at, (where, d.message)


class _Buf(Buffer):
    def __init__(self, nbytes):
        self.nbytes, self.dtype, self.shape = nbytes, "float32", (nbytes // 4,)


def _raw(*words):
    return b"".join(int(w).to_bytes(8, "little") for w in words)


# what nvcc 13.0 lays out for PackedTensorAccessor32<float, 2, RestrictPtrTraits> (sm_90, torch 2.14):
# 24 bytes, the pointer at 0, int32 sizes at 8, int32 strides at 16 (read from a device-compiled probe)
TORCH_32_2D = _raw(24, 0, 8, 4, 8, 8, 16, 8, 4, 1)


def _packed(s, buf, sizes, lay):
    """The kernel's first argument (`x`) as the gate assembles it."""
    bufs = {n: buf for n, a in s.args.items() if a.pointer}
    types = {"x": lay, "out": layout.parse_accessor(TORCH_32_2D), "n": "int"}
    return checks.launch_args(s, bufs, sizes, types)[0]


def test_the_object_is_written_where_the_probe_says():
    s = load(GOOD)
    lay = layout.parse_accessor(TORCH_32_2D)
    assert (lay.size, lay.data, lay.sizes, lay.strides, lay.dims, lay.index, lay.signed) == (24, 0, 8, 16, 2, 4, True)
    buf = _Buf(4 * 5 * 40)
    p = _packed(s, buf, {"rows": 5, "n": 40}, lay)
    assert isinstance(p, Packed) and not p.in_memory and p.pointers == ((0, buf, 0),)
    assert np.frombuffer(p.data[8:], dtype=np.int32).tolist() == [5, 40, 40, 1]   # sizes, then row-major strides
    # a 64-bit accessor of 3 dimensions laid out elsewhere: its sizes and strides go where it says
    lay3 = layout.parse_accessor(_raw(64, 8, 8, 4, 16, 24, 40, 24, 8, 1))
    s3 = load(GOOD.replace('shape = ["rows", "n"], accessor', 'shape = ["rows", "n", 2], accessor', 1))
    p3 = _packed(s3, buf, {"rows": 5, "n": 4}, lay3)
    assert p3.pointers == ((8, buf, 0),) and np.frombuffer(p3.data[16:64], np.int64).tolist() == [5, 4, 2, 8, 2, 1]


def test_what_does_not_fit_the_accessor_is_refused():
    s, lay = load(GOOD), layout.parse_accessor(TORCH_32_2D)
    with pytest.raises(LaunchError, match="2 dimensions, but its shape has 3"):
        s3 = load(GOOD.replace('shape = ["rows", "n"], accessor', 'shape = ["rows", "n", 2], accessor', 1))
        _packed(s3, _Buf(4), {"rows": 1, "n": 1}, lay)
    with pytest.raises(LaunchError, match="elements of 1 bytes"):
        _packed(s, _Buf(4), {"rows": 1, "n": 1}, layout.parse_accessor(
            _raw(24, 0, 8, 1, 8, 8, 16, 8, 4, 1)))
    with pytest.raises(LaunchError, match="32-bit indices"):
        _packed(s, _Buf(4), {"rows": 1 << 16, "n": 1 << 15}, lay)
    with pytest.raises(ValueError, match="not a tensor accessor"):   # sizes and strides of unequal lengths
        layout.parse_accessor(_raw(32, 0, 8, 4, 8, 12, 20, 8, 4, 1))

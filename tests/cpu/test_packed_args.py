"""Arguments Astra assembles (issue 25, item 6): a struct passed by value with the addresses of
buffers in its pointer fields, a table of device pointers — written by the executor inside the
process that runs the launch (addresses exist nowhere else), checked against the copies the
AddressSanitizer build makes, and refused when a relocation points outside its argument."""
import numpy as np
import pytest
from cpu_helpers import unit

from astra_cuda.model import layout
from astra_cuda.backends.base import Launch, LaunchError, Packed

SRC = """
struct Inner { int n; double scale; };
struct Params { char tag; float* out; const float* inp; Inner in; long long pad[3]; };
__global__ void k(Params p, const float* const* t) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < p.in.n) p.out[i] = (float)p.in.scale * p.inp[i] + t[0][i] + t[2][i] + p.pad[1];
}
"""
FIELDS = ("out", "inp", "in.n", "in.scale", "pad[1]")


def _build(cpu, sanitize=False):
    probe = layout.probe("k", {0: FIELDS})
    m = cpu.compile(unit(SRC) + probe, ["k"], filename="user.cu", sanitize=sanitize)
    lay = layout.parse(cpu.read_global(m, layout.symbol(0), 8 * layout.words(FIELDS)), FIELDS)
    return m, lay


def _struct(lay, out, inp, n, scale, pad):
    data = bytearray(lay.size)
    f = lay.fields
    data[f["in.n"].offset:f["in.n"].offset + 4] = np.int32(n).tobytes()
    data[f["in.scale"].offset:f["in.scale"].offset + 8] = np.float64(scale).tobytes()
    data[f["pad[1]"].offset:f["pad[1]"].offset + 8] = np.int64(pad).tobytes()
    return Packed(bytes(data), ((f["out"].offset, out, 0), (f["inp"].offset, inp, 0)))


def test_the_layout_is_the_compilers(cpu):
    _, lay = _build(cpu)
    f = lay.fields
    assert lay.size == 64
    assert (f["out"].offset, f["out"].kind, f["out"].elem) == (8, "pointer", 4)
    assert (f["in.n"].offset, f["in.n"].kind, f["in.n"].size) == (24, "integer", 4)
    assert (f["in.scale"].offset, f["in.scale"].kind) == (32, "floating")
    assert (f["pad[1]"].offset, f["pad[1]"].size) == (48, 8)


@pytest.mark.parametrize("sanitize", [False, True])
def test_a_struct_and_a_table_reach_their_buffers(cpu, sanitize):
    m, lay = _build(cpu, sanitize)
    n = 300
    rng = np.random.default_rng(1)
    inp, rows = rng.standard_normal(n).astype(np.float32), rng.standard_normal((3, n)).astype(np.float32)
    out, b_in, b_rows = cpu.upload(np.zeros(n, np.float32)), cpu.upload(inp), cpu.upload(rows)
    table = Packed(bytes(24), tuple((8 * i, b_rows, 4 * n * i) for i in range(3)), in_memory=True)
    cpu.launch(m, "k", Launch((2, 1, 1), (256, 1, 1)), [_struct(lay, out, b_in, n, 2.5, 7), table])
    want = 2.5 * inp + rows[0] + rows[2] + 7
    np.testing.assert_allclose(cpu.download(out), want, rtol=1e-6)
    np.testing.assert_array_equal(cpu.download(b_rows), rows)   # the table's rows are untouched


def test_a_relocation_outside_its_argument_is_refused(cpu, monkeypatch):
    m, lay = _build(cpu)
    out, inp = cpu.upload(np.zeros(4, np.float32)), cpu.upload(np.zeros(4, np.float32))
    table = Packed(bytes(8), ((0, inp, 0),), in_memory=True)
    struct = _struct(lay, out, inp, 4, 1.0, 0)
    bad = Packed(struct.data, ((lay.size - 4, out, 0),))       # 8 bytes written at 4 before the end
    with pytest.raises(LaunchError, match="malformed"):
        cpu.launch(m, "k", Launch((1, 1, 1), (4, 1, 1)), [bad, table])
    past = Packed(struct.data, ((8, out, out.nbytes + 1),))    # an address past the buffer's end
    with pytest.raises(LaunchError, match="malformed"):
        cpu.launch(m, "k", Launch((1, 1, 1), (4, 1, 1)), [past, table])


def test_a_struct_of_the_wrong_size_is_refused(cpu):
    m, lay = _build(cpu)
    out = cpu.upload(np.zeros(4, np.float32))
    table = Packed(bytes(8), ((0, out, 0),), in_memory=True)
    with pytest.raises(LaunchError, match="bytes"):
        cpu.launch(m, "k", Launch((1, 1, 1), (4, 1, 1)), [Packed(bytes(lay.size - 8)), table])


def test_a_field_that_is_not_there_names_itself(cpu):
    from astra_cuda.backends.base import CompileError
    with pytest.raises(CompileError, match="nope"):
        cpu.compile(unit(SRC) + layout.probe("k", {0: ("in.nope",)}), ["k"], filename="user.cu")


def test_field_paths_are_checked_before_they_reach_cpp():
    for bad in ("a;b", "x[1]]", "1x", "a.b(c)", "a..b", "a[1][2][3][4]", "a[1]b"):
        with pytest.raises(ValueError):
            layout.probe("k", {0: (bad,)})


GATED = """struct Dims { int n; float scale; };
struct Params { const float* x; float* y; Dims d; };
/* @astra
grid = ["cdiv(n, 128)"]
block = [128]
[sizes]
n = [1, 300]
[args]
p.x = { type = "float", shape = ["n"] }
p.y = { type = "float", shape = ["n"], output = true }
p.d.n = "n"
p.d.scale = 2.5
t = { type = "float", shape = ["n"], table = 3 }
*/
__global__ void k(Params p, const float* const* t) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < p.d.n) p.y[i] = p.d.scale * p.x[i] + t[0][i] + t[2][i];
}
"""


@pytest.mark.parametrize("old,new,verdict", [("", "", "passed"),
                                             ("p.d.scale * p.x[i]", "2.0f * p.x[i]", "compare")])
def test_the_gate_checks_a_kernel_given_a_struct_and_a_table(cpu, tmp_path, old, new, verdict):
    from astra_cuda.compile import extract
    from astra_cuda import gate
    from astra_cuda.model import source, spec as spec_mod
    path = str(tmp_path / "s.cu")

    def unit_of(text):
        model = source.parse(text)
        s = spec_mod.load(model.kernel("k"), model)
        return extract.spec_unit(model, path, "k", s), s

    ref, s = unit_of(GATED)
    cand, _ = unit_of(GATED.replace(old, new) if old else GATED)
    v = gate.check(ref, cand, s, cpu, quick=True)
    if verdict == "passed":
        assert v.passed and v.compared, v.human()
    else:
        assert v.status == "failed" and v.failures[0].check == verdict, v.human()


NULLABLE = """
__global__ void k(float* out, const float* bias, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = bias != nullptr ? bias[i] : 1.0f;
}
"""


def test_a_pointer_parameter_takes_a_null_value_and_no_other(cpu):
    """The spec's `bias = "null"` is 8 zero bytes where a pointer goes; any other value there is
    still refused (a value never becomes an address the kernel reaches)."""
    from astra_cuda.backends.base import Scalar
    m = cpu.compile(unit(NULLABLE), ["k"], filename="user.cu")
    out = cpu.upload(np.zeros(8, np.float32))
    cpu.launch(m, "k", Launch((1, 1, 1), (8, 1, 1)), [out, Scalar("const float *", 0, "uint64"), Scalar("int", 8, "int32")])
    np.testing.assert_array_equal(cpu.download(out), np.ones(8, np.float32))
    with pytest.raises(LaunchError, match="takes a pointer here"):
        cpu.launch(m, "k", Launch((1, 1, 1), (8, 1, 1)),
                   [out, Scalar("const float *", 4096, "uint64"), Scalar("int", 8, "int32")])


RECORDS = """struct Batch { int n_tokens; int n_seqs; };
struct __align__(16) Seq { int start; int len; int seen; int pad; };
struct Wrap { const Batch* batch; const Seq* seqs; };
/* @astra
grid = ["seqs"]
block = [64]
[sizes]
seqs = [1, 7]
tokens = [50]
d = [64]
[args]
out = { type = "float", shape = ["seqs", "d"], output = true }
acts = { type = "float", shape = ["tokens", "d"] }
batch = { records = 1, n_seqs = "seqs", n_tokens = "tokens" }
seqs_ = { records = "seqs", start = { init = "randint(0, tokens)" }, len = 1, seen = "d" }
w.batch = { records = 1, n_seqs = "seqs" }
w.seqs = { records = "seqs", start = { init = "randint(0, tokens)" }, len = 1 }
d = "d"
*/
__global__ void k(float* out, const float* acts, const Batch* batch, const Seq* seqs_, Wrap w, int d) {
    const int s = blockIdx.x;
    if (s >= batch->n_seqs || s >= w.batch->n_seqs) return;
    const Seq q = seqs_[s];
    const int row = q.start + q.len - 1, other = w.seqs[s].start;
    for (int i = threadIdx.x; i < d; i += blockDim.x)
        out[s * d + i] = acts[row * d + i] + 0.5f * acts[other * d + i] + (float)(q.seen - d);
}
"""


@pytest.mark.parametrize("old,new,verdict", [
    ("", "", "passed"),
    ("const Seq q = seqs_[s];", "const Seq q = seqs_[0];", "compare"),      # every sequence reads the first
    ("other = w.seqs[s].start", "other = w.seqs[s].len", "compare")])       # a field misread
def test_the_gate_checks_a_kernel_given_pointers_to_records(cpu, tmp_path, old, new, verdict):
    """DeepSpeed's ragged ops read descriptor structs in device memory (issue 25, item 6): a
    parameter pointing to records and a struct field pointing to them, each record's fields the
    same in all of them or drawn per record — laid out as the compiler lays out the struct."""
    from astra_cuda.compile import extract
    from astra_cuda import gate
    from astra_cuda.model import source, spec as spec_mod
    path = str(tmp_path / "r.cu")

    def unit_of(text):
        model = source.parse(text)
        s = spec_mod.load(model.kernel("k"), model)
        return extract.spec_unit(model, path, "k", s), s

    ref, s = unit_of(RECORDS)
    cand, _ = unit_of(RECORDS.replace(old, new) if old else RECORDS)
    v = gate.check(ref, cand, s, cpu, quick=True)
    if verdict == "passed":
        assert v.passed and v.compared, v.human()
    else:
        assert v.status == "failed" and v.failures[0].check == verdict, v.human()


POINTER_TABLE = """template <int n> struct Lists { void* addresses[n][4]; long long sizes[4]; int start; };
/* @astra
grid = ["cdiv(m, 128)", 2]
block = [128]
instantiate = "<2>"
[sizes]
m = [1, 300]
[args]
tl."addresses[0][0]" = { type = "float", shape = ["m"] }
tl."addresses[0][1]" = { type = "float", shape = ["2 * m"] }
tl."addresses[1][0]" = { type = "float", shape = ["m"], output = true }
tl."addresses[1][1]" = { type = "float", shape = ["2 * m"], output = true }
tl."sizes[0]" = "m"
tl."sizes[1]" = "2 * m"
*/
template <int n>
__global__ void k(Lists<n> tl) {
    const int t = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
    const float* x = (const float*)tl.addresses[0][t];
    float* y = (float*)tl.addresses[1][t];
    for (int j = i; j < tl.sizes[t]; j += gridDim.x * blockDim.x) y[j] = 3.0f * x[j] + t;
}
"""


@pytest.mark.parametrize("old,new,verdict", [("", "", "passed"),
                                             ("tl.addresses[0][t]", "tl.addresses[0][0]", "compare")])
def test_the_gate_checks_a_kernel_given_a_struct_holding_a_table_of_pointers(cpu, tmp_path, old, new, verdict):
    """apex's TensorListMetadata holds `void* addresses[depth][max_tensors]` by value (issue 25,
    item 6): each entry a field of its own (`tl."addresses[1][0]"`), laid out by the compiler."""
    from astra_cuda.compile import extract
    from astra_cuda import gate
    from astra_cuda.model import source, spec as spec_mod
    path = str(tmp_path / "t.cu")

    def unit_of(text):
        model = source.parse(text)
        s = spec_mod.load(model.kernel("k"), model)
        return extract.spec_unit(model, path, "k", s), s

    ref, s = unit_of(POINTER_TABLE)
    assert s.args["tl"].fields[:2] == ("addresses[0][0]", "addresses[0][1]")
    cand, _ = unit_of(POINTER_TABLE.replace(old, new) if old else POINTER_TABLE)
    v = gate.check(ref, cand, s, cpu, quick=True)
    if verdict == "passed":
        assert v.passed and v.compared, v.human()
    else:
        assert v.status == "failed" and v.failures[0].check == verdict, v.human()


def test_records_larger_than_the_cap_are_refused_before_they_are_assembled():
    """The record's size is the compiler's (a hostile struct may be gigabytes): refused, never allocated."""
    from astra_cuda.gate import checks
    from astra_cuda.model import source, spec as spec_mod
    text = ("struct Big { int n; char pad[1 << 20]; };\n/* @astra\ngrid = [1]\nblock = [1]\n[sizes]\nn = [300]\n"
            "[args]\nb = { records = \"n\", n = 1 }\n*/\n__global__ void k(const Big* b) {}\n")
    m = source.parse(text)
    s = spec_mod.load(m.kernel("k"), m)
    lay = layout.Layout((1 << 20) + 4, {"n": layout.Field(0, 4, "integer")})
    with pytest.raises(LaunchError, match="exceed"):
        checks.launch_args(s, {}, {"n": 300}, {"b": lay})

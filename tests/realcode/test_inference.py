"""Issue 10, breakage 4: inference that reads launchers and kernel bodies (on the corpus files
and small snippets): grid/block through the launcher's locals, typedefs behind a #define,
shapes from index arithmetic, inout, unsigned sizes, index arrays bounded by their table."""
from pathlib import Path

from astra_cuda import api
from astra_cuda.model import source, spec

CORPUS = Path(__file__).resolve().parents[2] / "benchmarks" / "corpus"


def proposal(rel, kernel):
    path = CORPUS / rel
    return api.infer_spec(api.snapshot(path.read_text(), str(path)), kernel, run=False)


def loaded(text, kernel, prop):
    """The proposal pasted above the kernel, loaded as a spec."""
    k = source.parse(text).kernel(kernel)
    new = text[:k.span.start_byte] + prop.comment + text[k.span.start_byte:]
    m = source.parse(new)
    return spec.load(m.kernel(kernel), m)


def test_a_launcher_with_ceil_div_and_a_callers_block_size():
    p = proposal("dev/gelu_forward.cu", "gelu_forward_kernel1")
    s = loaded((CORPUS / "dev/gelu_forward.cu").read_text(), "gelu_forward_kernel1", p)
    assert (s.grid, s.block) == (("cdiv(N, 256)",), ("256",))
    assert list(s.sizes) == ["N"]                        # no invented grid_size
    assert s.args["out"].shape == ("N",) and s.args["inp"].shape == ("N",)
    assert s.args["out"].dtype.name == "bfloat16"        # floatX behind #define ENABLE_BF16
    assert any("block_size" in n and "256" in n for n in p.notes)


def test_eight_per_thread_gives_a_requirement_and_the_earlier_version_is_the_reference():
    p = proposal("dev/gelu_forward.cu", "gelu_forward_kernel2")
    s = loaded((CORPUS / "dev/gelu_forward.cu").read_text(), "gelu_forward_kernel2", p)
    assert s.grid == ("cdiv(N, 256 * 8)",) and s.require == ("N % 8 == 0",)
    assert s.reference == "gelu_forward_kernel1"


def test_row_shapes_and_read_modify_write():
    p = proposal("dev/layernorm_forward.cu", "layernorm_forward_kernel1")
    text = (CORPUS / "dev/layernorm_forward.cu").read_text()
    s = loaded(text, "layernorm_forward_kernel1", p)
    assert s.args["out"].shape == ("N", "C") and s.args["mean"].shape == ("N",) and s.args["weight"].shape == ("C",)
    p = proposal("dev/adamw.cu", "adamw_kernel1")
    s = loaded((CORPUS / "dev/adamw.cu").read_text(), "adamw_kernel1", p)
    assert s.args["m_memory"].inout and s.args["params_memory"].inout and not s.args["grads_memory"].written
    assert s.args["num_parameters"].dtype.name == "int64"


def test_token_ids_are_bounded_by_the_table_they_index():
    text = (CORPUS / "dev/encoder_forward.cu").read_text()
    p = proposal("dev/encoder_forward.cu", "encoder_forward_kernel2")
    s = loaded(text, "encoder_forward_kernel2", p)
    assert s.args["wte"].shape == ("V", "C") and s.args["wpe"].shape == ("T", "C")
    assert s.args["inp"].shape == ("B", "T") and str(s.args["inp"].init) == "randint(0, V)"
    assert s.args["inp"].init.at({"V": 50}).params == (0.0, 50.0)


def test_unsigned_sizes_and_const_block_sizes():
    p = proposal("samples/relu_half.cu", "relu_half")
    s = loaded((CORPUS / "samples/relu_half.cu").read_text(), "relu_half", p)
    assert s.block == ("512",) and s.args["n"].dtype.name == "uint32" and s.args["y"].dtype.name == "half"


def test_a_dispatch_macro_and_a_device_function_template_argument():
    p = proposal("ext/csrc/activation_kernels.cu", "act_and_mul_kernel")
    s = loaded((CORPUS / "ext/csrc/activation_kernels.cu").read_text(), "act_and_mul_kernel", p)
    assert s.instantiate == "<float, ext::silu_kernel<float>>"
    assert (s.grid, s.block) == (("num_tokens",), ("min(d, 1024)",))
    assert s.args["input"].shape == ("num_tokens", "2 * d")


def test_an_unresolvable_element_type_is_float_checked_by_the_compiler_and_said_first(tmp_path):
    f = tmp_path / "k.cu"
    f.write_text('#include "missing.h"\n__global__ void k(realT* out, int n) { int i = threadIdx.x; if (i < n) '
                 'out[i] = 0; }\n')
    p = api.infer_spec(api.snapshot(f.read_text(), str(f)), "k", run=False)
    assert 'type = "?"' not in p.comment and 'type = "float"' in p.comment
    assert "could not be resolved" in p.notes[0] and "compiler checks it" in p.notes[0]
    loaded(f.read_text(), "k", p)   # a spec Astra's own validator accepts


def test_a_size_name_in_init_bounds_is_valid_and_checked():
    base = ('/* @astra\ngrid = ["1"]\nblock = ["32"]\n[sizes]\nn = [4]\nV = [10]\n[args]\n'
            'ids = {{ type = "int32", shape = ["n"], init = "{init}" }}\nn = "n"\n*/\n'
            "__global__ void k(const int* ids, int n) {{}}\n")
    m = source.parse(base.format(init="randint(0, V)"))
    assert str(spec.load(m.kernel("k"), m).args["ids"].init) == "randint(0, V)"
    m = source.parse(base.format(init="randint(0, W)"))
    try:
        spec.load(m.kernel("k"), m)
        raise AssertionError("an unknown size in init must be refused")
    except spec.SpecErrors as e:
        assert "unknown size" in e.diagnostics[0].message

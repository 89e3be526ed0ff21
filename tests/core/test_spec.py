"""The harness spec: parsing, cases, every validation error at its place, and inference."""
from pathlib import Path

import pytest

from astra_cuda import infer
from astra_cuda.model import source, spec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

KERNEL = "__global__ void k(__half* __restrict__ out, const __half* __restrict__ in, const int d, float eps) {}\n"


def load(body: str):
    text = f"/* @astra\n{body}*/\n{KERNEL}"
    m = source.parse(text)
    return spec.load(m.kernel("k"), m), text


GOOD = '''grid = ["n"]
block = ["min(d, 1024)"]
require = ["d % 2 == 0"]
[sizes]
n = [1, 3]
d = [2, 7, 8]
[args]
out = { type = "half", shape = ["n", "d"], output = true }
in  = { type = "half", shape = ["n", "2 * d"], init = "uniform(-3, 3)" }
d   = "d"
eps = 1e-6
'''


def test_examples_load():
    for f in EXAMPLES.glob("*.cu"):
        m = source.parse(f.read_text())
        for k in m.kernels:
            s = spec.load(k, m)
            assert s.cases() and s.bench_cases()


def test_cases_respect_require_and_launch_dims():
    s, _ = load(GOOD)
    assert all(c["d"] % 2 == 0 for c in s.cases())
    assert len(s.cases()) == 4
    assert s.launch_dims({"n": 3, "d": 2000}) == ((3, 1, 1), (1024, 1, 1), 0)
    assert s.shape("in", {"n": 3, "d": 8}) == (3, 16)
    assert s.args["in"].init.kind == "uniform" and s.args["in"].init.params == (-3.0, 3.0)
    assert s.scalar("eps", {"n": 1, "d": 2}) == pytest.approx(1e-6)
    assert s.bytes_moved({"n": 1, "d": 2}) == 2 * 2 + 4 * 2


def error_of(body: str) -> tuple[spec.Diagnostic, str]:
    with pytest.raises(spec.SpecErrors) as e:
        load(body)
    d = e.value.diagnostics[0]
    return d, f"/* @astra\n{body}*/\n{KERNEL}"


def where(text: str, d) -> str:
    return text.splitlines()[d.line][d.col:d.end_col]


def test_unknown_parameter_pointed_at():
    d, text = error_of(GOOD + 'bogus = "d"\n')
    assert "unknown parameter 'bogus'" in d.message and where(text, d) == "bogus"


def test_missing_parameter():
    d, _ = error_of(GOOD.replace("eps = 1e-6\n", ""))
    assert "missing parameter 'eps'" in d.message


def test_shape_with_unknown_size():
    d, text = error_of(GOOD.replace('["n", "2 * d"]', '["n", "2 * width"]'))
    assert "unknown size(s) width" in d.message and where(text, d) == '"2 * width"'   # the expression itself


def test_type_mismatch_with_cpp():
    d, text = error_of(GOOD.replace('out = { type = "half"', 'out = { type = "float"'))
    assert "does not match the C++ type" in d.message and where(text, d) == '"float"' and d.fix == '"half"'


def test_bad_expression():
    d, text = error_of(GOOD.replace('["min(d, 1024)"]', '["__import__(d)"]'))
    assert "block" in d.message and where(text, d) == '"__import__(d)"'


def test_a_misspelt_table_is_pointed_at_its_header_with_the_close_match():
    d, text = error_of(GOOD.replace("[sizes]", "[size]"))
    assert where(text, d) == "[size]" and "did you mean 'sizes'?" in d.message and d.fix == "[sizes]"


@pytest.mark.parametrize("old,new,at,fix", [
    ('type = "half", shape = ["n", "d"]', 'type = "hlaf", shape = ["n", "d"]', '"hlaf"', '"half"'),
    ('output = true', 'outptu = true', "outptu", "output"),
    ('block = ["min(d, 1024)"]', 'blokc = ["min(d, 1024)"]', "blokc", "block"),
    ('eps = 1e-6', 'epss = 1e-6', "epss", "eps"),
])
def test_did_you_mean_at_the_key_or_value(old, new, at, fix):
    with pytest.raises(spec.SpecErrors) as e:
        load(GOOD.replace(old, new))
    text = f"/* @astra\n{GOOD.replace(old, new)}*/\n{KERNEL}"
    d = next(d for d in e.value.diagnostics if d.fix)
    assert where(text, d) == at and d.fix == fix and f"did you mean {fix.strip(chr(34))!r}?" in d.message


def test_an_unknown_size_in_an_expression_suggests_the_close_one():
    d, text = error_of(GOOD.replace('["n", "2 * d"]', '["nn", "2 * d"]'))
    assert where(text, d) == '"nn"' and "did you mean 'n'?" in d.message


def test_toml_syntax_error_position():
    d, text = error_of('grid = ["n"\nblock = [1]\n')
    assert d.message.startswith("TOML syntax error") and d.line >= 1


def test_output_on_const_pointer():
    d, _ = error_of(GOOD.replace('init = "uniform(-3, 3)"', 'output = true'))
    assert "is const" in d.message


def test_unknown_init():
    d, _ = error_of(GOOD.replace('uniform(-3, 3)', 'gaussian'))
    assert "unknown init" in d.message


def test_infer_proposal_validates():
    text = (EXAMPLES / "silu_and_mul.cu").read_text()
    i = text.index("/* @astra")
    j = text.index("*/", i) + 3
    bare = text[:i] + text[j:]
    m = source.parse(bare)
    k = m.kernel("silu_and_mul")
    p = infer.infer(k, m)
    new = bare[:k.span.start_byte] + p.comment + bare[k.span.start_byte:]
    m2 = source.parse(new)
    assert spec.validate(m2.kernel("silu_and_mul"), m2) == []
    assert 'grid = ["num_tokens"]' in p.comment
    assert 'out   = { type = "half", shape = ["num_tokens", "d"], output = true }' in p.comment  # read off the body

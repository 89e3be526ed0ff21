"""Objects of a class the host builds, passed by value (issue 25, item 6): `{ construct =
"fastdiv(page)" }` for a struct's field (FlashInfer's `paged_kv.page_size`, a `uint_fastdiv`) and
for a parameter of its own. The constructor program is built with the unit by the CPU backend's
compiler and run confined; its bytes reach the kernel, whose divisions are then exact — a wrong
multiplier or shift (zeros, another divisor) gives other quotients."""
from pathlib import Path

import numpy as np
import pytest

from astra_cuda.compile import extract
from astra_cuda.gate import checks
from astra_cuda.model import source, spec as spec_mod

FILE = Path(__file__).with_name("constructed_fastdiv.cu")


def _compiled(cpu, kernel, text=None):
    text = text or FILE.read_text()
    m = source.parse(text)
    spec = spec_mod.load(m.kernel(kernel), m)
    u = extract.spec_unit(m, str(FILE), kernel, spec)
    k = checks.Compiled(cpu.compile_unit(u), u.name_expression, "candidate")
    return spec, k, checks.arg_types(spec, cpu, k, u.param_types)


def test_a_field_built_by_its_constructor_divides_exactly(cpu):
    spec, k, types = _compiled(cpu, "paged")
    cases = spec.cases()
    assert {c["page"] for c in cases} == {1, 7, 16}
    for sizes in cases:
        n, page = sizes["n"], sizes["page"]
        x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
        run = checks.run_case(spec, cpu, k, sizes, {"in": x}, types, 0xFF)
        i = np.arange(n)
        np.testing.assert_array_equal(run.after["p.out"], (x + 1000.0 * (i // page) + i % page).astype(np.float32))


def test_a_parameter_built_by_its_constructor(cpu):
    spec, k, types = _compiled(cpu, "row_of")
    for sizes in spec.cases():
        run = checks.run_case(spec, cpu, k, sizes, {}, types, 0xFF)
        np.testing.assert_array_equal(run.after["out"], np.arange(sizes["n"]) // (2 * sizes["rows"] + 1))


def test_the_object_is_the_constructors_own(cpu):
    """The bytes are those the class's constructor writes (d, its multiplier, its shift), one
    program run per case, none for a case seen before."""
    _, _, types = _compiled(cpu, "row_of")
    built = types["by"]
    b = built.at({"n": 5, "rows": 3})
    d, m, s = np.frombuffer(b, dtype=np.uint32)
    assert (d, s) == (7, 3) and m == ((1 << 32) * (8 - 7)) // 7 + 1
    assert built.at({"n": 9, "rows": 3}) is b


def test_a_constructor_the_unit_cannot_call_is_a_compile_error(cpu):
    text = FILE.read_text().replace('construct = "fastdiv(2 * rows + 1)"', 'construct = "fastdiv(rows, rows)"')
    with pytest.raises(Exception, match="constructor program"):
        _compiled(cpu, "row_of", text)

"""Quantize/dequantize with per-group scales (issue 29 item 3): the one-element-per-thread forms
are coarsened into 16-byte vectors of the narrow type (int8: 16 elements per access) with the
scale read per element; each rewrite passes the real gate on the CPU backend, and one that
quantizes a tail element wrongly does not."""
import pathlib

import pytest

from astra_cuda.model import source, spec as spec_mod
from astra_cuda.agents.offline import TRANSFORMS, context_from_text

PATH = pathlib.Path(__file__).parent / "kernels" / "quant_int8.cu"


def evaluator(kernel):
    from astra_cuda.execution.evaluator import local_evaluator
    try:
        from astra_cuda.backends.cpu import CpuBackend
        backend = CpuBackend()
    except Exception as e:  # noqa: BLE001 - any reason means this machine cannot run it
        pytest.skip(f"CPU backend unavailable: {e}")
    text = PATH.read_text()
    m = source.parse(text)
    sp = spec_mod.load(m.kernel(kernel), m)
    return text, sp, local_evaluator(str(PATH), kernel, sp, backend, text, quick=True)


@pytest.mark.parametrize("kernel,broken", [
    ("dequant_int8_kernel", ("static_cast<float>(q[i]) * scale[i / group]",
                             "static_cast<float>(q[i]) * scale[i / group + (i == n - 1)]")),
    ("quant_int8_kernel", ("fminf(127.0f, rintf(v))", "fminf(127.0f, rintf(v) + (i == n - 1))")),
])
def test_coarsened_quantize_and_dequantize_pass_the_gate(kernel, broken):
    text, sp, evaluate = evaluator(kernel)
    rw = TRANSFORMS["coarsen"].apply(text, context_from_text(kernel, text, sp))
    assert rw is not None and rw.params["width"] == 16
    assert any("16 elements per step" in c for c in rw.changes)     # int8: sixteen in one 16-byte access
    ev = evaluate(rw.text)
    assert ev.passed, ev.check.summary + ev.check.feedback
    wrong = rw.text.replace(*broken)
    assert wrong.count(broken[1]) >= 1          # the scalar tail (last element) computes it wrong
    assert not evaluate(wrong).passed


def test_a_scale_array_one_short_is_an_out_of_bounds_read_on_the_cpu():
    """At n = 65537 (the gate's edge size) the last group has one element: a spec giving `scale`
    floor(n / group) entries makes the kernel read one past the end. On an H200 that showed only as
    a nondeterministic `out[65536]` (nan vs -0); the CPU backend's sanitizer build names the read."""
    from astra_cuda.compile import extract
    from astra_cuda import gate
    from astra_cuda.backends.cpu import CpuBackend
    text = PATH.read_text()
    assert '"cdiv(n, group)"' in text
    for t, ok in ((text, True), (text.replace('"cdiv(n, group)"', '"n / group"'), False)):
        m = source.parse(t)
        sp = spec_mod.load(m.kernel("dequant_int8_kernel"), m)
        v = gate.check(None, extract.spec_unit(m, str(PATH), "dequant_int8_kernel", sp), sp, CpuBackend(),
                       quick=True, bounds=True)
        assert v.passed == ok, v.summary
        if not ok:
            assert [c.name for c in v.checks if not c.passed] == ["sanitize"]
            assert "out-of-bounds read" in v.failures[0].message

"""Every verdict names the compiler that judged (issue 24): nvcc with its flags where a CUDA
toolkit is installed, NVRTC and why where none is — in the verdict, its text, JSON and the
editor's diagnostics."""
import json

import pytest

from astra_cuda import gate
from astra_cuda.compile import toolkit
from astra_cuda.gate.verdict import Verdict

from .test_catalogue import cpu  # noqa: F401 - fixture
from .test_gate_cpu import silu_units


@pytest.mark.skipif(toolkit.find() is None, reason="no CUDA toolkit here")
def test_cpu_verdict_names_nvcc_with_its_flags(cpu, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    ref, cand, spec = silu_units()
    v = gate.check(ref, cand, spec, cpu, quick=True)
    assert v.passed, v.human()
    assert v.compiler.startswith("nvcc ") and "-arch=sm_" in v.compiler and "-std=c++17" in v.compiler
    assert f"compiled by: {v.compiler}" in v.human()
    assert v.compiler in next(c.details for c in v.checks if c.name == "compile")
    again = Verdict.from_json(json.dumps(v.to_dict()))
    assert again.compiler == v.compiler


def test_cpu_verdict_names_nvrtc_and_why(cpu, monkeypatch):
    from astra_cuda.compile import static
    if static._nvrtc() is None:
        pytest.skip("no NVRTC here")
    monkeypatch.setenv(toolkit.TOOLKIT_ENV, "none")
    ref, cand, spec = silu_units()
    v = gate.check(ref, cand, spec, cpu, quick=True)
    assert v.passed, v.human()
    assert v.compiler.startswith("NVRTC ") and v.compiler.endswith("CUDA toolkit turned off (ASTRA_CUDA_TOOLKIT=none)")


def test_editor_diagnostics_carry_the_compiler_as_their_source():
    from astra_cuda.diagnostics import Diagnostic
    from astra_cuda.lsp.analysis import verdict_diagnostics
    from astra_cuda.lsp.convert import lsp_diagnostic
    d = lsp_diagnostic(Diagnostic(3, 4, 3, 9, "error", 'identifier "x" is undefined', "nvcc-20", "nvcc 13.0"))
    assert d.source == "nvcc 13.0"
    v = Verdict(kernel="k", backend="gpu", status="error", log="the candidate does not compile",
                compiler="nvcc 13.0, flags -std=c++17 -arch=sm_90")
    from lsprotocol import types
    where = types.Range(start=types.Position(line=0, character=0), end=types.Position(line=0, character=1))
    (diag,) = verdict_diagnostics([v], ["__global__ void k() {}"], where)
    assert "compiled by nvcc 13.0, flags -std=c++17 -arch=sm_90" in diag.message

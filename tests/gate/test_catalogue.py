"""Every catalogue entry through the full gate on the CPU backend: cheats rejected by the check
the catalogue names, correct optimised variants passed."""
import os

import pytest

from astra_cuda.compile import extract
from astra_cuda import gate
from astra_cuda.model import source, spec as spec_mod

from . import catalogue
from .conftest import ROOT, example_path


@pytest.fixture(scope="module")
def cpu():
    try:
        from astra_cuda.backends.cpu import CpuBackend
        b = CpuBackend()
    except Exception as e:  # noqa: BLE001 - no C++ toolchain here
        pytest.skip(f"CPU backend unavailable: {e}")
    yield b
    b.close()


def units(entry):
    path = example_path(entry.example)
    text = open(path).read()
    model = source.parse(text)
    spec = spec_mod.load(model.kernel(entry.kernel), model)
    ref = extract.unit(text, path, entry.kernel)
    cand = extract.unit(catalogue.candidate_text(entry, text), path, entry.kernel)
    return ref, cand, spec


@pytest.mark.parametrize("entry", catalogue.CHEATS, ids=lambda e: e.name)
def test_cheat_is_rejected_by_the_named_check(cpu, entry):
    ref, cand, spec = units(entry)
    v = gate.check(ref, cand, spec, cpu)
    if entry.timed and v.passed:
        # Cheats of the timing loop: the CPU does not time kernels, so the gate alone may pass one
        # here; the profiler's checks that refuse it are tested on the fake GPU (tests/profiler).
        assert {"timed_outputs", "timed_plausibility"} & set(entry.caught_by)
        return
    assert v.status == "failed", v.human()
    assert v.failures[0].check in entry.caught_by, v.human()
    assert v.failures[0].message
    # The verdict survives JSON, and the agents' feedback never leaks held-out details.
    assert gate.Verdict.from_json(v.to_json()).to_json() == v.to_json()
    hidden = [f for f in v.failures if not f.visible]
    fb = v.visible_feedback()
    assert all(f.case.describe() not in fb for f in hidden)


@pytest.mark.parametrize("entry", catalogue.CORRECT, ids=lambda e: e.name)
def test_correct_variant_passes(cpu, entry):
    ref, cand, spec = units(entry)
    v = gate.check(ref, cand, spec, cpu)
    assert v.passed, v.human()
    names = {c.name for c in v.checks}
    assert {"screen", "compile", "compare", "inputs_unchanged", "statefulness", "schedules"} <= names
    assert v.coverage.held_out > 0 and len(v.coverage.seeds) >= 2


def test_catalogue_size():
    assert len(catalogue.CHEATS) >= 20 and len(catalogue.CORRECT) >= 10
    assert len(catalogue.TIMED) >= 5 and all(e.timed and e in catalogue.CHEATS for e in catalogue.TIMED)


def test_published_table_is_in_sync():
    doc = os.path.join(ROOT, "docs", "cheat-catalogue.md")
    assert open(doc).read() == catalogue.table(), "run: python -m tests.gate.catalogue > docs/cheat-catalogue.md"


def test_sanitizer_failure_points_at_the_users_line(cpu):
    from astra_cuda.backends.base import LaunchError
    from astra_cuda.gate import run as gate_run
    e = next(e for e in catalogue.CHEATS if e.name == "out_of_bounds_read")
    ref, cand, spec = units(e)
    g = gate_run._Gate(ref, cand, spec, cpu, False, None, 1, None)
    g.ctypes = {"d": "int"}
    mod = g.compile(cand, "candidate", sanitize=True)
    host = gate.suite.inputs(spec, {"num_tokens": 1, "d": 128}, "spec", 1)
    with pytest.raises(LaunchError) as info:
        g._sanitized_run(mod, {"num_tokens": 1, "d": 128}, host)
    g.fail("sanitize", str(info.value))
    line = g.v.failures[0].line
    text = catalogue.candidate_text(e, open(example_path(e.example)).read()).split("\n")
    assert line is not None and "past" in text[line - 1], (str(info.value), line)

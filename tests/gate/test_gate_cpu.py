"""The gate's behaviour end to end on the CPU backend: modes, errors, cancellation, timing
re-validation, feedback."""
import hashlib
import threading

import pytest

from astra_cuda.compile import extract
from astra_cuda import gate
from astra_cuda.model import source, spec as spec_mod
from astra_cuda.backends.base import Capabilities

from . import catalogue
from .conftest import example_path
from .test_catalogue import cpu, units  # noqa: F401 - fixture


def entry(name):
    return next(e for e in catalogue.ALL if e.name == name)


def silu_units(body=None, prelude=""):
    path = example_path("silu_and_mul")
    text = open(path).read()
    model = source.parse(text)
    spec = spec_mod.load(model.kernel("silu_and_mul"), model)
    ref = extract.unit(text, path, "silu_and_mul")
    if body is None:
        return ref, ref, spec
    e = catalogue.Entry("x", "silu_and_mul", "", body, ("x",), prelude)
    return ref, extract.unit(catalogue.candidate_text(e, text), path, "silu_and_mul"), spec


@pytest.mark.parametrize("name,check", [("no_op", "poison"), ("zero_output", "not_constant"),
                                        ("mutates_const_input", "inputs_unchanged"),
                                        ("shared_memory_race", "schedules"),
                                        ("caches_by_pointer", ("statefulness", "determinism"))])
def test_without_a_reference_self_consistency_still_rejects(cpu, name, check):
    _, cand, spec = units(entry(name))
    v = gate.check(None, cand, spec, cpu)
    assert v.status == "failed" and not v.compared, v.human()
    assert v.failures[0].check in ((check,) if isinstance(check, str) else check), v.human()


def test_without_a_reference_a_correct_kernel_is_self_consistent(cpu):
    _, cand, spec = units(entry("hoisted_merge"))
    v = gate.check(None, cand, spec, cpu, quick=True)
    assert v.passed and not v.compared and "no reference" in v.summary
    assert "compare" not in {c.name for c in v.checks}


def test_same_seed_reproduces_and_fresh_runs_differ(cpu):
    ref, cand, spec = units(entry("tuned_to_normal_inputs"))
    a = gate.check(ref, cand, spec, cpu, seed=11)
    b = gate.check(ref, cand, spec, cpu, seed=11)
    assert a.failures[0].message == b.failures[0].message and a.nonce == 11
    c = gate.check(ref, ref, spec, cpu, quick=True)
    d = gate.check(ref, ref, spec, cpu, quick=True)
    assert c.nonce != d.nonce and c.coverage.seeds != d.coverage.seeds


def test_held_out_only_failure_gives_counts_not_details(cpu):
    ref, cand, spec = units(entry("tuned_to_normal_inputs"))
    v = gate.check(ref, cand, spec, cpu, seed=3)
    assert v.failures and all(not f.visible for f in v.failures), v.human()
    fb = v.visible_feedback()
    assert "held-out case(s) failed the compare check" in fb
    assert "wide" not in fb and "expected" not in fb


def test_compile_error_is_a_failure_with_the_log(cpu):
    ref, cand, spec = silu_units(catalogue.silu("  out[0] = undefined_name;"))
    v = gate.check(ref, cand, spec, cpu)
    assert v.status == "failed" and v.failures[0].check == "compile"
    assert "undefined_name" in v.log


def test_unsupported_code_is_never_a_pass(cpu):
    ref, cand, spec = silu_units(catalogue.silu(
        '  float r; asm volatile("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(2.0f));' + catalogue.SILU_LOOP))
    v = gate.check(ref, cand, spec, cpu)
    assert v.status == "unsupported" and not v.passed and "needs a GPU" in v.summary


def test_a_failing_reference_is_an_error_not_a_candidate_failure(cpu):
    bad, _, spec = silu_units(catalogue.silu("  __trap();"))
    _, broken, _ = silu_units(catalogue.silu("  __trap();"))
    ref, _, _ = silu_units()
    v = gate.check(broken, ref, spec, cpu)
    assert v.status == "error" and "reference" in v.summary


def test_cancel_stops_the_gate(cpu):
    ref, cand, spec = silu_units()
    ev = threading.Event()
    ev.set()
    with pytest.raises(gate.Cancelled):
        gate.check(ref, cand, spec, cpu, cancel=ev)


def test_flagged_state_gets_extra_launches_and_a_warning(cpu):
    body = catalogue.silu("  if (threadIdx.x == 0 && blockIdx.x == 0) launches += 1;\n" + catalogue.SILU_LOOP)
    ref, cand, spec = silu_units(body, prelude="__device__ int launches = 0;")
    v = gate.check(ref, cand, spec, cpu, quick=True)
    assert v.passed, v.human()  # harmless state: flagged, checked harder, not rejected
    assert any("launches" in w and "__device__" in w for w in v.warnings)
    plain = gate.check(ref, ref, spec, cpu, quick=True)
    assert v.coverage.launches > plain.coverage.launches


class TimingCpu:
    """The CPU backend presented as a backend that times kernels: exercises the gate's GPU-side
    branches (full timed sizes, repeated-run determinism) without a GPU."""

    name = "gpu"
    caps = Capabilities(timing=True, compute_sanitizer=True)

    def __init__(self, cpu):
        self._cpu = cpu

    def __getattr__(self, item):
        return getattr(self._cpu, item)


def test_backends_that_time_check_every_timed_size_in_full_and_repeat_runs(cpu):
    path = example_path("silu_and_mul")
    text = open(path).read().replace("num_tokens = [4096]\nd = [11008, 13824, 28672]",
                                     "num_tokens = [64]\nd = [2000, 3000]")
    model = source.parse(text)
    spec = spec_mod.load(model.kernel("silu_and_mul"), model)
    ref = extract.unit(text, path, "silu_and_mul")
    v = gate.check(ref, ref, spec, TimingCpu(cpu), sanitizer=False)
    assert v.passed, v.human()
    names = {c.name for c in v.checks}
    assert "determinism" in names and "schedules" not in names and "sanitize" not in names
    assert "checked in full" in v.coverage.bench_sizes
    e = entry("drops_vector_tail")
    cand = extract.unit(catalogue.candidate_text(e, text), path, "silu_and_mul")
    bad = gate.check(ref, cand, spec, TimingCpu(cpu), sanitizer=False)
    # an odd row's half2 accesses are misaligned: the CPU faults there as a GPU does (before the
    # dropped last element would show as poison)
    assert bad.failures[0].check == "launch" and "misaligned address" in bad.failures[0].message


SCALE = """/* @astra
grid = ["(n + 127) / 128"]
block = [128]

[sizes]
n = [100, 1000]

[args]
out = { type = "float", shape = ["n"], output = true }
x   = { type = "float", shape = ["n"] }
n   = "n"
*/
__global__ void scale(float* out, const float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { BODY }
}
"""


@pytest.fixture(scope="module")
def scale_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("scale")


def scale_units(folder, *bodies):
    """A small kernel (fast on the CPU) in versions differing in the body only; one file per body
    (the same version in two tests is built once)."""
    out = []
    for body in bodies:
        f = folder / f"scale-{hashlib.sha256(body.encode()).hexdigest()[:12]}.cu"
        f.write_text(SCALE.replace("BODY", body))
        out.append(extract.unit(f.read_text(), str(f), "scale"))
    model = source.parse(f.read_text())
    return (*out, spec_mod.load(model.kernel("scale"), model))


def count_launches(backend, monkeypatch, original):
    """Launches per version: 'original' (the unit `original`, any build of it) or 'rewrite'."""
    counts = {"original": 0, "rewrite": 0}
    whose: dict[int, str] = {}
    compile_unit, launch = backend.compile_unit, backend.launch

    def compiled(unit, **kw):
        mod = compile_unit(unit, **kw)
        whose[id(mod)] = "original" if unit.source == original.source else "rewrite"
        return mod

    def launched(module, *a, **kw):
        counts[whose[id(module)]] += 1
        return launch(module, *a, **kw)
    monkeypatch.setattr(backend, "compile_unit", compiled)
    monkeypatch.setattr(backend, "launch", launched)
    return counts


def test_an_original_checked_in_its_rewrites_gate_runs_once_per_case(cpu, scale_dir, monkeypatch):
    """Issue 29: a rerun gates its original with the remembered rewrite (`verify_reference`): each
    case of the suite runs the original once, as the rewrite's reference, instead of once in its
    own gate (twice there: as reference and as candidate) and again as the rewrite's reference.
    The rewrite's own checks are the same; the original's single-kernel checks still run."""
    original, rewrite, spec = scale_units(scale_dir, "out[i] = 2.0f * x[i];", "out[i] = x[i] + x[i];")
    counts = count_launches(cpu, monkeypatch, original)
    alone = gate.check(original, original, spec, cpu, seed=5, quick=True)
    then = gate.check(original, rewrite, spec, cpu, seed=5, quick=True)
    assert alone.passed and then.passed, alone.human() + then.human()
    separate = dict(counts)
    counts.update(original=0, rewrite=0)
    v = gate.check(original, rewrite, spec, cpu, seed=5, quick=True, verify_reference=True)
    assert v.passed and "reference" in v.timings, v.human()
    cases = v.coverage.cases
    assert counts["rewrite"] == separate["rewrite"] > 0 and cases == then.coverage.cases > 0
    assert separate["original"] - counts["original"] == 2 * cases   # 3 runs a case (2 alone, 1 as reference): now 1
    # its runs outside the suite (statefulness, schedules, as reference and as itself) are all kept
    assert separate["original"] - 3 * cases == counts["original"] - cases > 0


def test_an_original_that_fails_its_own_gate_fails_the_gate_it_shares(cpu, scale_dir):
    """Judged on its runs in the suite: a read-only input it overwrites."""
    original, rewrite, spec = scale_units(
        scale_dir, "out[i] = 2.0f * x[i]; const_cast<float*>(x)[i] = 0.0f;", "out[i] = x[i] + x[i];")
    assert gate.check(original, rewrite, spec, cpu, quick=True).passed   # as a reference only: not judged
    alone = gate.check(original, original, spec, cpu, quick=True)
    v = gate.check(original, rewrite, spec, cpu, quick=True, verify_reference=True)
    assert not alone.passed and alone.failures[0].check == "inputs_unchanged", alone.human()
    assert v.status == "error" and "the reference modified its read-only input `x`" in v.log, v.human()


def test_an_original_that_fails_a_check_of_its_own_fails_the_gate_it_shares(cpu, scale_dir):
    """Judged by its single-kernel checks after the suite: a shared-memory race that the default
    thread order hides (the rewrite matches the original's result in that order), which the
    reversed order shows."""
    racy = ("__shared__ float t[128]; t[threadIdx.x] = x[i]; "
            "out[i] = 2.0f * t[threadIdx.x > 0 ? threadIdx.x - 1 : 0];")
    original, rewrite, spec = scale_units(scale_dir, racy, "out[i] = 2.0f * x[threadIdx.x > 0 ? i - 1 : i];")
    assert gate.check(original, rewrite, spec, cpu, quick=True).passed   # as a reference only: not judged
    v = gate.check(original, rewrite, spec, cpu, quick=True, verify_reference=True)
    assert v.status == "error" and "the reference does not pass the gate on its own (schedules" in v.log, v.human()

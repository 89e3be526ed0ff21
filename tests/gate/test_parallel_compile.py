"""On the CPU backend the gate starts the builds one evaluation needs (reference, candidate,
AddressSanitizer, ThreadSanitizer) at once, and judges exactly as it does one build at a time."""
import dataclasses
import secrets
import threading
import time

import pytest

from astra_cuda import gate
from astra_cuda.backends.base import Backend, CompileError
from astra_cuda.gate import building, run as gate_run

from . import catalogue
from .test_catalogue import cpu  # noqa: F401 - fixture
from .test_gate_cpu import silu_units


class Recording:
    """A real backend that records each compile (kind, start, end) and can fail chosen kinds of
    build: `fail` maps 'plain'/'sanitize'/'races' to the errors to raise, one per call."""

    def __init__(self, inner, name="cpu", pause=0.0, fail=None):
        # Presented as another backend, it has that backend's capabilities (no parallel builds).
        self.inner, self.name = inner, name
        self.caps = inner.caps if name == inner.name else dataclasses.replace(inner.caps, build_prefetch=False)
        self.pause, self.fail = pause, {k: list(v) for k, v in (fail or {}).items()}
        self.calls: list[tuple[str, float, float]] = []
        self.lock = threading.Lock()

    def compile(self, source, names, *, filename="kernel.cu", options=(), sanitize=False, races=False):
        kind = "races" if races else "sanitize" if sanitize else "plain"
        start = time.monotonic()
        try:
            time.sleep(self.pause)
            with self.lock:
                error = self.fail[kind].pop(0) if self.fail.get(kind) else None
            if error is not None:
                raise error
            return self.inner.compile(source, names, filename=filename, options=options, sanitize=sanitize,
                                      races=races)
        finally:
            with self.lock:
                self.calls.append((kind, start, time.monotonic()))

    def compile_unit(self, unit, *, sanitize=False, races=False, role=""):  # through `compile` above, recorded
        return Backend.compile_unit(self, unit, sanitize=sanitize, races=races, role=role)

    def __getattr__(self, name):  # buffers, launches: the real backend's
        return getattr(self.inner, name)

    def kinds(self) -> list[str]:
        return sorted(k for k, _, _ in self.calls)

    def most_at_once(self) -> int:
        events = sorted([(s, 1) for _, s, _ in self.calls] + [(e, -1) for _, _, e in self.calls])
        now = best = 0
        for _, step in events:  # an end sorts before a start at the same instant
            now += step
            best = max(best, now)
        return best


def fresh_silu():
    """The silu example with a candidate no compile cache has seen: every build is a real g++ run."""
    return silu_units(catalogue.silu(f"  // build {secrets.token_hex(8)}" + catalogue.SILU_LOOP))


def judged(v):
    return (v.status, [(c.name, c.passed, c.details, c.skipped) for c in v.checks],
            [(f.check, f.message) for f in v.failures], v.warnings, v.coverage.launches, v.coverage.cases)


def test_the_builds_of_one_evaluation_overlap(cpu):
    ref, cand, spec = fresh_silu()
    rec = Recording(cpu)
    v = gate.check(ref, cand, spec, rec)
    assert v.passed, v.human()
    assert rec.kinds() == ["plain", "plain", "races", "sanitize"]
    assert rec.most_at_once() >= 2, rec.calls


def test_the_verdict_is_the_sequential_one(cpu, monkeypatch):
    ref, cand, spec = fresh_silu()
    parallel = Recording(cpu)
    a = gate.check(ref, cand, spec, parallel, seed=5)
    monkeypatch.setattr(building, "BUILD_THREADS", 0)
    sequential = Recording(cpu, pause=0.05)
    b = gate.check(ref, cand, spec, sequential, seed=5)
    assert sequential.most_at_once() == 1 and parallel.most_at_once() >= 2
    assert a.passed and judged(a) == judged(b)
    assert [c.name for c in a.checks] == ["screen", "compile", "compare", "poison", "not_constant",
                                          "inputs_unchanged", "statefulness", "schedules", "sanitize", "races"]


def test_a_quick_check_builds_only_reference_and_candidate(cpu):
    ref, cand, spec = fresh_silu()
    rec = Recording(cpu, pause=0.2)
    v = gate.check(ref, cand, spec, rec, quick=True)
    assert v.passed and rec.kinds() == ["plain", "plain"] and rec.most_at_once() == 2


def test_a_candidate_compile_error_is_still_a_compile_failure(cpu):
    ref, cand, spec = silu_units(catalogue.silu(f"  // {secrets.token_hex(8)}\n  out[0] = undefined_name;"))
    v = gate.check(ref, cand, spec, Recording(cpu))
    assert v.status == "failed" and [f.check for f in v.failures] == ["compile"], v.human()
    assert [(c.name, c.passed) for c in v.checks] == [("screen", True), ("compile", False)]
    assert "undefined_name" in v.log


def test_a_reference_compile_error_is_an_error(cpu):
    good, bad, spec = silu_units(catalogue.silu("  out[0] = undefined_name;"))
    v = gate.check(bad, good, spec, Recording(cpu))
    assert v.status == "error" and "the reference does not compile" in v.log and not v.failures


def test_a_failed_sanitizer_build_is_skipped_with_a_warning(cpu):
    ref, cand, spec = fresh_silu()
    rec = Recording(cpu, fail={"sanitize": [CompileError("no AddressSanitizer runtime")],
                               "races": [CompileError("no ThreadSanitizer runtime")]})
    v = gate.check(ref, cand, spec, rec)
    checks = {c.name: c for c in v.checks}
    assert v.passed and checks["sanitize"].skipped and checks["races"].skipped, v.human()
    assert "no AddressSanitizer runtime" in checks["sanitize"].details
    assert any("out-of-bounds accesses were not checked" in w for w in v.warnings)


def test_a_compiler_timeout_is_retried_once(cpu):
    ref, cand, spec = fresh_silu()
    timeout = CompileError("compiling kernel.cu for the CPU: the C++ compiler timed out after 120 s")
    rec = Recording(cpu, fail={"races": [timeout], "sanitize": [timeout]})
    v = gate.check(ref, cand, spec, rec)
    checks = {c.name: c for c in v.checks}
    assert v.passed and not checks["races"].skipped and not checks["sanitize"].skipped, v.human()
    assert rec.kinds().count("races") == 2 and rec.kinds().count("sanitize") == 2


def test_the_gpu_path_compiles_one_at_a_time(cpu):
    ref, cand, spec = fresh_silu()
    rec = Recording(cpu, name="gpu", pause=0.1)  # NVRTC takes ~35 ms a compile: threads would not pay
    g = gate_run._Gate(ref, cand, spec, rec, quick=False, cancel=None, seed=1, max_failures=None)
    assert g.compile_all()
    assert rec.kinds() == ["plain", "plain"] and rec.most_at_once() == 1 and g.pool is None


def test_a_cancelled_check_leaves_no_build_running(cpu):
    ref, cand, spec = fresh_silu()
    with pytest.raises(gate.Cancelled):
        gate.check(ref, cand, spec, Recording(cpu), cancel=lambda: True)
    for t in [t for t in threading.enumerate() if t.name.startswith("astra-build")]:
        t.join(timeout=60)  # builds already running finish into the cache; queued ones were dropped
        assert not t.is_alive()

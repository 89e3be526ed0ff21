"""The verification gate: decides whether a candidate kernel is correct, and cannot be fooled.

`check(reference, candidate, spec, backend)` runs, through the Backend interface only:
  screen       static screening (signature, launch contract, host code, clocks, device state)
  compile      both units on the backend
  compare      every case of the suite against the reference (dtype-aware tolerances; a float output
               beyond them gets twice the reference's own rounding error, measured with
               directed rounding: ROUNDING_FACTOR)
  poison       outputs poisoned before every launch (two patterns): every element must be written
  not_constant a constant/all-zero output where the reference's varies fails whatever the tolerance
               (no reference: where the inputs are random, except on a degenerate size when the
               output varies on the other cases)
  inputs       read-only inputs must be unchanged after every launch
  statefulness launched again over its own output with some elements spoiled, it must rewrite them;
               many launches in one module; the same buffers refilled with new values must give
               the new result (catches __device__ state, pointer caches, skip-after-first-launch,
               skipping where the output looks computed)
  schedules    CPU: forward, reverse (and random) thread orders must agree bitwise — else a race;
  determinism  GPU: repeated runs must agree bitwise (with atomics: within tolerance, plus, on
               elements accumulated through atomic adds alone, what reordering them can change —
               gate/atomic_bound.py, measured on the CPU)
  sanitize     CPU: an AddressSanitizer build on small cases (out-of-bounds accesses)
With no reference (no pinned baseline yet) everything but the comparison runs, and the verdict
says so.

One run's state and bookkeeping are `state.GateState`; its stages are the subclasses `building.Building`
(screen, compile, layouts), `judging.Judging` (a candidate's outputs against the reference's),
`instrumented.Instrumented` (the sanitizer and race-checker builds) and, here, `_Gate`: the other
checks above, each a short method, and the whole gate in order.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable

import numpy as np

from ..backends.base import Backend, BackendUnavailable, LaunchError, Schedule, Unsupported
from ..model.spec import Spec
from . import compare, device_case, suite as suites
from .checks import POISONS, Run, execute, fill_host, launch_args, run_case, written
from .instrumented import Instrumented
from .state import Cancel, ReferenceFailed
from .verdict import CaseInfo, CheckResult, Verdict

if TYPE_CHECKING:
    from ..compile.extract import CompileUnit

FILLS = (0x3C, 0xBA, 0x3A, 0xB8)  # byte refills for the same-pointer test: modest values of either sign
EXTRA_LAUNCHES = 150              # more launches when the candidate keeps state or reads clocks (> a
                                  # timing loop's 20 warm-up + 100 timed)

CHECK_ORDER = ("screen", "compile", "compare", "poison", "not_constant", "inputs_unchanged", "launch",
               "statefulness", "schedules", "determinism", "sanitize", "races", "compute_sanitizer")


class _Gate(Instrumented):
    def main_suite(self, st: suites.Suite) -> None:
        assert self.drawn is not None, "the suite runs inside `_run`, which draws its inputs"
        self.each_case(st, self.drawn)
        self.constant_outputs()

    def later_draws(self, st: suites.Suite) -> list[suites.Case]:
        """The fresh inputs the checks after the suite draw, in the order they draw them, so that
        `Drawn` draws them while the suite runs: over its own output, refilled buffers, then
        the repeated runs (or thread schedules)."""
        case = suites.stateful_case(self.spec, st.cases)
        later = [suites.Case(case.sizes, "spec", case.seed + s, False, "stateful") for s in (11, 7)]
        return later + [suites.Case(c.sizes, c.distribution, c.seed + 13, False, "schedule")
                        for c in suites.schedule_cases(self.spec, st.cases, self.quick)]

    def fresh(self, sizes: dict[str, int], distribution: str, seed: int) -> dict[str, np.ndarray]:
        """A check's fresh inputs: drawn ahead where the suite announced them (`later_draws`)."""
        if self.drawn is None:
            return suites.inputs(self.spec, sizes, distribution, seed)
        return self.drawn.take(sizes, distribution, seed)

    def each_case(self, st: suites.Suite, drawn: suites.Drawn) -> None:
        cov = self.v.coverage
        for i, case in enumerate(st.cases):
            self.cancelled()
            if self.full:
                cov.notes.append(f"stopped after {len(self.v.failures)} failures; "
                                 f"{len(st.cases) - i} case(s) not run")
                break
            info = case.info()
            host = drawn.get(i)
            poison = POISONS[i % 2]
            if i in self.on_device:   # drawn, run and judged on the device (or its host inputs)
                before = len(self.v.failures)
                try:
                    back = device_case.run(self, case, info, poison)
                except LaunchError as e:
                    self.fail("launch", f"the candidate failed: {e}", info)
                    cov.record(case.sizes, case.distribution, failed=True)
                    break
                if back is None:
                    cov.launches += 1
                    cov.cases += 1
                    cov.record(case.sizes, case.distribution, failed=len(self.v.failures) > before)
                    continue
                host = back
            expected = self.expected(case.sizes, host, poison, info)
            try:
                run = run_case(self.spec, self.backend, self.candidate, case.sizes, host, self.ctypes, poison)
                cov.launches += 1
                if self.ref is None:
                    other = POISONS[(i + 1) % 2]
                    second = run_case(self.spec, self.backend, self.candidate, case.sizes, host, self.ctypes, other)
                    cov.launches += 1
            except LaunchError as e:
                # A crash rejects the candidate; on a GPU it may also have lost the context, so
                # nothing after it (the reference included) could run reliably.
                self.fail("launch", f"the candidate failed: {e}", info)
                cov.record(case.sizes, case.distribution, failed=True)
                break
            cov.cases += 1
            before = len(self.v.failures)
            self.judge("compare", info, host, run.after, expected, poison)
            if self.ref is None:
                self.self_consistency(info, host, run.after, second.after, (poison, POISONS[(i + 1) % 2]))
            cov.record(case.sizes, case.distribution, failed=len(self.v.failures) > before)

    def statefulness(self, st: suites.Suite) -> None:
        """Over its own output with some elements spoiled, the candidate must rewrite them. Same
        buffers, new values: it must compute the new result. Then (when the screen flagged state
        or clocks) extra fresh launches, each checked."""
        spec_cases = [c for c in st.cases if c.label == "spec"] or st.cases
        by_size = sorted(spec_cases, key=lambda c: self.spec.elements(c.sizes))
        case = suites.stateful_case(self.spec, st.cases)
        if not self.over_its_own_output(case):
            return
        reads = [a for a in self.spec.args.values() if a.pointer and not a.output]
        if any(not a.dtype.is_float for a in reads):
            self.v.checks.append(CheckResult("statefulness", True, "same-buffer refill skipped: integer inputs "
                                             "cannot be refilled with arbitrary bytes", skipped=True))
            return
        rounds = 4 if self.suspect else (1 if self.quick else 2)
        info = CaseInfo(dict(case.sizes), "spec", case.seed + 7, False, "stateful")
        host = self.fresh(case.sizes, "spec", info.seed)
        expected = self.expected(case.sizes, host, POISONS[0], info)
        try:
            run = run_case(self.spec, self.backend, self.candidate, case.sizes, host, self.ctypes, POISONS[0])
        except LaunchError as e:
            self.fail("launch", f"the candidate failed: {e}", info)
            return
        self.judge("statefulness", info, host, run.after, expected, POISONS[0])
        for r in range(rounds):
            self.cancelled()
            patterns = {a.name: FILLS[(r + k) % len(FILLS)] for k, a in enumerate(reads)}
            for name, byte in patterns.items():
                self.backend.fill_bytes(run.buffers[name], byte)
            poison = POISONS[(r + 1) % 2]
            for a in self.spec.args.values():
                if a.pointer and a.output:
                    self.backend.fill_bytes(run.buffers[a.name], poison)
            refill = fill_host(self.spec, case.sizes, patterns)
            rinfo = CaseInfo(dict(case.sizes), f"refilled bytes {sorted(set(patterns.values()))}", 0, False, "stateful")
            try:
                execute(self.spec, self.backend, self.candidate, case.sizes, run)
                self.v.coverage.launches += 1
                fresh = self.expected(case.sizes, refill, poison, rinfo)
                if fresh is None:  # no reference: the same values in fresh buffers must give the same result
                    fresh = run_case(self.spec, self.backend, self.candidate, case.sizes, refill, self.ctypes, poison).after
            except LaunchError as e:
                self.fail("launch", f"the candidate failed on refilled buffers: {e}", rinfo)
                return
            before = len(self.v.failures)
            self.judge("statefulness", rinfo, refill, run.after, fresh, poison)
            self.relabel(before, "launched again on the same buffers refilled with new values, the result is not "
                                 "the new one (state kept between launches or results cached by pointer?): ")
            if len(self.v.failures) > before:
                return
        if self.suspect:
            self.many_launches(by_size[0])

    def over_its_own_output(self, case: suites.Case) -> bool:
        """Launched again on the same inputs over its own output with a few elements spoiled, the
        candidate must write them again. A kernel that skips work where the output already holds
        the answer is correct on poisoned outputs and fast only where a launch is repeated — in a
        timing loop. False when it failed."""
        outs = [a for a in self.spec.args.values() if a.pointer and a.output]
        if not outs:
            return True
        info = CaseInfo(dict(case.sizes), "spec", case.seed + 11, False, "stateful")
        host = self.fresh(case.sizes, "spec", info.seed)
        expected = self.expected(case.sizes, host, POISONS[0], info)
        rng = np.random.default_rng(self.nonce)
        try:
            first = run_case(self.spec, self.backend, self.candidate, case.sizes, host, self.ctypes, POISONS[0])
            self.v.coverage.launches += 1
            buffers, spoiled = dict(first.buffers), 0
            for a in self.spec.args.values():
                if a.pointer and a.output:
                    arr = first.after[a.name].copy()
                    flat = arr.reshape(-1).view(np.uint8).reshape(arr.size, -1)
                    picks = np.unique(np.concatenate([[0, arr.size - 1], rng.integers(0, arr.size, arr.size // 100)]))
                    flat[picks] = POISONS[1]
                    spoiled += picks.size
                    buffers[a.name] = self.backend.upload(arr)
                elif a.pointer and a.inout:
                    buffers[a.name] = self.backend.upload(host[a.name])
            again = execute(self.spec, self.backend, self.candidate, case.sizes,
                            Run(launch_args(self.spec, buffers, case.sizes, self.ctypes), buffers))
            self.v.coverage.launches += 1
        except LaunchError as e:
            self.fail("launch", f"the candidate failed: {e}", info)
            return False
        before = len(self.v.failures)
        self.judge("statefulness", info, host, again.after, expected if expected is not None else first.after,
                   POISONS[1])
        self.relabel(before, f"launched again on the same inputs over its own output with {spoiled} elements "
                             f"spoiled, it did not write them all (it skips work where the output looks computed): ")
        return len(self.v.failures) == before

    def many_launches(self, case: suites.Case) -> None:
        """A kernel that keeps state or reads clocks may change behaviour after some launches
        or some time (warm-up detection): launch it EXTRA_LAUNCHES more times on a small case,
        rotating fresh buffers over a few input sets, and check every result."""
        sets = []
        for k in range(4):
            info = CaseInfo(dict(case.sizes), "spec", case.seed + 100 + k, False, "stateful")
            host = suites.inputs(self.spec, case.sizes, "spec", info.seed)
            exp = self.expected(case.sizes, host, POISONS[k % 2], info)
            if exp is None:  # no reference: the candidate's own first result on these inputs
                exp = run_case(self.spec, self.backend, self.candidate, case.sizes, host, self.ctypes, POISONS[k % 2]).after
            sets.append((info, host, exp))
        for n in range(EXTRA_LAUNCHES):
            if n % 16 == 0:
                self.cancelled()
            info, host, exp = sets[n % len(sets)]
            poison = POISONS[n % 2]
            try:
                got = run_case(self.spec, self.backend, self.candidate, case.sizes, host, self.ctypes, poison)
            except LaunchError as e:
                self.fail("launch", f"the candidate failed on extra launch {n + 1}: {e}", info)
                return
            self.v.coverage.launches += 1
            before = len(self.v.failures)
            self.judge("statefulness", info, host, got.after, exp, poison)
            self.relabel(before, f"on extra launch {n + 1} of {EXTRA_LAUNCHES} (the kernel keeps state or reads "
                                 f"clocks): ")
            if len(self.v.failures) > before:
                return

    def orders(self, st: suites.Suite) -> None:
        """Where launches take a thread schedule (the CPU), schedules must not change the result
        (a race otherwise); elsewhere (the GPU) repeated runs must agree."""
        scheduled = self.caps.thread_schedules
        check = "schedules" if scheduled else "determinism"
        schedules: list[Schedule | None]
        if scheduled:
            schedules = [Schedule("forward"), Schedule("reverse")]
            if not self.quick:
                schedules.append(Schedule("random", self.nonce))
        else:
            schedules = [None, None]   # repeated runs
        for case in suites.schedule_cases(self.spec, st.cases, self.quick):
            self.cancelled()
            info = CaseInfo(dict(case.sizes), case.distribution, case.seed + 13, case.visible, "schedule")
            host = self.fresh(case.sizes, case.distribution, info.seed)
            expected = self.expected(case.sizes, host, POISONS[0], info)
            runs = []
            for k, sch in enumerate(schedules):
                try:
                    runs.append(run_case(self.spec, self.backend, self.candidate, case.sizes, host, self.ctypes,
                                         POISONS[k % 2], sch).after)
                    self.v.coverage.launches += 1
                except LaunchError as e:
                    self.fail("launch", f"the candidate failed ({sch.order if sch else 'repeat'} schedule): {e}", info)
                    return
            names = [s.order if s else f"run {k + 1}" for k, s in enumerate(schedules)]
            for k in range(1, len(runs)):
                for name in written(self.spec):
                    a, b = runs[0][name], runs[k][name]
                    extra = ""
                    if self.atomics:
                        m, extra = self.atomic_runs(info, host, POISONS[0], name, a, b)
                        diff = None if m is None else (m.bad, m.index)
                    else:
                        diff = compare.first_difference(a, b)
                    if diff is None:
                        self.count(check)
                        continue
                    n, idx = diff
                    what = ("the result depends on the thread schedule — a data race"
                            + ("" if extra else " (a missing __syncthreads()?)")
                            if scheduled else "two runs on the same inputs give different results")
                    self.fail(check, f"{what}: `{name}` differs between the {names[0]} and {names[k]} runs in {n} "
                              f"element(s), first at {name}[{', '.join(map(str, idx))}] "
                              f"({float(compare.as_f64(a)[idx]):.6g} vs {float(compare.as_f64(b)[idx]):.6g})"
                              + (extra or (compare.ATOMICS_WHY if self.atomics else "")),
                              info, output=name, index=list(idx), bad=n)
                    return
            if expected is not None:
                for k, r in enumerate(runs):
                    before = len(self.v.failures)
                    self.judge(check, info, host, r, expected, POISONS[k % 2])
                    if len(self.v.failures) > before:
                        return

    # ---- the whole gate ----------------------------------------------------------------------
    def run(self) -> Verdict:
        t0 = time.perf_counter()
        try:
            self._run()
        except ReferenceFailed as e:
            self.v.status, self.v.log = "error", str(e)
        except Unsupported as e:
            self.v.status, self.v.log = "unsupported", f"the {self.backend.name} backend cannot run this kernel: {e}"
        except BackendUnavailable as e:
            self.v.status, self.v.log = "error", f"the {self.backend.name} backend is unavailable: {e}"
        finally:
            self.stop_builds()
        self.v.seconds = round(time.perf_counter() - t0, 3)
        return self.v

    def _run(self) -> None:
        v = self.v
        t = time.perf_counter()
        ok = self.screen()
        v.timings["screen"] = round(time.perf_counter() - t, 3)
        t = time.perf_counter()
        ok = ok and self.compile_all()
        v.timings["compile"] = round(time.perf_counter() - t, 3)
        if not ok:
            self.finish()
            return
        if not self.read_layouts():
            self.finish()
            return
        st = suites.build(self.rspec, measures_time=self.caps.timing, nonce=self.nonce, quick=self.quick)
        cov = v.coverage
        cov.sizes = len({tuple(sorted(c.sizes.items())) for c in st.cases})
        cov.seeds = sorted({c.seed for c in st.cases})
        cov.distributions = sorted({c.distribution for c in st.cases})
        cov.held_out = st.held_out
        cov.bench_sizes = st.bench_note
        cov.notes.extend(st.notes)
        if self.ref is None:
            cov.notes.append("no reference (no pinned baseline yet): self-consistency checks only, no comparison")
        if not st.cases:
            v.status = "error"
            v.log = (f"no test case fits the {self.backend.name} backend's limits (every size is too large); "
                     f"add smaller [sizes] to the spec")
            return
        self.on_device = {i for i, c in enumerate(st.cases) if device_case.eligible(self, c)}
        if self.on_device:
            cov.notes.append(f"{len(self.on_device)} large case(s) drawn, run and compared on the device "
                             f"(inputs checked unchanged by keyed digests)")
        self.drawn = suites.Drawn(self.spec, st.cases, self.later_draws(st), self.on_device)
        try:
            for name, step in self.steps():
                if v.failures:
                    break
                t = time.perf_counter()
                step(st)
                v.timings[name] = round(time.perf_counter() - t, 3)
        finally:
            self.drawn.close()
            self.drawn = None
        if self.verify_reference and not v.failures:
            t = time.perf_counter()
            self.reference_on_its_own(st)
            v.timings["reference"] = round(time.perf_counter() - t, 3)
        self.finish()

    def steps(self) -> list[tuple[str, Callable[[suites.Suite], None]]]:
        """The checks after the build, in order, each over the suite."""
        steps: list[tuple[str, Callable[[suites.Suite], None]]] = [
            ("suite", self.main_suite), ("statefulness", self.statefulness),
            ("schedules" if self.caps.thread_schedules else "determinism", self.orders)]
        if self.quick and self.bounds and self.caps.address_sanitizer:
            steps.append(("sanitize", self.sanitize))
        if not self.quick:
            if self.caps.address_sanitizer:
                steps.append(("sanitize", self.sanitize))
            if self.caps.race_checker:
                steps.append(("races", self.races))
            if self.caps.compute_sanitizer and self.sanitizer is not False:
                steps.append(("compute_sanitizer", lambda _st: self.compute_sanitizer()))
        return steps

    def reference_on_its_own(self, st: suites.Suite) -> None:
        """`verify_reference`: the reference through the checks of its own gate (itself as its
        reference) that the suite did not already make of its runs here — screening, statefulness,
        determinism or thread schedules, the sanitizers — sharing this gate's build and suite. Any
        failure makes this verdict an error that names the reference."""
        unit = self.ref_unit
        assert unit is not None and self.ref is not None
        own = _Gate(unit, unit, self.rspec, self.backend, self.quick, self.cancel, self.nonce, self.max_failures,
                    self.sanitizer, None, self.bounds, self.rounding)
        own.ref = own.cand = self.ref
        own.ctypes = self.ctypes
        own.rounding_ref = self.rounding_ref
        if own.screen():
            for name, step in own.steps():
                if own.v.failures:
                    break
                if name != "suite":   # its runs there are this gate's reference runs, judged as they ran
                    step(st)
        self.v.coverage.launches += own.v.coverage.launches
        own.finish()
        if own.v.failures:
            f = own.v.failures[0]
            self.v.status = "error"
            self.v.log = (f"the reference does not pass the gate on its own ({f.check}"
                          f"{': ' + f.case.describe() if f.case else ''}): {f.message}")

    def finish(self) -> None:
        v = self.v
        have = {c.name for c in v.checks}
        for name in CHECK_ORDER:
            if name in self.ran and name not in have:
                runs, bad = self.ran[name]
                v.checks.append(CheckResult(name, bad == 0, f"{runs - bad} of {runs} passed"))
        if v.failures and v.status == "passed":
            v.status = "failed"
        failed = {f.check for f in v.failures}
        for c in v.checks:
            if c.name in failed:
                c.passed = False



def check(reference: CompileUnit | None, candidate: CompileUnit, spec: Spec, backend: Backend, *, quick: bool = False,
          cancel: Cancel = None, seed: int | None = None, max_failures: int | None = None,
          sanitizer: bool | None = None, reference_spec: Spec | None = None, bounds: bool = False,
          rounding: Backend | None = None, verify_reference: bool = False) -> Verdict:
    """Run the gate on two compile units (reference None:
    no pinned baseline yet — self-consistency only). `cancel`: a threading.Event or a callable
    returning True to stop (raises Cancelled). `seed`: reproduce an earlier run (its verdict's
    `nonce`); by default inputs are fresh every run. `quick`: one seed, fewer sizes, no sanitizer
    build — for checks on save. `sanitizer=False` skips compute-sanitizer on the GPU (it runs
    by default in full checks where it is installed). `spec` launches the candidate;
    `reference_spec` (default: `spec`) launches the reference, when a rewrite changed the launch.
    `bounds`: a quick check that still runs the address-sanitizer build (out-of-bounds accesses).
    `rounding`: a backend with rounding modes (the CPU) that measures the reference's own rounding
    error where `backend` cannot (the GPU); see ROUNDING_FACTOR.
    `verify_reference`: the reference has not passed the gate on its own yet (an original that a
    rerun checks together with its remembered rewrite): in the same suite — each case's inputs
    drawn once, the reference run once — its runs are judged as its own gate judges them (read-only
    inputs unchanged, every output written), and its own checks of a single kernel run after the
    candidate's; a failure of the reference makes the verdict an error that names it."""
    return _Gate(reference, candidate, spec, backend, quick, cancel, seed, max_failures, sanitizer,
                 reference_spec, bounds, rounding, verify_reference).run()


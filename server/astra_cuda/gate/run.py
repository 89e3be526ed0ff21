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
  determinism  GPU: repeated runs must agree bitwise (within tolerance with atomics)
  sanitize     CPU: an AddressSanitizer build on small cases (out-of-bounds accesses)
With no reference (no pinned baseline yet) everything but the comparison runs, and the verdict
says so.

Long because every check shares one verdict's bookkeeping (`_Gate`); each check is a short method.
"""
from __future__ import annotations

import os
import re
import secrets
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from .. import redact
from ..backends.base import Backend, BackendUnavailable, CompileError, LaunchError, Schedule, Unsupported
from ..errors import AstraError
from ..model.spec import Spec
from . import compare, screen as screening, suite as suites
from .checks import (POISONS, Compiled, Run, arg_types, changed_inputs, execute, fill_host, launch_args, run_case,
                     written)
from .verdict import CaseInfo, CheckResult, Failure, Verdict

if TYPE_CHECKING:
    from ..compile.extract import CompileUnit

Arrays = dict[str, np.ndarray]   # argument name -> its values on the host

FILLS = (0x3C, 0xBA, 0x3A, 0xB8)  # byte refills for the same-pointer test: modest values of either sign
EXTRA_LAUNCHES = 150              # more launches when the candidate keeps state or reads clocks (> a
                                  # timing loop's 20 warm-up + 100 timed)
# The rounding allowance (floating-point outputs that fail the tolerance): the reference is run
# again with IEEE directed rounding (where a backend can: the CPU's, for GPU checks too), and how
# far that moves each element is its own rounding error, made visible (Kahan's test of a
# computation's sensitivity to roundoff). A candidate as accurate as the reference lies within
# that distance of the exact result, as the reference does, so within twice it of the reference:
# a reordered reduction passes, an approximation (a wrong sigmoid, a missing Newton step) does
# not, and nothing the candidate does moves the allowance.
ROUNDING_DIRECTIONS = ("upward", "downward", "towardzero")
ROUNDING_FACTOR = 2.0
ROUNDING_MAX_ELEMENTS = 1 << 26   # per case, on a rounding backend that is not the gate's own (the GPU's
                                  # large cases; ~a few seconds of CPU per direction)
BUILD_THREADS = 2                 # builds at once where the backend prefetches (0: one after another).
                                  # Two, not four: the reference and candidate, which everything waits
                                  # on, get a core each

Cancel = threading.Event | Callable[[], bool] | None


class Cancelled(AstraError):
    def __init__(self) -> None:
        super().__init__("the check was cancelled")


CHECK_ORDER = ("screen", "compile", "compare", "poison", "not_constant", "inputs_unchanged", "launch",
               "statefulness", "schedules", "determinism", "sanitize", "races", "compute_sanitizer")


class _Gate:
    def __init__(self, reference: CompileUnit | None, candidate: CompileUnit, spec: Spec, backend: Backend,
                 quick: bool, cancel: Cancel, seed: int | None,
                 max_failures: int | None, sanitizer: bool | None = None, reference_spec: Spec | None = None,
                 bounds: bool = False, rounding: Backend | None = None):
        self.sanitizer = sanitizer
        self.bounds = bounds   # the address-sanitizer build even when quick (inference's trial runs)
        # Where the reference runs with directed rounding: this backend if it can, else `rounding`
        # (the CPU beside a GPU), else nowhere (no allowance: the tolerance alone).
        self.rounding = backend if backend.caps.rounding_modes else (
            rounding if rounding is not None and rounding.caps.rounding_modes else None)
        self.rounding_ref: Compiled | None = None   # the reference built for `rounding` when it is another backend
        self.rounding_noted: set[str] = set()
        self.ref_unit, self.cand_unit, self.spec, self.backend = reference, candidate, spec, backend
        # A rewrite may change the launch configuration (with the launch site): the reference
        # keeps its own. Cases come from the reference's spec, so a candidate cannot shed a size
        # by making its launch invalid there.
        self.rspec = reference_spec or spec
        self.quick = quick
        self.cancel = cancel
        self.nonce = seed if seed is not None else secrets.randbits(31)
        self.max_failures = max_failures if max_failures is not None else (1 if quick else 8)
        self.v = Verdict(kernel=spec.kernel, backend=backend.name, status="passed", nonce=self.nonce,
                         compared=reference is not None)
        self.ran: dict[str, list[int]] = {}   # check -> [runs, failures]
        # No reference: outputs found constant (name, case, value) and outputs seen varying, for
        # the constant-output rule, which needs the whole suite (`constant_outputs`).
        self.constants: list[tuple[str, CaseInfo, float]] = []
        self.varying: set[str] = set()
        self.ref: Compiled | None = None
        self.cand: Compiled | None = None
        self.atomics = False
        self.suspect = False
        self.caps = backend.caps
        self.builds: dict[str, Future[Compiled]] = {}
        self.pool: ThreadPoolExecutor | None = None

    @property
    def reference(self) -> Compiled:
        """The reference, built (asked for only where there is one)."""
        assert self.ref is not None
        return self.ref

    @property
    def candidate(self) -> Compiled:
        """The candidate, built: every check after 'compile' runs on it."""
        assert self.cand is not None
        return self.cand

    # ---- bookkeeping -------------------------------------------------------------------------
    def cancelled(self) -> None:
        c = self.cancel
        if c is not None and (c.is_set() if isinstance(c, threading.Event) else c()):
            raise Cancelled()

    def count(self, check: str, ok: bool = True) -> None:
        r = self.ran.setdefault(check, [0, 0])
        r[0] += 1
        r[1] += 0 if ok else 1

    def fail(self, check: str, message: str, case: CaseInfo | None = None, **kw: Any) -> None:
        self.count(check, False)
        if "line" not in kw:  # sanitizer and fault reports name the user's file and line
            m = re.search(re.escape(os.path.basename(self.cand_unit.path)) + r":(\d+)", message)
            kw["line"] = int(m.group(1)) if m else None
        self.v.failures.append(Failure(check, message, case, **kw))

    def relabel(self, start: int, prefix: str, check: str = "statefulness") -> None:
        """Failures found by a statefulness run count against that check, whatever caught them."""
        for f in self.v.failures[start:]:
            if f.check in ("compare", "not_constant", "poison"):
                self.ran[f.check][1] -= 1
                self.ran[f.check][0] -= 1
                self.count(check, False)
                f.check = check
            f.message = prefix + f.message

    @property
    def full(self) -> bool:
        return len(self.v.failures) >= self.max_failures

    def tol(self, name: str) -> tuple[float, float]:
        return self.spec.args[name].tolerance

    # ---- steps -------------------------------------------------------------------------------
    def screen(self) -> bool:
        res = screening.screen(self.ref_unit.source if self.ref_unit else None, self.cand_unit.source,
                               self.cand_unit.kernel, self.spec)
        self.atomics, self.suspect = res.uses_atomics, res.stateful_suspect
        for f in res.errors:
            self.fail("screen", f.message, line=f.line)
        for f in res.warnings:
            self.v.warnings.append(f"line {f.line}: {f.message}" if f.line else f.message)
        if self.ref_unit is not None:
            self.v.warnings.extend(self.backend.numerics_warnings(self.ref_unit.source, self.cand_unit.source))
        if res.fast_math:
            self.v.coverage.notes.append(f"fast-math intrinsics added: {', '.join(res.fast_math)}")
        self.v.checks.append(CheckResult("screen", not res.errors,
                                         f"{len(res.errors)} error(s), {len(res.warnings)} flag(s)"))
        return not res.errors

    def compile(self, unit: CompileUnit, role: str, sanitize: bool = False, races: bool = False) -> Compiled:
        mod = self.backend.compile_unit(unit, sanitize=sanitize, races=races)
        return Compiled(mod, unit.name_expression, role)

    def read_layouts(self) -> bool:
        """The C++ types of the scalar parameters and the layout of each struct parameter, as
        the candidate's module has it; the reference's must be the same (a rewrite may not
        change what the kernel is given)."""
        assert self.cand is not None
        try:
            self.ctypes = arg_types(self.spec, self.backend, self.cand, self.cand_unit.param_types)
            if self.ref is not None and self.ref_unit is not None and any(a.struct for a in self.spec.args.values()):
                theirs = arg_types(self.rspec, self.backend, self.ref, self.ref_unit.param_types)
                changed = [n for n, a in self.spec.args.items() if a.struct and theirs.get(n) != self.ctypes.get(n)]
                if changed:
                    self.fail("screen", f"the candidate lays out struct parameter {changed[0]!r} differently from the "
                                        f"reference: a rewrite may not change what the kernel is given")
                    return False
        except LaunchError as e:
            self.fail("compile", f"the struct parameters cannot be assembled: {e}")
            return False
        return True

    def start_builds(self) -> None:
        """Where builds are subprocesses (caps.build_prefetch: g++ on the CPU), start every build
        this gate will need at once — threads overlap — and take each result in the usual order
        when its check comes. A build that an earlier failure makes unneeded still finishes into
        the compile cache (queued ones are dropped). Elsewhere builds stay sequential: an NVRTC
        compile takes ~35 ms."""
        if not self.caps.build_prefetch or BUILD_THREADS < 2:
            return
        plan: dict[str, tuple[CompileUnit, str, dict[str, bool]]] = {}
        if self.ref_unit is not None:
            plan["reference"] = (self.ref_unit, "reference", {})
        plan["candidate"] = (self.cand_unit, "candidate", {})
        if (not self.quick or self.bounds) and self.caps.address_sanitizer:
            plan["sanitize"] = (self.cand_unit, "candidate", {"sanitize": True})
        if not self.quick and self.caps.race_checker:
            plan["races"] = (self.cand_unit, "candidate", {"races": True})
        self.pool = ThreadPoolExecutor(BUILD_THREADS, thread_name_prefix="astra-build")
        self.builds = {key: self.pool.submit(self.compile, unit, role, **kw) for key, (unit, role, kw) in plan.items()}

    def built(self, key: str, unit: CompileUnit, role: str, **kw: bool) -> Compiled:
        """The build started for `key`, else a compile now. Raises what the compile raised."""
        future = self.builds.pop(key, None)
        return future.result() if future is not None else self.compile(unit, role, **kw)

    def stop_builds(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool, self.builds = None, {}

    def device_compile(self) -> bool:
        """CPU backend: GPU first. Both units must compile for the GPU (nvcc on the whole file
        where a CUDA toolkit is installed, else NVRTC on the unit; nothing runs) before any of
        their code runs on the host: host-only code in a kernel (file I/O, processes, hidden
        behind `#ifndef __CUDACC_RTC__` or not) is an error, never a pass."""
        from ..compile import static

        for unit, role in ((self.ref_unit, "reference"), (self.cand_unit, "candidate")):
            if unit is None:
                continue
            r = static.compile_unit(unit)
            self.v.compiler = r.compiler
            if r.ok:
                continue
            errors = [d for d in r.diagnostics if d.severity == "error"] or r.diagnostics
            log = redact.included(r.log, unit.path)  # never the text of an included .env
            said = "; ".join(d.human(os.path.basename(unit.path)) for d in errors[:4]) or log[-600:]
            msg = (f"the {role} does not compile for the GPU ({r.compiler or 'NVRTC'}), so it is not run on the CPU: "
                   f"{said}")
            if role == "reference":
                self.v.status, self.v.log = "error", msg
            else:
                self.v.log = log
                self.fail("compile", msg, line=errors[0].line + 1 if errors else None)
                self.v.checks.append(CheckResult("compile", False, msg))
            return False
        return True

    def cut_check(self) -> bool:
        """CPU backend: each unit cut out of its file for the host compiler must mean what the
        file means (`astra_cuda.compile.cutcheck`, nvcc): a cut that changes the kernel is an error that
        names what it left out, never a run of other code."""
        from ..compile import cutcheck

        for unit, role in ((self.ref_unit, "reference"), (self.cand_unit, "candidate")):
            if unit is None:
                continue
            r = cutcheck.check(unit)
            if not r.checked:
                self.v.coverage.notes.append(f"{role}: {r.message}")
            elif not r.ok:
                self.v.status, self.v.log = "error", f"the {role} cannot be run on the CPU: {r.message}"
                return False
        return True

    def compile_all(self) -> bool:
        if self.caps.host_code and not (self.device_compile() and self.cut_check()):
            return False
        self.start_builds()
        if self.ref_unit is not None:
            try:
                self.ref = self.built("reference", self.ref_unit, "reference")
            except CompileError as e:
                self.v.status, self.v.log = "error", f"the reference does not compile: {e}\n{e.log}"
                return False
            except Unsupported as e:
                self.v.status, self.v.log = "unsupported", f"the reference cannot run on the {self.backend.name}: {e}"
                return False
        try:
            self.cand = self.built("candidate", self.cand_unit, "candidate")
        except CompileError as e:
            self.v.log = e.log
            self.fail("compile", f"the candidate does not compile: {e}")
            self.v.checks.append(CheckResult("compile", False, str(e)))
            return False
        except Unsupported as e:
            self.v.status, self.v.log = "unsupported", f"the candidate cannot run on the {self.backend.name}: {e}"
            return False
        built = self.cand.module.compiler
        if built and not self.caps.host_code:
            self.v.compiler = built
        said = f" ({self.v.compiler})" if self.v.compiler else ""
        self.v.checks.append(CheckResult("compile", True, ("reference and candidate" if self.ref else "candidate") + said))
        return True

    def expected(self, sizes: dict[str, int], host: Arrays, poison: int, info: CaseInfo,
                 schedule: Schedule | None = None) -> Arrays | None:
        """The reference's outputs (None when there is no reference). A failing reference is the
        user's problem, reported as an error."""
        if self.ref is None:
            return None
        try:
            after = run_case(self.rspec, self.backend, self.ref, sizes, host, self.ctypes, poison, schedule,
                             written_only=True).after
            self.reference_writes_everything(after, sizes, host, poison, info)
            return after
        except LaunchError as e:
            raise _ReferenceFailed(f"the reference kernel failed on {info.describe()}: {e}") from None

    def reference_writes_everything(self, after: Arrays, sizes: dict[str, int], host: Arrays, poison: int,
                                    info: CaseInfo) -> None:
        """A reference that leaves part of an output unwritten (launched with another
        version's grid, or a spec whose shapes are larger than what it writes) gives nothing to
        compare with: that is a spec problem, reported as such, never a comparison."""
        suspect = [a.name for a in self.rspec.args.values() if a.output
                   and compare.poison_mask(after[a.name], poison).any()]
        if not suspect:
            return
        other = POISONS[1] if poison == POISONS[0] else POISONS[0]  # a value may equal the poison by chance
        again = run_case(self.rspec, self.backend, self.reference, sizes, host, self.ctypes, other,
                         written_only=True).after
        for name in suspect:
            unwritten = compare.poison_mask(after[name], poison) & compare.poison_mask(again[name], other)
            if unwritten.any():
                g, b, _ = self.rspec.launch_dims(sizes)
                raise _ReferenceFailed(
                    f"spec problem: the reference kernel leaves {int(unwritten.sum())} of {unwritten.size} elements "
                    f"of `{name}` unwritten on {info.describe()} (launched with grid {g}, block {b}); nothing was "
                    f"compared. Check the reference's own spec (its grid and block: a reference with a spec of its "
                    f"own runs with its own launch) and the shape of `{name}`.")

    def judge(self, check_values: str, info: CaseInfo, host: Arrays, after: Arrays, expected: Arrays | None,
              poison: int) -> bool:
        """Compare one launch's results. `check_values` names the check a value mismatch counts
        against ('compare', 'statefulness', 'schedules', ...). True when all is well."""
        ok = True
        for name, n, idx in changed_inputs(self.spec, host, after):
            self.fail("inputs_unchanged", f"the read-only input `{name}` was modified: {n} element(s) changed, "
                      f"first at {name}[{', '.join(map(str, idx))}]", info, output=name, index=list(idx), bad=n)
            ok = False
        if ok and any(a.pointer and not a.written for a in self.spec.args.values()):
            self.count("inputs_unchanged")
        if expected is None:
            return ok
        allowance: dict[str, np.ndarray] | None = None  # measured once per launch, only when needed
        for name in written(self.spec):
            atol, rtol = self.tol(name)
            poison_byte = poison if self.spec.args[name].output else None
            m = compare.compare(expected[name], after[name], atol, rtol, poison=poison_byte)
            if m is not None and m.kind == "values" and self.spec.args[name].dtype.is_float:
                if allowance is None:
                    allowance = self.rounding_allowance(info, host, poison, expected)
                if name in allowance:
                    m = compare.compare(expected[name], after[name], atol, rtol, poison=poison_byte,
                                        allowance=allowance[name])
                    if m is None and name not in self.rounding_noted:
                        self.rounding_noted.add(name)
                        self.v.coverage.notes.append(
                            f"`{name}` differs from the reference beyond atol={atol:g}, rtol={rtol:g} on "
                            f"{info.describe()}, but within twice the reference's own rounding error there (up to "
                            f"{float(allowance[name].max()):.3g}: the reference run with directed rounding): accepted "
                            f"as a reordering of the same arithmetic")
            if m is None:
                self.count(check_values)
                if poison_byte is not None:
                    self.count("poison")
                    self.count("not_constant")
                continue
            check = {"unwritten": "poison", "constant": "not_constant"}.get(m.kind, check_values)
            self.fail(check, m.message(name, atol, rtol), info, output=name, index=list(m.index), bad=m.bad,
                      total=m.total, max_abs_err=m.max_abs_err if m.kind == "values" else None,
                      max_rel_err=m.max_rel_err if m.kind == "values" else None, expected=m.expected, got=m.got)
            ok = False
        return ok

    def rounding_allowance(self, info: CaseInfo, host: Arrays, poison: int, expected: Arrays) -> Arrays:
        """Per floating-point written argument: ROUNDING_FACTOR times how far the reference's result
        moves when its arithmetic rounds upward, downward or toward zero instead of to nearest, on
        these inputs. Empty where that cannot be measured (no backend with rounding modes, a
        case too large for the CPU, a reference the CPU cannot run): the tolerance alone."""
        be = self.rounding
        if be is None or self.ref is None:
            return {}
        sizes = info.sizes
        try:
            if be is self.backend:
                ref, base = self.ref, expected
            else:
                if self.rspec.elements(sizes) > ROUNDING_MAX_ELEMENTS:
                    return {}
                if self.rounding_ref is None:
                    unit = self.ref_unit
                    assert unit is not None   # a built reference has its unit
                    self.rounding_ref = Compiled(be.compile(unit.source + unit.appendix, [unit.name_expression], filename=unit.path,
                                                            options=unit.options()), unit.name_expression, "reference")
                ref = self.rounding_ref
                base = run_case(self.rspec, be, ref, sizes, host, self.ctypes, poison, written_only=True).after
            runs = [run_case(self.rspec, be, ref, sizes, host, self.ctypes, poison, Schedule(rounding=d),
                             written_only=True).after for d in ROUNDING_DIRECTIONS]
        except (LaunchError, CompileError, Unsupported, BackendUnavailable) as e:
            if self.rounding is not self.backend:
                self.rounding = None  # once is enough: the tolerance alone from now on
            self.v.warnings.append(f"the reference's own rounding error could not be measured ({e}): "
                                   f"the tolerance alone judges")
            return {}
        out = {}
        for a in self.rspec.args.values():
            if not (a.written and a.dtype.is_float):
                continue
            b = compare.as_f64(base[a.name])
            with np.errstate(invalid="ignore", over="ignore"):
                spread = np.zeros(b.shape)
                for r in runs:
                    d = np.abs(compare.as_f64(r[a.name]) - b)
                    spread = np.maximum(spread, np.where(np.isfinite(d), d, 0.0))  # NaN/inf: no allowance
            out[a.name] = ROUNDING_FACTOR * spread
        return out

    def self_consistency(self, info: CaseInfo, host: Arrays, first: Arrays, second: Arrays,
                         poisons: tuple[int, int]) -> bool:
        """No reference: two runs with different poisons must agree, and be written everywhere."""
        ok = True
        for name in written(self.spec):
            a, b = first[name], second[name]
            if self.spec.args[name].output:
                unwritten = compare.poison_mask(a, poisons[0]) & compare.poison_mask(b, poisons[1])
                if unwritten.any():
                    idx = compare._first(unwritten)
                    self.fail("poison", f"`{name}`: {int(unwritten.sum())} of {a.size} elements were never written "
                              f"(still hold the poison bytes), first at {name}[{', '.join(map(str, idx))}]",
                              info, output=name, index=list(idx), bad=int(unwritten.sum()), total=a.size)
                    ok = False
                    continue
                self.count("poison")
            atol, rtol = self.tol(name)
            m = compare.compare(a, b, atol, rtol, exact=not self.atomics, check_constant=False)
            if m is not None:
                self.fail("determinism", "two runs on the same inputs disagree: " + m.message(name, atol, rtol),
                          info, output=name, index=list(m.index), bad=m.bad, total=m.total)
                ok = False
            else:
                self.count("determinism")
            output = self.spec.args[name].output
            if output and a.size >= 16 and compare.is_constant(a) and \
                    not any(arr.size > 1 and compare.is_constant(arr) for arr in host.values()):
                self.constants.append((name, info, float(compare.as_f64(a).flat[0])))  # judged at the end
            else:
                self.count("not_constant")
                if output and a.size > 1 and not compare.is_constant(a):
                    self.varying.add(name)
        return ok

    def constant_outputs(self) -> None:
        """No reference: an output that is constant although its inputs are random fails, unless
        the case is degenerate (a size of 1: a LayerNorm over C = 1 is its bias everywhere) and the
        same kernel's output varies on the suite's other cases. A kernel that writes constants
        writes them everywhere; one that writes them on the real sizes only is refused too."""
        for name, info, value in self.constants:
            degenerate = [k for k, v in info.sizes.items() if v == 1]
            if degenerate and name in self.varying:
                self.count("not_constant")
                self.v.coverage.notes.append(
                    f"`{name}` is constant on {info.describe()}: a degenerate size "
                    f"({', '.join(f'{k}=1' for k in degenerate)}); it varies with the inputs on the other cases")
                continue
            if name in self.varying:   # the kernel itself ignores its inputs at these sizes: say so
                why = (f" on {', '.join(f'{k}={v}' for k, v in info.sizes.items())}, while it varies with them on "
                       f"the suite's other cases: at these sizes the kernel ignores its inputs — a kernel bug (work "
                       f"skipped there, e.g. a loop whose first index is already past the end), unless the program "
                       f"never uses such sizes (then leave them out of the spec's [sizes])")
            else:
                why = ", on every case of the suite"
            self.fail("not_constant", f"`{name}` is constant ({value:.6g} everywhere) although its inputs are random"
                      + why, info, output=name)

    def main_suite(self, st: suites.Suite) -> None:
        cov = self.v.coverage
        for i, case in enumerate(st.cases):
            self.cancelled()
            if self.full:
                cov.notes.append(f"stopped after {len(self.v.failures)} failures; "
                                 f"{len(st.cases) - i} case(s) not run")
                break
            info = case.info()
            host = suites.inputs(self.spec, case.sizes, case.distribution, case.seed)
            poison = POISONS[i % 2]
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
        self.constant_outputs()

    def statefulness(self, st: suites.Suite) -> None:
        """Over its own output with some elements spoiled, the candidate must rewrite them. Same
        buffers, new values: it must compute the new result. Then (when the screen flagged state
        or clocks) extra fresh launches, each checked."""
        spec_cases = [c for c in st.cases if c.label == "spec"] or st.cases
        by_size = sorted(spec_cases, key=lambda c: self.spec.elements(c.sizes))
        case = by_size[len(by_size) // 2]
        if not self.over_its_own_output(case):
            return
        reads = [a for a in self.spec.args.values() if a.pointer and not a.output]
        if any(not a.dtype.is_float for a in reads):
            self.v.checks.append(CheckResult("statefulness", True, "same-buffer refill skipped: integer inputs "
                                             "cannot be refilled with arbitrary bytes", skipped=True))
            return
        rounds = 4 if self.suspect else (1 if self.quick else 2)
        info = CaseInfo(dict(case.sizes), "spec", case.seed + 7, False, "stateful")
        host = suites.inputs(self.spec, case.sizes, "spec", info.seed)
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
        host = suites.inputs(self.spec, case.sizes, "spec", info.seed)
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
        spec_cases = sorted([c for c in st.cases if c.label == "spec"], key=lambda c: self.spec.elements(c.sizes))
        edges = [c for c in st.cases if c.label == "edge"]
        picks = [spec_cases[len(spec_cases) // 2]] if spec_cases else st.cases[:1]
        if edges and not self.quick:
            picks.append(max(edges, key=lambda c: self.spec.elements(c.sizes)))
        for case in picks:
            self.cancelled()
            info = CaseInfo(dict(case.sizes), case.distribution, case.seed + 13, case.visible, "schedule")
            host = suites.inputs(self.spec, case.sizes, case.distribution, info.seed)
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
                    if self.atomics:
                        atol, rtol = self.tol(name)
                        m = compare.compare(a, b, atol, rtol, check_constant=False)
                        diff = None if m is None else (m.bad, m.index)
                    else:
                        diff = compare.first_difference(a, b)
                    if diff is None:
                        self.count(check)
                        continue
                    n, idx = diff
                    what = ("the result depends on the thread schedule — a data race (a missing __syncthreads()?)"
                            if scheduled else "two runs on the same inputs give different results")
                    self.fail(check, f"{what}: `{name}` differs between the {names[0]} and {names[k]} runs in {n} "
                              f"element(s), first at {name}[{', '.join(map(str, idx))}] "
                              f"({float(compare.as_f64(a)[idx]):.6g} vs {float(compare.as_f64(b)[idx]):.6g})",
                              info, output=name, index=list(idx), bad=n)
                    return
            if expected is not None:
                for k, r in enumerate(runs):
                    before = len(self.v.failures)
                    self.judge(check, info, host, r, expected, POISONS[k % 2])
                    if len(self.v.failures) > before:
                        return

    def compile_variant(self, **kw: bool) -> Compiled:
        """A sanitizer/race-checker build; a compiler timeout (a loaded machine) gets one retry."""
        try:
            return self.built("races" if kw.get("races") else "sanitize", self.cand_unit, "candidate", **kw)
        except CompileError as e:
            if "timed out" not in str(e):
                raise
        return self.compile(self.cand_unit, "candidate", **kw)

    def sanitize(self, st: suites.Suite) -> None:
        try:
            mod = self.compile_variant(sanitize=True)
        except (CompileError, Unsupported) as e:
            self.v.checks.append(CheckResult("sanitize", True, f"skipped: no sanitizer build ({e})", skipped=True))
            self.v.warnings.append(f"out-of-bounds accesses were not checked: the AddressSanitizer build failed ({e})")
            return
        spec_cases = sorted([c for c in st.cases if c.label == "spec"], key=lambda c: self.spec.elements(c.sizes))
        edges = sorted([c for c in st.cases if c.label == "edge"], key=lambda c: self.spec.elements(c.sizes))
        picks = spec_cases[:1] + edges[-1:]
        for case in picks:
            self.cancelled()
            info = CaseInfo(dict(case.sizes), case.distribution, case.seed + 29, case.visible, "sanitize")
            host = suites.inputs(self.spec, case.sizes, case.distribution, info.seed)
            expected = self.expected(case.sizes, host, POISONS[0], info)
            try:
                run = self._sanitized_run(mod, case.sizes, host)
                self.v.coverage.launches += 1
            except LaunchError as e:
                self.fail("sanitize", f"AddressSanitizer: {e}", info)
                return
            self.judge("sanitize", info, host, run.after, expected, POISONS[0])

    def races(self, st: suites.Suite) -> None:
        """CPU: a ThreadSanitizer build over the fibers (barriers and warp collectives are the
        synchronisation) finds races that every schedule happens to hide, on one small case."""
        try:
            mod = self.compile_variant(races=True)
        except (CompileError, Unsupported) as e:
            self.v.checks.append(CheckResult("races", True, f"skipped: no race-checker build ({e})", skipped=True))
            return
        spec_cases = sorted([c for c in st.cases if c.label == "spec"], key=lambda c: self.spec.elements(c.sizes))
        multi = [c for c in spec_cases if np.prod(self.spec.launch_dims(c.sizes)[1]) > 32] or spec_cases
        if not multi:
            return
        case = multi[0]
        info = CaseInfo(dict(case.sizes), case.distribution, case.seed + 31, case.visible, "races")
        host = suites.inputs(self.spec, case.sizes, case.distribution, info.seed)
        try:
            run_case(self.spec, self.backend, mod, case.sizes, host, self.ctypes, POISONS[0])
            self.v.coverage.launches += 1
        except LaunchError as e:
            msg = str(e)
            if "data race" in msg and self._declaration_only(msg):
                self.v.warnings.append(f"race checker: a report at a __shared__ declaration (the runtime's "
                                       f"initialisation, not the kernel's code) was ignored: {msg.splitlines()[0]}")
                self.count("races")
                return
            self.fail("races" if "data race" in msg else "launch", msg, info)
            return
        self.count("races")

    def _declaration_only(self, message: str) -> bool:
        """Every line a race report names is a `__shared__` declaration."""
        lines = {int(n) for n in re.findall(re.escape(os.path.basename(self.cand_unit.path)) + r":(\d+)", message)}
        if not lines:
            return False
        unit = screening.parsed(self.cand_unit.source)
        rows = unit.text.split("\n")
        texts = [rows[r] for r in range(len(rows)) if unit.user_line(r) in lines]
        return bool(texts) and all("__shared__" in t and "=" not in t.split("__shared__", 1)[1] for t in texts)

    def compute_sanitizer(self) -> None:
        from .sanitizer import compute_sanitizer
        found = compute_sanitizer(self.cand_unit, self.spec, self.backend, seed=self.nonce,
                                  cancel=self.cancel if isinstance(self.cancel, threading.Event) else None)
        if found is None:
            self.v.checks.append(CheckResult("compute_sanitizer", True, "skipped: compute-sanitizer not installed",
                                             skipped=True))
            return
        for f in found:
            self.fail(f.check, f.message, f.case)
        if not found:
            self.count("compute_sanitizer")

    def _sanitized_run(self, mod: Compiled, sizes: dict[str, int], host: Arrays) -> Run:
        """A report that does not point into the user's file and does not repeat on a re-run is
        the sanitizer runtime's own noise (fiber stack switches can confuse it): a warning, not
        a failure. A real out-of-bounds access in the kernel repeats and names its line."""
        try:
            return run_case(self.spec, self.backend, mod, sizes, host, self.ctypes, POISONS[0])
        except LaunchError as e:
            if os.path.basename(self.cand_unit.path) in str(e):
                raise
            first = e
        try:
            run = run_case(self.spec, self.backend, mod, sizes, host, self.ctypes, POISONS[0])
        except LaunchError:
            raise first from None
        self.v.warnings.append(f"the sanitizer reported a problem outside the kernel's code once, not on a re-run "
                               f"(ignored): {first}")
        return run

    # ---- the whole gate ----------------------------------------------------------------------
    def run(self) -> Verdict:
        t0 = time.perf_counter()
        try:
            self._run()
        except _ReferenceFailed as e:
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
        for name, step in steps:
            if v.failures:
                break
            t = time.perf_counter()
            step(st)
            v.timings[name] = round(time.perf_counter() - t, 3)
        self.finish()

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


class _ReferenceFailed(Exception):
    pass


def check(reference: CompileUnit | None, candidate: CompileUnit, spec: Spec, backend: Backend, *, quick: bool = False,
          cancel: Cancel = None, seed: int | None = None, max_failures: int | None = None,
          sanitizer: bool | None = None, reference_spec: Spec | None = None, bounds: bool = False,
          rounding: Backend | None = None) -> Verdict:
    """Run the gate on two compile units (reference None:
    no pinned baseline yet — self-consistency only). `cancel`: a threading.Event or a callable
    returning True to stop (raises Cancelled). `seed`: reproduce an earlier run (its verdict's
    `nonce`); by default inputs are fresh every run. `quick`: one seed, fewer sizes, no sanitizer
    build — for checks on save. `sanitizer=False` skips compute-sanitizer on the GPU (it runs
    by default in full checks where it is installed). `spec` launches the candidate;
    `reference_spec` (default: `spec`) launches the reference, when a rewrite changed the launch.
    `bounds`: a quick check that still runs the address-sanitizer build (out-of-bounds accesses).
    `rounding`: a backend with rounding modes (the CPU) that measures the reference's own rounding
    error where `backend` cannot (the GPU); see ROUNDING_FACTOR."""
    return _Gate(reference, candidate, spec, backend, quick, cancel, seed, max_failures, sanitizer,
                 reference_spec, bounds, rounding).run()


"""How the gate judges a candidate's outputs: the reference's on the same inputs (`expected`), the
comparison within the spec's tolerances and the rounding allowance, every element written (poison),
the inputs left alone, two runs of the candidate agreeing with each other (no reference), and an
output constant where the reference's varies."""
from __future__ import annotations

import numpy as np

from ..backends.base import BackendUnavailable, CompileError, LaunchError, Schedule, Unsupported
from . import atomic_bound, compare
from .checks import POISONS, Compiled, changed_inputs, run_case, written
from .state import Arrays, GateState, ReferenceFailed
from .verdict import CaseInfo

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


class Judging(GateState):
    def expected(self, sizes: dict[str, int], host: Arrays, poison: int, info: CaseInfo,
                 schedule: Schedule | None = None) -> Arrays | None:
        """The reference's outputs (None when there is no reference). A failing reference is the
        user's problem, reported as an error."""
        if self.ref is None:
            return None
        try:
            after = run_case(self.rspec, self.backend, self.ref, sizes, host, self.ctypes, poison, schedule,
                             written_only=not self.verify_reference).after
        except LaunchError as e:
            raise ReferenceFailed(f"the reference kernel failed on {info.describe()}: {e}") from None
        if self.verify_reference:   # the reference's run judged as its own gate would judge it
            for name, n, idx in changed_inputs(self.rspec, host, after):
                raise ReferenceFailed(f"the reference modified its read-only input `{name}` on {info.describe()}: "
                                      f"{n} element(s) changed, first at {name}[{', '.join(map(str, idx))}]")
        self.reference_writes_everything(after, sizes, host, poison, info)
        return after

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
                raise ReferenceFailed(
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
                    idx = compare.first_index(unwritten)
                    self.fail("poison", f"`{name}`: {int(unwritten.sum())} of {a.size} elements were never written "
                              f"(still hold the poison bytes), first at {name}[{', '.join(map(str, idx))}]",
                              info, output=name, index=list(idx), bad=int(unwritten.sum()), total=a.size)
                    ok = False
                    continue
                self.count("poison")
            atol, rtol = self.tol(name)
            m = compare.compare(a, b, atol, rtol, exact=not self.atomics, check_constant=False)
            extra = ""
            if m is not None and self.atomics:
                m, extra = self.atomic_runs(info, host, poisons[0], name, a, b)
            if m is not None:
                self.fail("determinism", "two runs on the same inputs disagree: "
                          + m.message(name, atol, rtol, exact=not self.atomics)
                          + (extra or (compare.ATOMICS_WHY if self.atomics else "")),
                          info, output=name, index=list(m.index), bad=m.bad, total=m.total)
                ok = False
            else:
                self.count("determinism")
            output = self.spec.args[name].output
            if output and a.size >= 16 and compare.is_constant(a) and not self.spec.args[name].flag and \
                    not any(arr.size > 1 and compare.is_constant(arr) for arr in host.values()):
                self.constants.append((name, info, float(compare.as_f64(a).flat[0])))  # judged at the end
            else:
                self.count("not_constant")
                if output and a.size > 1 and not compare.is_constant(a):
                    self.varying.add(name)
        return ok

    def atomic_runs(self, info: CaseInfo, host: Arrays, poison: int, name: str, a: np.ndarray,
                    b: np.ndarray) -> tuple[compare.Mismatch | None, str]:
        """Two runs of a kernel with atomics compared on `name`: within the tolerance, plus, on the
        elements it accumulates through atomic adds alone, what reordering those adds can change
        (gate/atomic_bound.py, measured once per case, only where the tolerance alone fails). The
        mismatch left (None: they agree) and what it means."""
        atol, rtol = self.tol(name)
        m = compare.compare(a, b, atol, rtol, check_constant=False)
        if m is None or m.kind != "values" or not self.spec.args[name].dtype.is_float:
            return m, ""
        key = (info.seed, tuple(sorted(info.sizes.items())))
        if self.ledgers[0] != key:
            self.ledgers = (key, atomic_bound.ledger_backend_run(self, info, host, poison))
        ledger = self.ledgers[1].get(name)
        if ledger is None:
            return m, ""
        allowance = ledger.allowance(self.spec.args[name].dtype.name, a, b)
        m2 = compare.compare(a, b, atol, rtol, check_constant=False, allowance=allowance)
        if m2 is None:
            if name not in self.rounding_noted:
                self.rounding_noted.add(name)
                over = int(np.count_nonzero(ledger.overflows))
                finite = allowance[np.isfinite(allowance)]
                self.v.coverage.notes.append(
                    f"`{name}` differs between runs on the same inputs beyond atol={atol:g}, rtol={rtol:g} on "
                    f"{info.describe()}, within what reordering its atomic adds can change (2·γ_k·Σ|terms|, up to "
                    f"{float(finite.max()) if finite.size else 0.0:.3g}; k and Σ|terms| measured per element on "
                    f"the CPU): accepted" + (f"; on {over} element(s) Σ|terms| overflows "
                                             f"{self.spec.args[name].dtype.name}, so whether a partial sum "
                                             f"overflows depends on the order of the adds: not compared there"
                                             if over else ""))
            return None, ""
        bad = compare.bad_mask(a, b, atol, rtol, allowance)
        m2.allowance = None   # the message says which allowance, not the rounding one
        return m2, atomic_bound.why(ledger, bad, allowance)

    def constant_outputs(self) -> None:
        """No reference: an output that is constant although its inputs are random fails, unless
        the case is degenerate (a size of 1: a LayerNorm over C = 1 is its bias everywhere) and the
        same kernel's output varies on the suite's other cases, or the case is an edge size the gate
        made (the spec does not claim the kernel works there: a loop that starts a block in skips
        shorter rows). A kernel that writes constants writes them everywhere; one that writes them
        on the sizes the spec lists is refused too."""
        for name, info, value in self.constants:
            degenerate = [k for k, v in info.sizes.items() if v == 1]
            if degenerate and name in self.varying:
                self.count("not_constant")
                self.v.coverage.notes.append(
                    f"`{name}` is constant on {info.describe()}: a degenerate size "
                    f"({', '.join(f'{k}=1' for k in degenerate)}); it varies with the inputs on the other cases")
                continue
            if info.label == "edge" and name in self.varying:   # a size of the gate's, not of the spec's
                self.count("not_constant")
                self.v.coverage.notes.append(
                    f"`{name}` is constant on {info.describe()}, an edge size the spec does not list: the kernel "
                    f"ignores its inputs there (work skipped: a loop starting past the end) and varies with them on "
                    f"the other cases — if the program uses such sizes, add them to [sizes] to have them judged")
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


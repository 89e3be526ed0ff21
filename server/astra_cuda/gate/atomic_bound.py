"""How far two runs of a kernel may differ on an output it accumulates through atomic adds alone.

Why this bound (the arithmetic, not a widened tolerance): an element a launch changes only by
atomic adds ends as c0 + t_1 + … + t_k, summed in whatever order the adds land. Each add rounds
its partial sum once, by at most u·|partial sum| (rounding to nearest; u the type's unit
roundoff: half 2^-11, bfloat16 2^-8, float 2^-24, double 2^-53), and every partial sum of every
order is at most P = |c0| + Σ|t_i|. So any order lies within γ_k·P of the exact sum
(γ_k = k·u / (1 − k·u): Higham's bound for recursive summation), and two orders within 2·γ_k·P of
each other (plus k times the type's least subnormal step each, where partial sums fall below the
normal range). k and P are measured, never guessed from the differences: the CPU backend runs the
candidate on the same inputs with each float atomic add adding one (k) and then its magnitude onto
|c0| (P, itself summed in the type: divided by 1 − γ_k to stay an upper bound). An element counts as
accumulated through atomics alone where the counting run ends exactly k above each of two starting
values (0 and 2): a plain store in the same launch (a zeroing racing the adds of other blocks)
leaves a data value instead, so such an element gets no allowance — the tolerance alone judges it,
as for any output of a kernel with atomics. Only read-modify-write outputs are measured: a pure
output starts as the poison, which nothing accumulates onto meaningfully.

A candidate cannot buy room with this: the allowance is in its own terms (more adds or larger
terms widen it, exactly as they widen the real spread), a counting or magnitude run inconsistent
with the value runs (|value| above P) gets none, and the comparison with the reference, where
there is one, is unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..backends.base import Backend, BackendUnavailable, CompileError, LaunchError, Schedule, Unsupported
from ..model.spec import Spec
from .checks import Compiled, run_case
from .state import GateState
from .verdict import CaseInfo

# unit roundoff (half an ulp of 1) and the spacing of subnormals, per spec type
UNIT_ROUNDOFF = {"half": 2.0 ** -11, "bfloat16": 2.0 ** -8, "float": 2.0 ** -24, "double": 2.0 ** -53}
SUBNORMAL_STEP = {"half": 2.0 ** -24, "bfloat16": 2.0 ** -133, "float": 2.0 ** -149, "double": 2.0 ** -1074}
STARTS = (0.0, 2.0)   # the counting runs' starting values: exact in every float type, as are small counts
MAX_ELEMENTS = 1 << 26   # per case, as the rounding allowance's CPU runs (judging.ROUNDING_MAX_ELEMENTS)


def order_bound(k: np.ndarray, p: np.ndarray, dtype: str) -> np.ndarray:
    """2·γ_k·P (+ the subnormal steps): how far two orders of k rounded adds of terms whose
    magnitudes with the start's sum to at most P can end apart. `p` was summed in the type itself,
    so it is first raised to an upper bound of the exact sum. Infinite where no bound holds
    (k·u ≥ 1/2, or P not finite): the caller gives no allowance there."""
    u = UNIT_ROUNDOFF[dtype]
    k = np.asarray(k, dtype=np.float64)
    p = np.abs(np.asarray(p, dtype=np.float64))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ku = k * u
        gamma = np.where(ku < 0.5, ku / (1.0 - ku), np.inf)
        exact_p = p / (1.0 - gamma)
        out = 2.0 * gamma * exact_p + 2.0 * k * SUBNORMAL_STEP[dtype]
    return np.where(np.isfinite(out) & (k >= 0), out, np.inf)


@dataclass
class Ledger:
    """One output's measure: per element, the number of atomic adds (NaN where the element is not
    accumulated through atomics alone) and P."""
    adds: np.ndarray
    magnitude: np.ndarray

    def allowance(self, dtype: str, *runs: np.ndarray) -> np.ndarray:
        """The per-element allowance for comparing `runs` (0 where none holds: not atomics alone,
        no finite bound, or a run whose value exceeds P — the ledger does not describe it; infinite
        where P itself overflowed the type: any two orders may differ there, up to an infinity)."""
        alone = np.isfinite(self.adds)
        b = order_bound(np.where(alone, self.adds, 0.0), self.magnitude, dtype)
        ok = alone & np.isfinite(b)
        # every order's value is within P_exact·(1 + γ_k) ≤ P + 2·γ_k·P_exact of zero
        limit = np.abs(self.magnitude) + b
        with np.errstate(invalid="ignore", over="ignore"):
            for r in runs:
                v = np.abs(np.asarray(r, dtype=np.float64))
                ok &= np.isfinite(v) & (v <= limit)
        # the magnitudes' sum left the type's range: some order's partial sums overflow where
        # another's stay finite (an infinity, or inf - inf, in one run and a number in the other),
        # so no order bounds the spread: unbounded (compare.compare skips such an element)
        return np.where(self.overflows, np.inf, np.where(ok, b, 0.0))

    @property
    def overflows(self) -> np.ndarray:
        """Elements accumulated through atomic adds alone whose Σ|terms| overflowed the type."""
        with np.errstate(invalid="ignore"):
            out: np.ndarray = np.isfinite(self.adds) & ~np.isfinite(self.magnitude)
        return out

    @property
    def not_alone(self) -> int:
        """Elements the counting runs show plain stores to (or that no atomic add reached)."""
        return int(np.count_nonzero(~np.isfinite(self.adds)))


def measure(spec: Spec, backend: Backend, kernel: Compiled, sizes: dict[str, int], host: dict[str, np.ndarray],
            ctypes: dict[str, str], poison: int) -> dict[str, Ledger]:
    """Per read-modify-write float output of a type with a bound: its Ledger, from the counting
    runs (one from each of STARTS) and the magnitude run on `backend` (one with `caps.atomic_ledger`).
    Raises what the backend raises (the caller gives no allowance then)."""
    names = [a.name for a in spec.args.values()
             if a.written and not a.output and a.pointer and a.dtype.name in UNIT_ROUNDOFF]
    if not names or spec.elements(sizes) > MAX_ELEMENTS:
        return {}
    counts = []
    for start in STARTS:
        h = dict(host)
        for n in names:
            h[n] = np.full_like(host[n], start)
        counts.append(run_case(spec, backend, kernel, sizes, h, ctypes, poison, Schedule(atomics="count"),
                               written_only=True).after)
    h = dict(host)
    for n in names:
        h[n] = np.abs(host[n])
    mags = run_case(spec, backend, kernel, sizes, h, ctypes, poison, Schedule(atomics="magnitude"),
                    written_only=True).after
    out = {}
    for n in names:
        c0, c1 = (np.asarray(c[n], dtype=np.float64) for c in counts)
        with np.errstate(invalid="ignore"):
            alone = (c1 - c0 == STARTS[1] - STARTS[0]) & (c0 >= 1) & (c0 == np.round(c0))
        out[n] = Ledger(np.where(alone, c0 - STARTS[0], np.nan), np.asarray(mags[n], dtype=np.float64))
    return out


def ledger_backend_run(state: GateState, info: CaseInfo, host: dict[str, np.ndarray], poison: int) -> dict[str, Ledger]:
    """The gate's ledger for one case: on its own backend where that keeps a ledger (the CPU), else
    on the rounding backend (the CPU beside a GPU) with the candidate built there once. Empty,
    with a warning once, where neither can run it."""
    be = state.backend if state.backend.caps.atomic_ledger else state.rounding
    if be is None or not be.caps.atomic_ledger or state.ledger_off:
        return {}
    try:
        if be is state.backend:
            kernel = state.candidate
        else:
            if state.ledger_cand is None:
                unit = state.cand_unit
                assert unit is not None
                state.ledger_cand = Compiled(be.compile(unit.source + unit.appendix, [unit.name_expression],
                                                        filename=unit.path, options=unit.options()),
                                             unit.name_expression, "candidate")
            kernel = state.ledger_cand
        return measure(state.spec, be, kernel, info.sizes, host, state.ctypes, poison)
    except (LaunchError, CompileError, Unsupported, BackendUnavailable) as e:
        state.ledger_off = True
        state.v.warnings.append(f"the atomic adds' own rounding could not be measured ({e}): runs of outputs "
                                f"accumulated through atomics are compared within the tolerance alone")
        return {}


def why(ledger: Ledger | None, bad: np.ndarray, allowance: np.ndarray | None) -> str:
    """What a determinism failure of an atomically updated output means, from its ledger: a
    difference beyond the bound an order of adds allows, or elements the launch also stores to
    plainly (the order of those stores and the adds is the schedule's: a race)."""
    if ledger is None:
        return ""
    plain = int(np.count_nonzero(bad & ~np.isfinite(ledger.adds)))
    if plain:
        return (f" — {plain} of the differing elements are not accumulated through atomic adds alone: the "
                f"launch also stores to them plainly (run with each atomic add adding one, from starts 0 and 2, "
                f"they end equal), and the order between those stores and other threads' atomic adds is the "
                f"schedule's: a race in the kernel")
    finite = allowance[np.isfinite(allowance)] if allowance is not None else np.zeros(0)
    top = float(finite.max()) if finite.size else 0.0
    return (f" — beyond the tolerance plus what reordering the atomic adds can change (2·γ_k·Σ|terms|, k and "
            f"Σ|terms| measured per element on the CPU: up to {top:.3g}): more than rounding")

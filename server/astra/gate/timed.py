"""Re-validation after timing, for the profiling agent.

A candidate can behave while checked and cheat while timed (skip work once warm, lazy outputs,
work on another stream). So the buffers the timing loop actually used are checked afterwards:

    sets = gate.prepare_timed(spec, backend, sizes, reference=(ref_module, ref_name), sets=3)
    backend.time(cand_module, cand_name, gate.launch_of(spec, sizes), [s.args for s in sets], ...)
    result = gate.revalidate_after_timing(spec, backend, sets, launches=counts, reference=(ref_module, ref_name))
    if not result.passed: ... refuse the timing, report result.failures

Output-only arguments must hold the reference's result for their set's inputs (outputs were
poisoned before timing, so a loop that never wrote them fails). Read-only inputs must be
unchanged. In-place (`inout`) arguments are compared against the reference applied `launches`
times when the launch counts are given; otherwise they are not compared (said in `notes`).
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..backends.base import Backend, Buffer, LaunchError, Module, Scalar
from ..spec import Spec
from . import compare, suite as suites
from .checks import POISONS, Compiled, changed_inputs, execute, launch_of, prepare, scalar_ctypes
from .verdict import CaseInfo, Failure

__all__ = ["TimedSet", "Revalidation", "prepare_timed", "revalidate_after_timing", "launch_of"]


@dataclass
class TimedSet:
    sizes: dict[str, int]
    host: dict[str, np.ndarray]
    args: list[Buffer | Scalar]          # pass these to Backend.time
    buffers: dict[str, Buffer]
    expected: dict[str, np.ndarray] | None  # the reference's outputs after one launch
    poison: int
    info: CaseInfo


@dataclass
class Revalidation:
    passed: bool
    checked: int                      # arrays compared
    failures: list[Failure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _compiled(ref) -> Compiled | None:
    if ref is None or isinstance(ref, Compiled):
        return ref
    module, name = ref
    return Compiled(module, name, "reference")


def prepare_timed(spec: Spec, backend: Backend, sizes: dict[str, int], *, reference: tuple[Module, str] | None = None,
                  sets: int = 2, seed: int | None = None, params: dict[str, str] | None = None,
                  reference_spec: Spec | None = None) -> list[TimedSet]:
    """Fresh inputs for `sets` argument sets (rotated by the timing loop), outputs poisoned,
    and the reference's expected outputs computed on the same inputs (the reference launched
    as `reference_spec` says, when a rewrite changed the launch configuration)."""
    rspec = reference_spec or spec
    ref = _compiled(reference)
    ctypes = scalar_ctypes(spec, params or {})
    rng = np.random.Generator(np.random.PCG64(seed if seed is not None else secrets.randbits(31)))
    out = []
    for k in range(sets):
        s = int(rng.integers(1, 2**31 - 1))
        host = suites.inputs(spec, sizes, suites.SPEC_DIST, s)
        poison = POISONS[k % 2]
        expected = None
        if ref is not None:
            expected = execute(rspec, backend, ref, sizes, prepare(spec, backend, sizes, host, ctypes, poison)).after
        run = prepare(spec, backend, sizes, host, ctypes, poison)
        out.append(TimedSet(dict(sizes), host, run.args, run.buffers, expected, poison,
                            CaseInfo(dict(sizes), "spec", s, False, "timed")))
    return out


def revalidate_after_timing(spec: Spec, backend: Backend, sets: Sequence[TimedSet], *,
                            launches: int | Sequence[int] | None = None,
                            reference: tuple[Module, str] | None = None,
                            params: dict[str, str] | None = None, reference_spec: Spec | None = None) -> Revalidation:
    """Check the outputs the timed launches left in `sets` (see the module docstring).
    `launches`: how many launches each set received (one number for all, or one per set)."""
    ref = _compiled(reference)
    rspec = reference_spec or spec
    res = Revalidation(True, 0)
    counts = [launches] * len(sets) if isinstance(launches, int) or launches is None else list(launches)
    ctypes = scalar_ctypes(spec, params or {})
    inout = [a.name for a in spec.args.values() if a.inout]
    if inout and (ref is None or launches is None):
        res.notes.append(f"in-place argument(s) {', '.join(inout)} not re-validated: launch counts or the "
                         f"reference were not given")
    for ts, count in zip(sets, counts):
        after = {name: backend.download(buf) for name, buf in ts.buffers.items()}
        for name, n, idx in changed_inputs(spec, ts.host, after):
            res.failures.append(Failure("revalidate", f"after timing, the read-only input `{name}` was modified "
                                        f"({n} elements)", ts.info, output=name, index=list(idx), bad=n))
        if ts.expected is None:
            continue
        expected = dict(ts.expected)
        if inout and ref is not None and count is not None and count > 1:
            run = prepare(spec, backend, ts.sizes, ts.host, ctypes, ts.poison)
            try:
                for _ in range(count - 1):
                    backend.launch(ref.module, ref.name, launch_of(rspec, ts.sizes), run.args)
                execute(rspec, backend, ref, ts.sizes, run)
            except LaunchError as e:
                res.notes.append(f"reference failed while replaying {count} launches: {e}")
                continue
            expected.update({n: run.after[n] for n in inout})
        for a in spec.args.values():
            if not a.written or (a.inout and (count is None or ref is None)):
                continue
            atol, rtol = a.tolerance
            m = compare.compare(expected[a.name], after[a.name], atol, rtol, poison=ts.poison if a.output else None)
            res.checked += 1
            if m is not None:
                res.failures.append(Failure("revalidate", "the outputs of the timed launches are wrong: "
                                            + m.message(a.name, atol, rtol), ts.info, output=a.name,
                                            index=list(m.index), bad=m.bad, total=m.total,
                                            expected=m.expected, got=m.got))
    res.passed = not res.failures
    return res

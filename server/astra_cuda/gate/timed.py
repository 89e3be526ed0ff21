"""Correctness of the timed launches, for the profiling agent.

A candidate can behave while checked and cheat while timed: skip work once warm, skip work when
the output already looks computed, key state on buffer addresses or input contents. So the
timing loop (astra_cuda.profiler.timing) launches on inputs and outputs prepared here, and what every
launch leaves is checked here:

    sets = gate.prepare_timed(spec, backend, sizes, sets=2)
    ... the timing loop copies sets[s].pristine into place before each launch ...
    gate.expect(spec, backend, sets, (ref_module, ref_name), samples, before_loop=True)  # a reference: first
    ... the loop ...; gate.resync(backend, sets)   # (without a reference: expect() after the loop)
    failures = gate.check_outputs(spec, backend, sets[s], {name: buffer}, poison=0xFF, where="after launch 7")

Input sets: set 0 is drawn on the host as the spec's `init` says; each further set is set 0 with
every randomly drawn argument rotated on the device by its own random number of elements — the
values' distribution is unchanged, the content is new, and no host drawing is paid for it.
The reference's outputs on each set are computed before any candidate launch (`expect`,
`before_loop`: a candidate of this job that writes the reference's `__device__` variables
through a guessed address reaches none of them), kept on the device under keyed digests (`sealed`)
compared after the loop; after it the sets are made again from the host's copy and the device's
sets are compared with them (`resync`, `TimedSet.changed`: a launch wrote memory it was not
given — one CUDA context: a pointer kept from an earlier launch, or guessed). Without a
reference, the candidate's own outputs are computed after the loop (`expect`, on the sets made
again from the host). So the expected outputs stay on the device: a full check asks the backend first (`within_tolerance`, no transfer) and
compares on the host only when that cannot tell or finds a difference (for the exact message). Output-only arguments must
hold the reference's result after each launch (outputs are poisoned before a launch, so one that
was not written fails), in-place arguments one application of it (they are restored before each
launch), and read-only inputs must be unchanged.
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

import numpy as np

from ..backends.base import (Backend, BackendUnavailable, Buffer, CompileError, LaunchError, Module, Schedule,
                             TimedLaunch, Unsupported)
from ..model.spec import Spec
from . import compare, suite as suites
from .checks import POISONS, Compiled, Run, arg_types, launch_args, launch_of, run_case
from .judging import ROUNDING_DIRECTIONS, ROUNDING_FACTOR, ROUNDING_MAX_ELEMENTS
from .verdict import CaseInfo, Failure

__all__ = ["TimedSet", "prepare_timed", "decoy", "timed_host", "expect", "resync", "sealed", "fresh_run", "check_outputs",
           "check_inputs_unchanged", "check_samples", "launch_of", "measure_rounding"]

ROTATED = ("normal", "uniform", "randint")  # i.i.d. draws: any rotation is as likely a draw


@dataclass
class TimedSet:
    sizes: dict[str, int]
    pristine: dict[str, Buffer]               # what the kernel reads; copied into place, never launched on
    host: dict[str, np.ndarray]               # set 0's host inputs
    rolls: dict[str, int] = field(default_factory=dict)  # elements each input is rotated by from `host`
    info: CaseInfo | None = None
    outputs: dict[str, Buffer] | None = None  # `expect`: the written arguments after one reference launch
    samples: dict[str, np.ndarray] = field(default_factory=dict)  # their values at the sampled positions
    # `measure_rounding`: per floating-point written argument, each element's allowance on top of the
    # tolerance (twice the reference's own rounding error on this set), measured only when needed
    allowance: dict[str, np.ndarray] = field(default_factory=dict)
    _host_outputs: dict[str, np.ndarray] = field(default_factory=dict)
    # `expect`: the inputs whose device set no longer held the host's values after the loop
    changed: list[str] = field(default_factory=list)

    def input_values(self, name: str, positions: np.ndarray) -> np.ndarray:
        """The set's values of input `name` at flat element `positions`."""
        flat = self.host[name].reshape(-1)
        return np.asarray(flat[(positions - self.rolls.get(name, 0)) % flat.size])

    def expected(self, backend: Backend, name: str) -> np.ndarray:
        """The expected values of written argument `name` on the host (fetched once, when needed)."""
        if name not in self._host_outputs:
            assert self.outputs is not None, "expect() gathers them first"
            self._host_outputs[name] = backend.download(self.outputs[name])
        return self._host_outputs[name]


def _compiled(ref: Compiled | tuple[Module, str] | None) -> Compiled | None:
    if ref is None or isinstance(ref, Compiled):
        return ref
    module, name = ref
    return Compiled(module, name, "reference")


def _rotated(backend: Backend, src: Buffer, roll: int) -> Buffer:
    """A new device buffer holding `src` rotated by `roll` elements (np.roll's direction)."""
    n, item = int(np.prod(src.shape)), src.dtype.itemsize
    out = backend.allocate(n * item)
    head, tail = n - roll, roll
    # out[roll:] = src[:n - roll]; out[:roll] = src[n - roll:]
    backend.copy(backend.view(out, tail * item, src.dtype, (head,)), backend.view(src, 0, src.dtype, (head,)))
    backend.copy(backend.view(out, 0, src.dtype, (tail,)), backend.view(src, head * item, src.dtype, (tail,)))
    return backend.view(out, 0, src.dtype, src.shape)


def fresh_run(spec: Spec, backend: Backend, ts: TimedSet, ctypes: dict[str, Any], poison: int) -> Run:
    """Arguments for one untimed launch on set `ts`: copies of its inputs, poisoned outputs."""
    buffers = {}
    for a in spec.args.values():
        if a.pointer:
            shape = spec.shape(a.name, ts.sizes)
            nbytes = int(np.prod(shape)) * a.dtype.itemsize
            buf = backend.view(backend.allocate(nbytes), 0, a.dtype.np, shape)
            if a.output:
                backend.fill_bytes(buf, poison)
            else:
                backend.copy(buf, ts.pristine[a.name])
            buffers[a.name] = buf
    return Run(launch_args(spec, buffers, ts.sizes, ctypes), buffers)


def timed_host(spec: Spec, sizes: dict[str, int], seed: int) -> dict[str, np.ndarray]:
    """Set 0's host inputs of `prepare_timed(..., seed=seed)`: for a caller that draws them ahead,
    while something else runs (they are most of its time at a timed size)."""
    rng = np.random.Generator(np.random.PCG64(seed))
    return suites.inputs(spec, sizes, suites.SPEC_DIST, int(rng.integers(1, 2**31 - 1)))


def _sets_from_host(backend: Backend, sets: Sequence[TimedSet]) -> list[dict[str, Buffer]]:
    """Each set's inputs made again from its host values: uploaded, then rotated on the device by
    the set's own rolls — as `prepare_timed` made them, from memory no launch has run beside."""
    uploaded: dict[int, dict[str, Buffer]] = {}
    out = []
    for ts in sets:
        base = uploaded.get(id(ts.host))
        if base is None:
            base = uploaded[id(ts.host)] = {name: backend.upload(np.ascontiguousarray(arr))
                                            for name, arr in ts.host.items()}
        out.append({name: _rotated(backend, buf, ts.rolls[name]) if name in ts.rolls else buf
                    for name, buf in base.items()})
    return out


def prepare_timed(spec: Spec, backend: Backend, sizes: dict[str, int], *, sets: int = 2,
                  seed: int | None = None, host: dict[str, np.ndarray] | None = None) -> list[TimedSet]:
    """`sets` input sets at `sizes` (see the module docstring), without expectations yet. `host`:
    `timed_host(spec, sizes, seed)`, drawn ahead by the caller (the same values)."""
    rng = np.random.Generator(np.random.PCG64(seed if seed is not None else secrets.randbits(31)))
    s = int(rng.integers(1, 2**31 - 1))
    if host is None:
        host = suites.inputs(spec, sizes, suites.SPEC_DIST, s)
    base = {name: backend.upload(np.ascontiguousarray(arr)) for name, arr in host.items()}
    out = []
    for k in range(sets):
        rolls = {}
        pristine = dict(base)
        if k:
            for a in spec.args.values():
                n = host[a.name].size if a.name in host else 0
                if a.name in host and a.init.kind in ROTATED and n > 1:
                    rolls[a.name] = int(rng.integers(1, n))
                    pristine[a.name] = _rotated(backend, base[a.name], rolls[a.name])
        out.append(TimedSet(dict(sizes), pristine, host, rolls,
                            CaseInfo(dict(sizes), "spec" if not k else f"spec, rotated (set {k + 1})", s, False,
                                     "timed")))
    return out


def decoy(spec: Spec, backend: Backend, sets: Sequence[TimedSet], rng: np.random.Generator) -> dict[str, Buffer]:
    """Inputs for untimed launches before the timing loop (its pre-roll): set 0 with every drawn
    argument rotated by a roll none of `sets` has. They absorb a kernel's cold start, yet no state
    keyed on the timed sets' contents can warm on them."""
    first = sets[0]
    out = dict(first.pristine)
    for a in spec.args.values():
        n = first.host[a.name].size if a.name in first.host else 0
        taken = {ts.rolls.get(a.name, 0) for ts in sets}
        if a.name in first.host and a.init.kind in ROTATED and n > len(taken):
            roll = int(rng.integers(1, n))
            while roll in taken:
                roll = int(rng.integers(1, n))
            out[a.name] = _rotated(backend, first.pristine[a.name], roll)
    return out


def expect(spec: Spec, backend: Backend, sets: Sequence[TimedSet], reference: tuple[Module, str],
           samples: dict[str, tuple[np.ndarray, Buffer]], *, params: dict[str, str] | None = None,
           reference_spec: Spec | None = None, before_loop: bool = False) -> None:
    """Each set's expected outputs: one launch of `reference` (as `reference_spec` launches it,
    when a rewrite changed the launch configuration) on fresh copies, kept on the device, and
    their values at the sampled positions (`samples`: name -> (positions, the same on the device))
    brought over. With the candidate as `reference` (no reference to compare with), call it after
    the timing loop: a kernel that keeps a cache keyed on its inputs then meets them first while
    it is timed, where warming up shows; the trusted reference, before it (`before_loop`).
    After the loop, the reference runs on the sets made again from the host (`_sets_from_host`), which become the
    sets' `pristine` (what read-only inputs are compared with from now on); a set whose device
    copy differs from them is named in its `changed`: some launch of the loop wrote it through an
    address it was never given, and the expectations are the real result all the same.
    `before_loop`: called before any launch of the job (the reference's expectations, see
    profiler.timing): the sets are as `prepare_timed` made them, so nothing is made again here;
    `resync` does that after the loop."""
    ref = _compiled(reference)
    assert ref is not None
    ctypes = arg_types(spec, backend, ref, params or {})
    written = [a for a in spec.args.values() if a.pointer and a.written]
    if not before_loop:
        resync(backend, sets)
    for k, ts in enumerate(sets):
        run = fresh_run(spec, backend, ts, ctypes, POISONS[k % 2])
        rows = {a.name: backend.view(backend.allocate(samples[a.name][0].size * a.dtype.itemsize), 0, a.dtype.np,
                                     (samples[a.name][0].size,)) for a in written}
        keeps = [(rows[a.name], run.buffers[a.name], samples[a.name][1]) for a in written]
        # The timing loop's executor: one launch with the samples gathered where the data live.
        backend.time(ref.module, ref.name, launch_of(reference_spec or spec, ts.sizes),
                     [TimedLaunch(run.args, keeps=keeps)], flush_l2=False)
        ts.outputs = {a.name: run.buffers[a.name] for a in written}
        ts.samples = {name: backend.download(row) for name, row in rows.items()}
        ts._host_outputs = {}


def resync(backend: Backend, sets: Sequence[TimedSet]) -> None:
    """Each set's inputs made again from the host, now its `pristine`; the names of those whose
    device copy differed in its `changed` (a launch wrote memory it was never given)."""
    for ts, fresh in zip(sets, _sets_from_host(backend, sets)):
        ts.changed = [name for name, buf in fresh.items() if not backend.same_bytes(ts.pristine[name], buf)]
        ts.pristine = fresh


def sealed(backend: Backend, sets: Sequence[TimedSet], key: tuple[int, int]) -> list[dict[str, int]]:
    """Keyed digests (`Backend.digest`, where the data live) of each set's expected outputs: taken
    when they are computed, compared after the loop (no kernel sees `key`)."""
    return [{name: backend.digest(buf, key) for name, buf in (ts.outputs or {}).items()} for ts in sets]


def check_outputs(spec: Spec, backend: Backend, ts: TimedSet, got: dict[str, Buffer], *, poison: int | None,
                  where: str) -> list[Failure]:
    """The written arguments in `got` (device buffers; all of them, or some) against the set's
    expected outputs. `poison`: the byte output-only arguments held before the launch (None: not
    poisoned)."""
    failures = []
    for name, buf in got.items():
        a = spec.args[name]
        atol, rtol = a.tolerance
        try:
            fine = backend.within_tolerance(buf, (ts.outputs or {})[name], atol, rtol)
        except Exception:  # noqa: BLE001 - the device could not tell: the host will
            fine = None
        if fine:
            continue
        m = compare.compare(ts.expected(backend, name), backend.download(buf), atol, rtol,
                            poison=poison if a.output else None, allowance=ts.allowance.get(name))
        if m is not None:
            failures.append(Failure("revalidate", f"{where}: " + m.message(name, atol, rtol), ts.info, output=name,
                                    index=list(m.index), bad=m.bad, total=m.total, expected=m.expected, got=m.got))
    return failures


def check_inputs_unchanged(spec: Spec, backend: Backend, ts: TimedSet, buffers: dict[str, Buffer], *,
                           where: str) -> list[Failure]:
    """Read-only inputs in `buffers` must hold the set's pristine bytes."""
    failures = []
    for a in spec.args.values():
        if not a.pointer or a.written or a.name not in buffers or backend.same_bytes(buffers[a.name],
                                                                                     ts.pristine[a.name]):
            continue
        d = compare.first_difference(backend.download(ts.pristine[a.name]), backend.download(buffers[a.name]))
        n, idx = d if d is not None else (0, ())
        failures.append(Failure("revalidate", f"{where}: the read-only input `{a.name}` was modified ({n} elements)",
                                ts.info, output=a.name, index=list(idx), bad=n))
    return failures


def check_samples(spec: Spec, ts: TimedSet, name: str, positions: np.ndarray, rows: np.ndarray,
                  poisons: Sequence[int | None], labels: Sequence[str]) -> tuple[int, Failure] | None:
    """Elements of argument `name` at flat `positions`, gathered after several launches on set
    `ts` (one row per launch; `poisons[i]` what output-only elements held before launch i,
    `labels[i]` which launch it was). Written arguments must match the expected outputs there
    (`expect` gathered them at the same positions), read-only inputs their own values. The first failing launch (its row, and why), or None."""
    a = spec.args[name]
    want = ts.samples[name] if a.written else ts.input_values(name, positions)
    atol, rtol = a.tolerance
    allowed = ts.allowance[name].reshape(-1)[positions] if name in ts.allowance else None

    def mismatch(got: np.ndarray, poison: int | None) -> compare.Mismatch | None:
        if a.written:
            return compare.compare(np.broadcast_to(want, got.shape), got, atol, rtol,
                                   poison=poison if a.output else None, check_constant=False,
                                   allowance=None if allowed is None else np.broadcast_to(allowed, got.shape))
        d = compare.first_difference(np.broadcast_to(want, got.shape), got)
        return None if d is None else compare.Mismatch("values", d[0], got.size, d[1], 0.0, 0.0)

    wrong = []
    for poison in dict.fromkeys(poisons):
        pick = [i for i, p in enumerate(poisons) if p == poison]
        if mismatch(rows[pick], poison) is not None:  # all these launches at once first: the common, fast case
            wrong += [i for i in pick if mismatch(rows[i], poison) is not None]
    if not wrong:
        return None
    first = min(wrong)
    m = mismatch(rows[first], poisons[first])
    assert m is not None   # the same launch, compared the same way
    element = tuple(int(i) for i in np.unravel_index(int(positions[m.index[0]]), spec.shape(name, ts.sizes)))
    m = replace(m, index=element)
    what = (m.message(name, atol, rtol).replace(f" of {m.total} elements", f" of {m.total} sampled elements")
            if a.written else f"the read-only input `{name}` was modified ({m.bad} of {m.total} sampled "
                              f"elements), first at {name}[{', '.join(map(str, element))}]")
    return first, Failure("revalidate", f"after {labels[first]} ({len(wrong)} of the {len(poisons)} launches checked "
                   f"on this input set wrong): {what}", ts.info, output=name, index=list(element),
                   bad=m.bad, total=m.total)


def measure_rounding(spec: Spec, backend: Backend, reference: Compiled, sets: Sequence[TimedSet], ctypes: dict[str, Any]) -> bool:
    """Each set's `allowance`: ROUNDING_FACTOR times how far the reference's floating-point written
    arguments move when its arithmetic rounds upward, downward or toward zero instead of to
    nearest on the set's inputs — the untimed gate's allowance (gate.judging), at the timed size.
    `backend` has rounding modes (the CPU); `reference` is compiled on it and launched as `spec`
    says. A float sum of millions of terms into one place is far from its exact value (at 16.7M
    squares, 2.8% low), so a rewrite summing in another order differs from it beyond any
    tolerance made for the checked sizes; a candidate that skips work still fails. False (nothing
    measured) when the size is too large for the CPU, a set's inputs are not on the host or the
    reference does not run there."""
    floats = [a.name for a in spec.args.values() if a.pointer and a.written and a.dtype.is_float]
    if not floats or not sets or spec.elements(sets[0].sizes) > ROUNDING_MAX_ELEMENTS:
        return False
    for ts in sets:
        host = {name: np.roll(arr.reshape(-1), ts.rolls[name]).reshape(arr.shape) if name in ts.rolls else arr
                for name, arr in ts.host.items()}
        try:
            base = run_case(spec, backend, reference, ts.sizes, host, ctypes, POISONS[0], written_only=True).after
            runs = [run_case(spec, backend, reference, ts.sizes, host, ctypes, POISONS[0], Schedule(rounding=d),
                             written_only=True).after for d in ROUNDING_DIRECTIONS]
        except (LaunchError, CompileError, Unsupported, BackendUnavailable):
            return False
        for name in floats:
            b = compare.as_f64(base[name])
            with np.errstate(invalid="ignore", over="ignore"):
                spread = np.zeros(b.shape)
                for r in runs:
                    d = np.abs(compare.as_f64(r[name]) - b)
                    spread = np.maximum(spread, np.where(np.isfinite(d), d, 0.0))  # NaN/inf: no allowance
            ts.allowance[name] = ROUNDING_FACTOR * spread
    return True

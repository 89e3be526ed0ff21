"""Side-by-side timing of a candidate and its reference on one bench size, made so that a kernel
cannot behave while checked and cheat while timed.

Both kernels get the same treatment, interleaved in chunks so drifting clocks hit both alike:

- The timing loop (what is reported): CUDA-event times per launch, the L2 flushed before each,
  two input sets (astra_cuda.gate.timed). Before every launch the outputs are poisoned and placed at
  an address no launch used before; inputs are copied to fresh addresses every few launches and
  in-place arguments restored before every launch (each launch is one application on realistic
  data); the buffers are re-allocated between chunks. Address-keyed state never warms up, and a
  launch that skips work leaves poison behind.
- Before the loop, untimed rounds of PREROLL launches on decoy inputs (set 0 rotated anew,
  gate.decoy) in the loop's own buffers, until a round's median no longer drops by STEP (at most
  SETTLE_ROUNDS): a kernel's cold start, or clocks that dropped while the GPU idled, is not read as
  state warming up, and state keyed on the timed contents or addresses still meets them first in
  the loop, where the warm-up shows.
- Launches on fixed buffers (FIXED per chunk, adding up over the size), each over the outputs the
  previous launch left (with the sampled elements poisoned): what a naive benchmark loop would do,
  and what state keyed on addresses, on launch counts or on the output already holding the answer
  exploits. Timed too: a kernel faster there than in the loop remembers something.
- After every launch of both, a fixed random sample of every argument's elements is gathered on
  the device (no synchronisation) and compared afterwards with the expected values; the written
  arguments of the last launch on each input set and of a few random timed launches are compared
  in full, and so are the fixed buffers at the end — on the device where the backend can
  (gate.check_outputs), so honest kernels cost no transfers.
- The per-launch times are judged (astra_cuda.profiler.distribution): a drop after the first launches,
  two modes, or a speed-up on fixed buffers that the other kernel does not show is implausible.
"""
from __future__ import annotations

import secrets
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np

from .. import gate
from ..backends.base import Buffer, TimedLaunch
from ..gate import checks
from . import distribution, model, touched
from .results import SizeProfile, Timing, size_label

CHUNK = 25          # timed launches per interleaving chunk
REWARM = 2          # untimed launches opening every later chunk
ALIGN = 256         # bytes between successive placements of a buffer (keeps every vector alignment)
PLACE_EVERY = 8     # the timing loop places inputs afresh every this many launches (outputs every launch)
SAMPLES = 4096      # elements of each argument gathered after every launch
FULL_CHECKS = 2     # random timed launches whose written arguments are also compared in full
SETS = 2            # input sets (the second rotated from the first on the device)
FIXED = 8           # launches on fixed buffers per chunk (they add up over the chunks of a size)
PREROLL = 8         # untimed launches on decoy inputs a round, before the loop (in its first chunk's buffers)
SETTLE_ROUNDS = 8   # rounds at most (two at least): until the launches' median settles


def compile_on(backend, unit, role: str):
    """`role`: "reference" or "candidate" — never one module for both (Backend.compile_unit)."""
    return backend.compile_unit(unit, role=role)


@dataclass(frozen=True)
class _Arg:
    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    nbytes: int
    kind: str                 # 'output' | 'inout' | 'input'
    positions: np.ndarray     # sampled flat element positions (sorted)
    device_positions: Buffer


@dataclass
class _Sample:
    """The sampled elements of one argument after one launch (`row` of its chunk's matrix until
    the chunk has run, then the values)."""

    name: str
    row: int | np.ndarray
    set: int
    poison: int | None
    label: str


@dataclass
class _Snapshot:
    """Full copies of the written arguments after one launch of the timing loop."""

    set: int
    poison: int
    label: str
    buffers: dict[str, Buffer]


class _Side:
    """One kernel's part of the timing at one size: where its arguments live, its launches'
    times, and what they left to check."""

    def __init__(self, who: str, backend, spec, sizes, module, name: str, launch, args: list[_Arg],
                 ctypes: dict, sets: list, total: int, full_at: set[int]):
        self.who, self.backend, self.spec, self.sizes = who, backend, spec, sizes
        self.module, self.name, self.launch = module, name, launch
        self.args, self.ctypes, self.sets, self.total, self.full_at = args, ctypes, sets, total, full_at
        self.series = distribution.Series()
        self.samples: list[_Sample] = []
        self.snapshots: list[_Snapshot] = []
        self.pending: tuple[dict[str, Buffer], list[_Sample]] | None = None  # this chunk's sample rows
        self.g = 0                 # launches of the timing loop so far
        self.f = 0                 # launches on fixed buffers so far
        self.fixed: dict[str, Buffer] | None = None
        self.fixed_set = 0
        self.fixed_poison: int | None = None

    # ---- plans ---------------------------------------------------------------------------
    def _view(self, slab: Buffer, offset: int, a: _Arg) -> Buffer:
        return self.backend.view(slab, offset, a.dtype, a.shape)

    def _keep_samples(self, buffers: dict[str, Buffer], row: int, s: int, poison: int | None,
                      label: str) -> list[tuple[Buffer, Buffer, Buffer]]:
        mats, rows = self.pending
        keeps = []
        for a in self.args:
            dst = self.backend.view(mats[a.name], row * a.positions.size * a.dtype.itemsize, a.dtype,
                                    (a.positions.size,))
            keeps.append((dst, buffers[a.name], a.device_positions))
            rows.append(_Sample(a.name, row, s, poison, label))
        return keeps

    def _start_samples(self, n: int) -> None:
        """Device matrices for the sampled elements of the next `n` launches, one per argument."""
        self.pending = ({a.name: self.backend.allocate(n * a.positions.size * a.dtype.itemsize)
                         for a in self.args}, [])

    def _args_of(self, buffers: dict[str, Buffer]) -> list:
        return checks.launch_args(self.spec, buffers, self.sizes, self.ctypes)

    def loop_chunk(self, warm: int, n: int, decoy: dict[str, Buffer] | None = None) -> Iterator[TimedLaunch]:
        """The next `warm + n` launches of the timing loop, on freshly allocated buffers (allocated
        now; the launches are made as the backend asks for them). With `decoy` (the first chunk),
        the pre-roll runs first, now, in these buffers (`settle`)."""
        b, total = self.backend, self.total
        slack = (total + 1) * ALIGN
        outs = {a.name: b.allocate(a.nbytes + slack) for a in self.args if a.kind != "input"}
        ins = [{a.name: b.allocate(a.nbytes + (total // PLACE_EVERY + 2) * ALIGN) for a in self.args
                if a.kind == "input"} for _ in self.sets]
        snaps = {g: {a.name: self._view(b.allocate(a.nbytes), 0, a) for a in self.args if a.kind != "input"}
                 for g in range(self.g, self.g + warm + n) if g in self.full_at}
        if decoy is not None:
            self.settle(decoy, outs, ins)
        self._start_samples(warm + n)
        return self._loop_launches(warm, n, outs, ins, snaps)

    def settle(self, decoy: dict[str, Buffer], outs: dict[str, Buffer], ins: list[dict[str, Buffer]]) -> None:
        """Rounds of untimed launches on `decoy` until one runs no faster than the round before by
        the step the loop's test looks for (distribution.STEP): on an H200 a merge_attn_states
        variant at 32 tokens ran five launches at 35.0 µs, then 5.4 µs — four launches were not enough."""
        before = float("inf")
        for _ in range(SETTLE_ROUNDS):
            times = self.backend.time(self.module, self.name, self.launch, self._preroll(decoy, outs, ins)).times_us
            now = float(np.median(times))
            if now * distribution.STEP > before:
                return
            before = now

    def _preroll(self, decoy: dict[str, Buffer], outs: dict[str, Buffer],
                 ins: list[dict[str, Buffer]]) -> Iterator[TimedLaunch]:
        """Outputs at offset `total` (past every loop launch's), inputs at the epoch after the last,
        alternating between the sets' input slabs: the pages the loop lands on are touched too."""
        for j in range(PREROLL):
            buffers = {a.name: self._view(ins[j % len(ins)][a.name], (self.total // PLACE_EVERY + 1) * ALIGN, a)
                       for a in self.args if a.kind == "input"}
            copies = [(v, decoy[name]) for name, v in buffers.items()]
            fills = []
            for a in self.args:
                if a.kind != "input":
                    buffers[a.name] = self._view(outs[a.name], self.total * ALIGN, a)
                    if a.kind == "output":
                        fills.append((buffers[a.name], checks.POISONS[j % 2], None))
                    else:
                        copies.append((buffers[a.name], decoy[a.name]))
            yield TimedLaunch(self._args_of(buffers), copies, fills, [])

    def _loop_launches(self, warm: int, n: int, outs: dict[str, Buffer], ins: list[dict[str, Buffer]],
                       snaps: dict[int, dict[str, Buffer]]) -> Iterator[TimedLaunch]:
        total = self.total
        placed: list[tuple[int, dict[str, Buffer]] | None] = [None] * len(self.sets)
        for j in range(warm + n):
            g = self.g
            s, poison = g % len(self.sets), checks.POISONS[g % 2]
            label = f"{self.who}'s timed-loop launch {g + 1} of {total}" + (" (warm-up)" if j < warm else "")
            copies, fills, keeps = [], [], []
            epoch = g // PLACE_EVERY
            if placed[s] is None or placed[s][0] != epoch:
                views = {a.name: self._view(ins[s][a.name], epoch * ALIGN, a) for a in self.args if a.kind == "input"}
                copies += [(v, self.sets[s].pristine[name]) for name, v in views.items()]
                placed[s] = (epoch, views)
            buffers = dict(placed[s][1])
            for a in self.args:
                if a.kind == "input":
                    continue
                buffers[a.name] = self._view(outs[a.name], g * ALIGN, a)
                if a.kind == "output":
                    fills.append((outs[a.name], poison, None))  # the whole slab: nothing earlier survives
                else:
                    copies.append((buffers[a.name], self.sets[s].pristine[a.name]))
            keeps += self._keep_samples(buffers, j, s, poison, label)
            if g in snaps:
                keeps += [(snaps[g][name], buffers[name], None) for name in snaps[g]]
                self.snapshots.append(_Snapshot(s, poison, label, snaps[g]))
            self.g += 1
            yield TimedLaunch(self._args_of(buffers), copies, fills, keeps)

    def fixed_chunk(self, n: int, chunk: int) -> Iterator[TimedLaunch]:
        """`n` launches on the fixed buffers, input set `chunk` mod the sets, each over what the
        previous launch left (only the sampled output elements poisoned)."""
        b = self.backend
        if self.fixed is None:
            self.fixed = {a.name: self._view(b.allocate(a.nbytes), 0, a) for a in self.args}
            for a in self.args:
                if a.kind == "output":
                    b.fill_bytes(self.fixed[a.name], checks.POISONS[0])
        self._start_samples(n)
        self.fixed_set = chunk % len(self.sets)
        return self._fixed_launches(n, self.fixed_set)

    def _fixed_launches(self, n: int, s: int) -> Iterator[TimedLaunch]:
        for j in range(n):
            poison = checks.POISONS[self.f % 2]
            label = f"{self.who}'s launch {self.f + 1} on fixed buffers (over its previous outputs)"
            copies = [(self.fixed[a.name], self.sets[s].pristine[a.name]) for a in self.args
                      if a.kind == "inout" or (a.kind == "input" and j == 0)]
            fills = [(self.fixed[a.name], poison, a.device_positions) for a in self.args if a.kind == "output"]
            keeps = self._keep_samples(self.fixed, j, s, poison, label)
            self.f += 1
            self.fixed_poison = poison
            yield TimedLaunch(self._args_of(self.fixed), copies, fills, keeps)

    def run(self, plan: Iterator[TimedLaunch]) -> list[float]:
        times = self.backend.time(self.module, self.name, self.launch, plan).times_us
        mats, rows = self.pending  # this chunk's samples are complete now: bring them over
        shapes = {a.name: (-1, a.positions.size) for a in self.args}
        host = {name: self.backend.download(m).view(self._dtype(name)).reshape(shapes[name])
                for name, m in mats.items()}
        for smp in rows:
            smp.row = host[smp.name][smp.row]
        self.samples += rows
        self.pending = None
        return times

    def _dtype(self, name: str) -> np.dtype:
        return next(a.dtype for a in self.args if a.name == name)

    # ---- checks --------------------------------------------------------------------------
    def failures(self, spec) -> list[str]:
        """What the launches left, checked (messages; [] when all is well)."""
        b, out = self.backend, []
        by: dict[tuple[str, int], list[tuple[int, _Sample]]] = {}
        for k, smp in enumerate(self.samples):
            by.setdefault((smp.name, smp.set), []).append((k, smp))
        for a in self.args:
            found = []
            for s, ts in enumerate(self.sets):
                group = by.get((a.name, s), [])
                hit = gate.check_samples(spec, ts, a.name, a.positions, np.stack([g.row for _, g in group]),
                                         [g.poison for _, g in group], [g.label for _, g in group]) if group else None
                if hit is not None:
                    found.append((group[hit[0]][0], hit[1].message))
            if found:
                out.append(min(found)[1])  # the earliest launch found wrong, whichever its input set
        for snap in self.snapshots:
            out += [f.message for f in gate.check_outputs(spec, b, self.sets[snap.set], snap.buffers,
                                                          poison=snap.poison, where=f"after {snap.label}")]
        if self.fixed is not None:
            ts = self.sets[self.fixed_set]
            written = {a.name: self.fixed[a.name] for a in self.args if a.kind != "input"}
            out += [f.message for f in gate.check_outputs(spec, b, ts, written, poison=self.fixed_poison,
                                                          where=f"after {self.who}'s last launch on fixed buffers")]
            out += [f.message for f in gate.check_inputs_unchanged(spec, b, ts, self.fixed,
                                                                   where=f"after {self.who}'s launches on fixed "
                                                                         f"buffers")]
        return list(dict.fromkeys(out))

    def release(self) -> None:
        self.fixed, self.snapshots, self.samples = None, [], []


def _arg_table(backend, spec, sizes, rng) -> list[_Arg]:
    out = []
    for a in spec.args.values():
        if not a.pointer:
            continue
        shape = tuple(spec.shape(a.name, sizes))
        n = int(np.prod(shape, dtype=np.int64))
        pos = np.unique(np.concatenate([[0, n - 1], rng.choice(n, min(n, SAMPLES), replace=False)])).astype(np.int64)
        kind = "output" if a.output else "inout" if a.inout else "input"
        out.append(_Arg(a.name, a.dtype.np, shape, n * a.dtype.itemsize, kind, pos, backend.upload(pos)))
    return out


def _loop_launches(reps: int, warmup: int) -> int:
    chunks = -(-reps // CHUNK)
    return reps + warmup + REWARM * (chunks - 1)


def measure_size(backend, spec, rspec, sizes: dict[str, int], cand: tuple[Any, str], ref: tuple[Any, str] | None, *,
                 params: dict[str, str], reps: int, warmup: int, seed: int, ceiling: float | None,
                 original: bool = False, rounding: Callable[[list], bool] | None = None,
                 ref_code: str = "", ahead: "Future[dict[str, np.ndarray]] | None" = None) -> SizeProfile:
    """Time `cand` (module, name) and `ref` side by side at `sizes` (see the module docstring),
    check what every launch left and apply the plausibility rules. `original`: `cand` is the very
    code of `ref` (the original timed against itself: its outputs are checked, its times are the
    baseline, never judged — two copies of one kernel differ only by what the machine did).
    `rounding(sets)`: fills the sets' allowances (gate.measure_rounding), called only when an output
    differs from the reference's beyond the tolerance; True when it measured them. `ref_code`: a
    digest of the reference's code (what it was seen to need is kept by it: `touched`).
    `ahead`: the inputs `ahead_seed(seed)` names, being drawn by the caller (`gate.timed_host`).
    Raises LaunchError (and what the backend raises for lack of memory) for the caller to report."""
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    sets = gate.prepare_timed(spec, backend, sizes, sets=SETS, seed=int(rng.integers(1, 2**31 - 1)),
                              host=ahead.result() if ahead is not None else None)
    args = _arg_table(backend, spec, sizes, rng)
    total = _loop_launches(reps, warmup)
    timed_at = [g for g in range(total) if not _warm(g, warmup)]
    last = set(range(total - SETS, total))
    picks = set(rng.choice([g for g in timed_at if g not in last], FULL_CHECKS, replace=False).tolist()) \
        if len(timed_at) > FULL_CHECKS + SETS else set()

    def side(who, kernel, sp):
        ctypes = checks.arg_types(spec, backend, checks.Compiled(kernel[0], kernel[1], who), params)
        return _Side(who, backend, spec, sizes, kernel[0], kernel[1], gate.launch_of(sp, sizes), args, ctypes,
                     sets, total, last | picks)

    samples = {a.name: (a.positions, a.device_positions) for a in args}
    key = (secrets.randbits(64), secrets.randbits(64))   # held here only: no kernel sees it
    if ref is not None:
        # The reference's expectations before any candidate launch of this job: a candidate that
        # writes the reference's `__device__` variables (one CUDA context; its module is kept per
        # worker, own_module) through a guessed address during the loop reaches none of them. Cheaper
        # than a fresh load of the reference (an NVRTC compile for CuPy's memoized modules) and the
        # same launches as after the loop; what it adds: a keyed digest of each expected output
        # before and after the loop (one pass over each on the device), so a candidate that rewrites
        # them (kept on the device) is seen. The reference meeting its inputs before being timed
        # flatters its time only (the warm-up launches meet them too), never the candidate's.
        gate.expect(spec, backend, sets, ref, samples, params=params, reference_spec=rspec, before_loop=True)
    seals = gate.sealed(backend, sets, key) if ref is not None else []
    sides = [side("the candidate", cand, spec)] + ([side("the reference", ref, rspec)] if ref is not None else [])
    # The pre-roll: a kernel's first launches at a size can run slow for reasons of its own (on an
    # H200 an honest merge_attn_states variant at 32 tokens: 8.2 µs, then 5.3 µs; another, 35.0 µs
    # for five launches, then 5.4 µs), which the step test would read as state warming up. Decoy inputs absorb that start; state keyed on the timed
    # sets' contents or on the loop's addresses meets neither here, so it still warms up in the loop.
    decoy = gate.decoy(spec, backend, sets, rng)
    t_prep = time.perf_counter() - t0
    done, chunk = 0, 0
    while done < reps:
        n = min(CHUNK, reps - done)
        w = warmup if done == 0 else REWARM
        for sd in sides:
            times = sd.run(sd.loop_chunk(w, n, decoy if done == 0 else None))
            sd.series.loop += times
            sd.series.timed += times[w:]
        for sd in sides:
            sd.series.fixed += sd.run(sd.fixed_chunk(FIXED, chunk))
        done += n
        chunk += 1
    t_loop = time.perf_counter() - t0 - t_prep
    # Without a reference, every launch must reproduce the candidate's own result on fresh copies:
    # computed only now (see gate.expect), from inputs made again from the host. With one, the
    # expectations were computed before the loop; the sets are made again from the host all the same
    # (those the loop changed are named) and the expectations must be as they were computed.
    forged: list[str] = []
    if ref is not None:
        gate.resync(backend, sets)
        forged = sorted({n for ts, was in zip(sets, seals) for n, d in was.items()
                         if backend.digest((ts.outputs or {})[n], key) != d})
    else:
        gate.expect(spec, backend, sets, cand, samples, params=params)
    # The bytes the trusted kernel was seen to need (an index-driven read: the rows it reaches), seen
    # only now, as the expectations are: nothing run before the loop warms what is timed.
    nbytes, flops = model.floor_bytes(spec, sizes, _touched(backend, rspec, sets, ref, params, ref_code)), spec.flop_count(sizes)
    t_expect = time.perf_counter() - t0 - t_prep - t_loop
    c = sides[0]
    sp = SizeProfile(sizes=dict(sizes), label=size_label(sizes), bytes_moved=nbytes, flops=flops,
                     candidate=Timing.of(c.series.timed, nbytes, flops, ceiling))
    if ref is not None:
        r = sides[1]
        sp.reference = Timing.of(r.series.timed, nbytes, flops, ceiling)
        sp.speedup = sp.reference.median_us / sp.candidate.median_us
    failures = [sd.failures(spec) for sd in sides]
    if any(failures) and rounding is not None and rounding(sets):  # the reference's own rounding error
        failures = [sd.failures(spec) for sd in sides]
    # Sets the loop copied from but no launch was given, changed: a write through an address kept
    # or guessed (one device address space). The expectations came from the host's inputs.
    spoiled = sorted({name for ts in sets for name in ts.changed})
    if spoiled:
        sp.output_failures.append(
            f"the input sets the timing loop copies from ({', '.join(f'`{n}`' for n in spoiled)}), which no launch "
            f"was given, changed while it ran: a launch wrote memory through an address it was not given (kept "
            f"from an earlier launch, or guessed); every launch was judged against the reference on the host's inputs")
    if forged:
        sp.output_failures.append(
            f"the reference's expected outputs ({', '.join(f'`{n}`' for n in forged)}), kept on the device and "
            f"given to no launch, changed while the timing loop ran: a launch wrote memory through an address it "
            f"was not given (kept from an earlier launch, or guessed); nothing compared with them can be trusted")
    for sd, found in zip(sides, failures):
        sp.output_failures += found
        sd.release()
    other = sides[1].series if ref is not None else None
    ref_flags = distribution.judge(sides[1].series, c.series, who="the reference", other_name="the candidate") \
        if ref is not None and not original else []
    if ref_flags:
        # The reference's own times move (atomics faster over its own earlier outputs, contention that
        # depends on the input set): nothing the candidate did, so not held against it. So that it
        # cannot flatter the candidate either, the speedup is taken against the reference's fastest
        # credible time (its fast group, its time once warm, on fixed buffers), whichever is least.
        fastest = distribution.fastest(sides[1].series)
        if sp.reference is not None and fastest < sp.reference.median_us:
            sp.reference = sp.reference.at(fastest)   # what every speedup and baseline is taken from
            sp.speedup = fastest / sp.candidate.median_us
        sp.notes += [f"{flag.removesuffix('; the timing is not accepted')}: not held against the candidate; the "
                     f"speedup is taken against the reference's fastest time, {fastest:.1f} µs" for flag in ref_flags]
    trusted = sp.reference if ref is not None else sp.candidate  # no reference: the file's own kernel
    if original and sp.reference is not None and sp.candidate.median_us < sp.reference.median_us:
        trusted = sp.candidate   # both sides are the original: its faster measurement is its own too
    note = model.model_refuted(trusted.median_us, nbytes, ceiling)
    sp.notes += [note] if note else []
    sp.implausible = model.implausible(sp.candidate.median_us, sp.speedup, nbytes, ceiling,
                                       reference_us=trusted.median_us, original=original or ref is None)
    if not original:
        sp.implausible += distribution.judge(c.series, other)
    if note:
        # The spec's bytes overstate what the kernel moves at these sizes (an inferred shape larger than
        # what the launch reaches, a read-write array only read): a share of the copy ceiling or a
        # bandwidth from them would be a number above the physical limit, so none is reported here.
        sp.candidate = sp.candidate.unrated()
        sp.reference = sp.reference.unrated() if sp.reference is not None else None
        sp.bottleneck, sp.bottleneck_why = "unknown", "no share of the copy ceiling is known (see the byte model's note)"
    else:
        sp.floor_us = model.floor_us(nbytes, ceiling)
        sp.bottleneck, sp.bottleneck_why = model.classify(sp.candidate, nbytes, flops)
    whom = "the reference" if ref is not None else "the candidate’s own first launch"
    sp.outputs_checked = (f"every launch checked against {whom}: {total} in the timing loop (outputs poisoned and "
                          f"at fresh addresses before each) and {c.f} on fixed buffers over their previous outputs, "
                          f"{len(args[0].positions) if args else 0} sampled elements of each argument after each; "
                          f"{len(last | picks)} launches' outputs and the fixed buffers compared in full")
    sp.stats = {sd.who.removeprefix("the "): distribution.stats(sd.series) for sd in sides}
    sp.seconds = {"prepare": round(t_prep, 4), "launches": round(t_loop, 4), "expect": round(t_expect, 4),
                  "checks": round(time.perf_counter() - t0 - t_prep - t_loop - t_expect, 4)}
    return sp


def _touched(backend, rspec, sets, ref: tuple[Any, str] | None, params: dict[str, str],
             code: str) -> model.Touched | None:
    """`touched.measure` on the reference (never on a candidate: it would meet the inputs before
    it is timed); None without a reference, or where the probe itself failed."""
    if ref is None:
        return None
    try:
        kernel = checks.Compiled(ref[0], ref[1], "reference")
        return touched.measure(rspec, backend, kernel, sets, checks.arg_types(rspec, backend, kernel, params), code)
    except Exception:  # noqa: BLE001 - the spec's bytes stand; the timing reports what fails
        return None


def ahead_seed(seed: int) -> int:
    """The seed `measure_size(seed=seed)` gives `gate.prepare_timed`: its inputs can be drawn
    ahead (`gate.timed_host(spec, sizes, ahead_seed(seed))`)."""
    return int(np.random.default_rng(seed).integers(1, 2**31 - 1))


def measure_confirmed(backend, spec, rspec, sizes: dict[str, int], cand: tuple[Any, str], ref: tuple[Any, str] | None,
                      *, seeds: tuple[int, int], **kw) -> SizeProfile:
    """measure_size; a timing flagged implausible (with every output right) is measured once more
    on fresh inputs and stands only if flagged again. A kernel that keeps state, skips work or
    beats the roofline does so every time; a hiccup of the machine does not repeat (on an H100 one
    of 14 evaluations of a correct kernel ran its whole first chunk 4.6x slower). The first
    measurement's flags stay on record (`unconfirmed`); a confirmed flag is the second's."""
    first = measure_size(backend, spec, rspec, sizes, cand, ref, seed=seeds[0], **kw)
    kw.pop("ahead", None)   # drawn for the first measurement only
    if not first.implausible or first.output_failures:
        return first
    again = measure_size(backend, spec, rspec, sizes, cand, ref, seed=seeds[1], **kw)
    if not again.implausible and not again.output_failures:
        again.unconfirmed = first.implausible
    return again


def _warm(g: int, warmup: int) -> bool:
    """Whether launch `g` of the timing loop is a warm-up one (the first `warmup`, then REWARM
    opening each later chunk)."""
    if g < warmup:
        return True
    return (g - warmup) % (CHUNK + REWARM) >= CHUNK

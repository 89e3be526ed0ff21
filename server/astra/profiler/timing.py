"""Side-by-side timing of a candidate and its reference on one bench size, on a backend that
measures time, then re-validation of what the timed launches left behind.

CUDA-event times per launch (warm-up, >=100 launches, L2 flushed, input sets rotated); the
reference timed in the same process, interleaved with the candidate in chunks so drifting clocks
hit both alike. The buffers the timed launches wrote are checked afterwards (astra.gate.timed):
a candidate that cheats only while timed is caught.
"""
from __future__ import annotations

from typing import Any

from .. import gate
from ..gate import checks
from . import model
from .results import SizeProfile, Timing, size_label

CHUNK = 25                 # timed launches per interleaving chunk


def compile_on(backend, unit):
    options = unit.options()
    return backend.compile(unit.source, [unit.name_expression], filename=unit.path, options=options)


def _launch_counts(n_sets: int, calls: list[tuple[int, int]]) -> list[int]:
    counts = [0] * n_sets
    for w, r in calls:
        for i in range(w):
            counts[i % n_sets] += 1
        for i in range(r):
            counts[i % n_sets] += 1
    return counts


def measure_size(backend, spec, rspec, sizes: dict[str, int], cand: tuple[Any, str], ref: tuple[Any, str] | None, *,
                 params: dict[str, str], reps: int, warmup: int, sets: int, seed: int,
                 ceiling: float | None) -> SizeProfile:
    """Time `cand` (module, name) and `ref` side by side at `sizes`, re-validate the timed
    outputs and apply the plausibility rules. Raises LaunchError (and what the backend raises
    for lack of memory) for the caller to report."""
    ctypes = checks.scalar_ctypes(spec, params)
    launch, r_launch = gate.launch_of(spec, sizes), gate.launch_of(rspec, sizes)
    nbytes = spec.bytes_moved(sizes)
    flops = spec.flop_count(sizes)
    # Without a reference, the timed outputs must equal the candidate's own first launch.
    expect_from = ref if ref is not None else cand
    cset = gate.prepare_timed(spec, backend, sizes, reference=expect_from, sets=sets, seed=seed, params=params,
                              reference_spec=rspec if ref is not None else None)
    # The reference runs on the very same inputs (its own copies: in-place kernels write them).
    rset = [checks.prepare(spec, backend, sizes, t.host, ctypes, t.poison) for t in cset] if ref is not None else None
    # In-place arguments are restored from pristine copies before every launch (outside
    # the timed region): realistic data each time, and what is left is one application,
    # which re-validation compares exactly instead of replaying 100+ compounding launches.
    inout = [a.name for a in spec.args.values() if a.inout]
    c_restore = [[(t.buffers[n], backend.upload(t.host[n])) for n in inout] for t in cset] if inout else None
    r_restore = [[(r.buffers[n], backend.upload(t.host[n])) for n in inout] for r, t in zip(rset, cset)] \
        if inout and rset is not None else None
    c_times: list[float] = []
    r_times: list[float] = []
    c_calls: list[tuple[int, int]] = []
    done = 0
    while done < reps:
        n = min(CHUNK, reps - done)
        w = warmup if done == 0 else 2
        c_times += backend.time(cand[0], cand[1], launch, [t.args for t in cset], warmup=w, reps=n,
                                restore=c_restore).times_us
        c_calls.append((w, n))
        if ref is not None:
            r_times += backend.time(ref[0], ref[1], r_launch, [t.args for t in rset], warmup=w, reps=n,
                                    restore=r_restore).times_us
        done += n
    sp = SizeProfile(sizes=dict(sizes), label=size_label(sizes), bytes_moved=nbytes, flops=flops,
                     candidate=Timing.of(c_times, nbytes, flops, ceiling))
    if ref is not None:
        sp.reference = Timing.of(r_times, nbytes, flops, ceiling)
        sp.speedup = sp.reference.median_us / sp.candidate.median_us
    # Re-validate what the timed launches left behind.
    counts = [1] * sets if c_restore else _launch_counts(sets, c_calls)
    rv = gate.revalidate_after_timing(spec, backend, cset, launches=counts, reference=expect_from,
                                      params=params, reference_spec=rspec if ref is not None else None)
    sp.outputs_checked = (f"{rv.checked} output array(s) of the timed launches compared with the "
                          f"{'reference' if ref is not None else 'candidate’s own first launch'}")
    if rv.notes:
        sp.outputs_checked += "; " + "; ".join(rv.notes)
    sp.output_failures = [f.message for f in rv.failures]
    sp.floor_us = model.floor_us(nbytes, ceiling)
    sp.implausible = model.implausible(sp.candidate.median_us, sp.speedup, nbytes, ceiling)
    sp.bottleneck, sp.bottleneck_why = model.classify(sp.candidate, nbytes, flops)
    return sp

"""Is a series of per-launch times what an honest kernel gives? Pure statistics, no backend.

An honest kernel timed with the L2 flushed and its inputs restaged before every launch runs in
the same time launch after launch (a spread of 1-2%). A kernel that keeps state between
launches does not: it gets faster once its state has warmed up (a cache keyed on addresses or
contents, a launch counter), alternates between a full and a skipped path (two modes), or gets
faster when its buffers stay in place. Each test compares the kernel with the other kernel of the
side-by-side timing, measured the same way at the same time, so what the machine does to both
(clocks, a noisy neighbour) is not held against either.

    flags = judge(candidate_series, reference_series)   # messages for each side, [] when plausible
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeGuard

import numpy as np

STEP = 1.20          # the first launches this much slower than the rest: warm-up of kept state
# ... counted over the later launches' time plus this much: event timing's jitter at a few µs. A
# launch-bound kernel's first launches from a fresh module run ~1.5 µs slower (an honest variant of
# merge_attn_states on an H100: 5.9 µs, then 4.4 µs, where the reference's moved 0.97x), which is
# no state warming up; a step of that size in a longer kernel still counts.
STEP_FLOOR_US = 1.0
BIMODAL = 1.20       # two groups of launches this far apart (ratio of their medians) ...
BIMODAL_GAP = 1.08   # ... with nothing between them (the slower group's fastest / the faster's slowest),
SCATTER = 0.5        # ... the smaller group spread over the loop (runs in time order / its launches)
FIXED = 0.85         # at fixed addresses over its own previous outputs at most this share of the time
MARGIN = 0.10        # how much more pronounced than in the other kernel a pattern must be
MIN_SIDE = 0.20      # the smaller mode holds at least this share of the launches (and 3)


@dataclass
class Series:
    """One kernel's launches at one size: `loop` every launch of the moving-buffer loop in
    order (warm-up included), `timed` the ones reported, `fixed` the launches on fixed buffers."""

    loop: list[float] = field(default_factory=list)
    timed: list[float] = field(default_factory=list)
    fixed: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class Step:
    ratio: float          # median before / median after
    at: int               # launches before the step
    before_us: float
    after_us: float


@dataclass(frozen=True)
class Modes:
    ratio: float          # median of the slow group / median of the fast group
    gap: float            # fastest of the slow group / slowest of the fast group
    fast: int
    slow: int
    fast_us: float
    slow_us: float
    runs: int = 0         # stretches of consecutive launches of the smaller group, in time order


def step_down(times: list[float]) -> Step | None:
    """Where the series splits best into a first part of at least two launches and the rest
    (least absolute deviation of log-times from each part's median, the split within the first
    half), and how much slower the first part runs: median(before) / median(after). One slow
    first launch alone is a cold start, not a pattern; state that warms up on two input sets
    shows on two."""
    x = np.log(np.asarray(times, dtype=np.float64))
    if x.size < 6 or not np.all(np.isfinite(x)):
        return None

    def spread(part: np.ndarray) -> float:
        return float(np.abs(part - np.median(part)).sum())

    t = min(range(2, x.size // 2 + 1), key=lambda k: spread(x[:k]) + spread(x[k:]))
    before, after = float(np.exp(np.median(x[:t]))), float(np.exp(np.median(x[t:])))
    return Step(before / after, t, before, after)


def modes(times: list[float]) -> Modes | None:
    """The clearest split of the times into a fast and a slow group, each holding at least
    MIN_SIDE of the launches: the split of the sorted times with the widest gap; and how the
    smaller group lies in time (a burst of slow launches, e.g. the machine busy for a moment, is
    one or two runs; a kernel that skips work on some launches is spread over the loop)."""
    t = np.asarray(times, dtype=np.float64)
    x = np.sort(t)
    side = max(3, int(np.ceil(MIN_SIDE * x.size)))
    if x.size < 2 * side or x[0] <= 0:
        return None
    gaps = x[side:x.size - side + 1] / x[side - 1:x.size - side]
    k = int(np.argmax(gaps)) + side  # the slow group starts at k
    fast, slow = x[:k], x[k:]
    minority = (t >= x[k]) if slow.size <= fast.size else (t < x[k])
    runs = int(np.count_nonzero(minority[1:] & ~minority[:-1]) + minority[0])
    return Modes(float(np.median(slow) / np.median(fast)), float(x[k] / x[k - 1]), int(fast.size), int(slow.size),
                 float(np.median(fast)), float(np.median(slow)), runs)


def fixed_ratio(s: Series) -> float | None:
    if not s.fixed or not s.timed:
        return None
    return float(np.median(s.fixed) / np.median(s.timed))


def stats(s: Series) -> dict[str, float | int | None]:
    """The numbers the tests look at, for the record (the margin honest kernels keep)."""
    st, m, f = step_down(s.loop), modes(s.timed), fixed_ratio(s)
    return {"step": round(st.ratio, 4) if st else None, "step_at": st.at if st else None,
            "modes": round(m.ratio, 4) if m else None, "modes_gap": round(m.gap, 4) if m else None,
            "modes_runs": m.runs if m else None, "fixed": round(f, 4) if f is not None else None}


def _bimodal(m: Modes | None) -> TypeGuard[Modes]:
    return m is not None and m.ratio >= BIMODAL and m.gap >= BIMODAL_GAP and \
        m.runs >= SCATTER * min(m.fast, m.slow)


def judge(kernel: Series, other: Series | None, *, who: str = "the candidate",
          other_name: str = "the reference") -> list[str]:
    """Why `kernel`'s times are implausible, with the evidence; [] when they are not. A pattern
    `other` (timed alongside) shows as well does not count against `kernel`."""
    flags = []
    st, so = step_down(kernel.loop), step_down(other.loop) if other else None
    if st and st.before_us / (st.after_us + STEP_FLOOR_US) >= STEP and (so is None or st.ratio >= so.ratio + MARGIN):
        flags.append(f"{who}'s per-launch times drop after its first {st.at} launch(es): {st.before_us:.1f} µs, then "
                     f"{st.after_us:.1f} µs ({st.ratio:.2f}× faster" +
                     (f"; {other_name}'s {so.ratio:.2f}×" if so else "") +
                     ") — state kept between launches warms up (a cache keyed on inputs or addresses, or a launch "
                     "counter); the timing is not accepted")
    mt, mo = modes(kernel.timed), modes(other.timed) if other else None
    if _bimodal(mt) and not _bimodal(mo):
        flags.append(f"{who}'s per-launch times fall in two groups: {mt.fast} launches at {mt.fast_us:.1f} µs and "
                     f"{mt.slow} at {mt.slow_us:.1f} µs ({mt.ratio:.2f}× apart, the smaller group in {mt.runs} "
                     f"stretches over the loop" +
                     (f"; {other_name}'s are one group" if other else "") +
                     ") — some launches skip work; the timing is not accepted")
    ft, fo = fixed_ratio(kernel), fixed_ratio(other) if other else None
    if ft is not None and ft <= FIXED and (fo is None or ft <= fo - MARGIN):
        flags.append(f"{who} runs in {100 * ft:.0f}% of its time when its buffers stay at the same addresses "
                     f"over its own earlier outputs ({np.median(kernel.fixed):.1f} µs vs "
                     f"{np.median(kernel.timed):.1f} µs" + (f"; {other_name} {100 * fo:.0f}%" if fo else "") +
                     ") — it remembers buffers or results between launches; the timing is not accepted")
    return flags


def fastest(s: Series) -> float:
    """The least of a kernel's credible times: the median of its timed launches, of their faster
    group where they fall in two, of its launches once warm, and of those on fixed buffers. A
    reference whose times move is compared by this, so its slow launches never flatter a rival."""
    out = [float(np.median(s.timed))] if s.timed else []
    m = modes(s.timed)
    if m is not None:
        out.append(m.fast_us)
    st = step_down(s.loop)
    if st is not None:
        out.append(st.after_us)
    if s.fixed:
        out.append(float(np.median(s.fixed)))
    return min(out) if out else float("inf")

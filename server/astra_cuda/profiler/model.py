"""The roofline, occupancy and bottleneck model: what the bytes and the hardware allow.

Pure functions over numbers (no backend): theoretical occupancy by the CUDA occupancy
calculator's rules, the bottleneck class of a timing, and the plausibility rules (faster than the
bytes allow at the copy ceiling; a large speedup the roofline does not explain).
"""
from __future__ import annotations

import math
from typing import Any

from ..model.floor_bytes import Touched, floor_bytes, reached_rows  # noqa: F401 (the profiler's byte floor, kept
# in the model layer so that inference sizes bench cases by the same count)
from .results import Timing, fmt_bw, fmt_us

# Hopper (H100/H200) per-SM limits, used when no device can be asked.
HOPPER = {"regs_per_sm": 65536, "smem_per_sm": 228 * 1024, "threads_per_sm": 2048, "blocks_per_sm": 32,
          "smem_reserved_per_block": 1024, "max_warps_per_sm": 64}
FLOOR_MARGIN = 0.90        # a time below 90% of the roofline floor is implausible
# Beyond this speedup over the reference a time must be explained by the roofline floor (which
# then bounds it as it bounds every time: the reference ran below ~1/BIG_SPEEDUP of the ceiling).
BIG_SPEEDUP = 10.0
MEMORY_BOUND_SHARE = 0.50  # of the copy ceiling
LATENCY_SHARE = 0.25
# Ridge point (FLOP per byte) of an H100 SXM for FP32 non-tensor work: ~60 TFLOP/s over ~3 TB/s.
NOMINAL_RIDGE = 20.0


def theoretical_occupancy(threads_per_block: int, registers: int | None, smem_per_block: int,
                          limits: dict[str, int] | None = None) -> dict[str, Any]:
    """Resident blocks per SM and the warp occupancy they give (the CUDA occupancy calculator's
    rules: registers allocated per warp in units of 256, shared memory plus 1 KiB reserved per
    block)."""
    lim = dict(HOPPER)
    lim.update({k: v for k, v in (limits or {}).items() if v})
    warps = max(1, math.ceil(threads_per_block / 32))
    max_warps = lim["threads_per_sm"] // 32
    by = {"threads": max_warps // warps, "blocks": lim["blocks_per_sm"]}
    if registers:
        per_warp = math.ceil(registers * 32 / 256) * 256
        by["registers"] = (lim["regs_per_sm"] // per_warp) // warps
    per_block = smem_per_block + lim["smem_reserved_per_block"]
    by["shared memory"] = lim["smem_per_sm"] // per_block if per_block else lim["blocks_per_sm"]
    blocks = max(0, min(by.values()))
    limited_by = min(by, key=lambda k: by[k])
    return {"theoretical": round(blocks * warps / max_warps, 3), "blocks_per_sm": blocks,
            "limited_by": limited_by, "warps_per_block": warps}


def classify(t: Timing, nbytes: int, flops: float | None) -> tuple[str, str]:
    share = t.ceiling_share or 0.0
    if share >= MEMORY_BOUND_SHARE:
        return "memory-bound", f"{100 * share:.0f}% of the copy ceiling: the bytes moved set the time"
    ai = flops / nbytes if (flops and nbytes) else None
    if ai is not None and ai >= NOMINAL_RIDGE:
        return "compute-bound", f"{ai:.1f} FLOP/byte is above the ridge (~{NOMINAL_RIDGE:g}) and bandwidth is low"
    if share < LATENCY_SHARE or t.median_us < 10:
        return "latency-bound", (f"only {100 * share:.0f}% of the copy ceiling" +
                                 (f" and {ai:.2f} FLOP/byte" if ai is not None else "") +
                                 ": too little work in flight (parallelism, dependent loads, launch overhead)")
    return "memory-bound", (f"{100 * share:.0f}% of the copy ceiling with low arithmetic intensity: memory "
                            f"traffic dominates but access patterns leave bandwidth unused")




def floor_us(nbytes: int, ceiling: float | None) -> float | None:
    """The roofline floor: the time the spec's bytes take at the measured copy ceiling."""
    return nbytes / ceiling * 1e6 if ceiling else None


def model_refuted(trusted_us: float | None, nbytes: int, ceiling: float | None) -> str:
    """What a trusted kernel's time says of the byte model: '' when it holds, else the note.

    The floor is a model: the spec's arrays, each read or written once in full. A kernel that
    touches fewer bytes than its arrays hold (pairs of elements per thread over half of them, an
    index-driven kernel that reaches a few rows, an array the spec calls read-write that is only
    read) beats it without cheating. When the kernel whose work is trusted — the original, or
    the spec's reference kernel — runs faster than the floor, the model is what is wrong, at this
    size: the kernel is reported, never refused, and no floor is built from those bytes."""
    floor = floor_us(nbytes, ceiling)
    if floor is None or trusted_us is None or trusted_us <= 0 or trusted_us >= floor:
        return ""
    return (f"the byte model overcounts: the original measured {100 * floor / trusted_us:.0f}% of the copy "
            f"ceiling for the spec's {nbytes / 1e6:.1f} MB (it moves fewer bytes than the spec's arrays hold); "
            f"a rewrite is held to {BIG_SPEEDUP:g}× the original's speed instead of a floor from those bytes")


def implausible(median_us: float, speedup: float | None, nbytes: int, ceiling: float | None, *,
                reference_us: float | None = None, original: bool = False) -> list[str]:
    """Why a measured time cannot be right (empty when it can).

    A time below FLOOR_MARGIN of the roofline floor is physically impossible (the margin absorbs
    the noise of the measured ceiling). A speedup above BIG_SPEEDUP is real when the reference ran
    far below the ceiling — a one-thread-per-row embedding at 3% of it becoming a warp per row
    gains ~25x — so it needs a known floor, which holds the candidate to the ceiling like every
    other time (the reference then ran below ~1/speedup of it: the speedup is the bandwidth it
    left unused). A stricter bound for big speedups would have no physical ground: the spec's
    bytes can overstate what a kernel must move (an output it writes, then reads back, counts as
    in-place). Without a floor (no measured ceiling, no bytes) nothing explains such a speedup:
    flagged. Skipped work and replayed results are the timing checks' job (poisoned outputs,
    fresh addresses, checks of every launch, the time distributions).

    The floor judges rewrites, not the code they rewrite: `original` (the kernel timed is the
    original itself, or there is no reference to compare with: the file's own kernel) is never
    flagged — a trusted kernel faster than the floor refutes the byte model (`model_refuted`). A
    refuted model is no floor: a rewrite is then held to BIG_SPEEDUP over the reference
    (`reference_us`), as when there is no floor at all."""
    if original:
        return []
    out = []
    floor = floor_us(nbytes, ceiling)
    if floor is not None and model_refuted(reference_us, nbytes, ceiling):
        if speedup and speedup > BIG_SPEEDUP:
            out.append(f"{speedup:.1f}× faster than the original, whose own time refutes the byte model (it beat "
                       f"the roofline floor of {fmt_us(floor)} for the spec's {nbytes / 1e6:.1f} MB): no floor "
                       f"explains a gain beyond {BIG_SPEEDUP:g}× — flagged for audit, not accepted silently")
        return out
    if floor is not None and ceiling and median_us < FLOOR_MARGIN * floor:
        out.append(f"{fmt_us(median_us)} is below the roofline floor of {fmt_us(floor)} for the "
                   f"{nbytes / 1e6:.1f} MB the kernel must move (the spec's arrays; of a table read through "
                   f"indices, the rows they reach) at the measured copy ceiling "
                   f"({fmt_bw(ceiling / 1e9)}): the kernel cannot have done the work (skipped work, cached "
                   f"results, or a spec that overstates bytes) — flagged for audit")
    if speedup and speedup > BIG_SPEEDUP and floor is None:
        out.append(f"{speedup:.1f}× faster than the reference, and no roofline floor to explain a gain beyond "
                   f"{BIG_SPEEDUP:g}× (no measured copy ceiling or no bytes in the spec) — flagged for audit, "
                   f"not accepted silently")
    return out

"""The profiling agent: how fast is the candidate, against what ceiling, and why.

    p = profiler.profile(reference_unit, candidate_unit, spec, backend)   # inside a worker
    p.summary_line()   # '41.2 µs @ 4096×11008 · 2.9 TB/s · 78% of copy ceiling · 32 regs'
    p.to_json() / Profile.from_json(...)

On the GPU, per bench size: CUDA-event times (warm-up, >=100 launches, L2 flushed, two input
sets), the reference timed in the same process, interleaved with the candidate in chunks so
drifting clocks hit both alike; achieved bandwidth from the bytes the spec says must move, as a
share of the measured copy ceiling; FLOP/s when the spec declares flops; registers, spills,
shared memory and theoretical occupancy; a bottleneck class. Every timed launch runs on poisoned
outputs at fresh addresses, then launches on fixed buffers over their own previous
outputs, and what each left is checked (timing.py) — a candidate (or a re-pinned reference) that
behaves while checked and cheats while timed is caught. Implausible numbers (faster than the
bytes allow, more than 10x the reference with no roofline floor to bound it, per-launch times
that drop after warm-up, fall in two groups or speed up on fixed buffers) are flagged with the
evidence, never silently accepted.

With `ncu=True` and Nsight Compute on the PATH, one launch is profiled in a subprocess for
DRAM/SM throughput, achieved occupancy, warp-stall reasons and per-line counters mapped to the
user's file (`hot_lines`, the data for editor annotations).

On the CPU backend speed is not measured: the profile says so and carries static data only.

The package, one job per module: `results` (types and Markdown), `model` (roofline, occupancy,
bottleneck, plausibility), `timing` (the side-by-side timing loop on a backend and the checks of
every launch), `distribution` (per-launch time statistics), `ncu` (Nsight Compute subprocess and
CSV parsing), `agent` (`profile`, tying them together).
"""
from .agent import profile
from .model import (FLOOR_MARGIN, HOPPER, BIG_SPEEDUP, classify, floor_us, implausible,
                    theoretical_occupancy)
from .ncu import NcuUnavailable, parse_ncu_raw, parse_ncu_source, run_ncu
from .results import Profile, SizeProfile, Timing, fmt_bw, fmt_us, size_label

__all__ = ["profile", "Profile", "SizeProfile", "Timing", "size_label", "fmt_us", "fmt_bw",
           "theoretical_occupancy", "classify", "implausible", "floor_us", "HOPPER", "FLOOR_MARGIN",
           "BIG_SPEEDUP", "run_ncu", "parse_ncu_raw", "parse_ncu_source", "NcuUnavailable"]

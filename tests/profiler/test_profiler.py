"""The profiling agent's logic, without a GPU.

A NumPy test double stands in for the GPU backend (fake_gpu.py: the Backend interface, synthetic
launch times), so the agent's own rules are tested here: interleaved reference timing, speedups, the
roofline floor and big-speedup plausibility flags, re-validation of the timed launches' outputs,
occupancy and bottleneck classes, JSON round trips. The real GPU path is in tests/gpu."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from astra_cuda.compile import extract
from astra_cuda import profiler
from astra_cuda.model import source, spec as spec_mod
from astra_cuda.backends.base import Capabilities, CompileError
from astra_cuda.profiler.timing import PREROLL

from .fake_gpu import FakeGpu, mark, silu, units

PRE = 2 * PREROLL   # the pre-roll of a kernel whose times do not move: two rounds


def run(marker, kernels, sizes="bench", **kw):
    ref, cand, spec = units(marker)
    backend = FakeGpu({"// reference": lambda a, n: silu(a) or 25.0, **kernels}, **kw)
    return profiler.profile(ref, cand, spec, backend, seed=1, sizes=sizes)


def test_honest_candidate_profiled_side_by_side():
    p = run("fast", {"// fast": lambda a, n: silu(a) or 20.0})
    assert p.valid and p.measured and p.device == "Fake H100"
    (s,) = p.sizes
    assert s.label == "64×1024" and s.candidate.runs >= 100 and s.reference.runs >= 100
    assert s.speedup == pytest.approx(1.25, rel=0.02)
    assert s.bytes_moved == 64 * 1024 * 3 * 2
    assert s.candidate.gbps == pytest.approx(s.bytes_moved / 20e-6 / 1e9, rel=0.02)
    assert s.candidate.p10_us <= s.candidate.median_us <= s.candidate.p90_us
    assert not s.output_failures and "checked against the reference" in s.outputs_checked
    assert s.bottleneck == "latency-bound"  # 20 µs for 0.4 MB is far from the ceiling
    line = p.summary_line()
    assert line.startswith("20.0 µs @ 64×1024") and "1.25× vs reference" in line and "22 regs" in line


def test_cheat_while_timed_is_caught_by_revalidation():
    def lazy(args, n):  # right until the loop's first launch, then stops writing and leaves garbage
        if n <= PRE:
            silu(args)
        else:
            args[0].host[...] = 0
        return 20.0
    p = run("lazy", {"// lazy": lazy})
    (s,) = p.sizes
    assert s.output_failures and "timed-loop launch 2 of" in s.output_failures[0]  # launch 1 was right
    assert not p.valid and "WRONG" in p.summary_line()


def test_faster_than_the_bytes_allow_is_flagged():
    p = run("magic", {"// magic": lambda a, n: silu(a) or 0.05})
    (s,) = p.sizes
    assert len(s.implausible) == 1 and "roofline floor" in s.implausible[0]
    assert not p.valid and "IMPLAUSIBLE" in p.summary_line()


def test_a_big_speedup_the_roofline_explains_is_plausible():
    # The reference at 25 µs moves its 0.39 MB at 0.5% of the 3 TB/s ceiling: 25x faster is still
    # at 13% of it (a one-thread-per-row softmax becoming a warp per row gains ~24x on an H100).
    p = run("rows", {"// rows": lambda a, n: silu(a) or 1.0})
    (s,) = p.sizes
    assert s.speedup == pytest.approx(25.0, rel=0.02) and not s.implausible and p.valid


def test_a_big_speedup_is_held_to_the_same_floor_as_any_other_time():
    floor = 64 * 1024 * 3 * 2 / 3.0e12 * 1e6   # 0.131 µs; the reference's 25 µs is at 0.5% of the ceiling
    below = run("below", {"// below": lambda a, n: silu(a) or 0.85 * floor}, noise=0.0).sizes[0]
    assert len(below.implausible) == 1 and "roofline floor" in below.implausible[0], below.implausible
    within = run("within", {"// within": lambda a, n: silu(a) or 0.95 * floor}, noise=0.0)
    assert within.sizes[0].speedup > 150 and not within.sizes[0].implausible and within.valid


def test_a_big_speedup_without_a_ceiling_is_flagged():
    ref, cand, spec = units("noceil")

    class NoCeiling(FakeGpu):
        caps = Capabilities(timing=True, copy_ceiling=False, device_info=True)
    backend = NoCeiling({"// reference": lambda a, n: silu(a) or 25.0, "// noceil": lambda a, n: silu(a) or 1.0})
    p = profiler.profile(ref, cand, spec, backend, seed=1)
    (s,) = p.sizes
    assert s.floor_us is None and len(s.implausible) == 1 and "no roofline floor" in s.implausible[0]
    assert not p.valid


def test_without_reference_timed_outputs_match_own_first_launch():
    _, cand, spec = units("drift")

    def drift(args, n):  # correct until the loop's first launch, then a different answer on later launches
        silu(args)
        if n > PRE:
            args[0].host[...] = args[0].host * np.float16(1.5)
    backend = FakeGpu({"// drift": drift})
    p = profiler.profile(None, cand, spec, backend, seed=2)
    (s,) = p.sizes
    assert s.reference is None and s.speedup is None
    assert "own first launch" in s.outputs_checked and s.output_failures


def test_json_round_trip():
    p = run("fast", {"// fast": lambda a, n: silu(a) or 20.0})
    q = profiler.Profile.from_json(p.to_json())
    assert q.summary_line() == p.summary_line() and q.sizes[0].candidate == p.sizes[0].candidate
    import json
    json.dumps(p.to_json())


def test_cpu_backend_says_speed_is_not_measured():
    _, cand, spec = units("x")

    class Cpu(FakeGpu):
        name, caps = "cpu", Capabilities()
    p = profiler.profile(None, cand, spec, Cpu({}))
    assert not p.measured and not p.sizes and "not measured" in p.summary_line()
    assert p.resources["registers"] > 0 and p.occupancy["theoretical"] > 0


def test_occupancy_rules():
    o = profiler.theoretical_occupancy(256, 32, 0)
    assert o["theoretical"] == 1.0 and o["blocks_per_sm"] == 8
    o = profiler.theoretical_occupancy(256, 128, 0)  # 128 regs x 256 threads = 32768 -> 2 blocks
    assert o["blocks_per_sm"] == 2 and o["limited_by"] == "registers" and o["theoretical"] == 0.25
    o = profiler.theoretical_occupancy(128, 32, 100 * 1024)
    assert o["blocks_per_sm"] == 2 and o["limited_by"] == "shared memory"
    o = profiler.theoretical_occupancy(32, 16, 0)
    assert o["blocks_per_sm"] == 32 and o["limited_by"] in ("blocks", "threads") and o["theoretical"] == 0.5


def test_bottleneck_classes():
    t = profiler.Timing.of([100.0] * 10, int(2.7e8), None, 3e12)  # 2.7 TB/s: 90%
    assert profiler.classify(t, int(2.7e8), None)[0] == "memory-bound"
    t = profiler.Timing.of([100.0] * 10, int(1e6), 5e9, 3e12)  # 5000 FLOP/byte
    assert profiler.classify(t, int(1e6), 5e9)[0] == "compute-bound"
    t = profiler.Timing.of([100.0] * 10, int(3e7), None, 3e12)  # 10%
    assert profiler.classify(t, int(3e7), None)[0] == "latency-bound"


def test_ncu_parsers():
    raw = ('"ID","Kernel Name","gpu__time_duration.sum","dram__throughput.avg.pct_of_peak_sustained_elapsed",'
           '"smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",'
           '"smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio"\n'
           '"","","nsecond","%","ratio","ratio"\n'
           '"0","silu_and_mul","41,216","78.5","3.0","1.0"\n')
    m = profiler.parse_ncu_raw(raw)
    assert m["duration_us"] == pytest.approx(41.216) and m["dram_pct"] == 78.5
    assert m["stalls"][0] == {"reason": "long_scoreboard", "share": 0.75}
    # A real capture (H200, Nsight Compute 2025.3.1), trimmed to 8 columns and 40 rows.
    src = (Path(__file__).parent / "data" / "ncu_source_cuda_sass.csv").read_text()
    hot = profiler.parse_ncu_source(src, "examples/silu_and_mul.cu")
    lines = [h[0] for h in hot]
    assert lines[0] == 11  # `return x / (1.0f + expf(-x));` in silu(): 215 of 283 samples
    assert set(lines) == {11, 31, 32} and abs(sum(h[1] for h in hot) - 1) < 0.01
    assert hot[0][1] == round(215 / (215 + 40 + 28), 3)
    assert profiler.parse_ncu_source(src, "other.cu") == []


INPLACE = """
/* @astra
grid = ["n"]
block = ["1"]
[sizes]
n = [256]
[args]
x = { type = "float", shape = ["n"], inout = true }
n = "n"
*/
__global__ void halve(float* x, int n) {
  MARK
  x[blockIdx.x] *= 0.5f;
}
"""


def test_in_place_kernel_timed_on_pristine_data_and_revalidated_once():
    seen = []

    def halve(args, launch_no):
        seen.append(float(np.abs(args[0].host).max()))
        args[0].host[...] = args[0].host * np.float32(0.5)
        return 10.0

    def unit(marker):
        return extract.unit(INPLACE.replace("MARK", mark(marker)), "k.cu", "halve")
    m = source.parse(INPLACE)
    spec = spec_mod.load(m.kernel("halve"), m)
    backend = FakeGpu({"// reference": halve, "// cand": lambda a, n: halve(a, n) and 8.0})
    p = profiler.profile(unit("reference"), unit("cand"), spec, backend, seed=3)
    (s,) = p.sizes
    assert s.candidate.runs >= 100 and not s.output_failures, s.output_failures
    # Every timed launch saw data of the same magnitude: restored, never halved 100 times over.
    timed = seen[-50:]
    assert min(timed) > 0.25 * max(timed)


def test_the_backend_compile_decides_where_the_static_one_fails(monkeypatch):
    # On the H100 the static NVRTC compile lacked CCCL (`nv/target`, included by cooperative_groups)
    # that CuPy's compile has: the kernel is timed as the backend compiles it.
    from astra_cuda.profiler import agent
    missing = 'cooperative_groups/details/info.h:50: cannot open source file "nv/target"'
    monkeypatch.setattr(agent, "_static_resources", lambda unit, arch: ({}, [missing]))
    p = run("fast", {"// fast": lambda a, n: silu(a) or 20.0})
    assert p.valid and p.measured and p.resources["registers"] == 22 and "nv/target" in p.note
    assert p.occupancy["theoretical"] > 0
    ref, cand, spec = units("fast")
    static_only = profiler.profile(ref, cand, spec, None)
    assert static_only.errors and "does not compile" in static_only.errors[0] and not static_only.measured

    class Refuses(FakeGpu):   # where the backend's compile fails too, that is the error reported
        def compile(self, *a, **k):
            raise CompileError("NVRTC: error: identifier \"x\" is undefined")
    p = profiler.profile(ref, cand, spec, Refuses({}))
    assert not p.measured and "does not compile for the GPU" in p.errors[0] and not p.note

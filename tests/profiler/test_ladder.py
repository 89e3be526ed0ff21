"""The size ladder (astra_cuda.model.ladder): the bench sizes plus decode-like and prefill-like points,
each a valid case of the spec; the profiler times every rung and reports each, while the
headline speedup and copy-ceiling share stay the bench sizes' own."""
from __future__ import annotations

import pytest

from astra_cuda.model import ladder, source, spec as spec_mod
from astra_cuda import profiler
from astra_cuda.evaluation import ProfileSummary, SizeTiming

from .fake_gpu import FakeGpu, silu, units


def load(text: str, kernel: str):
    m = source.parse(text)
    return spec_mod.load(m.kernel(kernel), m)


ROWS = """
/* @astra
grid = ["rows"]
block = ["256"]
[sizes]
rows = [1, 7]
n = [64, 1000]
[bench]
rows = [ROWS]
n = [4096]
[args]
o = { type = "half", shape = ["rows", "n"], output = true }
x = { type = "half", shape = ["rows", "n"] }
n = "n"
*/
__global__ void k(__half* o, const __half* x, int n) {}
"""


def test_rows_get_decode_points_and_a_prefill_point_when_the_bench_is_small():
    sp = load(ROWS.replace("ROWS", "512"), "k")
    rungs = ladder.ladder(sp)
    assert [(r.role, r.sizes["rows"]) for r in rungs] == [("decode", 1), ("decode", 32), ("bench", 512),
                                                          ("prefill", 4096)]
    assert all(r.sizes["n"] == 4096 for r in rungs)   # only the leading size moves


def test_a_bench_of_thousands_of_rows_is_its_own_prefill_point():
    sp = load(ROWS.replace("ROWS", "4096"), "k")
    assert [r.role for r in ladder.ladder(sp)] == ["decode", "decode", "bench"]
    assert [r.role for r in ladder.bench(sp)] == ["bench"]


def test_points_satisfy_require_by_rounding_up():
    text = ROWS.replace("ROWS", "512").replace('block = ["256"]', 'block = ["256"]\nrequire = ["rows % 32 == 0"]') \
        .replace("rows = [1, 7]", "rows = [32, 64]")
    rungs = ladder.ladder(load(text, "k"))
    assert [r.sizes["rows"] for r in rungs] == [32, 512, 4096]   # 1 rounds up to 32, which is there once


FLAT = """
/* @astra
grid = ["cdiv(n, 256)"]
block = ["256"]
[sizes]
n = [1, 1000]
[bench]
n = [N]
[args]
o = { type = "float", shape = ["n"], output = true }
x = { type = "float", shape = ["n"] }
n = "n"
*/
__global__ void k(float* o, const float* x, int n) {}
"""


def test_flat_buffers_get_fractions_and_a_larger_point_when_small():
    rungs = ladder.ladder(load(FLAT.replace("N", str(1 << 24)), "k"))
    assert [(r.role, r.sizes["n"]) for r in rungs] == [("decode", 4096), ("decode", 131072), ("bench", 1 << 24)]
    small = ladder.ladder(load(FLAT.replace("N", str(1 << 20)), "k"))
    assert small[-1].role == "prefill" and small[-1].sizes["n"] == 16 << 20
    assert all(load(FLAT.replace("N", "1"), "k").bytes_moved(r.sizes) <= ladder.PREFILL_BYTES for r in small)


def test_a_leading_dimension_that_is_an_expression_leaves_the_bench_alone():
    text = FLAT.replace('shape = ["n"] }\nn', 'shape = ["2 * n"] }\nn').replace('"float", shape = ["n"], output',
                                                                            '"float", shape = ["2 * n"], output')
    assert [r.role for r in ladder.ladder(load(text.replace("N", "1024"), "k"))] == ["bench"]


def test_profile_times_every_rung_and_keeps_the_headline_at_the_bench_sizes():
    ref, cand, spec = units("fast")
    # 20 µs at the bench size, and slower than the reference (25 µs) at the small sizes.
    backend = FakeGpu({"// reference": lambda a, n: silu(a) or 25.0,
                       "// fast": lambda a, n: silu(a) or (20.0 if a[0].host.shape[0] == 64 else 30.0)})
    p = profiler.profile(ref, cand, spec, backend, seed=1, sizes="ladder")
    assert p.valid, p.errors
    assert [s.role for s in p.sizes] == ["decode", "decode", "bench", "prefill"]
    assert [s.sizes["num_tokens"] for s in p.sizes] == [1, 32, 64, 4096]
    assert p.speedup == pytest.approx(1.25, rel=0.02)             # the bench size's own
    assert "64×1024" in p.summary_line()
    md = p.summary_markdown()
    assert "(decode)" in md and "(bench)" in md and "(prefill)" in md
    line = p.per_size_line()   # the hover's line
    assert line.startswith("1×1024 (decode): 0.83×") and "64×1024 (bench): 1.25×" in line
    from astra_cuda import report
    html = report.profile_section(p)
    assert 'aria-label="speedup per size"' in html and "(prefill)" in html


def test_summary_headline_and_the_slowest_size():
    sizes = (SizeTiming({"r": 1}, 10.0, 11.0, 0.01, "decode"), SizeTiming({"r": 4096}, 100.0, 50.0, 0.9, "bench"),
             SizeTiming({"r": 8192}, 200.0, 95.0, 0.95, "prefill"))
    s = ProfileSummary(sizes)
    assert s.geomean_speedup == pytest.approx(2.0) and s.best_copy_share == pytest.approx(0.9)
    worst, ratio = s.slowest_against()
    assert worst.role == "decode" and ratio == pytest.approx(10 / 11)
    best = ProfileSummary((SizeTiming({"r": 1}, 10.0, 10.0, None, "decode"),
                           SizeTiming({"r": 4096}, 100.0, 60.0, None, "bench")))
    worst, ratio = s.slowest_against(best)   # only the sizes both were timed at
    assert worst.role == "decode" and ratio == pytest.approx(10 / 11)
    assert ProfileSummary.from_json(s.to_json()).sizes == sizes
    old = ProfileSummary((SizeTiming({"r": 1}, 10.0, 5.0), SizeTiming({"r": 2}, 10.0, 2.5)))
    assert old.geomean_speedup == pytest.approx(8 ** 0.5)          # results from before the ladder


def test_times_that_come_in_timer_steps_are_not_a_difference_within_one_step():
    import numpy as np
    from astra_cuda.profiler.results import Timing, timer_step
    steps = np.array([4.096] * 55 + [5.12] * 45)
    assert timer_step(steps) == pytest.approx(1.024)
    assert timer_step(np.random.default_rng(0).normal(100.0, 1.0, 100)) == 0.0   # continuous
    assert Timing.of(list(steps), 1000, None, None).step_us == pytest.approx(1.024)
    # the candidate's median landed one step above the original's: no slowdown measured
    quantized = ProfileSummary((SizeTiming({"r": 1}, 4.096, 5.12, None, "decode", 1.024),
                                SizeTiming({"r": 4096}, 100.0, 50.0, None, "bench")))
    assert quantized.slowest_against()[1] == pytest.approx(1.0)
    continuous = ProfileSummary((SizeTiming({"r": 1}, 4.096, 5.12, None, "decode"),))
    assert continuous.slowest_against()[1] == pytest.approx(0.8)


# Shapes as inference guesses them when the kernel's indexing cannot be read (SGLang's
# per_token_group_quant_8bit, per_token_quant_fp8): the per-row extent first, the count the grid
# covers second. A decode keeps the row (group_size 128, hidden_dim 4096) and has few of them.
GROUPS = """
/* @astra
grid = ["num_groups / 16"]
block = ["256"]
require = ["num_groups % 16 == 0"]
[sizes]
group_size = [128]
num_groups = [16, 64]
[bench]
group_size = [128]
num_groups = [65536]
[args]
input = { type = "float", shape = ["group_size", "num_groups"] }
output_q = { type = "int8", shape = ["group_size", "num_groups"], output = true }
output_s = { type = "float", shape = ["num_groups"], output = true }
group_size = "group_size"
num_groups = "num_groups"
*/
__global__ void k(const float* input, signed char* output_q, float* output_s, int group_size, int num_groups) {}
"""

TOKENS = """
/* @astra
grid = ["(num_tokens + 8 - 1) / 8"]
block = ["256"]
require = ["hidden_dim % 4 == 0"]
[sizes]
hidden_dim = [64, 4096]
num_tokens = [1, 9]
[bench]
hidden_dim = [4096]
num_tokens = [8192]
[args]
input = { type = "half", shape = ["hidden_dim", "num_tokens"] }
output_q = { type = "int8", shape = ["hidden_dim", "num_tokens"], output = true }
output_s = { type = "float", shape = ["num_tokens"], output = true }
hidden_dim = "hidden_dim"
num_tokens = "num_tokens"
*/
__global__ void k(const __half* input, signed char* output_q, float* output_s, long hidden_dim, long num_tokens) {}
"""


def test_decode_shrinks_the_count_the_grid_covers_not_the_row_listed_first():
    groups = ladder.ladder(load(GROUPS, "k"))
    assert [(r.role, r.sizes["num_groups"]) for r in groups if r.role == "decode"] == [("decode", 16), ("decode", 32)]
    assert all(r.sizes["group_size"] == 128 for r in groups)
    tokens = ladder.ladder(load(TOKENS, "k"))
    assert [(r.role, r.sizes["num_tokens"]) for r in tokens] == [("decode", 1), ("decode", 32), ("bench", 8192)]
    assert all(r.sizes["hidden_dim"] == 4096 for r in tokens)


def test_a_grid_that_reads_no_dimension_keeps_the_first_dimension():
    fixed = ROWS.replace("ROWS", "512").replace('grid = ["rows"]', 'grid = ["132"]')
    assert [r.sizes["rows"] for r in ladder.ladder(load(fixed, "k"))] == [1, 32, 512, 4096]

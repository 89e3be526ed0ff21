"""The roofline floor judges rewrites, not the original (issue 29 with issue 24's "no false
refusals"): a floor from the spec's bytes is a model, and an original faster than it refutes the
model at that size — BlackScholesGPU's float2 pairs at 177% of the copy ceiling, apex
index_mul_2d_float at 1092% on an H200 were refused as "implausible timing". Pure rules first,
then the profiler on the NumPy stand-in for the GPU."""
from __future__ import annotations

import pytest

from astra_cuda import profiler
from astra_cuda.profiler import model

from .fake_gpu import FakeGpu, silu, units

CEILING = 3.0e12
NBYTES = 300_000_000          # the spec's bytes: a floor of 100 µs at the ceiling
FLOOR = NBYTES / CEILING * 1e6


def test_an_original_faster_than_the_byte_model_refutes_it():
    assert model.model_refuted(1.2 * FLOOR, NBYTES, CEILING) == ""          # the model holds
    assert model.model_refuted(None, NBYTES, CEILING) == ""                 # nothing to say
    assert model.model_refuted(0.5 * FLOOR, NBYTES, None) == ""             # no ceiling, no model
    note = model.model_refuted(FLOOR / 1.77, NBYTES, CEILING)
    assert note.startswith("the byte model overcounts: the original measured 177% of the copy ceiling")


def test_the_original_is_never_refused_for_beating_the_model():
    for share in (1.77, 10.9):                            # BlackScholesGPU, index_mul_2d_float
        t = FLOOR / share
        assert model.implausible(t, 1.0, NBYTES, CEILING, reference_us=t, original=True) == []
    # the same time from a rewrite beside a reference the model holds for: refused, as before
    why = model.implausible(FLOOR / 1.77, 2.0, NBYTES, CEILING, reference_us=1.13 * FLOOR)
    assert len(why) == 1 and "roofline floor" in why[0]


def test_beside_a_refuted_model_a_rewrite_is_held_to_a_bounded_speedup():
    ref_us = FLOOR / 1.77
    assert model.implausible(ref_us / 1.5, 1.5, NBYTES, CEILING, reference_us=ref_us) == []
    assert model.implausible(ref_us / 9.5, 9.5, NBYTES, CEILING, reference_us=ref_us) == []
    why = model.implausible(ref_us / 12, 12.0, NBYTES, CEILING, reference_us=ref_us)
    assert len(why) == 1 and "refutes the byte model" in why[0] and f"{model.BIG_SPEEDUP:g}×" in why[0]


def test_near_the_floor_the_margin_still_decides_for_rewrites():
    # the reference at 101% of the floor's time: the model holds; a rewrite within the margin passes,
    # one beyond it (skipped reads, replayed results) is refused
    ref_us = 1.01 * FLOOR
    assert model.implausible(0.95 * FLOOR, ref_us / (0.95 * FLOOR), NBYTES, CEILING, reference_us=ref_us) == []
    assert model.implausible(0.85 * FLOOR, ref_us / (0.85 * FLOOR), NBYTES, CEILING, reference_us=ref_us)


# ---- through the profiler (fake GPU: silu_and_mul at 64x1024, 0.39 MB, a floor of 0.131 µs) ---------------
SMALL_FLOOR = 64 * 1024 * 3 * 2 / CEILING * 1e6


def test_the_original_timed_against_itself_below_the_floor_is_valid_and_says_why():
    ref, _, spec = units("unused")
    backend = FakeGpu({"// reference": lambda a, n: silu(a) or 0.5 * SMALL_FLOOR}, noise=0.0)
    p = profiler.profile(ref, ref, spec, backend, seed=1)
    (s,) = p.sizes
    assert p.valid and not s.implausible, s.implausible
    assert s.notes and "byte model overcounts" in s.notes[0] and "200%" in s.notes[0]
    assert "byte model overcounts" in p.summary_markdown()
    # no share above the physical limit is reported from the refuted bytes (it read 200%)
    assert s.candidate.ceiling_share is None and s.reference.ceiling_share is None and s.candidate.gbps is None
    assert s.floor_us is None and s.bottleneck == "unknown" and "no share of the copy ceiling" in s.bottleneck_why
    assert "200% of ceiling" not in p.summary_markdown()


def test_without_a_reference_the_files_own_kernel_is_not_refused_for_the_model():
    _, cand, spec = units("own")
    backend = FakeGpu({"// own": lambda a, n: silu(a) or 0.5 * SMALL_FLOOR}, noise=0.0)
    p = profiler.profile(None, cand, spec, backend, seed=1)
    assert p.valid and p.sizes[0].notes


@pytest.mark.parametrize("speedup, valid", [(1.4, True), (20.0, False)])
def test_a_rewrite_beside_an_original_that_beats_the_model(speedup, valid):
    ref_us = 0.5 * SMALL_FLOOR
    ref, cand, spec = units("rewrite")
    backend = FakeGpu({"// reference": lambda a, n: silu(a) or ref_us,
                       "// rewrite": lambda a, n: silu(a) or ref_us / speedup}, noise=0.0)
    p = profiler.profile(ref, cand, spec, backend, seed=1)
    (s,) = p.sizes
    assert p.valid is valid, s.implausible
    assert s.notes and (valid or "refutes the byte model" in s.implausible[0])


def test_a_rewrite_faster_than_the_floor_beside_an_original_that_respects_it_stays_refused():
    ref, cand, spec = units("cheat")
    backend = FakeGpu({"// reference": lambda a, n: silu(a) or 2 * SMALL_FLOOR,
                       "// cheat": lambda a, n: silu(a) or 0.6 * SMALL_FLOOR}, noise=0.0)
    p = profiler.profile(ref, cand, spec, backend, seed=1)
    (s,) = p.sizes
    assert not p.valid and not s.notes and "roofline floor" in s.implausible[0]


def test_the_gpu_steps_kernels_overcount_as_the_public_ones_do():
    # tests/profiler/data/overcounted.cu (scripts/gpu-check model-floor): the spec's bytes against what
    # the kernels touch at their bench sizes
    from pathlib import Path

    from astra_cuda.model import source, spec as spec_mod
    m = source.parse((Path(__file__).resolve().parent / "data" / "overcounted.cu").read_text())
    pairs = spec_mod.load(m.kernel("pairs_price"), m)
    n = 8_000_000
    assert model.floor_bytes(pairs, {"n": n}) == 10 * 4 * n          # five read-write arrays
    rows = spec_mod.load(m.kernel("rows_scale"), m)
    bench = {"size": 5504, "fea": 11008, "n": 256, "V": 6288}
    touched = 3 * 256 * 11008 * 4 + 256 * 8                          # 256 rows of out, in1, in2; the ids
    assert model.floor_bytes(rows, bench) > 15 * touched

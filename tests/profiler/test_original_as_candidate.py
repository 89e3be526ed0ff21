"""The original is judged as the original however it reaches the profiler (issue 29, an H200's
optimize of a layer norm): on the GPU the search compiles every candidate — the original's own
text first, as the baseline — from the reference's proven cut (`compile.fastpath.search_unit`),
so the original arrived as a unit unequal to the reference's (its kernel spliced in again, other
`#line` marks) and was judged as a rewrite: its two measurements' noise, one side below 90% of
the roofline floor the other side kept, refused the user's own kernel as "implausible timing".
A rewrite beside it is still held to the floor, or to BIG_SPEEDUP where the original refutes it."""
from __future__ import annotations

from astra_cuda import profiler
from astra_cuda.compile import fastpath
from astra_cuda.model import source

from .fake_gpu import FakeGpu, FakeModule, silu, units

CEILING = 3.0e12
FLOOR = 64 * 1024 * 3 * 2 / CEILING * 1e6    # silu_and_mul at 64x1024 on the fake GPU's ceiling
PROOF = fastpath.Proof(True, "proven (a test's stand-in)", compiler=fastpath.SEARCH_NVRTC)


class ByRole(FakeGpu):
    """Each side its own timing, whatever its code: the same kernel measured twice, apart."""

    def __init__(self, reference_us: float, candidate_us: float):
        super().__init__({}, noise=0.0)
        self.us = {"reference": reference_us, "candidate": candidate_us}

    def compile_unit(self, unit, *, sanitize=False, races=False, role=""):
        us = self.us[role]
        return FakeModule(lambda args, n: silu(args) or us)


def searched(ref, text: str):
    """`text` as the search compiles it: spliced into the reference's proven cut."""
    unit, why = fastpath.search_unit(ref, PROOF, source.parse(ref.file_text), source.parse(text), "silu_and_mul")
    assert unit is not None, why
    return unit


def test_the_search_unit_of_the_originals_text_is_the_originals_code():
    ref, _, _ = units("unused")
    same = searched(ref, ref.file_text)
    assert same != ref and same.source != ref.source        # another unit ...
    assert ref.same_code(same)                               # ... of the same code
    # a rewrite, however small, is not the original
    other = searched(ref, ref.file_text.replace("= blockIdx.x;", "= blockIdx.x + 0;", 1))
    assert not ref.same_code(other)


def test_the_original_cut_by_the_search_is_not_refused_for_its_own_noise():
    ref, _, spec = units("unused")
    # the reference side at 101% of the floor's time, the same code on the other side at 85%
    p = profiler.profile(ref, searched(ref, ref.file_text), spec, ByRole(1.01 * FLOOR, 0.85 * FLOOR), seed=1)
    (s,) = p.sizes
    assert p.valid and not s.implausible, s.implausible
    # its faster measurement is the original's too: the model it beat is refuted, no floor reported
    assert s.notes and "byte model overcounts" in s.notes[0] and s.floor_us is None


def test_a_rewrite_timed_the_same_way_is_still_held_to_the_floor():
    ref, _, spec = units("unused")
    cand = searched(ref, ref.file_text.replace("= blockIdx.x;", "= blockIdx.x + 0;", 1))
    p = profiler.profile(ref, cand, spec, ByRole(1.01 * FLOOR, 0.85 * FLOOR), seed=1)
    (s,) = p.sizes
    assert not p.valid and "roofline floor" in s.implausible[0]


def test_beside_an_original_that_refutes_the_model_a_rewrite_is_held_to_big_speedup():
    ref, _, spec = units("unused")
    cand = searched(ref, ref.file_text.replace("= blockIdx.x;", "= blockIdx.x + 0;", 1))
    ok = profiler.profile(ref, cand, spec, ByRole(0.5 * FLOOR, 0.5 * FLOOR / 1.5), seed=1)
    assert ok.valid, ok.sizes[0].implausible
    big = profiler.profile(ref, cand, spec, ByRole(0.5 * FLOOR, 0.5 * FLOOR / 20), seed=1)
    assert not big.valid and "refutes the byte model" in big.sizes[0].implausible[0]

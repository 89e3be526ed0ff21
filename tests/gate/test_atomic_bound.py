"""The determinism allowance of outputs accumulated through atomic adds alone (gate/atomic_bound.py):
the bound against brute-force orders of rounded sums, the ledger's rules, and the gate on the CPU
— a reordered half accumulation passes, a plain store racing the adds is named a race."""
import itertools

import numpy as np
import pytest

from astra_cuda import gate
from astra_cuda.compile import extract
from astra_cuda.gate import atomic_bound, compare
from astra_cuda.model import source, spec as spec_mod

from .test_catalogue import cpu  # noqa: F401 - fixture

NP = {"half": np.float16, "float": np.float32}


def sum_in(order, terms, start, dtype):
    s = dtype(start)
    for i in order:
        s = dtype(s + dtype(terms[i]))   # one rounding per add, as an atomic add
    return float(s)


@pytest.mark.parametrize("dtype", ["half", "float"])
def test_the_bound_holds_for_every_order_of_rounded_adds(dtype):
    rng = np.random.default_rng(7)
    t = NP[dtype]
    for trial in range(30):
        k = int(rng.integers(2, 7))
        terms = (rng.uniform(-1, 1, k) * 10.0 ** rng.uniform(-2, 3)).astype(t)
        start = t(rng.uniform(-50, 50))
        results = [sum_in(o, terms, start, t) for o in itertools.permutations(range(k))]
        p = abs(float(start)) + float(np.abs(terms.astype(np.float64)).sum())
        bound = float(atomic_bound.order_bound(np.array(k), np.array(p), dtype))
        assert max(results) - min(results) <= bound, (trial, terms, start)
    # and it is not vacuous: leaving one of 8 like-sized terms out is far beyond it
    assert 3.0 > float(atomic_bound.order_bound(np.array(8), np.array(24.0), "half")) * 10


def test_the_bound_follows_the_type_and_refuses_where_none_holds():
    k, p = np.array([16, 16, 16, 1 << 11]), np.array([100.0, 100.0, 100.0, 1.0])
    half = atomic_bound.order_bound(k, p, "half")
    gamma = 16 * 2.0 ** -11 / (1 - 16 * 2.0 ** -11)
    assert half[0] == pytest.approx(2 * gamma * 100 / (1 - gamma) + 2 * 16 * 2.0 ** -24, rel=1e-9)
    bf16 = atomic_bound.order_bound(k[:1], p[:1], "bfloat16")[0]
    flt = atomic_bound.order_bound(k[:1], p[:1], "float")[0]
    assert flt < half[0] < bf16 and bf16 / half[0] > 8
    assert np.isinf(half[3])          # 2048 adds of a half: k·u = 1, no bound


def test_a_ledger_allows_only_elements_of_atomic_adds_alone_that_it_describes():
    led = atomic_bound.Ledger(np.array([4.0, np.nan, 4.0]), np.array([10.0, 10.0, 10.0]))
    a = np.array([1.0, 1.0, 50.0])   # the third: |value| far above Σ|terms| — not what the ledger saw
    allow = led.allowance("half", a, a)
    assert allow[0] > 0 and allow[1] == 0 and allow[2] == 0 and led.not_alone == 1
    bad = np.array([False, True, False])
    assert "race" in atomic_bound.why(led, bad, allow)
    assert "more than rounding" in atomic_bound.why(led, np.array([True, False, False]), allow)


# vLLM's gemm_half_q_half_gptq_4bit_kernel: each block along z adds its half partial sum of a
# slice of K into c with atomicAdd; TGI's exllama q4_matmul_kernel: the same, but block z == 0
# first stores zero into the element others may already have added to (no_zero = false).
KERNEL = r"""#include <cuda_fp16.h>
/* @astra
grid = ["n / 32", "1", "z"]
block = ["32"]
[sizes]
n = [64]
z = [24]
[args]
t = { type = "half", shape = ["z", "n"] }
c = { type = "half", shape = ["n"], inout = true }
n = "n"
*/
__global__ void accumulate(const __half* t, __half* c, int n) {
  const int i = blockIdx.x * 32 + threadIdx.x;
  ZERO
  atomicAdd(&c[i], __hmul(t[blockIdx.z * n + i], __float2half(400.f)));
}
"""



def test_adds_whose_magnitudes_overflow_the_type_may_differ_up_to_an_infinity():
    # a half GEMM's partial sums added atomically over K: Σ|terms| past 65504 (the magnitude run
    # ends at inf), so one order overflows where another stays finite — reordering, not a race
    terms = np.array([40000.0, 40000.0, -40000.0], dtype=np.float16)
    with np.errstate(over="ignore"):
        orders = {sum_in(o, terms, 0.0, np.float16) for o in itertools.permutations(range(3))}
    assert np.inf in orders and 40000.0 in orders
    led = atomic_bound.Ledger(np.array([3.0, 3.0, np.nan]), np.array([np.inf, 10.0, np.inf], dtype=np.float16))
    a = np.array([np.inf, 1.0, 5.0], dtype=np.float16)
    b = np.array([40000.0, 1.0, 7.0], dtype=np.float16)
    allow = led.allowance("half", a, b)
    assert np.isinf(allow[0]) and np.isfinite(allow[1]) and allow[2] == 0   # a plain store: still judged
    assert compare.compare(a[:2], b[:2], 0.01, 0.01, check_constant=False, allowance=allow[:2]) is None
    m = compare.compare(a, b, 0.01, 0.01, check_constant=False, allowance=allow)
    assert m is not None and m.bad == 1 and m.index == (2,)


def test_an_infinity_against_a_number_is_a_differing_element_for_the_why():
    # |inf - x| > atol + rtol·|inf| is inf > inf: false, so a plain subtraction missed the elements
    # a racing store leaves at ±inf in one run — and the failure was not named a race
    a = np.array([np.inf, -np.inf, 1.0, 3.0], dtype=np.float16)
    b = np.array([-np.inf, -28976.0, 1.0, 3.0], dtype=np.float16)
    assert compare.bad_mask(a, b, 0.01, 0.01, np.zeros(4)).tolist() == [True, True, False, False]
    assert not compare.bad_mask(a, b, 0.01, 0.01, np.full(4, np.inf)).any()   # no bound holds there
    led = atomic_bound.Ledger(np.full(4, np.nan), np.ones(4))
    assert "race" in atomic_bound.why(led, compare.bad_mask(a, b, 0.01, 0.01, np.zeros(4)), np.zeros(4))


def units(tmp_path, zero):
    text = KERNEL.replace("ZERO", "if (blockIdx.z == 0) c[i] = __float2half(0.f);" if zero else "")
    path = tmp_path / "accumulate.cu"
    path.write_text(text)
    model = source.parse(text)
    return extract.unit(text, str(path), "accumulate"), spec_mod.load(model.kernel("accumulate"), model)


def test_a_reordered_half_accumulation_passes_within_the_measured_bound(cpu, tmp_path):
    unit, spec = units(tmp_path, zero=False)
    v = gate.check(None, unit, spec, cpu, quick=True, seed=3)
    assert v.passed, v.human()
    # the tolerance alone would not have done: the note says the bound accepted a difference
    assert any("reordering its atomic adds" in n for n in v.coverage.notes), v.human()


def test_a_plain_store_racing_atomic_adds_is_named_a_race(cpu, tmp_path):
    unit, spec = units(tmp_path, zero=True)
    v = gate.check(None, unit, spec, cpu, quick=True, seed=3)
    assert v.status == "failed" and v.failures[0].check in ("schedules", "determinism"), v.human()
    assert "not accumulated through atomic adds alone" in v.failures[0].message, v.human()


def test_the_allowance_never_reaches_the_comparison_with_the_reference(cpu, tmp_path):
    # a candidate that leaves the last block's terms out: its runs agree within the bound with each
    # other, but against the reference only the tolerance (and the reference's rounding) counts
    ref, spec = units(tmp_path, zero=False)
    text = KERNEL.replace("ZERO", "if (blockIdx.z == gridDim.z - 1) return;")
    path = tmp_path / "cand.cu"
    path.write_text(text)
    cand = extract.unit(text, str(path), "accumulate")
    v = gate.check(ref, cand, spec, cpu, quick=True, seed=3)
    assert v.status == "failed" and v.failures[0].check in ("compare", "schedules"), v.human()
    assert "reordering" not in v.failures[0].message

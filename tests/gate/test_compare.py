import numpy as np
import ml_dtypes
import pytest

from astra_cuda.gate.compare import compare, first_difference, is_constant, poison_mask


def test_within_tolerance_passes_and_beyond_fails_with_details():
    ref = np.linspace(-3, 3, 60, dtype=np.float32).reshape(3, 20)
    got = ref.copy()
    got[1, 7] += 0.5
    assert compare(ref, ref * (1 + 1e-6), 1e-5, 1e-4) is None
    m = compare(ref, got, 1e-5, 1e-4)
    assert m.kind == "values" and m.bad == 1 and m.total == 60 and m.index == (1, 7)
    assert abs(m.got - m.expected - 0.5) < 1e-6 and m.max_abs_err > 0.49
    assert "out[1, 7]" in m.message("out", 1e-5, 1e-4)


def test_nan_and_inf_patterns_must_match():
    ref = np.array([1.0, np.inf, -np.inf, np.nan], dtype=np.float16)
    assert compare(ref, ref.copy(), 1e-2, 1e-2) is None
    assert compare(ref, np.array([np.nan, np.inf, -np.inf, np.nan], np.float16), 1e-2, 1e-2).index == (0,)
    assert compare(ref, np.array([1.0, -np.inf, -np.inf, np.nan], np.float16), 1e-2, 1e-2).index == (1,)
    assert compare(ref, np.array([1.0, np.inf, -np.inf, 0.0], np.float16), 1e-2, 1e-2).index == (3,)


def test_constant_output_fails_even_within_a_loose_tolerance():
    ref = (np.random.default_rng(0).standard_normal(100) * 1e-3).astype(np.float16)
    zeros = np.zeros_like(ref)
    m = compare(ref, zeros, 1e-2, 1e-2)
    assert m is not None and m.kind == "constant"
    # A constant reference accepts a constant candidate.
    assert compare(np.full(10, 2.0, np.float32), np.full(10, 2.0, np.float32), 1e-5, 1e-4) is None


def test_unwritten_elements_are_found_by_their_poison_bytes():
    ref = np.arange(12, dtype=np.float32).reshape(3, 4)
    got = ref.copy()
    got.view(np.uint8).reshape(3, 4, 4)[2, 3] = 0xA5
    m = compare(ref, got, 1e-5, 1e-4, poison=0xA5)
    assert m.kind == "unwritten" and m.index == (2, 3) and m.bad == 1
    assert poison_mask(got, 0xA5).sum() == 1


def test_integers_exact_and_bfloat16_supported():
    assert compare(np.array([1, 2, 3], np.int32), np.array([1, 2, 4], np.int32), 0, 0).index == (2,)
    r = np.array([1.0, 2.0, 3.0], dtype=ml_dtypes.bfloat16)
    assert compare(r, r.copy(), 2e-2, 2e-2) is None


def test_first_difference_and_is_constant():
    a = np.array([1, 2, 3], np.float32)
    b = a.copy()
    assert first_difference(a, b) is None
    b[2] = -0.0 if a[2] == 0 else 9
    assert first_difference(a, b) == (1, (2,))
    assert is_constant(np.zeros(5, np.float16)) and not is_constant(a) and not is_constant(np.zeros(1))


def test_a_real_value_equal_to_the_poison_pattern_is_not_unwritten():
    ref = np.array([np.frombuffer(b"\xa5\xa5", np.float16)[0], 1.0], dtype=np.float16)
    close = ref.copy()
    close[0] = np.nextafter(ref[0], np.float16(0))  # 1 ulp away, within tolerance
    assert compare(ref, ref.copy(), 1e-2, 1e-2, poison=0xA5) is None
    assert compare(np.array([close[0], 1.0], np.float16), ref, 1e-2, 1e-2, poison=0xA5) is None


def test_a_bit_for_bit_comparison_does_not_cite_tolerances_it_did_not_use():
    # Two runs of a kernel without atomics are compared bit for bit (TGI's masked softmax differed
    # by 7e-9 between runs, and the message said "beyond atol=1e-05", which it was not).
    a = np.array([0.0557748, 1.0, 2.0], dtype=np.float32)
    b = a.copy()
    b[0] = np.nextafter(b[0], np.float32(1))
    m = compare(a, b, 1e-5, 1e-4, exact=True, check_constant=False)
    assert m is not None
    said = m.message("result", 1e-5, 1e-4, exact=True)
    assert "bit for bit" in said and "atol" not in said
    assert "beyond atol=1e-05, rtol=0.0001" in m.message("result", 1e-5, 1e-4)
    assert compare(a, b, 1e-5, 1e-4, exact=False, check_constant=False) is None


@pytest.mark.parametrize("dtype", [np.int8, np.float16, ml_dtypes.bfloat16, np.float32, np.int64, np.complex128])
def test_an_element_is_poison_only_when_every_byte_is(dtype):
    # Words of 1-8 bytes are compared whole with the byte repeated; wider ones (complex128) byte by byte.
    a = np.arange(12).astype(dtype).reshape(3, 4)
    raw = a.view(np.uint8).reshape(3, 4, a.dtype.itemsize)
    raw[0, 1] = 0xA5                       # every byte: poison
    raw[2, 3, :1] = 0xA5                   # only the first byte: a value
    mask = poison_mask(a, 0xA5)
    want = np.zeros((3, 4), bool)
    want[0, 1] = True
    if a.dtype.itemsize == 1:
        want[2, 3] = True                  # one byte is the whole element
    np.testing.assert_array_equal(mask, want)

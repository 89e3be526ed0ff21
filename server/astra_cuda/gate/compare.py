"""Comparing a candidate's output with the reference's, element by element.

Rules (computed in float64; 16-bit floats in float32, where their differences are exact):
- finite reference: |got - ref| <= atol + rtol * |ref| (+ an element's rounding allowance, where
  the gate measured one: twice the reference's own rounding error, see gate/run.py);
- NaN and infinity patterns must match (NaN where the reference is finite fails, and so does a
  finite value where the reference is NaN or an infinity of the other sign);
- integers and booleans must match exactly;
- an element still holding the poison bytes was never written;
- an output that is constant (all zeros included) where the reference's is not fails whatever
  the tolerance: loose tolerances let zero outputs pass on small-valued data.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np


@dataclass
class Mismatch:
    kind: str                 # 'values' | 'unwritten' | 'constant' | 'shape'
    bad: int                  # elements that fail
    total: int
    index: tuple[int, ...]    # the first failing element
    expected: float
    got: float
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    nonfinite: int = 0        # failing elements where one side is NaN/inf and the other is not
    allowance: float | None = None  # the largest rounding allowance granted, when there was one

    def message(self, output: str, atol: float, rtol: float, exact: bool = False) -> str:
        """`exact`: the comparison was bit for bit (the tolerances played no part), as for two runs of
        a kernel without atomics on the same inputs."""
        idx = "[" + ", ".join(map(str, self.index)) + "]"
        if self.kind == "unwritten":
            return (f"`{output}`: {self.bad} of {self.total} elements were never written (still hold the "
                    f"poison bytes), first at {output}{idx}: expected {_fmt(self.expected)}")
        if self.kind == "constant":
            return (f"`{output}` is constant ({_fmt(self.got) if self.got == self.got else 'NaN'} everywhere) where the reference's is not "
                    f"(e.g. {output}{idx} should be {_fmt(self.expected)})")
        if self.kind == "shape":
            return f"`{output}`: shape mismatch"
        special = (f" ({self.nonfinite} of them NaN/inf where the reference is finite, or the reverse)"
                   if self.nonfinite else "")
        if self.allowance is not None:
            special = (f" and twice the reference's own rounding error (up to {_fmt(self.allowance)}, measured by "
                       f"running it with directed rounding)" + special)
        how = ("differ bit for bit (the same inputs give the same bits where no atomics are used)" if exact
               else f"differ beyond atol={atol:g}, rtol={rtol:g}")
        return (f"`{output}`: {self.bad} of {self.total} elements {how}{special}; "
                f"max abs error {_fmt(self.max_abs_err)}, max rel error {_fmt(self.max_rel_err)} (finite elements); "
                f"first at {output}{idx}: expected {_fmt(self.expected)}, got {_fmt(self.got)}")


# Why two runs of a kernel with atomics are compared within the tolerance, and what a failure then
# means: the order in which threads' atomic updates land is the hardware's (a float sum rounds
# differently run to run), so only a difference beyond the tolerance is the kernel's.
ATOMICS_WHY = (" — the kernel uses atomics, whose order of updates may change between runs, so its runs are "
               "compared within the tolerance: these differ beyond it")


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def as_f64(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float64) if a.dtype.kind not in "biu" else a.astype(np.float64)


def poison_mask(a: np.ndarray, byte: int) -> np.ndarray:
    """Elements whose every byte equals `byte` (left untouched since poisoning). An element of 1, 2,
    4 or 8 bytes is compared as one word with the byte repeated (the same test, one comparison per
    element: the byte-wise reduction was half of a gate check's time on the H200)."""
    size = a.dtype.itemsize
    flat = np.ascontiguousarray(a)
    if size in (1, 2, 4, 8):
        return np.asarray(flat.view(f"u{size}") == int.from_bytes(bytes([byte]) * size, "little"))
    raw = flat.view(np.uint8).reshape(a.shape + (size,))
    return np.asarray(np.all(raw == byte, axis=-1))


CHUNK = 1 << 22  # elements per step: bounded memory on the GPU's timed sizes (10^8+ elements)


def _chunks(n: int) -> Iterator[slice]:
    for start in range(0, n, CHUNK):
        yield slice(start, min(n, start + CHUNK))


def _flat(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).reshape(-1)


def is_constant(a: np.ndarray) -> bool:
    """Bitwise one value everywhere (at least two elements)."""
    if a.size < 2:
        return False
    flat = _flat(a)
    first = flat[:1].view(np.uint8)
    for sl in _chunks(flat.size):
        raw = flat[sl].view(np.uint8).reshape(-1, a.dtype.itemsize)
        if not np.all(raw == first):
            return False
    return True


def _distinct_finite(a: np.ndarray) -> bool:
    flat = _flat(a)
    first = None
    for sl in _chunks(flat.size):
        f = as_f64(flat[sl])
        f = f[np.isfinite(f)]
        if f.size == 0:
            continue
        if first is None:
            first = f[0]
        if np.any(f != first):
            return True
    return False


def first_index(mask: np.ndarray) -> tuple[int, ...]:
    """The index of the first true element of `mask`, in its own shape."""
    flat = int(np.flatnonzero(mask.reshape(-1))[0])
    return tuple(int(i) for i in np.unravel_index(flat, mask.shape))


def _bad_chunk(r: np.ndarray, g: np.ndarray, atol: float, rtol: float, exact: bool,
               extra: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bad mask, absolute errors, relative errors) for one chunk, in float64. `extra`: each
    element's allowance beyond the tolerance (or None)."""
    rn, gn = np.isnan(r), np.isnan(g)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if exact:
            bad = (r != g) & ~(rn & gn)
            abs_err = np.where(bad, np.abs(g - r), 0.0)
        else:
            finite = np.isfinite(r) & np.isfinite(g)
            abs_err = np.where(finite, np.abs(g - r), 0.0)
            bound = atol + rtol * np.abs(r) + (extra if extra is not None else 0.0)
            tol_ok = np.where(finite, abs_err <= bound, False)
            same_special = (rn & gn) | (np.isinf(r) & np.isinf(g) & (r == g))
            # an infinite allowance: no bound holds (atomic adds whose magnitudes overflow the type)
            unbounded = np.isposinf(extra) if extra is not None else False
            bad = ~(tol_ok | same_special | unbounded)
        absr = np.abs(r)
        rel = np.divide(abs_err, absr, out=np.where(abs_err > 0, np.inf, 0.0), where=absr > 0)
        fin = np.isfinite(r) & np.isfinite(g)
    return bad, abs_err[fin], rel[fin]


def bad_mask(ref: np.ndarray, got: np.ndarray, atol: float, rtol: float, allowance: np.ndarray) -> np.ndarray:
    """Which elements of floating-point `got` fail against `ref` in `compare`'s judgement with
    `allowance` (an infinity where the other is finite, or the reverse, included)."""
    rf, gf, extra = _flat(ref), _flat(got), _flat(allowance).astype(np.float64)
    bad = np.zeros(rf.size, dtype=bool)
    for sl in _chunks(rf.size):
        bad[sl] = _bad_chunk(as_f64(rf[sl]), as_f64(gf[sl]), atol, rtol, False, extra[sl])[0]
    return bad.reshape(ref.shape)


def compare(ref: np.ndarray, got: np.ndarray, atol: float, rtol: float, *,
            poison: int | None = None, exact: bool | None = None,
            check_constant: bool = True, allowance: np.ndarray | None = None) -> Mismatch | None:
    """None when `got` matches `ref`; otherwise the first kind of problem found, in the order
    unwritten -> constant -> values. `poison` is the byte the candidate's buffer held before the
    launch: a failing element still holding it was never written. (An element that holds the
    poison but matches the reference is fine: a real value can equal the poison pattern.)
    `allowance` (floating-point outputs, `ref`'s shape): each element's absolute allowance on top
    of the tolerance."""
    if ref.shape != got.shape:
        return Mismatch("shape", got.size, ref.size, (), float("nan"), float("nan"))
    total = int(ref.size)
    if total == 0:
        return None
    if exact is None:
        exact = ref.dtype.kind in "biu"
    rf, gf = _flat(ref), _flat(got)
    # 16-bit floats are compared in float32: their difference is exact there, and it is twice as
    # fast as float64 on 10^8 elements. Everything else in float64.
    integer = ref.dtype.kind in "biu"
    if integer or exact:
        allowance = None
    work = np.float32 if ref.dtype.itemsize <= 2 and not integer and allowance is None else np.float64
    extra = _flat(allowance).astype(np.float64) if allowance is not None else None
    bits = f"u{ref.dtype.itemsize}" if ref.dtype.itemsize in (1, 2, 4, 8) else None
    bad: np.ndarray = np.zeros(total, dtype=bool)
    max_abs = max_rel = float("-inf")
    for sl in _chunks(total):
        if bits and np.array_equal(rf[sl].view(bits), gf[sl].view(bits)):
            continue  # bitwise identical: nothing to compute
        if integer:  # exact, in the integers' own type (int64 beyond 2^53 too)
            bad[sl] = rf[sl] != gf[sl]
            continue
        b, ae, re = _bad_chunk(rf[sl].astype(work), gf[sl].astype(work), atol, rtol, exact,
                               None if extra is None else extra[sl])
        bad[sl] = b
        if ae.size:
            max_abs = max(max_abs, float(ae.max()))
            max_rel = max(max_rel, float(re.max()))
    bad = bad.reshape(ref.shape)

    def at(i: tuple[int, ...]) -> tuple[float, float]:
        return float(as_f64(ref[i])), float(as_f64(got[i]))

    if poison is not None and bad.any():
        idx = np.flatnonzero(bad.reshape(-1))
        raw = gf[idx].view(np.uint8).reshape(idx.size, got.dtype.itemsize)
        still = np.all(raw == poison, axis=-1)
        if still.any():
            i = tuple(int(k) for k in np.unravel_index(int(idx[still][0]), ref.shape))
            return Mismatch("unwritten", int(still.sum()), total, i, *at(i))
    if check_constant and is_constant(got) and _distinct_finite(ref):
        i = first_index(bad) if bad.any() else (0,) * ref.ndim
        return Mismatch("constant", int(bad.sum()), total, i, *at(i))
    if not bad.any():
        return None
    i = first_index(bad)
    nan = float("nan")
    nonfinite = 0
    if not integer:
        idx = np.flatnonzero(bad.reshape(-1))
        nonfinite = int(np.count_nonzero(np.isfinite(as_f64(rf[idx])) != np.isfinite(as_f64(gf[idx]))))
    return Mismatch("values", int(bad.sum()), total, i, *at(i),
                    max_abs if max_abs != float("-inf") else nan, max_rel if max_rel != float("-inf") else nan,
                    nonfinite, float(extra.max()) if extra is not None and extra.size else None)


def first_difference(a: np.ndarray, b: np.ndarray) -> tuple[int, tuple[int, ...]] | None:
    """(count, first index) of elements whose bytes differ; None when bitwise identical."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return (max(a.size, b.size), ())
    fa, fb = _flat(a), _flat(b)
    bits = f"u{a.dtype.itemsize}" if a.dtype.itemsize in (1, 2, 4, 8) else None
    if bits is not None:
        if np.array_equal(fa.view(bits), fb.view(bits)):  # the common case, fast on 10^8 elements
            return None
        diff = fa.view(bits) != fb.view(bits)
    else:
        n = a.dtype.itemsize
        diff = np.any(fa.view(np.uint8).reshape(-1, n) != fb.view(np.uint8).reshape(-1, n), axis=-1)
    if not diff.any():
        return None
    return int(diff.sum()), first_index(diff.reshape(a.shape))

"""Comparing a candidate's output with the reference's, element by element.

Rules (all computed in float64):
- finite reference: |got - ref| <= atol + rtol * |ref|;
- NaN and infinity patterns must match (NaN where the reference is finite fails, and so does a
  finite value where the reference is NaN or an infinity of the other sign);
- integers and booleans must match exactly;
- an element still holding the poison bytes was never written;
- an output that is constant (all zeros included) where the reference's is not fails whatever
  the tolerance: loose tolerances let zero outputs pass on small-valued data.
"""
from __future__ import annotations

from dataclasses import dataclass

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

    def message(self, output: str, atol: float, rtol: float) -> str:
        idx = "[" + ", ".join(map(str, self.index)) + "]"
        if self.kind == "unwritten":
            return (f"`{output}`: {self.bad} of {self.total} elements were never written (still hold the "
                    f"poison bytes), first at {output}{idx}: expected {_fmt(self.expected)}")
        if self.kind == "constant":
            return (f"`{output}` is constant ({_fmt(self.got) if self.got == self.got else 'NaN'} everywhere) where the reference's is not "
                    f"(e.g. {output}{idx} should be {_fmt(self.expected)})")
        if self.kind == "shape":
            return f"`{output}`: shape mismatch"
        return (f"`{output}`: {self.bad} of {self.total} elements differ beyond atol={atol:g}, rtol={rtol:g}; "
                f"max abs error {_fmt(self.max_abs_err)}, max rel error {_fmt(self.max_rel_err)}; "
                f"first at {output}{idx}: expected {_fmt(self.expected)}, got {_fmt(self.got)}")


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def as_f64(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float64) if a.dtype.kind not in "biu" else a.astype(np.float64)


def poison_mask(a: np.ndarray, byte: int) -> np.ndarray:
    """Elements whose every byte equals `byte` (left untouched since poisoning)."""
    raw = np.ascontiguousarray(a).view(np.uint8).reshape(a.shape + (a.dtype.itemsize,))
    return np.all(raw == byte, axis=-1)


def is_constant(a: np.ndarray) -> bool:
    if a.size < 2:
        return False
    flat = np.ascontiguousarray(a).reshape(-1)
    raw = flat.view(np.uint8).reshape(flat.size, a.dtype.itemsize)
    return bool(np.all(raw == raw[0]))


def _distinct_finite(a: np.ndarray) -> bool:
    f = as_f64(a).reshape(-1)
    f = f[np.isfinite(f)]
    return f.size >= 2 and bool(np.any(f != f[0]))


def _first(mask: np.ndarray) -> tuple[int, ...]:
    flat = int(np.flatnonzero(mask.reshape(-1))[0])
    return tuple(int(i) for i in np.unravel_index(flat, mask.shape))


def compare(ref: np.ndarray, got: np.ndarray, atol: float, rtol: float, *,
            poison: int | None = None, exact: bool | None = None,
            check_constant: bool = True) -> Mismatch | None:
    """None when `got` matches `ref`; otherwise the first kind of problem found, in the order
    unwritten -> constant -> values. `poison` is the byte the candidate's buffer held before the
    launch: a failing element still holding it was never written. (An element that holds the
    poison but matches the reference is fine: a real value can equal the poison pattern.)"""
    if ref.shape != got.shape:
        return Mismatch("shape", got.size, ref.size, (), float("nan"), float("nan"))
    total = int(ref.size)
    if total == 0:
        return None
    r = as_f64(ref)
    g = as_f64(got)
    if exact is None:
        exact = ref.dtype.kind in "biu"
    rn, gn = np.isnan(r), np.isnan(g)
    with np.errstate(invalid="ignore", over="ignore"):
        if exact:
            bad = (r != g) & ~(rn & gn)
            abs_err = np.where(bad, np.abs(g - r), 0.0)
        else:
            finite = np.isfinite(r) & np.isfinite(g)
            abs_err = np.where(finite, np.abs(g - r), 0.0)
            tol_ok = np.where(finite, abs_err <= atol + rtol * np.abs(r), False)
            same_special = (rn & gn) | (np.isinf(r) & np.isinf(g) & (r == g))
            bad = ~(tol_ok | same_special)
    if poison is not None and bad.any():
        unwritten = bad & poison_mask(got, poison)
        if unwritten.any():
            i = _first(unwritten)
            return Mismatch("unwritten", int(unwritten.sum()), total, i, float(r[i]), float(g[i]))
    if check_constant and is_constant(got) and _distinct_finite(ref):
        i = _first(bad) if bad.any() else (0,) * ref.ndim
        return Mismatch("constant", int(bad.sum()), total, i, float(r[i]), float(g[i]))
    if not bad.any():
        return None
    i = _first(bad)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        absr = np.abs(r)
        rel = np.divide(abs_err, absr, out=np.where(abs_err > 0, np.inf, 0.0), where=absr > 0)
        fin = np.isfinite(r) & np.isfinite(g)
        max_abs = float(abs_err[fin].max()) if fin.any() else float("nan")
        max_rel = float(rel[fin].max()) if fin.any() else float("nan")
    return Mismatch("values", int(bad.sum()), total, i, float(r[i]), float(g[i]), max_abs, max_rel)


def first_difference(a: np.ndarray, b: np.ndarray) -> tuple[int, tuple[int, ...]] | None:
    """(count, first index) of elements whose bytes differ; None when bitwise identical."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return (max(a.size, b.size), ())
    ra = np.ascontiguousarray(a).view(np.uint8).reshape(a.shape + (a.dtype.itemsize,))
    rb = np.ascontiguousarray(b).view(np.uint8).reshape(b.shape + (b.dtype.itemsize,))
    diff = np.any(ra != rb, axis=-1)
    if not diff.any():
        return None
    return int(diff.sum()), _first(diff)

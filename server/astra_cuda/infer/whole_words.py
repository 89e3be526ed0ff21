"""Sizes a shape divides into whole words: a dimension `n / k` (k a number) holds n / k entries,
truncated, while a kernel that indexes the buffer from a range over n reaches entry (n - 1) / k —
one past the shape wherever n is no multiple of k. vLLM's GPTQ `gemm_half_q_half_gptq_4bit_kernel`
reads its zero points `b_gptq_qzeros[group * size_n / 8 + n / 8]` (eight 4-bit values a word) for
each column n < size_n; shaped `[groups, size_n / 8]` and drawn at size_n = 1004, its last word
was read past the buffer and two GPU runs disagreed. The program's n is always whole words (its
wrapper makes size_n eight times the zeros' width), so the kernel's reach decides: probed at one
past a multiple of k, a buffer reaching beyond its shape's extent requires `n % k == 0`. Separate
from `roles` (which fits the shapes) because it is one more probe over shapes already fitted."""
from __future__ import annotations

import ast
import math
from collections.abc import Callable

from ..model import exprs
from .shape_fits import quotient_fit


def _divided(dim: str, names: set[str]) -> tuple[str, int] | None:
    """(n, k) of a dimension written `n / k`, n a size and k a number above 1."""
    try:
        t = exprs.parse(dim).body
    except exprs.ExprError:
        return None
    if isinstance(t, ast.BinOp) and isinstance(t.op, (ast.Div, ast.FloorDiv)) and isinstance(t.left, ast.Name) \
            and t.left.id in names and isinstance(t.right, ast.Constant) and isinstance(t.right.value, int) \
            and not isinstance(t.right.value, bool) and t.right.value > 1:
        return t.left.id, t.right.value
    return None


def _elements(shape: list[str], sizes: dict[str, int]) -> int | None:
    total = 1
    try:
        for d in shape:
            total *= exprs.evaluate_int(d, sizes)
    except exprs.ExprError:
        return None
    return total


def _past(p: str, shape: list[str], n: str, k: int, sizes: dict[str, int],
          reach: Callable[[dict[str, int]], dict[str, int | None] | None]) -> bool | None:
    """Whether the kernel reaches `p` past `shape` at n one past a multiple of k (None: not measured)."""
    at = {**sizes, n: max((sizes[n] // k) * k, k) + 1}
    reached, extent = reach(at), _elements(shape, at)
    got = reached.get(p) if reached is not None else None
    return None if got is None or extent is None else got > extent


def whole_words(shapes: dict[str, list[str]], free: list[str], sizes: dict[str, int],
                reach: Callable[[dict[str, int]], dict[str, int | None] | None],
                laid_out: bool = False) -> dict[str, tuple[int, list[str]]]:
    """size -> (k, the pointers that show it) for each size n a fitted shape divides by a number k
    (`["groups", "size_n / 8"]`) whose buffer the kernel reaches past that shape at n one past a
    multiple of k: the kernel needs n whole words of k. `sizes`: a probe's sizes, where the shapes
    fit; `reach(sizes)`: each pointer's reached extent there (None where unbounded), None where the
    launch is invalid. A buffer that stays within its truncated extent (a kernel that reads only
    n / k words) asks nothing.

    At sizes of whole words a product cannot tell which of its sizes the words divide (`dim *
    width / 8`, fitted `["dim", "width / 8"]`, for exllama's `w[k / 8 * width + n]`, k < dim): the
    division is the one size's whose other sizes, each one past a multiple of k, the kernel never
    reaches past — moved there in `shapes` (`["dim / 8", "width"]`) before n is asked to be whole;
    not where `laid_out` (`shape_fits.packed_layout` placed it from the kernel's whole steps: GPTQ's
    `[groups, size_n / 8]`, whose groups one past a multiple of 8 break the groups' division of
    size_k, so that probe tells nothing)."""
    out: dict[str, tuple[int, list[str]]] = {}
    for p, shape in shapes.items():
        cut = [(i, f) for i, d in enumerate(shape) if (f := _divided(d, set(free))) is not None]
        if len(cut) != 1:
            continue
        at_, (n, k) = cut[0]
        plain = [d.strip() for i, d in enumerate(shape) if i != at_]
        for c in [n] + ([] if laid_out else [d for d in plain if d in free and d != n]):
            moved = list(shape) if c == n else [  # the division taken off n and put on c
                f"{c} / {k}" if d.strip() == c else d.strip() for d in shape[:at_]] + [n] + [
                f"{c} / {k}" if d.strip() == c else d.strip() for d in shape[at_ + 1:]]
            others = {d for d in plain + [n] if d in free and d != c}
            if all(_past(p, moved, z, k, sizes, reach) is False for z in others):
                shapes[p] = moved
                if _past(p, moved, c, k, sizes, reach):
                    k0, shown = out.get(c, (1, []))
                    out[c] = (math.lcm(k0, k), shown + [p])
                break
        else:   # no placement the other sizes fit: the shape as fitted, n whole words where it is read past
            if _past(p, shape, n, k, sizes, reach):
                k0, shown = out.get(n, (1, []))
                out[n] = (math.lcm(k0, k), shown + [p])
    return out


def packed_quotient(values: list[tuple[dict[str, int], int]], free: list[str], divisors: list[str],
                    whole: list[tuple[str, str]], inner: list[str],
                    confirm: Callable[[list[str]], bool]) -> list[str] | None:
    """A quotient shape of packed words, k values a word (k = 8, 4, 2): exllama's zero points, one
    4-bit value per group and column, `w_zeros[group * width / 8 + column / 8]` — measured
    `cdiv(dim, groupsize) * width / 8`, which `quotient_fit` reads once the extents are counted in
    values, the words then along an outer size: the x threads' (`inner`: columns) where it is one,
    else the innermost. Tried where no other fit holds, each confirmed by `confirm` (the probes of
    `confirmed_at_probes`)."""
    for k in (8, 4, 2):
        q = quotient_fit([(s, e * k) for s, e in values], free, divisors, whole)
        outer = q[:-1] if q is not None else []
        pick = next((d for d in outer if d in inner), outer[-1] if outer else None)
        if pick is None or any(s[pick] % k for s, _ in values):
            continue
        shape = [f"{d} / {k}" if d == pick else d for d in outer] + [q[-1]]
        if confirm(shape):
            return shape
    return None

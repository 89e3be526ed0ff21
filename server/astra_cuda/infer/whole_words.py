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


def whole_words(shapes: dict[str, list[str]], free: list[str], sizes: dict[str, int],
                reach: Callable[[dict[str, int]], dict[str, int | None] | None]) -> dict[str, tuple[int, list[str]]]:
    """size -> (k, the pointers that show it) for each size n a fitted shape divides by a number k
    (`["groups", "size_n / 8"]`) whose buffer the kernel reaches past that shape at n one past a
    multiple of k: the kernel needs n whole words of k. `sizes`: a probe's sizes, where the shapes
    fit; `reach(sizes)`: each pointer's reached extent there (None where unbounded), None where the
    launch is invalid. A buffer that stays within its truncated extent (a kernel that reads only
    n / k words) asks nothing."""
    out: dict[str, tuple[int, list[str]]] = {}
    for p, shape in shapes.items():
        for dim in shape:
            found = _divided(dim, set(free))
            if found is None:
                continue
            n, k = found
            at = {**sizes, n: (sizes[n] // k) * k + 1}
            if at[n] <= k:   # a probe smaller than a word: one word past the smallest
                at[n] = k + 1
            reached, extent = reach(at), _elements(shape, at)
            got = reached.get(p) if reached is not None else None
            if got is not None and extent is not None and got > extent:
                k0, shown = out.get(n, (1, []))
                out[n] = (math.lcm(k0, k), shown + [p])
    return out

"""Shapes and roles of the pointer parameters from the kernel's own accesses (`access`): each
extent measured at a few size assignments and fitted to a product of sizes; read-only, written,
read-modify-write; index arrays bounded by the table they index."""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from .. import access, exprs
from ..source import Kernel

# ---- shapes from the kernel's accesses ----------------------------------------------------------

_PROBE_VALUES = (37, 53, 29, 41, 23)
TABLE = "V"


def _fit(values: list[tuple[dict[str, int], int]], names: list[str]) -> list[str] | None:
    """A shape (a list of size names, possibly with a leading factor) whose product equals
    every measured extent: [N, C], [B, T, C], [2 * d]."""
    for r in range(1, min(3, len(names)) + 1):
        for combo in itertools.combinations(names, r):
            prod = [_prod(s[n] for n in combo) for s, _ in values]
            if not all(p > 0 for p in prod):
                continue
            # A vector access reaches up to a packet past the last aligned index (`i < n` on an
            # index stepping by 8): the same small overhang at every size is that, not the shape.
            for over in range(16):
                ratios = {(e - over) / p for (_, e), p in zip(values, prod)}
                if len(ratios) != 1:
                    continue
                c = ratios.pop()
                if c == 1:
                    return list(combo)
                if c == int(c) and 1 < c <= 16:
                    return list(combo[:-1]) + [f"{int(c)} * {combo[-1]}"]
    if all(e == values[0][1] for _, e in values) and values[0][1] > 0:
        return [str(values[0][1])]
    return None


def _per_block(grid: list[str], values: list[tuple[dict[str, int], int]]) -> list[str] | None:
    """A shape of one row per block, each a fixed number of elements long, when every measured
    extent is that multiple of a grid dimension's size: [blocks] or [blocks, 64]."""
    for g in grid:
        if g.strip().isdigit():
            continue
        blocks = [exprs.evaluate_int(g, s) for s, _ in values]
        if min(blocks) < 1 or any(e % b for (_, e), b in zip(values, blocks)):
            continue
        per = {e // b for (_, e), b in zip(values, blocks)}
        if len(per) == 1:
            n = per.pop()
            return [g] if n == 1 else [g, str(n)]
    return None


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


@dataclass
class _Shapes:
    shapes: dict[str, list[str]]
    inout: set[str]
    read_only: set[str]
    tables: set[str]        # integer parameters whose values index a table of TABLE rows
    uses_table: bool


def _shapes(kernel: Kernel, size_names: list[str], grid: list[str], block: list[str], elem_bytes: dict[str, int],
            int_params: set[str], constants: dict[str, int], lanes: dict[str, int] | None = None,
            derived: dict[str, str] | None = None, helpers=None) -> _Shapes | None:
    samples = []
    names = size_names + [TABLE]
    for k in range(3):
        # multiples of 16: a row split into packets of 8 (`hidden / 8`) is then read whole
        sizes = {n: _PROBE_VALUES[(i + k) % len(_PROBE_VALUES)] * (k + 2) * 16 for i, n in enumerate(names)}
        try:
            probe = dict(sizes)   # the parameters derived from the sizes (a row stride) take their values
            for name, e in (derived or {}).items():
                probe[name] = exprs.evaluate_int(e, sizes)
            g = [exprs.evaluate_int(x, sizes) for x in grid]
            b = [exprs.evaluate_int(x, sizes) for x in block]
        except exprs.ExprError:
            return None
        g, b = (g + [1, 1, 1])[:3], (b + [1, 1, 1])[:3]
        if min(g + b) < 1:
            return None
        facts = access.analyse(kernel, probe, g, b, elem_bytes, int_params, sizes[TABLE], constants, lanes, helpers)
        if facts is None:
            return None
        samples.append((sizes, facts))
    shapes: dict[str, list[str]] = {}
    for p in kernel.params:
        if not p.is_pointer:
            continue
        uses = [f.uses[p.name] for _, f in samples]
        if any(u.unknown or u.hi is None for u in uses):
            continue
        fitted = _fit([(s, u.hi + 1) for (s, _), u in zip(samples, uses)], names)
        if fitted is None:   # per-block partial results (`out[blockIdx.x * BINS + tid]`): the grid's extent times theirs
            fitted = _per_block(grid, [(s, u.hi + 1) for (s, _), u in zip(samples, uses)])
        if fitted is not None:
            shapes[p.name] = fitted
    last = samples[-1][1].uses
    uses_table = any(TABLE in " ".join(v) for v in shapes.values())
    return _Shapes(shapes, {n for n, u in last.items() if u.read and u.written},
                   {n for n, u in last.items() if u.read and not u.written},
                   {n for n, u in last.items() if u.table_loads} if uses_table else set(), uses_table)

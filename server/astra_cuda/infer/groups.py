"""Sizes a kernel takes in whole groups because it pairs elements by their index's residue
(`d_id % 2 == 0 ? src[off + 1] : src[off - 1]`, TransformerEngine's interleaved RoPE): where the
size is no multiple of the group, the last element's partner lies past the row — one element past
the buffer in its last row. The probes are multiples of 16, where every group is whole, so the
shapes fit there; each size is probed once more one past its probe, and a size past whose shape
the accesses then reach, and fit again at the next multiple of the residue's modulus, must be a
multiple of it (`groups`). Only for kernels whose walk narrowed an index by a residue test
(`access.Facts.residues`): the others pay no probe. Pure."""
from __future__ import annotations

from typing import Callable

from ..model import exprs
from ..model.access_values import Facts
from .size_bounds import Sample


def _past(facts: Facts | None, shapes: dict[str, list[str]], sizes: dict[str, int]) -> bool | None:
    """Whether some pointer's accesses reach past its shape at `sizes` (None: not measured there)."""
    if facts is None:
        return None
    for p, shape in shapes.items():
        u = facts.uses.get(p)
        if u is None or u.unknown or u.hi is None:
            continue
        try:
            want = exprs.evaluate_int(" * ".join(f"({x})" for x in shape), sizes)
        except exprs.ExprError:
            continue
        if u.hi + 1 > want:
            return True
    return False


def partial_groups(samples: list[Sample], shapes: dict[str, list[str]], candidates: list[str],
                   fixed: dict[str, str], run: Callable[[dict[str, int]], Facts | None]) -> dict[str, int]:
    """size -> the modulus it must be a multiple of. `samples`: the probes the shapes were fitted
    at ((sizes, facts) each); `candidates`: the free sizes (no stride, none taken equal or
    derived); `fixed`: the parameters set from the sizes, evaluated at each point as the probes
    evaluate them (`d` taken equal to `d2` moves with it); `run(sizes)`: the accesses there."""
    moduli = sorted(set().union(*(f.residues for _, f in samples if f is not None)))
    if not moduli or not samples:
        return {}
    base = samples[0][0]

    def point(n: str, by: int) -> dict[str, int]:
        sizes = {**base, n: base[n] + by}
        for name, e in fixed.items():
            try:
                sizes[name] = exprs.evaluate_int(e, sizes)
            except exprs.ExprError:
                pass
        return sizes

    if _past(samples[0][1], shapes, base):   # the shapes do not hold at the probes: nothing to learn here
        return {}
    out: dict[str, int] = {}
    for n in candidates:
        if n not in base or base[n] % max(moduli):
            continue
        odd = point(n, 1)
        if not _past(run(odd), shapes, odd):
            continue
        for m in moduli:   # the smallest group after which the accesses fit again
            whole = point(n, m)
            if _past(run(whole), shapes, whole) is False:
                out[n] = m
                break
    return out

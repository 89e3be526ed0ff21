"""Sizes a kernel's instance covers only up to a bound: flash-attention's layer norm
`ln_fwd_kernel<Kernel_traits<…, 1024, …>, …, Is_even_cols = false>` walks each row in `LDGS` (8)
loads of 32 vectors of 4 floats, each guarded by `it < num_valid_ldgs` (the row's vectors), so it
covers `min(cols, 1024)` columns: the project picks the instance whose hidden size is at least the
row's. Probed at `cols` past 1024 a row's reads stop short of the next row, and no shape fits; at
or below it every row is read whole. The largest multiple of 16 at which the accesses fit a shape
— fitted at probes no larger, and exactly there at that value — is the bound the program keeps
(`largest_covered`), searched by halving between 16 and the probes. Pure: the probing is injected."""
from __future__ import annotations

from typing import Callable

from ..model import exprs
from ..model.access_values import Facts

# a probe: the sizes it ran at and the accesses seen there (None: the run failed)
Sample = tuple[dict[str, int], Facts | None]
# what a fit gives: the parameters set from the sizes, and the probes the shapes were fitted at
Solved = tuple[dict[str, str], list[Sample]]

MIN = 16   # sizes are probed in multiples of 16


def holds_at(shapes: dict[str, list[str] | None], facts: Facts | None, sizes: dict[str, int], exact: set[str]) -> bool:
    """Whether every pointer's accesses at `sizes` stay within its shape, reaching exactly its end
    for those in `exact` (the ones no shape fitted before: a bound below that value reads less)."""
    if facts is None:
        return False
    for p, shape in shapes.items():
        u = facts.uses.get(p)
        if shape is None or u is None:
            return False
        if u.unknown or u.hi is None:
            continue
        try:
            want = exprs.evaluate_int(" * ".join(f"({x})" for x in shape), sizes)
        except exprs.ExprError:
            return False
        if u.hi + 1 > want or (p in exact and u.hi + 1 != want):
            return False
    return True


def largest_covered(samples: list[Sample], sizes: list[str], bad: list[str],
                    solve_at_most: Callable[[str, int], Solved | None],
                    shapes_of: Callable[[Solved], dict[str, list[str] | None]],
                    run: Callable[[dict[str, int], dict[str, str]], Facts | None]) -> dict[str, int]:
    """{size: its bound} for the first of `sizes` (those whose probe moves what the kernel reaches)
    under a bound of which every pointer fits a shape, the `bad` ones (no shape at the probes)
    exactly at the bound; {} where none does.
    `samples`: the probes ((sizes, facts) each); `solve_at_most(n, b)`: the shapes fitted with `n`
    probed at most `b` (None where none fits);
    `run(sizes, fixed)`: the accesses at one point."""
    for n in sizes:
        top = max(s[n] for s, _ in samples) // MIN - 1
        lo, best = 1, None   # in steps of MIN
        while lo <= top:
            mid = (lo + top) // 2
            tried = solve_at_most(n, mid * MIN)
            ok = False
            if tried is not None:
                fixed, probes = tried
                point = {**probes[0][0], n: mid * MIN}
                for name, e in fixed.items():   # the parameters set from the sizes, at this point
                    try:
                        point[name] = exprs.evaluate_int(e, point)
                    except exprs.ExprError:
                        pass
                ok = holds_at(shapes_of(tried), run(point, fixed), point, set(bad))
            if ok:
                best, lo = mid * MIN, mid + 1
            else:
                top = mid - 1
        if best is not None:
            return {n: best}
    return {}

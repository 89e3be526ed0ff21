"""The bytes a proposed launch touches at one size, counted as the profiler counts them
(`model.floor_bytes`, also the suite's bench traffic): of a table reached through indices
(`randint(0, V)` ids, a scatter's `permutation(V)` slots) only the rows they reach. Bench sizes
are grown by this count, so a KV cache grown past the tokens written into it adds nothing."""
from __future__ import annotations

import tomllib

from ..model import dtypes, exprs, harness
from ..model.floor_bytes import floor_bytes


def view(buffers: dict, args: dict[str, str], sizes: list[str], grid: list[str], block: list[str]) -> harness.Spec | None:
    """The proposal's buffers as a spec's arguments (type, shape, role, init, read from each
    argument's TOML value), or None where one of them cannot be read so."""
    out = {}
    for name in buffers:
        if name not in args:
            return None
        try:
            t = tomllib.loads(f"v = {args[name]}")["v"]
            init = harness.parse_init(t["init"], set(sizes)) if "init" in t else harness.Init("normal")
            out[name] = harness.ArgSpec(name, True, dtypes.BY_NAME[t["type"]], tuple(str(e) for e in t["shape"]),
                                        output=bool(t.get("output")) and not t.get("inout"),
                                        inout=bool(t.get("inout")), init=init, table=str(t.get("table", "")))
        except (tomllib.TOMLDecodeError, KeyError, TypeError, ValueError, exprs.ExprError):
            return None
    return harness.Spec("", tuple(grid), tuple(block), args=out)


def touched(spec: harness.Spec, case: dict[str, int]) -> int | None:
    """`floor_bytes` at `case`; None where a shape or a bound does not evaluate there."""
    try:
        return floor_bytes(spec, case)
    except (exprs.ExprError, ValueError, ZeroDivisionError, OverflowError):
        return None



def drawn_part(spec: harness.Spec, size: str) -> harness.Spec | None:
    """Where indices are drawn below `size` (`randint(0, V)`: the rows of a table they reach), the
    buffers it measures — the indices and the table — whose `touched` bytes say whether halving it
    shrinks only rows the launch never reaches (a cache past the rows the tokens reach) or makes the
    ids collide (a table of one row every token reads); else None."""
    def names(exprs_: tuple[str, ...]) -> set[str]:
        return set().union(set(), *(exprs.names(e) for e in exprs_))
    if not any(size in names(a.init.exprs) for a in spec.args.values()):
        return None
    return harness.Spec("", spec.grid, spec.block,
                        args={n: a for n, a in spec.args.items() if size in names((*a.shape, *a.init.exprs))})

"""The fewest bytes a kernel must move at one size, read from its spec (`floor_bytes`): the
profiler's roofline floor, the suite's bench traffic, and what inference grows bench sizes by —
one count, so that a size grown "to move 256 MiB" moves them by the profiler's measure too."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .spec import Spec


def _squash(expr: str) -> str:
    return "".join(expr.split())


@dataclass(frozen=True)
class Touched:
    """What the trusted kernel was seen to need at one size (`profiler.touched`): per array it
    reads, how many of its leading elements its results depend on (counted high, to a
    bisection step); per read-write array, how many of its elements it changed (0: only read)."""
    read: dict[str, int]
    written: dict[str, int]


def floor_bytes(spec: "Spec", sizes: dict[str, int], touched: Touched | None = None) -> int:
    """The fewest bytes the kernel must move at `sizes`: the spec's bytes (every input read
    once, every output written once), except that a table read through an index array counts
    only the rows the indices reach. An index array is one whose init is `randint(lo, V)`, or
    `permutation(V)` (a scatter's distinct slots); a table is a read-only input whose leading
    dimension is that `V` (`wte = ["V", "C"]` beside `ids = randint(0, V)`): an embedding lookup
    of B·T ids touches B·T of a 50k-row table's rows at most, not all of them. The rows counted
    are the distinct ones the ids are expected to hit, V·(1 - (1 - 1/V)^n) for n uniform draws
    over V rows, n for n distinct ones (the suite's and the timing loop's ids are such draws;
    each distinct row must come from memory at least once, repeats may hit the cache).
    The same holds for a read-write table (a KV cache whose blocks a mapping names: the rows it
    reaches are read and written, the others never touched) and behind a table of device pointers'
    entry dimension (each entry's buffer is a table of its own: `["layers", "V", "C"]`). An
    output is always counted whole: the gate holds the kernel to writing every element of it.

    `touched` (measured on the trusted kernel at these sizes) narrows what the spec's arrays
    overstate: an array read only in part (an inferred shape larger than the launch reaches)
    counts the part its results depend on, a read-write array whose initial content the results
    do not depend on counts its write alone (an output the spec calls read-write), and its write
    only the elements the kernel changed (none: an array the spec calls read-write only read)."""
    draws: dict[str, int] = {}   # bound expression -> index elements drawn below it
    spans: dict[str, int] = {}   # bound expression -> rows the draws can reach (hi - lo)
    distinct: set[str] = set()   # bounds drawn as distinct values (`permutation(V)`: a scatter's slots)
    for a in spec.args.values():
        init = a.init
        bounded = init.kind == "randint" or init.kind == "permutation" and bool(init.exprs or init.params)
        if not (a.pointer and not a.written and bounded and not a.dtype.is_float):
            continue
        bound = _squash(init.exprs[-1]) if init.exprs else f"{init.params[-1]:g}"
        params = [int(v) for v in init.at(sizes).params]
        lo, hi = params if len(params) == 2 else (0, params[0])
        draws[bound] = draws.get(bound, 0) + math.prod(spec.shape(a.name, sizes))
        spans[bound] = max(0, hi - max(lo, 0))
        if init.kind == "permutation":
            distinct.add(bound)
    total = 0
    for a in spec.args.values():
        if not a.pointer:
            continue
        shape = spec.shape(a.name, sizes)
        d = 1 if a.table else 0          # a table of pointers: its rows are each entry's first dimension
        entries, rows = math.prod(shape[:d]), (shape[d] if len(shape) > d else 1)
        row_bytes = a.dtype.itemsize * math.prod(shape[d + 1:])
        lead = _squash(a.shape[d]) if len(a.shape) > d else ""
        if a.is_input and lead in draws and rows > 0:   # inputs and read-write arrays, never outputs
            rows = reached_rows(rows, spans[lead], draws[lead], lead in distinct)
        nbytes = entries * rows * row_bytes
        read = nbytes if a.is_input else 0
        write = nbytes if a.written else 0
        if touched is not None and a.name in touched.read:
            read = min(read, touched.read[a.name] * a.dtype.itemsize)
        if touched is not None and a.inout and a.name in touched.written:
            write = min(write, touched.written[a.name] * a.dtype.itemsize)
        total += read + write
    return total


def reached_rows(rows: int, span: int, draws: int, distinct: bool = False) -> int:
    """Of a table's `rows`, those `draws` indices below `span` are expected to reach: each distinct
    value once (`permutation(V)`), else uniform draws' distinct rows, V·(1 - (1 - 1/V)^n)."""
    m = min(rows, span)
    if distinct or m <= 1:
        return min(rows, m, draws)
    return min(rows, math.ceil(m * -math.expm1(draws * math.log1p(-1 / m))))

"""The size ladder: every size a kernel is timed at, not just the one the spec benches.

A kernel in a serving system runs at decode sizes (a few tokens) and at prefill sizes
(thousands); a rewrite that wins at 4096 rows can lose at 7. The ladder is the spec's own
`[bench]` sizes (role `bench`: the headline speedup and the share of the copy ceiling come from
these) plus points on either side, each a copy of the largest bench case with one size changed —
the *leading* size, the count of rows (tokens, groups): of the largest buffer's dimensions that are
size names of their own, the outermost one the launch grid reads (the grid counts blocks over rows,
while a row's own extent stays what the program uses: a decode keeps its hidden size); where the grid
reads none of them, the buffer's first dimension:

- rows (a buffer of two or more dimensions): `decode` at 1 and 32 rows, and `prefill` at 4096
  rows where the bench has fewer than 2048;
- a flat buffer of `n` elements: `decode` at n/4096 and n/128 (a token or a few dozen of a
  bench that is a batch of rows), and `prefill` at up to 16× where the bench moves under 64 MiB.

A point must satisfy the spec's `require` (a value is rounded up to the next multiple of 8, 16,
… that does), launch a valid grid and block, and stay under PREFILL_BYTES. Nothing here raises:
a spec the ladder cannot read is timed at its bench sizes alone. Pure: spec in, sizes out.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import exprs

if TYPE_CHECKING:
    from .harness import Spec

ROLES = ("decode", "bench", "prefill")
DECODE_ROWS = (1, 32)
PREFILL_ROWS = 4096
PREFILL_BELOW = 2048                 # bench rows under this get a prefill point
FLAT_DECODE_DIVISORS = (4096, 128)
FLAT_PREFILL_BELOW = 64 << 20        # bytes: a flat bench that moves less gets a larger point
PREFILL_BYTES = 1 << 30              # no ladder point allocates more than this (the bench may)
ROUNDINGS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


@dataclass(frozen=True)
class Rung:
    role: str                 # 'decode' | 'bench' | 'prefill'
    sizes: dict[str, int]

    @property
    def label(self) -> str:
        return describe(self.sizes, self.role)


def bench(spec: Spec) -> list[Rung]:
    """The spec's bench sizes alone, as rungs."""
    try:
        return [Rung("bench", dict(c)) for c in spec.bench_cases()]
    except Exception:  # a spec problem is the gate's to report
        return []


def ladder(spec: Spec) -> list[Rung]:
    """Decode points, the bench sizes, prefill points: smallest first within each role."""
    rungs = bench(spec)
    if not rungs:
        return rungs
    try:
        extra = _around(spec, rungs)
    except Exception:  # hints only: an expression the ladder cannot evaluate leaves the bench alone
        return rungs
    seen = [r.sizes for r in rungs]
    out = [r for r in extra if r.role == "decode" and r.sizes not in seen]
    out += rungs
    out += [r for r in extra if r.role == "prefill" and r.sizes not in seen]
    return out


def leading(spec: Spec, case: dict[str, int]) -> tuple[str, int] | None:
    """(the size name that counts the largest buffer's rows, that buffer's dimensions) at `case`:
    the outermost of its dimensions that are size names of their own and that the grid reads, else
    its first dimension when that is a size name of its own."""
    best, dims, top = None, 0, -1
    for a in spec.args.values():
        if not a.pointer:
            continue
        n = 1
        for d in spec.shape(a.name, case):
            n *= d
        if n > top:
            top, best, dims = n, a, len(a.shape)
    if best is None:
        return None
    names = set(spec.sizes) | set(spec.bench)
    plain = [d.strip() for d in best.shape if d.strip() in names]
    # the dimension the grid counts blocks over is the rows (tokens, groups); a shape whose order
    # was guessed can list the per-row extent first, which no decode shrinks
    counted = exprs.names_read(spec.grid)
    gridded = [d for d in plain if d in counted]
    if gridded:
        return gridded[0], dims
    first = best.shape[0].strip() if best.shape else ""
    if first in names:
        return first, dims
    return None


def _around(spec: Spec, rungs: list[Rung]) -> list[Rung]:
    template = max(rungs, key=lambda r: spec.elements(r.sizes)).sizes
    lead = leading(spec, template)
    if lead is None:
        return []
    name, dims = lead
    at = template[name]
    out: list[Rung] = []
    if dims >= 2:
        for rows in DECODE_ROWS:
            if rows < at:
                _add(out, spec, template, name, rows, "decode", below=at)
        if at < PREFILL_BELOW:
            _add(out, spec, template, name, PREFILL_ROWS, "prefill", below=None)
    else:
        for div in FLAT_DECODE_DIVISORS:
            v = at // div
            if v >= 1:
                _add(out, spec, template, name, v, "decode", below=at)
        if spec.bytes_moved(template) < FLAT_PREFILL_BELOW:
            scale = 16
            while scale > 1 and spec.bytes_moved(template) * scale > PREFILL_BYTES:
                scale //= 2
            if scale > 1:
                _add(out, spec, template, name, at * scale, "prefill", below=None)
    return out


def _add(out: list[Rung], spec: Spec, template: dict[str, int], name: str, value: int, role: str,
         below: int | None) -> None:
    """The first rounding of `value` that makes a valid case (and stays below `below`)."""
    for m in ROUNDINGS:
        v = -(-value // m) * m
        if below is not None and v >= below:
            return
        case = {**template, name: v}
        if _valid(spec, case):
            if all(r.sizes != case for r in out):
                out.append(Rung(role, case))
            return


def _valid(spec: Spec, case: dict[str, int]) -> bool:
    try:
        if not spec.satisfies(case):
            return False
        g, b, _ = spec.launch_dims(case)
        if min(b) < 1 or b[0] * b[1] * b[2] > 1024 or min(g) < 1 or g[0] >= 1 << 31 or g[1] > 65535 or g[2] > 65535:
            return False
        for a in spec.args.values():
            if a.pointer:
                if any(d < 0 for d in spec.shape(a.name, case)):
                    return False
            else:
                spec.scalar(a.name, case)
        total = 0
        for a in spec.args.values():
            if a.pointer:
                n = a.dtype.itemsize
                for d in spec.shape(a.name, case):
                    n *= d
                total += n
        return total <= PREFILL_BYTES
    except Exception:
        return False


def describe(sizes: dict[str, int], role: str = "") -> str:
    """'num_tokens=1, d=4096 (decode)': a size and its place on the ladder."""
    return ", ".join(f"{k}={v}" for k, v in sizes.items()) + (f" ({role})" if role else "")


def headline(roles: list[str]) -> list[int]:
    """Indices of the sizes the headline numbers come from: the bench rungs (all sizes when none
    is marked, as in results made before the ladder)."""
    idx = [i for i, r in enumerate(roles) if r in ("", "bench")]
    return idx or list(range(len(roles)))

"""Fitting an extent measured at the probes to an expression of the sizes: a product, a quotient
by a size the kernel divides by, one row per block of the grid, the polynomial of degree one in
each size, and the packet a vector access overhangs a shape by; each fit confirmed at the probes;
the order of a shape guessed where nothing fits; and two sizes whose accesses fit only probed in
order (`ordered_pair`). Separate because it is arithmetic over samples, not a reading of the
kernel."""
from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass, field

from ..model import exprs


TABLE = "V"
MAX_OVERHANG = 16   # elements a vector access may reach past a shape's end (a packet past the last aligned index)


def fit_product(values: list[tuple[dict[str, int], int]], names: list[str],
                fixed: frozenset[int] = frozenset()) -> list[str] | None:
    """A shape (a list of size names, possibly with a leading factor) whose product equals
    every measured extent: [N, C], [B, T, C], [S, B, H, D], [2 * d]; `fixed`: the values of
    dimensions fixed to a number (`head_dim` = 64), which may end it: [S, H, 64]."""
    for r in range(1, min(4, len(names)) + 1):
        for combo in itertools.combinations(names, r):
            shape = _product_fit(values, combo, fixed)
            if shape is not None:
                return shape
    # a fraction of a size (`out + row * cols / 2`: a gated activation writes half of each row)
    for r in range(1, min(4, len(names)) + 1):
        for combo in itertools.combinations(names, r):
            prod = [_prod(s[n] for n in combo) for s, _ in values]
            for d in (2, 4, 8):
                if all(p > 0 and p % d == 0 and 0 <= e - p // d < MAX_OVERHANG for (_, e), p in zip(values, prod)):
                    return list(combo[:-1]) + [f"{combo[-1]} / {d}"]
    # a size twice (`[batches, seq, seq]`: apex's upper-triangular softmax, a row per query of each key)
    for r in range(2, min(4, len(names) + 1) + 1):
        for combo in itertools.combinations_with_replacement(names, r):
            shape = _product_fit(values, combo, fixed) if len(set(combo)) < len(combo) else None
            if shape is not None:
                return shape
    if all(e == values[0][1] for _, e in values) and values[0][1] > 0:
        return [str(values[0][1])]
    return None


def _product_fit(values: list[tuple[dict[str, int], int]], combo: tuple[str, ...],
                 fixed: frozenset[int]) -> list[str] | None:
    prod = [_prod(s[n] for n in combo) for s, _ in values]
    if not all(p > 0 for p in prod):
        return None
    # A vector access reaches up to a packet past the last aligned index (`i < n` on an
    # index stepping by 8): a small overhang is that, not the shape. It may differ between
    # sizes (none where the grid's last packet ends exactly at n).
    ratios = {e // p for (_, e), p in zip(values, prod)}
    c = ratios.pop() if len(ratios) == 1 else 0
    if c < 1 or any(e - c * p >= MAX_OVERHANG for (_, e), p in zip(values, prod)):
        return None
    if c > 16:   # a fixed innermost dimension (`head_dim` a dispatch macro fixed at 64), else none
        return list(combo) + [str(c)] if c in fixed else None
    return list(combo) if c == 1 else list(combo[:-1]) + [f"{c} * {combo[-1]}"]


def quotient_fit(values: list[tuple[dict[str, int], int]], names: list[str], divisors: list[str],
                 whole: list[tuple[str, str]]) -> list[str] | None:
    """A shape whose last dimension is a quotient of two sizes, every measured extent equal to it
    times a product of at most two other sizes: one scale per block of `blocksize` elements
    (`absmax[i / blocksize]`: [cdiv(n, blocksize)]), per group of a row ([rows, cdiv(cols, group)]).
    Only divisors the kernel or its launch divide by; `m / d` where the launch divides m by d
    (`whole`: the proposal then requires `m % d == 0`), else the ceiling, which holds either way.
    The numerator may be a product of two sizes: one scale per block of a flattened matrix
    (`absmax[(row * K + col) / blocksize]`: [cdiv(M * K, blocksize)], bitsandbytes' 4-bit weights),
    tried after every single size (a row of groups, [rows, cdiv(cols, group)], is the likelier)."""
    for d in divisors:
        if any(s[d] < 1 for s, _ in values):
            continue
        for width in (1, 2):
            for num in itertools.combinations([n for n in names if n != d], width):
                others = [n for n in names if n != d and n not in num]
                for r in range(0, 3 - width + 1):
                    for outer in itertools.combinations(others, r):
                        if all(e == _prod(s[n] for n in outer) * -(-_prod(s[n] for n in num) // s[d])
                               for s, e in values):
                            m = " * ".join(num)
                            exact = width == 1 and (num[0], d) in whole and all(s[num[0]] % s[d] == 0 for s, _ in values)
                            return list(outer) + [f"{m} / {d}" if exact else f"cdiv({m}, {d})"]
    return None


def confirmed_at_probes(shape: list[str], p: str, base: dict[str, int], run, partial: bool = False,
                        launch_names: frozenset[str] = frozenset()) -> bool:
    """Whether a quotient shape still measures `p` where its divisor is 16 (many blocks, where the
    probes may have had one or two) and, for a ceiling, still covers it where the numerator is one
    past a multiple (a kernel that assumes whole groups reaches less there). `run(sizes)`: the
    accesses there. `partial`: `p` also has accesses no bound reaches (see `_shapes`' `partial`):
    the bounded ones measure it. A numerator that is a product (`M * K`) is moved off a multiple
    through a factor the launch is not sized by where there is one (`launch_names`): the grid's
    own size moved by one changes the launch's last tile, which is not what the rounding asks."""
    call = exprs.parse(shape[-1]).body
    node = call.args if isinstance(call, ast.Call) else [call.left, call.right]
    factors = [t.id for t in ast.walk(node[0]) if isinstance(t, ast.Name)]
    d = node[1].id
    m = next((f for f in reversed(factors) if f not in launch_names), factors[-1])
    points = [{**base, d: 16}] + ([{**base, d: 16, m: base[m] + 1}] if isinstance(call, ast.Call) else [])
    for i, sizes in enumerate(points):
        facts = run(sizes)
        u = facts.uses.get(p) if facts is not None else None
        if u is None or (u.unknown and not partial) or u.hi is None:
            if i == 0:
                return False
            continue   # a numerator the launch needs whole: the first point alone
        want = exprs.evaluate_int(" * ".join(f"({x})" for x in shape), sizes)
        if u.hi + 1 > want or (i == 0 and u.hi + 1 != want):
            return False
    return True


def per_block_fit(grid: list[str], values: list[tuple[dict[str, int], int]],
                  names: list[str] = ()) -> list[str] | None:
    """A shape of one row per block, each a fixed number of elements long or one size long, when
    every measured extent is that multiple of a grid dimension's size: [blocks], [blocks, 64] or
    [blocks, classes] (`input += blockIdx.x * classes` under a grid that is a guess)."""
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
        row = next((n for n in names if all(e == b * s[n] for (s, e), b in zip(values, blocks))), None)
        if row is not None:
            return [g, row]
    return None


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


MAX_POLY_NAMES = 5   # sizes an extent may depend on for a polynomial fit (2**5 evaluations)


def polynomial_fit(p: str, samples: list, free: list[str], run) -> list[str] | None:
    """The extent of `p` as a polynomial of degree at most one in each size (`(b * h * m + o + h) * s`,
    an offset made of sums: `alibi[(batch * heads * mp + head_offset + head) * seq + i]`), fitted
    exactly at every corner of a box of sizes around the first probe and checked at the other
    probes: integer coefficients only (a division or a `min` in the index fits none), no constant
    term (a fixed overhang, not a layout) and some product of sizes among the terms. The
    innermost name every term shares becomes the last dimension. `run(sizes)`: the accesses there."""
    import numpy as np
    base = dict(samples[0][0])

    def extent(sizes: dict[str, int]) -> int | None:
        facts = run(sizes)
        u = facts.uses.get(p) if facts is not None else None
        return None if u is None or u.unknown or u.hi is None else u.hi + 1

    here = extent(base)
    if here is None:
        return None
    deps = []
    for n in free:
        moved = extent({**base, n: base[n] + 16})
        if moved is None:
            return None
        if moved != here:
            deps.append(n)
    if not deps or len(deps) > MAX_POLY_NAMES:
        return None
    corners = list(itertools.product((0, 1), repeat=len(deps)))
    monomials = [tuple(n for n, bit in zip(deps, c) if bit) for c in corners]
    rows, values = [], []
    for c in corners:
        point = {**base, **{n: base[n] + 16 * bit for n, bit in zip(deps, c)}}
        e = extent(point)
        if e is None:
            return None
        rows.append([_prod(point[n] for n in m) for m in monomials])
        values.append(e)
    coef = np.linalg.solve(np.array(rows, dtype=float), np.array(values, dtype=float))
    ints = [int(round(c)) for c in coef]
    if any(abs(c - i) > 1e-6 * max(1.0, abs(c)) for c, i in zip(coef, ints)):
        return None
    terms = [(m, c) for m, c in zip(monomials, ints) if c]
    if any(not m for m, _ in terms) or all(len(m) < 2 for m, _ in terms):
        return None   # a fixed reach past the sizes (`n + 4096`: a tile's overhang) or no layout's product
    for sizes, facts in samples:   # the other probes: the same polynomial, or no fit
        u = facts.uses.get(p)
        if u is None or u.hi is None or sum(c * _prod(sizes[n] for n in m) for m, c in terms) != u.hi + 1:
            return None
    for n in free:   # and where a size is 1: a division by one (`row / num_heads`) the probes' magnitudes hide
        point = {**base, n: 1}
        e = extent(point)
        if e is not None and sum(c * _prod(point[x] for x in m) for m, c in terms) < e:
            return None
    shared = [n for n in reversed(free) if terms and all(n in m for m, _ in terms)]
    last = shared[0] if shared else None
    if last is not None:
        terms = [(tuple(x for x in m if x != last), c) for m, c in terms]

    def term(m: tuple[str, ...], c: int) -> str:
        body = " * ".join(m) if m else ""
        return body if abs(c) == 1 and body else f"{abs(c)} * {body}" if body else str(abs(c))
    ordered = sorted(terms, key=lambda t: (-len(t[0]), t[1] < 0))
    text = ""
    for m, c in ordered:
        text += (term(m, c) if not text and c > 0 else f"{' - ' if c < 0 else ' + '}{term(m, c)}" if text
                 else f"-{term(m, c)}")
    if not text or text.startswith("-"):
        return None
    return [text, last] if last is not None and text != "1" else [last] if last is not None else [text]


def bounding_polynomial(p: str, samples: list, free: list[str], run, fixed: dict[str, int]) -> list[str] | None:
    """An input whose index a size divides (exllamav2's rope: `sin[(past_len + row / num_heads) *
    head_dim + c]`) fits no polynomial, but reaches furthest where that size is 1: the polynomial
    fitted there (`polynomial_fit`, that size held at 1) is its shape if it covers what every probe
    reads. An input larger than what a kernel reads is still its input."""
    for d in [n for n in free if n != TABLE]:
        ones = [({**sizes, d: 1}, run({**sizes, d: 1})) for sizes, _ in samples]
        if any(f is None for _, f in ones):
            continue
        fit = polynomial_fit(p, ones, [n for n in free if n != d], run)
        if fit is None:
            continue
        try:
            covers = all(f.uses[p].hi is not None and _prod(
                exprs.evaluate_int(x, {**fixed, **sizes}) for x in fit) > f.uses[p].hi for sizes, f in samples)
        except exprs.ExprError:
            continue
        if covers:
            return fit
    return None


def packet_width(shape: list[str], values: list[tuple[dict[str, int], int]], given: dict[str, str]) -> int:
    """The packet width a vector access reaches past the shape's end by (`load_global<16>` of
    floats at `offset < n`: up to 3 elements, so packets of 4), as a power of two; 1 for none.
    The kernel stays in bounds only where the innermost dimension is whole packets."""
    over = 0
    for sizes, extent in values:
        probe = dict(sizes)
        try:
            for name, e in given.items():
                probe[name] = exprs.evaluate_int(e, probe)
            over = max(over, extent - exprs.evaluate_int(" * ".join(f"({d})" for d in shape), probe))
        except exprs.ExprError:
            return 1
    width = 1
    while width <= over:
        width *= 2
    return width


def same_shapes(good: dict, tried, fitted, equal: dict[str, str]) -> bool:
    """Whether every pointer fitted in `good` has the same shape under `tried`, the sizes `equal`
    names read as the sizes they were taken equal to."""
    fixed, samples = tried
    now = {p: fitted(samples, e, fixed) for p, e in extents_of(samples).items() if e is not None}
    def norm(shape):
        return sorted(x.strip() for dim in shape for d in dim.split("*") for x in equal.get(d.strip(), d.strip()).split("*"))
    return all(p in now and now[p] is not None and norm(now[p]) == norm(shape) for p, shape in good.items())


def shapes_at(tried, fitted) -> dict:
    """Each pointer's fitted shape under one solution (`solve`'s fixed sizes and samples)."""
    fixed, samples = tried
    return {p: fitted(samples, e, fixed) for p, e in extents_of(samples).items() if e is not None}


def extents_of(samples: list) -> dict[str, list[int] | None]:
    """Each pointer's extent at every probe (None where an access there is unbounded)."""
    out: dict[str, list[int] | None] = {}
    for p in samples[0][1].uses:
        uses = [f.uses[p] for _, f in samples]
        out[p] = None if any(u.unknown or u.hi is None for u in uses) else [u.hi + 1 for u in uses]
    return out


def packed_layout(fit: list[str], stepped: str, inner: str, names: list[str]) -> list[str]:
    """A product over a size the kernel walks in whole steps, its dimensions as the fit listed them
    (`[size_n, size_k / 8]`: a division put last), ordered as a packed GEMM lays them out: the words
    of packed values along the stepped size (GPTQ's `size_k / 8` rows) first, and the size the grid's
    x dimension spreads threads over (`inner`: `size_n`) innermost — where the vector accesses step,
    and the one a division that is not the stepped size's belongs to (`[groups, size_n / 8]`)."""
    *head, last = fit
    num, _, d = last.partition(" / ")
    plain = head + [num.strip()]
    if d and not d.strip().isdigit() or not all(x in names for x in plain) or len(set(plain)) < len(plain):
        return fit
    on = (stepped if stepped in plain else inner if inner in plain else plain[-1]) if d else ""
    first = [on] if on == stepped else []
    last_ = [inner] if inner in plain and inner not in first else []
    order = first + [x for x in plain if x not in first and x not in last_] + last_
    return [f"{x} / {d.strip()}" if x == on else x for x in order]


def launch_tiles(grid: list[str], names: list[str]) -> dict[str, int]:
    """size -> the tile the launch's grid splits it into (`(n + 511) / 512`, `cdiv(n, 512)`): one
    block per tile of that many elements."""
    out: dict[str, int] = {}
    for x in grid:
        try:
            tree = exprs.parse(x)
        except exprs.ExprError:
            continue
        for t in ast.walk(tree):
            num, den = (t.left, t.right) if isinstance(t, ast.BinOp) and isinstance(t.op, (ast.Div, ast.FloorDiv)) \
                else (t.args[0], t.args[1]) if isinstance(t, ast.Call) and len(t.args) == 2 else (None, None)
            used = {n.id for n in ast.walk(num) if isinstance(n, ast.Name)} & set(names) if num is not None else set()
            if isinstance(den, ast.Constant) and isinstance(den.value, int) and den.value > 1 and len(used) == 1:
                out.setdefault(used.pop(), den.value)
    return out


def whole_tile_quotient(p: str, sizes: list[dict[str, int]], names: list[str], divisors: list[str],
                        whole: list[tuple[str, str]], tiles: dict[str, int], run) -> tuple[list[str], str, int] | None:
    """A scale array read one per block of elements by every thread of the grid's last tile, those
    past the size included (bitsandbytes' kDequantizeBlockwise: `absmax[(i + threadIdx.x * 8) >>
    log2(blocksize)]` for the whole 512-element tile before its tail is cut): its reach is the
    quotient ([cdiv(n, blocksize)]) only where the size is a whole number of the launch's tiles, and
    past it otherwise. (The quotient's shape, the tiled size, its tile) measured at whole tiles, confirmed
    there with a divisor of 16; the reach past it, where the size is not, `tiled_quotient` measures.
    `run(sizes)`: the accesses at those sizes."""
    for n, t in tiles.items():
        values = []
        for s in sizes:
            at = {**s, n: -(-s[n] // t) * t}
            u = facts.uses.get(p) if (facts := run(at)) is not None else None
            if u is None or u.unknown or u.hi is None:
                break
            values.append((at, u.hi + 1))
        else:
            fit = quotient_fit(values, names, divisors, whole)
            if fit is None or n not in exprs.names(fit[-1]):
                continue
            body = exprs.parse(fit[-1]).body
            d = body.args[1] if isinstance(body, ast.Call) else body.right if isinstance(body, ast.BinOp) else None
            at = {**values[0][0], d.id: 16} if isinstance(d, ast.Name) else None
            u = facts.uses.get(p) if at is not None and (facts := run(at)) is not None else None
            if u is not None and u.hi is not None and not u.unknown and \
                    u.hi + 1 == exprs.evaluate_int(" * ".join(f"({x})" for x in fit), at):
                return fit, n, t
    return None


def tiled_quotient(fit: list[str], p: str, base: dict[str, int], tiles: dict[str, int],
                   run) -> tuple[list[str], str, int] | None:
    """A scale read one value per block of elements by every thread of the grid's last tile, those
    past the size included: a 512-element tile's `s[(i + threadIdx.x * 8) >> log2(blocksize)]` read
    before its tail is cut, or a tile of 4 rows' `s[(row * K + k) / group]` read before `row < M`
    is tested. Where the tiled size ends a partial tile the kernel reads the quotient of that size
    rounded up to whole tiles (`[cdiv(cdiv(n, 512) * 512, blocksize)]`), past the plain quotient
    `fit` — which whole tiles at the probes, or a numerator moved through another factor, never
    show. (That shape, the size, its tile) where the reach at such a size (one element into a new
    tile, the divisor 16: many blocks a tile) passes `fit` and the rounded quotient covers it;
    None where `fit` holds there or is no quotient of sizes. `run(sizes)`: the accesses there."""
    try:
        body = exprs.parse(fit[-1]).body
    except exprs.ExprError:
        return None
    num, d = (body.args[0], body.args[1]) if isinstance(body, ast.Call) and len(body.args) == 2 \
        else (body.left, body.right) if isinstance(body, ast.BinOp) and isinstance(body.op, ast.Div) else (None, None)
    if not isinstance(d, ast.Name):
        return None
    factors = [t for t in ast.walk(num) if isinstance(t, ast.Name)]
    if not all(isinstance(t, (ast.Name, ast.BinOp, ast.Load, ast.Mult)) and
               (not isinstance(t, ast.BinOp) or isinstance(t.op, ast.Mult)) for t in ast.walk(num)):
        return None   # a numerator that is a product of sizes only
    names = [t.id for t in factors]
    for n, t in tiles.items():
        if n not in names or n == d.id or n not in base:
            continue
        rounded = " * ".join(f"cdiv({x}, {t}) * {t}" if x == n else x for x in names)
        shape = fit[:-1] + [f"cdiv({rounded}, {d.id})"]
        past = False
        for whole in sorted({1, max(1, -(-base[n] // t))}):
            at = {**base, d.id: 16, n: whole * t + 1}
            u = facts.uses.get(p) if (facts := run(at)) is not None else None
            if u is None or u.unknown or u.hi is None:
                break
            reach = u.hi + 1
            if reach > exprs.evaluate_int(" * ".join(f"({x})" for x in shape), at):
                break   # reaches further still: not this
            past = past or reach > exprs.evaluate_int(" * ".join(f"({x})" for x in fit), at)
        else:
            if past:
                return shape, n, t
    return None


def fallback_order(names: list[str], grid: list[str]) -> list[str]:
    """A guessed shape's dimensions outermost first: the sizes the grid reads (the count of rows,
    tokens, groups it covers) before the others (a row's own extent, innermost in row-major order),
    each group in the kernel's parameter order."""
    read = exprs.names_read(grid)
    return [n for n in names if n in read] + [n for n in names if n not in read]


@dataclass
class Probing:
    """Pairs of sizes probed in order (`pairs`: lo below hi, their values swapped where not) and how
    many places the probe values are handed round the sizes (`turn`, of TURNS)."""
    TURNS = 5   # the probe values `roles` cycles through
    pairs: list[tuple[str, str]] = field(default_factory=list)
    turn: int = 0

    def set(self, pairs: list[tuple[str, str]], turn: int = 0) -> None:
        self.pairs, self.turn = pairs, turn

    def apply(self, sizes: dict[str, int]) -> None:
        for lo, hi in self.pairs:   # still distinct, lo now the smaller
            if sizes[lo] > sizes[hi]:
                sizes[lo], sizes[hi] = sizes[hi], sizes[lo]


def ordered_pair(result, misfits, reach, sample, solve, fitted, free: list[str], launch: set[str], probing: Probing,
                 most: int):
    """((lo, hi), the solution) where the accesses fit no shape as probed but every pointer fits
    one once `lo` is probed below `hi`: a kernel that rotates the first `d2` elements of each row
    of `d` and copies the rest (`for (i = d2 + tid; i < d; ...)`) reaches `max(d, d2)` into a row,
    no product of sizes, and `d` where `d2 <= d` — which the launcher then has to keep (TE's and
    apex's `d2 <= d` check, commented out in llm-awq's copy). Only sizes that move the misfits'
    reach are paired; the pointers that fitted keep their shape; and each of those sizes must then
    measure some pointer (probed `d <= d2`, the rows are `d2` long and `d` measures nothing: not
    that order — nor another pair whose swapped probes happen to put `d` below `d2`).
    `launch`: the sizes the grid and block are sized by; `probing`: what `sample` probes in order
    (and how far its values are handed round, to confirm a fit at other probes); `most` pairs tried.
    None (no order set) where no order fits."""
    fixed, base = result
    bad, known = misfits(result), reach(base)
    good = {p: f for p, e in extents_of(base).items() if e is not None and p not in bad
            and (f := fitted(base, e, fixed)) is not None}
    cands = [n for n in free if (m := sample({**fixed, n: f"{n} + 16"})) is not None
             and any(reach(m)[p] != known[p] for p in bad)]
    # first the pairs of sizes the launch is not sized by: a row's widths, not its counts of rows
    pairs = sorted(itertools.permutations(cands, 2), key=lambda pq: sum(n in launch for n in pq))
    for lo, hi in pairs[:most]:
        probing.set([(lo, hi)])
        tried = solve({})
        if tried is None or misfits(tried) or not same_shapes(good, tried, fitted, {}):
            continue
        measured = {n for shape in shapes_at(tried, fitted).values() if shape for d in shape for n in exprs.names(d)}
        if not set(cands) <= measured:
            continue
        # the same shapes with the probe values handed round the other sizes: the order of this
        # pair fits them, not another order its swap happened to make (`h` swapped above `d`)
        shapes = shapes_at(tried, fitted)
        if all((probing.set([(lo, hi)], by), again := solve({}))[1] is not None and not misfits(again)
               and shapes_at(again, fitted) == shapes for by in range(1, Probing.TURNS)):
            probing.set([(lo, hi)])
            return (lo, hi), tried
    probing.set([])
    return None

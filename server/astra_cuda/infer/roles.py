"""Shapes and roles of the pointer parameters from the kernel's own accesses (`access`): each
extent measured at a few size assignments (`infer_shapes` samples them once) and fitted to
sizes (`shape_fits`); read-only, written, read-modify-write; index arrays bounded by the table
they index.

Long because `infer_shapes` is one search over size assignments whose steps (sizes taken equal, a
table's size, whole steps of a size) share its probes and fits as closures: split, each would pass
that state around."""
from __future__ import annotations

import ast
import itertools
import re
from dataclasses import dataclass, field

from ..model import access, accessors, exprs
from ..model.source import Kernel
from ..model.syntax import walk
from . import guards, masks, row_order, stride_units
from .divisors import DIVISIONS, divisors as _divisors
from .distinct_indices import copies_within
from .groups import partial_groups
from .size_bounds import largest_covered
from .vector_strides import vector_strides
from .shape_fits import (TABLE, bounding_polynomial, confirmed_at_probes, extents_of, fit_product, launch_tiles,
                         Probing, ordered_pair, packed_layout, packet_width, per_block_fit, polynomial_fit, quotient_fit,
                         same_shapes, shapes_at,
                         tiled_quotient, whole_tile_quotient)
from .dead_branches import only_in_dead_branches


# ---- shapes from the kernel's accesses ----------------------------------------------------------

_PROBE_VALUES = (37, 53, 29, 41, 23)
_STEPS = (32, 64, 128)   # whole steps a size is probed at where multiples of 16 fit no shape


@dataclass
class InferredShapes:
    shapes: dict[str, list[str]]
    inout: set[str]
    read_only: set[str]     # read and never written, or not touched at all
    tables: set[str]        # integer parameters whose values index a table of TABLE rows
    uses_table: bool
    derived: dict[str, str] = field(default_factory=dict)   # size -> its value over the others (a stride)
    equal: dict[str, str] = field(default_factory=dict)     # size -> the size it was taken equal to
    packets: dict[str, int] = field(default_factory=dict)   # size -> the packet width it must be a multiple of
    vectors: dict[str, int] = field(default_factory=dict)   # pointer -> elements one access moves, where > 1
    casts: dict[str, set[str]] = field(default_factory=dict)  # pointer -> the scalar types the kernel casts it to
    partial: set[str] = field(default_factory=set)   # pointers measured by the accesses that could be bounded
    boundaries: set[str] = field(default_factory=set)   # index arrays of segment boundaries (a CSR `indptr`)
    shared_rows: bool = False   # index values summed into one row: each drawn in [1, rows / 2) (`access`)
    steps: dict[str, int] = field(default_factory=dict)   # size -> the step the kernel walks it in whole
    aligned: set[str] = field(default_factory=set)   # pointers whose address the code tests (`addr & 15`)
    congruent: dict[str, set[str]] = field(default_factory=dict)   # -> tested ones moved beside from another start
    same_start: set[str] = field(default_factory=set)   # moved by vectors only where a tested one starts
    windows: set[str] = field(default_factory=set)   # written pointers reached at a sum of sizes (inout)
    indexes: dict[str, set[str]] = field(default_factory=dict)   # of several index arrays: the pointers each moves
    # inputs a partial last tile reads past their quotient: shaped as the quotient of whole tiles (`tiled_quotient`)
    past_tiles: dict[str, tuple[str, int]] = field(default_factory=dict)   # -> (the tiled size, its tile)
    groups: dict[str, int] = field(default_factory=dict)   # size -> the group its elements are paired in (`groups`)
    bounds: dict[str, int] = field(default_factory=dict)   # size -> the most of it the instance covers (`size_bounds`)
    vector_strides: dict[str, int] = field(default_factory=dict)   # stride -> the vector width it keeps aligned
    distinct: set[str] = field(default_factory=set)   # index arrays drawn distinct: they copy within a buffer
    ordered: list[tuple[str, str]] = field(default_factory=list)   # (lo, hi): fits only where lo <= hi (`ordered_pair`)


_STRIDE_PROBE = 100003   # a stride set far from every probe size: what it moves depends on it
MAX_EQUAL_TRIES = 12     # pairs of sizes tried equal when the accesses fit no shape otherwise


def size_pairs(parts: list[str], names: list[str], ops: tuple[type, ...]) -> list[tuple[str, str]]:
    """(a, b) for each `a OP b` of two different sizes in the launch's expressions, OP one of `ops`
    (ast operator classes): `a / b` — the launcher divides a into b-sized parts —, `a - b` —
    `(max - min) / 8` blocks: the launcher has a above b."""
    out: list[tuple[str, str]] = []
    for x in parts:
        try:
            tree = exprs.parse(x)
        except exprs.ExprError:
            continue
        for n in ast.walk(tree):
            if isinstance(n, ast.BinOp) and isinstance(n.op, ops) and isinstance(n.left, ast.Name) \
                    and isinstance(n.right, ast.Name) and n.left.id in names and n.right.id in names \
                    and n.left.id != n.right.id and (n.left.id, n.right.id) not in out:
                out.append((n.left.id, n.right.id))
    return out


def body_divisions(kernel: Kernel, names: list[str], int_params: set[str] = frozenset(), grid: list[str] = (),
                   block: list[str] = (), helpers=None) -> list[tuple[str, str]]:
    """(a, b) for each `a / b` of two sizes in the kernel's body (`groupsize = size_k / groups`):
    parts the kernel takes whole, so the probes make a a multiple of b (else a group of 0 and a
    division by it leave every access after it unread). A local loaded from an index array and
    divided by a size (vLLM reshape_and_cache: `slot = slot_mapping[t]; block = slot / block_size;
    offset = slot % block_size`) splits the table's rows into whole blocks: (TABLE, b) — probed
    with a table of part of one block, the extent is the block's, not the table's. Read in the
    helpers the kernel hands its sizes to as well, a local copying the grid's size as that size
    (vLLM paged attention: `num_heads = gridDim.x; num_queries_per_kv = num_heads / num_kv_heads`)."""
    from .lengths import bodies, launch_locals
    out: list[tuple[str, str]] = []
    for depth, (body, given) in enumerate(bodies(kernel, helpers)):
        own = {**({n: n for n in names} if depth == 0 else given), **launch_locals(body, list(grid), list(block),
                                                                                    names)}
        loaded: set[str] = set()   # locals initialized by a load from an integer pointer parameter
        for n in walk(body):
            value = n.child_by_field_name("value") if n.type == "init_declarator" else None
            name = n.child_by_field_name("declarator") if value is not None else None
            if value is not None and name is not None and name.type == "identifier" \
                    and value.type == "subscript_expression" and (arr := value.child_by_field_name("argument")) \
                    is not None and ({**given, **own}.get(arr.text.decode()) in int_params):
                loaded.add(name.text.decode())
        for n in walk(body):
            if n.type != "binary_expression" or n.child_by_field_name("operator").type != "/":
                continue
            a, b = n.child_by_field_name("left"), n.child_by_field_name("right")
            if a is not None and b is not None and a.type == b.type == "identifier":
                pair = (TABLE if a.text.decode() in loaded else own.get(a.text.decode(), ""),
                        own.get(b.text.decode(), ""))
                if pair[0] != pair[1] and pair[0] in [*names, TABLE] and pair[1] in names and pair not in out:
                    out.append(pair)
    return out


DIFFERENCES = (ast.Sub,)


def _holds(require: list[str], sizes: dict[str, int]) -> bool:
    try:
        return all(bool(exprs.evaluate(r, sizes)) for r in require)
    except exprs.ExprError:
        return True


def _whole_parts(fit: list[str], longest: set[str]) -> list[str]:
    """A stride's fitted extent with its fraction of the size a lengths array reaches (`max_seq_len /
    8`, the probes' multiples of 16) rounded up: a loop over the parts of a length covers its last
    partial part too (vLLM's paged attention reads `DIVIDE_ROUND_UP(seq_len, BLOCK_SIZE)` entries of
    a block-table row). Other fractions are the program's own halves (`ldb = K / 2`), kept."""
    last = fit[-1].split(" / ") if fit else []
    if len(last) == 2 and last[0] in longest and last[1].isdigit():
        return fit[:-1] + [f"({last[0]} + {int(last[1]) - 1}) / {last[1]}"]
    return fit


def is_stride(name: str) -> bool:
    """A stride by its name: `stride` in it, or BLAS's leading dimension (`lda`, `ldc`, `ld_out`)."""
    low = name.lower()
    return "stride" in low or re.fullmatch(r"ld[a-z]|ld_\w+", low) is not None


def infer_shapes(kernel: Kernel, size_names: list[str], grid: list[str], block: list[str], elem_bytes: dict[str, int],
            int_params: set[str], constants: dict[str, int], lanes: dict[str, int] | None = None,
            derived: dict[str, str] | None = None, helpers=None, equal_sizes: bool = False,
            type_bytes=None, require: list[str] = (), table_first: bool = False,
            powers: list[str] = (), shared_rows: bool = False, macros: frozenset[str] | None = None,
            lengths: dict[str, str] | None = None, caps: dict[str, int] | None = None) -> InferredShapes | None:
    """Each pointer's shape fitted to the extents the kernel reaches. A stride parameter of a
    contiguous layout (`token_idx * query_stride + head_idx * head_stride + i`) gets its
    contiguous value: innermost first (strides are listed outermost first), each stride is the
    extent the kernel reaches with it and the outer ones zero, so rows neither overlap nor leave
    gaps. `powers`: sizes probed as powers of two (the kernel shifts by their log2). With `equal_sizes` (an alternative once a first draft faulted), when the accesses still
    fit no shape two sizes are tried equal (a kernel that rotates the first `rot_dim` elements of
    each `head_size` row fits [.., head_size] when they are)."""
    given = dict(locals())   # the arguments, to infer again under a bound (`size_bounds`)
    names = size_names + [TABLE]
    pointers = accessors.pointer_names(kernel, constants)   # a tensor accessor's dimensions apart

    divided = size_pairs(grid + block, names, DIVISIONS)
    divided += [d for d in body_divisions(kernel, names, int_params, grid, block, helpers) if d not in divided]
    differences = size_pairs(grid + block, names, DIFFERENCES)

    whole: dict[str, int] = {}   # size -> the step it is probed a multiple of
    # ids the kernel returns on at a size and above (`if (id >= vocab_size) return;`) reach the rows below
    # the smaller of that size and the table: the table probed above it, or the reach is a min() no shape fits
    served = {b for p in int_params if (b := guards.early_return_bound(kernel, p, set(size_names))) is not None}
    capped: dict[str, int] = dict(caps or {})   # size -> the largest value it is probed at (`size_bounds`)
    probing = Probing()   # pairs of sizes probed in order (`ordered_pair`)

    def table_above(sizes: dict[str, int]) -> None:
        sizes[TABLE] = 2 * sum(v for n, v in sizes.items() if n != TABLE) + 16

    def sample(extra: dict[str, str]) -> list | None:
        samples = []
        for k in range(3):
            # multiples of 16: a row split into packets of 8 (`hidden / 8`) is then read whole; the
            # sixth size on is one more than the size five before it, so no two sizes are equal
            sizes = {n: (_PROBE_VALUES[(i + k + probing.turn) % 5] + i // 5) * (k + 2) * 16 for i, n in enumerate(names)}
            for num, den in divided:   # `hidden_dim / heads` threads: a whole multiple, as the launcher has it
                sizes[num] *= sizes[den] // 16
            for hi, lo in differences:   # `(max - min) / 8` blocks: the first above the second
                sizes[hi] += sizes[lo]
            if table_first:   # the table larger than every other size (multiplied above): what its indices reach shows
                table_above(sizes)
            for n in powers:   # a size the kernel shifts by the log2 of: the power of two at or below its probe
                if n in sizes:
                    sizes[n] = 1 << (sizes[n].bit_length() - 1)
            for n in names:   # a launcher's bound on one size (`cdiv(dim, 2048) == 1`): probed within it
                own = [r for r in require if exprs.names(r) == {n}] + [f"{n} <= {capped.get(n)}"] * (n in capped)
                v = sizes[n]
                while v > 16 and not _holds(own, {n: v}):
                    v = v // 32 * 16
                if _holds(own, {n: v}):   # an upper bound (a `% 8 != 0` no probe meets leaves it be)
                    sizes[n] = v
                else:   # a bound below 16 (`seq_length * 4 <= 8`: the instance of the launcher's first
                    # branch): the values within it, a different one per sample where there are several
                    small = [u for u in range(min(v, 16), 0, -1) if _holds(own, {n: u})]
                    if small:
                        sizes[n] = small[k % len(small)]
            for n, m in whole.items():   # whole steps of `m` (see `steps` below), as is every part of it a
                sizes[n] *= m            # division by another size gives (GPTQ's groups of `size_k / groups`)
            probing.apply(sizes)
            if any(sizes[TABLE] <= sizes.get(b, 0) for b in served):
                table_above(sizes)
            facts = at(sizes, extra)
            if facts is None:
                return None
            samples.append((sizes, facts))
        return samples

    def at(sizes: dict[str, int], extra: dict[str, str], ints: set[str] = int_params):
        """The kernel's accesses at one assignment of the sizes (None where the launch is invalid);
        `ints`: the integer pointers whose loads are taken as indices below the table's size."""
        try:
            probe = dict(sizes)   # the parameters derived from the sizes (a row stride) take their values
            for name, e in {**(derived or {}), **extra}.items():
                probe[name] = exprs.evaluate_int(e, probe)
            g = [exprs.evaluate_int(x, probe) for x in grid]
            b = [exprs.evaluate_int(x, probe) for x in block]
        except exprs.ExprError:
            return None
        g, b = (g + [1, 1, 1])[:3], (b + [1, 1, 1])[:3]
        if min(g + b) < 1:
            return None
        return access.analyse(kernel, probe, g, b, elem_bytes, ints, probe[TABLE], constants, lanes,
                              helpers, type_bytes, shared_rows, macros,
                              {p: probe[s] for p, s in (lengths or {}).items() if s in probe})

    extents = extents_of

    def fitted(samples: list, extent: list[int], fixed: dict[str, str]) -> list[str] | None:
        free = [n for n in names if n not in fixed and n not in (derived or {})]
        # a dimension fixed to a number: a launch's (`head_dim` = 64) or a stride's (`k_stride_1` = 192)
        numbers = frozenset(int(v) for v in [*(derived or {}).values(), *fixed.values()] if v.strip().isdigit())
        measured = [(s, e) for (s, _), e in zip(samples, extent)]
        # the instance's numbers only where no shape of sizes fits: FasterTransformer topk_stage1's
        # `8 * max_top_k` entries a row, not its BLOCK_SIZE 128 that equals them at the probes
        return fit_product(measured, free, numbers) or (fit_product(measured, free, numbers | by_instance) if by_instance else None)

    # an innermost dimension the instance fixes (DeepSpeed attn_softmax's `blockStride` rows of a block, 64,
    # each of float4s: 256 floats), a template argument's value times a vector's width
    by_instance = frozenset(v * w for n in kernel.template_param_names if isinstance(v := constants.get(n), int)
                            and v > 1 for w in (1, 2, 4, 8, 16))
    # a stride the launch's grid or block is sized by is more than a stride (a guessed grid): kept free
    launch_names = {n for x in grid + block for n in exprs.names(x)}
    # (or by its use: a size only ever a factor of an offset, `layer * layer_dim`, whatever its name)
    by_use = set(masks.factors_only(kernel, helpers or {}, size_names))
    strides = [n for n in size_names if (is_stride(n) or n in by_use) and n not in (derived or {})
               and n not in launch_names]

    def solve(equal: dict[str, str]) -> tuple[dict[str, str], list] | None:
        fixed = {**equal, **{s: "0" for s in strides}}
        base = sample(fixed)
        for s in reversed(strides):
            moved = sample({**fixed, s: str(_STRIDE_PROBE)})
            if base is None or moved is None:
                return None
            before, after = extents(base), extents(moved)
            deps = [p for p in pointers if before[p] != after[p]]
            # the widest row when several pointers share the stride (query's and key's heads)
            rows = [before[p] for p in deps]
            widest = max(rows, key=lambda r: r[0]) if rows and all(r is not None for r in rows) else None
            fit = fitted(base, widest, fixed) if widest is not None else None
            if fit is None or not all(all(a <= b for a, b in zip(r, widest)) for r in rows):
                del fixed[s]   # unused, or not a contiguous layout's stride: it stays a free size
            else:
                # counted in rows of a size that scales its sum (`(i + b * s) * h`): the extent over h
                h = stride_units.unit(kernel, s, size_names)
                if h is not None and h in fit:
                    fit = list(fit)
                    fit.remove(h)
                fixed[s] = " * ".join(_whole_parts(fit, set((lengths or {}).values()))) or "1"
            base = sample(fixed)
        return (fixed, base) if base is not None else None

    def unfit(result) -> int:
        fixed, samples = result
        return sum(1 for p, e in extents(samples).items() if e is not None and fitted(samples, e, fixed) is None)

    result = solve({})
    if result is None:
        return None
    equal: dict[str, str] = {}
    if equal_sizes and unfit(result):
        # the sizes an unfitted pointer's extent depends on; pairs of them tried equal
        fixed, base = result
        known = extents(base)
        bad = [p for p, e in known.items() if e is not None and fitted(base, e, fixed) is None]
        cands = []
        for n in names:
            if n == TABLE or n in fixed or n in (derived or {}) or is_stride(n):
                continue
            moved = sample({**fixed, n: f"{n} + 16"})
            if moved is not None and any(extents(moved)[p] != known[p] for p in bad):
                cands.append(n)
        good = {p: fitted(base, e, fixed) for p, e in known.items() if e is not None and p not in bad}
        free = [n for n in names if n != TABLE and n not in fixed and n not in (derived or {}) and not is_stride(n)]
        # a count of rows that is the product of two others (`token_num` tokens of `batch_size`
        # sequences of `seq_len`, written to [batch, heads, seq, d]) after two sizes equal; the
        # count the launch sizes its grid by first (it is the work, the others the output's layout)
        # (any size: a count the output's extent moves with only at whole multiples is no candidate)
        counts = sorted(free, key=lambda n: n not in launch_names)
        # a size taken equal to a width the launch fixes (`rotary_dim` rotating the first elements
        # of a row of HEAD_DIM = 64, its reads past the row's end otherwise) after two sizes equal
        widths = sorted({int(v) for v in [*(derived or {}).values(), *fixed.values()] if v.strip().isdigit()} - {0})
        tries = [(a, b) for a, b in itertools.combinations(cands, 2)][:MAX_EQUAL_TRIES] + \
            [(a, str(w)) for a in cands for w in widths][:MAX_EQUAL_TRIES] + \
            [(a, f"{b} * {c}") for a in counts for b, c in itertools.combinations([n for n in free if n != a], 2)
             ][:MAX_EQUAL_TRIES]
        for a, b in tries:
            tried = solve({a: b})
            # taken only where every pointer then fits and those that fitted before keep their shape
            if tried is not None and not unfit(tried) and same_shapes(good, tried, fitted, {a: b}):
                result, equal = tried, {a: b}
                break
    def reach(samples: list) -> dict[str, list[int] | None]:   # an unbounded access aside (see `partial`)
        return {p: [f.uses[p].hi + 1 for _, f in samples] if all(f.uses[p].hi is not None for _, f in samples)
                else None for p in pointers}

    def shaped(samples: list, extent: list[int], fixed: dict[str, str]) -> bool:
        free = [n for n in size_names if n not in fixed and n not in (derived or {})]
        return fitted(samples, extent, fixed) is not None or \
            per_block_fit(grid, [(s, e) for (s, _), e in zip(samples, extent)], free) is not None

    def misfits(result) -> list[str]:
        fixed, samples = result
        return [p for p, e in reach(samples).items() if e is not None and not shaped(samples, e, fixed)]

    if not equal and misfits(result):
        # an index loaded from the kernel's own input reaching past a row (`input[labels[row]]` after
        # `input += row * classes`): it indexes within a row, so the table is that row's size
        fixed, base = result
        known, bad = reach(base), misfits(result)
        moved = sample({**fixed, TABLE: f"{TABLE} + 16"})
        if moved is not None and any(reach(moved)[p] != known[p] for p in bad):
            good = {p: fitted(base, e, fixed) for p, e in extents(base).items()
                    if e is not None and p not in bad and fitted(base, e, fixed) is not None}
            # those the table does not move stay as they were (GPTQ's packed weights beside its
            # `a_ptr[b_q_perm[k]]`): the table's size is decided by those it moves
            aside = {p for p in bad if reach(moved)[p] == known[p]}
            fits = []   # (probe value, size, result) of each size the table may equal
            for n in size_names:
                if n in fixed or n in (derived or {}) or is_stride(n):
                    continue
                tried = solve({TABLE: n})
                if tried is not None and set(misfits(tried)) <= aside and \
                        same_shapes(good, tried, fitted, {TABLE: n}):
                    fits.append((tried[1][0][0][n], n, tried))
            if fits:
                # the first that fits (`probs[indices[b] * d + i]`: rows of `batch_size`, not `d`), unless
                # another access reaches the whole row whatever the table (`perm ? a[perm[k]] : a[k]`):
                # then smaller sizes fit with the same shapes, and the largest is the row it addresses
                first = shapes_at(fits[0][2], fitted)
                _, n, result = max((f for f in fits if shapes_at(f[2], fitted) == first), key=lambda f: f[0])
                equal = {TABLE: n}
    if not equal and misfits(result) and (pair := ordered_pair(result, misfits, reach, sample, solve, fitted, [
            n for n in size_names if n not in result[0] and n not in (derived or {}) and not is_stride(n)],
            launch_names, probing, MAX_EQUAL_TRIES)) is not None:
        result = pair[1]
    steps: dict[str, int] = {}
    if misfits(result):
        # a kernel that walks a size in whole steps (GPTQ's `while (k < end_k) { four rows of packed
        # weights; k += 32; }`, eight 4-bit values a word) reaches a whole step past the size where it
        # is no multiple of the step, which multiples of 16 are not: probed at whole steps of one size
        # that moves them, the misfits fit (the others as they were) — that size must be whole steps
        fixed, base = result
        bad, known = misfits(result), reach(base)
        good = {p: f for p, e in extents(base).items() if e is not None and p not in bad
                and (f := fitted(base, e, fixed)) is not None}
        for n in [n for n in size_names if n not in fixed and n not in (derived or {}) and not is_stride(n)]:
            moved = sample({**fixed, n: f"{n} + 16"})
            if moved is None or all(reach(moved)[p] == known[p] for p in bad):
                continue
            for m in _STEPS:
                whole[n] = m
                tried = solve(equal)
                if tried is not None and not misfits(tried) and same_shapes(good, tried, fitted, equal):
                    result, steps = tried, {n: m}
                    break
                del whole[n]
            if steps:
                break
    fixed, samples = result
    shapes: dict[str, list[str]] = {}
    packets: dict[str, int] = {}
    inner = [n for n in exprs.names(grid[0]) if n in size_names] if grid and steps else []   # the x threads' size
    dead = only_in_dead_branches(kernel, pointers, constants)
    read_only = {n for n, u in samples[-1][1].uses.items() if not u.written}
    seen: dict[tuple, object] = {}   # the polynomial fits of several inputs evaluate the same points
    windows: set[str] = set()   # written pointers whose extent is a sum of sizes (see below)
    past_tiles: dict[str, tuple[str, int]] = {}   # see `InferredShapes.past_tiles`

    def at_fixed(sizes: dict[str, int]):
        key = tuple(sorted(sizes.items()))
        if key not in seen:
            seen[key] = at(sizes, fixed)
        return seen[key]
    for p, extent in extents(samples).items():
        if p in dead and all(not f.uses[p].read and not f.uses[p].written for _, f in samples):
            shapes[p] = ["1"]   # named only where this instance never goes (`if (STOCHASTIC)`, false): one element
            continue
        if extent is None:
            continue
        fit = fitted(samples, extent, fixed)
        if fit is None:   # per-block partial results (`out[blockIdx.x * BINS + tid]`): the grid's extent times theirs
            fit = per_block_fit(grid, [(s, e) for (s, _), e in zip(samples, extent)],
                                [n for n in size_names if n not in fixed and n not in (derived or {})])
        if fit is None and (p in read_only or not samples[-1][1].uses[p].read):   # reached at a sum of sizes (an
            # input, or an output only stored to; one read and written is left to equal sizes): its polynomial
            fit = polynomial_fit(p, samples, [n for n in names if n not in fixed and n not in (derived or {})],
                                 at_fixed)
            if fit is not None and p not in read_only:   # written there: a window of the caller's buffer (layers
                windows.add(p)   # `start_layer_id` on of sgl-kernel's KV cache), its rest kept — inout, not filled
        if fit is None:   # a quotient (one scale per block of elements), confirmed where the divisor is small
            free = [n for n in names if n not in fixed and n not in (derived or {})]
            fit = quotient_fit([(s, e) for (s, _), e in zip(samples, extent)], free,
                               [d for d in _divisors(kernel, grid + block, names, helpers) if d in free],
                               size_pairs(grid + block, names, DIVISIONS))
            if fit is not None and not confirmed_at_probes(fit, p, samples[0][0], at_fixed,
                                                 launch_names=frozenset(launch_names)):
                fit = None
        if fit is None and p in read_only:   # a quotient at whole tiles of the grid, read past it by the last tile
            tiled = whole_tile_quotient(p, [s for s, _ in samples], [n for n in names if n not in fixed and n not in
                                        (derived or {})], [d for d in _divisors(kernel, grid + block, names, helpers)],
                                        size_pairs(grid + block, names, DIVISIONS), launch_tiles(grid, size_names),
                                        at_fixed)
            fit = tiled[0] if tiled is not None else None
        if fit is not None and p in read_only and (tiled := tiled_quotient(fit, p, samples[0][0], launch_tiles(
                grid, size_names), at_fixed)) is not None:   # the last tile's reach: whole tiles of the quotient
            fit, past_tiles[p] = tiled[0], tiled[1:]
        if fit is None and p in read_only:   # an input one a size divides, no quotient, bounded by it where that size is 1
            fit = bounding_polynomial(p, samples, [n for n in names if n not in fixed and n not in (derived or {})],
                                      at_fixed, {k: int(v) for k, v in fixed.items() if v.strip().isdigit()})
        if fit is not None and all(f.uses[p].boundaries or f.uses[p].packet == 1 and f.uses[p].written
                                     for _, f in samples) \
                and len(fit) == 1 and all(
                e == int(exprs.evaluate(fit[0], {**s, **{k: int(v) for k, v in fixed.items() if v.strip().isdigit()}})) + 1
                for (s, _), e in zip(samples, extent)):
            # the boundaries of n segments: n + 1 of them; an output one past n reached by scalar
            # stores (`cumsum[num_experts] = total` after one entry per expert) is no vector's overhang
            # either (an input read one past may be a quotient's rounding at the probes, which the
            # launcher's `require` of whole groups rules out)
            fit = [f"{fit[0]} + 1"]
        if fit is not None and steps:
            fit = packed_layout(fit, next(iter(steps)), inner[0] if len(inner) == 1 else "", names)
        if fit is not None:   # a row as long as a stride rounded up (`max_num_blocks_per_seq`) is that long
            fit = [w if (w := _whole_parts([d], set((lengths or {}).values()))[0]) in fixed.values() else d for d in fit]
            fit = row_order.rows_first(kernel, p, fit, size_names)   # [A, B] fits as [B, A]: the offsets decide
            shapes[p] = fit
            width = min(packet_width(fit, [(s, e) for (s, _), e in zip(samples, extent)], {**fixed, **(derived or {})}),
                        max(f.uses[p].packet for _, f in samples))
            last = fit[-1].strip()
            # code that aligns its vectors itself (a prefix up to the boundary an address test finds, known
            # only as a range) seems to overhang: `requirements.vector_requirements` says what it needs
            aligning = any(f.uses[q].address_tested for _, f in samples for q in f.uses)
            if width > 1 and last in size_names and last not in fixed and last not in (derived or {}) and not aligning:
                packets[last] = max(packets.get(last, 1), width)
    partial: set[str] = set()
    for p in pointers:   # some access unbounded (`tmp[total.p]`, an index a reduction returns): the
        # extent its other accesses reach, rather than no evidence at all
        uses = [f.uses[p] for _, f in samples]
        if p not in shapes and all(u.unknown and u.hi is not None for u in uses):
            extent = [u.hi + 1 for u in uses]
            fit = fitted(samples, extent, fixed) or per_block_fit(
                grid, [(s, e) for (s, _), e in zip(samples, extent)],
                [n for n in size_names if n not in fixed and n not in (derived or {})])
            if fit is None or len(fit) == 1 and fit[0].isdigit():
                # one entry per block of elements the kernel fills up to (`expert_ids[i]`, i <
                # cdiv(max_tokens, block_size), besides `expert_ids[i / block_size]` at data-made i),
                # one at probes whose blocks are larger than the numerator: confirmed at small blocks
                free = [n for n in names if n not in fixed and n not in (derived or {})]
                quotient = quotient_fit([(s, e) for (s, _), e in zip(samples, extent)], free,
                                        [d for d in _divisors(kernel, grid + block, names, helpers) if d in free],
                                        size_pairs(grid + block, names, DIVISIONS))
                if quotient is not None and confirmed_at_probes(quotient, p, samples[0][0], at_fixed, partial=True,
                                                        launch_names=frozenset(launch_names)):
                    fit = quotient
            if fit is not None and steps:
                fit = packed_layout(fit, next(iter(steps)), inner[0] if len(inner) == 1 else "", names)
            if fit is not None:
                shapes[p], partial = fit, partial | {p}
    last = samples[-1][1].uses
    uses_table = any(TABLE in " ".join(v) for v in shapes.values())
    if not uses_table and not table_first and not equal and any(
            u.table_loads and not u.written for n, u in last.items() if n in int_params):
        # indices read but no shape measured by them: at the probe sizes another bound reached further
        # (`row = indices ? indices[bx] : bx`) — probed again with the table the largest size, the
        # arrays they index are that many rows and the indices are drawn below it
        again = infer_shapes(kernel, size_names, grid, block, elem_bytes, int_params, constants, lanes, derived, helpers,
                        equal_sizes, type_bytes, require, table_first=True, powers=powers, macros=macros,
                        lengths=lengths)
        if again is not None and (again.uses_table or TABLE in again.equal):   # a table as large as a row
            return again
        # still none: a row picked by a sum of loaded values (DeepSpeed's `seq.start_idx + seq.n_tokens
        # - 1`) reaches twice the table; each drawn below half of it (and from 1, for the `- 1`)
        # the row stays within it
        again = infer_shapes(kernel, size_names, grid, block, elem_bytes, int_params, constants, lanes, derived,
                             helpers, equal_sizes, type_bytes, require, table_first=True, powers=powers,
                             shared_rows=True, macros=macros, lengths=lengths)
        if again is not None and again.uses_table:
            return again
    tables = {n for n, u in last.items() if u.table_loads} if uses_table or TABLE in equal else set()
    indexes: dict[str, set[str]] = {}
    distinct: set[str] = set()   # index arrays copying within one buffer (`distinct_indices`)
    for p in sorted(tables):
        alone = at(samples[-1][0], fixed, int_params - {p})
        distinct |= {p} if copies_within(last, alone.uses if alone is not None else None, p) else set()
        if len(tables) == 1:
            continue
        # an integer input whose values index nothing (GPTQ's packed weights beside its permutation
        # `b_q_perm`; FlashInfer rotary's `offsets`, a position): every other reach the same with its
        # loads unknown — not drawn as indices
        moves = {q for q, u in last.items() if q != p and (alone.uses[q].hi, alone.uses[q].unknown) != (u.hi, u.unknown)}\
            if alone is not None else None
        indexes.update({p: moves} if moves else {})
        tables -= {p} if moves == set() else set()
    free = [n for n in size_names if n not in {**fixed, **(derived or {})} and not is_stride(n)]
    if (bad := [p for p, e in reach(samples).items() if e is not None and p not in shapes]) and not caps and not steps:
        # pointers of no shape at all: a size the instance covers only up to a bound (`size_bounds`)?
        moving = [n for n in free if (m := sample({**fixed, n: f"{n} + 16"})) is not None and reach(m) != reach(samples)]
        bounds = largest_covered(samples, moving, bad, lambda n, b: (capped.clear(), capped.update({n: b}), solve(equal))[2],
                                 lambda tried: shapes_at(tried, fitted), at)
        again = infer_shapes(**{**given, "caps": bounds}) if bounds else None   # every fallback under the bound
        # a bound that leaves a pointer one fixed extent (no size in its shape: one element read at the
        # start of the only block left) says nothing of how far it reaches: no bound then
        if again is not None and all(p in again.shapes and any(exprs.names(d) for d in again.shapes[p]) for p in bad):
            again.bounds = bounds
            return again
    vectors = {n: u.packet for n, u in last.items() if u.packet > 1}
    aligned_by_code = {n for n, u in last.items() if (u.address_tested or u.same_start) and not u.congruent}
    strides_kept = vector_strides([s for s in strides if s not in fixed], vectors, aligned_by_code, extents(samples),
                                  lambda s: extents(m) if (m := sample({**fixed, s: str(_STRIDE_PROBE)})) else None)
    return InferredShapes(shapes, {n for n, u in last.items() if u.read and u.written} | windows,
                   # a pointer never touched (`residual` where has_residual is false) is no output either
                   {n for n, u in last.items() if not u.written},
                   tables, uses_table,
                   {k: v for k, v in fixed.items() if k not in equal}, equal, packets,
                   vectors,
                   {n: set(u.casts) for n, u in last.items() if u.casts}, partial,
                   {n for n, u in last.items() if u.boundaries}, shared_rows, steps,
                   {n for n, u in last.items() if u.address_tested},
                   {n: set(u.congruent) for n, u in last.items() if u.congruent},
                   {n for n, u in last.items() if u.same_start}, windows, indexes, past_tiles,
                   partial_groups(samples, shapes, free, {**(derived or {}), **fixed}, at_fixed),   # pairs by residue
                   vector_strides=strides_kept, distinct=distinct & tables, ordered=list(probing.pairs))


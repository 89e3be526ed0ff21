"""The `require` lines of a draft that its launch and accesses imply: a block within the kernel's
`__launch_bounds__`, whole chunks per thread, vector widths that keep rows aligned, and the
spec-expression helpers they are written with. Separate because they read the assembled
launch and shapes, not the tree."""
from __future__ import annotations

import ast

from tree_sitter import Node

from ..model import compiled_branches, exprs, source
from ..model.source import Kernel
from ..model.syntax import walk as _walk
from . import lengths
from .launch_callers import value_of
from .roles import DIFFERENCES, DIVISIONS, InferredShapes, size_pairs
from .sizes import clamped_block_requires


def within_launch_bounds(kernel: Kernel, block: list[str], values: dict[str, str], notes: list[str]) -> list[str]:
    """A block no larger than the kernel's `__launch_bounds__` (the launcher keeps to it)."""
    if not kernel.launch_bounds or "(" not in kernel.launch_bounds:
        return block
    first = exprs.split_top_level(kernel.launch_bounds.split("(", 1)[1].rsplit(")", 1)[0])[0]
    bound = value_of(first, values)
    if bound is None or bound < 1:
        return block
    try:
        fixed = [exprs.evaluate_int(b, {}) for b in block] if all(not exprs.names(b) for b in block) else None
    except exprs.ExprError:
        fixed = None
    if fixed is not None:
        while prod(fixed) > bound and fixed[0] > 1:
            fixed[0] //= 2
        out = [str(v) for v in fixed]
    elif len(block) == 1:
        out = [f"min({block[0]}, {bound})"]
    else:
        return block
    if out != block:
        notes.append(f"block kept within the kernel's {kernel.launch_bounds}: {', '.join(out)}")
    return out


def prod(xs: list[int]) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


def holds_true(r: str) -> bool:
    try:
        return bool(exprs.evaluate(r, {}))
    except exprs.ExprError:
        return False


def substituted(parts: list[str] | None, values: dict[str, str]) -> list[str] | None:
    """Spec expressions with some names replaced by expressions of their own."""
    if parts is None or not values:
        return parts
    import ast

    class _Sub(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.AST:
            return ast.parse(f"({values[node.id]})", mode="eval").body if node.id in values else node
    return [ast.unparse(_Sub().visit(exprs.parse(x).body)) if x else x for x in parts]


def over_sizes(values: dict[str, str]) -> dict[str, str]:
    """Values the launcher computes, each written over the sizes: one that names another
    (`rows_per_block = 1024 / effective_kv`, effective_kv itself computed) with that one's value."""
    for _ in range(len(values)):
        values = {k: (substituted([v], {d: e for d, e in values.items() if d != k}) or [v])[0] or v
                  for k, v in values.items()}
    return values


def launch_requirements(grid: list[str], block: list[str], found: InferredShapes | None, size_names: list[str],
                        kernel: Kernel, values: dict[str, int] | None = None,
                        helpers: dict[str, Node] | None = None) -> list[str]:
    """`n % 8 == 0` when the launch gives each thread a fixed chunk (`cdiv(n, 256 * 8)`) or
    divides a size by a constant (`width / 32` blocks): the kernel then handles no tail, as its
    launcher assumes; `E <= C` for a block of `min(E, C)` threads neither the kernel nor a helper
    it calls strides past (`helpers`)."""
    out = []
    for g in grid:   # `size / 32` blocks of a tile: the launcher assumes whole tiles
        node = source.parse_expression(g)
        if node is not None and node.type == "binary_expression" and node.child_by_field_name("operator").type == "/":
            a, b = node.child_by_field_name("left"), node.child_by_field_name("right")
            if a.type == "identifier" and a.text.decode() in size_names and b.type == "number_literal" \
                    and b.text.decode().isdigit() and int(b.text.decode()) > 1:
                out.append(f"{a.text.decode()} % {b.text.decode()} == 0")
    # `hidden_dim / heads` threads: the launcher's heads divide the row
    out += [r for r in dict.fromkeys(f"{a} % {b} == 0" for a, b in size_pairs(grid + block, size_names, DIVISIONS)) if r not in out]
    # `(max - min) / 8` blocks: the launcher has the first above the second
    out += [r for r in dict.fromkeys(f"{a} > {b}" for a, b in size_pairs(grid + block, size_names, DIFFERENCES)) if r not in out]
    # a loop over `size / 8` packets handles no tail: the size must be a multiple of 8
    body = source.parser().parse(kernel.text.encode()).root_node
    dead = compiled_branches.not_compiled(body, values or {})   # `if constexpr (use_vec)` of an instance without it
    for n in _walk(body):
        if n.type == "for_statement" and n.child_by_field_name("condition") is not None \
                and not any(a <= n.start_byte < b for a, b in dead):
            for d in _walk(n.child_by_field_name("condition")):
                if d.type == "binary_expression" and d.child_by_field_name("operator").type == "/":
                    a, b = d.child_by_field_name("left"), d.child_by_field_name("right")
                    if a is not None and b is not None and a.type == "identifier" and a.text.decode() in size_names \
                            and b.type == "number_literal" and b.text.decode().isdigit() and int(b.text.decode()) > 1:
                        req = f"{a.text.decode()} % {b.text.decode()} == 0"
                        if req not in out:
                            out.append(req)
    # warps per block (`blockDim.x >> 5`, `blockDim.x / WARP_SIZE`): a block under a warp has none,
    # and a loop stepping by them (`head += warps_per_block`) never ends — the launcher's block
    # is at least a warp (vLLM reshape_and_cache_flash: `min(num_heads * head_size, 512)` threads)
    if block and not block[0].strip().isdigit() and _counts_warps(body, values or {}) \
            and (r := f"{block[0]} >= 32") not in out:
        out.append(r)
    out += [r for r in clamped_block_requires(block, lengths.reached_text(kernel, helpers), size_names, grid) if r not in out]
    if "gridDim" in kernel.text:   # a grid-stride loop takes any size
        return out
    for g in grid:
        node = source.parse_expression(g)
        if node is None or node.type != "call_expression":
            continue
        fn = node.child_by_field_name("function")
        args = node.child_by_field_name("arguments")
        if fn is None or fn.text.decode() != "cdiv" or args is None or len(args.named_children) != 2:
            continue
        total, per = (a.text.decode() for a in args.named_children)
        if total not in size_names:
            continue
        factors = [f.strip() for f in per.split("*")]
        chunk = [f for f in factors if f.isdigit() and f not in block and int(f) > 1]
        if len(factors) > 1 and chunk:
            out.append(f"{total} % {chunk[-1]} == 0")
    return out


def _counts_warps(body, values: dict[str, int]) -> bool:
    """Whether the kernel divides `blockDim.x` into warps (`>> 5`, `/ 32`, `/ WARP_SIZE`)."""
    for n in _walk(body):
        if n.type != "binary_expression" or n.child_by_field_name("operator").type not in (">>", "/"):
            continue
        a, b = n.child_by_field_name("left"), n.child_by_field_name("right")
        if a is None or b is None or a.text.decode().replace(" ", "") != "blockDim.x":
            continue
        word = b.text.decode().strip()
        number = int(word) if word.isdigit() else values.get(word, 32 if word in ("warpSize", "WARP_SIZE") else 0)
        if number == (5 if n.child_by_field_name("operator").type == ">>" else 32):
            return True
    return False


def vector_requirements(found: InferredShapes | None, buffers: dict[str, tuple[list[str], int, bool]],
                        size_names: list[str], require: list[str], notes: list[str]) -> list[str]:
    """`hidden % 4 == 0` where the kernel moves a buffer W elements at a time (a `uint4` or
    `vec_n_t<float, 4>` over floats): its rows then start on a W-element boundary, as a vector
    access needs on a GPU (else a misaligned-address fault) and as the launcher that picks the
    width arranges; a vector loop also leaves a partial vector's tail unwritten.
    A pointer whose address the code tests itself (`addr & (WIDTH - 1)`, a scalar prefix up to the
    next boundary) needs nothing of the sizes, nor one an aligning helper moves at exactly its
    offsets (`in + row * n`, `out + row * n`). One it moves from another start (vLLM's
    vectorize_with_alignment storing a cache slot beside a token's row) runs only where the two
    offsets are congruent modulo the width, which whole vectors per row of both keep."""
    import math
    if found is None:
        return []
    widths: dict[str, int] = {}      # size -> the width every vector access over it needs (their lcm)
    names: dict[str, list[str]] = {}
    for name, width in found.vectors.items():
        if name not in found.congruent and (name in found.aligned or name in found.same_start):
            continue   # aligned by the code itself, or at the very offsets it aligns
        shape = buffers.get(name, ([], 0, False))[0]
        last = shape[-1].strip() if shape else ""
        if last not in size_names or any(r.replace(" ", "").startswith(f"{last}%") for r in require):
            continue
        widths[last] = math.lcm(widths.get(last, 1), width)
        names.setdefault(last, []).append(name)
    out = [f"{last} % {w} == 0" for last, w in widths.items()]
    for req, last in zip(out, widths):
        pairs = [(n, sorted(found.congruent[n])) for n in names[last] if n in found.congruent and n not in found.aligned]
        why = "".join(f"; the code tests only {', '.join(f'`{t}`' for t in tested)}'s address and moves `{n}` by "
                      f"vectors at the same offsets from another start: the two must be congruent modulo the width"
                      for n, tested in pairs)
        notes.append(f"{', '.join(f'`{n}`' for n in names[last])} moved {widths[last]} elements at a time (vector "
                     f"accesses): `{req}` keeps each row aligned to a vector, as a GPU needs{why}"
                     + (" — required" if pairs else " — CHECK whether the kernel handles a tail"))
    for stride, w in found.vector_strides.items():
        if stride in size_names and stride not in widths and (r := f"{stride} % {w} == 0") not in require:
            out.append(r)
            notes.append(f"`{r}`: `{stride}` moves a buffer the kernel reads or writes {w} elements at a time "
                         f"(vector accesses): only a whole number of vectors keeps each one on its boundary, as a "
                         f"GPU needs (else a misaligned-address fault) — required")
    return out


def whole_steps(found: InferredShapes | None, size_names: list[str], require: list[str], notes: list[str]) -> None:
    """A size the kernel walks in whole steps (`roles`: its accesses fit a shape only there) is
    required a multiple of the step: a partial step reads a whole one past the buffer; two sizes
    whose accesses fit only in order (`ordered`: a rotated part within its row) that order. A scale
    array the last tile reads past its quotient (`past_tiles`: shaped to cover it) gets a note, no requirement."""
    for n, m in (found.steps.items() if found is not None else ()):
        if n in size_names and (r := f"{n} % {m} == 0") not in require:
            require.append(r)
            notes.append(f"`{r}`: the kernel covers `{n}` in whole steps of {m} (a loop's trip, or a block, reaches "
                         f"a whole step past the last index it checks): only then do its accesses fit a shape — "
                         f"required; CHECK that the program's sizes are whole steps (else the kernel misses a tail)")
    for n, m in (found.groups.items() if found is not None else ()):
        if n in size_names and (r := f"{n} % {m} == 0") not in require:
            require.append(r)
            notes.append(f"`{r}`: the kernel takes `{n}`'s elements in groups of {m} by their index's residue "
                         f"(`i % {m}`: a pair's partner at `i + 1`), and where `{n}` is no multiple of {m} the last "
                         f"group's partner lies past the row — required")
    for n, b in (found.bounds.items() if found is not None else ()):
        if n in size_names and (r := f"{n} <= {b}") not in require:
            require.append(r)
            notes.append(f"`{r}`: this instance covers at most {b} of `{n}` (its loops of fixed trips reach no "
                         f"further; past it a row is read only in part), and only up to it do its accesses fit a "
                         f"shape — required; CHECK that the program picks this instance only up to there")
    for lo, hi in (found.ordered if found is not None else ()):
        if lo in size_names and hi in size_names and (r := f"{lo} <= {hi}") not in require:
            require.append(r)
            notes.append(f"`{r}`: only then do the kernel's accesses fit a tensor's shape (`{lo}` greater, they "
                         f"reach past a row of `{hi}`) — required; CHECK the program keeps it")
    for p, (n, t) in (found.past_tiles.items() if found is not None else ()):
        shape = (found.shapes.get(p) or [""])[-1]
        # not required: the kernel cuts the tile's tail for its data, so the program's sizes need not be whole
        # tiles; the shape covers the last tile's reads (bitsandbytes' absmax: read past cdiv(n, blocksize))
        notes.append(f"`{p}` is one value per block with `{n}` rounded up to whole tiles of {t} (the grid's: "
                     f"`{shape}`), as every thread of the last tile reads it, those past `{n}` included; "
                     f"a program that allocates the quotient of `{n}` as it is is read past by the kernel — CHECK "
                     f"what the program allocates")


def ordered_layouts(found: InferredShapes | None, size_names: list[str], layouts: dict[str, int],
                    program: dict[str, list[int]], notes: list[str]) -> dict[str, int]:
    """`layouts` (the sizes read off a caller's tensor, timed at their layout's value) with a size
    required at most one of them (`d2 <= d`, d a head's dim) timed at that value too: the part as
    wide as its row (a full rotary), not its name's 4096 (which the order rules out) nor the 1 a
    bench's shrinking leaves it."""
    out = dict(layouts)
    for lo, hi in (found.ordered if found is not None else ()):
        if hi in out and lo in size_names and lo not in out and not program.get(lo):
            out[lo] = out[hi]
            notes.append(f"`{lo}` is at most `{hi}` (required): timed at `{hi}`'s {out[hi]}, the whole row, "
                         f"and tested there too — CHECK")
    return out


def toml_list(items: list[str]) -> str:
    return "[" + ", ".join(f'"{i}"' for i in items) + "]"

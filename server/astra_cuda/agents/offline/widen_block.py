"""Wider blocks for a kernel launched with small ones: a one-index-per-thread kernel of 32 or 64
threads per block (exllamav2's hand-vectorized fp16 -> fp8 cache copy) is held back by the
per-SM limit on resident blocks (32 on recent GPUs: 32 x 32 threads leave half the SM's thread
slots empty) and by scheduling hundreds of thousands of tiny blocks. The rewrite launches 256
threads per block over the same threads (grid `cdiv(grid * block, 256)`, the spec and every launch
site changed together); the kernel's text is unchanged.

Recognised where the kernel's result cannot depend on how threads group into blocks:

    T v = <monotone in f>;   ...                 f = blockIdx.x * blockDim.x + threadIdx.x
    if (v >= BOUND) return;   body               (or `if (v < BOUND) { body }` as the last statement)

- every `threadIdx.x`, `blockIdx.x` and `blockDim.x` (of the kernel and the device functions it
  calls) is inside the flat index f, spelled with `blockDim.x` — or with the literal or `#define`
  the spec fixes the block to (`fixed_block_names`), also scaled (`blockIdx.x * THREADS * 2 +
  threadIdx.x * 2`, exllamav2's half2 vector add): the rewrite then spells it
  `(blockIdx.x * blockDim.x + threadIdx.x) * 2`, the same value under the old launch, so the
  literal does not go stale under the new one;
  and `threadIdx.y/z`, `blockDim.y/z` and `gridDim.x` appear nowhere; `blockIdx.y/z` and
  `gridDim.y/z` may (the grid's other axes are kept);
- no shared memory, barriers, warp collectives or launch bounds;
- the flat index is read only in the declarations before one guard on a value that never falls as
  f grows (f itself, `a + f * k`, `f * k + a` with a literal k > 0 and a loop-invariant `a`).

The new launch has up to 255 threads more than the old one, all with f above every old thread's;
as with coarsen.py's grid-stride loops, the guard's bound is taken as the extent of the work (a
launch that covers the guard's range, as every spec'd launch is checked to do: each output
written), so those threads have `v >= BOUND` and return before touching memory. The guard's
value and bound may read parameters and constants only, never a local: a local may hold another
axis's index (`r * W + f`), which would let an extra thread pass the guard with the next row's
work. (The extra threads' value is at most 255 x k past the old launch's last: an index that
overflows there already overflows in the original at any wider launch of the same kernel.)
"""
from __future__ import annotations

from tree_sitter import Node

from ...model import textedit
from ...model.launch_change import relaunch
from . import base, style
from .base import Context, Rewrite, body
from .coarsen import BARRIERS, BUILTINS, STARTS, fixed_block_names
from .loops import index_form
from .pack_rows import UNSAFE_CALLS
from .tree import (assigned_names, callee, calls, declared_names, function_name, functions, is_kernel, squashed, txt,
                   unparenthesized, walk)

SMALL = 128        # blocks of fewer threads than this are widened
TARGET = 256       # threads per block after
ALLOWED = {"blockIdx.y", "blockIdx.z", "gridDim.y", "gridDim.z"}   # built-ins outside the flat index


def _flat(n: Node) -> bool:
    return n.type == "binary_expression" and index_form(n) in STARTS


def _invariant(n: Node, variant: set[str]) -> bool:
    return all(not (c.type == "identifier" and txt(c) in variant) and c.type not in (
        "call_expression", "subscript_expression", "field_expression", "pointer_expression",
        "assignment_expression", "update_expression") for c in walk(n))


def _monotone(n: Node, variant: set[str]) -> bool:
    """`n` never falls as the flat index grows: the index itself, a loop-invariant added to it, or
    it times a positive integer literal (casts and parentheses looked through)."""
    n = unparenthesized(n)
    if n.type == "cast_expression":
        v = n.child_by_field_name("value")
        return v is not None and _monotone(v, variant)
    if _flat(n):
        return True
    if n.type != "binary_expression":
        return False
    op = txt(n.child_by_field_name("operator"))
    left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
    if left is None or right is None:
        return False
    if op == "+":
        return (_monotone(left, variant) and _invariant(right, variant)) or \
            (_monotone(right, variant) and _invariant(left, variant))
    if op == "*":
        def positive(m: Node) -> bool:
            m = unparenthesized(m)
            return m.type == "number_literal" and txt(m).rstrip("uUlL").isdigit() and int(txt(m).rstrip("uUlL")) > 0
        return (_monotone(left, variant) and positive(right)) or (_monotone(right, variant) and positive(left))
    return False


def _guard_var(stmt: Node, last: bool) -> tuple[str, Node] | None:
    """(v, BOUND) for `if (v >= BOUND) return;` (or `BOUND <= v`), or, as the body's last
    statement, `if (v < BOUND) { ... }` (or `BOUND > v`); no else."""
    if stmt.type != "if_statement" or stmt.child_by_field_name("alternative") is not None:
        return None
    cond = stmt.child_by_field_name("condition")
    cons = stmt.child_by_field_name("consequence")
    if cond is None or cons is None:
        return None
    c = unparenthesized(cond.named_children[0] if cond.type == "condition_clause" and cond.named_children else cond)
    if c.type != "binary_expression":
        return None
    op, left, right = txt(c.child_by_field_name("operator")), c.child_by_field_name("left"), c.child_by_field_name("right")
    if left is None or right is None:
        return None
    returns = cons.type == "return_statement" and cons.named_child_count == 0 or \
        cons.type == "compound_statement" and len(cons.named_children) == 1 and \
        cons.named_children[0].type == "return_statement" and cons.named_children[0].named_child_count == 0
    pairs = {(">=", True): (left, right), ("<=", True): (right, left),
             ("<", False): (left, right), (">", False): (right, left)}
    got = pairs.get((op, returns))
    if got is None or (not returns and not last) or unparenthesized(got[0]).type != "identifier":
        return None
    return txt(unparenthesized(got[0])), got[1]


def _factors(n: Node | None) -> list[str] | None:
    """The factors of a product of names, built-ins and literals (`blockIdx.x * T * 2`), squashed;
    None for anything else (a cast or a call could change the arithmetic's type)."""
    if n is None:
        return None
    n = unparenthesized(n)
    if n.type == "binary_expression" and txt(n.child_by_field_name("operator")) == "*":
        left, right = _factors(n.child_by_field_name("left")), _factors(n.child_by_field_name("right"))
        return None if left is None or right is None else left + right
    if n.type in ("identifier", "number_literal") or \
            n.type == "field_expression" and txt(n.child_by_field_name("argument")) in BUILTINS:
        return [squashed(n)]
    return None


def _scaled_flat(n: Node, names: frozenset[str]) -> str | None:
    """`(blockIdx.x * blockDim.x + threadIdx.x) * k` for `blockIdx.x * B * k + threadIdx.x * k`
    (either order, factors in any order), B one of `names`, k plain positive int literals: the
    same unsigned 32-bit value wherever blockDim.x is B (every operand converts to unsigned as
    before: no suffix, no cast, no wider literal)."""
    n = unparenthesized(n)
    if n.type != "binary_expression" or txt(n.child_by_field_name("operator")) != "+":
        return None
    left, right = _factors(n.child_by_field_name("left")), _factors(n.child_by_field_name("right"))
    if left is None or right is None:
        return None
    blocks = next((t for t in (left, right) if "blockIdx.x" in t), None)
    threads = next((t for t in (left, right) if "threadIdx.x" in t and t is not blocks), None)
    if blocks is None or threads is None:
        return None
    blocks, threads = list(blocks), list(threads)
    blocks.remove("blockIdx.x")
    threads.remove("threadIdx.x")
    size = next((f for f in blocks if f in names), None)
    if size is None:
        return None
    blocks.remove(size)
    if not threads or sorted(blocks) != sorted(threads) or \
            not all(k.isdigit() and 0 < int(k) < 2 ** 31 for k in threads):
        return None
    return "(blockIdx.x * blockDim.x + threadIdx.x) * " + " * ".join(threads)


def spelled_flat(sc: base.Scope, names: frozenset[str]) -> list[tuple[int, int, str]]:
    """Byte edits respelling the flat index in the declarations that open the kernel's body where
    it names the block size by one of `names` (see fixed_block_names) instead of `blockDim.x`:
    equal under the launch the spec fixes, and it follows a wider one."""
    edits: list[tuple[int, int, str]] = []
    stmts = [s for s in body(sc.kernel).named_children if s.type != "comment"]
    for stmt in stmts:
        if stmt.type != "declaration":
            break
        todo = [d.child_by_field_name("value") for d in stmt.children_by_field_name("declarator")
                if d.type == "init_declarator"]
        while todo:
            n = todo.pop()
            if n is None or n.type != "binary_expression" and n.type != "parenthesized_expression":
                continue
            if n.type == "binary_expression" and index_form(n) not in STARTS and index_form(n, names) in STARTS:
                edits.extend((m.start_byte, m.end_byte, "blockDim.x") for m in walk(n)
                             if m.type in ("identifier", "number_literal") and txt(m) in names)
                continue
            scaled = _scaled_flat(n, names) if n.type == "binary_expression" else None
            if scaled is not None:
                whole = n.parent is not None and n.parent.type == "init_declarator"
                edits.append((n.start_byte, n.end_byte, scaled if whole else f"({scaled})"))
                continue
            todo.extend(n.named_children)
    return edits


def _qualifies(sc: base.Scope) -> bool:
    kernel_body = body(sc.kernel)
    for f in sc.functions:
        if "__shared__" in txt(f) or any(callee(c).split("::")[-1] in UNSAFE_CALLS or
                                         any(b in callee(c) for b in BARRIERS) for c in calls(f)):
            return False
    flats = [n for n in walk(kernel_body) if _flat(n)]
    for f in sc.functions:
        for n in walk(body(f)):
            if n.type != "field_expression" or txt(n.child_by_field_name("argument")) not in BUILTINS:
                continue
            name = "".join(txt(n).split())
            inside = any(fl.start_byte <= n.start_byte and n.end_byte <= fl.end_byte for fl in flats)
            if name not in ALLOWED and not (inside and name in ("threadIdx.x", "blockIdx.x", "blockDim.x")):
                return False
    if not flats:
        return False
    stmts = [s for s in kernel_body.named_children if s.type != "comment"]
    k = next((i for i, s in enumerate(stmts) if s.type != "declaration"), None)
    if k is None:
        return False
    decls, guard = stmts[:k], stmts[k]
    if any(not any(d.start_byte <= fl.start_byte < d.end_byte for d in decls) for fl in flats):
        return False   # the flat index read after the guard: a thread past it might still act
    # a local may hold another axis's index (`r = blockIdx.y`): `r * W + f` would let a thread past
    # the old launch pass the guard and take the next row's work; only parameters and constants
    # count as invariant
    variant = assigned_names(kernel_body) | declared_names(kernel_body)
    if any(n.type in ("call_expression", "assignment_expression", "update_expression") for d in decls for n in walk(d)):
        return False
    g = _guard_var(guard, k == len(stmts) - 1)
    if g is None or g[0] in assigned_names(kernel_body) or not _invariant(g[1], variant):
        return False
    for d in decls:
        for dc in d.children_by_field_name("declarator"):
            name = dc.child_by_field_name("declarator")
            if dc.type == "init_declarator" and name is not None and txt(name) == g[0]:
                value = dc.child_by_field_name("value")
                return value is not None and _monotone(value, variant)
    return False


def _overloads_qualify(sc: base.Scope) -> bool:
    """Launch sites are found by name, so an overload of the kernel (FasterTransformer's float4 and
    half2 `quantized_kernel`) is relaunched too: each must qualify on its own, calling no device
    function of the file (whose built-ins would go unchecked)."""
    short = function_name(sc.kernel).split("::")[-1]
    own = {function_name(f) for f in functions(sc.root) if not is_kernel(f)}
    for f in functions(sc.root):
        if f == sc.kernel or not is_kernel(f) or function_name(f).split("::")[-1] != short:
            continue
        if any(callee(c) in own for c in calls(f)) or not _qualifies(base.Scope(sc.root, f, [], sc.file)):
            return False
    return True


class WidenBlock(base.Transform):
    name = "widen_block"
    title = "Wider blocks"
    expected = "more threads resident per SM and fewer, larger blocks to schedule"

    def rewrite(self, text: str, ctx: Context, sc: base.Scope, params: dict) -> Rewrite | None:
        spec = sc.spec
        target = int(params.get("block", TARGET))
        if spec is None or not spec.block or not spec.grid:
            return None
        b = spec.block[0].strip()
        if not b.isdigit() or not 0 < int(b) < min(SMALL, target) or target % int(b) or \
                any(x.strip() != "1" for x in spec.block[1:]):
            return None
        kernel = sc.model.kernel(ctx.kernel)
        if kernel is None or kernel.launch_bounds or not _overloads_qualify(sc):
            return None
        edits = spelled_flat(sc, fixed_block_names(sc.root, spec))
        spelled: base.Scope | None = sc
        if edits:   # the qualification is of the kernel as it will read
            respelt = textedit.replace_bytes(text, edits)
            spelled = base.scope(respelt, ctx.kernel) if respelt is not None else None
        if spelled is None or not _qualifies(spelled):
            return None
        grid = [style.spec_regrid(spec.grid[0].strip(), b, target), *spec.grid[1:]]

        def host(site):
            g = f"dim3({site.grid})"
            x = f"static_cast<unsigned int>((static_cast<size_t>({g}.x) * dim3({site.block}).x + {target - 1}) / {target})"
            rest = f", {g}.y, {g}.z" if len(spec.grid) > 1 else ""
            return f"dim3({x}{rest})", str(target)
        note = f"{target} threads per block over the same threads (blocks of {b} leave SM thread slots empty)"
        new = relaunch(text, ctx.kernel, grid, [str(target)], host, note, kernel_edits=edits, base=sc.file)
        if new is None:
            return None
        respelled = ("the flat index spelled with blockDim.x where it named the block size (the same value under the "
                     "old launch, and it follows the new one)",) if edits else ()
        return Rewrite(self.name, new.text, (f"blocks of {b} threads became blocks of {target} over the same threads "
                                              "(the grid divided to match, in the spec and at every launch site)",
                                              *respelled), {"block": target}, new)

    def alternatives(self, rw: Rewrite, ctx: Context) -> list[dict]:
        return [{"block": t} for t in (128, 512) if t != rw.params.get("block")]

"""Whole-array reductions: one atomic per element -> a grid-stride sum per thread, the block's sum
in shared memory, one atomic per block (and a grid capped at the launch site).

Recognises the naive form real code has for a sum over a whole array,

    T i = blockIdx.x * blockDim.x + threadIdx.x;        T i = ...;
    if (i < N) { ...; atomicAdd(P, V); }          or    if (i >= N) return;  ...; atomicAdd(P, V);

where every thread adds into the same place `P` (no part of it depends on the index or on what
the body computes): same-address atomics serialize in the L2, so such a kernel runs at a tiny
share of the copy ceiling. The rewrite sums `V` into a register over a grid-stride loop (the
same elements for any launch), adds the block's threads up in shared memory (a tree that is
correct for any block size, each step behind a barrier every thread reaches) and lets thread 0
make the block's one `atomicAdd`. The grid is then capped (`blocks`, a tuning parameter), so
each thread sums many elements. The sum is taken in another order: float results differ by
rounding (`reorders_sums`), which the gate's tolerance for atomics already expects.
"""
from __future__ import annotations

from dataclasses import dataclass

from tree_sitter import Node

from ...model import source
from ...model.launch_change import relaunch
from . import base
from .base import Context, Rewrite, body, pointer_params
from .coarsen import BARRIERS, match_elementwise
from .tree import Edit, apply_edits, callee, calls, line_indent, txt, walk

ACCUMULATORS = {"float", "double", "int", "unsigned int", "unsigned", "unsigned long long", "unsigned long long int"}
BLOCKS = (None, 256, 1024, 4096)     # the grid's cap (None: the file's grid)


def _the_atomic(work: list[Node]) -> tuple[Node, Node, Node] | None:
    """(statement, address, value) of the body's one `atomicAdd(P, V);`, a statement of its own
    at the top of the body; None when there is none, more than one, or it is used as a value."""
    found = []
    for st in work:
        for c in calls(st):
            if "atomic" in callee(c) or any(b in callee(c) for b in BARRIERS):
                found.append((st, c))
    if len(found) != 1:
        return None
    st, call = found[0]
    if st.type != "expression_statement" or st.named_children[0] != call or callee(call) != "atomicAdd":
        return None
    args = [a for a in call.child_by_field_name("arguments").named_children if a.type != "comment"]
    return (st, args[0], args[1]) if len(args) == 2 else None


def _target(address: Node, sc: base.Scope, var: str, changed: set[str]) -> str | None:
    """The pointer parameter every thread adds into, when `address` is `p`, `&p[k]` or `p + k`
    with `k` the same for every thread (no index, built-in or variable of the body in it)."""
    pointers = pointer_params(sc.kernel)
    names = {txt(n) for n in walk(address) if n.type == "identifier"}
    if var in names or names & changed or any(b in txt(address) for b in ("threadIdx", "blockIdx", "blockDim",
                                                                          "gridDim")):
        return None
    base_names = [n for n in names if n in pointers]
    if len(base_names) != 1 or any(n not in pointers and not _is_scalar_param(n, sc) for n in names):
        return None
    return base_names[0]


def _is_scalar_param(name: str, sc: base.Scope) -> bool:
    from .tree import declared_name, params
    return any(declared_name(p.child_by_field_name("declarator")) == (name, False) for p in params(sc.kernel))


def _writes_memory(nodes: list[Node]) -> bool:
    """Any store through a pointer or array (the reduction's atomic aside, which is replaced)."""
    from .tree import is_lvalue
    for st in nodes:
        for n in walk(st):
            if n.type in ("subscript_expression", "pointer_expression", "field_expression") and is_lvalue(n):
                if not (n.type == "pointer_expression" and txt(n.child(0)) == "&"):
                    return True
            if n.type == "pointer_expression" and txt(n.child(0)) == "*" and is_lvalue(n):
                return True
    return False


@dataclass
class AtomicLoop:
    """A one-element-per-thread kernel whose work ends in its one `atomicAdd(address, value);`."""

    spec: object
    el: object          # coarsen's Elementwise
    stmt: Node          # the atomic's statement
    address: Node
    value: Node
    changed: set        # names the work assigns

    def read_elsewhere(self, name: str) -> bool:
        """`name` appears in the work outside the atomic (a value read there would change: the
        sum or the counts now land elsewhere until the block is done)."""
        return any(n.type == "identifier" and txt(n) == name for st in self.el.mid + self.el.work
                   if st != self.stmt for n in walk(st))

    def indents(self, text: str) -> tuple[str, str]:
        ind = line_indent(text.encode("utf-8"), self.el.decl.start_byte)
        return ind, ind + "  "

    def replace(self, text: str, before: str, atomic: str, after: str) -> str:
        """The kernel with `index; guard; work` as `before` + a grid-stride loop over the work (its
        atomic statement replaced by `atomic`) + `after`."""
        data = text.encode("utf-8")
        el = self.el
        ind, inner = self.indents(text)
        lines = [inner + (atomic if st == self.stmt else
                          txt(st).replace("\n" + line_indent(data, st.start_byte), "\n" + inner))
                 for st in el.mid + el.work]
        loop = (f"for ({el.var_type} {el.var} = {el.start}; {el.var} < {el.bound}; "
                f"{el.var} += blockDim.x * gridDim.x) {{\n" + "\n".join(lines) + f"\n{ind}}}")
        end = max([el.guard.end_byte] + [st.end_byte for st in el.work])
        return apply_edits(text, [Edit(el.decl.start_byte, end, before + loop + after)])


def match_atomic_loop(text: str, ctx: Context, sc: base.Scope) -> AtomicLoop | None:
    """The kernel as an AtomicLoop, where its launch is one-dimensional (shared memory is indexed
    by threadIdx.x), its work is repeatable per thread and stores nothing but through the atomic."""
    spec = sc.spec
    if spec is None or len(spec.grid) > 1 and any(g.strip() != "1" for g in spec.grid[1:]) \
            or len(spec.block) > 1 and any(b.strip() != "1" for b in spec.block[1:]):
        return None
    el = match_elementwise(sc.kernel)
    if el is None or "__shared__" in txt(sc.kernel):
        return None
    found = _the_atomic(el.work)
    if found is None:
        return None
    stmt, address, value = found
    from .tree import assigned_names
    changed = set().union(*(assigned_names(st) for st in el.work + el.mid)) if el.work + el.mid else set()
    if _writes_memory([st for st in el.work if st != stmt] + el.mid) or not _repeatable(el, sc, stmt):
        return None
    return AtomicLoop(spec, el, stmt, address, value, changed)


def capped(name: str, text: str, ctx: Context, spec, new_text: str, blocks: int | None, changes: list[str],
           note: str) -> Rewrite | None:
    """The rewrite with its grid capped at `blocks` in the spec and at every launch site (None:
    the file's grid; a grid-stride loop covers the elements whatever the grid)."""
    if blocks is None:
        return Rewrite(name, new_text, tuple(changes), {"blocks": None})
    new_kernel = source.parse(new_text).kernel(ctx.kernel)
    kernel = source.parse(text).kernel(ctx.kernel)
    if new_kernel is None or kernel is None:
        return None
    g = spec.grid[0].strip()

    def host(site):
        return f"dim3(dim3({site.grid}).x < {blocks}u ? dim3({site.grid}).x : {blocks}u)", site.block
    relaunched = relaunch(text, ctx.kernel, [f"min({g}, {blocks})"], list(spec.block), host, note,
                          [(kernel.span.start_byte, kernel.span.end_byte, new_kernel.text)])
    if relaunched is None:
        return None
    return Rewrite(name, relaunched.text, (*changes, f"grid capped at {blocks} blocks in the spec and at every launch site"),
                   {"blocks": blocks}, relaunched)


class BlockAtomic(base.Transform):
    any_grid = True   # a grid-stride loop: right for any grid (a size dispatch may choose the grid alone)
    name = "block_atomic"
    title = "one atomic per block: grid-stride sums per thread, the block's sum in shared memory"
    note = "one atomic per block instead of one per element: far less contention on one address"
    expected = ("every thread adding into one address serializes in the L2; a register sum per thread and one "
                "atomic per block leave the kernel bound by reading the array")
    reorders_sums = True

    def rewrite(self, text: str, ctx: Context, sc: base.Scope, params: dict) -> Rewrite | None:
        blocks = params.get("blocks", 1024)
        m = match_atomic_loop(text, ctx, sc)
        if blocks not in BLOCKS or m is None:
            return None
        target = _target(m.address, sc, m.el.var, m.changed)
        if target is None or m.read_elsewhere(target):
            return None
        acc_type = " ".join(pointer_params(sc.kernel)[target].elem.replace("volatile", "").split())
        if acc_type not in ACCUMULATORS:
            return None
        ind, inner = m.indents(text)
        new_text = m.replace(text, f"{acc_type} astra_sum = 0;   // astra: this thread's part of the sum\n{ind}",
                             f"astra_sum += {txt(m.value)};", (
            f"\n{ind}// astra: the block's sum (a tree over shared memory, right for any block size), one atomic per block\n"
            f"{ind}__shared__ {acc_type} astra_part[1024];\n"
            f"{ind}astra_part[threadIdx.x] = astra_sum;\n"
            f"{ind}__syncthreads();\n"
            f"{ind}for (unsigned int astra_s = 1; astra_s < blockDim.x; astra_s *= 2) {{\n"
            f"{inner}if ((threadIdx.x & (2 * astra_s - 1)) == 0 && threadIdx.x + astra_s < blockDim.x)\n"
            f"{inner}  astra_part[threadIdx.x] += astra_part[threadIdx.x + astra_s];\n"
            f"{inner}__syncthreads();\n"
            f"{ind}}}\n"
            f"{ind}if (threadIdx.x == 0) atomicAdd({txt(m.address)}, astra_part[0]);"))
        changes = [f"one `atomicAdd` into `{txt(m.address)}` per element became a grid-stride sum per thread, the "
                   f"block's sum in shared memory and one `atomicAdd` per block"]
        return capped(self.name, text, ctx, m.spec, new_text, blocks, changes,
                      f"at most {blocks} blocks: each thread sums many elements, each block adds once")

    def alternatives(self, rw: Rewrite, ctx: Context) -> list[dict]:
        return [{"blocks": b} for b in BLOCKS if b != rw.params.get("blocks")]


def _repeatable(el, sc: base.Scope, stmt: Node) -> bool:
    """coarsen's rules for work that may run several times per thread (no returns, built-ins only
    in the index, no state carried from before the guard, index and bound unchanged), with the
    kernel's one atomic — the statement replaced by the register sum — allowed; no other atomic,
    barrier or warp collective anywhere in the kernel or its helpers."""
    from .coarsen import BUILTINS, idents_text, no_exit_nor_builtin
    from .tree import assigned_names, declared_names
    kernel_calls = [callee(c) for c in calls(body(sc.kernel))]
    if sum("atomic" in c for c in kernel_calls) != 1 or \
            any(b in c for c in kernel_calls for b in BARRIERS if b != "atomic"):
        return False
    if any("__shared__" in txt(f) or any(any(b in callee(c) for b in BARRIERS) for c in calls(f))
           for f in sc.helpers):
        return False
    if not no_exit_nor_builtin(el):
        return False
    for f in sc.helpers:
        if any(n.type == "identifier" and txt(n) in BUILTINS for n in walk(body(f))):
            return False
    if any(st.type != "declaration" for st in el.pre):
        return False
    changed = set().union(*(assigned_names(st) for st in el.work + el.mid)) if el.work + el.mid else set()
    before = set().union(*(declared_names(st) for st in el.pre)) if el.pre else set()
    return not (changed & (before | {el.var} | idents_text(el.bound)))

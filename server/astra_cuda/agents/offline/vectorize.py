"""Vectorized loads and stores for strided element loops.

Recognises the block-stride loop `for (T i = threadIdx.x; i < N; i += blockDim.x)` (and the
grid-stride loop `for (T i = blockIdx.x * blockDim.x + threadIdx.x; i < N; i += blockDim.x * gridDim.x)`)
whose element accesses are `P[base + i]` with loop-invariant `base` — directly, through a `const`
index alias (`idx = row * n + i`), or through a local pointer into a parameter
(`const float* x = inp + row * C;  ... x[i]`). Each thread then moves VEC consecutive elements
per step with one 16-byte (or 8/4-byte) load per array, runs the original body on registers for
each element (unrolled), and stores whole vectors. Element types are resolved through typedefs,
template arguments and the spec.

The vector path is taken only where it computes what the original loop computes: rows whose
bases are aligned, and — unless `__restrict__` already promises it — whose written range does not
overlap any other range the loop touches (an exact in-place update is fine: each element is read
before it is written, as before). Everything else runs the original loop (loop versioning, as
compilers do), and the remainder of aligned rows runs in a scalar tail. An access under a
condition the same for every step (a template constant, a null check) moves its vector under
that condition; writes in several such branches are one store (guards.py).

Long because deciding that a loop may be vectorized is most of the work: which names point into
which buffer, which accesses are affine, which overlaps must be checked at run time, and which
other loops share its data; the emitted code itself is one function.
"""
from __future__ import annotations

from dataclasses import dataclass

from tree_sitter import Node

from . import base, guards, helpers
from .base import Context, Edit, Rewrite, body, element_bytes, pointer_params
from .loops import StridedLoop, match_loop
from .tree import (apply_edits, assigned_names, callee, calls, declared_name, function_name, is_lvalue, line_indent,
                   txt, unparenthesized, walk)

CHUNK = {16: "uint4", 8: "uint2", 4: "unsigned int"}
NARROW = {"int", "unsigned", "unsigned int", "int32_t", "uint32_t", "uint", "const int", "const unsigned int"}
ASSIGN = {"=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>="}


@dataclass(frozen=True)
class Handle:
    """A name the loop subscripts that points into a kernel parameter's buffer."""

    name: str
    root: str               # the pointer parameter it points into
    elem: str               # element type as written ('floatX', '__half', 'scalar_t')
    size: int | None        # bytes per element, when known
    restrict: bool          # the parameter is __restrict__


@dataclass
class Access:
    node: Node
    array: str         # the handle's name
    base: str          # offset of element i, minus i: '(token * 2 * d)' or '0'; '' when irregular
    store: bool
    invariant: str = ""   # an irregular index that does not change in the loop (one element)
    guard: str | None = ""   # the steady condition it runs under (guards.py): "" always, None not steady


def _at(array: str, base_: str) -> str:
    return array if base_ == "0" else f"{array} + ({base_})"


def _paren(e: str) -> str:
    return e if e in ("threadIdx.x", "blockDim.x") else f"({e})"


# ---- which names point into which parameter --------------------------------------------------

def _pointee(value: Node, known: dict[str, Handle]) -> str | None:
    """The handle a pointer initialiser points into: `P`, `P + e`, `e + P`, `&P[e]`."""
    v = unparenthesized(value)
    if v.type == "identifier":
        return txt(v) if txt(v) in known else None
    if v.type == "binary_expression" and txt(v.child_by_field_name("operator")) == "+":
        found = [_pointee(v.child_by_field_name(side), known) for side in ("left", "right")]
        found = [f for f in found if f is not None]
        return found[0] if len(found) == 1 else None
    if v.type == "pointer_expression" and txt(v.child(0)) == "&":
        arg = unparenthesized(v.child_by_field_name("argument"))
        if arg.type == "subscript_expression":
            a = arg.child_by_field_name("argument")
            return txt(a) if a is not None and a.type == "identifier" and txt(a) in known else None
    return None


def handles(fn: Node, ctx: Context, root: Node) -> dict[str, Handle]:
    """The pointer parameters, and local pointers declared once as `T* x = P + offset` that are
    never reassigned (same element type as P)."""
    out = {p.name: Handle(p.name, p.name, p.elem, element_bytes(p, ctx, root), p.restrict)
           for p in pointer_params(fn).values()}
    assigned = assigned_names(body(fn))
    seen: dict[str, int] = {}
    for n in walk(body(fn)):
        if n.type != "declaration":
            continue
        for d in n.children_by_field_name("declarator"):
            name, is_ptr = declared_name(d)
            if name:
                seen[name] = seen.get(name, 0) + 1
            if not (name and is_ptr) or d.type != "init_declarator" or name in assigned or name in out:
                continue
            value = d.child_by_field_name("value")
            target = _pointee(value, out) if value is not None else None
            elem = txt(n.child_by_field_name("type"))
            if target is not None and " ".join(elem.split()) == " ".join(out[target].elem.split()):
                h = out[target]
                out[name] = Handle(name, h.root, h.elem, h.size, h.restrict)
    return {k: v for k, v in out.items() if seen.get(k, 0) <= 1}


def local_arrays(fn: Node) -> set[str]:
    """Arrays declared in the kernel (shared or per-thread): they cannot alias a parameter."""
    out = set()
    for n in walk(body(fn)):
        if n.type == "array_declarator":
            name, _ = declared_name(n)
            if name:
                out.add(name)
    return out


# ---- planning ------------------------------------------------------------------------------------

@dataclass
class Plan:
    accesses: list[Access]                      # vectorized
    checks: list[tuple[str, str, str, str]]     # (written handle, its base, other handle, its range)
    inplace: set[str]                           # written handles loaded and stored through one register
    preload: set[str]                           # ... of those, the ones whose old values are read


def _exempt(w: Handle, r: Handle) -> bool:
    """`__restrict__` on either of two different parameters already promises they do not overlap."""
    return w.root != r.root and (w.restrict or r.restrict)


def _ldg_call(n: Node) -> Node | None:
    """For `P[i]` written as `__ldg(&P[i])` (or through an LDG macro such as `EXT_LDG(&P[i])`):
    the call, which reads the element."""
    p = n.parent
    if p is None or p.type != "pointer_expression" or txt(p.child(0)) != "&":
        return None
    args = p.parent
    if args is None or args.type != "argument_list" or len(args.named_children) != 1:
        return None
    call = args.parent
    name = callee(call).split("::")[-1] if call is not None and call.type == "call_expression" else ""
    return call if name == "__ldg" or "LDG" in name.upper() else None


def plan_accesses(m: StridedLoop, hs: dict[str, Handle], arrays: set[str], independent: bool = False) -> Plan | None:
    """The accesses to vectorize and the overlap checks the vector path needs. `independent`: the
    loop's elements were each a thread of their own in the original (coarsen.py), so elements can
    only interact through what were data races there; only a read placed after a write within one
    element still needs its check."""
    accesses: list[Access] = []
    unknown_read = False
    for n in walk(m.body):
        if n.type != "subscript_expression":
            continue
        if n.parent is not None and n.parent.type == "pointer_expression" and _ldg_call(n) is None:
            if txt(n.child_by_field_name("argument")) in hs or is_lvalue(n):
                return None   # the element's address escapes
        arg = n.child_by_field_name("argument")
        arr = txt(arg)
        if arg is None or arg.type != "identifier" or arr not in hs:
            if arg is not None and arg.type == "identifier" and arr in arrays:
                continue          # a local or shared array: no aliasing with the parameters
            if is_lvalue(n):
                return None       # a write through a pointer we cannot follow
            unknown_read = True
            continue
        idx = n.child_by_field_name("indices") or n.child_by_field_name("index")
        if idx is None:
            for c in n.named_children[1:]:
                idx = c
        if idx is not None and idx.type == "subscript_argument_list":
            idx = idx.named_children[0] if len(idx.named_children) == 1 else None
        ob = m.offset_base(idx) if idx is not None else None
        inv = txt(idx) if ob is None and idx is not None and m.invariant(idx) else ""
        ldg = _ldg_call(n)
        accesses.append(Access(ldg or n, arr, ob if ob is not None else "", ldg is None and is_lvalue(n), inv,
                               guards.path(m, n)))
    chosen: list[Access] = []
    written: list[str] = []
    store_end: dict[str, int] = {}
    inplace: set[str] = set()
    preload: set[str] = set()
    for arr in dict.fromkeys(a.array for a in accesses):
        acc = [a for a in accesses if a.array == arr]
        h = hs[arr]
        stores = [a for a in acc if a.store]
        if stores:
            sts = [a.node.parent for a in stores]
            if h.size is None or any(a.base == "" for a in acc) or any(a.guard is None for a in stores) or \
                    len({a.base for a in acc}) != 1 or any(
                    st.type != "assignment_expression" or txt(st.child_by_field_name("operator")) not in ASSIGN
                    or st.parent is None or st.parent.type != "expression_statement" for st in sts):
                return None   # a write we cannot place relative to vector loads
            if (len(sts) > 1 or stores[0].guard) and (len(stores) != len(acc) or any(
                    txt(st.child_by_field_name("operator")) != "=" for st in sts)):
                return None   # written in several places or under a condition: only plain writes, never read
            stmt = sts[0]
            store_end[arr] = min(st.end_byte for st in sts)
            compound = txt(stmt.child_by_field_name("operator")) != "="
            if compound or any(a.node.start_byte >= stmt.end_byte for a in acc if not a.store):
                inplace.add(arr)        # `p[i] += e`, or a read after the write: one register for both
                if compound or any(a.node.start_byte < stmt.start_byte for a in acc if not a.store) or \
                        any(a.node.start_byte >= stmt.start_byte and a.node.end_byte <= stmt.end_byte
                            for a in acc if not a.store):
                    preload.add(arr)    # ... whose old value is read: load it first
            written.append(arr)
        if h.size is not None and all(a.base != "" for a in acc):
            chosen.extend(acc)
    if not chosen:
        return None
    # Loads are hoisted above the stores of the same step: where no __restrict__ promises it,
    # the vector path needs the written range apart from every other range the loop touches.
    checks: list[tuple[str, str, str, str]] = []
    for w in written:
        wb = next(a.base for a in accesses if a.array == w)
        for arr in dict.fromkeys(a.array for a in accesses):
            if arr == w or _exempt(hs[w], hs[arr]):
                continue
            for a in accesses:
                if a.array != arr:
                    continue
                late = a.node.start_byte >= store_end[w]   # read after the write: it must see the new value
                if independent and not late:
                    continue
                if a.base:
                    rng = ("n!" if late else "n", a.base)
                elif a.invariant:
                    rng = ("1", a.invariant)
                else:
                    return None   # an irregular read whose range is unknown
                check = (w, wb, arr, f"{rng[0]}:{rng[1]}")
                mirror = (arr, rng[1], w, f"n:{wb}") if rng[0] == "n" and arr in written else None
                if check not in checks and mirror not in checks:   # full ranges: apart is symmetric
                    checks.append(check)
        if unknown_read and not hs[w].restrict:
            return None
    return Plan(chosen, checks, inplace, preload)


def _apart(w: str, wb: str, r: str, rng: str, n: str) -> str:
    """C++: the bytes the loop writes through `w` do not overlap those it reads through `r`
    (or they start at the same element of the same size: an in-place update)."""
    count, rb = rng.split(":", 1)   # 'n' elements, 'n!' (no in-place exemption) or '1'
    wa, ra = f"reinterpret_cast<size_t>({_at(w, wb)})", f"reinterpret_cast<size_t>({_at(r, rb)})"
    rlen = f"{n} * sizeof(*{r})" if count.startswith("n") else f"sizeof(*{r})"
    same = f" ||\n       (sizeof(*{w}) == sizeof(*{r}) && {wa} == {ra})" if count == "n" else ""
    return f"({wa} + {n} * sizeof(*{w}) <= {ra} ||\n       {ra} + {rlen} <= {wa}{same})"


BARRIERS = {"__syncthreads", "__syncwarp", "astra_row_sync", "sync"}


def _barrier_calls(sc: base.Scope) -> set[str]:
    """Functions that are barriers or call one (a block reduction helper, say)."""
    out = set(BARRIERS)
    for f in sc.helpers:
        if any(callee(c).split("::")[-1].split(".")[-1] in BARRIERS for c in calls(f)):
            out.add(function_name(f) or "")
    return out


def read_only(fn: Node, hs: dict[str, Handle]) -> set[str]:
    """The handles into memory the kernel cannot write: a `const` pointee the kernel never casts
    away (no `const_cast`, no C cast naming it) — what a read-only-cache (`__ldg`) helper may read."""
    def pointers(v: Node | None) -> set[str]:
        """The handles a cast's operand is (`p`, `p + k`, `&p[i]`), as their parameters."""
        v = None if v is None else unparenthesized(v)
        if v is None:
            return set()
        if v.type == "identifier":
            return {hs[txt(v)].root} if txt(v) in hs else {txt(v)}
        if v.type == "binary_expression":
            return pointers(v.child_by_field_name("left")) | pointers(v.child_by_field_name("right"))
        if v.type == "pointer_expression" and txt(v.child(0)) == "&":
            a = unparenthesized(v.child_by_field_name("argument"))
            return pointers(a.child_by_field_name("argument")) if a.type == "subscript_expression" else set()
        return set()
    consts = {n for n, p in base.pointer_params(fn).items() if p.const}
    for n in walk(body(fn)):
        if n.type == "cast_expression":
            consts -= pointers(n.child_by_field_name("value"))
        elif n.type == "call_expression" and txt(n.child_by_field_name("function")).startswith("const_cast"):
            args = n.child_by_field_name("arguments")
            consts -= pointers(args.named_children[0] if args is not None and args.named_children else None)
    return {a for a, h in hs.items() if h.root in consts}


def _touches(loop: Node, hs: dict[str, Handle]) -> tuple[set[str], set[str]]:
    """(parameters the loop writes, parameters it reads) through the handles."""
    w, r = set(), set()
    for n in walk(loop):
        if n.type == "subscript_expression":
            a = n.child_by_field_name("argument")
            if a is not None and txt(a) in hs:
                (w if is_lvalue(n) else r).add(hs[txt(a)].root)
    return w, r


def _unconditional_barrier_between(a: Node, b: Node, fn_body: Node, barriers: set[str]) -> bool:
    """A barrier call between loops `a` and `b` that runs whenever both do (not inside a branch
    or loop of its own)."""
    for c in calls(fn_body):
        if not (a.end_byte <= c.start_byte < b.start_byte) or callee(c).split("::")[-1].split(".")[-1] not in barriers:
            continue
        p, ok = c.parent, True
        while p is not None and p != fn_body:
            if p.type in ("for_statement", "while_statement", "do_statement", "if_statement", "switch_statement",
                          "conditional_expression") and not (p.start_byte <= a.start_byte and p.end_byte >= b.end_byte):
                ok = False
            p = p.parent
        if ok:
            return True
    return False


def _exclusive(a: Node, b: Node) -> bool:
    """The two statements sit in different branches of one if statement: never both run."""
    p = a.parent
    while p is not None and not (p.start_byte <= b.start_byte and b.end_byte <= p.end_byte):
        p = p.parent
    if p is None or p.type != "if_statement":
        return False
    cons, alt = p.child_by_field_name("consequence"), p.child_by_field_name("alternative")
    inside = lambda n, x: x is not None and x.start_byte <= n.start_byte and n.end_byte <= x.end_byte  # noqa: E731
    return (inside(a, cons) and inside(b, alt)) or (inside(a, alt) and inside(b, cons))


def shared_without_barrier(loop: Node, fn_body: Node, hs: dict[str, Handle], barriers: set[str]) -> bool:
    """Another loop of the kernel touches what this one writes (or writes what it reads) with no
    barrier between them: a thread relies on owning the same elements in both, which a vector
    step (VEC consecutive elements per thread) would change."""
    w, r = _touches(loop, hs)
    for other in walk(fn_body):
        if other.type not in ("for_statement", "while_statement", "do_statement") or other == loop:
            continue
        if other.start_byte <= loop.start_byte < other.end_byte or loop.start_byte <= other.start_byte < loop.end_byte:
            continue   # nested: the same iteration space
        ow, or_ = _touches(other, hs)
        if not (w & (ow | or_) or ow & r) or _exclusive(loop, other):
            continue
        first, second = (loop, other) if loop.start_byte < other.start_byte else (other, loop)
        if not _unconditional_barrier_between(first, second, fn_body, barriers):
            return True
    return False


class Vectorize(base.Transform):
    def __init__(self, width: int = 16):
        self.width = width
        self.name = "vectorize" if width == 16 else f"vectorize{width * 8}"
        self.title = f"{width * 8}-bit vectorized loads/stores in strided element loops"
        self.note = f"{width}-byte loads and stores: fewer, wider memory accesses"
        self.expected = (f"{width}-byte memory transactions: fewer load/store instructions and more bytes in "
                         f"flight per thread (memory-bound kernels)")

    def rewrite(self, text: str, ctx: Context, sc: base.Scope, params: dict) -> Rewrite | None:
        width = int((params or {}).get("width", self.width))
        independent = bool((params or {}).get("independent", False))
        if width not in CHUNK:
            return None
        fn = sc.kernel
        hs = handles(fn, ctx, sc.root)
        arrays = local_arrays(fn)
        data = text.encode("utf-8")
        edits, changes, elements = [], [], []
        counter = [0]
        taken = {txt(n) for n in walk(sc.root) if n.type == "identifier"}   # an earlier round's names
        barriers = _barrier_calls(sc)
        tids = base.index_aliases(body(fn))
        for loop in [n for n in walk(body(fn)) if n.type == "for_statement"]:
            m = match_loop(loop, tids)
            if m is None or shared_without_barrier(loop, body(fn), hs, barriers):
                continue
            plan = plan_accesses(m, hs, arrays, independent)
            if plan is None:
                continue
            acc = plan.accesses
            sizes = {hs[a.array].size for a in acc}
            if max(sizes) > width or width % min(sizes):
                continue
            vec = width // min(sizes)
            if vec < 2:
                continue
            if ctx.block_threads and ctx.row_elements.get(txt(m.bound)) and "gridDim" not in m.stride:
                # Keep at least an eighth of the block's threads busy at the timed sizes.
                n = ctx.row_elements[txt(m.bound)]
                if n // vec < ctx.block_threads // 8 and vec > 2:
                    continue
            code = _emit(m, plan, hs, vec, width, data, counter, (text, fn.start_byte), taken, ctx.headers,
                         read_only(fn, hs))
            elements.append(vec)
            edits.append(Edit(loop.start_byte, loop.end_byte, code))
            arrays_ = sorted({a.array for a in acc})
            overlap = ""
            if plan.checks:
                ws = sorted({w for w, _, _, _ in plan.checks})
                overlap = (f"; vector path only where {', '.join(f'`{w}`' for w in ws)} (written) do not overlap "
                           f"what the loop reads (checked at run time)")
            changes.append(f"loop over `{txt(m.bound)}`: {vec} elements per step via {width}-byte "
                           f"accesses to {', '.join(f'`{a}`' for a in arrays_)}; scalar tail and misaligned rows"
                           + overlap)
        if not edits:
            return None
        return Rewrite(self.name, apply_edits(text, edits), tuple(changes), {"width": width, "elements": max(elements)})

    def alternatives(self, rw: Rewrite, ctx: Context) -> list[dict]:
        return [{"width": w} for w in (16, 8) if w != rw.params.get("width")]


def _emit(m: StridedLoop, plan: Plan, hs: dict[str, Handle], vec: int, width: int, data: bytes,
          counter: list[int], where: tuple[str, int] | None = None, taken: set[str] | None = None,
          headers: tuple[str, ...] = (), unwritten: set[str] | frozenset[str] = frozenset()) -> str:
    """The vector loop and its scalar tail in place of `m.loop`. Where the loop sits in a block,
    the vector loop's constants go right before it and the tail is the user's loop itself with
    only its first index moved (the smallest diff); elsewhere (the body of an `if`, say) all of it
    is wrapped in a block of its own."""
    acc = plan.accesses
    ind = line_indent(data, m.loop.start_byte)
    u = counter[0]
    while f"astra_vec{f'_{u}' if u else ''}" in (taken or ()):
        u += 1
    counter[0] = u + 1
    sfx = f"_{u}" if u else ""
    before = m.loop.prev_sibling   # a `#pragma unroll` of the user's loop must stay right above it
    flat = m.loop.parent is not None and m.loop.parent.type == "compound_statement" \
        and not (before is not None and before.type.startswith("preproc"))
    i1 = ind if flat else ind + "  "
    i2, i3 = i1 + "  ", i1 + "    "
    chunk = CHUNK[width]
    # the file's own element pack for the registers, else plain aligned arrays (and for a guarded load)
    packs = None if where is None or any(a.guard for a in acc) else helpers.packs_for(
        {a.array: (hs[a.array].elem, vec * (hs[a.array].size or 0)) for a in acc}, vec, width,
        f"astra_vec{sfx}", where, headers)
    # the project's load/store helpers (`ld128`, `st128`), where one moves exactly one access
    found = helpers.movers(where[0], where[1], headers) if where is not None else ()
    used: list[str] = []

    def move(kind: str, typ: str, arr: str) -> helpers.Mover | None:
        h = helpers.mover(found, kind, typ, width, arr in unwritten)
        if h is not None and h.name not in used:
            used.append(h.name)
        return h
    # one short name per pack type the step uses (`using pack = vec_n_t<half, vec>;`)
    alias = {t: f"astra_pack{j or ''}{sfx}" for j, t in enumerate(dict.fromkeys(t for t, _ in (packs or {}).values()))}

    def declare(v: str, arr: str, base_: str | None, const: bool = False) -> None:
        """Registers `v` for `arr`'s elements of this step, loaded from the row at `base_` (None:
        not loaded)."""
        at = None if base_ is None else f"{_at(arr, base_)} + astra_i0{sfx}"
        if packs is not None:
            t = alias[packs[arr][0]]
            h = None if at is None else move("load", packs[arr][0], arr)
            if at is None or (h is not None and h.kind == "load"):
                plain.setdefault(t, []).append(v)
                if at is not None:
                    lines_load.append(f"{i2}{h.load(v, f'reinterpret_cast<const {t}*>({at})')}")  # type: ignore[union-attr]
                return
            load = f" = *reinterpret_cast<const {t}*>({at})" if h is None else \
                f" = {h.name}(reinterpret_cast<const {t}*>({at}))"
            decls.append(f"{i2}{'const ' if const else ''}{t} {v}{load};")
            return
        plain.setdefault(f"alignas(16) {hs[arr].elem}", []).append(f"{v}[astra_vec{sfx}]")
        for c in range(0 if at is None else vec * (hs[arr].size or 0) // width):
            h = move("load", chunk, arr)
            reg, src = f"reinterpret_cast<{chunk}*>({v})[{c}]", f"reinterpret_cast<const {chunk}*>({at})"
            lines_load.append(f"{i2}{reg} = {src}[{c}];" if h is None else f"{i2}{h.load(reg, src + (f' + {c}' if c else ''))}")

    def store(v: str, arr: str, base_: str) -> None:
        at = f"{_at(arr, base_)} + astra_i0{sfx}"
        if packs is not None:
            t = alias[packs[arr][0]]
            h = move("store", packs[arr][0], arr)
            lines_store.append(f"{i2}*reinterpret_cast<{t}*>({at}) = {v};" if h is None else
                               f"{i2}{h.store(v, f'reinterpret_cast<{t}*>({at})')}")
            return
        for c in range(vec * (hs[arr].size or 0) // width):
            h = move("store", chunk, arr)
            dst = f"reinterpret_cast<{chunk}*>({at})"
            lines_store.append(f"{i2}{dst}[{c}] = reinterpret_cast<const {chunk}*>({v})[{c}];" if h is None else
                               f"{i2}{h.store(f'reinterpret_cast<{chunk}*>({v})[{c}]', dst + (f' + {c}' if c else ''))}")

    def element(v: str, arr: str) -> str:
        return f"{v}.{packs[arr][1]}[astra_k{sfx}]" if packs is not None else f"{v}[astra_k{sfx}]"
    T = m.var_type
    # Grid-stride counters run up to n plus a whole grid's stride: 64-bit where the index is 32-bit.
    wide = "gridDim" in m.stride and " ".join(T.split()) in NARROW
    C = "long long" if wide else T
    cast = f"static_cast<{C}>" if "gridDim" in m.stride else ""
    elem_index = f"static_cast<{T}>(astra_i0{sfx} + astra_k{sfx})" if wide else f"astra_i0{sfx} + astra_k{sfx}"
    loads: dict[tuple[str, str], str] = {}
    stores: dict[str, str] = {}
    lines_load, lines_store, decls = [], [], []
    plain: dict[str, list[str]] = {}   # registers declared without a value, one line per type
    body_edits = []
    for a in sorted(acc, key=lambda a: (a.store, a.node.start_byte)):  # loads first
        key = (a.array, a.base)
        if a.store or (a.array in plan.inplace and key not in loads):
            if a.array in plan.inplace and key not in loads:   # one register for the element's old and new value
                v = f"astra_v{len(loads)}{sfx}"
                loads[key] = v
                declare(v, a.array, a.base if a.array in plan.preload else None)
            if a.array not in stores:
                if a.array in plan.inplace:
                    v = loads[key]
                else:
                    v = f"astra_s{len(stores)}{sfx}"
                    declare(v, a.array, None)
                stores[a.array] = v
                at = len(lines_store)
                store(v, a.array, a.base)
                guards.wrap(lines_store, at, [b.guard or "" for b in acc if b.array == a.array and b.store], i2)
            if a.store:
                body_edits.append(Edit(a.node.start_byte, a.node.end_byte, element(stores[a.array], a.array)))
                continue
        if key not in loads:
            v = f"astra_v{len(loads)}{sfx}"
            loads[key] = v
            at = len(lines_load)
            declare(v, a.array, a.base, const=True)
            guards.wrap(lines_load, at, [b.guard or "" for b in acc if (b.array, b.base) == key], i2)
        body_edits.append(Edit(a.node.start_byte, a.node.end_byte, element(loads[key], a.array)))
    bases = sorted({(a.array, a.base) for a in acc})
    conds = [f"reinterpret_cast<size_t>({_at(arr, b)}) % {width} == 0" for arr, b in bases]
    conds += [_apart(w, wb, r, rng, f"astra_n{sfx}") for w, wb, r, rng in plan.checks]
    conds += guards.template_sizes(m.loop, {a.array: (hs[a.array].elem, hs[a.array].size) for a in acc})
    aligned = " &&\n".join(f"{i1}    {c}".replace("\n       ", f"\n{i1}       ") for c in conds)
    # The body, with vectorized accesses replaced, re-indented under the unrolled loop.
    b = m.body
    # Aliases (`idx = base + i`) and `i` itself may be left unused once accesses are vectors.
    replaced = [(a.node.start_byte, a.node.end_byte) for a in acc]

    def live(name: str, skip: Node | None = None) -> bool:
        return any(n.type == "identifier" and txt(n) == name and
                   not any(s <= n.start_byte < e for s, e in replaced) and
                   not (skip is not None and skip.start_byte <= n.start_byte < skip.end_byte)
                   for n in walk(b))
    for stmt in b.named_children:
        if stmt.type == "declaration":
            names = [declared_name(d)[0] for d in stmt.children_by_field_name("declarator")]
            if names and all(n in m.aliases and not live(n, stmt) for n in names):
                body_edits.append(Edit(stmt.start_byte, stmt.end_byte, ""))
                replaced.append((stmt.start_byte, stmt.end_byte))
    need_var = live(m.var)
    rel = [Edit(e.start - b.start_byte, e.end - b.start_byte, e.text) for e in body_edits]
    inner = apply_edits(txt(b), rel).replace("\n" + ind, "\n" + i3)
    inner = "\n".join(line for line in inner.split("\n") if line.strip())
    var = m.var
    if wide:
        # the body's statements beside `i`'s declaration: the body may not redeclare `i` anyway
        stmts = data[b.children[0].end_byte:b.children[-1].start_byte].decode("utf-8").strip("\n").rstrip()
        tail_body = stmts.replace("\n" + ind + "  ", "\n" + i2).lstrip()
        tail = (f"{i1}for (long long astra_j{sfx} = astra_vec_end{sfx} + {_paren(m.start)}; astra_j{sfx} < astra_n{sfx}; "
                f"astra_j{sfx} += {m.stride}) {{\n{i2}const {T} {var} = static_cast<{T}>(astra_j{sfx});\n"
                f"{i2}{tail_body}\n{i1}}}")
    else:   # the user's loop, from where the vector steps end
        first = m.loop.child_by_field_name("initializer").children_by_field_name("declarator")[0].child_by_field_name("value")
        tail = (data[m.loop.start_byte:first.start_byte].decode("utf-8") + f"astra_vec_end{sfx} + {_paren(m.start)}"
                + data[first.end_byte:m.loop.end_byte].decode("utf-8"))
        tail = i1 + tail.replace("\n" + ind, "\n" + i1)
    head = (f"for ({C} astra_i0{sfx} = {cast}{_paren(m.start)} * astra_vec{sfx}; astra_i0{sfx} < astra_vec_end{sfx};"
            f"\n{i1}     astra_i0{sfx} += {cast}{_paren(m.stride)} * astra_vec{sfx}) {{")
    if len(i1 + head.replace("astra_", "").replace(f"\n{i1}    ", "")) <= 100:   # as long as the offered text shows it
        head = head.replace(f"\n{i1}    ", "")
    own = [*dict.fromkeys(f'`{t.split(chr(60))[0]}`' for t in alias), *(f"`{u}`" for u in used)]
    of = f" with the project's {', '.join(own)}" if own else ""
    why = (f"{i1}// vector path only for aligned rows whose written range is apart from what is read\n"
           if plan.checks else "")
    return (
        f"// astra: {vec} elements per step in {width}-byte loads and stores{of} (fewer, wider memory accesses); "
        f"the loop after it takes the rest\n"
        + ("" if flat else f"{ind}{{\n") +
        f"{i1}constexpr int astra_vec{sfx} = {vec};\n"
        + "".join(f"{i1}using {a} = {t};\n" for t, a in alias.items()) +
        f"{i1}const {C} astra_n{sfx} = {txt(m.bound)};\n"
        + why +
        f"{i1}const bool astra_aligned{sfx} =\n{aligned};\n"
        f"{i1}const {C} astra_vec_end{sfx} = astra_aligned{sfx} ? astra_n{sfx} / astra_vec{sfx} * astra_vec{sfx} : 0;\n"
        f"{i1}{head}\n"
        + "\n".join([*(f"{i2}{t} {', '.join(vs)};" for t, vs in plain.items()), *decls]) + "\n"
        + "\n".join(lines_load) + ("\n" if lines_load else "")
        + f"{i2}#pragma unroll\n"
        f"{i2}for (int astra_k{sfx} = 0; astra_k{sfx} < astra_vec{sfx}; ++astra_k{sfx}) {{\n"
        + (f"{i3}const {T} {var} = {elem_index};\n" if need_var else "") +
        f"{i3}{inner}\n"
        f"{i2}}}\n"
        + "\n".join(lines_store) + ("\n" if lines_store else "")
        + f"{i1}}}\n"
        + tail + ("" if flat else f"\n{ind}}}")
    )

"""Vector steps for one-element-per-thread kernels that split the flat index into a row and a
column by division (coarsen.py's sibling for what it cannot vectorize):

    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < N) {
        int bt = idx / C;  int c = idx % C;  ...row values (may read memory)...
        out[row_base + c] = f(wte[ix * C + c], wpe[t * C + c], ...);
    }

becomes a grid-stride loop over steps of VEC consecutive elements. A step starts at a multiple of
VEC, so when `C % VEC == 0` its elements share one row (`idx / C` is the step's) and their columns
are `idx % C + k`: the row values are computed once, every `P[row_base + c]` is one 16-byte
access, and the store is one vector. The last partial step, every step where `C` is not a
multiple of VEC, and a thread's steps from its first misaligned one on run the original body
element by element in a loop of their own — the same result for any input and any launch.

Only this shape is taken: declarations, then one plain store; the column name used only as
`base + c` subscripts of the kernel's pointers (bases free of it), the flat index only in the
`/` and `%` split, no write through another pointer and no read of the written one. The elements
were each a thread of their own, so computing a step's row values once (one read of `inp[...]`
instead of VEC) and loading before storing reorder only what were races between threads.
"""
from __future__ import annotations

from dataclasses import dataclass

from tree_sitter import Node

from . import base, helpers
from .base import Context
from .tree import Edit, apply_edits, declared_name, is_lvalue, line_indent, squashed, txt, unparenthesized, walk
from .vectorize import CHUNK, Handle, handles, read_only

MUTATING = {"assignment_expression", "update_expression"}


@dataclass
class Split:
    lane: str                 # the column name (`c`, from `idx % C`)
    divisor: str              # `C`
    prefix: list[Node]        # the declarations, in order (the split ones included)
    store: Node               # the assignment expression `P[base + c] = value`
    accesses: list[tuple[Node, str, str]]   # (subscript, array, index text at the step's first element)


def _split_decl(st: Node, var: str) -> tuple[str, str, str] | None:
    """(name, operator, divisor) for `T name = var / D;` or `T name = var % D;`."""
    ds = st.children_by_field_name("declarator")
    if st.type != "declaration" or len(ds) != 1 or ds[0].type != "init_declarator":
        return None
    v = unparenthesized(ds[0].child_by_field_name("value"))
    if v.type != "binary_expression" or txt(v.child_by_field_name("operator")) not in ("/", "%"):
        return None
    if txt(unparenthesized(v.child_by_field_name("left"))) != var:
        return None
    name, is_ptr = declared_name(ds[0])
    return (name, txt(v.child_by_field_name("operator")), squashed(v.child_by_field_name("right"))) \
        if name and not is_ptr else None


def _lane_offset(idx: Node, lane: str) -> bool:
    """`idx` is `lane`, `base + lane` or `lane + base` with `base` free of `lane`."""
    e = unparenthesized(idx)
    if e.type == "identifier":
        return txt(e) == lane
    if e.type != "binary_expression" or txt(e.child_by_field_name("operator")) != "+":
        return False
    left, right = e.child_by_field_name("left"), e.child_by_field_name("right")
    uses = lambda n: any(c.type == "identifier" and txt(c) == lane for c in walk(n))  # noqa: E731
    return (_lane_offset(left, lane) and not uses(right)) or (_lane_offset(right, lane) and not uses(left))


def _same(a: Node, b: Node) -> bool:
    return (a.start_byte, a.end_byte, a.type) == (b.start_byte, b.end_byte, b.type)   # nodes are made anew


def _index(sub: Node) -> Node | None:
    idx = sub.child_by_field_name("indices") or sub.child_by_field_name("index")
    if idx is not None and idx.type == "subscript_argument_list":
        idx = idx.named_children[0] if len(idx.named_children) == 1 else None
    return idx


def match(work: list[Node], var: str, hs: dict[str, Handle]) -> Split | None:
    """The split shape in the guarded work of an elementwise kernel (see the module docstring)."""
    if not work or work[-1].type != "expression_statement":
        return None
    prefix, last = work[:-1], work[-1]
    if any(st.type != "declaration" for st in prefix):
        return None
    splits = {}
    for st in prefix:
        s = _split_decl(st, var)
        if s is not None:
            splits[s[0]] = s
    lanes = [s for s in splits.values() if s[1] == "%"]
    if len(lanes) != 1 or any(s[2] != lanes[0][2] for s in splits.values()):
        return None
    lane, divisor = lanes[0][0], lanes[0][2]
    dnode = next(unparenthesized(st.children_by_field_name("declarator")[0].child_by_field_name("value"))
                 .child_by_field_name("right") for st in prefix if _split_decl(st, var) == lanes[0])
    local = {declared_name(d)[0] for st in prefix for d in st.children_by_field_name("declarator")}
    if any(n.type in ("call_expression", "subscript_expression", "field_expression", *MUTATING) or
           n.type == "identifier" and txt(n) in local for n in walk(dnode)):
        return None     # the divisor is tested before the step's values exist: names and constants only
    split_nodes = {st.id for st in prefix if _split_decl(st, var) is not None}
    for st in prefix:
        if any(n.type in MUTATING for n in walk(st)):
            return None
        if st.id in split_nodes:
            continue
        names = {txt(n) for n in walk(st) if n.type == "identifier"}
        if var in names or lane in names:
            return None     # a row value must be the same for the step's elements
        if any(declared_name(d)[1] for d in st.children_by_field_name("declarator")):
            return None
    store = last.named_children[0] if last.named_children else None
    if store is None or store.type != "assignment_expression" or txt(store.child_by_field_name("operator")) != "=":
        return None
    lhs, rhs = unparenthesized(store.child_by_field_name("left")), store.child_by_field_name("right")
    if lhs.type != "subscript_expression" or any(n.type in MUTATING or n.type == "call_expression" and
                                                 "atomic" in txt(n.child_by_field_name("function"))
                                                 for n in walk(rhs)):
        return None
    written = txt(lhs.child_by_field_name("argument"))
    if written not in hs or hs[written].root != written:
        return None
    accesses, covered = [], []
    for n in [lhs] + [c for c in walk(rhs) if c.type == "subscript_expression"]:
        arr, idx = n.child_by_field_name("argument"), _index(n)
        if arr is None or arr.type != "identifier" or txt(arr) not in hs or idx is None:
            return None
        uses_lane = any(c.type == "identifier" and txt(c) == lane for c in walk(idx))
        if not _same(n, lhs) and txt(arr) == written:
            return None     # the written array read back
        if not uses_lane:
            continue        # the same element for the whole step: read per element, as before
        if not _lane_offset(idx, lane) or hs[txt(arr)].size is None:
            return None
        accesses.append((n, txt(arr), txt(idx)))
        covered.append((idx.start_byte, idx.end_byte))
    # The column name appears only inside the vectorized subscripts; the flat index nowhere else.
    for n in walk(store):
        if n.type == "identifier" and txt(n) in (lane, var) and \
                not any(s <= n.start_byte < e for s, e in covered):
            return None
        if n.type == "subscript_expression" and is_lvalue(n) and not _same(n, lhs):
            return None
    if len({hs[a].size for _, a, _ in accesses}) != 1 or not any(_same(n, lhs) for n, _, _ in accesses):
        return None
    return Split(lane, divisor, prefix, store, accesses)


def emit(text: str, el, sp: Split, hs: dict[str, Handle], width: int, kernel_start: int = 0,
         headers: tuple[str, ...] = (), unwritten: frozenset[str] | set[str] = frozenset()) -> tuple[str, int]:
    """The kernel text with `decl; mid; guard; work` replaced by the vector-step loop, and the
    elements per step. Registers are the project's own element pack where it has one, moved by
    its own load/store helpers where it has them (vectorize.py)."""
    data = text.encode("utf-8")
    size = hs[sp.accesses[0][1]].size
    vec = width // size
    chunk = CHUNK[width]
    ind = line_indent(data, el.decl.start_byte)
    i1, i2 = ind + "  ", ind + "    "
    T = el.var_type

    def reindent(st: Node, to: str) -> str:
        return to + txt(st).replace("\n" + line_indent(data, st.start_byte), "\n" + to)
    packs = {a: helpers.pack_for(text, kernel_start, hs[a].elem, vec, "astra_vec", headers) for _, a, _ in sp.accesses}
    own = all(p is not None for p in packs.values())
    found = helpers.movers(text, kernel_start, headers)

    def move(kind: str, arr: str) -> helpers.Mover | None:
        return helpers.mover(found, kind, packs[arr][0] if own else chunk, width, arr in unwritten)  # type: ignore[index]
    regs: dict[tuple[str, str], str] = {}
    loads: list[str] = []
    lhs = unparenthesized(sp.store.child_by_field_name("left"))

    def element(arr: str, reg: str) -> str:
        return f"{reg}.{packs[arr][1]}[astra_k]" if own else f"{reg}[astra_k]"  # type: ignore[index]
    for n, arr, idx in sp.accesses:
        if _same(n, lhs) or (arr, idx) in regs:
            continue
        regs[(arr, idx)] = f"astra_v{len(regs)}"
        h, reg = move("load", arr), regs[(arr, idx)]
        if own:
            t = packs[arr][0]  # type: ignore[index]
            src = f"reinterpret_cast<const {t}*>(&{arr}[{idx}])"
            loads.append(f"{i1}const {t} {reg} = *{src};" if h is None else
                         f"{i1}const {t} {reg} = {h.name}({src});" if h.kind == "load_value" else
                         f"{i1}{t} {reg};\n{i1}{h.load(reg, src)}")
            continue
        src = f"reinterpret_cast<const {chunk}*>(&{arr}[{idx}])"
        loads.append(f"{i1}alignas(16) {hs[arr].elem} {reg}[astra_vec];\n" +
                     (f"{i1}*reinterpret_cast<{chunk}*>({reg}) = *{src};" if h is None else
                      f"{i1}{h.load(f'*reinterpret_cast<{chunk}*>({reg})', src)}"))
    out_arr, out_idx = next((a, i) for n, a, i in sp.accesses if _same(n, lhs))
    rhs = sp.store.child_by_field_name("right")
    value = data[rhs.start_byte:rhs.end_byte]
    for n, arr, idx in sorted((x for x in sp.accesses if not _same(x[0], lhs)), key=lambda x: -x[0].start_byte):
        value = value[:n.start_byte - rhs.start_byte] + element(arr, regs[(arr, idx)]).encode() + \
            value[n.end_byte - rhs.start_byte:]
    st = move("store", out_arr)
    t_out = packs[out_arr][0] if own else chunk  # type: ignore[index]
    dst, reg_out = f"reinterpret_cast<{t_out}*>(&{out_arr}[{out_idx}])", "astra_s" if own else f"*reinterpret_cast<{chunk}*>(astra_s)"
    put = st.store(reg_out, dst) if st is not None else \
        f"*{dst} = astra_s;" if own else f"*{dst} = *reinterpret_cast<const {chunk}*>(astra_s);"
    aligned = " &&\n".join(f"{i2}reinterpret_cast<size_t>(&{a}[{i}]) % {width} == 0"
                           for a, i in dict.fromkeys((a, i) for _, a, i in sp.accesses))
    prefix = "\n".join(reindent(st, i1) for st in sp.prefix)
    work = "\n".join(reindent(st, i2) for st in sp.prefix + [sp.store.parent])
    mid = "".join(reindent(st, ind) + "\n" + ind for st in el.mid)[len(ind):]
    # The vector loop holds no element-by-element code: with the fallback inside it the kernel ran
    # ~20% slower on an H100 (the bf16 embedding gather, 30.4 vs 25.0 µs). A thread leaves it at its
    # first misaligned step and finishes its steps one element at a time below. The fallback's inner
    # loop (at most VEC trips) is kept rolled: fully unrolled it took the kernel from 32 to 39
    # registers and 100% to 75% occupancy: 81.7 vs 74.8 µs at B = 128 on an H100 (tuned, 4 steps).
    loop = (
        f"{mid}// astra: {vec} elements per step in {width}-byte vectors where `{sp.divisor}` is a multiple of "
        f"{vec}\n{ind}// (a step's elements then share `{el.var} / {sp.divisor}`); element by element elsewhere\n"
        f"{ind}constexpr int astra_vec = {vec};\n"
        f"{ind}const long long astra_n = {el.bound};\n"
        f"{ind}const long long astra_stride = static_cast<long long>(blockDim.x) * gridDim.x * astra_vec;\n"
        f"{ind}const long long astra_vec_n = ({sp.divisor}) > 0 && ({sp.divisor}) % astra_vec == 0 ? "
        f"astra_n / astra_vec * astra_vec : 0;\n"
        f"{ind}long long astra_i0 = static_cast<long long>({el.start}) * astra_vec;\n"
        f"{ind}for (; astra_i0 < astra_vec_n; astra_i0 += astra_stride) {{\n"
        f"{i1}const {T} {el.var} = static_cast<{T}>(astra_i0);\n"
        f"{prefix}\n"
        f"{i1}if (!(\n{aligned}))\n"
        f"{i2}break;   // this step and the thread's later ones: element by element below\n"
        + "\n".join(loads) + "\n"
        + (f"{i1}{packs[out_arr][0]} astra_s;\n" if own else  # type: ignore[index]
           f"{i1}alignas(16) {hs[out_arr].elem} astra_s[astra_vec];\n") +
        f"{i1}#pragma unroll\n"
        f"{i1}for (int astra_k = 0; astra_k < astra_vec; ++astra_k) {element(out_arr, 'astra_s')} = {value.decode()};\n"
        + f"{i1}{put}\n" +
        f"{ind}}}\n"
        f"{ind}// astra: element by element: the last partial step, every step where `{sp.divisor}` is not a "
        f"multiple of {vec},\n{ind}// and a thread's steps from its first misaligned one on\n"
        f"{ind}for (; astra_i0 < astra_n; astra_i0 += astra_stride) {{\n"
        f"{i1}#pragma unroll 1   // kept rolled: unrolled it costs the vector loop registers (occupancy)\n"
        f"{i1}for (long long astra_j = astra_i0; astra_j < astra_i0 + astra_vec && astra_j < astra_n; ++astra_j) {{\n"
        f"{i2}const {T} {el.var} = static_cast<{T}>(astra_j);\n"
        f"{work}\n"
        f"{i1}}}\n"
        f"{ind}}}")
    end = max([el.guard.end_byte] + [st.end_byte for st in el.work])
    return apply_edits(text, [Edit(el.decl.start_byte, end, loop)]), vec


def apply(text: str, ctx: Context, sc: base.Scope, el, width: int) -> tuple[str, tuple[str, ...], int] | None:
    """(the kernel rewritten, what changed, elements per step), or None where the shape is not there."""
    if width not in CHUNK:
        return None
    hs = handles(sc.kernel, ctx, sc.root)
    sp = match(el.work, el.var, hs)
    if sp is None or width // hs[sp.accesses[0][1]].size < 2 or width % hs[sp.accesses[0][1]].size:
        return None
    new, vec = emit(text, el, sp, hs, width, sc.kernel.start_byte, ctx.headers, read_only(sc.kernel, hs))
    arrays = ", ".join(f"`{a}`" for a in dict.fromkeys(a for _, a, _ in sp.accesses))
    return new, (f"one element per thread with the index split by `{sp.divisor}` (`/`, `%`) became a grid-stride "
                 f"loop of {vec}-element steps: the row values once per step, {width}-byte accesses to {arrays} "
                 f"where `{sp.divisor}` is a multiple of {vec} and the vectors are aligned, element by element "
                 f"elsewhere",), vec

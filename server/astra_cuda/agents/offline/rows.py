"""Row reductions: one thread per row -> `blockDim.x` threads per row, with shuffle reductions.

Recognises the naive row kernel (norms, softmax, losses):

    T row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < N) {                       // or: if (row >= N) return;
      ... for (int j = 0; j < C; j++) { acc += f(x[j]); }  ...  out[row * C + j] = ...
    }

Each row loop becomes `for (int j = threadIdx.x; j < C; j += blockDim.x)`; after it, every
accumulator the loop carries is combined across the row's threads: sums (`+=`, `-=`,
`a = a + e`), maxima and minima (`fmaxf(a, e)`, `a = e > a ? e : a`, `if (e > a) a = e;`), and the
online-softmax pair (a running max `m` and a sum rescaled as `s = s * expf(m_old - m_new) + ...`:
partial sums are rescaled to the row's max before they are added). Writes outside the loops are
made by the row's first thread only; a loop reading what an earlier loop wrote waits at a barrier
first (a later vectorization may hand an element to another thread).

Launch: block (T, R) — T threads per row, R rows per block (R = 1 when T > 32) — and grid
cdiv(N, R); the spec and every launch site change together. T is the tuning stage's parameter.
Floating-point sums are reassociated: the gate's tolerances decide whether that is acceptable.
"""
from __future__ import annotations

from dataclasses import dataclass

from tree_sitter import Node

from ...model import source
from ...model.launch_change import relaunch, side_effect_free
from . import base, style
from .base import Context, Edit, Rewrite
from .coarsen import Elementwise, match_elementwise, may_repeat
from .tree import (apply_edits, assigned_names, callee, declared_name, declared_names, is_lvalue, line_indent,
                   txt, walk)
from .tree import params as fn_params, unparenthesized
from .loops import StridedLoop

MAXES = {"fmaxf", "fmax", "max", "__hmax", "std::max"}
MINS = {"fminf", "fmin", "min", "__hmin", "std::min"}
EXPS = {"expf", "__expf", "exp", "exp2f", "hexp"}
IDENTITY = {"sum": "0", "max": "-__int_as_float(0x7f800000)", "min": "__int_as_float(0x7f800000)"}  # 0, -inf, inf
THREADS = (32, 64, 128, 256, 512, 1024)

REDUCE = """// astra: reductions across the threads of one row (blockDim.x of them: one warp, or several warps
// when a block holds one row). Every thread of the row gets the result.
template <typename T>
__device__ __forceinline__ T astra_row_reduce(T v, int op) {
  #pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const T w = __shfl_xor_sync(0xffffffffu, v, o);
    v = op == 0 ? v + w : op == 1 ? (w > v ? w : v) : (w < v ? w : v);
  }
  if (blockDim.x > 32) {
    __shared__ T astra_part[32];
    const unsigned lane = threadIdx.x % 32u, warp = threadIdx.x / 32u, warps = (blockDim.x + 31u) / 32u;
    __syncthreads();  // the previous reduction's readers are done with the partials
    if (lane == 0) astra_part[warp] = v;
    __syncthreads();
    v = lane < warps ? astra_part[lane] : op == 0 ? T(0) : astra_part[0];  // max/min: a repeat is harmless
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const T w = __shfl_xor_sync(0xffffffffu, v, o);
      v = op == 0 ? v + w : op == 1 ? (w > v ? w : v) : (w < v ? w : v);
    }
  }
  return v;
}
"""
# What the rewritten kernel calls, each written into the file only where it is used and not there yet.
WRAPPERS = {
    "astra_row_sum": "template <typename T> __device__ __forceinline__ T astra_row_sum(T v) { return astra_row_reduce(v, 0); }\n",
    "astra_row_max": "template <typename T> __device__ __forceinline__ T astra_row_max(T v) { return astra_row_reduce(v, 1); }\n",
    "astra_row_min": "template <typename T> __device__ __forceinline__ T astra_row_min(T v) { return astra_row_reduce(v, 2); }\n",
    "astra_row_sync": "// the row's threads see each other's writes (a later loop may give an element to another thread)\n"
                      "__device__ __forceinline__ void astra_row_sync() {\n"
                      "  if (blockDim.x > 32) __syncthreads(); else __syncwarp();\n}\n",
}


def helpers_for(kernel_text: str, file_text: str) -> str:
    """The row helpers `kernel_text` calls that `file_text` does not define yet (no unused ones)."""
    used = [w for w in WRAPPERS if f"{w}(" in kernel_text and f"{w}(" not in file_text]
    core = REDUCE if any(w != "astra_row_sync" for w in used) and "astra_row_reduce(" not in file_text else ""
    return core + "".join(WRAPPERS[w] for w in used) + ("\n" if used else "")


@dataclass
class Accumulator:
    name: str
    kind: str          # 'sum' | 'max' | 'min' | 'online' (a sum rescaled with a running max)
    partner: str = ""  # online: the running max it is rescaled with
    exp: str = "expf"


def _row_loop(n: Node, changed: set[str]) -> tuple[str, str] | None:
    """(var, bound) of `for (int j = 0; j < C; j++)` with C not changed in the row (`changed`:
    the names the row's statements assign)."""
    if n.type != "for_statement":
        return None
    init, cond, upd = (n.child_by_field_name(f) for f in ("initializer", "condition", "update"))
    if init is None or cond is None or upd is None or init.type != "declaration":
        return None
    ds = init.children_by_field_name("declarator")
    if len(ds) != 1 or ds[0].type != "init_declarator" or txt(ds[0].child_by_field_name("value")).strip() not in (
            "0", "0u", "0L", "0l"):
        return None
    var = txt(ds[0].child_by_field_name("declarator"))
    if cond.type != "binary_expression" or txt(cond.child_by_field_name("operator")) != "<" or \
            txt(cond.child_by_field_name("left")) != var:
        return None
    bound = cond.child_by_field_name("right")
    if any(c.type == "identifier" and txt(c) in changed for c in walk(bound)) or \
            any(c.type in ("call_expression", "subscript_expression") for c in walk(bound)):
        return None
    step = "".join(txt(c) for c in walk(upd) if c.child_count == 0)
    if step not in (f"{var}++", f"++{var}", f"{var}+=1", f"{var}={var}+1"):
        return None
    return var, txt(bound)


def _cmp_target(cond: Node | None, acc: str) -> tuple[str, str] | None:
    """For `e > acc` / `acc < e`: ('max', e); for `e < acc` / `acc > e`: ('min', e)."""
    while cond is not None and cond.type in ("parenthesized_expression", "condition_clause") and cond.named_children:
        cond = cond.named_children[-1]
    if cond is None or cond.type != "binary_expression":
        return None
    op = txt(cond.child_by_field_name("operator"))
    left, right = txt(cond.child_by_field_name("left")), txt(cond.child_by_field_name("right"))
    if op in (">", ">=") and right == acc:
        return "max", left
    if op in ("<", "<=") and left == acc:
        return "max", right
    if op in ("<", "<=") and right == acc:
        return "min", left
    if op in (">", ">=") and left == acc:
        return "min", right
    return None


def _mentions(n: Node | None, name: str) -> bool:
    return n is not None and any(c.type == "identifier" and txt(c) == name for c in walk(n))


def _classify(a: Node, acc: str, temps: dict[str, Node]) -> tuple[str, str] | None:
    """The kind of one assignment to accumulator `acc` ('sum'/'max'/'min'/'online'), with the
    exp function an online update uses."""
    op = txt(a.child_by_field_name("operator"))
    rhs = a.child_by_field_name("right")
    if op in ("+=", "-="):
        return ("sum", "") if not _mentions(rhs, acc) else None
    if op != "=" or rhs is None:
        return None
    r = unparenthesized(rhs)
    if r.type == "identifier" and txt(r) in temps:           # m = mn, with const mn = fmaxf(m, x)
        r = unparenthesized(temps[txt(r)])
    if r.type == "binary_expression" and txt(r.child_by_field_name("operator")) == "+":
        left, right = unparenthesized(r.child_by_field_name("left")), unparenthesized(r.child_by_field_name("right"))
        for x, y in ((left, right), (right, left)):
            if x.type == "identifier" and txt(x) == acc and not _mentions(y, acc):
                return "sum", ""
            # online: acc * EXP(old - new) + rest
            if x.type == "binary_expression" and txt(x.child_by_field_name("operator")) == "*" and not _mentions(y, acc):
                f, g = unparenthesized(x.child_by_field_name("left")), unparenthesized(x.child_by_field_name("right"))
                for u, v in ((f, g), (g, f)):
                    if u.type == "identifier" and txt(u) == acc and v.type == "call_expression" and callee(v) in EXPS:
                        return "online", callee(v)
    if r.type == "call_expression" and callee(r) in MAXES | MINS:
        args = [c for c in r.child_by_field_name("arguments").named_children if c.type != "comment"]
        if len(args) == 2 and sum(txt(unparenthesized(x)) == acc for x in args) == 1 and \
                not any(_mentions(x, acc) for x in args if txt(unparenthesized(x)) != acc):
            return ("max" if callee(r) in MAXES else "min"), ""
    if r.type == "conditional_expression":
        t = _cmp_target(r.child_by_field_name("condition"), acc)
        if t is not None and txt(unparenthesized(r.child_by_field_name("consequence"))) == t[1] and \
                txt(unparenthesized(r.child_by_field_name("alternative"))) == acc:
            return t[0], ""
    # `if (e > acc) acc = e;`
    p = a.parent
    while p is not None and p.type in ("expression_statement", "compound_statement"):
        p = p.parent
    if p is not None and p.type == "if_statement":
        t = _cmp_target(p.child_by_field_name("condition"), acc)
        if t is not None and t[1] == txt(r):
            return t[0], ""
    return None


def accumulators(loop: Node, var: str) -> dict[str, Accumulator] | None:
    """What a row loop carries from one element to the next (None when it is not a reduction)."""
    b = loop.child_by_field_name("body")
    local = declared_names(b) | {var}
    temps: dict[str, Node] = {}
    for n in walk(b):
        if n.type == "declaration":
            for d in n.children_by_field_name("declarator"):
                name, _ = declared_name(d)
                v = d.child_by_field_name("value") if d.type == "init_declarator" else None
                if name and v is not None:
                    temps[name] = v
    kinds: dict[str, set[tuple[str, str]]] = {}
    for n in walk(b):
        if n.type in ("break_statement", "return_statement", "goto_statement", "for_statement",
                      "while_statement", "do_statement"):
            return None
        if n.type == "update_expression":
            arg = n.child_by_field_name("argument")
            if arg is not None and arg.type == "identifier" and txt(arg) not in local:
                return None
        if n.type != "assignment_expression":
            continue
        left = n.child_by_field_name("left")
        if left is None or left.type != "identifier" or txt(left) in local:
            continue
        k = _classify(n, txt(left), temps)
        if k is None:
            return None
        kinds.setdefault(txt(left), set()).add(k)
    out: dict[str, Accumulator] = {}
    maxes = [a for a, ks in kinds.items() if {k for k, _ in ks} == {"max"}]
    for a, ks in kinds.items():
        names = {k for k, _ in ks}
        if len(names) == 1 and names <= {"sum", "max", "min"}:
            out[a] = Accumulator(a, next(iter(names)))
        elif names <= {"online", "sum"} and "online" in names and len(maxes) == 1:
            out[a] = Accumulator(a, "online", maxes[0], next(e for k, e in ks if k == "online"))
        else:
            return None
    # Accumulators are read only by their own updates (or, for the online pair, each other's).
    for n in walk(b):
        if n.type != "identifier" or txt(n) not in out:
            continue
        acc = out[txt(n)]
        if acc.kind == "online" or any(o.kind == "online" and o.partner == acc.name for o in out.values()):
            continue
        if not _in_own_update(n, acc.name):
            return None
    for a in out.values():   # a sum may not read another accumulator the loop changes (unless online)
        if a.kind != "online":
            for n in walk(b):
                if n.type == "assignment_expression" and txt(n.child_by_field_name("left")) == a.name and \
                        any(_mentions(n.child_by_field_name("right"), o) for o in out if o != a.name):
                    return None
    return out


def _in_own_update(n: Node, acc: str) -> bool:
    p = n
    while p is not None and p.type not in ("expression_statement", "if_statement", "declaration",
                                           "compound_statement"):
        if p.type == "assignment_expression" and txt(p.child_by_field_name("left")) == acc:
            return True
        p = p.parent
    if p is not None and p.type == "if_statement":
        return True   # the comparison of `if (e > acc) acc = e;`
    return False


def _writes(n: Node) -> list[Node]:
    return [c for c in walk(n) if c.type == "subscript_expression" and is_lvalue(c)] + \
           [c for c in walk(n) if c.type == "pointer_expression" and txt(c.child(0)) == "*" and is_lvalue(c)]


def _roots(n: Node) -> tuple[set[str], set[str]]:
    """(names written through, names read through) by subscripts in n."""
    w, r = set(), set()
    for c in walk(n):
        if c.type == "subscript_expression":
            (w if is_lvalue(c) else r).add(txt(c.child_by_field_name("argument")))
    return w, r


class Rows(base.Transform):
    name = "rows"
    reorders_sums = True
    title = "a warp or a block per row with shuffle reductions (was one thread per row)"
    note = "a warp or a block per row instead of one thread, so loads coalesce"
    expected = ("one thread walking a whole row serialises the row and leaves loads uncoalesced: a row's "
                "threads read consecutive elements and combine partial results with shuffles")

    def rewrite(self, text: str, ctx: Context, sc: base.Scope, params: dict) -> Rewrite | None:
        spec = sc.spec
        if spec is None or len(spec.grid) != 1 or len(spec.block) != 1:
            return None
        kernel = sc.model.kernel(ctx.kernel)
        if kernel is None or kernel.launch_bounds:
            return None
        el = match_elementwise(sc.kernel)
        if el is None or not may_repeat(el, sc):
            return None
        names = [declared_name(p.child_by_field_name("declarator"))[0] for p in fn_params(sc.kernel)]
        rows_expr = _rows_expr(el, names)
        spec_rows = base.substitute(rows_expr, ctx.scalar_exprs) if rows_expr else None
        if spec_rows is None:
            return None
        changed = set().union(*(assigned_names(s) for s in el.work)) if el.work else set()
        loops = []
        for st in el.work:
            rl = _row_loop(st, changed)
            if rl is not None:
                accs = accumulators(st, rl[0])
                if accs is None:
                    return None
                lp = StridedLoop(st, rl[0], "int", st.child_by_field_name("condition").child_by_field_name("right"))
                for w in _writes(st.child_by_field_name("body")):
                    if w.type != "subscript_expression":
                        return None
                    idx = w.child_by_field_name("indices") or w.child_by_field_name("index") or w.named_children[-1]
                    if idx.type == "subscript_argument_list":
                        idx = idx.named_children[0]
                    if lp.offset_base(idx) is None:
                        return None   # each element must be written by the thread that owns it
                loops.append((st, rl, accs))
            elif any(n.type in ("for_statement", "while_statement", "do_statement") for n in walk(st)):
                return None
        if not loops:
            return None
        # Threads per row: two warps for rows up to 1024 elements (an H100 ran a 1024-float online
        # softmax at 70% of the copy ceiling with 64 threads per row, 63% with 32), more for longer rows.
        n = max((ctx.row_elements.get(rl[1], 0) for _, rl, _ in loops), default=0)
        default_t = 32 if n <= 256 else 64 if n <= 1024 else 128 if n <= 4096 else 256
        t = int((params or {}).get("threads", default_t))
        if t not in THREADS:
            return None
        r = 256 // t if t < 256 else 1
        r = 1 if t > 32 else r
        data = text.encode("utf-8")
        edits: list[Edit] = []
        # The row index: blockIdx.x picks R rows, threadIdx.y one of them.
        value = el.decl.children_by_field_name("declarator")[0].child_by_field_name("value")
        edits.append(Edit(value.start_byte, value.end_byte, "blockIdx.x * blockDim.y + threadIdx.y"))
        ind = line_indent(data, el.decl.start_byte)
        edits.append(Edit(el.decl.start_byte, el.decl.start_byte,
                          f"// astra: blockDim.x threads per row, blockDim.y rows per block (was one thread per "
                          f"row)\n{ind}"))
        written_before: set[str] = set()
        for st in el.work:
            loop = next((lp for lp in loops if lp[0] == st), None)
            sind = line_indent(data, st.start_byte)
            if loop is None:
                if _writes(st):
                    if st.type != "expression_statement":
                        return None
                    edits.append(Edit(st.start_byte, st.end_byte, f"if (threadIdx.x == 0) {txt(st)}"))
                written_before |= _roots(st)[0]
                continue
            _, (var, bound), accs = loop
            init = st.child_by_field_name("initializer")
            ds = init.children_by_field_name("declarator")[0]
            edits.append(Edit(ds.child_by_field_name("value").start_byte, ds.child_by_field_name("value").end_byte,
                              "threadIdx.x"))
            upd = st.child_by_field_name("update")
            edits.append(Edit(upd.start_byte, upd.end_byte, f"{var} += blockDim.x"))
            w, rd = _roots(st)
            pre = ""
            if (rd | w) & written_before:
                pre = f"astra_row_sync();\n{sind}"
            written_before |= w
            saves, combine = [], []
            for a in accs.values():
                if a.kind == "online":
                    continue
                if any(o.kind == "online" and o.partner == a.name for o in accs.values()):
                    continue
                if not _identity_before(el.work, st, a):
                    saves.append(a)
            for a in saves:
                pre += f"const auto astra_{a.name}_before = {a.name};\n{sind}{a.name} = {IDENTITY[a.kind]};\n{sind}"
            for a in accs.values():
                if a.kind in ("sum", "max", "min") and not any(o.kind == "online" and o.partner == a.name
                                                                for o in accs.values()):
                    red = f"astra_row_{a.kind}({a.name})"
                    if a in saves:
                        red = {"sum": f"astra_{a.name}_before + {red}",
                               "max": f"fmaxf(astra_{a.name}_before, {red})",
                               "min": f"fminf(astra_{a.name}_before, {red})"}[a.kind]
                    combine.append(f"{a.name} = {red};")
                elif a.kind == "online":
                    m, s = a.partner, a.name
                    if not _identity_before(el.work, st, Accumulator(m, "max")) or \
                            not _identity_before(el.work, st, Accumulator(s, "sum")):
                        return None
                    combine.append(f"{{  // rescale each thread's sum to the row's max, then add them\n"
                                   f"{sind}  const auto astra_m = astra_row_max({m});\n"
                                   f"{sind}  {s} = astra_row_sum({m} == astra_m ? {s} : {s} * {a.exp}({m} - astra_m));\n"
                                   f"{sind}  {m} = astra_m;\n{sind}}}")
            if pre:
                edits.append(Edit(st.start_byte, st.start_byte, pre))
            if combine:
                edits.append(Edit(st.end_byte, st.end_byte, "\n" + "\n".join(sind + c for c in combine)))
        at = kernel.spec.span.start_byte if kernel.spec is not None else kernel.span.start_byte
        # helper text goes before the spec comment: outside the kernel's span
        new_kernel = apply_edits(text, edits)
        k2 = source.parse(new_kernel).kernel(ctx.kernel)
        if k2 is None:
            return None
        helpers = helpers_for(k2.text, text)
        spec_rows = style.strip_parens(spec_rows)
        grid = [style.spec_div_up(spec_rows, r) if r > 1 else spec_rows]
        blk = [str(t), str(r)]

        def host(site):
            args = dict(zip(names, site.args))
            a = base.substitute(rows_expr, args) if all(side_effect_free(x) for x in args.values()) else None
            if a is None:
                return None
            g = f"dim3({style.div_up(a, r, text, ctx.headers)})" if r > 1 else f"dim3({style.strip_parens(a)})"
            return g, f"dim3({t}, {r})"

        kedits = [(kernel.span.start_byte, kernel.span.end_byte, k2.text)]
        if helpers:
            kedits.append((at, at, helpers))
        new = relaunch(text, ctx.kernel, grid, blk, host, f"{t} threads per row, {r} row(s) per block", kedits,
                       base=sc.file)
        if new is None:
            return None
        kinds = sorted({a.kind for _, _, accs in loops for a in accs.values()})
        return Rewrite(self.name, new.text, (
            f"{t} threads per row ({'one warp' if t == 32 else f'{t // 32} warps'}), {r} row(s) per block: "
            f"{len(loops)} row loop(s) strided over the row's threads, "
            f"{', '.join(kinds) or 'no'} reduction(s) combined with warp shuffles"
            + (" and shared memory across warps" if t > 32 else "")
            + f"; block ({t}, {r}), grid cdiv(rows, {r}) in the spec and at every launch site",),
            {"threads": t}, new)

    def alternatives(self, rw: Rewrite, ctx: Context) -> list[dict]:
        t = rw.params["threads"]
        return [{"threads": x} for x in (t // 2, t * 2, t * 4) if x in THREADS]


def _rows_expr(el: Elementwise, params: list[str]) -> str | None:
    """The row count as an expression over the kernel's parameters: the guard's bound, or the
    initialiser of the local it names (`int N = B * T;` before the index)."""
    if el.bound in params:
        return el.bound
    for st in el.pre + el.mid:
        for d in st.children_by_field_name("declarator"):
            name, ptr = declared_name(d)
            v = d.child_by_field_name("value") if d.type == "init_declarator" else None
            if name == el.bound and not ptr and v is not None and \
                    all(c.type != "identifier" or txt(c) in params for c in walk(v)):
                return txt(v)
    return None


def _identity_before(work: list[Node], loop: Node, a: Accumulator) -> bool:
    """The accumulator holds its reduction's identity when the loop starts: declared just for it
    (`float sum = 0.0f;`, `float m = -INFINITY;`) and not touched in between."""
    want = {"sum": {"0", "0.0", "0.0f", "0.f", "0.0F", "0"}, "max": {"-INFINITY", "-FLT_MAX", "-1e30f", "-CUDART_INF_F", "-__int_as_float(0x7f800000)"},
            "min": {"INFINITY", "FLT_MAX", "CUDART_INF_F"}}[a.kind if a.kind != "online" else "sum"]
    found = False
    for st in work:
        if st == loop:
            return found
        if st.type == "declaration":
            for d in st.children_by_field_name("declarator"):
                name, _ = declared_name(d)
                if name == a.name:
                    v = d.child_by_field_name("value") if d.type == "init_declarator" else None
                    found = v is not None and "".join(txt(v).split()) in want
                    continue
        if _mentions(st, a.name) and st.type != "declaration":
            found = False
    return False

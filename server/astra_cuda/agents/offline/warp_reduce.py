"""Warp-shuffle block reductions in place of shared-memory tree reductions.

Recognises a call `const float s = F(v, scratch);` (a top-level statement of the kernel) where
the device function F is the classic tree: `scratch[tid] = v; __syncthreads(); for (stride ...;
stride >>= 1) { ... scratch[tid] += scratch[tid + stride]; __syncthreads(); } return scratch[0];`
over a 1-D block. The call is replaced by two shuffle stages (within warps, then across the
warps' partial sums) that handle a partial last warp and any blockDim.x up to 1024; a shared
scratch array left unused is removed.

Written inline, the tree takes the shapes real code has (NVIDIA's reduction samples): the shared
array declared `__shared__`, or a local pointer to dynamic shared memory (`T *s = SharedMemory<T>();`,
a helper of the file whose definition holds the `extern __shared__` array); the barrier
`__syncthreads()` or a whole block's cooperative-groups sync (`cg::sync(cta)` / `cta.sync()`, `cta`
being `this_thread_block()`); the halving tree (`s = blockDim.x / 2; s > 0; s >>= 1`, `tid < s`) or
the interleaved doubling tree (`s = 1; s < blockDim.x; s *= 2`, `tid % (2 * s) == 0`); any element
type the shuffles take (the sum in the array's own type)."""
from __future__ import annotations

from tree_sitter import Node

from . import base
from .base import Context, Edit, Rewrite, body, variable_types
from .tree import apply_edits, callee, declared_name, find_function, is_lvalue, line_indent, params, txt, walk


def is_tree_reduction(fn: Node) -> bool:
    ps = params(fn)
    if len(ps) != 2 or txt(fn.child_by_field_name("type")) != "float":
        return False
    (value, vptr), (scratch, sptr) = (declared_name(p.child_by_field_name("declarator")) for p in ps)
    if vptr or not sptr or txt(ps[0].child_by_field_name("type")) != "float":
        return False
    b = body(fn)
    text = txt(b)
    if "threadIdx.y" in text or "threadIdx.z" in text or "blockDim.y" in text:
        return False
    has_loop = has_add = has_ret = False
    for n in walk(b):
        if n.type == "for_statement":
            upd = n.child_by_field_name("update")
            if upd is not None and upd.type == "assignment_expression" and \
                    txt(upd.child_by_field_name("operator")) in (">>=", "/="):
                has_loop = True
        elif n.type == "assignment_expression" and txt(n.child_by_field_name("operator")) == "+=":
            left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
            if left.type == "subscript_expression" and right.type == "subscript_expression" and \
                    txt(left.child_by_field_name("argument")) == scratch == txt(right.child_by_field_name("argument")):
                has_add = True
        elif n.type == "return_statement":
            r = n.named_children[0] if n.named_children else None
            has_ret = r is not None and r.type == "subscript_expression" and \
                txt(r.child_by_field_name("argument")) == scratch and \
                txt(r).replace(" ", "") == f"{scratch}[0]"
    return has_loop and has_add and has_ret


def _reduction(out: str, value: str, ind: str, op: str = "sum", vt: str = "float") -> str:
    i1, i2 = ind + "  ", ind + "    "
    combine = (lambda v: f"{v} += astra_t") if op == "sum" else (lambda v: f"{v} = fmaxf({v}, astra_t)")
    identity = ("0.0f" if vt == "float" else f"{vt}(0)") if op == "sum" else "-__int_as_float(0x7f800000)"
    stage = lambda v, w, m: (  # noqa: E731 - one shuffle tree, guarded for partial warps
        f"#pragma unroll\n{{i}}for (int astra_o = 16; astra_o > 0; astra_o >>= 1) {{{{\n"
        f"{{i}}  const {vt} astra_t = __shfl_down_sync({m}, {v}, astra_o);\n"
        f"{{i}}  if (astra_lane + astra_o < {w}) {combine(v)};\n{{i}}}}}}")
    return (
        f"// astra: warp-shuffle block {'reduction' if op == 'sum' else 'maximum'} (was a shared-memory tree)\n"
        f"{ind}{vt} {out};\n{ind}{{\n"
        f"{i1}__shared__ {vt} astra_partial[33];\n"
        f"{i1}{vt} astra_v = {value};\n"
        f"{i1}const unsigned astra_lane = threadIdx.x % 32u, astra_warp = threadIdx.x / 32u;\n"
        f"{i1}const unsigned astra_left = blockDim.x - astra_warp * 32u;\n"
        f"{i1}const unsigned astra_width = astra_left < 32u ? astra_left : 32u;\n"
        f"{i1}const unsigned astra_mask = astra_width == 32u ? 0xffffffffu : (1u << astra_width) - 1u;\n"
        f"{i1}" + stage("astra_v", "astra_width", "astra_mask").format(i=i1) + "\n"
        f"{i1}if (astra_lane == 0) astra_partial[astra_warp] = astra_v;\n"
        f"{i1}__syncthreads();\n"
        f"{i1}if (astra_warp == 0) {{\n"
        f"{i2}const unsigned astra_warps = (blockDim.x + 31u) / 32u;\n"
        f"{i2}{vt} astra_w = astra_lane < astra_warps ? astra_partial[astra_lane] : {identity};\n"
        f"{i2}" + stage("astra_w", "astra_width", "astra_mask").format(i=i2) + "\n"
        f"{i2}if (astra_lane == 0) astra_partial[32] = astra_w;\n"
        f"{i1}}}\n"
        f"{i1}__syncthreads();\n"
        f"{i1}{out} = astra_partial[32];\n"
        f"{ind}}}")


def _tid_names(kb: Node) -> set[str]:
    """`threadIdx.x` and locals that only ever hold it (`const int tid = threadIdx.x;`)."""
    return {"threadIdx.x"} | {k for k, v in base.index_aliases(kb).items() if v == "threadIdx.x"}


def _block_groups(kb: Node) -> set[str]:
    """Locals holding the whole thread block as a cooperative group (`cg::thread_block cta =
    cg::this_thread_block();`): their sync is a block-wide barrier."""
    out = set()
    for n in walk(kb):
        if n.type == "declaration":
            for d in n.children_by_field_name("declarator"):
                v = d.child_by_field_name("value") if d.type == "init_declarator" else None
                if v is not None and v.type == "call_expression" and callee(v).split("::")[-1] == "this_thread_block":
                    out.add(txt(d.child_by_field_name("declarator")))
    return out


def _calls_sync(stmt: Node, groups: frozenset[str] = frozenset()) -> bool:
    """`__syncthreads();`, or a block group's `cg::sync(cta);` / `cta.sync();`."""
    if stmt.type != "expression_statement":
        return False
    flat = "".join(txt(stmt).split())
    return flat == "__syncthreads();" or any(
        flat in (f"cg::sync({g});", f"cooperative_groups::sync({g});", f"sync({g});", f"{g}.sync();") for g in groups)


def _shared_pointers(kb: Node, root_node: Node) -> dict[str, Node]:
    """Locals `T *s = H<T>();` (or `(T *)H()`...) where H is a function or type of the file whose
    definition declares `__shared__` memory: a view of the block's dynamic shared memory."""
    out = {}
    for n in walk(kb):
        if n.type != "declaration" or "__shared__" in txt(n):
            continue
        ds = n.children_by_field_name("declarator")
        if len(ds) != 1 or ds[0].type != "init_declarator":
            continue
        name, ptr = declared_name(ds[0])
        value = ds[0].child_by_field_name("value")
        if not name or not ptr or value is None:
            continue
        helpers = {txt(c) for c in walk(value) if c.type in ("identifier", "type_identifier")}
        if any(_declares_shared(root_node, h) for h in helpers):
            out[name] = n
    return out


def _declares_shared(root_node: Node, name: str) -> bool:
    for n in walk(root_node):
        if n.type in ("struct_specifier", "class_specifier", "function_definition"):
            nm = n.child_by_field_name("name") if n.type != "function_definition" else None
            fname = txt(nm) if nm is not None else None
            if n.type == "function_definition":
                from .tree import function_name
                fname = function_name(n)
            if fname == name and "__shared__" in txt(n):
                return True
    return False


def _tree_loop(loop: Node, arr: str, tids: set[str], block: int | None,
               groups: frozenset[str] = frozenset()) -> str | None:
    """'sum' / 'max' for `for (s = blockDim.x / 2; s > 0; s >>= 1) { if (tid < s) arr[tid] += arr[tid + s];
    __syncthreads(); }` (or `arr[tid] = fmaxf(arr[tid], arr[tid + s])`); 'sum' for the interleaved
    `for (s = 1; s < blockDim.x; s *= 2) { if (tid % (2 * s) == 0) arr[tid] += arr[tid + s]; sync }`.
    Both add up arr[0 .. blockDim.x) for a power-of-two block (and read past it otherwise)."""
    if loop.type != "for_statement":
        return None
    init, cond, upd = (loop.child_by_field_name(f) for f in ("initializer", "condition", "update"))
    b = loop.child_by_field_name("body")
    if init is None or cond is None or upd is None or b is None or init.type != "declaration":
        return None
    ds = init.children_by_field_name("declarator")
    if len(ds) != 1 or ds[0].type != "init_declarator":
        return None
    var = txt(ds[0].child_by_field_name("declarator"))
    start = "".join(txt(ds[0].child_by_field_name("value")).split())
    flat_cond, flat_upd = "".join(txt(cond).split()), "".join(txt(upd).split())
    halving = (start in ("blockDim.x/2", "blockDim.x>>1") or (block and start.isdigit() and 2 * int(start) == block)) \
        and flat_cond in (f"{var}>0", f"{var}>=1", f"0<{var}") \
        and flat_upd in (f"{var}>>=1", f"{var}/=2", f"{var}={var}/2", f"{var}={var}>>1")
    doubling = start == "1" and flat_cond in (f"{var}<blockDim.x", f"blockDim.x>{var}") \
        and flat_upd in (f"{var}*=2", f"{var}<<=1", f"{var}={var}*2", f"{var}={var}<<1", f"{var}+={var}")
    if not (halving or doubling):
        return None
    stmts = [c for c in b.named_children if c.type != "comment"] if b.type == "compound_statement" else []
    if len(stmts) != 2 or stmts[0].type != "if_statement" or not _calls_sync(stmts[1], groups) or \
            stmts[0].child_by_field_name("alternative") is not None:
        return None
    c = _unparen("".join(txt(stmts[0].child_by_field_name("condition")).split()))
    if halving:
        tid = next((t for t in tids if c == f"{t}<{var}"), None)
    else:
        tid = next((t for t in tids if c in (f"({t}%(2*{var}))==0", f"{t}%(2*{var})==0", f"({t}&(2*{var}-1))==0",
                                             f"({t}%({var}*2))==0", f"{t}%({var}*2)==0")), None)
    if tid is None:
        return None
    inner = stmts[0].child_by_field_name("consequence")
    code = "".join(txt(inner).split()).strip("{}")
    if code == f"{arr}[{tid}]+={arr}[{tid}+{var}];" or code == f"{arr}[{tid}]={arr}[{tid}]+{arr}[{tid}+{var}];":
        return "sum"
    if not halving:
        return None
    for f in ("fmaxf", "max"):
        if code == f"{arr}[{tid}]={f}({arr}[{tid}],{arr}[{tid}+{var}]);":
            return "max"
    return None


def _unparen(c: str) -> str:
    """`(e)` -> `e` where the outer parentheses enclose the whole of it."""
    while c.startswith("(") and c.endswith(")"):
        depth = 0
        for i, ch in enumerate(c):
            depth += (ch == "(") - (ch == ")")
            if depth == 0 and i < len(c) - 1:
                return c
        c = c[1:-1]
    return c


def _element_type(decl: Node) -> str:
    """The element type of a shared array's or pointer's declaration, without storage words."""
    drop = {"__shared__", "extern", "static", "volatile", "const"}
    return " ".join(w for w in txt(decl.child_by_field_name("type")).split() if w not in drop)


def inline_trees(kb: Node, block: int | None, root_node: Node | None = None
                 ) -> list[tuple[list[Node], str, str, str, str]] | None:
    """Each `arr[tid] = v; <barrier>; <tree loop>` group in the kernel body: (its statements, the
    shared array, the value, 'sum'/'max', the element type). None when a shared array is used
    some other way too (its reads of [0] after a group are replaced, see WarpReduce)."""
    tids = _tid_names(kb)
    groups_ = frozenset(_block_groups(kb))
    shared: dict[str, str] = {}
    for n in walk(kb):
        if n.type == "declaration" and "__shared__" in txt(n):
            for d in n.children_by_field_name("declarator"):
                name, _ = declared_name(d)
                if name:
                    shared[name] = _element_type(n)
    if root_node is not None:
        shared.update({k: _element_type(d) for k, d in _shared_pointers(kb, root_node).items()})
    groups = []
    for blk in (n for n in walk(kb) if n.type == "compound_statement"):
        st = [c for c in blk.named_children if c.type != "comment"]
        for i in range(len(st) - 2):
            e = st[i]
            if e.type != "expression_statement" or not e.named_children or \
                    e.named_children[0].type != "assignment_expression":
                continue
            a = e.named_children[0]
            left = a.child_by_field_name("left")
            if txt(a.child_by_field_name("operator")) != "=" or left.type != "subscript_expression":
                continue
            arr = txt(left.child_by_field_name("argument"))
            if arr not in shared or "".join(txt(left).split()) not in {f"{arr}[{t}]" for t in tids}:
                continue
            if not _calls_sync(st[i + 1], groups_):
                continue
            op = _tree_loop(st[i + 2], arr, tids, block, groups_)
            value = a.child_by_field_name("right")
            if op is None or any(x.type == "identifier" and txt(x) == arr for x in walk(value)):
                continue
            if op == "max" and shared[arr] != "float":
                continue
            groups.append(([e, st[i + 1], st[i + 2]], arr, txt(value), op, shared[arr]))
    return groups


class WarpReduce(base.Transform):
    name = "warp_reduce"
    reorders_sums = True
    title = "warp-shuffle reduction instead of a shared-memory tree"
    note = "warp-shuffle reduction: fewer barriers and shared-memory round trips"
    expected = "fewer barriers and shared-memory round trips in the reduction (latency)"

    def rewrite(self, text: str, ctx: Context, sc: base.Scope, params: dict) -> Rewrite | None:
        kb = body(sc.kernel)
        data = text.encode("utf-8")
        edits, changes = [], []
        for stmt in kb.named_children:
            if stmt.type != "declaration":
                continue
            decls = stmt.children_by_field_name("declarator")
            if len(decls) != 1 or decls[0].type != "init_declarator":
                continue
            call = decls[0].child_by_field_name("value")
            if call is None or call.type != "call_expression":
                continue
            fname = callee(call)
            fn = find_function(sc.root, fname)
            if fn is None or not is_tree_reduction(fn):
                continue
            args = [a for a in call.child_by_field_name("arguments").named_children if a.type != "comment"]
            if len(args) != 2:
                continue
            name, _ = declared_name(decls[0])
            ind = line_indent(data, stmt.start_byte)
            edits.append(Edit(stmt.start_byte, stmt.end_byte, _reduction(name, txt(args[0]), ind)))
            changes.append(f"`{fname}` (shared-memory tree) replaced by a two-stage warp-shuffle reduction")
            scratch = txt(args[1])
            uses = [n for n in walk(kb) if n.type == "identifier" and txt(n) == scratch]
            local = variable_types(sc.kernel)
            if len(uses) == 2 and scratch in local:  # its declaration and this call
                for d in kb.named_children:
                    if d.type == "declaration" and "__shared__" in txt(d) and \
                            any(declared_name(x)[0] == scratch for x in d.children_by_field_name("declarator")):
                        start = data.rfind(b"\n", 0, d.start_byte) + 1
                        end = d.end_byte + 1 if data[d.end_byte:d.end_byte + 1] == b"\n" else d.end_byte
                        edits.append(Edit(start, end, ""))
                        changes.append(f"unused shared scratch `{scratch}` removed")
        tree_edits = self._inline(kb, data, ctx, len(edits), sc.root)
        if tree_edits is None and not edits:
            return None
        if tree_edits:
            edits += tree_edits[0]
            changes += tree_edits[1]
        if not edits:
            return None
        return Rewrite(self.name, apply_edits(text, edits), tuple(changes))

    def _inline(self, kb: Node, data: bytes, ctx: Context, taken: int, root_node: Node | None = None):
        """Edits for inline shared-memory trees: each group becomes a shuffle reduction into
        `astra_redK`; reads of `arr[0]` up to the array's next store read that value instead."""
        groups = inline_trees(kb, ctx.block_threads, root_node)
        if not groups:
            return None
        edits, changes, covered = [], [], []
        ordered = sorted(groups, key=lambda g: g[0][0].start_byte)
        for k, (stmts, arr, value, op, vt) in enumerate(ordered):
            name = f"astra_red{k}"
            ind = line_indent(data, stmts[0].start_byte)
            edits.append(Edit(stmts[0].start_byte, stmts[-1].end_byte, _reduction(name, value, ind, op, vt)))
            covered.append((stmts[0].start_byte, stmts[-1].end_byte))
            changes.append(f"shared-memory tree over `{arr}` ({op}) replaced by a two-stage warp-shuffle reduction")
        # every other use of the arrays: reads of [0] after a group, else nothing is changed
        arrays = {g[1] for g in groups}
        for n in walk(kb):
            if n.type != "identifier" or txt(n) not in arrays or any(s <= n.start_byte < e for s, e in covered):
                continue
            p = n.parent
            if p.type in ("declaration", "array_declarator", "pointer_declarator", "init_declarator"):
                continue
            if p.type != "subscript_expression" or "".join(txt(p).split()) != f"{txt(n)}[0]" or is_lvalue(p):
                return None
            before = [i for i, g in enumerate(ordered) if g[1] == txt(n) and g[0][-1].end_byte <= p.start_byte]
            if not before:
                return None
            edits.append(Edit(p.start_byte, p.end_byte, f"astra_red{before[-1]}"))
        # the shared arrays (and views of dynamic shared memory) are no longer needed
        views = set(_shared_pointers(kb, root_node)) if root_node is not None else set()
        for n in walk(kb):
            if n.type == "declaration" and ("__shared__" in txt(n) or
                                            any(declared_name(d)[0] in views for d in n.children_by_field_name("declarator"))):
                names = [declared_name(d)[0] for d in n.children_by_field_name("declarator")]
                if names and all(x in arrays for x in names):
                    start = data.rfind(b"\n", 0, n.start_byte) + 1
                    end = n.end_byte + 1 if data[n.end_byte:n.end_byte + 1] == b"\n" else n.end_byte
                    edits.append(Edit(start, end, ""))
        return edits, changes

"""`pack_stores`: a fixed-count loop that writes one narrow element a trip to consecutive places
(`out[e + j] = v;`, j from 0 to a compile-time K: the quantizers' 1-byte outputs, a dequantizer's
eight halves) keeps the K values in an aligned private buffer and writes them after the loop as
one store of their total size (2 to 16 bytes, or 16-byte pieces) where the address is aligned to
it, element by element otherwise.

Exact: only the time of those writes moves, to the loop's end, and only where nothing the loop
does can see them — the loop writes no other memory, calls nothing but value conversions and math,
and reads only the kernel's own local arrays (thread-private or shared, never the global memory a
kernel parameter points at) or, where the written pointer comes from a `__restrict__` parameter
that nothing else in the kernel names, local objects. No early exit, no synchronisation."""
from __future__ import annotations

from typing import Any

from tree_sitter import Node

from . import base
from .base import FLOAT_FUNCS, Context, Edit, Rewrite, body, pointer_params
from .tree import apply_edits, assigned_names, callee, declared_name, declared_names, idents, line_indent, txt, unparenthesized, walk
from .unroll import macro_constants

HELPER = "astra_store_run"
# the helper the rewrite calls: one store of the run's size where the address allows it
HELPER_TEXT = f"""// astra: N consecutive elements written as 16-, 8-, 4- or 2-byte stores where the address is
// aligned to them, one by one otherwise (`src` is 16-byte aligned)
template <int N, typename T>
__device__ __forceinline__ void {HELPER}(T* dst, const T* src) {{
  constexpr int bytes = N * (int)sizeof(T);
  const unsigned long long at = (unsigned long long)dst;
  if (bytes % 16 == 0 && at % 16 == 0) {{
#pragma unroll
    for (int c = 0; c < bytes / 16; ++c) ((uint4*)dst)[c] = ((const uint4*)src)[c];
  }} else if (bytes % 8 == 0 && at % 8 == 0) {{
#pragma unroll
    for (int c = 0; c < bytes / 8; ++c) ((uint2*)dst)[c] = ((const uint2*)src)[c];
  }} else if (bytes % 4 == 0 && at % 4 == 0) {{
#pragma unroll
    for (int c = 0; c < bytes / 4; ++c) ((unsigned int*)dst)[c] = ((const unsigned int*)src)[c];
  }} else if (bytes % 2 == 0 && at % 2 == 0) {{
#pragma unroll
    for (int c = 0; c < bytes / 2; ++c) ((unsigned short*)dst)[c] = ((const unsigned short*)src)[c];
  }} else {{
#pragma unroll
    for (int k = 0; k < N; ++k) dst[k] = src[k];
  }}
}}

"""
# calls that only compute a value: math, conversions, casts
PURE = (FLOAT_FUNCS - {"__ldg"}) | {"static_cast", "min", "max", "abs", "fabs", "rintf", "lrintf", "__float2int_rn",
                                    "__float2half", "__float2half_rn", "__float2bfloat16", "__float2bfloat16_rn",
                                    "__half2float", "__bfloat162float", "__int2float_rn", "__float2uint_rn",
                                    "__uint2float_rn", "float", "int", "half", "__half", "__nv_bfloat16", "int8_t",
                                    "uint8_t", "__nv_fp8_e4m3", "__nv_fp8_e5m2"}
EXITS = {"break_statement", "continue_statement", "return_statement", "goto_statement", "asm_statement",
         "lambda_expression", "co_return_statement"}


def _template_names(fn: Node) -> set[str]:
    """The template parameters of the function (types and values)."""
    p = fn.parent
    if p is None or p.type != "template_declaration":
        return set()
    params = p.child_by_field_name("parameters")
    out = set()
    for n in walk(params) if params is not None else ():
        if n.type in ("type_identifier", "identifier") and n.parent is not None and \
                n.parent.type in ("type_parameter_declaration", "parameter_declaration",
                                  "optional_type_parameter_declaration", "optional_parameter_declaration"):
            if n.parent.child_by_field_name("type") != n:
                out.add(txt(n))
    return out


class _Locals:
    """The kernel's local declarations: name -> (declaration, declarator)."""

    def __init__(self, fn: Node) -> None:
        self.decl: dict[str, list[tuple[Node, Node]]] = {}
        for n in walk(body(fn)):
            if n.type == "declaration":
                for d in n.children_by_field_name("declarator"):
                    name, _ = declared_name(d)
                    if name:
                        self.decl.setdefault(name, []).append((n, d))

    def one(self, name: str) -> tuple[Node, Node] | None:
        """The declaration and declarator of a local declared once."""
        got = self.decl.get(name, [])
        return got[0] if len(got) == 1 else None

    def kind(self, name: str) -> str:
        """'array', 'pointer', 'constexpr', 'object' or '' (not a local, or declared twice as
        different kinds)."""
        kinds = {self._kind(n, d) for n, d in self.decl.get(name, ())}
        return kinds.pop() if len(kinds) == 1 else ""

    def reaches(self, name: str) -> bool:
        """A local that may hold an address: a pointer, an array, `auto`, or one declared twice."""
        if name not in self.decl:
            return False
        kind = self.kind(name)
        return kind in ("pointer", "array", "") or \
            kind == "object" and any(txt(n.child_by_field_name("type")) == "auto" for n, _ in self.decl[name])

    @staticmethod
    def _kind(n: Node, d: Node) -> str:
        inner = d.child_by_field_name("declarator") if d.type == "init_declarator" else d
        if inner is not None and inner.type == "array_declarator":
            return "array"
        if inner is not None and inner.type in ("pointer_declarator", "reference_declarator"):
            return "pointer"
        if any(c.type == "type_qualifier" and txt(c) == "constexpr" for c in n.children):
            return "constexpr"
        return "object"


class PackStores(base.Transform):
    name = "pack_stores"
    title = "a fixed run of narrow stores as one wide store"
    note = "the run of narrow stores is kept in registers and written as one wide store where aligned"
    expected = "one 4- to 16-byte store a thread in place of several 1- or 2-byte stores: fewer store instructions"

    def rewrite(self, text: str, ctx: Context, sc: base.Scope, params: dict[str, Any]) -> Rewrite | None:
        fn = sc.kernel   # kernel parameters point at global memory: no local array is reached through them
        if HELPER in text:
            return None
        loc = _Locals(fn)
        consts = macro_constants(sc.root) | _template_names(fn) | \
            {n for n in loc.decl if loc.kind(n) == "constexpr"}
        data = text.encode("utf-8")
        edits: list[Edit] = []
        changes: list[str] = []
        for loop in (n for n in walk(body(fn)) if n.type == "for_statement"):
            got = self._match(loop, fn, loc, consts)
            if got is None:
                continue
            store, ptr, elem, rest, var, k = got
            off = " + ".join(txt(t) if t.type in ("identifier", "number_literal") else f"({txt(t)})" for t in rest)
            tag = f"astra_run{len(edits)}"
            start = loop
            prev = loop.prev_sibling
            if prev is not None and prev.type == "preproc_call" and "unroll" in txt(prev):
                start = prev
            ind = line_indent(data, loop.start_byte)
            value = txt(store.child_by_field_name("right"))
            lb = txt(loop).encode("utf-8")
            at = store.start_byte - loop.start_byte, store.end_byte - loop.start_byte
            new_loop = (lb[:at[0]] + f"{tag}[{var}] = {value}".encode("utf-8") + lb[at[1]:]).decode("utf-8")
            pragma = f"{txt(start).strip()}\n{ind}" if start is not loop else ""
            lead = ind[len(line_indent(data, start.start_byte)):]   # a pragma may sit at the line start
            where = f"{ptr} + {off}" if len(rest) == 1 else f"{ptr} + ({off})" if rest else ptr
            lines = [f"alignas(16) {elem} {tag}[{k}];", pragma + new_loop, f"{HELPER}<{k}>({where}, {tag});"]
            if loop.parent is not None and loop.parent.type == "compound_statement":
                new = lead + f"\n{ind}".join(lines)
            else:   # the loop is a statement of its own (`if (c) for ...`): a block keeps the three together
                new = lead + "{\n" + "".join(f"{ind}  " + x.replace("\n", "\n  ") + "\n" for x in lines) + ind + "}"
            edits.append(Edit(start.start_byte, loop.end_byte, new))
            changes.append(f"the {k} stores a trip of `{txt(loop.child_by_field_name('initializer'))} ...` to "
                           f"`{ptr}` written as one wide store after the loop where aligned")
        if not edits:
            return None
        top = fn.parent if fn.parent is not None and fn.parent.type == "template_declaration" else fn
        edits.append(Edit(top.start_byte, top.start_byte, HELPER_TEXT))
        return Rewrite(self.name, apply_edits(text, edits), tuple(changes))

    def _match(self, loop: Node, fn: Node, loc: _Locals, consts: set[str]) -> tuple[Node, str, str, list[Node], str, str] | None:
        """(store, pointer, element type, offset text, loop variable, count text), or None."""
        init = loop.child_by_field_name("initializer")
        cond = loop.child_by_field_name("condition")
        upd = loop.child_by_field_name("update")
        b = loop.child_by_field_name("body")
        if init is None or cond is None or upd is None or b is None or init.type != "declaration":
            return None
        ds = init.children_by_field_name("declarator")
        if len(ds) != 1 or ds[0].type != "init_declarator" or txt(ds[0].child_by_field_name("value")) != "0":
            return None
        var = txt(ds[0].child_by_field_name("declarator"))
        right = cond.child_by_field_name("right")
        if cond.type != "binary_expression" or txt(cond.child_by_field_name("operator")) != "<" or \
                txt(cond.child_by_field_name("left")) != var or right is None:
            return None
        k = txt(right)
        if not (k.isdigit() and 2 <= int(k) <= 64) and not (right.type == "identifier" and k in consts):
            return None
        if txt(upd).replace(" ", "") not in (f"++{var}", f"{var}++", f"{var}+=1"):
            return None
        stmts = [c for c in b.named_children if c.type != "comment"] if b.type == "compound_statement" else [b]
        stores = [n for n in walk(b) if (w := _written(n)) is not None and
                  w.type in ("subscript_expression", "pointer_expression", "field_expression")]
        if len(stores) != 1:
            return None
        store = stores[0]
        if store.type != "assignment_expression" or txt(store.child_by_field_name("operator")) != "=" or \
                store.parent is None or store.parent.type != "expression_statement" or \
                store.parent not in stmts:
            return None
        pointers = set(pointer_params(fn)) | {n for n in loc.decl if loc.kind(n) == "pointer"}
        lhs = _written(store)
        target = None if lhs is None else self._target(lhs, var, pointers)
        if target is None:
            return None
        ptr, rest = target
        kept = assigned_names(b) | {txt(n.child_by_field_name("argument")) for n in walk(b)
                                    if n.type == "pointer_expression" and txt(n.child(0)) == "&"}
        if var in kept or ptr in kept or any(idents(t) & kept for t in rest):
            return None
        if any(idents(t) & declared_names(b) for t in rest):
            return None      # a name of the loop's own: out of scope after it, or another one there
        elem = self._element(fn, ptr, loc)
        if elem is None:
            return None
        src = self._source(fn, ptr, loc)
        if src is None:
            return None
        alone = self._alone(fn, ptr, src, loc, store)
        if not self._reads_only_private(b, store, loc, alone, _template_names(fn)):
            return None
        return store, ptr, elem, rest, var, k

    @staticmethod
    def _target(lhs: Node, var: str, pointers: set[str]) -> tuple[str, list[Node]] | None:
        """(pointer, the other terms of the index) of `p[e + j]`, `p[j]` or `*(p + e + j)`."""
        if lhs.type == "subscript_expression":
            arr = lhs.child_by_field_name("argument")
            idx = lhs.child_by_field_name("indices") or lhs.child_by_field_name("index")
            if arr is None or arr.type != "identifier" or idx is None:
                return None
            inner = [c for c in idx.named_children if c.type != "comment"] if idx.type == "subscript_argument_list" \
                else [idx]
            if len(inner) != 1:
                return None
            terms = _sum_terms(inner[0])
            ptr = txt(arr)
        elif lhs.type == "pointer_expression" and txt(lhs.child(0)) == "*":
            terms = _sum_terms(lhs.child_by_field_name("argument"))
            names = [t for t in terms or () if t.type == "identifier" and txt(t) in pointers]
            if terms is None or len(names) != 1:
                return None
            ptr = txt(names[0])
            terms = [t for t in terms if t is not names[0]]
        else:
            return None
        if terms is None:
            return None
        js = [t for t in terms if t.type == "identifier" and txt(t) == var]
        rest = [t for t in terms if t not in js]
        if len(js) != 1 or any(var in idents(t) or idents(t) & pointers for t in rest):
            return None
        return ptr, rest

    @staticmethod
    def _element(fn: Node, ptr: str, loc: _Locals) -> str | None:
        """The written element type of pointer `ptr` (a kernel parameter or a local pointer)."""
        pp = pointer_params(fn).get(ptr)
        if pp is not None:
            decl_text = txt(pp.node)
            elem = pp.elem
        elif loc.kind(ptr) == "pointer" and loc.one(ptr) is not None:
            n, d = loc.decl[ptr][0]
            decl_text, elem = txt(n), txt(n.child_by_field_name("type"))
            inner = d.child_by_field_name("declarator") if d.type == "init_declarator" else d
            if inner is None or inner.type != "pointer_declarator" or \
                    (inner.child_by_field_name("declarator") or inner).type != "identifier":
                return None     # one level of pointer only
        else:
            return None
        if pp is not None and "**" in decl_text.replace(" ", ""):
            return None
        quals = {txt(c) for c in (pp.node if pp is not None else loc.decl[ptr][0][0]).children
                 if c.type == "type_qualifier"}
        if quals & {"const", "volatile"} or elem in ("void", "auto") or "volatile" in decl_text:
            return None
        return elem

    @staticmethod
    def _source(fn: Node, ptr: str, loc: _Locals) -> str | None:
        """The kernel parameter `ptr` points into: itself, or the one pointer a local pointer is
        made from (with scalars); neither assigned anywhere in the kernel. None otherwise (a local
        pointer may point at a local array the loop reads)."""
        params = pointer_params(fn)
        src = ptr
        if ptr not in params:
            got = loc.one(ptr)
            v = got[1].child_by_field_name("value") if got is not None and got[1].type == "init_declarator" else None
            used = {x for x in idents(v) if x in params or loc.reaches(x)} if v is not None else set()
            if len(used) != 1 or not used <= set(params):
                return None
            src = used.pop()
        return None if {ptr, src} & assigned_names(body(fn)) else src

    @staticmethod
    def _alone(fn: Node, ptr: str, src: str, loc: _Locals, store: Node) -> bool:
        """`src` is `__restrict__` and neither it nor `ptr` appears anywhere else in the kernel
        (past `ptr`'s declaration and the store): nothing else reaches that memory."""
        if not pointer_params(fn)[src].restrict:
            return False
        spans = [(store.start_byte, store.end_byte)]
        if ptr != src:
            d = loc.decl[ptr][0][1]
            spans.append((d.start_byte, d.end_byte))
        return all(any(a <= n.start_byte < z for a, z in spans) for n in walk(body(fn))
                   if n.type == "identifier" and txt(n) in (ptr, src))

    @staticmethod
    def _reads_only_private(b: Node, store: Node, loc: _Locals, alone: bool, tparams: set[str]) -> bool:
        """The loop reads only registers, the kernel's local arrays and (where the written pointer
        is `alone`) local objects; calls only pure functions; never leaves early."""
        lhs = _written(store) or store
        for n in walk(b):
            if n.type in EXITS:
                return False
            if lhs.start_byte <= n.start_byte and n.end_byte <= lhs.end_byte:
                continue   # the written place itself (its index is checked apart)
            if n.type == "call_expression":
                f = n.child_by_field_name("function")
                if f is None or f.type not in ("identifier", "template_function", "qualified_identifier"):
                    return False
                name = callee(n).split("::")[-1]
                if name not in PURE and name not in tparams:
                    return False
            elif n.type == "subscript_expression":
                arr = n.child_by_field_name("argument")
                kind = loc.kind(txt(arr)) if arr is not None and arr.type == "identifier" else ""
                if not (kind == "array" or kind == "object" and alone):
                    return False
            elif n.type == "pointer_expression" and txt(n.child(0)) == "*":
                return False
            elif n.type == "field_expression" and txt(n.child_by_field_name("operator")) == "->":
                return False
        return True


def _sum_terms(n: Node | None) -> list[Node] | None:
    """The terms of a sum `a + b + c` (None for a subtraction or nothing)."""
    if n is None:
        return None
    n = unparenthesized(n)
    if n.type == "binary_expression" and txt(n.child_by_field_name("operator")) == "+":
        a, c = _sum_terms(n.child_by_field_name("left")), _sum_terms(n.child_by_field_name("right"))
        return None if a is None or c is None else a + c
    return [n]


def _written(n: Node) -> Node | None:
    """The place an assignment or an increment writes (parentheses dropped); None for other nodes."""
    if n.type not in ("assignment_expression", "update_expression"):
        return None
    got = n.child_by_field_name("left" if n.type == "assignment_expression" else "argument")
    return None if got is None else unparenthesized(got)

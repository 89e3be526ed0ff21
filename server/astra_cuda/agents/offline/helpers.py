"""The project's own helpers, found by their structure, so that a rewrite uses what the project
already wrote instead of code of its own (issue 26): an element pack (`aligned_vector<T, N>`,
`vec_n_t`, `AlignedArray`: a struct holding one array of N elements, aligned to its whole size),
a ceil-division helper (`ceil_div`, `DIVUP`: a function or macro returning `(a + b - 1) / b`) and
load/store helpers (`ld128`/`st128`, an `__ldg` wrapper: a function moving one value between a
register and memory in one access, `Mover`). They are looked for in the file, then in the project
headers it includes (`headers`: their texts, as `extract.header_reader` reads them — only what a
compiler of the unit may read), in that order.

A helper is taken only where its definition shows it does exactly what the rewrite needs — by
the definition's tree, never by its name — and is visible where the rewrite uses it; anything
else (a pack of packed pairs such as vLLM's `PackedVec<half>`, a member function that may be
virtual, a definition inside `#if`) leaves the rewrite to write its own code. The gate verifies
the result as it verifies every rewrite.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import lru_cache

from tree_sitter import Node

from ...model import source
from .tree import txt, unparenthesized, walk
from .types import SIZES

# Where a definition may sit and still be visible by its (qualified) name from a later kernel.
_OPEN_SCOPES = ("translation_unit", "namespace_definition", "declaration_list", "template_declaration",
                "linkage_specification")


@dataclass(frozen=True)
class Pack:
    """A struct holding exactly one array, `member[count]` of `elem`, aligned to its whole size:
    copying one moves all its elements in one access of that many bytes. A template over the
    element type and the count (`params` in declared order, 'T' and 'N') or a fixed pack."""

    name: str                       # qualified as the kernel must write it
    member: str
    params: tuple[str, ...] = ()    # ('T', 'N') or ('N', 'T') for a template; () for a fixed pack
    elem: str = ""                  # a fixed pack's element type
    count: int = 0                  # a fixed pack's element count

    def spelled(self, elem: str, count: int, count_expr: str) -> str | None:
        """The pack type holding `count` elements of `elem` (the count written `count_expr`),
        or None when this pack cannot."""
        if not self.params:
            return self.name if self.elem == elem and self.count == count else None
        args = [elem if p == "T" else count_expr for p in self.params]
        return f"{self.name}<{', '.join(args)}>"


def _parse(text: str) -> Node:
    # CUDA's `__align__(n)` is `alignas(n)`; tree-sitter knows only the latter (same length, so
    # every offset holds).
    return source.parser().parse(text.encode("utf-8").replace(b"__align__", b"alignas  ")).root_node


def _canon(n: Node, names: dict[str, str]) -> str:
    """An expression's tokens without spaces, names mapped through `names`, parentheses kept
    only around compound operands (`((a) + (b) - 1) / (b)` -> `(a+b-1)/b`)."""
    if n.type == "parenthesized_expression" and len(n.named_children) == 1:
        inner = n.named_children[0]
        s = _canon(inner, names)
        return s if inner.type in ("identifier", "number_literal", "parenthesized_expression",
                                   "call_expression", "sizeof_expression") else f"({s})"
    if n.type in ("sizeof_expression", "alignof_expression") and n.named_children:
        return f"{txt(n.children[0])}({_canon(unparenthesized(n.named_children[-1]), names)})"
    if n.type == "type_descriptor":
        return names.get(txt(n), txt(n))
    if n.child_count == 0:
        return names.get(txt(n), txt(n))
    return "".join(_canon(c, names) for c in n.children if c.type != "comment")


def _top(n: Node) -> str:
    """The whole expression, its outer parentheses dropped."""
    while n.type == "parenthesized_expression" and len(n.named_children) == 1:
        n = n.named_children[0]
    return n.type


def _namespaces(n: Node) -> tuple[str, ...] | None:
    """The namespaces around a definition, outermost first; None where it is not visible by a
    qualified name (inside a class, a function, an anonymous namespace or a preprocessor branch)."""
    out = []
    p = n.parent
    while p is not None:
        if p.type not in _OPEN_SCOPES:
            return None
        if p.type == "namespace_definition":
            name = p.child_by_field_name("name")
            if name is None:
                return None
            out.append(txt(name))
        p = p.parent
    return tuple(reversed(out))


def _qualified(name: str, where: tuple[str, ...], user: tuple[str, ...]) -> str:
    """`name` as code inside namespaces `user` writes a definition made inside `where`."""
    return name if user[:len(where)] == where else "::".join((*where, name))


def _alignment(spec: Node) -> Node | None:
    q = next((c for c in spec.children if c.type == "alignas_qualifier"), None)
    return None if q is None else next((c for c in q.named_children), None)


def _pack(spec: Node, kernel_ns: tuple[str, ...]) -> Pack | None:
    name, body = spec.child_by_field_name("name"), spec.child_by_field_name("body")
    if name is None or body is None or any(c.type == "base_class_clause" for c in spec.children):
        return None
    if any(n.type == "virtual" or txt(n) == "virtual" for n in walk(body) if n.child_count == 0):
        return None
    fields = []
    for f in body.named_children:
        if f.type == "field_declaration":
            if any(c.type == "storage_class_specifier" for c in f.children):
                continue   # a static member takes no room in each pack
            decls = f.children_by_field_name("declarator")
            if any(d.type == "function_declarator" for d in decls):
                continue   # a member function declared here takes no room either
            fields.append(f)
        elif f.type == "declaration" and any(c.type == "storage_class_specifier" and txt(c) == "static"
                                             for c in f.children):
            continue
        elif f.type not in ("function_definition", "template_declaration", "comment", "access_specifier",
                            "type_definition", "alias_declaration", "static_assert_declaration"):
            return None    # a nested struct, a union, a bit-field...: a layout we do not read
    if len(fields) != 1:
        return None
    decls = fields[0].children_by_field_name("declarator")
    if len(decls) != 1 or decls[0].type != "array_declarator":
        return None
    arr = decls[0]
    member, size = arr.child_by_field_name("declarator"), arr.child_by_field_name("size")
    elem = fields[0].child_by_field_name("type")
    if member is None or size is None or elem is None or member.type != "field_identifier" \
            or any(c.type == "type_qualifier" for c in fields[0].children):
        return None
    where = _namespaces(spec.parent if spec.parent is not None and spec.parent.type == "template_declaration"
                        else spec)
    if where is None:
        return None
    align = _alignment(spec)
    if align is None:
        return None
    qualified = _qualified(txt(name), where, kernel_ns)
    tmpl = spec.parent if spec.parent is not None and spec.parent.type == "template_declaration" else None
    if tmpl is None:
        e, n = txt(elem), unparenthesized(size)
        if e not in SIZES or n.type != "number_literal" or not txt(n).isdigit():
            return None
        count = int(txt(n))
        a = unparenthesized(align)
        whole = a.type == "number_literal" and txt(a).isdigit() and int(txt(a)) == SIZES[e] * count
        if not whole and _canon(align, {}) not in (f"sizeof({e})*{count}", f"{count}*sizeof({e})"):
            return None
        return Pack(qualified, txt(member), (), e, count)
    # a template over the element type T and the count N, any other parameter defaulted
    plist = tmpl.child_by_field_name("parameters")
    order: list[str] = []
    roles: dict[str, str] = {}
    defaults: dict[str, Node] = {}
    for p in plist.named_children if plist is not None else ():
        if p.type == "comment":
            continue
        if p.type == "type_parameter_declaration" and p.named_child_count == 1:
            roles[txt(p.named_children[0])] = "T"
            order.append(txt(p.named_children[0]))
        elif p.type == "parameter_declaration":
            d = p.child_by_field_name("declarator")
            if d is None or d.type != "identifier":
                return None
            roles[txt(d)] = "N"
            order.append(txt(d))
        elif p.type in ("optional_parameter_declaration", "optional_type_parameter_declaration"):
            d, v = p.child_by_field_name("declarator") or p.child_by_field_name("name"), p.child_by_field_name("default_value")
            if d is None or v is None:
                return None
            defaults[txt(d)] = v
        else:
            return None
    if sorted(roles.values()) != ["N", "T"] or roles.get(txt(elem)) != "T" \
            or unparenthesized(size).type != "identifier" or roles.get(txt(unparenthesized(size))) != "N":
        return None
    a = unparenthesized(align)
    if a.type == "identifier" and txt(a) in defaults:
        align = defaults[txt(a)]
    # alignof(T) == sizeof(T) for the scalar element types a vector loop moves
    if _canon(align, roles) not in ("sizeof(T)*N", "N*sizeof(T)", "alignof(T)*N", "N*alignof(T)"):
        return None
    return Pack(qualified, txt(member), tuple(roles[o] for o in order))


def _kernel_namespaces(root: Node, kernel: Node) -> tuple[str, ...]:
    out = []
    p = kernel.parent
    while p is not None:
        if p.type == "namespace_definition" and p.child_by_field_name("name") is not None:
            out.append(txt(p.child_by_field_name("name")))
        p = p.parent
    return tuple(reversed(out))


@lru_cache(maxsize=64)
def _kernel_at(text: str, kernel_start: int) -> tuple[str, ...]:
    root = _parse(text)
    kernel = root.descendant_for_byte_range(kernel_start, kernel_start)
    while kernel is not None and kernel.type != "function_definition":
        kernel = kernel.parent
    return _kernel_namespaces(root, kernel) if kernel is not None else ()


@lru_cache(maxsize=256)
def _packs_in(text: str, before: int | None, kernel_ns: tuple[str, ...]) -> tuple[Pack, ...]:
    root = _parse(text)
    return tuple(p for n in walk(root) if n.type == "struct_specifier" and (before is None or n.end_byte <= before)
                 for p in [_pack(n, kernel_ns)] if p is not None)


def packs(text: str, kernel_start: int, headers: tuple[str, ...] = ()) -> tuple[Pack, ...]:
    """The element packs defined in `text` before the kernel starting at byte `kernel_start`, then
    those of the project headers it includes, named as that kernel writes them; templates first
    (they fit any element type)."""
    kernel_ns = _kernel_at(text, kernel_start)
    found = [*_packs_in(text, kernel_start, kernel_ns), *(p for h in headers for p in _packs_in(h, None, kernel_ns))]
    return tuple(sorted(found, key=lambda p: not p.params))


def pack_for(text: str, kernel_start: int, elem: str, count: int, count_expr: str,
             headers: tuple[str, ...] = ()) -> tuple[str, str] | None:
    """The project's own type for `count` elements of `elem` moved in one access, spelled for the
    kernel, and the name of its array member; or None."""
    for p in packs(text, kernel_start, headers):
        t = p.spelled(elem, count, count_expr)
        if t is not None:
            return t, p.member
    return None


def packs_for(arrays: dict[str, tuple[str, int]], count: int, width: int, count_expr: str,
              where: tuple[str, int], headers: tuple[str, ...] = ()) -> dict[str, tuple[str, str]] | None:
    """For each array (its element type and the bytes of `count` of them), the project's pack
    type and member from `pack_for` (in the text `where[0]`, for the kernel at byte `where[1]`),
    where one moves exactly one access of `width` bytes for every array; else None."""
    if any(nbytes != width for _, nbytes in arrays.values()):
        return None
    out = {}
    for arr, (elem, _) in arrays.items():
        found = pack_for(where[0], where[1], elem, count, count_expr, headers)
        if found is None:
            return None
        out[arr] = found
    return out


# ---- load and store helpers ------------------------------------------------------------------------

# A helper's one statement (after any `static_assert`), its parameters named v (the value) and p
# (the pointer), C a fixed type it moves: what it does, by its tree's tokens.
_LOAD = (r"v=\*p;", r"v=__ldg\(p\);", r"\*reinterpret_cast<(?P<c>\w+)\*>\(&v\)=\*reinterpret_cast<const (?P=c)\*>\(p\);",
         r"\*reinterpret_cast<(?P<c>\w+)\*>\(&v\)=__ldg\(reinterpret_cast<const (?P=c)\*>\(p\)\);")
_LOAD_VALUE = (r"return\*p;", r"return__ldg\(p\);")
_STORE = (r"\*p=v;", r"\*reinterpret_cast<(?P<c>\w+)\*>\(p\)=\*reinterpret_cast<(const )?(?P=c)\*>\(&v\);")


@dataclass(frozen=True)
class Mover:
    """A load or store helper: it moves one value between a register and memory in one access.
    `load`: `f(v, p)` sets v to *p; `load_value`: `v = f(p)`; `store`: `f(v, p)` (or `f(p, v)`
    where `value_first` is False) sets *p to v. A template moves any type (`width` bytes when it
    moves them through a fixed type, `int4` say), a plain function its own `type`; `cached`: it
    reads through `__ldg`, the read-only cache, so only memory the kernel never writes may be
    read with it."""

    name: str
    kind: str
    value_first: bool = True
    type: str | None = None
    width: int | None = None
    cached: bool = False

    direct: bool = False   # applies `__ldg` to the type itself: only CUDA's own types have one

    def moves(self, typ: str, nbytes: int) -> bool:
        """Whether it moves one `typ` (of `nbytes`) in one access."""
        if self.direct and typ not in SIZES:
            return False
        if self.type is not None:
            return self.type == typ and (self.width is None or self.width == nbytes)
        return self.width is None or self.width == nbytes

    def load(self, register: str, pointer: str) -> str:
        """The statement loading `*pointer` into `register` (a `load_value` is an assignment)."""
        return f"{register} = {self.name}({pointer});" if self.kind == "load_value" else \
            f"{self.name}({register}, {pointer});"

    def store(self, register: str, pointer: str) -> str:
        return f"{self.name}({register}, {pointer});" if self.value_first else f"{self.name}({pointer}, {register});"


def _param(p: Node) -> tuple[str, str, bool, str] | None:
    """(name, base type, const, 'value' | 'ref' | 'pointer') of a simple parameter, else None."""
    t, d = p.child_by_field_name("type"), p.child_by_field_name("declarator")
    if p.type != "parameter_declaration" or t is None or d is None:
        return None
    const = any(c.type == "type_qualifier" and txt(c) == "const" for c in p.children)
    how = {"identifier": "value", "reference_declarator": "ref", "pointer_declarator": "pointer"}.get(d.type)
    if how is None:
        return None
    name = d if d.type == "identifier" else next((c for c in d.named_children if c.type == "identifier"), None)
    if name is None or (how == "pointer" and d.child_by_field_name("declarator") != name):
        return None
    return txt(name), txt(t), const, how


def _mover(fn: Node, tparams: list[str]) -> Mover | None:
    d = fn.child_by_field_name("declarator")
    if d is None or d.type != "function_declarator":
        return None
    name, plist = d.child_by_field_name("declarator"), d.child_by_field_name("parameters")
    if name is None or name.type != "identifier" or plist is None:
        return None
    params = [_param(p) for p in plist.named_children if p.type != "comment"]
    if any(p is None for p in params) or len(tparams) > 1:
        return None
    body = fn.child_by_field_name("body")
    stmts = [s for s in body.named_children if s.type not in ("comment", "static_assert_declaration")] \
        if body is not None else []
    if len(stmts) != 1:
        return None
    types = {p[1] for p in params if p is not None}
    if len(types) != 1:
        return None
    typ = next(iter(types))
    if (typ in tparams) == (typ in SIZES):   # the template's parameter, or a fixed type of known size
        return None
    ret = fn.child_by_field_name("type")
    kinds = {p[3]: p for p in params if p is not None}
    if len(params) == 1 and set(kinds) == {"pointer"} and kinds["pointer"][2] and ret is not None and txt(ret) == typ:
        roles, forms, kind = {kinds["pointer"][0]: "p"}, _LOAD_VALUE, "load_value"
    elif len(params) == 2 and "pointer" in kinds and len(kinds) == 2 and ret is not None and txt(ret) == "void":
        (vname, _, vconst, vhow), (pname, _, pconst, _) = next(p for p in params if p and p[3] != "pointer"), kinds["pointer"]
        roles = {vname: "v", pname: "p"}
        if vhow == "ref" and not vconst and pconst:
            forms, kind = _LOAD, "load"
        elif not pconst:
            forms, kind = _STORE, "store"
        else:
            return None
    else:
        return None
    canon = _canon(stmts[0], {**roles, **{t: "T" for t in tparams}})
    m = next((m for m in (re.fullmatch(f, canon) for f in forms) if m is not None), None)
    if m is None:
        return None
    c = m.groupdict().get("c")
    if c is not None and c not in SIZES:
        return None
    widths = {SIZES[c]} if c is not None else set()
    widths |= {SIZES[typ]} if typ in SIZES else set()
    for a in (s for s in body.named_children if s.type == "static_assert_declaration"):   # type: ignore[union-attr]
        size = re.match(r"static_assert\(sizeof\(T\)==(\d+)[,)]", _canon(a, {t: "T" for t in tparams}))
        if size is None:
            return None   # a condition this reading does not follow
        widths.add(int(size.group(1)))
    if len(widths) > 1:
        return None
    width = next(iter(widths), None)
    value_first = kind != "store" or next(i for i, p in enumerate(params) if p and p[3] != "pointer") == 0
    return Mover(txt(name), kind, value_first, None if typ in tparams else typ, width, "__ldg" in canon,
                 "__ldg(p)" in canon)


@lru_cache(maxsize=256)
def _movers_in(text: str, before: int | None, kernel_ns: tuple[str, ...]) -> tuple[Mover, ...]:
    out = []
    for n in walk(_parse(text)):
        if n.type != "function_definition" or (before is not None and n.end_byte > before):
            continue
        tmpl = n.parent if n.parent is not None and n.parent.type == "template_declaration" else None
        tparams: list[str] = []
        if tmpl is not None:
            plist = tmpl.child_by_field_name("parameters")
            for p in plist.named_children if plist is not None else ():
                if p.type != "type_parameter_declaration" or p.named_child_count != 1:
                    tparams = ["", ""]   # anything but one plain type parameter: not read
                    break
                tparams.append(txt(p.named_children[0]))
        where = _namespaces(tmpl or n)
        if where is None or any(c.type == "storage_class_specifier" and txt(c) == "static" for c in n.children) \
                or not any(c.type == "__device__" for c in n.children):   # a kernel can call only device code
            continue
        m = _mover(n, tparams)
        if m is not None:
            out.append(replace(m, name=_qualified(m.name, where, kernel_ns)))
    return tuple(out)


def movers(text: str, kernel_start: int, headers: tuple[str, ...] = ()) -> tuple[Mover, ...]:
    """The load/store helpers the kernel starting at byte `kernel_start` of `text` can call: the
    file's own (before the kernel), then its project headers', named as the kernel writes them."""
    kernel_ns = _kernel_at(text, kernel_start)
    return (*_movers_in(text, kernel_start, kernel_ns), *(m for h in headers for m in _movers_in(h, None, kernel_ns)))


def mover(found: tuple[Mover, ...], kind: str, typ: str, nbytes: int, read_only: bool) -> Mover | None:
    """The first helper that loads (`kind` 'load': either form) or stores one `typ` of `nbytes`;
    one reading through the read-only cache only for memory the kernel never writes."""
    kinds = ("load_value", "load") if kind == "load" else ("store",)
    return next((m for k in kinds for m in found if m.kind == k and m.moves(typ, nbytes)
                 and (read_only or not m.cached)), None)


# ---- ceil division ---------------------------------------------------------------------------------

CEIL_DIV = ("(a+b-1)/b", "(a+(b-1))/b", "(b-1+a)/b", "(a-1+b)/b", "(b+a-1)/b")


def _function_ceil_div(fn: Node) -> str | None:
    d = fn.child_by_field_name("declarator")
    while d is not None and d.type != "function_declarator":
        d = d.child_by_field_name("declarator")
    if d is None:
        return None
    name, plist = d.child_by_field_name("declarator"), d.child_by_field_name("parameters")
    params = [p for p in plist.named_children] if plist is not None else []
    if name is None or name.type != "identifier" or len(params) != 2 \
            or any(p.type != "parameter_declaration" for p in params):
        return None
    names = {}
    for role, p in zip("ab", params):
        pd = p.child_by_field_name("declarator")
        if pd is None or pd.type != "identifier":
            return None
        names[txt(pd)] = role
    body = fn.child_by_field_name("body")
    stmts = [s for s in body.named_children if s.type != "comment"] if body is not None else []
    if len(stmts) != 1 or stmts[0].type != "return_statement" or not stmts[0].named_children:
        return None
    value = stmts[0].named_children[0]
    return txt(name) if _top(value) == "binary_expression" and _canon(unparenthesized(value), names) in CEIL_DIV else None


def _macro_ceil_div(m: Node) -> str | None:
    name, plist, value = (m.child_by_field_name(f) for f in ("name", "parameters", "value"))
    if name is None or plist is None or value is None:
        return None
    params = [txt(p) for p in plist.named_children]
    expr = source.parse_expression(txt(value).strip())
    if len(params) != 2 or expr is None:
        return None
    return txt(name) if _canon(unparenthesized(expr), dict(zip(params, "ab"))) in CEIL_DIV else None


@lru_cache(maxsize=256)
def _ceil_div_in(text: str) -> str | None:
    root = _parse(text)
    for n in walk(root):
        if n.type == "preproc_function_def" and _namespaces(n) == ():
            found = _macro_ceil_div(n)
        elif n.type == "function_definition" and _namespaces(
                n.parent if n.parent is not None and n.parent.type == "template_declaration" else n) == ():
            found = _function_ceil_div(n)
        else:
            continue
        if found is not None:
            return found
    return None


def ceil_div(text: str, headers: tuple[str, ...] = ()) -> str | None:
    """The name of the project's ceil-division helper visible at file scope — a function (or
    function template) of two parameters returning `(a + b - 1) / b`, or a macro expanding to
    it — in the file, else in the headers it includes; else None."""
    return next((f for f in (_ceil_div_in(t) for t in (text, *headers)) if f is not None), None)


def defined_functions(text: str, headers: tuple[str, ...] = ()) -> frozenset[str]:
    """The names of the functions and function-like macros `text` and its headers define."""
    return frozenset().union(*(_defined_in(t) for t in (text, *headers)))


@lru_cache(maxsize=256)
def _defined_in(text: str) -> frozenset[str]:
    root = _parse(text)
    out = set()
    for n in walk(root):
        if n.type == "preproc_function_def" and n.child_by_field_name("name") is not None:
            out.add(txt(n.child_by_field_name("name")))
        elif n.type == "function_definition":
            d = n.child_by_field_name("declarator")
            while d is not None and d.type != "function_declarator":
                d = d.child_by_field_name("declarator")
            if d is not None and d.child_by_field_name("declarator") is not None:
                out.add(txt(d.child_by_field_name("declarator")).split("::")[-1])
    return frozenset(out)

"""What a kernel may write, for transformations that move its reads: the buffers it never writes
(`read_only`, with whether each is `__restrict__`), the names that point into shared memory or the
thread's own arrays (`shared_roots`), and whether a run of statements writes only those
(`writes_only_private`). A read of memory nothing writes may run earlier; these say which."""
from __future__ import annotations

from tree_sitter import Node

from . import base
from .base import body
from .tree import (assigned_names, callee, declared_name, declared_names, function_name, is_lvalue, txt,
                   unparenthesized, walk)

LOADS = {"__ldg", "__ldcs", "__ldcg", "__ldca", "__ldlu", "__ldcv"}


def shared_roots(kb: Node, pointers: set[str]) -> tuple[set[str], set[str]]:
    """(names that point into shared memory, the thread's own arrays) in the kernel body: the
    `__shared__` declarations, and pointer locals never reassigned whose initializer reaches only
    such names (and no parameter or other pointer)."""
    shared, private, locals_ = set(), set(), {}
    for d in (n for n in walk(kb) if n.type == "declaration"):
        is_shared = any(c.type == "type_qualifier" and txt(c) == "__shared__" for c in d.children) or \
            "__shared__" in txt(d.child_by_field_name("type") or d)
        for decl in d.children_by_field_name("declarator"):
            name, is_ptr = declared_name(decl)
            if not name:
                continue
            core = decl.child_by_field_name("declarator") if decl.type == "init_declarator" else decl
            if is_shared:
                shared.add(name)
            elif core is not None and core.type == "array_declarator":
                private.add(name)
            elif is_ptr and decl.type == "init_declarator":
                locals_[name] = decl.child_by_field_name("value")
    changed = assigned_names(kb)
    for _ in range(3):
        for name, value in locals_.items():
            if name in shared or name in changed or value is None:
                continue
            names = {txt(c) for c in walk(value) if c.type == "identifier"}
            ptrs = names & (pointers | set(locals_) | shared | private)
            if ptrs and ptrs <= shared:
                shared.add(name)
    return shared, private


def read_only(kb: Node, params: dict) -> dict[str, bool]:
    """The buffers the kernel never writes, each with whether it is `__restrict__`: pointer
    parameters whose every use is a read (`X[e]`, `__ldg(&X[e])`) or the start of a pointer local
    (`const T* row = X + r * cols;`, never reassigned, itself used only so), and those locals
    (restrict where everything they start from is)."""
    sources: dict[str, set[str]] = {p: set() for p, info in params.items() if "volatile" not in info.elem}
    starts: dict[int, str] = {}     # the byte span of a local's initializer -> the local
    changed = assigned_names(kb)
    for d in (n for n in walk(kb) if n.type == "declaration"):
        for decl in d.children_by_field_name("declarator"):
            name, is_ptr = declared_name(decl)
            value = decl.child_by_field_name("value") if decl.type == "init_declarator" else None
            if not (name and is_ptr and value is not None) or name in changed or name in sources:
                continue
            names = {txt(c) for c in walk(value) if c.type == "identifier"} & set(sources)
            if names:
                sources[name] = names
                starts[value.start_byte] = name
    bad: set[str] = set()
    for n in walk(kb):
        if n.type != "identifier" or txt(n) not in sources:
            continue
        p = n.parent
        if p is not None and p.type == "subscript_expression" and p.child_by_field_name("argument") == n:
            if not written(p) or _loaded(p):
                continue
        elif p is not None and p.type in ("init_declarator", "pointer_declarator") and \
                p.child_by_field_name("declarator") == n:
            continue   # the local's own name where it is declared
        elif any(a.start_byte in starts for a in _ancestors(n)):
            continue   # inside the initializer of a pointer local that is itself checked
        bad.add(txt(n))
    for _ in range(len(sources)):   # a written local writes what it starts from, and the other way round
        for name, src in sources.items():
            if name in bad:
                bad |= src
            elif src & bad:
                bad.add(name)
    return {name: all(params[s].restrict for s in _roots(name, sources)) for name in sources if name not in bad}


def _roots(name: str, sources: dict[str, set[str]]) -> set[str]:
    return {name} if not sources.get(name) else set().union(*(_roots(s, sources) for s in sources[name]))


def _ancestors(n: Node):
    p = n.parent
    while p is not None:
        yield p
        p = p.parent


def written(sub: Node) -> bool:
    """The element (or a field or an inner element of it: `X[i].f`, `X[i][j]`) is written."""
    top = sub
    while top.parent is not None and (top.parent.type == "parenthesized_expression" or
                                      (top.parent.type in ("field_expression", "subscript_expression") and
                                       top.parent.child_by_field_name("argument") == top)):
        top = top.parent
    return is_lvalue(top)


def _loaded(sub: Node) -> bool:
    """`&X[e]` is the one argument of a load intrinsic (`__ldg(&X[e])`): a read."""
    p = sub.parent
    while p is not None and p.type == "parenthesized_expression":
        p = p.parent
    if p is None or p.type != "pointer_expression" or txt(p.child(0)) != "&":
        return False
    args = p.parent
    return args is not None and args.type == "argument_list" and len(args.named_children) == 1 and \
        args.parent is not None and callee(args.parent) in LOADS


def pointer_locals(kb: Node) -> set[str]:
    out = set()
    for d in (n for n in walk(kb) if n.type == "declaration"):
        for decl in d.children_by_field_name("declarator"):
            name, is_ptr = declared_name(decl)
            if name and is_ptr:
                out.add(name)
    return out


def _base_names(lvalue: Node) -> set[str]:
    """The names a written place is reached through (`p` of `p[i]`, `*(p + i)`, `p->f`)."""
    n = unparenthesized(lvalue)
    if n.type == "subscript_expression":
        return {txt(c) for c in walk(n.child_by_field_name("argument")) if c.type == "identifier"}
    if n.type == "field_expression":
        return _base_names(n.child_by_field_name("argument"))
    return {txt(c) for c in walk(n) if c.type == "identifier"}


def writes_only_private(nodes: list[Node], sc: base.Scope, ok: set[str], pointers: set[str]) -> bool:
    """Every write of `nodes` (and of the helpers they call) reaches shared memory, the thread's
    own arrays or plain variables: nothing there can alias a buffer the kernel reads."""
    helpers = {function_name(h): h for h in sc.helpers}
    for st in nodes:
        for n in walk(st):
            if n.type == "assignment_expression":
                left = n.child_by_field_name("left")
                if unparenthesized(left).type != "identifier" and not _base_names(left) <= ok:
                    return False
            elif n.type == "update_expression":
                arg = n.child_by_field_name("argument")
                if unparenthesized(arg).type != "identifier" and not _base_names(arg) <= ok:
                    return False
            elif n.type == "call_expression":
                name = callee(n)
                args = [a for a in n.child_by_field_name("arguments").named_children if a.type != "comment"]
                if name.startswith("atomic"):
                    if not args or not _base_names(args[0]) <= ok:
                        return False
                elif name not in LOADS:
                    for a in args:   # a pointer handed over reaches shared or private memory only
                        if _handed(a, pointers) - ok:
                            return False
                    if name in helpers and not _helper_writes_own(helpers[name]):
                        return False
    return True


def _handed(arg: Node, pointers: set[str]) -> set[str]:
    """The pointers an argument hands to the function called: `p`, `p + k`, `&p[k]` — not an
    element's value (`f(p[k])`) nor a load intrinsic's result (`f(__ldg(&p[k]))`)."""
    out = set()
    for n in walk(arg):
        if n.type != "identifier" or txt(n) not in pointers:
            continue
        p = n.parent
        if p is not None and p.type == "subscript_expression" and p.child_by_field_name("argument") == n and \
                (not written(p) or _loaded(p)):
            continue
        if any(a.type == "call_expression" and callee(a) in LOADS for a in _ancestors(n) if a.start_byte >= arg.start_byte
               and a.end_byte <= arg.end_byte):
            continue
        out.add(txt(n))
    return out


def _helper_writes_own(fn: Node) -> bool:
    """A device function writes only through its parameters and locals (no global variable)."""
    from .tree import params
    own = declared_names(body(fn)) | {declared_name(p.child_by_field_name("declarator"))[0] for p in params(fn)}
    for n in walk(body(fn)):
        if n.type in ("assignment_expression", "update_expression"):
            target = n.child_by_field_name("left") if n.type == "assignment_expression" else \
                n.child_by_field_name("argument")
            if not _base_names(target) <= own:
                return False
    return True

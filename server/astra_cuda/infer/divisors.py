"""The sizes a kernel divides by: in its body (`i / blocksize`, a shift by a log2), at its launch
(`cdiv(n, blocksize)`) or through a helper it hands them to (`CEILDIV(max_tokens, block_size)`) —
the divisors `roles` fits quotients over. Separate because it reads the tree, not the probes; pure."""
from __future__ import annotations

import ast

from ..model import access, exprs
from ..model.source import Kernel
from ..model.syntax import walk
from .shape_fits import TABLE

DIVISIONS = (ast.Div, ast.FloorDiv)


def divisors(kernel: Kernel, launch: list[str], names: list[str], helpers=None) -> list[str]:
    """The sizes the kernel's body (`i / blocksize`, `i >> (31 - __clz(blocksize))`) or its launch
    (`cdiv(n, blocksize)`) divide by; also those it passes to a helper or macro (`helpers`: their
    definitions by name) as an argument the helper divides by (`CEILDIV(max_tokens, block_size)`)."""
    from .masks import log2_of
    out: list[str] = []
    body = access.kernel_body(kernel)
    for n in walk(body) if body is not None else ():
        if n.type == "call_expression":
            out += _divided_arguments(n, names, helpers or {})
        op = n.child_by_field_name("operator").type if n.type == "binary_expression" else ""
        if op == "/":
            b = n.child_by_field_name("right")
            if b is not None and b.type == "identifier" and b.text.decode() in names:
                out.append(b.text.decode())
        elif op == ">>" and (x := log2_of(n.child_by_field_name("right"), {s: s for s in names})) is not None:
            out.append(x)   # a shift by log2 of a size: a division by it (a power of two)
    for x in launch:
        try:
            tree = exprs.parse(x)
        except exprs.ExprError:
            continue
        for t in ast.walk(tree):
            if isinstance(t, ast.BinOp) and isinstance(t.op, DIVISIONS) and isinstance(t.right, ast.Name):
                out.append(t.right.id)
            elif isinstance(t, ast.Call) and len(t.args) == 2 and isinstance(t.args[1], ast.Name):
                out.append(t.args[1].id)
    return [n for n in dict.fromkeys(out) if n in names and n != TABLE]


def _divided_arguments(call, names: list[str], helpers) -> list[str]:
    """The size arguments of `call` (identifiers) at the positions of the parameters its helper's
    definition divides by (`x / y` with y that parameter)."""
    fn = call.child_by_field_name("function")
    name = fn.text.decode().split("::")[-1].split("<")[0] if fn is not None else ""
    definition = helpers.get(name)
    decl = definition.child_by_field_name("declarator") if definition is not None else None
    plist = decl.child_by_field_name("parameters") if decl is not None else None
    args = call.child_by_field_name("arguments")
    if plist is None or args is None:
        return []
    params = [(p.child_by_field_name("declarator").text.decode().lstrip("*&") if p.child_by_field_name("declarator")
               is not None else "") for p in plist.named_children if p.type == "parameter_declaration"]
    divided = set()
    for b in walk(definition):
        right = b.child_by_field_name("right") if b.type == "binary_expression" else None
        if right is not None and right.type == "identifier" and b.child_by_field_name("operator").type == "/":
            divided.add(right.text.decode())
    return [a.text.decode() for a, p in zip([a for a in args.named_children if a.type != "comment"], params)
            if p in divided and a.type == "identifier" and a.text.decode() in names]

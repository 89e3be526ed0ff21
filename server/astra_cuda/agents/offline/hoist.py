"""Hoist loop-invariant work out of loops: leading `const` declarations of a loop body whose
initialisers depend only on values the loop does not change (e.g. the exp weights in
merge_attn_states, recomputed for every element) move in front of the loop."""
from __future__ import annotations

from tree_sitter import Node

from . import base
from .base import Context, Edit, Rewrite, body, expr_kind, pointer_params, return_types, variable_types, written_pointers
from .tree import apply_edits, assigned_names, callee, declared_name, declared_names, line_indent, txt, walk

PURE = base.FLOAT_FUNCS - {"__shfl_xor_sync", "__shfl_down_sync", "__shfl_sync", "__shfl_up_sync"} | {
    "min", "max", "__float2half", "__half2float", "__float2bfloat16", "__bfloat162float"}


def _invariant(init: Node, variant: set[str], readonly: set[str]) -> bool:
    for n in walk(init):
        if n.type == "identifier" and txt(n) in variant:
            return False
        if n.type == "call_expression" and callee(n) not in PURE:
            return False
        if n.type == "subscript_expression" and txt(n.child_by_field_name("argument")) not in readonly:
            return False
        if n.type in ("assignment_expression", "update_expression", "lambda_expression"):
            return False
    return True


class Hoist(base.Transform):
    name = "hoist"
    title = "hoist loop-invariant computations out of loops"
    note = "loop-invariant values computed once, before the loop"
    expected = "removes redundant per-iteration loads and math (exp, max) from the hot loop"

    def rewrite(self, text: str, ctx: Context, sc: base.Scope, params: dict) -> Rewrite | None:
        fn = sc.kernel
        ptrs = pointer_params(fn)
        readonly = set(ptrs) - written_pointers(fn, set(ptrs))
        data = text.encode("utf-8")
        edits, moved = [], []
        types, rets, rcp_count = variable_types(fn), return_types(sc.root), [0]
        for loop in (n for n in walk(body(fn)) if n.type in ("for_statement", "while_statement")):
            if any(a.type in ("for_statement", "while_statement", "do_statement")
                   for a in _ancestors(loop, body(fn))):
                continue  # outermost loops only: keeps the rewrite simple and the edits disjoint
            lbody = loop.child_by_field_name("body")
            if lbody is None or lbody.type != "compound_statement":
                continue
            variant = assigned_names(loop) | declared_names(loop.child_by_field_name("initializer") or lbody)
            # Everything declared in the loop body is variant until proven otherwise.
            declared_in_body = declared_names(lbody)
            hoisted: list[Node] = []
            hoisted_names: set[str] = set()
            for stmt in lbody.named_children:
                if stmt.type == "comment":
                    continue
                if stmt.type != "declaration" or not any(c.type == "type_qualifier" and txt(c) == "const"
                                                         for c in stmt.children):
                    break
                decls = stmt.children_by_field_name("declarator")
                names = [declared_name(d)[0] for d in decls]
                inits = [d.child_by_field_name("value") for d in decls]
                if any(i is None for i in inits) or any(n in assigned_names(lbody) for n in names):
                    break
                blocked = variant | (declared_in_body - hoisted_names)
                if not all(_invariant(i, blocked, readonly) for i in inits):
                    break
                hoisted.append(stmt)
                hoisted_names.update(n for n in names if n)
            # Divisions by a loop-invariant float: one reciprocal before the loop, a multiply inside.
            blocked = variant | (declared_in_body - hoisted_names)
            recips: list[str] = []
            for n in walk(lbody):
                if n.type != "binary_expression" or txt(n.child_by_field_name("operator")) != "/":
                    continue
                if any(h.start_byte <= n.start_byte < h.end_byte for h in hoisted):
                    continue
                left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
                if expr_kind(left, types, ptrs, rets) != "float" or expr_kind(right, types, ptrs, rets) != "float":
                    continue
                if not _invariant(right, blocked, readonly) or right.type == "number_literal":
                    continue
                name = f"astra_rcp{len(recips) + rcp_count[0]}"
                recips.append(f"const float {name} = 1.0f / {_wrap(right)};")
                edits.append(Edit(n.start_byte, n.end_byte, f"{_wrap(left)} * {name}"))
                moved.append(f"1/{_wrap(right)}")
            rcp_count[0] += len(recips)
            if not hoisted and not recips:
                continue
            indent = line_indent(data, loop.start_byte)
            block = "".join(f"{txt(s)}\n{indent}" for s in hoisted) + "".join(f"{r}\n{indent}" for r in recips)
            edits.append(Edit(loop.start_byte, loop.start_byte, f"// astra: hoisted out of the loop\n{indent}{block}"))
            for s in hoisted:
                start = data.rfind(b"\n", 0, s.start_byte) + 1
                end = s.end_byte + 1 if data[s.end_byte:s.end_byte + 1] == b"\n" else s.end_byte
                edits.append(Edit(start, end, ""))
            moved[:0] = sorted(hoisted_names)
        if not edits:
            return None
        return Rewrite(self.name, apply_edits(text, edits),
                       (f"hoisted loop-invariant {', '.join(f'`{m}`' for m in moved)} out of the loop",))


def _wrap(n: Node) -> str:
    simple = ("parenthesized_expression", "identifier", "number_literal", "call_expression", "subscript_expression")
    return txt(n) if n.type in simple else f"({txt(n)})"


def _ancestors(node: Node, stop: Node):
    p = node.parent
    while p is not None and p != stop:
        yield p
        p = p.parent

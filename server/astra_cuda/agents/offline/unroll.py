"""`#pragma unroll` for loops with a fixed trip count (literal or macro bounds, constant step)."""
from __future__ import annotations

from typing import Any

from tree_sitter import Node

from . import base
from .base import Context, Edit, Rewrite, body
from .tree import apply_edits, line_indent, txt, walk


def _const(n: Node | None, macros: set[str]) -> bool:
    if n is None:
        return False
    return all(c.type in ("number_literal", "binary_expression", "parenthesized_expression", "+", "-", "*", "/",
                          "<<", ">>", "(", ")") or (c.type == "identifier" and txt(c) in macros)
               for c in walk(n))


def fixed_trip(loop: Node, macros: set[str]) -> bool:
    init = loop.child_by_field_name("initializer")
    cond = loop.child_by_field_name("condition")
    upd = loop.child_by_field_name("update")
    if init is None or cond is None or upd is None or init.type != "declaration":
        return False
    decls = init.children_by_field_name("declarator")
    if len(decls) != 1 or decls[0].type != "init_declarator":
        return False
    var = txt(decls[0].child_by_field_name("declarator"))
    if not _const(decls[0].child_by_field_name("value"), macros):
        return False
    if cond.type != "binary_expression" or txt(cond.child_by_field_name("left")) != var or \
            not _const(cond.child_by_field_name("right"), macros):
        return False
    if upd.type == "update_expression":
        return txt(upd.child_by_field_name("argument")) == var
    if upd.type == "assignment_expression":
        return txt(upd.child_by_field_name("left")) == var and \
            txt(upd.child_by_field_name("operator")) in ("+=", "-=", ">>=", "<<=", "*=", "/=") and \
            _const(upd.child_by_field_name("right"), macros)
    return False


def macro_constants(root: Node) -> set[str]:
    out = set()
    for n in walk(root):
        if n.type == "preproc_def":
            v = n.child_by_field_name("value")
            if v is not None and txt(v).strip().replace("u", "").replace("U", "").isdigit():
                out.add(txt(n.child_by_field_name("name")))
    return out


class Unroll(base.Transform):
    name = "unroll"
    title = "#pragma unroll on fixed-trip loops"
    note = "unrolled fixed-trip loops: no loop overhead, more independent work"
    expected = "removes loop overhead and exposes independent work to the scheduler"

    def rewrite(self, text: str, ctx: Context, sc: base.Scope, params: dict[str, Any]) -> Rewrite | None:
        macros = macro_constants(sc.root)
        data = text.encode("utf-8")
        edits = []
        for fn in sc.functions:
            for loop in (n for n in walk(body(fn)) if n.type == "for_statement"):
                prev = loop.prev_sibling
                if prev is not None and prev.type == "preproc_call" and "unroll" in txt(prev):
                    continue
                if fixed_trip(loop, macros):
                    indent = line_indent(data, loop.start_byte)
                    edits.append(Edit(loop.start_byte, loop.start_byte, f"#pragma unroll\n{indent}"))
        if not edits:
            return None
        return Rewrite(self.name, apply_edits(text, edits), (f"`#pragma unroll` on {len(edits)} fixed-trip loop(s)",))


class UnrollVectorLoop(base.Transform):
    """`#pragma unroll 2` on a vectorized loop that runs several steps per thread at the timed
    sizes: two steps' loads are issued before the first step's math (more bytes in flight)."""

    name = "unroll_vector"
    title = "two vector steps in flight per thread (#pragma unroll 2)"
    note = "two vector steps in flight per thread, to hide memory latency in long rows"
    expected = "more independent 16-byte loads in flight per thread: hides memory latency in long rows"

    def rewrite(self, text: str, ctx: Context, sc: base.Scope, params: dict[str, Any]) -> Rewrite | None:
        data = text.encode("utf-8")
        edits = []
        for loop in (n for n in walk(body(sc.kernel)) if n.type == "for_statement"):
            init = loop.child_by_field_name("initializer")
            if init is None or not txt(init).split("=")[0].split()[-1].startswith("astra_i0") or \
                    "gridDim" in txt(loop.child_by_field_name("update")):
                continue  # block-stride vector loops only: the per-thread step count is known
            prev = loop.prev_sibling
            if prev is not None and prev.type == "preproc_call" and "unroll" in txt(prev):
                continue
            if not self._long_rows(loop, ctx):
                continue
            indent = line_indent(data, loop.start_byte)
            edits.append(Edit(loop.start_byte, loop.start_byte, f"#pragma unroll 2\n{indent}"))
        if not edits:
            return None
        return Rewrite(self.name, apply_edits(text, edits),
                       (f"`#pragma unroll 2` on {len(edits)} vectorized loop(s)",))

    @staticmethod
    def _long_rows(loop: Node, ctx: Context) -> bool:
        """At the largest timed size each thread takes at least two vector steps."""
        if not ctx.block_threads or not ctx.row_elements:
            return False
        block = loop.parent  # holds `constexpr int astra_vec = V; const T astra_n = N;` before the loop
        init = loop.child_by_field_name("initializer")
        sfx = txt(init).split("=")[0].split()[-1][len("astra_i0"):] if init is not None else ""
        vec = n = None
        for stmt in block.named_children if block is not None else ():
            if stmt.type != "declaration":
                continue
            for d in stmt.children_by_field_name("declarator"):
                name = txt(d.child_by_field_name("declarator"))
                value = d.child_by_field_name("value")
                if name == f"astra_vec{sfx}" and value is not None:
                    vec = int(txt(value)) if txt(value).isdigit() else None
                elif name == f"astra_n{sfx}" and value is not None:
                    n = ctx.row_elements.get(txt(value))
        return bool(vec and n and n >= 2 * vec * ctx.block_threads)

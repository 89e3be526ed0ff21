"""Warp-shuffle block reductions in place of shared-memory tree reductions.

Recognises a call `const float s = F(v, scratch);` (a top-level statement of the kernel) where
the device function F is the classic tree: `scratch[tid] = v; __syncthreads(); for (stride ...;
stride >>= 1) { ... scratch[tid] += scratch[tid + stride]; __syncthreads(); } return scratch[0];`
over a 1-D block. The call is replaced by two shuffle stages (within warps, then across the
warps' partial sums) that handle a partial last warp and any blockDim.x up to 1024; a shared
scratch array left unused is removed."""
from __future__ import annotations

from tree_sitter import Node

from . import base
from .base import Context, Edit, Rewrite, body, variable_types
from .tree import apply_edits, callee, declared_name, find_function, line_indent, params, txt, walk


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


def _reduction(out: str, value: str, ind: str) -> str:
    i1, i2 = ind + "  ", ind + "    "
    stage = lambda v, w, m: (  # noqa: E731 - one shuffle tree, guarded for partial warps
        f"#pragma unroll\n{{i}}for (int astra_o = 16; astra_o > 0; astra_o >>= 1) {{{{\n"
        f"{{i}}  const float astra_t = __shfl_down_sync({m}, {v}, astra_o);\n"
        f"{{i}}  if (astra_lane + astra_o < {w}) {v} += astra_t;\n{{i}}}}}}")
    return (
        f"// astra: warp-shuffle block reduction (was a shared-memory tree)\n"
        f"{ind}float {out};\n{ind}{{\n"
        f"{i1}__shared__ float astra_partial[33];\n"
        f"{i1}float astra_v = {value};\n"
        f"{i1}const unsigned astra_lane = threadIdx.x % 32u, astra_warp = threadIdx.x / 32u;\n"
        f"{i1}const unsigned astra_left = blockDim.x - astra_warp * 32u;\n"
        f"{i1}const unsigned astra_width = astra_left < 32u ? astra_left : 32u;\n"
        f"{i1}const unsigned astra_mask = astra_width == 32u ? 0xffffffffu : (1u << astra_width) - 1u;\n"
        f"{i1}" + stage("astra_v", "astra_width", "astra_mask").format(i=i1) + "\n"
        f"{i1}if (astra_lane == 0) astra_partial[astra_warp] = astra_v;\n"
        f"{i1}__syncthreads();\n"
        f"{i1}if (astra_warp == 0) {{\n"
        f"{i2}const unsigned astra_warps = (blockDim.x + 31u) / 32u;\n"
        f"{i2}float astra_w = astra_lane < astra_warps ? astra_partial[astra_lane] : 0.0f;\n"
        f"{i2}" + stage("astra_w", "astra_width", "astra_mask").format(i=i2) + "\n"
        f"{i2}if (astra_lane == 0) astra_partial[32] = astra_w;\n"
        f"{i1}}}\n"
        f"{i1}__syncthreads();\n"
        f"{i1}{out} = astra_partial[32];\n"
        f"{ind}}}")


class WarpReduce(base.Transform):
    name = "warp_reduce"
    title = "warp-shuffle reduction instead of a shared-memory tree"
    expected = "fewer barriers and shared-memory round trips in the reduction (latency)"

    def apply(self, text: str, ctx: Context) -> Rewrite | None:
        sc = base.scope(text, ctx.kernel)
        if sc is None:
            return None
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
        if not edits:
            return None
        return Rewrite(self.name, apply_edits(text, edits), tuple(changes))

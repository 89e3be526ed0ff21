"""Histograms and other scattered counts: one global atomic per element -> counts privatized in
shared memory per block, added to the global bins once per block (and a grid capped at the launch
site).

Recognises `if (i < N) { ...; atomicAdd(&H[E], V); }` (or `H + E`, or the `if (i >= N) return;`
form) where `H` is a parameter whose spec shape is a fixed number of bins small enough for shared
memory and whose elements are integers (counts: adding them in another order is exact). Many
threads hitting the same few bins serialize in the L2; in shared memory they contend within one
block only. Every block zeroes its bins, counts over a grid-stride loop (the same elements for
any launch), then adds its non-zero bins into `H` — one atomic per bin per block. A bin index
outside the bins goes to `H` directly, as the original did (so nothing changes where the data
holds an index the spec's shape does not cover).
"""
from __future__ import annotations

import re

from tree_sitter import Node

from . import base
from .base import Context, Rewrite, pointer_params
from .block_atomic import BLOCKS, capped, match_atomic_loop
from .tree import txt

COUNTS = {"int": 4, "unsigned int": 4, "unsigned": 4, "unsigned long long": 8, "unsigned long long int": 8}
SHARED_BYTES = 32 * 1024       # the block's bins: a quarter of an H100 SM's shared memory


def _bins(address: Node, pointers: dict, var: str) -> tuple[str, str] | None:
    """(H, E) for `&H[E]` or `H + E` with H a pointer parameter."""
    node = address
    while node.type == "parenthesized_expression" and node.named_children:
        node = node.named_children[0]
    if node.type == "pointer_expression" and txt(node.child(0)) == "&":
        sub = node.child_by_field_name("argument")
        if sub is not None and sub.type == "subscript_expression":
            h = sub.child_by_field_name("argument")
            idx = sub.child_by_field_name("indices") or sub.child_by_field_name("index")
            if idx is not None and idx.type == "subscript_argument_list":
                idx = idx.named_children[0] if len(idx.named_children) == 1 else None
            if h is not None and idx is not None and h.type == "identifier" and txt(h) in pointers:
                return txt(h), txt(idx)
    if node.type == "binary_expression" and txt(node.child_by_field_name("operator")) == "+":
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        if left.type == "identifier" and txt(left) in pointers:
            return txt(left), txt(right)
    return None


class Privatize(base.Transform):
    any_grid = True   # a grid-stride loop: right for any grid (a size dispatch may choose the grid alone)
    name = "privatize"
    title = "histogram bins privatized in shared memory, added to the global bins once per block"
    note = "per-block bins in shared memory, added to the global bins once per block: fewer global atomics"
    expected = ("atomics of many threads into a few global bins serialize in the L2; counting in shared memory "
                "per block and adding each bin once per block leaves the kernel bound by reading the data")

    def rewrite(self, text: str, ctx: Context, sc: base.Scope, params: dict) -> Rewrite | None:
        blocks = params.get("blocks", 1024)
        m = match_atomic_loop(text, ctx, sc)
        if blocks not in BLOCKS or m is None:
            return None
        pointers = pointer_params(sc.kernel)
        found = _bins(m.address, pointers, m.el.var)
        if found is None:
            return None
        hist, index = found
        count_type = " ".join(pointers[hist].elem.replace("volatile", "").split())
        arg = m.spec.args.get(hist)
        shape = list(arg.shape) if arg is not None and arg.pointer else []
        if count_type not in COUNTS or len(shape) != 1 or not re.fullmatch(r"\d+", shape[0].strip()):
            return None
        nbins = int(shape[0])
        if not 1 <= nbins * COUNTS[count_type] <= SHARED_BYTES:
            return None
        if hist in m.changed or m.read_elsewhere(hist):
            return None
        ind, inner = m.indents(text)
        before = (f"// astra: this block's bins in shared memory (a bin outside them goes to `{hist}` directly)\n"
                  f"{ind}__shared__ {count_type} astra_bins[{nbins}];\n"
                  f"{ind}for (int astra_b = threadIdx.x; astra_b < {nbins}; astra_b += blockDim.x) astra_bins[astra_b] = 0;\n"
                  f"{ind}__syncthreads();\n{ind}")
        atomic = (f"{{\n{inner}  const long long astra_bin = (long long)({index});\n"
                  f"{inner}  if (astra_bin >= 0 && astra_bin < {nbins}) atomicAdd(&astra_bins[astra_bin], {txt(m.value)});\n"
                  f"{inner}  else atomicAdd({hist} + astra_bin, {txt(m.value)});\n{inner}}}")
        after = (f"\n{ind}__syncthreads();\n"
                 f"{ind}for (int astra_b = threadIdx.x; astra_b < {nbins}; astra_b += blockDim.x)\n"
                 f"{inner}if (astra_bins[astra_b] != 0) atomicAdd(&{hist}[astra_b], astra_bins[astra_b]);")
        new_text = m.replace(text, before, atomic, after)
        changes = [f"the {nbins} bins of `{hist}` counted in shared memory per block over a grid-stride loop, "
                   f"each added to `{hist}` once per block"]
        return capped(self.name, text, ctx, m.spec, new_text, blocks, changes,
                      f"at most {blocks} blocks: each block counts many elements, then adds its bins once")

    def alternatives(self, rw: Rewrite, ctx: Context) -> list[dict]:
        return [{"blocks": b} for b in BLOCKS if b != rw.params.get("blocks")]

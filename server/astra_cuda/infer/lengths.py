"""Lengths held in an integer array, and what a kernel's body and the device helpers it hands its
parameters to say about its sizes.

vLLM's paged attention (`paged_attention_v1_kernel`, csrc/attention/attention_kernels.cuh) reads
`seq_len = seq_lens[seq_idx]` and loops over `DIVIDE_ROUND_UP(seq_len, BLOCK_SIZE)` blocks of its
block table, writing one logit per token into dynamic shared memory that the launcher sizes from
`max_seq_len`, a size the kernel is never handed. Such an array holds lengths, not indices: drawn
as indices below the table's rows, a length runs the loops past the shared memory the launch gave
and past each row of the block table (on a GPU, garbage that differs from run to run). Its values
are 1 … that size, the longest the launch makes room for.

Separate from `roles` and `draft` because it is a reading of the tree (following helpers, locals
that copy `gridDim`), which both the probes and the draft's requirements use."""
from __future__ import annotations

from collections.abc import Iterator

from tree_sitter import Node

from ..model import access, exprs, syntax
from ..model.access_nodes import boundary_arrays
from ..model.source import Kernel
from ..model.syntax import declarator_name, function_declarator, walk

_HELPER_DEPTH = 4   # device helpers followed from the kernel (vLLM: the __global__ wrapper, then its helper)
_DIMS = {"x": 0, "y": 1, "z": 2}


def _params(definition: Node) -> list[str]:
    decl = function_declarator(definition.child_by_field_name("declarator"))
    plist = decl.child_by_field_name("parameters") if decl is not None else None
    return [(declarator_name(p.child_by_field_name("declarator"))[0] or "") if p.type == "parameter_declaration"
            else "" for p in (plist.named_children if plist is not None else ()) if p.type != "comment"]


def bodies(kernel: Kernel, helpers: dict[str, Node] | None) -> Iterator[tuple[Node, dict[str, str]]]:
    """The kernel's body, and the body of each device helper it (or a helper so reached) calls with
    some of its parameters, each with the map from the body's names to the kernel's parameters they
    stand for (`paged_attention_kernel(…, seq_lens, …)` inside the `__global__` wrapper)."""
    body = access.kernel_body(kernel)
    if body is None:
        return
    own = {p.name: p.name for p in kernel.params}
    todo, seen = [(body, own, 0)], set()
    while todo:
        node, names, depth = todo.pop(0)
        yield node, names
        if depth >= _HELPER_DEPTH:
            continue
        for call in walk(node):
            fn = call.child_by_field_name("function") if call.type == "call_expression" else None
            name = syntax.text(fn).split("::")[-1].split("<")[0].strip() if fn is not None else ""
            definition = (helpers or {}).get(name)
            args = call.child_by_field_name("arguments")
            if definition is None or args is None or (name, tuple(sorted(names.items()))) in seen:
                continue
            seen.add((name, tuple(sorted(names.items()))))
            passed = {p: names[syntax.text(a)] for p, a in zip(_params(definition), [
                a for a in args.named_children if a.type != "comment"]) if p and a.type == "identifier"
                and syntax.text(a) in names}
            inner = definition.child_by_field_name("body")
            if passed and inner is not None:
                todo.append((inner, passed, depth + 1))


def reached_text(kernel: Kernel, helpers: dict[str, Node] | None) -> str:
    """The kernel's text and the bodies of the helpers it hands its parameters to (`bodies`): what
    a question of the whole kernel reads (sgl-kernel's rotary kernel strides by `blockDim` only in
    the helper it calls, so its `min(heads * rot / 2, 512)` threads cover any number of heads)."""
    return "\n".join([kernel.text, *(syntax.text(b) for b, _ in list(bodies(kernel, helpers))[1:])])


def launch_locals(body: Node, grid: list[str], block: list[str], size_names: list[str]) -> dict[str, str]:
    """Locals that copy a launch dimension the spec sizes by one name (`const int num_heads =
    gridDim.x;` with grid `[num_heads, …]`): that size."""
    out: dict[str, str] = {}
    for n in walk(body):
        value = n.child_by_field_name("value") if n.type == "init_declarator" else None
        target = n.child_by_field_name("declarator") if value is not None else None
        if value is None or target is None or target.type != "identifier" or value.type != "field_expression":
            continue
        obj, field = value.child_by_field_name("argument"), value.child_by_field_name("field")
        dims = {"gridDim": grid, "blockDim": block}.get(syntax.text(obj) if obj is not None else "")
        at = _DIMS.get(syntax.text(field) if field is not None else "")
        if dims is not None and at is not None and at < len(dims) and dims[at].strip() in size_names:
            out[syntax.text(target)] = dims[at].strip()
    return out


def _loop_bounded(body: Node, arrays: set[str]) -> set[str]:
    """Of `arrays` (the body's names for integer arrays), those a loaded value of which — directly
    or through the locals computed from it (`num_blocks = DIVIDE_ROUND_UP(seq_len, B)`, `end =
    MIN(start + n, num_blocks)`) — is a loop's condition."""
    from_array: dict[str, str] = {}   # local -> the array its value was computed from
    out: set[str] = set()

    def source_of(node: Node) -> str | None:
        for m in walk(node):
            if m.type == "subscript_expression" and (a := m.child_by_field_name("argument")) is not None \
                    and syntax.text(a) in arrays:
                return syntax.text(a)
            if m.type == "identifier" and syntax.text(m) in from_array:
                return from_array[syntax.text(m)]
        return None

    for n in walk(body):
        if n.type == "init_declarator" and (v := n.child_by_field_name("value")) is not None \
                and (t := n.child_by_field_name("declarator")) is not None and t.type == "identifier":
            if (src := source_of(v)) is not None:
                from_array[syntax.text(t)] = src
        elif n.type in ("for_statement", "while_statement") and (c := n.child_by_field_name("condition")) is not None:
            if (src := source_of(c)) is not None:
                out.add(src)
    return out


def length_arrays(kernel: Kernel, int_params: set[str], helpers: dict[str, Node] | None) -> set[str]:
    """The integer pointer parameters holding lengths: a value loaded from one bounds a loop of the
    kernel or of a helper it hands the array to. Segment boundaries (`indptr[i]`, `indptr[i + 1]`)
    are not lengths."""
    out: set[str] = set()
    for body, names in bodies(kernel, helpers):
        mine = {local for local, param in names.items() if param in int_params}
        out |= {names[a] for a in _loop_bounded(body, mine - boundary_arrays(body, mine))}
    return out


def length_bounds(kernel: Kernel, int_params: set[str], helpers: dict[str, Node] | None, shared: str | None,
                  launch: list[str], size_names: list[str]) -> dict[str, str]:
    """Each lengths array -> the size its values reach: the one size the launcher computes the
    dynamic shared memory from that neither the launch's grid and block nor the kernel's parameters
    carry (`max_seq_len`: `DIVIDE_ROUND_UP(max_seq_len, BLOCK_SIZE) * BLOCK_SIZE * sizeof(float)`
    bytes of logits). The kernel can learn of that size only through the data, so the lengths are
    what it bounds; with no such size (or several) nothing is said."""
    if not shared:
        return {}
    try:
        named = exprs.names(shared)
    except exprs.ExprError:
        return {}
    seen = set().union(*(_names(x) for x in launch)) | {p.name for p in kernel.params}
    only = sorted(n for n in named if n in size_names and n not in seen)
    if len(only) != 1:
        return {}
    return {p: only[0] for p in sorted(length_arrays(kernel, int_params, helpers))}


def _names(x: str) -> set[str]:
    try:
        return exprs.names(x)
    except exprs.ExprError:
        return set()


def length_init(name: str, bounds: dict[str, str], notes: list[str]) -> str:
    """The init a lengths array takes (`bounds[name]` its size), the note that says why added."""
    s = bounds[name]
    notes.append(f"`{name}` holds lengths (a value read from it bounds the kernel's loops), at most `{s}`, the size "
                 f"the launcher gives the dynamic shared memory room for: drawn from randint(1, {s} + 1) — CHECK")
    return f', init = "randint(1, {s} + 1)"'

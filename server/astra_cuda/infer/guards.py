"""Index arrays whose valid values the kernel states by returning early on the others (DeepSpeed's
ragged embedding: `TokenType t = input_ids[i]; if (t >= vocab_size || t < 0) return;`): the
program's own ids lie below that size, so they are drawn below it — drawn anywhere else, the
threads of every out-of-range id return and leave their rows of the output unwritten."""
from __future__ import annotations

from tree_sitter import Node

from ..model import access, source, syntax
from ..model.syntax import walk


def _bare(n: Node | None) -> Node | None:
    while n is not None and n.type in ("parenthesized_expression", "condition_clause") and n.named_child_count == 1:
        n = n.named_children[0]
    return n


def _returns(n: Node | None) -> bool:
    """A statement that only returns: `return;` or `{ return; }` (a comment aside)."""
    while n is not None and n.type == "compound_statement":
        kids = [c for c in n.named_children if c.type != "comment"]
        if len(kids) != 1:
            return False
        n = kids[0]
    return n is not None and n.type == "return_statement"


def _loaded_locals(body: Node, name: str) -> set[str]:
    """Locals declared with a value read out of `name` at an index (`const int t = ids[i];`)."""
    out: set[str] = set()
    for d in walk(body):
        if d.type != "init_declarator":
            continue
        decl, value = d.child_by_field_name("declarator"), _bare(d.child_by_field_name("value"))
        if decl is not None and decl.type == "identifier" and value is not None \
                and value.type == "subscript_expression":
            arr = _bare(value.child_by_field_name("argument"))
            if arr is not None and arr.type == "identifier" and syntax.text(arr) == name:
                out.add(syntax.text(decl))
    return out


def _upper(cond: Node | None, local: str, sizes: set[str]) -> str | None:
    """S where `cond` is `local >= S` or `S <= local`, alone or one side of an `||`."""
    cond = _bare(cond)
    if cond is None or cond.type != "binary_expression":
        return None
    op = syntax.field(cond, "operator").type
    left, right = _bare(cond.child_by_field_name("left")), _bare(cond.child_by_field_name("right"))
    if op == "||":
        return _upper(left, local, sizes) or _upper(right, local, sizes)
    if left is None or right is None or left.type != "identifier" or right.type != "identifier":
        return None
    a, b = syntax.text(left), syntax.text(right)
    if op == ">=" and a == local and b in sizes:
        return b
    if op == "<=" and b == local and a in sizes:
        return a
    return None


def early_return_bound(kernel: source.Kernel, name: str, sizes: set[str]) -> str | None:
    """The size S below which the values of integer array `name` are valid, where the kernel
    returns on a loaded value at or above it (`if (t >= S || t < 0) return;`); None otherwise."""
    body = access.kernel_body(kernel)
    if body is None:
        return None
    loaded = _loaded_locals(body, name)
    for st in walk(body):
        if st.type != "if_statement" or st.child_by_field_name("alternative") is not None \
                or not _returns(st.child_by_field_name("consequence")):
            continue
        for local in loaded:
            bound = _upper(st.child_by_field_name("condition"), local, sizes)
            if bound is not None:
                return bound
    return None


def compared_strides(kernel: source.Kernel, strides: list[str], sizes: list[str]) -> list[tuple[str, str, int]]:
    """(stride, size, line) where the kernel's body tests a stride parameter for equality with a
    size (vLLM reshape_and_cache_flash: `is_contiguous_heads = (head_stride == head_size)`): the
    kernel itself names the value that makes its layout contiguous there. Probed as a free stride,
    it never equals the size, and the accesses of both branches — one that never reads the stride
    — are fitted as one layout (the heads strided by a whole row)."""
    body = access.kernel_body(kernel)
    out: list[tuple[str, str, int]] = []
    for n in walk(body) if body is not None else ():
        if n.type != "binary_expression" or syntax.field(n, "operator").type != "==":
            continue
        left, right = _bare(n.child_by_field_name("left")), _bare(n.child_by_field_name("right"))
        if left is None or right is None or left.type != "identifier" or right.type != "identifier":
            continue
        a, b = syntax.text(left), syntax.text(right)
        pair = (a, b) if a in strides and b in sizes else (b, a) if b in strides and a in sizes else None
        if pair is not None and pair[0] not in {s for s, _, _ in out}:
            out.append((*pair, kernel.span.start_line + n.start_point[0] + 1))
    return out


def _param_names(fn: Node) -> list[str]:
    """The parameter names of a function definition, in order ("" where one is unnamed)."""
    decl = fn.child_by_field_name("declarator")
    params = next((n for n in walk(decl) if n.type == "parameter_list"), None) if decl is not None else None
    out = []
    for p in params.named_children if params is not None else []:
        ids = [syntax.text(n) for n in walk(p) if n.type == "identifier"]
        out.append(ids[-1] if p.type != "comment" and ids else "")
    return out


def _maps_itself(body: Node, name: str) -> bool:
    """Whether `body` assigns a local a value of `name` read at that local (`e = map[e]`)."""
    for n in walk(body):
        if n.type != "assignment_expression" or syntax.field(n, "operator").type != "=":
            continue
        left, right = _bare(n.child_by_field_name("left")), _bare(n.child_by_field_name("right"))
        if left is None or left.type != "identifier" or right is None or right.type != "subscript_expression":
            continue
        arr, idx = _bare(right.child_by_field_name("argument")), right.child_by_field_name("indices")
        idx = _bare(next((c for c in idx.named_children if c.type != "comment"), None)) if idx is not None else None
        if arr is not None and arr.type == "identifier" and syntax.text(arr) == name and idx is not None \
                and idx.type == "identifier" and syntax.text(idx) == syntax.text(left):
            return True
    return False


def self_map(kernel: source.Kernel, name: str, helpers: dict[str, Node]) -> bool:
    """Whether the kernel replaces an index by the value integer array `name` holds at it
    (`expert_id = expert_map[expert_id]`, vLLM's moe_align_block_size, in the device helper it
    hands the array to; `helpers`: `access.helpers_of`'s): the array maps its own index range into itself, so its values are indices
    below its own length. Drawn elsewhere (small signed numbers), they index the shared counts out
    of range, and what is counted from them is written past the ends of the outputs."""
    body = access.kernel_body(kernel)
    if body is None:
        return False
    if _maps_itself(body, name):
        return True
    for call in (n for n in walk(body) if n.type == "call_expression"):
        fn, args = call.child_by_field_name("function"), call.child_by_field_name("arguments")
        while fn is not None and fn.type in ("qualified_identifier", "template_function"):   # `ns::f<T>`: f
            fn = fn.child_by_field_name("name")
        helper = helpers.get(syntax.text(fn)) if fn is not None else None
        if helper is None or args is None or helper.type != "function_definition":
            continue
        passed = [_bare(a) for a in args.named_children if a.type != "comment"]
        for arg, param in zip(passed, _param_names(helper)):   # the helper's name for the array
            if arg is not None and arg.type == "identifier" and syntax.text(arg) == name and param \
                    and _maps_itself(syntax.field(helper, "body"), param):
                return True
    return False
